"""torch.optim's less common optimisers on ``optimizers.Optimizer``: Adamax, NAdam, RAdam, Rprop,
ASGD and Adafactor (and ``SparseAdam`` and ``Muon``, which refuse by name: torchlean has no sparse
gradients and no bfloat16, which Muon's orthogonalisation computes in).

Each follows its torch module's single-tensor path (``torch/optim/adamax.py``, ``nadam.py``,
``radam.py``, ``rprop.py``, ``asgd.py``, ``_adafactor.py``): the same formulas with the same
floating-point operations in the same order where NumPy has them, so float64 trajectories agree
with torch's to rounding. As in ``optimizers``, each class gives its hyper-parameters (flat
floats and bools: torch's tuples such as ``etas`` are two of them, ``Optimizer.PAIRS``), checks
them in ``check_hyper``, and says how one parameter's state starts and updates.

Where torch keeps a per-parameter scalar as a 0-d tensor of its scalar dtype (NAdam's
``mu_product``, ASGD's ``eta`` and ``mu``: float32 unless the default dtype is float64), the state
here is a host 0-d array of ``get_default_dtype()``, so its rounding is torch's too. Rprop's
``step_size`` and ASGD's ``eta`` start from the group's rate at the parameter's first update, as
torch creates them then (a scheduler may have changed the rate since the optimiser was built).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.backend import namespace_of, to_host
from ..core.errors import UnsupportedArgumentError
from ..engine.dtypes import get_default_dtype
from .optimizers import Optimizer, OptimizerError, _checked, _flag, _torch_switches

__all__ = ["ASGD", "Adafactor", "Adamax", "Muon", "NAdam", "RAdam", "Rprop", "SparseAdam"]


def _lerp(state: Any, end: Any, weight: float) -> None:
    """``state.lerp_(end, weight)`` in place, with torch's two-sided formula (the form used
    depends on which side of 0.5 the weight lies)."""
    if weight < 0.5:
        state += weight * (end - state)
    else:
        state[...] = end - (end - state) * (1.0 - weight)


def _betas(name: str, betas: Any) -> tuple[Any, Any]:
    try:
        beta1, beta2 = betas
    except (TypeError, ValueError):
        raise OptimizerError(f"{name}: betas must be a pair of numbers, found {betas!r}") from None
    return beta1, beta2


def _check_adam_like(name: str, hyper: dict[str, Any]) -> dict[str, Any]:
    """torch's checks for the Adam family: lr, eps and weight_decay finite and >= 0, each beta
    in [0, 1); other numbers finite and >= 0; flags bools."""
    flags: dict[str, Any] = {key: _flag(name, key, hyper[key])
             for key in ("maximize", "decoupled_weight_decay") if key in hyper}
    numbers = {k: v for k, v in hyper.items() if k not in flags}
    out = _checked(name, numbers, nonneg=[k for k in numbers if k not in ("beta1", "beta2")])
    for key in ("beta1", "beta2"):
        if not 0.0 <= out[key] < 1.0:
            raise OptimizerError(f"{name}: {key} (betas[{key[-1] == '2':d}]) must be in [0, 1), "
                                 f"found {out[key]}")
    return {**out, **flags}


def _norm(xp: Any, a: Any) -> float:
    """The 2-norm of all of ``a`` as a host number (explicitly downloaded from a device)."""
    return float(to_host(xp.linalg.norm(a.reshape(-1))))


def _scalar_state(value: float) -> np.ndarray:
    """A host 0-d array of torch's scalar dtype (the default float dtype)."""
    return np.asarray(value, dtype=get_default_dtype())


