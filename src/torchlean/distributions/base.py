"""The ``Distribution`` base class and the helpers every distribution shares.

Parameters become tensors of one float dtype broadcast together (``broadcast_all``, torch's);
noise comes from the default generator that ``tl.manual_seed`` seeds (other numbers than torch's
stream, the same law); densities are tensor-op compositions so gradients reach the parameters.
Where torch differentiates through an op the tensor door lacks a gradient for (``digamma``,
``cholesky``, the Gamma sampler), a composition of differentiable ops stands in here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..core.rng import default_generator
from ..engine import torch_math
from ..engine.dtypes import get_default_dtype
from ..engine.tensor import Size, Tensor, no_grad, stack, tensor
from . import constraints

__all__ = ["Distribution", "DistributionValueError", "broadcast_all"]


class DistributionValueError(TorchLeanError):
    """A distribution's argument or value outside its constraint (torch's ``ValueError``)."""


def _float_dtype(values: tuple[Any, ...]) -> np.dtype:
    for v in values:
        if isinstance(v, Tensor) and v.dtype.kind == "f":
            return np.dtype(v.dtype)
    return np.dtype(get_default_dtype())


def as_param(value: Any, dtype: Any = None) -> Tensor:
    """``value`` as a tensor (numbers in ``dtype``, default the default float dtype)."""
    if isinstance(value, Tensor):
        return value
    try:
        return tensor(np.asarray(value, dtype=dtype or get_default_dtype()))
    except (TypeError, ValueError) as exc:
        raise TorchLeanError(f"distributions: expected a tensor or numbers, found "
                             f"{type(value).__name__}") from exc


def broadcast_all(*values: Any) -> tuple[Tensor, ...]:
    """The values as tensors of one float dtype, expanded to their common shape (torch's)."""
    dtype = _float_dtype(values)
    ts = [v if isinstance(v, Tensor) and v.dtype.kind == "f" else
          as_param(v.detach().numpy() if isinstance(v, Tensor) else v, dtype) for v in values]
    shape = tuple(np.broadcast_shapes(*(tuple(t.shape) for t in ts)))
    return tuple(t if tuple(t.shape) == shape else t.expand(*shape) for t in ts)


def sample_shape_of(sample_shape: Any) -> tuple[int, ...]:
    if isinstance(sample_shape, int | np.integer):
        return (int(sample_shape),)
    return tuple(int(s) for s in sample_shape)


def sum_rightmost(value: Tensor, dim: int) -> Tensor:
    return value.reshape(*value.shape[:value.ndim - dim], -1).sum(-1) if dim > 0 else value


def uniform(shape: tuple[int, ...], dtype: Any) -> Tensor:
    """U[0, 1) noise from the default generator, in ``dtype``."""
    return tensor(np.asarray(default_generator.uniform(shape), np.float64).astype(dtype))


def uniform_open(shape: tuple[int, ...], dtype: Any) -> Tensor:
    """U(0, 1) noise kept off 0 and 1 in ``dtype`` (torch's ``clamp_probs``), for logs."""
    fi = np.finfo(dtype)
    u = np.asarray(default_generator.uniform(shape), np.float64).astype(dtype)
    return tensor(np.clip(u, fi.tiny, 1 - fi.eps))


def normal(shape: tuple[int, ...], dtype: Any) -> Tensor:
    return tensor(np.asarray(default_generator.normal(shape), np.float64).astype(dtype))


def clamp_probs(p: Tensor) -> Tensor:
    eps = float(np.finfo(p.dtype).eps)
    return p.clamp(eps, 1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    ps = clamp_probs(probs)
    return ps.log() - (-ps).log1p() if is_binary else ps.log()


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    return logits.sigmoid() if is_binary else logits.softmax(-1)


def softplus(x: Tensor) -> Tensor:
    # relu written as (x + |x|) / 2 so the gradient at 0 is sigmoid(0) = 1/2, as torch's
    return 0.5 * (x + x.abs()) + (-x.abs()).exp().log1p()  # type: ignore[no-any-return]


def digamma(x: Tensor) -> Tensor:
    """psi(x) for x > 0 as differentiable ops (the door's ``digamma`` has values only): the
    recurrence psi(x) = psi(x + 8) - sum 1/(x + k) and the asymptotic series at x + 8."""
    acc = x * 0
    for k in range(8):
        acc = acc + 1 / (x + k)
    y = x + 8
    inv2 = 1 / (y * y)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240
                                                                          - inv2 / 132))))
    return y.log() - 0.5 / y - series - acc  # type: ignore[no-any-return]


def masked_fill(x: Tensor, mask: Tensor, value: float) -> Tensor:
    """``x.masked_fill(mask, value)`` with ``x`` broadcast to the mask's shape too (the door's
    masked_fill broadcasts only the mask)."""
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(mask.shape)))
    x = x if tuple(x.shape) == shape else x.expand(*shape)
    return x.masked_fill(mask, value)  # type: ignore[no-any-return]


