"""torch's indexing rules, as NumPy index tuples.

PyTorch and NumPy agree on most indexing but not all of it, and each difference is a silent
wrong answer if left to NumPy:

* an integer (or a 0-d integer tensor) is a *basic* index in torch: it selects before any
  advanced indexing, so ``x[0, :, [1, 2]]`` has shape (3, 2) in torch and (2, 3) in NumPy;
* a boolean mask must match the shape of the axes it covers exactly (NumPy accepts some
  mismatches, e.g. a list ``[True]`` for a length-3 axis in older versions);
* integers out of range are an ``IndexRangeError`` naming the axis.

``torch_steps`` splits an index into one or two NumPy index tuples applied in turn: first every
integer, slice, ``None`` and ``...`` (a view), then the advanced entries (integer and boolean
arrays) over the remaining axes, with NumPy's rule among themselves (the same as torch's once
the integers are gone). Index entries must already be plain values (tensors replaced by arrays
by the caller).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import IndexRangeError, ShapeError

Step = tuple[Any, ...]


def _kind(e: Any) -> str:
    if e is None:
        return "none"
    if e is Ellipsis:
        return "ellipsis"
    if isinstance(e, slice):
        return "slice"
    if isinstance(e, bool | np.bool_):
        return "bool"  # x[True] adds an axis (as None); x[False] an empty one
    if isinstance(e, int | np.integer):
        return "int"
    if isinstance(e, np.ndarray):
        if e.dtype.kind == "b":
            return "mask"
        if e.dtype.kind in "iu":
            return "int" if e.ndim == 0 else "array"
        if e.size == 0:
            return "array"
        raise ShapeError(f"indexing: tensors used as indices must be long, int, byte or bool "
                         f"tensors, found dtype {e.dtype}")
    raise ShapeError(f"indexing: only integers, slices (`:`), ellipsis (`...`), None and long or "
                     f"bool tensors are valid indices, found {type(e).__name__}")


def _as_entry(e: Any) -> Any:
    if isinstance(e, range):  # x[range(n), target]: an index list, as torch reads it
        e = list(e)
    if isinstance(e, list | tuple):
        arr = np.asarray(e)
        if arr.size == 0:
            return arr.astype(np.int64)
        return arr
    return e


def torch_steps(index: Any, shape: tuple[int, ...]) -> list[Step]:
    """The NumPy index tuples that, applied in order, give torch's ``x[index]`` for a value of
    ``shape``; checked against ``shape`` (ranges, mask shapes, too many indices)."""
    entries = [_as_entry(e) for e in (index if isinstance(index, tuple) else (index,))]
    kinds = [_kind(e) for e in entries]
    if kinds.count("ellipsis") > 1:
        raise ShapeError("indexing: an index can only have a single ellipsis ('...')")
    used = sum(entries[k].ndim if kind == "mask" else (0 if kind in ("none", "ellipsis", "bool")
                                                      else 1)
               for k, kind in enumerate(kinds))
    if used > len(shape):
        raise IndexRangeError(f"indexing: too many indices for a tensor of dimension "
                              f"{len(shape)} (found {used})")
    if "ellipsis" in kinds:
        k = kinds.index("ellipsis")
        fill = len(shape) - used
        entries[k:k + 1] = [slice(None)] * fill
        kinds[k:k + 1] = ["slice"] * fill
    first: list[Any] = []
    second: list[Any] = []
    advanced = False
    axis = 0
    for e, kind in zip(entries, kinds, strict=True):
        if kind in ("none", "bool"):
            first.append(e if kind == "none" else None)
            second.append(slice(None) if kind == "none" or e else slice(0, 0))
            continue
        if kind == "int":
            n = shape[axis]
            i = int(e)
            if not -n <= i < n:
                raise IndexRangeError(f"indexing: index {i} is out of bounds for dimension "
                                      f"{axis} with size {n}")
            first.append(i)
            axis += 1
            continue
        if kind == "slice":
            first.append(e)
            second.append(slice(None))
            axis += 1
            continue
        advanced = True
        if kind == "mask":
            want = shape[axis:axis + e.ndim]
            if tuple(e.shape) != tuple(want):
                raise IndexRangeError(f"indexing: the shape of the mask {list(e.shape)} at index "
                                      f"{axis} does not match the shape of the indexed tensor "
                                      f"{list(want)} at index {axis}")
            first.extend([slice(None)] * e.ndim)
            second.append(e)
            axis += e.ndim
            continue
        n = shape[axis]
        if e.size and (int(e.max()) >= n or int(e.min()) < -n):
            bad = int(e.max()) if int(e.max()) >= n else int(e.min())
            raise IndexRangeError(f"indexing: index {bad} is out of bounds for dimension {axis} "
                                  f"with size {n}")
        first.append(slice(None))
        second.append(e.astype(np.int64, copy=False))
        axis += 1
    steps: list[Step] = [tuple(first)]
    if advanced:
        # the index tensors (a mask counts as its True positions) must broadcast together
        shapes = [(int(e.sum()),) if e.dtype == bool else e.shape for e in second
                  if isinstance(e, np.ndarray)]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise IndexRangeError(f"indexing: shape mismatch: indexing tensors of shapes "
                                  f"{[list(s) for s in shapes]} cannot be broadcast together"
                                  ) from None
        steps.append(tuple(second))
    return steps


def is_simple(index: Any) -> bool:
    """An index NumPy and torch read the same way with no checks beyond NumPy's own: one int
    or one slice."""
    return isinstance(index, slice) or (isinstance(index, int | np.integer)
                                        and not isinstance(index, bool))
