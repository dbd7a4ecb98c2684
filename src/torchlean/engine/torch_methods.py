"""torch's Tensor methods that are compositions of other tensor methods.

``split``, ``chunk``, ``unbind``, ``diag``, ``gather``, ``index_select``, ``flip``, ``roll``,
``logsumexp``, ``addmm``, in-place unary ops (``sin_``, ``log_``, ...) and the like need no
primitive of their own: each is built from indexing, ``where``, reductions and arithmetic that
already record a history, so dtypes, gradients and errors are those of the pieces. They live
here, attached to ``Tensor`` when this module is imported (``torch_api`` imports it, and the
package imports ``torch_api``), so ``engine/tensor.py`` (the recording hot path) stays small.
Integer and bool data go through the same compositions (no history is recorded for them).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..core.errors import IndexRangeError, ShapeError, TorchLeanError
from ..core.registry import REGISTRY
from ..core.rng import Generator, check_generator, default_generator
from .tensor import (
    RECORDER,
    Tensor,
    _draw,
    _inplace,
    _leaf,
    _where,
    adopt_view,
    cat,
    checked_signature,
    is_grad_enabled,
    no_grad,
    stack,
    tensor,
)

_TAKE_ADJOINT = REGISTRY["take_adjoint"]


def _dim(op: str, t: Tensor, dim: Any) -> builtins.int:
    n = builtins.max(t.ndim, 1)
    if isinstance(dim, builtins.bool) or not isinstance(dim, builtins.int | np.integer) \
            or not -n <= dim < n:
        raise IndexRangeError(f"{op}: dimension out of range (expected to be in range of "
                              f"[{-n}, {n - 1}], but got {dim!r})")
    return builtins.int(dim) % n


def _index_tensor(op: str, index: Any) -> Any:
    idx = index if isinstance(index, Tensor) else tensor(index)
    if idx.dtype.kind not in "iu":
        raise TorchLeanError(f"{op}: expected an integer (int64) index tensor, found "
                             f"{idx.dtype.name}")
    return idx


def _along(dim: builtins.int, ndim: builtins.int, entry: Any) -> tuple[Any, ...]:
    return (slice(None),) * dim + (entry,) + (slice(None),) * (ndim - dim - 1)


# --- splitting and joining ---------------------------------------------------------------------

def split(self: Any, split_size_or_sections: Any, dim: builtins.int = 0) -> Any:
    """Pieces of ``split_size`` along ``dim`` (the last one smaller), or of the listed sizes."""
    axis = _dim("split", self, dim)
    n = self.shape[axis]
    size = split_size_or_sections
    if isinstance(size, builtins.int) and not isinstance(size, builtins.bool):
        if size <= 0 and n:
            raise TorchLeanError(f"split: split_size must be positive, found {size}")
        sizes = [size] * (n // size) + ([n % size] if n % size else []) if n else [0]
    else:
        sizes = [builtins.int(s) for s in size]
        if builtins.sum(sizes) != n or builtins.any(s < 0 for s in sizes):
            raise ShapeError(f"split: split_with_sizes expects split_sizes to sum exactly to {n} "
                             f"(input tensor's size at dimension {axis}), but got split_sizes="
                             f"{sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(self[_along(axis, self.ndim, slice(start, start + s))])
        start += s
    return tuple(out)


def chunk(self: Any, chunks: builtins.int, dim: builtins.int = 0) -> Any:
    if not isinstance(chunks, builtins.int) or chunks <= 0:
        raise TorchLeanError(f"chunk: chunks must be a positive int, found {chunks!r}")
    n = self.shape[_dim("chunk", self, dim)]
    return split(self, builtins.max(-(-n // chunks), 1), dim)


def unbind(self: Any, dim: builtins.int = 0) -> Any:
    axis = _dim("unbind", self, dim)
    return tuple(self[_along(axis, self.ndim, i)] for i in range(self.shape[axis]))


def tensor_split(self: Any, indices_or_sections: Any, dim: builtins.int = 0
                 ) -> tuple[Tensor, ...]:
    axis = _dim("tensor_split", self, dim)
    n = self.shape[axis]
    if isinstance(indices_or_sections, builtins.int):
        k = indices_or_sections
        sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
    else:
        bounds = [0] + [builtins.min(builtins.max(builtins.int(i), 0), n)
                        for i in indices_or_sections] + [n]
        sizes = [builtins.max(b - a, 0) for a, b in zip(bounds, bounds[1:], strict=False)]
    return split(self, sizes, axis)


def narrow(self: Any, dim: builtins.int, start: builtins.int, length: builtins.int) -> Any:
    axis = _dim("narrow", self, dim)
    n = self.shape[axis]
    start = start + n if start < 0 else start
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise IndexRangeError(f"narrow: start ({start}) + length ({length}) exceeds dimension "
                              f"size ({n})")
    return self[_along(axis, self.ndim, slice(start, start + length))]


def select(self: Any, dim: builtins.int, index: builtins.int) -> Any:
    axis = _dim("select", self, dim)
    return self[_along(axis, self.ndim, index)]


# --- diagonals and triangles -------------------------------------------------------------------

def diag(self: Any, diagonal: builtins.int = 0) -> Any:
    """A 1-D tensor as the ``diagonal``-th diagonal of a square matrix, or a 2-D tensor's
    ``diagonal``-th diagonal as a 1-D tensor."""
    if self.ndim == 2:
        return diagonal_(self, diagonal)
    if self.ndim != 1:
        raise ShapeError(f"diag: expected a 1-D or 2-D tensor, found {self.ndim}-D")
    n = self.shape[0]
    k = abs(diagonal)
    m = n + k
    mask = _leaf(np.eye(m, k=diagonal, dtype=np.bool_))
    pad = self.new_zeros(k)
    if diagonal >= 0:  # row i holds v[i] at column i + k
        column = cat([self, pad]).reshape(m, 1).expand(m, m)
    else:  # column j holds v[j] at row j + k
        column = cat([self, pad]).reshape(1, m).expand(m, m)
    return _where(mask, column, self.new_zeros(()))


def diagonal_(self: Any, offset: builtins.int = 0, dim1: builtins.int = 0,
              dim2: builtins.int = 1) -> Any:
    """The entries ``[i, i + offset]`` of dims ``dim1``, ``dim2`` (moved to the last axis)."""
    if self.ndim < 2:
        raise ShapeError(f"diagonal: expected a tensor of at least 2 dimensions, found "
                         f"{self.ndim}-D")
    d1, d2 = _dim("diagonal", self, dim1), _dim("diagonal", self, dim2)
    if d1 == d2:
        raise ShapeError(f"diagonal: dim1 and dim2 cannot be the same, found {dim1} and {dim2}")
    rest = [d for d in range(self.ndim) if d not in (d1, d2)]
    moved = self.permute(*rest, d1, d2)
    rows, cols = moved.shape[-2], moved.shape[-1]
    start_r, start_c = (0, offset) if offset >= 0 else (-offset, 0)
    length = builtins.max(builtins.min(rows - start_r, cols - start_c), 0)
    r = tensor(np.arange(start_r, start_r + length))
    c = tensor(np.arange(start_c, start_c + length))
    out = moved[(Ellipsis, r, c)]
    v = moved._value
    if type(v) is np.ndarray and length > 0:
        # torch's diagonal is a view: the same entries seen in place, one step of a row and a
        # column apart (NumPy's own diagonal view is read-only).
        corner = v[..., start_r:, start_c:]
        view = as_strided(corner, corner.shape[:-2] + (length,),
                          corner.strides[:-2] + (corner.strides[-2] + corner.strides[-1],),
                          writeable=v.flags.writeable)
        adopt_view(out, self, view)
    return out


def diag_embed(self: Any, offset: builtins.int = 0) -> Any:
    if self.ndim == 1:
        return diag(self, offset)
    return stack([diag_embed(row, offset) for row in unbind(self, 0)])


def trace(self: Any) -> Any:
    if self.ndim != 2:
        raise ShapeError(f"trace: expected a matrix, found a {self.ndim}-D tensor")
    return diagonal_(self).sum()


def fill_diagonal_(self: Any, fill_value: Any, wrap: builtins.bool = False) -> Any:
    mask = np.zeros(self.shape, np.bool_)
    n = builtins.min(self.shape) if self.ndim else 0
    mask[(np.arange(n),) * self.ndim] = True
    return self.masked_fill_(_leaf(mask), fill_value)


def tril_(self: Any, diagonal: builtins.int = 0) -> Any:
    return _triangle_(self, diagonal, np.tril, "tril")


def triu_(self: Any, diagonal: builtins.int = 0) -> Any:
    return _triangle_(self, diagonal, np.triu, "triu")


def _triangle(self: Any, diagonal: builtins.int, fn: Callable[..., Any], op: str) -> Any:
    if self.ndim < 2:
        raise ShapeError(f"{op}: input tensor must have at least 2 dimensions, found "
                         f"{self.ndim}")
    mask = fn(np.ones(self.shape[-2:], np.bool_), diagonal)
    return _where(_leaf(mask), self, self.new_zeros(()))


def _triangle_(self: Any, diagonal: builtins.int, fn: Callable[..., Any], op: str) -> Any:
    return _inplace(f"{op}_", self, lambda a: _triangle(a, diagonal, fn, op))


def tril(self: Any, diagonal: builtins.int = 0) -> Any:
    return _triangle(self, diagonal, np.tril, "tril")


def triu(self: Any, diagonal: builtins.int = 0) -> Any:
    return _triangle(self, diagonal, np.triu, "triu")


# --- gathering ---------------------------------------------------------------------------------

def gather(self: Any, dim: builtins.int, index: Any) -> Any:
    """``out[i][j][k] = self[index[i][j][k]][j][k]`` (for dim 0), as torch.gather."""
    axis = _dim("gather", self, dim)
    idx = _index_tensor("gather", index)
    if idx.ndim != self.ndim:
        raise ShapeError(f"gather: index tensor must have the same number of dimensions as "
                         f"input tensor ({self.ndim}), found {idx.ndim}")
    for d in range(self.ndim):
        if d != axis and idx.shape[d] > self.shape[d]:
            raise ShapeError(f"gather: size of index {tuple(idx.shape)} exceeds the input's "
                             f"{tuple(self.shape)} at dimension {d}")
    grids = list(np.indices(idx.shape, sparse=True))
    entries: list[Any] = [tensor(g) for g in grids]
    entries[axis] = idx
    return self[tuple(entries)]


def take_along_dim(self: Any, indices: Any, dim: Any = None) -> Any:
    if dim is None:
        return self.reshape(-1)[_index_tensor("take_along_dim", indices).reshape(-1)]
    idx = _index_tensor("take_along_dim", indices)
    axis = _dim("take_along_dim", self, dim)
    shape = list(np.broadcast_shapes(tuple(s for i, s in enumerate(self.shape) if i != axis),
                                     tuple(s for i, s in enumerate(idx.shape) if i != axis)))
    src_shape = shape[:axis] + [self.shape[axis]] + shape[axis:]
    idx_shape = shape[:axis] + [idx.shape[axis]] + shape[axis:]
    return gather(self.expand(*src_shape), axis, idx.expand(*idx_shape))


def take(self: Any, index: Any) -> Any:
    return self.reshape(-1)[_index_tensor("take", index)]


def index_select(self: Any, dim: builtins.int, index: Any) -> Any:
    idx = _index_tensor("index_select", index)
    if idx.ndim > 1:
        raise ShapeError(f"index_select: index must be a vector, found {idx.ndim}-D")
    axis = _dim("index_select", self, dim)
    return self[_along(axis, self.ndim, idx.reshape(-1))]


def masked_select(self: Any, mask: Any) -> Any:
    if not isinstance(mask, Tensor) or mask.dtype.kind != "b":
        raise TorchLeanError(f"masked_select: expected a bool mask tensor, found "
                             f"{getattr(mask, 'dtype', type(mask).__name__)}")
    shape = np.broadcast_shapes(self.shape, mask.shape)
    return self.expand(*shape)[mask.expand(*shape)]


def flip(self: Any, *dims: Any) -> Any:
    if len(dims) == 1 and isinstance(dims[0], list | tuple):
        dims = tuple(dims[0])
    out = self
    for d in dims:
        axis = _dim("flip", self, d)
        n = self.shape[axis]
        out = out[_along(axis, self.ndim, tensor(np.arange(n - 1, -1, -1)))]
    return out


def fliplr(self: Any) -> Any:
    return flip(self, 1)


def flipud(self: Any) -> Any:
    return flip(self, 0)


def roll(self: Any, shifts: Any, dims: Any = None) -> Any:
    if dims is None:
        return roll(self.reshape(-1), shifts, 0).reshape(self.shape)
    shifts_ = (shifts,) if isinstance(shifts, builtins.int) else tuple(shifts)
    dims_ = (dims,) if isinstance(dims, builtins.int) else tuple(dims)
    if len(shifts_) != len(dims_):
        raise ShapeError(f"roll: shifts and dims must have the same length, found "
                         f"{len(shifts_)} and {len(dims_)}")
    out = self
    for s, d in zip(shifts_, dims_, strict=True):
        axis = _dim("roll", self, d)
        n = self.shape[axis]
        if n:
            out = out[_along(axis, self.ndim, tensor((np.arange(n) - s) % n))]
    return out


def repeat_interleave(self: Any, repeats: Any, dim: Any = None) -> Any:
    src = self.reshape(-1) if dim is None else self
    axis = 0 if dim is None else _dim("repeat_interleave", self, dim)
    n = src.shape[axis]
    counts = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
    idx = np.repeat(np.arange(n), np.broadcast_to(counts, (n,)))
    return src[_along(axis, src.ndim, tensor(idx))]


def tile(self: Any, *dims: Any) -> Any:
    if len(dims) == 1 and isinstance(dims[0], list | tuple):
        dims = tuple(dims[0])
    dims = (1,) * (self.ndim - len(dims)) + tuple(dims)
    return self.repeat(*dims)


# --- reshaping ---------------------------------------------------------------------------------

def movedim(self: Any, source: Any, destination: Any) -> Any:
    src = [source] if isinstance(source, builtins.int) else list(source)
    dst = [destination] if isinstance(destination, builtins.int) else list(destination)
    src = [_dim("movedim", self, d) for d in src]
    dst = [_dim("movedim", self, d) for d in dst]
    order = [d for d in range(self.ndim) if d not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return self.permute(*order)


def swapaxes(self: Any, axis0: builtins.int, axis1: builtins.int) -> Any:
    return self.transpose(axis0, axis1)


def unflatten(self: Any, dim: builtins.int, sizes: Sequence[builtins.int]) -> Any:
    axis = _dim("unflatten", self, dim)
    shape = list(self.shape)
    return self.reshape(*shape[:axis], *sizes, *shape[axis + 1:])


def ravel(self: Any) -> Any:
    return self.reshape(-1)


def broadcast_to(self: Any, size: Any) -> Any:
    return self.expand(*size)


def type_as(self: Any, other: Tensor) -> Any:
    return self.to(other.dtype)


def new_empty(self: Any, *size: Any, dtype: Any = None, device: Any = None,
              requires_grad: builtins.bool = False) -> Any:
    out = self.new_zeros(*size, dtype=dtype)
    return out.to(device).requires_grad_(requires_grad) if device is not None or \
        requires_grad else out


def squeeze_(self: Any, dim: Any = None) -> Any:
    return _reshaped_(self, self.squeeze() if dim is None else self.squeeze(dim))


def unsqueeze_(self: Any, dim: builtins.int) -> Any:
    return _reshaped_(self, self.unsqueeze(dim))


def _reshaped_(self: Any, shaped: Any) -> Any:
    if self.requires_grad and is_grad_enabled():
        raise TorchLeanError("squeeze_/unsqueeze_: not supported on a tensor that requires "
                             "grad; use squeeze()/unsqueeze()")
    self._value = shaped._value
    return self


def is_contiguous(self: Any, memory_format: Any = None) -> builtins.bool:
    """Whether the value is in row-major order (a transposed view is not, as in torch)."""
    return builtins.bool(self._value.flags.c_contiguous)


def stride(self: Any, dim: Any = None) -> Any:
    """The value's strides in elements (torch's convention), of views too."""
    item = self._value.itemsize
    strides = tuple(builtins.int(st // item) for st in self._value.strides)
    return strides if dim is None else strides[_dim("stride", self, dim)]


def half(self: Any, memory_format: Any = None) -> Any:
    raise TorchLeanError("half: float16 is not supported by torchlean (it computes in float32 "
                         "and float64)")


# --- arithmetic --------------------------------------------------------------------------------

def logsumexp(self: Any, dim: Any, keepdim: builtins.bool = False) -> Any:
    """``log(sum(exp(x)))`` along ``dim``, shifted by the (constant) maximum for stability."""
    dims = (dim,) if isinstance(dim, builtins.int) else tuple(dim)
    with no_grad():
        m = self.detach().amax(dim=dims, keepdim=True)
        m = m.masked_fill(~m.isfinite(), 0.0)
    out = (self - m).exp().sum(dim=dims, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dims) if len(dims) > 1 else out.squeeze(dims[0])


def log1p(self: Any) -> Any:
    return (self + 1.0).log()


def expm1(self: Any) -> Any:
    return self.exp() - 1.0


def log2(self: Any) -> Any:
    return self.log() / float(np.log(2.0))


def log10(self: Any) -> Any:
    return self.log() / float(np.log(10.0))


def exp2(self: Any) -> Any:
    return (self * float(np.log(2.0))).exp()


def tan(self: Any) -> Any:
    return self.sin() / self.cos()


def sinh(self: Any) -> Any:
    return (self.exp() - (-self).exp()) * 0.5


def cosh(self: Any) -> Any:
    return (self.exp() + (-self).exp()) * 0.5


def clamp_min(self: Any, min: Any) -> Any:  # noqa: A002
    return self.clamp(min=min)


def clamp_max(self: Any, max: Any) -> Any:  # noqa: A002
    return self.clamp(max=max)


def maximum(self: Any, other: Any) -> Any:
    return _where(self >= other, self, other)


def minimum(self: Any, other: Any) -> Any:
    return _where(self <= other, self, other)


def fmax(self: Any, other: Any) -> Any:
    return maximum(self, other)


def fmin(self: Any, other: Any) -> Any:
    return minimum(self, other)


def where(self: Any, condition: Any, other: Any) -> Any:
    return _where(condition, self, other)


def lerp(self: Any, end: Any, weight: Any) -> Any:
    return self + weight * (end - self)


def addmm(self: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return _axpby(self, mat1.matmul(mat2), beta, alpha)


def addmv(self: Any, mat: Any, vec: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return _axpby(self, mat.matmul(vec), beta, alpha)


def baddbmm(self: Any, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return _axpby(self, batch1.matmul(batch2), beta, alpha)


def addbmm(self: Any, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return _axpby(self, batch1.matmul(batch2).sum(0), beta, alpha)


def _axpby(self: Any, prod: Tensor, beta: Any, alpha: Any) -> Any:
    scaled = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return scaled + self.new_zeros(()) * 0  # torch ignores self (even nan) when beta is 0
    return (self if beta == 1 else self * beta) + scaled


def addcmul(self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    return self + value * (tensor1 * tensor2)


def addcdiv(self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    return self + value * (tensor1 / tensor2)


def bmm(self: Any, mat2: Any) -> Any:
    if self.ndim != 3 or getattr(mat2, "ndim", 0) != 3:
        raise ShapeError(f"bmm: expects two 3-D tensors, found shapes {tuple(self.shape)} and "
                         f"{tuple(getattr(mat2, 'shape', ()))}")
    return self.matmul(mat2)


def mv(self: Any, vec: Any) -> Any:
    if self.ndim != 2 or getattr(vec, "ndim", 0) != 1:
        raise ShapeError("mv: expects a matrix and a vector")
    return self.matmul(vec)


def outer(self: Any, vec2: Any) -> Any:
    return self.reshape(-1, 1) * vec2.reshape(1, -1)


def inner(self: Any, other: Any) -> Any:
    if self.ndim == 0 or other.ndim == 0:
        return self * other
    return (self.unsqueeze(-2) * other).sum(-1) if other.ndim == 1 else \
        self.matmul(other.transpose(-1, -2))


def remainder(self: Any, other: Any) -> Any:
    return self - (self // other) * other


def fmod(self: Any, other: Any) -> Any:
    return self - (self / other).trunc() * other if self.dtype.kind == "f" else \
        _leaf(np.fmod(self.numpy(), other.numpy() if isinstance(other, Tensor) else other))


def floor_divide(self: Any, other: Any) -> Any:
    return self // other


def frac(self: Any) -> Any:
    return self - self.trunc()


def isinf(self: Any) -> Any:
    return _leaf(np.isinf(self.detach().numpy()))


def isposinf(self: Any) -> Any:
    return _leaf(np.isposinf(self.detach().numpy()))


def isneginf(self: Any) -> Any:
    return _leaf(np.isneginf(self.detach().numpy()))


def isclose(self: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: builtins.bool = False) -> Any:
    b = other.detach().numpy() if isinstance(other, Tensor) else other
    return _leaf(np.isclose(self.detach().numpy(), b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def _bool_op(name: str, fn: Callable[..., Any]) -> Callable[..., Tensor]:
    def op(self: Any, other: Any) -> Any:
        b = other.detach().numpy() if isinstance(other, Tensor) else other
        return _leaf(np.asarray(fn(self.detach().numpy(), b)))

    op.__name__ = name
    return op


logical_and = _bool_op("logical_and", np.logical_and)
logical_or = _bool_op("logical_or", np.logical_or)
logical_xor = _bool_op("logical_xor", np.logical_xor)
not_equal = _bool_op("not_equal", np.not_equal)
greater = _bool_op("greater", np.greater)
less = _bool_op("less", np.less)
greater_equal = _bool_op("greater_equal", np.greater_equal)
less_equal = _bool_op("less_equal", np.less_equal)


def signbit(self: Any) -> Any:
    return _leaf(np.signbit(self.detach().numpy()))


def count_nonzero(self: Any, dim: Any = None) -> Any:
    return _leaf(np.asarray(np.count_nonzero(self.detach().numpy(), axis=dim), np.int64))


def nonzero(self: Any, as_tuple: builtins.bool = False) -> Any:
    found = np.nonzero(self.detach().numpy().reshape(self.shape or (1,)))
    if as_tuple:
        return tuple(_leaf(a.astype(np.int64)) for a in found)
    return _leaf(np.stack(found, axis=1).astype(np.int64))


def argwhere(self: Any) -> Any:
    return nonzero(self)


def unique(self: Any, sorted: builtins.bool = True, return_inverse: builtins.bool = False,  # noqa: A002
           return_counts: builtins.bool = False, dim: Any = None) -> Any:
    values = self.detach().numpy()
    found = np.unique(values, return_inverse=True, return_counts=True, axis=dim)
    out: list[Tensor] = [_leaf(found[0])]
    if return_inverse:
        out.append(_leaf(found[1].reshape(values.shape if dim is None else -1).astype(np.int64)))
    if return_counts:
        out.append(_leaf(found[2].astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(self: Any, weights: Any = None, minlength: builtins.int = 0) -> Any:
    if self.ndim != 1 or self.dtype.kind not in "iu":
        raise ShapeError("bincount: expects a 1-D tensor of non-negative integers")
    w = weights.numpy() if isinstance(weights, Tensor) else weights
    return _leaf(np.bincount(self.detach().numpy(), weights=w, minlength=minlength))


def median(self: Any, dim: Any = None, keepdim: builtins.bool = False) -> Any:
    """torch's median: the lower of the two middle values (an element of the input)."""
    if dim is None:
        flat = self.reshape(-1)
        return flat.sort().values[(flat.shape[0] - 1) // 2]
    axis = _dim("median", self, dim)
    ordered = self.sort(dim=axis)
    k = (self.shape[axis] - 1) // 2
    values = select(ordered.values, axis, k)
    indices = select(ordered.indices, axis, k)
    if keepdim:
        values, indices = values.unsqueeze(axis), indices.unsqueeze(axis)
    return _MedianResult(values, indices)


class _MedianResult(tuple):  # type: ignore[type-arg]
    """(values, indices), as torch's named tuple."""

    def __new__(cls, values: Tensor, indices: Tensor) -> _MedianResult:
        return super().__new__(cls, (values, indices))

    @property
    def values(self) -> Any:
        return self[0]  # type: ignore[no-any-return]

    @property
    def indices(self) -> Any:
        return self[1]  # type: ignore[no-any-return]


def kthvalue(self: Any, k: builtins.int, dim: builtins.int = -1,
             keepdim: builtins.bool = False) -> Any:
    axis = _dim("kthvalue", self, dim)
    ordered = self.sort(dim=axis)
    values, indices = select(ordered.values, axis, k - 1), select(ordered.indices, axis, k - 1)
    if keepdim:
        values, indices = values.unsqueeze(axis), indices.unsqueeze(axis)
    return _MedianResult(values, indices)


def cumprod(self: Any, dim: builtins.int) -> Any:
    axis = _dim("cumprod", self, dim)
    pieces = unbind(self, axis)
    out = [pieces[0]] if pieces else []
    for p in pieces[1:]:
        out.append(out[-1] * p)
    return stack(out, axis) if out else self.clone()


def diff(self: Any, n: builtins.int = 1, dim: builtins.int = -1) -> Any:
    out = self
    axis = _dim("diff", self, dim)
    for _ in range(n):
        k = out.shape[axis]
        out = narrow(out, axis, 1, k - 1) - narrow(out, axis, 0, k - 1)
    return out


def dist(self: Any, other: Any, p: Any = 2) -> Any:
    return (self - other).norm(p)


def sum_to_size(self: Any, *size: Any) -> Any:
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], list | tuple) else size
    out = self
    lead = out.ndim - len(shape)
    if lead:
        out = out.sum(dim=tuple(range(lead)))
    dims = tuple(i for i, s in enumerate(shape) if s == 1 and out.shape[i] != 1)
    return out.sum(dim=dims, keepdim=True) if dims else out