def xlogy(x: Tensor, y: Tensor) -> Tensor:
    """``x * log(y)`` with 0 where x == 0, the two broadcast first (the door's ``xlogy``
    fails when ``y`` is the smaller operand)."""
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    x = x if tuple(x.shape) == shape else x.expand(*shape)
    y = y if tuple(y.shape) == shape else y.expand(*shape)
    return x.xlogy(y)  # type: ignore[no-any-return]


def lbeta(a: Tensor, b: Tensor) -> Tensor:
    return a.lgamma() + b.lgamma() - (a + b).lgamma()  # type: ignore[no-any-return]


def cholesky(a: Tensor) -> Tensor:
    """Lower Cholesky factor; when ``a`` needs a gradient, column by column as differentiable
    ops (the door's ``cholesky`` has no backward), which torch differentiates exactly too."""
    if not a.requires_grad:
        return tensor(torch_math.cholesky(a).numpy().astype(a.dtype))
    a = (a + a.mT) / 2  # torch's backward is symmetric: both triangles share the gradient
    n = a.shape[-1]
    rows = tensor(np.arange(n))
    cols: list[Tensor] = []
    for j in range(n):
        s = a.select(-1, j)
        for k in range(j):
            s = s - cols[k] * cols[k].select(-1, j).unsqueeze(-1)
        d = s.select(-1, j).unsqueeze(-1).sqrt()
        cols.append((s / d) * (rows >= j).to(a.dtype))
    return stack(cols, dim=-1)


def solve(a: Tensor, b: Tensor) -> Tensor:
    """``A^-1 b`` for matrices ``a`` (..., n, n) and vectors ``b`` (..., n), broadcast."""
    batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-1])))
    n = a.shape[-1]
    x = torch_math.solve(a.expand(*batch, n, n), b.expand(*batch, n).unsqueeze(-1))
    return x.squeeze(-1)  # type: ignore[no-any-return]


def solve_tril(low: Tensor, b: Tensor) -> Tensor:
    """``L^-1 b`` reading only the lower triangle of ``low`` (torch's ``solve_triangular``:
    the upper triangle gets no gradient)."""
    return solve(low.tril(), b)


class Distribution:
    """torch's base class: shapes, validation, ``sample`` as ``rsample`` without gradient."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = True
    arg_constraints: dict[str, constraints.Constraint] = {}
    support: Any = None

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        Distribution._validate_args = bool(value)

    def __init__(self, batch_shape: Any = (), event_shape: Any = (),
                 validate_args: Any = None) -> None:
        self._batch_shape = Size(tuple(batch_shape))
        self._event_shape = Size(tuple(event_shape))
        if validate_args is not None:
            self._validate_args = bool(validate_args)
        if not self._validate_args:
            return
        for name, constraint in self.arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue
            if name not in self.__dict__ and name in getattr(self, "_lazy", ()):
                continue  # the derived form of probs/logits: torch skips it too
            value = getattr(self, name)
            ok = constraint.ok(np.asarray(value.detach().numpy() if isinstance(value, Tensor)
                                          else value))
            if not np.all(ok):
                raise DistributionValueError(
                    f"{type(self).__name__}: argument {name} must satisfy the constraint "
                    f"{constraint}, found invalid values {_bad(value, ok)}")

    @property
    def batch_shape(self) -> Size:
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        return self._event_shape

    def _extended_shape(self, sample_shape: Any = ()) -> tuple[int, ...]:
        return sample_shape_of(sample_shape) + tuple(self._batch_shape) + tuple(
            self._event_shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._dtype)  # type: ignore[attr-defined]

    def _value(self, value: Any) -> Tensor:
        """``value`` as a tensor, checked against the support when validating."""
        v = value if isinstance(value, Tensor) else as_param(value, self.dtype)
        if self._validate_args:
            self._validate_sample(v)
        return v

    def _validate_sample(self, value: Tensor) -> None:
        event = tuple(self._event_shape)
        if event and tuple(value.shape[value.ndim - len(event):]) != event:
            raise DistributionValueError(
                f"{type(self).__name__}: value's trailing shape must be the event shape "
                f"{event}, found shape {tuple(value.shape)}")
        try:
            np.broadcast_shapes(tuple(value.shape), tuple(self._batch_shape) + event)
        except ValueError as exc:
            raise DistributionValueError(
                f"{type(self).__name__}: value of shape {tuple(value.shape)} does not "
                f"broadcast with batch_shape + event_shape "
                f"{tuple(self._batch_shape) + event}") from exc
        support = self.support
        if support is None or constraints.is_dependent(support):
            return
        ok = support.ok(value.detach().numpy())
        if not np.all(ok):
            raise DistributionValueError(
                f"{type(self).__name__}: value must be within the support {support}, found "
                f"invalid values {_bad(value, ok)}")

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        """The same law broadcast to ``batch_shape``: each parameter expanded."""
        shape = tuple(int(s) for s in batch_shape)
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        extra = len(shape) - len(self._batch_shape)
        for name, value in self.__dict__.items():
            if isinstance(value, Tensor) and name not in getattr(self, "_unexpanded", ()):
                tail = tuple(value.shape[len(self._batch_shape):]) if value.ndim >= len(
                    self._batch_shape) else ()
                if value.ndim == len(self._batch_shape) + len(tail) and extra >= 0:
                    new.__dict__[name] = value.expand(*shape, *tail)
        new._batch_shape = Size(shape)
        return new

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def sample_n(self, n: int) -> Tensor:
        return self.sample((n,))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no rsample")

    def log_prob(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.log_prob")

    def cdf(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.cdf")

    def icdf(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.icdf")

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.entropy")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.enumerate_support")

    def perplexity(self) -> Tensor:
        return self.entropy().exp()  # type: ignore[no-any-return]

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.mean")

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.variance")

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(f"{k}: {_short(self.__dict__[k])}" for k in names)
        return f"{type(self).__name__}({args})"


def _short(value: Any) -> str:
    if isinstance(value, Tensor) and value.numel() > 1:
        return f"torch.Size({list(value.shape)})"
    return repr(value)


def _bad(value: Any, ok: Any) -> str:
    v = np.asarray(value.detach().numpy() if isinstance(value, Tensor) else value)
    okb = np.broadcast_to(np.asarray(ok), v.shape[:np.asarray(ok).ndim]) if v.ndim else ok
    bad = v[~np.asarray(okb, bool)] if v.ndim else v
    return np.array2string(np.asarray(bad).ravel()[:6], precision=4)


# --- Gamma sampling: Marsaglia-Tsang on the default generator, implicit reparameterisation ---

def gammainc_np(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Regularised lower incomplete gamma P(a, x) (scipy's when installed)."""
    try:
        from scipy.special import gammainc
        return np.asarray(gammainc(a, x))
    except ImportError:
        pass
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    lg = np.vectorize(math.lgamma)(a) if a.size else a
    with np.errstate(all="ignore"):
        pre = np.exp(a * np.log(np.maximum(x, 1e-300)) - x - lg)
        term = 1 / a
        total = term.copy()
        for n in range(1, 400):  # series, for x < a + 1
            term = term * x / (a + n)
            total = total + term
        series = pre * total
        b, c, d = x + 1 - a, np.full_like(x, 1e300), 1 / (x + 1 - a)
        h = d.copy()
        for i in range(1, 400):  # Lentz continued fraction for Q, for x >= a + 1
            an = -i * (i - a)
            b = b + 2
            d = an * d + b
            d = np.where(np.abs(d) < 1e-300, 1e-300, d)
            c = b + an / c
            c = np.where(np.abs(c) < 1e-300, 1e-300, c)
            d = 1 / d
            h = h * d * c
        cf = 1 - pre * h
    return np.where(x <= 0, 0.0, np.where(x < a + 1, series, cf))


