"""torch's order statistics, scatter/index forms and small math names that tensors lacked.

``quantile``/``nanquantile``, ``mode``, ``nanmedian``, ``msort``, ``aminmax``, ``std_mean``/
``var_mean``, ``logcumsumexp``, ``combinations``, ``scatter_reduce``, ``index_add``/
``index_copy``/``index_fill`` (and their in-place forms), ``round(decimals=)``, ``copysign``,
``positive``, ``sgn``, ``conj``/``resolve_conj``, ``isreal``, ``ldexp``, ``gcd``/``lcm``,
``digamma``/``polygamma``, ``row_stack``, ``addr``, ``unique_consecutive``, ``can_cast``.

Each differentiable one is written with the tensor ops that already have gradients (sort,
gather, cumsum, scatter_add, ...), so its gradient is theirs and agrees with torch's; the ones
torch does not differentiate (``mode``'s indices, integer ops) are computed in NumPy without a
history. Function and method forms are both installed, as torch has them.
"""

from __future__ import annotations

import builtins
import itertools
from typing import Any, NamedTuple

import numpy as np

from ..core.errors import ShapeError, TorchLeanError, UnsupportedArgumentError
from .tensor import Tensor, cat, is_grad_enabled, tensor

__all__ = ["addr", "aminmax", "can_cast", "combinations", "copysign", "digamma", "gcd",
           "index_add", "index_copy", "index_fill", "isreal", "lcm", "ldexp", "logcumsumexp",
           "mode", "msort", "nanmedian", "nanquantile", "polygamma", "positive", "quantile",
           "resolve_conj", "row_stack", "scatter_reduce", "sgn", "std_mean", "unique_consecutive",
           "var_mean", "conj"]


def _t(op: str, x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray | list | tuple | builtins.int | builtins.float):
        return tensor(x)
    raise TorchLeanError(f"{op}: expected a Tensor, found {type(x).__name__}")


def _dim(op: str, x: Tensor, dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise TorchLeanError(f"{op}: dim must be an int, found {dim!r}")
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise ShapeError(f"{op}: dim {dim} out of range for a tensor with {x.dim()} dimensions")
    return int(dim) % nd


# ---------------------------------------------------------------------------------------------
# order statistics


class _ValuesIndices(NamedTuple):
    values: Tensor
    indices: Tensor


class _MinMax(NamedTuple):
    min: Tensor
    max: Tensor

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(op: str, input: Any, q: Any, dim: Any, keepdim: bool,  # noqa: A002
              interpolation: str, ignore_nan: bool) -> Tensor:
    x = _t(op, input)
    if x.dtype.kind != "f":
        raise TorchLeanError(f"{op}: input must be a float tensor, found dtype {x.dtype}")
    if interpolation not in _INTERPOLATIONS:
        raise TorchLeanError(f"{op}: interpolation must be one of {_INTERPOLATIONS}, found "
                             f"{interpolation!r}")
    scalar_q = not isinstance(q, Tensor) and np.ndim(q) == 0
    qs = np.atleast_1d(np.asarray(q.detach().numpy() if isinstance(q, Tensor) else q,
                                  dtype=np.float64))
    if qs.ndim != 1 or ((qs < 0) | (qs > 1) | np.isnan(qs)).any():
        raise TorchLeanError(f"{op}: q must be a scalar or 1-D tensor of values in [0, 1], found "
                             f"{q!r}")
    if x.numel() == 0:
        raise ShapeError(f"{op}: input tensor must be non-empty")
    if dim is None:
        rows, d = x.reshape(-1), 0
    else:
        d = _dim(op, x, dim)
        rows = x.movedim(d, -1) if x.dim() else x.reshape(1)
    ordered, _ = rows.sort(-1)  # NaN sorts last, as torch's
    n = ordered.shape[-1]
    nan = np.isnan(rows.detach().numpy())
    if ignore_nan:
        count = (~nan).sum(-1, keepdims=True).astype(np.float64)  # (..., 1)
    else:
        count = np.full(nan.shape[:-1] + (1,), float(n))
    ranks = qs * np.maximum(count - 1, 0)  # (..., Q)
    if interpolation == "lower":
        ranks = np.floor(ranks)
    elif interpolation == "higher":
        ranks = np.ceil(ranks)
    elif interpolation == "nearest":
        ranks = np.round(ranks)  # half to even, as torch's
    lo = np.floor(ranks).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(count.astype(np.int64) - 1, 0))
    weight = ranks - lo
    if interpolation == "midpoint":
        weight = np.where(ranks > lo, 0.5, 0.0)
    lo_v = ordered.gather(-1, tensor(np.clip(lo, 0, n - 1)))
    hi_v = ordered.gather(-1, tensor(np.clip(hi, 0, n - 1)))
    w = tensor(weight.astype(x.dtype))
    out = lo_v + (hi_v - lo_v) * w if interpolation in ("linear", "midpoint") else lo_v
    bad = (count == 0) if ignore_nan else nan.any(-1, keepdims=True)
    if bad.any():  # an all-NaN row (nanquantile) or any NaN (quantile) gives NaN, as torch's
        out = out.masked_fill(tensor(np.broadcast_to(bad, out.shape)), float("nan"))
    out = out.movedim(-1, 0)  # (Q, ...)
    if keepdim:
        if dim is None:
            out = out.reshape(len(qs), *([1] * x.dim()))
        else:
            out = out.unsqueeze(d + 1)
    return out[0] if scalar_q else out


