"""Optimisers with torch.optim's update formulas: SGD, Adam and AdamW.

An optimiser holds a list of parameters (``Param`` objects, or anything with a ``parameters()``
method returning them) and updates each one's ``data`` in place from its ``grad``. The base class
walks the parameters and keeps the per-parameter state; each optimiser only says how one
parameter's state starts (``init_single``) and how one parameter updates (``apply_single``), as in
MLX's optimisers. The formulas, and the order of their floating-point operations, follow
``torch/optim/sgd.py`` and ``adam.py`` (single-tensor path), so float64 trajectories agree with
PyTorch's to rounding.

State lives next to the parameter (NumPy or CuPy, whatever ``param.data`` is) and is created
when the optimiser is built, so a fresh optimiser already has the full ``state_dict`` key set and
a checkpoint can be loaded into it. A parameter moved to a device after the optimiser was built
(``model.to("cuda")``, or ``fit`` on a device) takes its state along at the next ``step`` (one
explicit upload per state array, once). On a device every update runs there, in place on
``param.data`` (the same buffer every step, which a captured CUDA graph relies on) and on the
moment buffers: on CuPy as one fused ``ElementwiseKernel`` per parameter and step, elsewhere (NumPy,
the tests' stand-in device) through the array namespace, with the same formula and order of
float operations either way. Step counts and bias corrections stay on the host (plain numbers),
so a step never reads device data back.

``state_dict()`` is flat, ``dict[str, np.ndarray]`` (host copies: explicit downloads from a
device), ready for ``torchlean.checkpoint.save``:

- ``"step"``: the number of ``step()`` calls (0-d int64);
- ``"hyper.<name>"``: hyper-parameters (0-d float64, or 0-d bool for ``nesterov``);
- ``"state.<i>.<name>"``: state of parameter ``i`` (e.g. ``"state.3.exp_avg"``, and
  ``"state.3.step"``, the number of updates that parameter received, 0-d int64).

``load_state_dict`` restores all of these, hyper-parameters included (as torch does), so training
resumes bit-identically; set ``opt.lr`` afterwards to change the learning rate. Parameter groups
are not supported: build one optimiser per group instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .checkpoint import describe_mismatches
from .core.backend import is_cupy, namespace_of, numeric_array, to_device, to_host
from .core.errors import ShapeError, TorchLeanError
from .engine.params import Param

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "OptimizerError"]


class OptimizerError(TorchLeanError):
    """Bad hyper-parameters, parameter lists or optimiser state."""


def _collect_params(params: Any, owner: str) -> list[Any]:
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    if hasattr(params, "data") and hasattr(params, "grad"):
        raise OptimizerError(f"{owner}: params must be an iterable of Param objects, "
                             f"found a single {type(params).__name__} (wrap it in a list)")
    if isinstance(params, Mapping) or not isinstance(params, Iterable):
        raise OptimizerError(f"{owner}: params must be an iterable of Param objects, "
                             f"found {type(params).__name__}")
    out = list(params)
    if not out:
        raise OptimizerError(f"{owner}: got an empty parameter list")
    seen: set[int] = set()
    for i, p in enumerate(out):
        if not (hasattr(p, "data") and hasattr(p, "grad")):
            raise OptimizerError(f"{owner}: parameter {i} is a {type(p).__name__}, expected a "
                                 "Param (an object with .data and .grad)")
        if id(p) in seen:
            raise OptimizerError(f"{owner}: parameter {i} ({_label(p, i)}) appears more than once")
        seen.add(id(p))
    return out


def _label(param: Any, index: int) -> str:
    name = getattr(param, "name", None)
    return repr(name) if name else f"#{index}"


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        if not (isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "fiu"):
            raise OptimizerError(f"{owner}: {name} must be a real number, found {value!r}")
    return float(value)


class Optimizer:
    """Walks the parameters, keeps per-parameter state, and counts steps.

    Subclasses set ``self.hyper`` (a flat dict of floats and bools) through ``_set_hyper`` and
    implement ``init_single`` and ``apply_single``.
    """

    def __init__(self, params: Any, hyper: dict[str, Any]) -> None:
        name = type(self).__name__
        self.params: list[Any] = _collect_params(params, name)
        self.hyper: dict[str, Any] = {}
        self._set_hyper(hyper)
        self.step_count = 0
        self.state: list[dict[str, Any]] = []
        for p in self.params:
            state = {"step": np.zeros((), dtype=np.int64)}
            state.update(self.init_single(p))
            self.state.append(state)
        # The namespace each parameter's state lives in (a step moves it to the parameter's).
        self._state_xp: list[Any] = [namespace_of(p.data) for p in self.params]
        self._fresh = [True] * len(self.params)  # state as init_single made it (no step, no load)

    # -- the two methods an optimiser implements ------------------------------------------------
    def init_single(self, param: Any) -> dict[str, Any]:
        """The initial state of one parameter (arrays in the parameter's namespace)."""
        raise NotImplementedError

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        """Update ``param.data`` in place from ``grad``; ``state["step"]`` is already counted."""
        raise NotImplementedError

    # -- hyper-parameters -----------------------------------------------------------------------
    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        """Validated, normalised hyper-parameters; raises ``OptimizerError``."""
        return dict(hyper)

    def _set_hyper(self, hyper: dict[str, Any]) -> None:
        self.hyper = self.check_hyper(hyper)

    @property
    def lr(self) -> float:
        return float(self.hyper["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        self._set_hyper({**self.hyper, "lr": value})

    # -- stepping -------------------------------------------------------------------------------
    def step(self, grads: Sequence[Any] | None = None) -> None:
        """One update of every parameter that requires grad and has a gradient.

        With ``grads=None`` each parameter's ``.grad`` is used; otherwise ``grads`` is a list
        aligned with the parameters (``None`` entries are skipped). Every gradient is checked
        before any parameter changes.
        """
        name = type(self).__name__
        if grads is None:
            grad_list = [p.grad for p in self.params]
        else:
            if isinstance(grads, Mapping) or not isinstance(grads, Iterable):
                raise ShapeError(f"{name}.step: grads must be a list aligned with the parameters, "
                                 f"found {type(grads).__name__}")
            grad_list = list(grads)
            if len(grad_list) != len(self.params):
                raise ShapeError(f"{name}.step: got {len(grad_list)} gradients for "
                                 f"{len(self.params)} parameters")
        work = []
        for i, (p, g) in enumerate(zip(self.params, grad_list, strict=True)):
            if g is None or not getattr(p, "requires_grad", True):
                continue
            data = p.data
            xp = namespace_of(data)
            label = f"{name}.step: gradient of parameter {_label(p, i)}"
            gxp = namespace_of(g)
            if gxp is xp or gxp is np:  # host data given for a device parameter: one upload
                g = numeric_array(label, g, xp) if gxp is xp else to_device(
                    numeric_array(label, g), xp)
            else:  # a device gradient for a host parameter (or another device): explicit move
                g = to_device(g, xp)
            if tuple(g.shape) != tuple(data.shape):
                raise ShapeError(f"{name}.step: gradient of parameter {_label(p, i)} has shape "
                                 f"{tuple(g.shape)}, the parameter has shape {tuple(data.shape)}")
            if g.dtype.kind != "f":
                raise ShapeError(f"{name}.step: gradient of parameter {_label(p, i)} has dtype "
                                 f"{g.dtype}, expected a float dtype")
            if g.dtype != data.dtype:
                g = g.astype(data.dtype)
            work.append((p, g, self._state_on(i, xp)))
        for p, g, state in work:
            state["step"] += 1
            self.apply_single(p, g, state)
            if isinstance(p, Param):
                p.mark_updated()
        self.step_count += 1

    def _state_on(self, i: int, xp: Any) -> dict[str, Any]:
        """Parameter ``i``'s state with its arrays in namespace ``xp`` (moved there, once, when
        the parameter moved after the optimiser was built: made there afresh if no step has
        changed it yet, else uploaded); the step counter stays on the host.
        """
        state = self.state[i]
        if self._state_xp[i] is not xp:
            if self._fresh[i]:  # still the initial state: made afresh there, no upload
                state.update(self.init_single(self.params[i]))
            for key, value in state.items():
                if key != "step" and namespace_of(value) is not xp:
                    state[key] = to_device(value, xp)
            self._state_xp[i] = xp
        self._fresh[i] = False
        return state

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (``grad = None``, torch's ``set_to_none``)."""
        for p in self.params:
            p.grad = None

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """A flat copy of the whole optimiser state (host NumPy arrays); see the module doc."""
        out: dict[str, np.ndarray] = {"step": np.asarray(self.step_count, dtype=np.int64)}
        for key, value in self.hyper.items():
            dtype = np.bool_ if isinstance(value, bool) else np.float64
            out[f"hyper.{key}"] = np.asarray(value, dtype=dtype)
        for i, state in enumerate(self.state):
            for key, value in state.items():
                out[f"state.{i}.{key}"] = np.array(to_host(value), copy=True)
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()``: keys, shapes and dtypes must match exactly.

        Every mismatch is reported at once, and nothing changes unless all of it fits.
        """
        name = type(self).__name__
        expected = self.state_dict()
        found = {k: np.asarray(to_host(v)) for k, v in state_dict.items()}
        problems = describe_mismatches(expected, found)
        if problems:
            raise OptimizerError(f"{name}.load_state_dict: state does not fit this optimiser:\n  "
                                 + "\n  ".join(problems))
        hyper = {k: (bool(found[f"hyper.{k}"]) if isinstance(v, bool)
                     else float(found[f"hyper.{k}"])) for k, v in self.hyper.items()}
        new_hyper = self.check_hyper(hyper)
        steps = [found[f"state.{i}.step"] for i in range(len(self.state))]
        if int(found["step"]) < 0 or any(int(s) < 0 for s in steps):
            raise OptimizerError(f"{name}.load_state_dict: negative step counter")
        # Everything fits: now change state.
        self.hyper = new_hyper
        self.step_count = int(found["step"])
        for i, (p, state) in enumerate(zip(self.params, self.state, strict=True)):
            xp = namespace_of(p.data)
            for key, old in state.items():
                arr = found[f"state.{i}.{key}"]
                if key == "step":
                    state[key] = np.array(arr, copy=True)
                elif namespace_of(old) is xp:
                    old[...] = to_device(arr, xp)  # in place: the buffers stay the same
                else:  # the parameter moved since the state was made: one explicit upload
                    state[key] = to_device(np.array(arr, copy=True), xp)
            self._state_xp[i] = xp
            self._fresh[i] = False

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v}" for k, v in self.hyper.items())
        return f"{type(self).__name__}({len(self.params)} params, {hyper})"


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, weight decay and Nesterov.

    As torch.optim.SGD: ``g = grad + weight_decay * p``; with momentum the buffer starts as ``g``
    on a parameter's first update and is then ``buf = momentum * buf + (1 - dampening) * g``;
    the step is ``g + momentum * buf`` (Nesterov) or ``buf``; ``p -= lr * step``.
    """

    def __init__(self, params: Any, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("lr", "momentum", "dampening", "weight_decay"):
            value = _number("SGD", key, hyper[key])
            if not value >= 0.0 or value == float("inf"):
                raise OptimizerError(f"SGD: {key} must be finite and >= 0, found {value}")
            out[key] = value
        nesterov = hyper["nesterov"]
        if not isinstance(nesterov, bool | np.bool_):
            raise OptimizerError(f"SGD: nesterov must be a bool, found {nesterov!r}")
        out["nesterov"] = bool(nesterov)
        if out["nesterov"] and (out["momentum"] <= 0.0 or out["dampening"] != 0.0):
            raise OptimizerError("SGD: nesterov momentum requires momentum > 0 and dampening 0, "
                                 f"found momentum={out['momentum']}, "
                                 f"dampening={out['dampening']}")
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        if self.hyper["momentum"] == 0.0:
            return {}
        return {"momentum_buffer": namespace_of(param.data).zeros_like(param.data)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.data
        if is_cupy(namespace_of(p)):
            _sgd_fused(p, grad, state, h)
            return
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        if h["momentum"] != 0.0:
            buf = state["momentum_buffer"]
            if int(state["step"]) == 1:
                buf[...] = grad
            else:
                buf *= h["momentum"]
                buf += (1.0 - h["dampening"]) * grad
            grad = grad + h["momentum"] * buf if h["nesterov"] else buf
        p += (-h["lr"]) * grad


class Adam(Optimizer):
    """Adam with bias correction (torch.optim.Adam, ``amsgrad=False``).

    ``weight_decay`` is L2 regularisation added to the gradient (``g = grad + wd * p``); for
    decoupled decay use ``AdamW``.
    """

    decoupled = False

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        name = type(self).__name__
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise OptimizerError(f"{name}: betas must be a pair of numbers, "
                                 f"found {betas!r}") from None
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                                  "weight_decay": weight_decay})

    @property
    def betas(self) -> tuple[float, float]:
        return (self.hyper["beta1"], self.hyper["beta2"])

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        name = type(self).__name__
        out = {key: _number(name, key, hyper[key])
               for key in ("lr", "beta1", "beta2", "eps", "weight_decay")}
        for key in ("lr", "weight_decay"):
            if not 0.0 <= out[key] < float("inf"):
                raise OptimizerError(f"{name}: {key} must be finite and >= 0, found {out[key]}")
        for key in ("beta1", "beta2"):
            if not 0.0 <= out[key] < 1.0:
                raise OptimizerError(f"{name}: {key} must be in [0, 1), found {out[key]}")
        if not 0.0 < out["eps"] < float("inf"):
            raise OptimizerError(f"{name}: eps must be finite and > 0, found {out['eps']}")
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.data)
        return {"exp_avg": xp.zeros_like(param.data), "exp_avg_sq": xp.zeros_like(param.data)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        lr, beta1, beta2, eps, wd = h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]
        p = param.data
        xp = namespace_of(p)
        if is_cupy(xp):
            _adam_fused(p, grad, state, h, self.decoupled)
            return
        if wd != 0.0:
            if self.decoupled:
                p *= 1.0 - lr * wd
            else:
                grad = grad + wd * p
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        # exp_avg.lerp_(grad, 1 - beta1), with torch's two-sided lerp formula.
        weight = 1.0 - beta1
        if weight < 0.5:
            exp_avg += weight * (grad - exp_avg)
        else:
            exp_avg[...] = grad - (grad - exp_avg) * (1.0 - weight)
        exp_avg_sq *= beta2
        exp_avg_sq += (1.0 - beta2) * grad * grad
        step = float(state["step"])
        bias_correction1 = 1.0 - beta1 ** step
        bias_correction2 = 1.0 - beta2 ** step
        step_size = lr / bias_correction1
        denom = xp.sqrt(exp_avg_sq) / bias_correction2 ** 0.5
        denom += eps
        p += (-step_size) * (exp_avg / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW): ``p *= 1 - lr * wd`` first."""

    decoupled = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


# ---------------------------------------------------------------------------------------------
# Fused CuPy kernels: one launch per parameter and step instead of one per array operation.
# Each is the xp formula above line by line: the same operations in the same order, the
# host-computed scalars rounded to the parameter's dtype exactly as NumPy rounds a Python float
# mixed with a float32 array, and ``--fmad=false`` so that NVRTC does not contract a * b + c into
# one fused multiply-add (which rounds once, where NumPy rounds twice). Built on first use and
# cached (CuPy compiles once per dtype and device). Not exercised without a GPU: the test suite
# runs the xp formulas on its stand-in device.

_KERNELS: dict[str, Any] = {}
_NO_FMA = ("--fmad=false",)

_SGD_PLAIN = """
T d = g;
if (has_wd) d = d + wd * p;
p = p + neg_lr * d;
"""

_SGD_MOMENTUM = """
T d = g;
if (has_wd) d = d + wd * p;
if (first) {
    buf = d;
} else {
    buf = buf * momentum;
    buf = buf + damp1 * d;
}
d = nesterov ? d + momentum * buf : buf;
p = p + neg_lr * d;
"""

_ADAM = """
T d = g;
if (wd_mode == 2) p = p * decay;
else if (wd_mode == 1) d = d + wd * p;
if (low) m = m + w1 * (d - m);
else m = d - (d - m) * one_minus_w1;
v = v * beta2;
v = v + c2 * d * d;
T denom = sqrt(v) / bc2_sqrt;
denom = denom + eps;
p = p + neg_step * (m / denom);
"""


def _kernel(name: str) -> Any:
    kernel = _KERNELS.get(name)
    if kernel is None:
        import cupy  # type: ignore[import-not-found]

        if name == "sgd":
            kernel = cupy.ElementwiseKernel(
                "T g, T wd, T neg_lr, int32 has_wd", "T p", _SGD_PLAIN,
                "torchlean_sgd", options=_NO_FMA)
        elif name == "sgd_momentum":
            kernel = cupy.ElementwiseKernel(
                "T g, T wd, T neg_lr, T momentum, T damp1, int32 has_wd, int32 first, "
                "int32 nesterov", "T p, T buf", _SGD_MOMENTUM, "torchlean_sgd_momentum",
                options=_NO_FMA)
        else:
            kernel = cupy.ElementwiseKernel(
                "T g, T decay, T wd, T w1, T one_minus_w1, T beta2, T c2, T bc2_sqrt, T eps, "
                "T neg_step, int32 wd_mode, int32 low", "T p, T m, T v", _ADAM, "torchlean_adam",
                options=_NO_FMA)
        _KERNELS[name] = kernel
    return kernel


def _sgd_fused(p: Any, grad: Any, state: dict[str, Any], h: dict[str, Any]) -> None:
    """``SGD.apply_single`` on CuPy as one kernel (``p`` and the buffer updated in place)."""
    dt = p.dtype.type
    wd, has_wd, neg_lr = dt(h["weight_decay"]), int(h["weight_decay"] != 0.0), dt(-h["lr"])
    if h["momentum"] == 0.0:
        _kernel("sgd")(grad, wd, neg_lr, has_wd, p)
        return
    _kernel("sgd_momentum")(grad, wd, neg_lr, dt(h["momentum"]), dt(1.0 - h["dampening"]),
                            has_wd, int(int(state["step"]) == 1), int(h["nesterov"]), p,
                            state["momentum_buffer"])


def _adam_fused(p: Any, grad: Any, state: dict[str, Any], h: dict[str, Any],
                decoupled: bool) -> None:
    """``Adam.apply_single`` (and AdamW's) on CuPy as one kernel."""
    dt = p.dtype.type
    lr, beta1, beta2, eps, wd = h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]
    step = float(state["step"])
    weight = 1.0 - beta1
    wd_mode = 0 if wd == 0.0 else (2 if decoupled else 1)
    _kernel("adam")(grad, dt(1.0 - lr * wd), dt(wd), dt(weight), dt(1.0 - weight), dt(beta2),
                    dt(1.0 - beta2), dt((1.0 - beta2 ** step) ** 0.5), dt(eps),
                    dt(-(lr / (1.0 - beta1 ** step))), wd_mode, int(weight < 0.5), p,
                    state["exp_avg"], state["exp_avg_sq"])