def standard_gamma_np(alpha: np.ndarray) -> np.ndarray:
    """Gamma(alpha, 1) draws (float64) by Marsaglia-Tsang rejection on the default generator;
    alpha < 1 through Gamma(alpha + 1) * U^(1/alpha)."""
    alpha = np.asarray(alpha, np.float64)
    boost = alpha < 1
    a: np.ndarray = np.where(boost, alpha + 1, alpha).ravel()
    d = a - 1 / 3
    c = 1 / np.sqrt(9 * d)
    out: np.ndarray = np.zeros_like(a)
    todo = np.arange(a.size)
    while todo.size:
        z = np.asarray(default_generator.normal((todo.size,)), np.float64)
        u = np.asarray(default_generator.uniform((todo.size,)), np.float64)
        v = (1 + c[todo] * z) ** 3
        with np.errstate(invalid="ignore", divide="ignore"):
            accept = (v > 0) & (np.log1p(-u) < 0.5 * z * z + d[todo] - d[todo] * v
                                + d[todo] * np.log(np.where(v > 0, v, 1)))
        out[todo[accept]] = (d[todo] * v)[accept]
        todo = todo[~accept]
    out = np.asarray(out.reshape(alpha.shape))
    if boost.any():
        u = np.asarray(default_generator.uniform(alpha.shape), np.float64)
        with np.errstate(divide="ignore"):
            out = np.where(boost, out * np.exp(np.log1p(-u) / np.where(boost, alpha, 1)), out)
    return out


def standard_gamma(alpha: Tensor) -> Tensor:
    """Gamma(alpha, 1) draws with torch's implicit reparameterisation gradient
    dx/dalpha = -(dP(alpha, x)/dalpha) / p(x; alpha), attached as ``g * (alpha - alpha)``."""
    al = alpha.detach().numpy().astype(np.float64)
    x = np.maximum(standard_gamma_np(al), float(np.finfo(alpha.dtype).tiny))
    if not alpha.requires_grad:
        return tensor(x.astype(alpha.dtype))
    h = 1e-5 * np.maximum(al, 1e-3)
    dp = (gammainc_np(al + h, x) - gammainc_np(al - h, x)) / (2 * h)
    lg = np.vectorize(math.lgamma)(al) if al.size else al
    pdf = np.exp((al - 1) * np.log(x) - x - lg)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(pdf > 0, -dp / pdf, 0.0)
    g = np.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
    return tensor(x.astype(alpha.dtype)) + tensor(g.astype(alpha.dtype)) * (alpha - alpha.detach())
