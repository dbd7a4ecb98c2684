"""General indexing: ``take`` (``x[index]`` with NumPy's rules) and its adjoint ``take_adjoint``.

``index`` is a static attribute, a tuple whose entries are ints, slices, ``None`` (a new axis),
``Ellipsis`` or integer arrays (gathers, broadcast together), as NumPy and PyTorch index. Boolean
masks are turned into integer arrays before recording (``normalize_index``), so the output shape
never depends on values. This is what ``Tensor.__getitem__`` and ``Ref.__getitem__`` record for
anything beyond ``x[i]`` and ``x[a:b]`` on axis 0.

Both ops are linear and each is the other's adjoint: the VJP of ``take`` scatters the cotangent
back (adding where an integer index repeats an entry), and the VJP of ``take_adjoint`` gathers.
So forward mode and every higher derivative come for free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import IndexRangeError, ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, device_constant, register
from ..core.shape import Shape, as_shape
from .array_api import contiguous
from .samples import normal


def normalize_index(op: str, index: Any, shape: Shape) -> tuple[Any, ...]:
    """A user index as the canonical attribute: a tuple of int / slice / None / Ellipsis /
    int64 arrays; boolean masks become the integer arrays of their true positions."""
    entries = index if isinstance(index, tuple) else (index,)
    out: list[Any] = []
    for entry in entries:
        if entry is None or entry is Ellipsis or isinstance(entry, slice):
            out.append(entry)
        elif isinstance(entry, bool | np.bool_):
            raise ShapeError(f"{op}: a bare bool is not an index, found {entry!r}")
        elif isinstance(entry, int | np.integer):
            out.append(int(entry))
        else:
            arr = np.asarray(entry)
            if arr.dtype.kind == "b":
                out.extend(np.nonzero(arr))
            elif arr.dtype.kind in "iu" or (arr.size == 0 and arr.dtype.kind == "f"):
                out.append(arr.astype(np.int64))
            else:
                raise ShapeError(f"{op}: index entries must be ints, slices, None, ..., or int / "
                                 f"bool arrays, found {entry!r}")
    result = tuple(out)
    _indexed_shape(op, shape, result)  # checks ranges and counts axes
    return result


def _dummy(shape: Shape) -> np.ndarray:
    # A zero-strided array of ``shape``: indexing it gives NumPy's result shape without
    # allocating the input (only integer gathers allocate, and only the output's size).
    return np.lib.stride_tricks.as_strided(np.zeros((), dtype=bool), shape=shape,
                                           strides=(0,) * len(shape))


def _indexed_shape(op: str, shape: Shape, index: Any) -> Shape:
    if not isinstance(index, tuple):
        raise ShapeError(f"{op}: index must be a tuple (see normalize_index), found {index!r}")
    try:
        return tuple(_dummy(shape)[index].shape)
    except IndexError as exc:
        raise IndexRangeError(f"{op}: index {_show(index)} does not fit shape {shape}: "
                              f"{exc}") from None
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{op}: bad index {_show(index)} for shape {shape}: {exc}") from None


def _show(index: Any) -> str:
    if not isinstance(index, tuple):
        return repr(index)
    return "(" + ", ".join(f"array{e.shape}" if isinstance(e, np.ndarray) else repr(e)
                           for e in index) + ")"


def _has_arrays(index: tuple[Any, ...]) -> bool:
    return any(isinstance(e, np.ndarray) for e in index)


def _on(xp: Any, index: tuple[Any, ...]) -> tuple[Any, ...]:
    """``index`` with its integer arrays as arrays of namespace ``xp`` (uploaded once each)."""
    if xp is np or not _has_arrays(index):
        return index
    return tuple(device_constant(e, xp) if isinstance(e, np.ndarray) else e for e in index)


def _take(x: Any, index: tuple[Any, ...]) -> Any:
    xp = namespace_of(x)
    out = x[_on(xp, index)]
    if not getattr(out, "ndim", 0):  # all-integer index: a 0-d array (ascontiguousarray
        return xp.asarray(out).copy()  # would make it 1-d)
    return contiguous(out)


def _take_adjoint(g: Any, index: tuple[Any, ...], shape: Shape) -> Any:
    xp = namespace_of(g)
    out = xp.zeros(tuple(shape), dtype=g.dtype)
    if _has_arrays(index):
        xp.add.at(out, _on(xp, index), g)  # a repeated integer index adds, never overwrites
    else:
        out[index] = g  # basic indexing never selects an entry twice
    return out


def _take_adjoint_infer(g: Shape, index: Any, shape: Any) -> Shape:
    target = as_shape("take_adjoint", shape)
    expected = _indexed_shape("take_adjoint", target, index)
    if tuple(g) != expected:
        raise ShapeError(f"take_adjoint: cotangent has shape {tuple(g)}, x[index] of shape "
                         f"{target} has shape {expected}")
    return target


def _torch_take(torch: Any, x: Any, index: tuple[Any, ...]) -> Any:
    """PyTorch's x[index]; PyTorch has no negative slice steps, so those read x through a
    flat gather of the positions NumPy's rules select."""
    if any(isinstance(e, slice) and e.step is not None and e.step < 0 for e in index):
        positions = np.arange(int(np.prod(tuple(x.shape), dtype=np.int64))).reshape(
            tuple(x.shape))[index]
        return x.reshape(-1)[torch.as_tensor(np.ascontiguousarray(positions))]
    return x[tuple(torch.as_tensor(e) if isinstance(e, np.ndarray) else e for e in index)]


