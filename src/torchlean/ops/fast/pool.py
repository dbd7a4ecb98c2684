"""Fast max pooling (NumPy only; see ``ops.fast``): the same maxima and the same first-maximum
routing as the reference, bit for bit, in the input's memory layout.

- Forward: the reference's offset views and running ``maximum``, but the first copy keeps the
  input's layout (``order="K"``): a channels-last activation (what the fast convolution writes,
  kept by relu) pools into a channels-last result, which the next convolution reads as its
  im2col source without a transposing copy (the reference's ``copy()`` gives (N, C, H, W)
  order, and the convolution after it then gathers single floats). Alongside, a uint8 code per
  window, the offset of its first maximum (``_forward``), kept against the output
  (``residuals``).
- VJP: the forward's output *is* the window maxima, and the VJP receives it, so no maxima are
  recomputed and no geometry is checked again (the recording checked it). The winners are
  ``code == j``, one contiguous compare per offset, instead of the reference's ``v == best``
  on the input's strided windows plus the first-of-them test (which is still the route when
  no code was kept: the same cells, so the same bits). The gradient buffer takes the input's
  layout (``empty_like`` / ``zeros_like``).

Why the code: on a channels-last activation every offset view's contiguous runs are C floats
long (16 on W3's first layer), so each strided pass costs a NumPy inner-loop call per C floats;
the code moves the VJP's four strided reads to contiguous passes over the (4x smaller) output.
Measured on W3's first pooling (32 x 16 x 28 x 28, one thread, caches flushed between calls,
interleaved): forward 551-560 -> 602-658 us, VJP 1,126-1,272 -> 683-757 us. (An earlier code
built with a boolean-mask store, ``putmask``, tripled the forward.) Measured and not taken: a
reshape-and-reduce forward for tiled windows (NumPy reduces over two inner axes of a 6-D view
far slower than the offset views' ``maximum``); de-interleaving the input into four
contiguous planes first (the copy costs what it saves: 624 -> 560 us); a numba kernel (1.2 s
to import and 2 s to compile per signature, and a plain loop ran 2 ms).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.registry import REGISTRY, attach_fast
from ...core.shape import size as prod
from ..pool import _infer_d, _offset_views, geometry
from ..windows import axes_tuple, crop_spatial, kernel_offsets, pad_spatial
from . import pool_jit, residuals

_CODE = "max_pool.code"
_NAN_CODE = 255  # a window whose maximum is NaN: no offset wins


def _attrs(op: str, x: Any, attrs: dict[str, Any],
           fixed_d: int | None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    d = _infer_d(op, tuple(x.shape), attrs["kernel_size"], fixed_d)
    k = axes_tuple(attrs["kernel_size"], d)
    stride = attrs.get("stride")
    s = k if stride is None else axes_tuple(stride, d)
    return k, s, axes_tuple(attrs.get("padding", 0), d)


def max_forward(fixed_d: int | None) -> Any:
    """Fast forward of ``max_pool`` / ``max_pool2d`` / ``max_pool2d_pad`` (layout-keeping),
    keeping each window's winning offset for the VJP (``_forward``)."""

    def forward(x: Any, **a: Any) -> Any:
        # The reference's checks (an array-interpreter call reaches here unchecked too).
        _, k, s, p = geometry("max_pool", tuple(x.shape), a["kernel_size"], a.get("stride"),
                              a.get("padding", 0), fixed_d)[0]
        best, code = _forward(x, k, s, p)
        if code is not None:
            residuals.save(best, _CODE, _key(x, k, s, p), code)
        return best

    return forward


