"""Reference definitions of the general indexing primitives (``torchlean.ops.take``).

``take`` is defined by the position map of NumPy's indexing rules: label every entry of a
``shape`` array by its row-major position, index that label array, and each output entry is the
input entry whose label it received. ``take_adjoint`` walks the same map backwards, adding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import empty, prepare, unflat_index
from .defs import define


def _positions(shape: tuple[int, ...], index: tuple[Any, ...]) -> np.ndarray:
    """For each entry of x[index], the row-major position in x it comes from (NumPy's rules:
    ints pick, slices step, None adds an axis, Ellipsis fills, integer arrays gather)."""
    return np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[index]


@define("take", rational=True)
def take(x: Any, index: Any) -> np.ndarray:
    """out[j] = x[i] where i is the position that NumPy's x[index] reads for output entry j."""
    (x,) = prepare("take", x, index=index)
    positions = _positions(x.shape, index)
    out = empty(positions.shape)
    for j in np.ndindex(out.shape):
        out[j] = x[unflat_index(int(positions[j]), x.shape)]
    return out


@define("take_adjoint", rational=True)
def take_adjoint(g: Any, index: Any, shape: Any) -> np.ndarray:
    """out = zeros(shape); for every entry j of g: out[i] += g[j], where i is the position of
    shape that x[index] reads for entry j (an index read k times sums k entries of g)."""
    (g,) = prepare("take_adjoint", g, index=index, shape=shape)
    target = tuple(int(d) for d in shape)
    positions = _positions(target, index)
    out = empty(target)
    for i in np.ndindex(target):
        out[i] = 0
    for j in np.ndindex(positions.shape):
        i = unflat_index(int(positions[j]), target)
        out[i] = out[i] + g[j]
    return out