# --- random fills ------------------------------------------------------------------------------

def _generator(op: str, generator: Any) -> Generator:
    return check_generator(op, generator) if generator is not None else default_generator


def bernoulli(self: Any, p: Any = None, generator: Any = None) -> Any:
    """0/1 draws with probability ``self`` (or ``p``), in self's dtype; no gradient."""
    gen = _generator("bernoulli", generator)
    probs = self.detach().numpy() if p is None else np.broadcast_to(
        p.numpy() if isinstance(p, Tensor) else p, self.shape)
    draw = np.asarray(_draw(gen, "uniform", self.shape, np.float64, np))
    return _leaf((draw < probs).astype(self.dtype))


def bernoulli_(self: Any, p: Any = 0.5, generator: Any = None) -> Any:
    gen = _generator("bernoulli_", generator)
    probs = p.numpy() if isinstance(p, Tensor) else p
    draw = np.asarray(_draw(gen, "uniform", self.shape, np.float64, np))
    value = (draw < probs).astype(self.dtype)
    return _inplace("bernoulli_", self, lambda t: _leaf(value))


def exponential_(self: Any, lambd: float = 1.0, generator: Any = None) -> Any:
    gen = _generator("exponential_", generator)
    draw = np.asarray(_draw(gen, "uniform", self.shape, np.float64, np))
    value = (-np.log1p(-draw) / lambd).astype(self.dtype)
    return _inplace("exponential_", self, lambda t: _leaf(value))