def relu_max_forward(fixed_d: int | None) -> Any:
    """``max_pool(relu(c))`` in one call, for generated code (``engine.codegen`` swaps a relu
    whose only uses are this pooling and the relu-fused VJP, ``relu_vjp``, for it): the
    relu'd activation is never written. The result has the two calls' bits (the maximum of
    relu'd cells is relu of the maximum, NaN and signed zeros included, as NumPy's ``maximum``
    gives them). The compiled loops (``pool_jit``) take the maximum of the raw cells, so a
    window whose maximum is <= 0 keeps the code of its raw first maximum, not of its first
    relu'd zero: the relu-fused VJP routes no cell of such a window (windows that tile, where
    it tests ``maximum > 0``), so its result is the same; elsewhere, and without the loops, the
    relu'd activation is made and pooled as before. The code is kept against the result under
    ``c``'s key (``relu`` keeps shape and dtype), where ``relu_vjp`` called with ``c`` finds
    it."""

    relu = REGISTRY["relu"]

    def forward(c: Any, **a: Any) -> Any:
        _, k, s, p = geometry("max_pool", tuple(c.shape), a["kernel_size"], a.get("stride"),
                              a.get("padding", 0), fixed_d)[0]
        fused = pool_jit.forward(c, k, s, p, relu=True)
        best, code = fused if fused is not None else _forward(relu.forward(c), k, s, p)
        if code is not None:
            residuals.save(best, _CODE, _key(c, k, s, p), code)
        return best

    return forward


def _key(x: Any, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]) -> Any:
    return (tuple(x.shape), x.dtype.str, k, s, p)


def _forward(x: Any, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]
             ) -> tuple[Any, Any]:
    """The window maxima (the reference's running ``maximum`` over the offset views, the same
    bits) and, when the window has fewer than 255 cells, a uint8 ``code`` per window: the
    offset of its first maximum in row-major order, or 255 where the maximum is NaN (no cell
    wins: the reference's ``v == best`` is false everywhere there).

    The first maximum is the last offset that raised the running maximum strictly: a later
    equal value (``-0.0`` against ``0.0`` included) does not raise it, and the reference's
    equality picks the earliest equal cell too. Raising is read from the running maximum
    itself (``new > old``, both contiguous) and recorded as ``code = max(code, raised * j)``
    (``j`` only grows), so the forward adds three contiguous passes over the output per
    offset to its one strided read, and the VJP reads no input window at all."""
    compiled = pool_jit.forward(x, k, s, p)  # large channels-last 2-D poolings (numba)
    if compiled is not None:
        return compiled
    views = _offset_views(pad_spatial(x, p, -np.inf), k, s)
    best = views[0].copy(order="K")
    if len(views) >= _NAN_CODE or not views[0].size:
        for v in views[1:]:
            np.maximum(best, v, out=best)
        return best, None
    code = np.zeros_like(best, dtype=np.uint8)
    spare = np.empty_like(best)
    raised = np.empty_like(best, dtype=bool)
    step = np.empty_like(code)
    for j, v in enumerate(views[1:], 1):
        np.maximum(best, v, out=spare)
        np.greater(spare, best, out=raised)
        np.multiply(raised.view(np.uint8), np.uint8(j), out=step)
        np.maximum(code, step, out=code)
        best, spare = spare, best
    np.not_equal(best, best, out=raised)  # NaN windows
    np.multiply(raised.view(np.uint8), np.uint8(_NAN_CODE), out=step)
    np.maximum(code, step, out=code)
    return best, code