class Adamax(Optimizer):
    """Adamax (torch.optim.Adamax): Adam with the infinity norm, ``u = max(beta2 u, |g| + eps)``
    (``eps`` inside the maximum), ``p -= lr / (1 - beta1^t) * m / u``."""

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        _torch_switches("Adamax", foreach=foreach, capturable=capturable,
                        differentiable=differentiable)
        beta1, beta2 = _betas("Adamax", betas)
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                                  "weight_decay": weight_decay, "maximize": maximize})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _check_adam_like("Adamax", hyper)

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        return {"exp_avg": xp.zeros_like(param.array), "exp_inf": xp.zeros_like(param.array)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.array
        xp = namespace_of(p)
        if h["maximize"]:
            grad = -grad
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        _lerp(exp_avg, grad, 1.0 - h["beta1"])
        exp_inf *= h["beta2"]
        norm = xp.abs(grad)
        norm += h["eps"]
        xp.maximum(exp_inf, norm, out=exp_inf)
        clr = h["lr"] / (1.0 - h["beta1"] ** float(state["step"]))
        # addcdiv_(exp_avg, exp_inf, value=-clr): torch scales the numerator first
        p += (-clr) * exp_avg / exp_inf


class NAdam(Optimizer):
    """NAdam (torch.optim.NAdam): Adam with Nesterov momentum whose coefficient
    ``mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay))`` warms up; the state keeps the running
    product of the ``mu_t`` (``mu_product``). ``decoupled_weight_decay`` decays the parameter
    (``p *= 1 - lr wd``, NAdamW) instead of adding ``wd p`` to the gradient."""

    HOST_STATE = Optimizer.HOST_STATE | {"mu_product"}

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        _torch_switches("NAdam", foreach=foreach, capturable=capturable,
                        differentiable=differentiable)
        beta1, beta2 = _betas("NAdam", betas)
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                                  "weight_decay": weight_decay, "momentum_decay": momentum_decay,
                                  "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _check_adam_like("NAdam", hyper)

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        return {"mu_product": _scalar_state(1.0), "exp_avg": xp.zeros_like(param.array),
                "exp_avg_sq": xp.zeros_like(param.array)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        lr, beta1, beta2, wd = h["lr"], h["beta1"], h["beta2"], h["weight_decay"]
        p = param.array
        xp = namespace_of(p)
        if h["maximize"]:
            grad = -grad
        step = float(state["step"])
        bias_correction2 = 1.0 - beta2 ** step
        if wd != 0.0:
            if h["decoupled_weight_decay"]:
                p *= 1.0 - lr * wd
            else:
                grad = grad + wd * p
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * h["momentum_decay"])))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * h["momentum_decay"])))
        mu_product = state["mu_product"]
        # torch multiplies its scalar-dtype tensor by mu in that dtype
        mu_product *= mu_product.dtype.type(mu)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        _lerp(exp_avg, grad, 1.0 - beta1)
        exp_avg_sq *= beta2
        exp_avg_sq += (1.0 - beta2) * grad * grad
        denom = xp.sqrt(exp_avg_sq / bias_correction2)
        product = float(mu_product)
        mu_product_next = product * mu_next
        denom += h["eps"]
        p += (-lr * (1.0 - mu) / (1.0 - product)) * grad / denom
        p += ((-lr * mu_next) / (1.0 - mu_product_next)) * exp_avg / denom