def random_(self: Any, low: Any = 0, high: Any = None, generator: Any = None) -> Any:
    gen = _generator("random_", generator)
    if high is None:
        low, high = 0, (low if low else 2 ** 24)
    draw = np.asarray(_draw(gen, "uniform", self.shape, np.float64, np))
    value = np.floor(low + draw * (high - low)).astype(self.dtype)
    return _inplace("random_", self, lambda t: _leaf(value))


# --- in-place forms of unary and binary methods -------------------------------------------------

def apply_inplace(self: Any, op: str, compute: Callable[[Any], Any]) -> Any:
    """``self`` overwritten with ``compute(self)`` as one recorded in-place op (the leaf and
    version rules of every in-place op apply): ``F.relu(x, inplace=True)`` and the like."""
    return _inplace(op, self, lambda a: compute(a))


def _inplace_of(name: str) -> Callable[..., Tensor]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(Tensor, name)
        return _inplace(f"{name}_", self, lambda a, *o: fn(a, *args, **kwargs))

    method.__name__ = f"{name}_"
    return method


def index_fill_(self: Any, dim: builtins.int, index: Any, value: Any) -> Any:
    axis = _dim("index_fill_", self, dim)
    mask = np.zeros(self.shape, np.bool_)
    mask[_along(axis, self.ndim, _index_tensor("index_fill_", index).numpy())] = True
    return self.masked_fill_(_leaf(mask), value)