def _torch_take_adjoint(torch: Any, g: Any, index: tuple[Any, ...], shape: Any) -> Any:
    """zeros(shape) with g added at the positions NumPy's x[index] reads (index_add)."""
    target = tuple(int(d) for d in shape)
    size = int(np.prod(target, dtype=np.int64))
    positions = np.ascontiguousarray(np.arange(size).reshape(target)[index]).reshape(-1)
    flat = torch.zeros(size, dtype=g.dtype).index_add(0, torch.as_tensor(positions),
                                                      g.reshape(-1))
    return flat.reshape(target)


_INDEXES: list[tuple[tuple[int, ...], tuple[Any, ...], str]] = [
    ((3, 4, 5), (1, slice(None), slice(0, 5, 2)), "int, full slice, strided slice"),
    ((3, 4, 5), (Ellipsis, 0), "ellipsis then int"),
    ((3, 4), (np.array([0, 2, 2]),), "gather with a repeated row"),
    ((3, 4), (None, slice(1, 3)), "new axis"),
    ((3, 4, 5), (np.array([[0, 1], [2, 0]]), slice(None), np.array([1, 3])),
     "two broadcast gathers around a slice"),
    ((4, 3), (slice(3, 0, -1), -1), "negative step and negative int"),
]


def _take_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((normal(rng, *shape),), {"index": index}, note=note)
            for shape, index, note in _INDEXES]


def _take_adjoint_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for shape, index, note in _INDEXES:
        g = normal(rng, *_indexed_shape("take_adjoint", shape, index))
        out.append(Sample((g,), {"index": index, "shape": shape}, note=note))
    return out


register(Primitive(
    "take", ("x",), lambda s, index: _indexed_shape("take", s, index), _take,
    attrs=("index",), attr_kinds={"index": K.INDEX_TUPLE},
    vjp=lambda ops, g, xs, out, index: (ops.take_adjoint(g, index=index,
                                                         shape=tuple(xs[0].shape)),),
    linear=True,
    semantics="x[index] with NumPy's (and PyTorch's) indexing rules; index is a tuple of ints "
              "(negative counts from the end), slices (any step), None (new axis), Ellipsis and "
              "integer arrays (gathers, broadcast together; boolean masks are given as the "
              "integer positions of their true entries). An index out of range is an "
              "IndexRangeError. VJP: take_adjoint (scatter-add back).",
    samples=_take_samples,
    torch_ref=_torch_take,
    error_inputs=[
        ErrorInput(((3, 4),), {"index": (3,)}, IndexRangeError, "take: index .* does not fit"),
        ErrorInput(((3, 4),), {"index": (0, 0, 0)}, IndexRangeError, "take: index .* does not "
                   "fit"),
        ErrorInput(((3, 4),), {"index": 1}, ShapeError, "take: index must be a tuple"),
    ],
))

register(Primitive(
    "take_adjoint", ("g",), _take_adjoint_infer, _take_adjoint, attrs=("index", "shape"),
    attr_kinds={"index": K.INDEX_TUPLE, "shape": K.SHAPE},
    vjp=lambda ops, g, xs, out, index, shape: (ops.take(g, index=index),),
    linear=True,
    semantics="The adjoint of take: zeros of `shape` with g added at x[index] (an entry an "
              "integer index selects k times receives the sum of its k cotangents). g must "
              "have the shape of x[index] (ShapeError otherwise). VJP: take.",
    samples=_take_adjoint_samples,
    torch_ref=_torch_take_adjoint,
    error_inputs=[
        ErrorInput(((2,),), {"index": (0,), "shape": (3, 4)}, ShapeError,
                   r"take_adjoint: cotangent has shape \(2,\)"),
    ],
))
