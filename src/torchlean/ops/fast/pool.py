"""Fast max pooling (NumPy only; see ``ops.fast``): the same maxima and the same first-maximum
routing as the reference, bit for bit, in the input's memory layout.

- Forward: the reference's offset views and running ``maximum``, but the first copy keeps the
  input's layout (``order="K"``): a channels-last activation (what the fast convolution writes,
  kept by relu) pools into a channels-last result, which the next convolution reads as its
  im2col source without a transposing copy (the reference's ``copy()`` gives (N, C, H, W)
  order, and the convolution after it then gathers single floats).
- VJP: the forward's output *is* the window maxima, and the VJP receives it, so no maxima are
  recomputed and no geometry is checked again (the recording checked it). The gradient buffer
  takes the input's layout (``empty_like`` / ``zeros_like``), and each kernel offset's
  first-maximum mask is built, used and dropped in one pass over the offsets (the reference
  keeps a list of masks, whose copies are in (N, C, H, W) order).

Measured and not taken: a reshape-and-reduce forward for tiled windows (NumPy reduces over two
inner axes of a 6-D view far slower than the offset views' ``maximum``), and an argmax index kept
for the backward (three passes per offset in the forward to save two in the backward).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ..pool import _infer_d, _offset_views, geometry
from ..windows import axes_tuple, crop_spatial, kernel_offsets, pad_spatial


def _attrs(op: str, x: Any, attrs: dict[str, Any],
           fixed_d: int | None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    d = _infer_d(op, tuple(x.shape), attrs["kernel_size"], fixed_d)
    k = axes_tuple(attrs["kernel_size"], d)
    stride = attrs.get("stride")
    s = k if stride is None else axes_tuple(stride, d)
    return k, s, axes_tuple(attrs.get("padding", 0), d)


def max_forward(fixed_d: int | None) -> Any:
    """Fast forward of ``max_pool`` / ``max_pool2d`` / ``max_pool2d_pad`` (layout-keeping)."""

    def forward(x: Any, **a: Any) -> Any:
        # The reference's checks (an array-interpreter call reaches here unchecked too).
        _, k, s, p = geometry("max_pool", tuple(x.shape), a["kernel_size"], a.get("stride"),
                              a.get("padding", 0), fixed_d)[0]
        views = _offset_views(pad_spatial(x, p, -np.inf), k, s)
        best = views[0].copy(order="K")
        for v in views[1:]:
            np.maximum(best, v, out=best)
        return best

    return forward


def _backward(x: Any, g: Any, best: Any, k: tuple[int, ...], s: tuple[int, ...],
              p: tuple[int, ...]) -> Any:
    """g routed to each window's first maximum (row-major window order), as the reference's
    ``max_pool_backward`` with the maxima given; the result in ``x``'s layout."""
    d = len(k)
    spatial = tuple(x.shape[x.ndim - d:])
    out = g.shape[g.ndim - d:]
    tiled = s == k and not any(p) and all(
        o * kk == n for o, kk, n in zip(out, k, spatial, strict=True))
    if any(p):
        full = tuple(n + 2 * pp for n, pp in zip(spatial, p, strict=True))
        buf = np.zeros(x.shape[: x.ndim - d] + full, dtype=g.dtype)
    else:
        # Windows that tile the input exactly write each cell once: no zero fill.
        buf = (np.empty_like if tiled else np.zeros_like)(x, dtype=g.dtype)
    if _order(g) != _order(best):
        # One copy into the maxima's layout (a cotangent reshaped back from a flattened linear
        # layer arrives in (N, C, H, W) order): the passes below then all run in one order.
        g = _like(best, g)
    views = _offset_views(pad_spatial(x, p, -np.inf), k, s)
    taken = None
    last = len(views) - 1
    for j, (off, v) in enumerate(zip(kernel_offsets(k), views, strict=True)):
        hit = np.equal(v, best)
        if taken is None:
            taken = hit
        else:
            np.greater(hit, taken, out=hit)  # a maximum here and none at an earlier offset
            if j < last:
                np.logical_or(taken, hit, out=taken)
        target = buf[(Ellipsis,) + tuple(slice(o, o + ss * (n - 1) + 1, ss)
                                         for o, ss, n in zip(off, s, out, strict=True))]
        if tiled:
            np.multiply(g, hit, out=target)
        else:
            target += np.multiply(g, hit, dtype=g.dtype)
    y = crop_spatial(buf, p, spatial)
    return y if not any(p) else np.ascontiguousarray(y)


def _order(a: Any) -> tuple[int, ...]:
    """The axes from the largest stride to the smallest: the array's memory order."""
    return tuple(sorted(range(a.ndim), key=lambda i: -abs(a.strides[i])))


def _like(best: Any, g: Any) -> Any:
    out = np.empty_like(best, dtype=g.dtype)
    out[...] = g
    return out


def max_vjp(fixed_d: int | None) -> Any:
    """Fast VJP of ``max_pool`` / ``max_pool2d`` / ``max_pool2d_pad``."""

    def vjp(ops: Any, g: Any, xs: Any, out: Any, **attrs: Any) -> tuple[Any]:
        x = xs[0]
        k, s, p = _attrs("max_pool", x, attrs, fixed_d)
        return (_backward(x, g, out, k, s, p),)

    return vjp


attach_fast("max_pool", forward=max_forward(None), vjp=max_vjp(None))
attach_fast("max_pool2d", forward=max_forward(2), vjp=max_vjp(2))
attach_fast("max_pool2d_pad", forward=max_forward(2), vjp=max_vjp(2))