def _backward(x: Any, g: Any, best: Any, k: tuple[int, ...], s: tuple[int, ...],
              p: tuple[int, ...], code: Any = None, positive: bool = False) -> Any:
    """g routed to each window's first maximum (row-major window order), as the reference's
    ``max_pool_backward`` with the maxima given; the result in ``x``'s layout. With the
    forward's ``code`` the winners are ``code == j`` (a contiguous uint8 compare per offset);
    without it, the reference's ``v == best`` and the first-of-them test on the input's
    windows (the same cells, so the same bits). ``positive``: only windows whose maximum is
    > 0 route (``relu_vjp``)."""
    d = len(k)
    spatial = tuple(x.shape[x.ndim - d:])
    out = g.shape[g.ndim - d:]
    tiled = s == k and not any(p) and all(
        o * kk == n for o, kk, n in zip(out, k, spatial, strict=True))
    if _order(g) != _order(best):
        # One copy into the maxima's layout (a cotangent reshaped back from a flattened linear
        # layer arrives in (N, C, H, W) order): the passes below then all run in one order.
        g = _like(best, g)
    if tiled and code is not None:
        compiled = pool_jit.backward(x, g, best, code, k, positive)
        if compiled is not None:
            return compiled
    if any(p):
        full = tuple(n + 2 * pp for n, pp in zip(spatial, p, strict=True))
        buf = np.zeros(x.shape[: x.ndim - d] + full, dtype=g.dtype)
    else:
        # Windows that tile the input exactly write each cell once: no zero fill.
        buf = (np.empty_like if tiled else np.zeros_like)(x, dtype=g.dtype)
    views = None if code is not None else _offset_views(pad_spatial(x, p, -np.inf), k, s)
    taken = None
    last = prod(k) - 1
    hit = None
    pos = np.greater(best, 0) if positive else None
    for j, off in enumerate(kernel_offsets(k)):
        if views is None:
            hit = np.equal(code, np.uint8(j), out=hit)
            if pos is not None:
                np.logical_and(hit, pos, out=hit)
        else:
            hit = np.equal(views[j], best)
            if taken is None:
                taken = hit
            else:
                np.greater(hit, taken, out=hit)  # a maximum here and none at an earlier offset
                if j < last:
                    np.logical_or(taken, hit, out=taken)
            if pos is not None:
                hit = np.logical_and(hit, pos)  # a new array: ``taken`` may be this one
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
        code = residuals.load(out, _CODE, _key(x, k, s, p))
        return (_backward(x, g, out, k, s, p, code),)

    return vjp


def relu_vjp(fixed_d: int | None) -> Any:
    """The VJP of ``relu`` applied to this pooling's VJP, when the pooled input ``x`` is
    ``relu(c)``: ``mul(max_pool_vjp(g), positive_mask(c))`` in one pass (generated code fuses
    the three calls, ``engine.codegen``). The same bits: at a window's winning cell ``x`` equals
    the maximum, so ``c > 0`` there exactly when the maximum is > 0, and every other cell is
    ``g * 0`` on both sides (``(g * 0) * m`` is ``g * 0`` for ``m`` in {0, 1}, signs and NaNs
    included). Saves the float mask (two passes over ``c``) and the product (three). Only for
    windows that tile the input (each cell written once): where the reference sums into a
    zero buffer, ``(0 + g) * 0`` and ``0 + g * 0`` differ in the sign of zero, so other
    geometries take the product itself (``x > 0`` is ``c > 0``: ``x = max(c, 0)``)."""

    def fused(g: Any, x: Any, out: Any, **attrs: Any) -> Any:
        k, s, p = _attrs("max_pool", x, attrs, fixed_d)
        code = residuals.load(out, _CODE, _key(x, k, s, p))
        d = len(k)
        tiled = s == k and not any(p) and all(
            o * kk == n for o, kk, n in zip(g.shape[g.ndim - d:], k, x.shape[x.ndim - d:],
                                            strict=True))
        if tiled:
            return _backward(x, g, out, k, s, p, code, positive=True)
        routed = _backward(x, g, out, k, s, p, code)
        return routed * (x > 0).astype(x.dtype)

    return fused


# Primitive name -> its fused relu VJP (``relu_vjp``) and its relu-fused forward
# (``relu_max_forward``), for generated code.
RELU_FUSED: dict[str, Any] = {}
RELU_FUSED_FORWARD: dict[str, Any] = {}
for _name, _d in (("max_pool", None), ("max_pool2d", 2), ("max_pool2d_pad", 2)):
    attach_fast(_name, forward=max_forward(_d), vjp=max_vjp(_d))
    RELU_FUSED[_name] = relu_vjp(_d)
    RELU_FUSED_FORWARD[_name] = relu_max_forward(_d)
