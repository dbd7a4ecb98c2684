"""More of torch's math for tensors: inverse trigonometric and hyperbolic functions, ``erf``,
``atan2``, ``logaddexp``, bitwise ops, ``cross``, ``cummax``, ``std_mean``, and
``torch.linalg``'s common solvers and norms.

Functions with a primitive or a composition of tensor methods are written that way (their
gradient is the primitives'). Those without one (``asin``, ``atan``, ``erfinv``, ``inv``,
``det``, ``solve``, ...) compute their value in NumPy and carry their first derivative as a
*tangent term*: ``y = value + D * (x - x.detach())`` with ``D`` the derivative at ``x`` held
constant, which is ``value`` exactly and has gradient ``D`` (first-order; a second derivative
through these is zero). Where the derivative is infinite (``asin`` at +-1) the gradient there is
0 rather than torch's inf. Decompositions (``svd``, ``qr``, ``eigh``) carry no gradient and
refuse an input that needs one.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from . import ops_interface as F
from .tensor import Tensor, _leaf, is_grad_enabled, stack, tensor


def _float(op: str, x: Any) -> Any:
    t = x if isinstance(x, Tensor) else tensor(x)
    if t.dtype.kind != "f":
        t = t.to(np.float32 if t.dtype.kind in "iub" else t.dtype)
    return t


def _tangent(x: Tensor, value: np.ndarray, deriv: np.ndarray) -> Any:
    """``value`` with gradient ``deriv`` (elementwise) with respect to ``x``."""
    out = _leaf(np.asarray(value, dtype=x.dtype))
    if not (x.requires_grad and is_grad_enabled()):
        return out
    d = np.where(np.isfinite(deriv), deriv, 0.0).astype(x.dtype)
    return out + (x - x.detach()) * _leaf(d)


def _elementwise(name: str, value: Callable[[np.ndarray], np.ndarray],
                 deriv: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], Tensor]:
    def method(self: Any) -> Any:
        x = _float(name, self)
        v = x.detach().numpy().astype(np.float64)
        with np.errstate(all="ignore"):
            return _tangent(x, value(v), deriv(v))

    method.__name__ = name
    method.__doc__ = f"torch's ``{name}`` (value in NumPy, first derivative carried)."
    return method


def _erfinv(y: np.ndarray) -> np.ndarray:
    # scipy is imported here only: `import torchlean` stays free of it.
    from scipy.special import erfinv

    return np.asarray(erfinv(y))


def _erf(v: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return np.asarray(erf(v))


_SQRT_PI = math.sqrt(math.pi)

ELEMENTWISE: dict[str, Callable[[Any], Tensor]] = {
    "asin": _elementwise("asin", np.arcsin, lambda v: 1.0 / np.sqrt(1.0 - v * v)),
    "acos": _elementwise("acos", np.arccos, lambda v: -1.0 / np.sqrt(1.0 - v * v)),
    "atan": _elementwise("atan", np.arctan, lambda v: 1.0 / (1.0 + v * v)),
    "asinh": _elementwise("asinh", np.arcsinh, lambda v: 1.0 / np.sqrt(v * v + 1.0)),
    "acosh": _elementwise("acosh", np.arccosh, lambda v: 1.0 / np.sqrt(v * v - 1.0)),
    "atanh": _elementwise("atanh", np.arctanh, lambda v: 1.0 / (1.0 - v * v)),
    "erfinv": _elementwise("erfinv", _erfinv,
                           lambda v: 0.5 * _SQRT_PI * np.exp(_erfinv(v) ** 2)),
    "lgamma": _elementwise("lgamma", np.vectorize(math.lgamma, otypes=[np.float64]),
                           lambda v: _digamma(v)),
}


def _digamma(v: np.ndarray) -> np.ndarray:
    from scipy.special import digamma

    return np.asarray(digamma(v))


def erf(self: Any) -> Any:
    """The error function (the ``erf`` primitive: its gradient is the primitive's)."""
    x = _float("erf", self)
    return F.apply("erf", x)


def erfc(self: Any) -> Any:
    return 1.0 - erf(self)


def atan2(self: Any, other: Any) -> Any:
    """``atan2(y, x)`` with gradients ``x / r^2`` and ``-y / r^2``."""
    y, x = _float("atan2", self), _float("atan2", other)
    yv, xv = np.broadcast_arrays(y.detach().numpy().astype(np.float64),
                                 x.detach().numpy().astype(np.float64))
    r2 = xv * xv + yv * yv
    out = _leaf(np.arctan2(yv, xv).astype(y.dtype))
    if not is_grad_enabled():
        return out
    with np.errstate(all="ignore"):
        dy, dx = np.where(r2 > 0, xv / r2, 0.0), np.where(r2 > 0, -yv / r2, 0.0)
    if y.requires_grad:
        out = out + (y - y.detach()) * _leaf(dy.astype(y.dtype))
    if x.requires_grad:
        out = out + (x - x.detach()) * _leaf(dx.astype(y.dtype))
    return out


def hypot(self: Any, other: Any) -> Any:
    return (self * self + other * other).sqrt()


def logaddexp(self: Any, other: Any) -> Any:
    m = self.detach().maximum(other.detach() if isinstance(other, Tensor) else tensor(other))
    return m + ((self - m).exp() + (other - m).exp()).log()


def logaddexp2(self: Any, other: Any) -> Any:
    ln2 = math.log(2.0)
    return logaddexp(self * ln2, other * ln2) / ln2


def xlogy(self: Any, other: Any) -> Any:
    """``x * log(y)``, 0 where ``x == 0`` (as torch)."""
    x = self if isinstance(self, Tensor) else tensor(self)
    zero = x == 0
    safe = other.masked_fill(zero, 1.0) if isinstance(other, Tensor) else other
    return (x * (safe.log() if isinstance(safe, Tensor) else math.log(safe))).masked_fill(
        zero, 0.0)


def logit(self: Any, eps: Any = None) -> Any:
    x = self if eps is None else self.clamp(eps, 1.0 - eps)
    return (x / (1.0 - x)).log()


def sinc(self: Any) -> Any:
    x = _float("sinc", self)
    zero = x == 0
    px = x.masked_fill(zero, 1.0) * math.pi
    return (px.sin() / px).masked_fill(zero, 1.0)


def deg2rad(self: Any) -> Any:
    return self * (math.pi / 180.0)


def rad2deg(self: Any) -> Any:
    return self * (180.0 / math.pi)


def nan_to_num(self: Any, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    info = np.finfo(self.dtype) if self.dtype.kind == "f" else None
    hi = posinf if posinf is not None else (info.max if info is not None else 0)
    lo = neginf if neginf is not None else (info.min if info is not None else 0)
    v = self.detach()
    out = self.masked_fill(v.isnan(), nan)
    out = out.masked_fill(v.isposinf(), float(hi))
    return out.masked_fill(v.isneginf(), float(lo))


def heaviside(self: Any, values: Any) -> Any:
    v = values if isinstance(values, Tensor) else tensor(values)
    pos = (self > 0).to(self.dtype)
    return pos + (self == 0).to(self.dtype) * v


def float_power(self: Any, exponent: Any) -> Any:
    return self.double().pow(exponent.double() if isinstance(exponent, Tensor) else exponent)


def _bitwise(name: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Tensor]:
    def method(self: Any, other: Any) -> Any:
        a = self.numpy() if isinstance(self, Tensor) else np.asarray(self)
        b = other.numpy() if isinstance(other, Tensor) else np.asarray(other)
        if a.dtype.kind not in "iub" or b.dtype.kind not in "iub":
            raise TorchLeanError(f"{name}: only integer and bool tensors are supported, found "
                                 f"{a.dtype} and {b.dtype}")
        return tensor(fn(a, b))

    method.__name__ = name
    return method


def bitwise_not(self: Any) -> Any:
    a = self.numpy()
    if a.dtype.kind not in "iub":
        raise TorchLeanError(f"bitwise_not: only integer and bool tensors are supported, found "
                             f"{a.dtype}")
    return tensor(np.invert(a))


def cross(self: Any, other: Any, dim: Any = None) -> Any:
    """The cross product of 3-vectors along ``dim`` (the first axis of size 3 if None)."""
    a, b = self, other
    if a.shape != b.shape:
        a, b = a.broadcast_to(np.broadcast_shapes(a.shape, b.shape)), b.broadcast_to(
            np.broadcast_shapes(a.shape, b.shape))
    if dim is None:
        dims = [i for i, s in enumerate(a.shape) if s == 3]
        if not dims:
            raise ShapeError(f"cross: no dimension of size 3 in input of shape {a.shape}")
        dim = dims[0]
    d = builtins.int(dim) % builtins.max(a.ndim, 1)
    if a.shape[d] != 3:
        raise ShapeError(f"cross: dimension {dim} does not have size 3, found {a.shape}")
    a0, a1, a2 = a.unbind(d)
    b0, b1, b2 = b.unbind(d)
    return stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


class _ValuesIndices(NamedTuple):
    values: Tensor
    indices: Tensor


def _cum_extreme(name: str, self: Any, dim: builtins.int, better: Callable[..., Any]
                 ) -> _ValuesIndices:
    v = self.detach().numpy()
    d = builtins.int(dim) % builtins.max(self.ndim, 1)
    moved = np.moveaxis(v, d, -1)
    idx = np.zeros(moved.shape, np.int64)
    best = moved[..., 0].copy()
    for i in range(1, moved.shape[-1]):
        take = better(moved[..., i], best) | np.isnan(moved[..., i])
        best = np.where(take, moved[..., i], best)
        idx[..., i] = np.where(take, i, idx[..., i - 1])
    indices = tensor(np.moveaxis(idx, -1, d))
    return _ValuesIndices(self.gather(d, indices), indices)


def cummax(self: Any, dim: builtins.int) -> _ValuesIndices:
    return _cum_extreme("cummax", self, dim, np.greater_equal)


def cummin(self: Any, dim: builtins.int) -> _ValuesIndices:
    return _cum_extreme("cummin", self, dim, np.less_equal)


def std_mean(self: Any, dim: Any = None, unbiased: bool = True, keepdim: bool = False,
             correction: Any = None) -> tuple[Tensor, Tensor]:
    kw = {} if correction is None else {"correction": correction}
    std = self.std(dim, unbiased, keepdim, **kw) if dim is not None else self.std(**kw) \
        if kw else self.std(unbiased=unbiased)
    return std, (self.mean(dim, keepdim=keepdim) if dim is not None else self.mean())


def var_mean(self: Any, dim: Any = None, unbiased: bool = True, keepdim: bool = False,
             correction: Any = None) -> tuple[Tensor, Tensor]:
    kw = {} if correction is None else {"correction": correction}
    var = self.var(dim, unbiased, keepdim, **kw) if dim is not None else self.var(**kw) \
        if kw else self.var(unbiased=unbiased)
    return var, (self.mean(dim, keepdim=keepdim) if dim is not None else self.mean())


def rot90(self: Any, k: builtins.int = 1, dims: Any = (0, 1)) -> Any:
    k = builtins.int(k) % 4
    d0, d1 = dims
    out = self
    for _ in range(k):
        out = out.flip(d1).transpose(d0, d1)
    return out


def nansum(self: Any, dim: Any = None, keepdim: bool = False) -> Any:
    clean = self.masked_fill(self.isnan(), 0.0)
    return clean.sum(dim, keepdim=keepdim) if dim is not None else clean.sum()


def nanmean(self: Any, dim: Any = None, keepdim: bool = False) -> Any:
    keep = ~self.isnan()
    total = nansum(self, dim, keepdim)
    count = keep.sum(dim, keepdim=keepdim) if dim is not None else keep.sum()
    return total / count.to(self.dtype)


def isin(self: Any, test_elements: Any) -> Any:
    a = self.numpy() if isinstance(self, Tensor) else np.asarray(self)
    b = test_elements.numpy() if isinstance(test_elements, Tensor) else np.asarray(
        test_elements)
    return tensor(np.isin(a, b))


def unfold(self: Any, dimension: builtins.int, size: builtins.int, step: builtins.int
           ) -> Any:
    """Every slice of ``size`` entries along ``dimension``, ``step`` apart, as a new last
    axis (torch's ``Tensor.unfold``)."""
    d = builtins.int(dimension) % builtins.max(self.ndim, 1)
    n = self.shape[d] if self.ndim else 1
    if size > n or step <= 0:
        raise ShapeError(f"unfold: size {size} (at most {n}) and step {step} (positive) do "
                         "not fit")
    starts = range(0, n - size + 1, step)
    pieces = [self.narrow(d, s, size).movedim(d, -1) for s in starts]
    return stack(pieces, d)


# --- torch.linalg -------------------------------------------------------------------------------

def _matrix(op: str, a: Any) -> Any:
    t = _float(op, a)
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise ShapeError(f"linalg.{op}: expected square matrices (..., n, n), found {t.shape}")
    return t


def _needs_grad(*ts: Any) -> bool:
    return is_grad_enabled() and builtins.any(isinstance(t, Tensor) and t.requires_grad
                                              for t in ts)


def inv(a: Any) -> Any:
    """The inverse, with gradient ``-A^-1 dA A^-1``."""
    t = _matrix("inv", a)
    value = np.linalg.inv(t.detach().numpy())
    c = _leaf(value)
    if not _needs_grad(t):
        return c
    return c - c @ (t - t.detach()) @ c


def det(a: Any) -> Any:
    """The determinant, with gradient ``det(A) A^-T``."""
    t = _matrix("det", a)
    av = t.detach().numpy()
    value = _leaf(np.asarray(np.linalg.det(av), t.dtype))
    if not _needs_grad(t):
        return value
    cof = value.numpy()[..., None, None] * np.swapaxes(np.linalg.inv(av), -1, -2)
    return value + ((t - t.detach()) * _leaf(cof.astype(t.dtype))).sum((-2, -1))


def slogdet(a: Any) -> tuple[Tensor, Tensor]:
    t = _matrix("slogdet", a)
    sign, logabs = np.linalg.slogdet(t.detach().numpy())
    out = _leaf(np.asarray(logabs, t.dtype))
    if _needs_grad(t):
        grad = np.swapaxes(np.linalg.inv(t.detach().numpy()), -1, -2)
        out = out + ((t - t.detach()) * _leaf(grad.astype(t.dtype))).sum((-2, -1))
    return tensor(np.asarray(sign, t.dtype)), out


def logdet(a: Any) -> Any:
    sign, logabs = slogdet(a)
    return logabs.masked_fill(sign <= 0, float("nan")).masked_fill(sign == 0, float("-inf"))


def solve(a: Any, b: Any) -> Any:
    """``X`` with ``A X = B``, with gradient ``A^-1 (dB - dA X)``."""
    ta, tb = _matrix("solve", a), _float("solve", b)
    av, bv = ta.detach().numpy(), tb.detach().numpy()
    vector = bv.ndim == av.ndim - 1
    x = np.linalg.solve(av, bv[..., None] if vector else bv)
    xs = _leaf(x)
    if _needs_grad(ta, tb):
        ainv = _leaf(np.linalg.inv(av))
        db = (tb - tb.detach())
        xs = xs + ainv @ ((db.unsqueeze(-1) if vector else db) - (ta - ta.detach()) @ xs)
    return xs.squeeze(-1) if vector else xs


def _no_grad_decomposition(op: str, t: Tensor) -> None:
    if _needs_grad(t):
        raise TorchLeanError(f"linalg.{op}: gradients through the decomposition are not "
                             "supported; call it on a tensor that does not require grad (or "
                             "under torch.no_grad())")


class SVD(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class LegacySVD(NamedTuple):
    U: Any
    S: Any
    V: Any


def svd(a: Any, full_matrices: bool = True) -> SVD:
    t = _float("svd", a)
    _no_grad_decomposition("svd", t)
    u, s, vh = np.linalg.svd(t.detach().numpy(), full_matrices=full_matrices)
    return SVD(tensor(u), tensor(s), tensor(vh))


def legacy_svd(a: Any, some: bool = True, compute_uv: bool = True) -> LegacySVD:
    """``torch.svd``: ``(U, S, V)`` (V, not its transpose), reduced when ``some``."""
    u, s, vh = svd(a, full_matrices=not some)
    return LegacySVD(u, s, vh.transpose(-2, -1))


class QR(NamedTuple):
    Q: Tensor
    R: Tensor


def qr(a: Any, mode: str = "reduced") -> QR:
    t = _float("qr", a)
    _no_grad_decomposition("qr", t)
    q, r = np.linalg.qr(t.detach().numpy(), mode="complete" if mode == "complete" else "reduced")
    return QR(tensor(q), tensor(r))


class Eigh(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def eigh(a: Any, UPLO: Any = "L") -> Eigh:  # noqa: N803  (torch's name)
    t = _matrix("eigh", a)
    _no_grad_decomposition("eigh", t)
    w, v = np.linalg.eigh(t.detach().numpy(), UPLO=UPLO)
    return Eigh(tensor(w), tensor(v))


def eigvalsh(a: Any, UPLO: Any = "L") -> Any:  # noqa: N803
    return eigh(a, UPLO).eigenvalues


def cholesky(a: Any, upper: bool = False) -> Any:
    t = _matrix("cholesky", a)
    _no_grad_decomposition("cholesky", t)
    low = np.linalg.cholesky(t.detach().numpy())
    return tensor(np.swapaxes(low, -1, -2) if upper else low)


def pinv(a: Any) -> Any:
    t = _float("pinv", a)
    _no_grad_decomposition("pinv", t)
    return tensor(np.linalg.pinv(t.detach().numpy()).astype(t.dtype))


def matrix_rank(a: Any) -> Any:
    return tensor(np.asarray(np.linalg.matrix_rank(_float("matrix_rank", a).detach().numpy())))


def vector_norm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False,  # noqa: A002
                dtype: Any = None) -> Any:
    t = _float("vector_norm", x)
    if dim is None:
        t, dim = t.reshape(-1), 0
    if ord == math.inf:
        return t.abs().amax(dim, keepdim=keepdim)
    if ord == -math.inf:
        return t.abs().amin(dim, keepdim=keepdim)
    if ord == 0:
        return (t != 0).to(t.dtype).sum(dim, keepdim=keepdim)
    if ord == 1:
        return t.abs().sum(dim, keepdim=keepdim)
    if ord == 2:
        return (t * t).sum(dim, keepdim=keepdim).sqrt()
    p = float(ord)
    return t.abs().pow(p).sum(dim, keepdim=keepdim).pow(1.0 / p)


def matrix_norm(x: Any, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False
                ) -> Any:
    t = _float("matrix_norm", x)
    if ord == "fro":
        return (t * t).sum(dim, keepdim=keepdim).sqrt()
    if ord in (1, -1, math.inf, -math.inf):
        d0, d1 = dim
        if ord in (math.inf, -math.inf):
            d0, d1 = d1, d0
        sums = t.abs().sum(d0, keepdim=True)
        out = sums.amax(d1, keepdim=True) if ord > 0 else sums.amin(d1, keepdim=True)
        if not keepdim:
            for d in sorted((d0 % t.ndim, d1 % t.ndim), reverse=True):
                out = out.squeeze(d)
        return out
    if ord == "nuc" or ord in (2, -2):
        _no_grad_decomposition("matrix_norm", t)
        s = np.linalg.svd(t.detach().numpy(), compute_uv=False)
        v = s.sum(-1) if ord == "nuc" else (s.max(-1) if ord == 2 else s.min(-1))
        return tensor(np.asarray(v, t.dtype))
    raise TorchLeanError(f"linalg.matrix_norm: unsupported ord {ord!r}")


def norm(x: Any, ord: Any = None, dim: Any = None, keepdim: bool = False,  # noqa: A002
         dtype: Any = None) -> Any:
    """``torch.linalg.norm``: the 2-norm of a vector / Frobenius of a matrix by default."""
    t = _float("norm", x)
    if ord is None:
        if dim is None:
            return vector_norm(t.reshape(-1), 2, 0, False)
        return vector_norm(t, 2, dim, keepdim)
    if (dim is not None and not isinstance(dim, int) and len(dim) == 2) or (
            dim is None and t.ndim == 2):
        return matrix_norm(t, ord, (-2, -1) if dim is None else dim, keepdim)
    return vector_norm(t, ord, dim, keepdim)


def matrix_power(a: Any, n: builtins.int) -> Any:
    t = _matrix("matrix_power", a)
    if n < 0:
        t, n = inv(t), -n
    out: Any = tensor(np.broadcast_to(np.eye(t.shape[-1], dtype=t.dtype), t.shape).copy())
    for _ in range(n):
        out = out @ t
    return out


def matrix_exp(a: Any) -> Any:
    t = _matrix("matrix_exp", a)
    _no_grad_decomposition("matrix_exp", t)
    from scipy.linalg import expm

    return tensor(np.asarray(expm(t.detach().numpy()), t.dtype))


METHODS: dict[str, Callable[..., Any]] = {
    **ELEMENTWISE, "arcsin": ELEMENTWISE["asin"], "arccos": ELEMENTWISE["acos"],
    "arctan": ELEMENTWISE["atan"], "arcsinh": ELEMENTWISE["asinh"],
    "arccosh": ELEMENTWISE["acosh"], "arctanh": ELEMENTWISE["atanh"], "erf": erf, "erfc": erfc,
    "atan2": atan2, "arctan2": atan2, "hypot": hypot, "logaddexp": logaddexp,
    "logaddexp2": logaddexp2, "xlogy": xlogy, "logit": logit, "sinc": sinc,
    "deg2rad": deg2rad, "rad2deg": rad2deg, "nan_to_num": nan_to_num, "heaviside": heaviside,
    "float_power": float_power, "bitwise_and": _bitwise("bitwise_and", np.bitwise_and),
    "bitwise_or": _bitwise("bitwise_or", np.bitwise_or),
    "bitwise_xor": _bitwise("bitwise_xor", np.bitwise_xor), "bitwise_not": bitwise_not,
    "cross": cross, "cummax": cummax, "cummin": cummin, "rot90": rot90, "nansum": nansum,
    "nanmean": nanmean, "isin": isin, "unfold": unfold, "inverse": inv, "det": det,
    "logdet": logdet, "slogdet": slogdet, "pinverse": pinv, "matrix_power": matrix_power,
    "matrix_exp": matrix_exp, "cholesky": cholesky,
}