def quantile(input: Any, q: Any, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
             interpolation: str = "linear", out: Any = None) -> Tensor:
    """The q-th quantiles along ``dim`` (all entries when None), torch's five interpolations;
    a leading axis per entry of a tensor ``q``. Differentiable (through sort and gather)."""
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


def nanquantile(input: Any, q: Any, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                interpolation: str = "linear", out: Any = None) -> Tensor:
    """``quantile`` ignoring NaNs (a row of NaNs only gives NaN)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


def nanmedian(input: Any, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A002
    """The lower median ignoring NaNs (``(values, indices)`` along a ``dim``)."""
    x = _t("nanmedian", input)
    if dim is None:
        flat = x.reshape(-1)
        ordered, idx = flat.sort(0)
        k = int((~np.isnan(flat.detach().numpy())).sum())
        return ordered[max(k - 1, 0) // 2]
    d = _dim("nanmedian", x, dim)
    rows = x.movedim(d, -1)
    ordered, idx = rows.sort(-1)
    k = (~np.isnan(rows.detach().numpy())).sum(-1, keepdims=True)
    pos = tensor(np.maximum(k - 1, 0) // 2)
    values, indices = ordered.gather(-1, pos), idx.gather(-1, pos)
    if not keepdim:
        values, indices = values.squeeze(-1), indices.squeeze(-1)
    else:
        values, indices = values.movedim(-1, d), indices.movedim(-1, d)
    return _ValuesIndices(values, indices)


def mode(input: Any, dim: int = -1, keepdim: bool = False) -> Any:  # noqa: A002
    """The most frequent value along ``dim`` (the smallest of tied ones) and the index of its
    last occurrence, as torch's; no gradient flows to the indices."""
    x = _t("mode", input)
    d = _dim("mode", x, dim)
    arr = np.moveaxis(np.atleast_1d(x.detach().numpy()), d, -1)
    flat = arr.reshape(-1, arr.shape[-1])
    values = np.empty(flat.shape[0], dtype=arr.dtype)
    indices = np.empty(flat.shape[0], dtype=np.int64)
    for r, row in enumerate(flat):
        uniq, counts = np.unique(row, return_counts=True)
        v = uniq[np.argmax(counts)]  # np.unique sorts: the first maximum is the smallest value
        values[r] = v
        indices[r] = np.flatnonzero(row == v)[-1]
    shape = arr.shape[:-1]
    idx = tensor(indices.reshape(shape))
    if x.dim() == 0:
        idx = idx.reshape(())
    # the values through a gather, so they carry x's history as torch's do
    rows = x.movedim(d, -1) if x.dim() else x.reshape(1)
    vals = rows.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    if keepdim and x.dim():
        vals, idx = vals.unsqueeze(d), idx.unsqueeze(d)
    return _ValuesIndices(vals, idx)