class RAdam(Optimizer):
    """RAdam (torch.optim.RAdam): Adam whose adaptive step is rectified by
    ``r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))`` once the
    approximated SMA length ``rho_t`` exceeds 5, and plain bias-corrected momentum before that.
    ``decoupled_weight_decay`` decays the parameter (``p *= 1 - lr wd``) instead of adding
    ``wd p`` to the gradient."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        _torch_switches("RAdam", foreach=foreach, capturable=capturable,
                        differentiable=differentiable)
        beta1, beta2 = _betas("RAdam", betas)
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                                  "weight_decay": weight_decay,
                                  "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _check_adam_like("RAdam", hyper)

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        return {"exp_avg": xp.zeros_like(param.array), "exp_avg_sq": xp.zeros_like(param.array)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        lr, beta1, beta2, wd = h["lr"], h["beta1"], h["beta2"], h["weight_decay"]
        p = param.array
        xp = namespace_of(p)
        if h["maximize"]:
            grad = -grad
        step = float(state["step"])
        if wd != 0.0:
            if h["decoupled_weight_decay"]:
                p *= 1.0 - lr * wd
            else:
                grad = grad + wd * p
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        _lerp(exp_avg, grad, 1.0 - beta1)
        exp_avg_sq *= beta2
        exp_avg_sq += (1.0 - beta2) * grad * grad
        bias_correction1 = 1.0 - beta1 ** step
        bias_correction2 = 1.0 - beta2 ** step
        corrected = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.0:  # the variance is tractable: rectified adaptive step
            adaptive = xp.sqrt(exp_avg_sq)
            adaptive += h["eps"]
            adaptive = (bias_correction2 ** 0.5) / adaptive
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            p -= corrected * lr * adaptive * rect
        else:  # too few steps: momentum SGD on the bias-corrected first moment
            p -= corrected * lr


class Rprop(Optimizer):
    """Rprop (torch.optim.Rprop): each entry has its own step size, multiplied by ``etaplus``
    while its gradient keeps its sign and by ``etaminus`` when the sign flips (clamped to
    ``step_sizes``); after a flip that entry's gradient counts as 0 (no move, no flip next
    time). The parameter moves by ``-sign(g) * step_size``; ``lr`` is the first step size."""

    PAIRS = {"etas": ("etaminus", "etaplus"), "step_sizes": ("step_size_min", "step_size_max")}

    def __init__(self, params: Any, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        _torch_switches("Rprop", foreach=foreach, capturable=capturable,
                        differentiable=differentiable)
        etaminus, etaplus = self.split_pair("etas", etas)
        smallest, largest = self.split_pair("step_sizes", step_sizes)
        super().__init__(params, {"lr": lr, "etaminus": etaminus, "etaplus": etaplus,
                                  "step_size_min": smallest, "step_size_max": largest,
                                  "maximize": maximize})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        out = _checked("Rprop", hyper, nonneg=("lr", "step_size_min", "step_size_max"))
        if not 0.0 < out["etaminus"] < 1.0 < out["etaplus"] < float("inf"):
            raise OptimizerError(f"Rprop: etas must satisfy 0 < etaminus < 1 < etaplus, found "
                                 f"({out['etaminus']}, {out['etaplus']})")
        if out["step_size_min"] > out["step_size_max"]:
            raise OptimizerError(f"Rprop: step_sizes must be (min, max) with min <= max, found "
                                 f"({out['step_size_min']}, {out['step_size_max']})")
        out["maximize"] = _flag("Rprop", "maximize", hyper["maximize"])
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        step_size = xp.zeros_like(param.array)
        step_size += self.hyper["lr"]
        return {"prev": xp.zeros_like(param.array), "step_size": step_size}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.array
        xp = namespace_of(p)
        if h["maximize"]:
            grad = -grad
        prev, step_size = state["prev"], state["step_size"]
        if int(state["step"]) == 1:  # torch makes the step sizes at the first update
            step_size[...] = h["lr"]
        sign = xp.sign(grad * prev)
        dt = p.dtype.type
        # torch writes etaplus / etaminus / 1 into the sign tensor (so they take its dtype); a
        # NaN sign matches none of the three and stays NaN
        factor = xp.where(sign > 0, dt(h["etaplus"]),
                          xp.where(sign < 0, dt(h["etaminus"]), xp.where(sign == 0, dt(1), sign)))
        step_size *= factor
        xp.clip(step_size, h["step_size_min"], h["step_size_max"], out=step_size)
        grad = xp.where(factor == dt(h["etaminus"]), dt(0), grad)
        p -= xp.sign(grad) * step_size
        prev[...] = grad


class ASGD(Optimizer):
    """Averaged SGD (torch.optim.ASGD): ``p *= 1 - lambd eta``, ``p -= eta g``; the average
    ``ax`` follows ``p`` with weight ``mu``; then ``eta = lr / (1 + lambd lr t)^alpha`` and
    ``mu = 1 / max(1, t - t0)`` (averaging starts after ``t0`` steps). ``eta`` and ``mu`` are
    per-parameter scalars in the state, as torch's."""

    HOST_STATE = Optimizer.HOST_STATE | {"eta", "mu"}

    def __init__(self, params: Any, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0.0, foreach: bool | None = None,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        _torch_switches("ASGD", foreach=foreach, capturable=capturable,
                        differentiable=differentiable)
        super().__init__(params, {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0,
                                  "weight_decay": weight_decay, "maximize": maximize})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        out = _checked("ASGD", hyper, nonneg=("lr", "weight_decay"))
        for key in ("lambd", "alpha", "t0"):
            if not math.isfinite(out[key]):
                raise OptimizerError(f"ASGD: {key} must be finite, found {out[key]}")
        out["maximize"] = _flag("ASGD", "maximize", hyper["maximize"])
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        return {"eta": _scalar_state(self.hyper["lr"]), "mu": _scalar_state(1.0),
                "ax": xp.zeros_like(param.array)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        lr, lambd = h["lr"], h["lambd"]
        p = param.array
        if h["maximize"]:
            grad = -grad
        eta, mu, ax = state["eta"], state["mu"], state["ax"]
        if int(state["step"]) == 1:  # torch makes eta from the group's rate at the first update
            eta.fill(lr)
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        eta_value = float(eta)
        p *= 1.0 - lambd * eta_value
        p += (-eta_value) * grad
        mu_value = float(mu)
        if mu_value != 1.0:
            ax += (p - ax) * mu_value
        else:
            ax[...] = p
        step = float(state["step"])
        eta.fill(lr / ((1 + lambd * lr * step) ** h["alpha"]))
        mu.fill(1 / max(1, step - h["t0"]))


class Adafactor(Optimizer):
    """Adafactor (torch.optim.Adafactor): the second moment of a matrix gradient is factored
    into row and column means (state ``row_var`` and ``col_var``; a vector or scalar keeps a full
    ``variance``), averaged with weight ``t^beta2_decay``; the step ``g / sqrt(v)`` is clipped to
    RMS ``d`` and scaled by ``max(eps2, RMS(p)) * min(lr, 1 / sqrt(t))``. ``eps=(eps1, eps2)``,
    ``eps1=None`` meaning the parameter dtype's machine epsilon (kept as NaN in the flat
    hyper-parameters); ``weight_decay`` is decoupled (``p *= 1 - lr wd``)."""

    PAIRS = {"eps": ("eps1", "eps2")}

    def __init__(self, params: Any, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple[float | None, float] = (None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False) -> None:
        _torch_switches("Adafactor", foreach=foreach)
        eps1, eps2 = self.split_pair("eps", eps)
        super().__init__(params, {"lr": lr, "beta2_decay": beta2_decay, "eps1": eps1,
                                  "eps2": eps2, "d": d, "weight_decay": weight_decay,
                                  "maximize": maximize})

    def pair_value(self, key: str, values: tuple[Any, Any]) -> tuple[Any, Any]:
        first, second = values
        return (None if math.isnan(first) else first, second)

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        eps1 = hyper["eps1"]
        nan = eps1 is None or isinstance(eps1, float | np.floating) and math.isnan(eps1)
        out = _checked("Adafactor", {**hyper, "eps1": 0.0 if nan else eps1},
                       nonneg=("lr", "eps1", "eps2", "weight_decay"))
        if nan:
            out["eps1"] = math.nan
        if not -math.inf < out["beta2_decay"] <= 0.0:
            raise OptimizerError(f"Adafactor: beta2_decay must be finite and <= 0, found "
                                 f"{out['beta2_decay']}")
        if not 1.0 <= out["d"] < math.inf:
            raise OptimizerError(f"Adafactor: d (the clipping threshold) must be finite and "
                                 f">= 1, found {out['d']}")
        out["maximize"] = _flag("Adafactor", "maximize", hyper["maximize"])
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        p = param.array
        xp = namespace_of(p)
        if p.ndim > 1:
            rows, cols = list(p.shape), list(p.shape)
            rows[-1] = 1
            cols[-2] = 1
            return {"row_var": xp.zeros(tuple(rows), dtype=p.dtype),
                    "col_var": xp.zeros(tuple(cols), dtype=p.dtype)}
        return {"variance": xp.zeros_like(p)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        lr = h["lr"]
        p = param.array
        xp = namespace_of(p)
        if h["maximize"]:
            grad = -grad
        eps1 = float(np.finfo(p.dtype).eps) if math.isnan(h["eps1"]) else h["eps1"]
        step = float(state["step"])
        one_minus_beta2_t = step ** h["beta2_decay"]
        rho_t = min(lr, 1 / (step ** 0.5))
        # (torch reads both norms back with ``.item()``: on a device, one explicit download each)
        alpha = max(h["eps2"], _norm(xp, p) / (p.size ** 0.5)) * rho_t
        if h["weight_decay"] != 0.0:
            p *= 1.0 - lr * h["weight_decay"]
        if grad.ndim > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            # torch: norm(grad, dim).square_().div_(size): the mean of g^2 along that dim
            row_mean = xp.sqrt(xp.sum(grad * grad, axis=-1, keepdims=True))
            row_mean = row_mean * row_mean / grad.shape[-1]
            _lerp(row_var, row_mean, one_minus_beta2_t)
            col_mean = xp.sqrt(xp.sum(grad * grad, axis=-2, keepdims=True))
            col_mean = col_mean * col_mean / grad.shape[-2]
            _lerp(col_var, col_mean, one_minus_beta2_t)
            var_estimate = row_var @ col_var
            var_estimate /= xp.maximum(xp.mean(row_var, axis=-2, keepdims=True), eps1)
        else:
            variance = state["variance"]
            _lerp(variance, grad * grad, one_minus_beta2_t)
            var_estimate = variance.copy()
        update = 1 / xp.sqrt(xp.maximum(var_estimate, eps1 * eps1))
        update *= grad
        denom = max(1.0, _norm(xp, update) / ((update.size ** 0.5) * h["d"]))
        p += (-alpha / denom) * update


class SparseAdam(Optimizer):
    """torch.optim.SparseAdam updates only the entries a sparse gradient names; torchlean has
    no sparse tensors, so building one refuses (use ``Adam`` for dense gradients)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, maximize: bool = False) -> None:
        raise UnsupportedArgumentError(
            "SparseAdam: torchlean has no sparse gradients (nn.Embedding(sparse=True) is not "
            "supported), so SparseAdam cannot run; use Adam, which takes dense gradients")


class Muon(Optimizer):
    """torch.optim.Muon orthogonalises each matrix update by Newton-Schulz iterations computed
    in bfloat16; torchlean has no bfloat16, and in another dtype the updates would differ from
    torch's, so building one refuses."""

    def __init__(self, params: Any, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
                 eps: float = 1e-7, ns_steps: int = 5, adjust_lr_fn: str | None = None) -> None:
        raise UnsupportedArgumentError(
            "Muon: torch computes its Newton-Schulz orthogonalisation in bfloat16, which "
            "torchlean does not have (float32 and float64 only), so Muon cannot match it; use "
            "AdamW or SGD")
