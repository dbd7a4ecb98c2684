"""Fast max pooling (NumPy only; see ``ops.fast``): the forward keeps its window maxima.

The reference backward (``max_pool_backward``) recomputes every window's maximum to find the
first one; here the forward (the reference kernel, the same bits) keeps its output against its
input (``residuals``), and the backward reads it instead: ``prod(kernel) - 1`` fewer passes
over the windows per step. A miss recomputes it, so the bits are the reference's either way.

Measured and not taken: a reshape-and-reduce forward for tiled windows (NumPy reduces over two
inner axes of a 6-D view far slower than the offset views' ``maximum``), and an argmax index kept
for the backward (three passes per offset in the forward to save two in the backward).
"""

from __future__ import annotations

from typing import Any

from ...core.registry import attach_fast
from ..pool import _max_pool, _max_pool_backward, geometry
from ..windows import axes_tuple
from . import residuals

_BEST = "pool.max"


def _key(x: Any, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]) -> Any:
    return (x.shape, x.dtype.str, k, s, p)


def max_forward(fixed_d: int | None) -> Any:
    """Fast ``max_pool`` / ``max_pool2d`` / ``max_pool2d_pad`` forward (keeps the maxima)."""

    def forward(x: Any, **a: Any) -> Any:
        (_, k, s, p), _ = geometry("max_pool", x.shape, a["kernel_size"], a.get("stride"),
                                   a.get("padding", 0), fixed_d)
        best = _max_pool(x, a["kernel_size"], a.get("stride"), a.get("padding", 0), fixed_d)
        residuals.save(x, _BEST, _key(x, k, s, p), best)
        return best

    return forward


def max_pool_backward(x: Any, g: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    """Fast ``max_pool_backward``: the reference with the forward's maxima."""
    k = tuple(kernel_size)
    s, p = axes_tuple(stride, len(k)), axes_tuple(padding, len(k))
    best = residuals.load(x, _BEST, _key(x, k, s, p))
    return _max_pool_backward(x, g, k, s, p, best)


attach_fast("max_pool", forward=max_forward(None))
attach_fast("max_pool2d", forward=max_forward(2))
attach_fast("max_pool2d_pad", forward=max_forward(2))
attach_fast("max_pool_backward", forward=max_pool_backward)