def index_copy_(self: Any, dim: builtins.int, index: Any, source: Any) -> Any:
    axis = _dim("index_copy_", self, dim)
    idx = _index_tensor("index_copy_", index)
    self[_along(axis, self.ndim, idx)] = source
    return self


def scatter(self: Any, dim: builtins.int, index: Any, src: Any = None, value: Any = None
            ) -> Any:
    return self.clone().scatter_(dim, index, src, value)


def scatter_add_(self: Any, dim: builtins.int, index: Any, src: Any) -> Any:
    """``self[..., index[i], ...] += src[i]`` along ``dim`` (repeated indices add up); a float
    ``src`` goes through ``take_adjoint`` (scatter-add, VJP: gather), so it gets gradients."""
    axis = _dim("scatter_add_", self, dim)
    idx = _index_tensor("scatter_add_", index).numpy()
    source = src if isinstance(src, Tensor) else tensor(np.asarray(src))
    if source.ndim != idx.ndim or builtins.any(
            a < b for a, b in zip(source.shape, idx.shape, strict=True)):
        raise ShapeError(f"scatter_add_: src {tuple(source.shape)} must have the index's "
                         f"number of dimensions and be at least as large, found index "
                         f"{idx.shape}")
    if idx.ndim != self.ndim or builtins.any(
            idx.shape[d] > self.shape[d] for d in range(idx.ndim) if d != axis):
        raise ShapeError(f"scatter_add_: index {idx.shape} must have self's number of "
                         f"dimensions and fit self {tuple(self.shape)} off dimension {axis}")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.shape[axis]):
        raise IndexRangeError(f"scatter_add_: index out of range for dimension {axis} of size "
                              f"{self.shape[axis]}")
    grids: list[Any] = list(np.indices(idx.shape, sparse=True))
    grids[axis] = idx
    part = source[tuple(slice(0, n) for n in idx.shape)]
    if self.dtype.kind == "f" and part.dtype.kind == "f":
        added = RECORDER.record(_TAKE_ADJOINT, (part.to(self.dtype),),
                                {"index": tuple(grids), "shape": tuple(self.shape)})
        return self.add_(added)
    add = np.zeros(self.shape, self.dtype)
    np.add.at(add, tuple(grids), part.numpy())
    return self.add_(_leaf(add))


