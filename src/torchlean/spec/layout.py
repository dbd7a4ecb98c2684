"""Reference definitions of the layout primitives (``torchlean.ops.layout``).

Every output entry is one input entry (or, for ``sum_to``, a sum of them) found by index
arithmetic: row-major positions for reshape and flatten, an axis permutation for the
transposes, NumPy's broadcast map (``broadcast_index``) for broadcast_to and sum_to.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_shape, broadcast_index, empty, flat_index, prepare, unflat_index
from .defs import define


@define("reshape", rational=True)
def reshape(x: Any, shape: Any) -> np.ndarray:
    """out[j] = x[i] where i and j sit at the same row-major position: out.flat[k] = x.flat[k].

    The new shape must hold as many entries as x.
    """
    (x,) = prepare("reshape", x, shape=shape)
    out = empty(as_shape("reshape", shape))
    for j in np.ndindex(out.shape):
        out[j] = x[unflat_index(flat_index(j, out.shape), x.shape)]
    return out


@define("flatten", rational=True)
def flatten(x: Any) -> np.ndarray:
    """out[k] = the entry of x at row-major position k (last axis fastest), for k < x.size."""
    (x,) = prepare("flatten", x)
    out = empty((x.size,))
    for i in np.ndindex(x.shape):
        out[flat_index(i, x.shape)] = x[i]
    return out


@define("transpose2d", rational=True)
def transpose2d(x: Any) -> np.ndarray:
    """out[j, i] = x[i, j] for a matrix x (m, n): out (n, m)."""
    (x,) = prepare("transpose2d", x)
    m, n = x.shape
    out = empty((n, m))
    for i, j in np.ndindex(x.shape):
        out[j, i] = x[i, j]
    return out


@define("transpose3d_first_to_last", rational=True)
def transpose3d_first_to_last(x: Any) -> np.ndarray:
    """out[j, k, i] = x[i, j, k] for x (a, b, c): out (b, c, a), the first axis moved last."""
    (x,) = prepare("transpose3d_first_to_last", x)
    a, b, c = x.shape
    out = empty((b, c, a))
    for i, j, k in np.ndindex(x.shape):
        out[j, k, i] = x[i, j, k]
    return out


@define("transpose3d_last_to_first", rational=True)
def transpose3d_last_to_first(x: Any) -> np.ndarray:
    """out[k, i, j] = x[i, j, k] for x (a, b, c): out (c, a, b), the last axis moved first."""
    (x,) = prepare("transpose3d_last_to_first", x)
    a, b, c = x.shape
    out = empty((c, a, b))
    for i, j, k in np.ndindex(x.shape):
        out[k, i, j] = x[i, j, k]
    return out


@define("transpose3d_last_two", rational=True)
def transpose3d_last_two(x: Any) -> np.ndarray:
    """out[i, k, j] = x[i, j, k] for x (a, b, c): out (a, c, b), the last two axes swapped."""
    (x,) = prepare("transpose3d_last_two", x)
    a, b, c = x.shape
    out = empty((a, c, b))
    for i, j, k in np.ndindex(x.shape):
        out[i, k, j] = x[i, j, k]
    return out


@define("swap_adjacent_at_depth", rational=True)
def swap_adjacent_at_depth(x: Any, depth: int) -> np.ndarray:
    """out[..., j, i, ...] = x[..., i, j, ...] with i, j at axes depth and depth + 1.

    The output shape is x's with those two lengths exchanged (0 <= depth < x.ndim - 1).
    """
    (x,) = prepare("swap_adjacent_at_depth", x, depth=depth)

    def swapped(index: tuple[int, ...]) -> tuple[int, ...]:
        return index[:depth] + (index[depth + 1], index[depth]) + index[depth + 2:]

    out = empty(swapped(x.shape))
    for i in np.ndindex(x.shape):
        out[swapped(i)] = x[i]
    return out


@define("broadcast_to", rational=True)
def broadcast_to(x: Any, shape: Any) -> np.ndarray:
    """out[j] = x[broadcast_index(j, x.shape)] for every index j of ``shape``.

    NumPy's rule: shapes align on the right, missing leading axes and axes of length 1 of x are
    repeated; every other length of x must equal the target's.
    """
    (x,) = prepare("broadcast_to", x, shape=shape)
    out = empty(as_shape("broadcast_to", shape))
    for j in np.ndindex(out.shape):
        out[j] = x[broadcast_index(j, x.shape)]
    return out


@define("sum_to", rational=True)
def sum_to(x: Any, shape: Any) -> np.ndarray:
    """out[j] = sum of x[i] over every index i of x with broadcast_index(i, shape) == j.

    ``shape`` must broadcast to x's shape; each output entry sums the entries of x that
    broadcast_to(out, x.shape) would have copied it to (the adjoint of broadcast_to).
    """
    (x,) = prepare("sum_to", x, shape=shape)
    out = empty(as_shape("sum_to", shape))
    for j in np.ndindex(out.shape):
        out[j] = 0
    for i in np.ndindex(x.shape):
        j = broadcast_index(i, out.shape)
        out[j] = out[j] + x[i]
    return out