def msort(input: Any) -> Tensor:  # noqa: A002
    """Sorted along the first dimension."""
    return _t("msort", input).sort(0)[0]  # type: ignore[no-any-return]


def aminmax(input: Any, *, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A002
    """``(min, max)`` in one call."""
    x = _t("aminmax", input)
    if dim is None:
        return _MinMax(x.amin(), x.amax())
    return _MinMax(x.amin(dim, keepdim), x.amax(dim, keepdim))


def std_mean(input: Any, dim: Any = None, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:  # noqa: A002
    """``(std, mean)`` over ``dim`` (std's keywords: unbiased/correction, keepdim)."""
    x = _t("std_mean", input)
    keep = kwargs.get("keepdim", False)
    return x.std(dim, *args, **kwargs), x.mean(dim, keepdim=keep) if dim is not None \
        else x.mean()


def var_mean(input: Any, dim: Any = None, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:  # noqa: A002
    """``(var, mean)`` over ``dim``."""
    x = _t("var_mean", input)
    keep = kwargs.get("keepdim", False)
    return x.var(dim, *args, **kwargs), x.mean(dim, keepdim=keep) if dim is not None \
        else x.mean()


def logcumsumexp(input: Any, dim: int) -> Tensor:  # noqa: A002
    """``log(cumsum(exp(x)))`` along ``dim``. The value is NumPy's running ``logaddexp`` (no
    overflow or underflow however the entries spread); the gradient, entry i of output j
    getting ``exp(x_i - out_j)`` for i <= j, comes from ``s_j = sum_{i<=j} exp(x_i - out_j)``
    (value 1) added as ``s - s.detach()``, so it is a genuine differentiable function."""
    x = _t("logcumsumexp", input)
    d = _dim("logcumsumexp", x, dim)
    if x.dim() == 0:
        return x
    rows = x.movedim(d, -1)
    value = np.logaddexp.accumulate(rows.detach().numpy(), axis=-1)
    out = tensor(value)
    if not (x.requires_grad and is_grad_enabled()):
        return out.movedim(-1, d)
    n = rows.shape[-1]
    below = tensor(np.tril(np.ones((n, n), dtype=bool)))  # [j, i]: i <= j
    gap = rows.unsqueeze(-2) - out.unsqueeze(-1)  # [..., j, i] = x_i - out_j
    s = gap.masked_fill(~below, float("-inf")).exp().sum(-1)
    return (out + (s - s.detach())).movedim(-1, d)


def combinations(input: Any, r: int = 2, with_replacement: bool = False) -> Tensor:  # noqa: A002
    """The length-r combinations of a 1-D tensor's entries, one per row (indexing keeps the
    history)."""
    x = _t("combinations", input)
    if x.dim() != 1:
        raise ShapeError(f"combinations: expected a 1-D tensor, found shape {tuple(x.shape)}")
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        raise TorchLeanError(f"combinations: r must be a non-negative int, found {r!r}")
    pick = itertools.combinations_with_replacement if with_replacement \
        else itertools.combinations
    rows = list(pick(range(x.shape[0]), r))
    if not rows or r == 0:
        return x[tensor(np.zeros(0, dtype=np.int64))]
    return x[tensor(np.asarray(rows, dtype=np.int64))]


# ---------------------------------------------------------------------------------------------
# scatter and index forms

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(input: Any, dim: int, index: Any, src: Any, reduce: str, *,  # noqa: A002
                   include_self: bool = True) -> Tensor:
    """``input`` with ``src`` reduced into the places ``index`` names along ``dim`` (``sum``,
    ``prod``, ``mean``, ``amax``, ``amin``; ``include_self`` as torch's). Gradients for
    ``sum`` and ``mean`` (through ``scatter_add``); the others are computed without history and
    refuse a tensor that needs a gradient."""
    x, s = _t("scatter_reduce", input), _t("scatter_reduce", src)
    idx = _t("scatter_reduce", index)
    if reduce not in _REDUCES:
        raise TorchLeanError(f"scatter_reduce: reduce must be one of {_REDUCES}, found "
                             f"{reduce!r}")
    d = _dim("scatter_reduce", x, dim)
    if idx.dtype.kind not in "iu" or idx.dim() != x.dim() or s.dim() != x.dim():
        raise ShapeError(f"scatter_reduce: index must be an integer tensor and index, src and "
                         f"input must have the same number of dimensions, found index "
                         f"{tuple(idx.shape)} ({idx.dtype}), src {tuple(s.shape)}, input "
                         f"{tuple(x.shape)}")
    ia = idx.numpy()
    sub = tuple(slice(0, n) for n in ia.shape)
    sa = s.detach().numpy()[sub]
    # the place each src entry goes to: index along dim, its own position elsewhere
    where: list[Any] = list(np.indices(ia.shape))
    where[d] = ia
    target = tuple(where)
    counts = np.zeros(x.shape, dtype=np.int64)
    np.add.at(counts, target, 1)
    wants_grad = is_grad_enabled() and (x.requires_grad or s.requires_grad)
    if reduce in ("sum", "mean"):
        zero_self = x if include_self else x.masked_fill(tensor(counts > 0), 0.0)
        total = zero_self.scatter_add(d, idx, s[sub] if s.shape != ia.shape else s)
        if reduce == "sum":
            return total
        divisor = counts + (1 if include_self else 0)
        return total / tensor(np.maximum(divisor, 1).astype(x.dtype))
    if wants_grad:
        raise UnsupportedArgumentError(f"scatter_reduce: the gradient of reduce={reduce!r} is "
                                       "not supported (sum and mean are)")
    base = x.detach().numpy().copy()
    if not include_self:
        fill = {"prod": 1, "amax": -np.inf, "amin": np.inf}[reduce]
        base[counts > 0] = fill
    ufunc = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce]
    ufunc.at(base, target, sa)
    return tensor(base)


def _index_spread(op: str, x: Tensor, dim: int, index: Any, source: Tensor) -> Tensor:
    """``index`` (1-D, one entry per slice of ``source`` along ``dim``) as a full index tensor
    shaped as ``source``, for the scatter forms."""
    idx = _t(op, index)
    if idx.dtype.kind not in "iu" or idx.dim() > 1:
        raise ShapeError(f"{op}: index must be a 1-D integer tensor, found shape "
                         f"{tuple(idx.shape)} ({idx.dtype})")
    ia = idx.numpy().reshape(-1)
    if source.dim() and source.shape[dim] != ia.shape[0]:
        raise ShapeError(f"{op}: source has {source.shape[dim]} slices along dim {dim}, index "
                         f"has {ia.shape[0]} entries")
    if ia.size and (ia.min() < -x.shape[dim] or ia.max() >= x.shape[dim]):
        raise ShapeError(f"{op}: index out of range for dimension {dim} of size "
                         f"{x.shape[dim]}")
    shape = [1] * source.dim()
    shape[dim] = ia.shape[0]
    return tensor(np.broadcast_to((ia % x.shape[dim]).reshape(shape), source.shape).copy())


def index_add(input: Any, dim: int, index: Any, source: Any, *,  # noqa: A002
              alpha: Any = 1) -> Tensor:
    """``input`` with ``alpha * source``'s slices added at ``index`` along ``dim`` (also
    ``index_add_``'s definition, installed below)."""
    x, s = _t("index_add", input), _t("index_add", source)
    d = _dim("index_add", x, dim)
    spread = _index_spread("index_add", x, d, index, s)
    return x.scatter_add(d, spread, s * alpha if alpha != 1 else s)


def index_copy(input: Any, dim: int, index: Any, source: Any) -> Tensor:  # noqa: A002
    """``input`` with the slices at ``index`` along ``dim`` replaced by ``source``'s."""
    x, s = _t("index_copy", input), _t("index_copy", source)
    d = _dim("index_copy", x, dim)
    spread = _index_spread("index_copy", x, d, index, s)
    return x.scatter(d, spread, s)


def index_fill(input: Any, dim: int, index: Any, value: Any) -> Tensor:  # noqa: A002
    """``input`` with the slices at ``index`` along ``dim`` set to ``value`` (the in-place
    form on a copy)."""
    out = _t("index_fill", input).clone()
    return out.index_fill_(dim, index, value)  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# small math names


def _round(self: Any, *, decimals: int = 0) -> Tensor:
    """Round half to even, to ``decimals`` places (computed in the tensor's dtype, as torch's:
    ``round(x * 10**d) / 10**d``)."""
    if isinstance(decimals, bool) or not isinstance(decimals, int | np.integer):
        raise TorchLeanError(f"round: decimals must be an int, found {decimals!r}")
    if decimals == 0 or self.dtype.kind != "f":
        return _ROUND(self)  # type: ignore[no-any-return]
    if decimals > 0:
        scale = float(10.0 ** decimals)
        return _ROUND(self * scale) / scale  # type: ignore[no-any-return]
    scale = float(10.0 ** -decimals)
    return _ROUND(self / scale) * scale  # type: ignore[no-any-return]


def copysign(input: Any, other: Any) -> Tensor:  # noqa: A002
    """``|input|`` with ``other``'s sign (a negative zero counts as negative)."""
    x = _t("copysign", input)
    o = other.detach().numpy() if isinstance(other, Tensor) else np.asarray(other)
    sign = np.where(np.signbit(o), -1.0, 1.0).astype(x.dtype if x.dtype.kind == "f"
                                                     else np.float32)
    return x.abs() * tensor(sign)


def positive(input: Any) -> Tensor:  # noqa: A002
    return _t("positive", input)


def sgn(input: Any) -> Tensor:  # noqa: A002
    """``sign`` (torch's complex-aware name; torchlean's tensors are real)."""
    return _t("sgn", input).sign()  # type: ignore[no-any-return]


def conj(input: Any) -> Tensor:  # noqa: A002
    return _t("conj", input)


def resolve_conj(input: Any) -> Tensor:  # noqa: A002
    return _t("resolve_conj", input)


def isreal(input: Any) -> Tensor:  # noqa: A002
    x = _t("isreal", input)
    return tensor(np.ones(x.shape, dtype=bool))


def ldexp(input: Any, other: Any) -> Tensor:  # noqa: A002
    """``input * 2**other``."""
    x = _t("ldexp", input)
    o = other if isinstance(other, Tensor) else tensor(other)
    return x * (2.0 ** o.to(x.dtype if x.dtype.kind == "f" else np.float32))


def _integer_op(op: str, fn: Any, input: Any, other: Any) -> Tensor:  # noqa: A002
    a, b = _t(op, input), _t(op, other)
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        raise TorchLeanError(f"{op}: expected integer tensors, found {a.dtype} and {b.dtype}")
    return tensor(fn(a.numpy(), b.numpy()))


def gcd(input: Any, other: Any) -> Tensor:  # noqa: A002
    return _integer_op("gcd", np.gcd, input, other)


def lcm(input: Any, other: Any) -> Tensor:  # noqa: A002
    return _integer_op("lcm", np.lcm, input, other)


def polygamma(n: int, input: Any) -> Tensor:  # noqa: A002
    """The n-th derivative of the digamma function (values only: no history)."""
    from scipy import special  # optional extra, loaded on first use

    x = _t("polygamma", input)
    if x.requires_grad and is_grad_enabled():
        raise UnsupportedArgumentError("polygamma: the gradient is not supported")
    return tensor(special.polygamma(n, x.numpy()).astype(x.dtype))


def digamma(input: Any) -> Tensor:  # noqa: A002
    """The logarithmic derivative of the gamma function (values only: no history)."""
    from scipy import special  # optional extra, loaded on first use

    x = _t("digamma", input)
    if x.requires_grad and is_grad_enabled():
        raise UnsupportedArgumentError("digamma: the gradient is not supported")
    return tensor(special.digamma(x.numpy()).astype(x.dtype))


def row_stack(tensors: Any) -> Tensor:
    """``vstack``'s other name: 1-D tensors become rows, then one concatenation."""
    rows = [_t("row_stack", t) for t in tensors]
    return cat([r.reshape(1, -1) if r.dim() < 2 else r for r in rows], 0)


def addr(input: Any, vec1: Any, vec2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * outer(vec1, vec2)``."""
    x, a, b = _t("addr", input), _t("addr", vec1), _t("addr", vec2)
    if a.dim() != 1 or b.dim() != 1:
        raise ShapeError(f"addr: vec1 and vec2 must be 1-D, found {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    product = a.unsqueeze(1) * b.unsqueeze(0)
    return x * beta + product * alpha


def unique_consecutive(input: Any, return_inverse: bool = False,  # noqa: A002
                       return_counts: bool = False, dim: Any = None) -> Any:
    """Runs of equal consecutive entries collapsed (flattened when ``dim`` is None)."""
    x = _t("unique_consecutive", input)
    if dim is not None:
        raise UnsupportedArgumentError("unique_consecutive: dim is not supported (None "
                                       "flattens, as torch's default)")
    a = x.detach().numpy().reshape(-1)
    if a.size == 0:
        starts = np.zeros(0, dtype=np.int64)
    else:
        starts = np.flatnonzero(np.concatenate([[True], a[1:] != a[:-1]]))
    values = tensor(a[starts])
    out: list[Any] = [values]
    if return_inverse:
        inverse = np.cumsum(np.concatenate([[0], (a[1:] != a[:-1]).astype(np.int64)])) \
            if a.size else np.zeros(0, dtype=np.int64)
        out.append(tensor(inverse.reshape(x.shape)))
    if return_counts:
        out.append(tensor(np.diff(np.append(starts, a.size))))
    return out[0] if len(out) == 1 else tuple(out)


def can_cast(from_: Any, to: Any) -> bool:
    """Whether torch's casting rules allow ``from_`` -> ``to`` (no float to int, no to bool
    from another kind)."""
    a, b = np.dtype(from_), np.dtype(to)
    order = {"b": 0, "u": 1, "i": 1, "f": 2}
    return order.get(a.kind, 3) <= order.get(b.kind, 3)


_ROUND = Tensor.round


def _install() -> None:
    methods = {"quantile": quantile, "nanquantile": nanquantile, "nanmedian": nanmedian,
               "mode": mode, "msort": msort, "aminmax": aminmax, "logcumsumexp": logcumsumexp,
               "scatter_reduce": scatter_reduce, "index_add": index_add,
               "index_copy": index_copy, "index_fill": index_fill, "copysign": copysign,
               "positive": positive, "sgn": sgn, "conj": conj, "resolve_conj": resolve_conj,
               "isreal": isreal, "ldexp": ldexp, "gcd": gcd, "lcm": lcm, "digamma": digamma,
               "addr": addr, "unique_consecutive": unique_consecutive}
    for key, fn in methods.items():
        if not hasattr(Tensor, key):
            setattr(Tensor, key, fn)
    Tensor.round = _round  # type: ignore[method-assign]
    for key in ("scatter_reduce", "index_add", "index_copy", "index_fill"):
        name = f"{key}_"
        if not hasattr(Tensor, name):
            setattr(Tensor, name, _inplace(key))


def _inplace(key: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self.copy_(getattr(Tensor, key)(self, *args, **kwargs))

    method.__name__ = f"{key}_"
    return method


_install()