def scatter_add(self: Any, dim: builtins.int, index: Any, src: Any) -> Any:
    return scatter_add_(self.clone(), dim, index, src)


def apply_(self: Any, callable: Callable[[Any], Any]) -> Any:  # noqa: A002
    values = np.vectorize(callable, otypes=[self.dtype])(self.numpy())
    return _inplace("apply_", self, lambda t: _leaf(np.asarray(values, self.dtype)))


def map_(self: Any, other: Tensor, callable: Callable[[Any, Any], Any]) -> Any:  # noqa: A002
    values = np.vectorize(callable, otypes=[self.dtype])(self.numpy(), other.numpy())
    return _inplace("map_", self, lambda t: _leaf(np.asarray(values, self.dtype)))


_METHODS: dict[str, Callable[..., Any]] = {
    "split": split, "chunk": chunk, "unbind": unbind, "tensor_split": tensor_split,
    "narrow": narrow, "select": select, "diag": diag, "diagonal": diagonal_,
    "diag_embed": diag_embed, "trace": trace, "fill_diagonal_": fill_diagonal_, "tril": tril,
    "triu": triu, "tril_": tril_, "triu_": triu_, "gather": gather,
    "take_along_dim": take_along_dim, "take": take, "index_select": index_select,
    "masked_select": masked_select, "flip": flip, "fliplr": fliplr, "flipud": flipud,
    "roll": roll, "repeat_interleave": repeat_interleave, "tile": tile, "movedim": movedim,
    "moveaxis": movedim, "swapaxes": swapaxes, "swapdims": swapaxes, "unflatten": unflatten,
    "ravel": ravel, "broadcast_to": broadcast_to, "type_as": type_as, "new_empty": new_empty,
    "squeeze_": squeeze_, "unsqueeze_": unsqueeze_, "is_contiguous": is_contiguous,
    "stride": stride, "half": half, "logsumexp": logsumexp, "log1p": log1p, "expm1": expm1,
    "log2": log2, "log10": log10, "exp2": exp2, "tan": tan, "sinh": sinh, "cosh": cosh,
    "clamp_min": clamp_min, "clamp_max": clamp_max, "maximum": maximum, "minimum": minimum,
    "fmax": fmax, "fmin": fmin, "where": where, "lerp": lerp, "addmm": addmm, "addmv": addmv,
    "baddbmm": baddbmm, "addbmm": addbmm, "addcmul": addcmul, "addcdiv": addcdiv, "bmm": bmm,
    "mv": mv, "outer": outer, "ger": outer, "inner": inner, "remainder": remainder,
    "fmod": fmod, "floor_divide": floor_divide, "frac": frac, "isinf": isinf,
    "isposinf": isposinf, "isneginf": isneginf, "isclose": isclose,
    "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
    "not_equal": not_equal, "greater": greater, "less": less, "greater_equal": greater_equal,
    "less_equal": less_equal, "signbit": signbit, "count_nonzero": count_nonzero,
    "nonzero": nonzero, "argwhere": argwhere, "unique": unique, "bincount": bincount,
    "median": median, "kthvalue": kthvalue, "cumprod": cumprod, "diff": diff, "dist": dist,
    "sum_to_size": sum_to_size, "bernoulli": bernoulli, "bernoulli_": bernoulli_,
    "exponential_": exponential_, "random_": random_, "index_fill_": index_fill_,
    "index_copy_": index_copy_, "scatter": scatter,
    "scatter_add_": scatter_add_, "scatter_add": scatter_add, "apply_": apply_, "map_": map_,
}

# In-place forms of methods Tensor has out of place: x.sin_() is x.copy_(x.sin()) recorded as
# one in-place op (the leaf and version rules of every in-place op apply).
_INPLACE_OF = ("sin", "cos", "log", "floor", "ceil", "round", "trunc", "reciprocal", "sign",
               "square", "rsqrt", "log1p", "expm1", "clamp_min", "clamp_max", "lerp",
               "addmm", "baddbmm", "remainder", "fmod", "tan", "sinh", "cosh", "log2", "log10",
               "exp2", "frac", "logical_not", "maximum", "minimum")


def install() -> None:
    """Attach the methods to ``Tensor`` (names it has already are left alone)."""
    for key, fn in _METHODS.items():
        if key not in vars(Tensor) and not hasattr(Tensor, key):
            setattr(Tensor, key, checked_signature(fn))
    for base in _INPLACE_OF:
        key = f"{base}_"
        if not hasattr(Tensor, key):
            setattr(Tensor, key, _inplace_of(base))


install()
