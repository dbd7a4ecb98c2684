"""Fast convolution kernels (NumPy only; see ``ops.fast``).

The reference (``ops.conv``) runs three GEMMs per training step and two im2col copies, in the
(N, C, H, W) layout; here, for 2-D kernels, every GEMM writes a **channels-last** result:

- ``conv`` / ``conv2d`` / ``conv_core`` forward: one im2col copy ``cols`` of shape
  ``(N * Ho * Wo, kh * kw * C)`` (row = output pixel), kept against the output (``residuals``),
  and one GEMM ``cols @ W^T`` giving ``(N * Ho * Wo, outC)``, the bias added in place. The result
  is returned as the (N, outC, Ho, Wo) *view* of that channels-last array: no transposing copy.
  NumPy ufuncs keep the layout (relu, its mask, the max pooling below), so the next convolution
  finds a channels-last input, whose padded window view gives ``cols`` in one copy whose
  contiguous runs are C long. An input in (N, C, H, W) order with few channels (the first layer:
  C = 1 gives runs of 1) instead takes the reference's column order ``(C * kh * kw, N * P)``
  (runs of a row), used as the transposed GEMM operand;
- their VJP: the kernel gradient ``cols^T @ g`` from the kept matrix (one GEMM, the cotangent a
  free (N * Ho * Wo, outC) view when it is channels-last, as relu's VJP and the pooling's leave
  it); the input gradient (stride 1) as one batched GEMM of the cotangent rows with the kernel
  per offset, each offset's block added into the padded gradient in runs of a whole image row
  (``_input_grad2d``); the bias gradient one column sum. (col2im with one strided add per
  kernel offset was measured 3x slower: its runs are C long.)
- ``conv_transpose_core`` (conv's input gradient, and the CROWN back-substitution through a
  convolution): the same flipped-kernel convolution when stride 1; otherwise the batch-last
  col2im: the GEMM writes ``(K, outC, *spatial, N)`` so each kernel offset's block is added in
  runs of ``width * N`` entries, one transpose at the end;
- ``conv_weight_grad`` as a node of its own (hvp graphs, ``conv_transpose``'s VJP) builds the
  matrix itself (never from a residual: its input may have been refilled).

Other dimensions (1-D, 3-D) keep the (N, C, ...) kernels: the im2col matrix kept for the kernel
gradient (one GEMM per image against it), the batch-last col2im for the input gradient.

Measured on W3's second layer (32 x 16 x 14 x 14 -> 32 channels, one thread): forward 0.99 ->
0.83 ms, kernel gradient 1.03 -> 0.69 ms, input gradient 1.13 -> 1.0 ms; on the digits CNN's
(32 x 16 x 4 x 4): 0.19 -> 0.08, 0.10 -> 0.06, 0.16 -> 0.09 ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...core.registry import attach_fast
from ...core.shape import size
from ..conv import _batched, _bias_grad, _im2col_rows, _output_padding_for
from ..windows import axes_tuple, kernel_offsets, pad_spatial, window_view
from . import residuals

_COLS = "conv.cols"
# Below this many input channels, an input in (N, C, H, W) order is not copied to channels-last:
# its columns are built in the reference's (C * kh * kw, N * P) order, whose runs are image rows.
_FEW_CHANNELS = 4


# ---------------------------------------------------------------------------------------------
# 2-D, channels-last GEMM results.


def _cols2d(xb: Any, kh: int, kw: int, s: tuple[int, ...], p: tuple[int, ...], ho: int,
            wo: int, ones: bool = False) -> tuple[Any, bool]:
    """The im2col matrix ``(N * Ho * Wo, K)`` of a (N, C, H, W) input, a fresh array (never a
    view of ``xb``), and its column order: ``True`` for ``(kh, kw, C)`` (channels-last; a C-order
    matrix), ``False`` for ``(C, kh, kw)`` (the transpose of a C-order matrix). ``ones``: one
    more column of ones, so that the GEMM adds the bias and the kernel-gradient GEMM sums the
    bias gradient (a broadcast add over rows of ``outC`` entries costs as much as the GEMM's
    extra column on the first layer, and NumPy's column sum 20x more)."""
    n, c, h, w = xb.shape
    k = kh * kw * c
    if c < _FEW_CHANNELS and xb.flags.c_contiguous:
        # (C * K, N * P) rows, whose runs are image rows; used transposed.
        rows = np.empty((k + ones, n * ho * wo), dtype=xb.dtype)
        view = window_view(pad_spatial(xb, p), (kh, kw), s, kernel_first=True)
        rows[:k].reshape(c, kh, kw, n, ho, wo)[...] = view.transpose(1, 2, 3, 0, 4, 5)
        if ones:
            rows[k] = 1
        return rows.T, False
    xh = xb.transpose(0, 2, 3, 1)
    if p[0] or p[1]:
        buf = np.zeros((n, h + 2 * p[0], w + 2 * p[1], c), dtype=xb.dtype)
        buf[:, p[0]:p[0] + h, p[1]:p[1] + w] = xh
    else:
        buf = xh
    st = buf.strides
    view = as_strided(buf, (n, ho, wo, kh, kw, c),
                      (st[0], st[1] * s[0], st[2] * s[1], st[1], st[2], st[3]), writeable=False)
    cols = np.empty((n * ho * wo, k + ones), dtype=xb.dtype)
    cols[:, :k].reshape(n, ho, wo, kh, kw, c)[...] = view
    if ones:
        cols[:, k] = 1
    return cols, True


def _weight_matrix(w: Any, hwc: bool, bias: Any = None) -> Any:
    """The kernel (outC, C, kh, kw) as ``(outC, K)`` in the columns' order, the bias as one more
    column when given."""
    co = w.shape[0]
    wm = w.transpose(0, 2, 3, 1) if hwc else w
    if bias is None:
        return wm.reshape(co, size(w.shape[1:]))
    out = np.empty((co, size(w.shape[1:]) + 1), dtype=w.dtype)
    out[:, :-1].reshape(wm.shape)[...] = wm
    out[:, -1] = bias
    return out


def _fuses_bias(w: Any, b: Any, x: Any) -> bool:
    return b is not None and b.dtype == w.dtype == x.dtype


def _as_nchw(y2: Any, n: int, ho: int, wo: int) -> Any:
    """The (N * Ho * Wo, C) GEMM result as the (N, C, Ho, Wo) view of it."""
    return y2.reshape(n, ho, wo, y2.shape[1]).transpose(0, 3, 1, 2)


def _rows_of(gb: Any) -> Any:
    """A (N, C, H, W) cotangent as ``(N * H * W, C)``: a view when it is channels-last."""
    n, c, h, w = gb.shape
    return gb.transpose(0, 2, 3, 1).reshape(n * h * w, c)


def _geometry2d(xb: Any, w: Any, stride: Any, padding: Any) -> tuple[Any, ...]:
    s, p = axes_tuple(stride, 2), axes_tuple(padding, 2)
    kh, kw = w.shape[2], w.shape[3]
    ho = (xb.shape[2] + 2 * p[0] - kh) // s[0] + 1
    wo = (xb.shape[3] + 2 * p[1] - kw) // s[1] + 1
    return s, p, kh, kw, ho, wo


def _key2d(xb: Any, w: Any, s: tuple[int, ...], p: tuple[int, ...], fused: bool) -> Any:
    return (xb.shape, xb.dtype.str, w.shape[2:], s, p, fused)


def _core2d(w: Any, x: Any, stride: Any, padding: Any, bias: Any = None) -> Any:
    xb, batched = _batched(x, 2)
    s, p, kh, kw, ho, wo = _geometry2d(xb, w, stride, padding)
    fused = _fuses_bias(w, bias, xb)
    cols, hwc = _cols2d(xb, kh, kw, s, p, ho, wo, fused)
    # (N * Ho * Wo, outC): channels-last, the bias added by the GEMM when fused.
    y2 = cols @ _weight_matrix(w, hwc, bias if fused else None).T
    if bias is not None and not fused:
        y2 = y2 + bias
    y = _as_nchw(y2, xb.shape[0], ho, wo)
    result = y if batched else y[0]
    # Kept against the result, the array this op's VJP receives as ``out`` (a fresh array of
    # this kernel's, which nothing writes into), never against an input that a plan might later
    # refill.
    residuals.save(result, _COLS, _key2d(xb, w, s, p, fused), (cols, hwc))
    return result


def _weight_grad2d(gb: Any, cols: Any, hwc: bool, w_shape: tuple[int, ...]) -> tuple[Any, Any]:
    """dW (outC, C, kh, kw) = ``cols^T @ g`` in one GEMM (g as (N * P, outC) rows), and the
    bias gradient when ``cols`` ends with its column of ones (else ``None``)."""
    co, c, kh, kw = w_shape
    k = kh * kw * c
    if hwc:
        # (outC, K [+ 1]) = g^T @ cols: the transposed product below (bitwise equal to it on
        # W3's shapes with OpenBLAS; both are within the fast kernels' tolerance), faster on a
        # C-order (channels-last) matrix: W3's second layer 983 -> 914 us (one thread,
        # interleaved). On the few-channel (K, N * P) rows the other order wins
        # (182 against 342 us on W3's first layer).
        dw2 = _rows_of(gb).T @ cols
        db = dw2[:, k].copy() if dw2.shape[1] > k else None
        return np.ascontiguousarray(dw2[:, :k].reshape(co, kh, kw, c).transpose(0, 3, 1, 2)), db
    dwt = cols.T @ _rows_of(gb)  # (K [+ 1], outC)
    db = dwt[k].copy() if dwt.shape[0] > k else None
    return np.ascontiguousarray(dwt[:k].T).reshape(co, c, kh, kw), db


def _input_grad2d(w: Any, gb: Any, p: tuple[int, ...], fresh: bool = False) -> Any:
    """The stride-1 transposed convolution of ``gb`` (N, outC, Ho, Wo) with the kernel ``w``
    (outC, C, kh, kw), padding ``p`` <= k - 1, as a channels-last (N, C, H, W) view.

    One batched GEMM ``rows @ W[:, :, i, j]`` for all kernel offsets (the cotangent as
    ``(N * Ho * Wo, outC)`` rows, a free view when it is channels-last, as relu's VJP and the
    pooling's leave it) gives each offset's contribution ``(N, Ho, Wo, C)``, which lands on the
    input gradient shifted by ``(i - p0, j - p1)``; the part inside the input is added as one
    block whose contiguous runs are a whole image row (``Wo * C`` entries), not one pixel's
    ``C`` (the reference's col2im). Under "same" padding (Ho = H) the centre offset's block
    covers the whole input, so it is the accumulator itself (no zero fill, one add fewer): the
    result is then a view of the GEMM's (K, ...) output, fine for a cotangent that is consumed
    and dropped; ``fresh`` (a forward op's value, kept by its owner) uses a zero-filled array.
    Before: the cotangent was copied into the corner of a zero padded grid and every offset was
    one contiguous shifted add, but the GEMM then also ran over the grid's padding rows (8,192
    rows instead of 6,272 on W3's second layer; measured 1.54-1.76 -> 1.46-1.58 ms in a step
    with this variant's zero fill, interleaved)."""
    co, c, kh, kw = w.shape
    n, _, ho, wo = gb.shape
    h, wd = ho + kh - 1 - 2 * p[0], wo + kw - 1 - 2 * p[1]  # the input's spatial size
    # (K, outC, C): the kernel per offset; matmul broadcasts the rows over the offsets.
    per_offset = w.transpose(2, 3, 0, 1).reshape(kh * kw, co, c)
    z = np.matmul(_rows_of(gb), per_offset).reshape(kh * kw, n, ho, wo, c)
    centre = p[0] * kw + p[1] if (ho, wo) == (h, wd) and not fresh else None
    dx = z[centre] if centre is not None else np.zeros((n, h, wd, c), dtype=z.dtype)
    for o in range(kh * kw):
        if o == centre:
            continue
        di, dj = o // kw - p[0], o % kw - p[1]  # where this offset's block starts in dx
        r0, r1 = max(0, di), min(h, di + ho)
        c0, c1 = max(0, dj), min(wd, dj + wo)
        if r0 < r1 and c0 < c1:
            dx[:, r0:r1, c0:c1] += z[o, :, r0 - di:r1 - di, c0 - dj:c1 - dj]
    return dx.transpose(0, 3, 1, 2)


def _flip_ok(s: tuple[int, ...], p: tuple[int, ...], kh: int, kw: int,
             out_pad: tuple[int, ...] = (0, 0)) -> bool:
    return s == (1, 1) and not any(out_pad) and p[0] <= kh - 1 and p[1] <= kw - 1


def _core2d_vjp(g: Any, w: Any, b: Any, x: Any, out: Any, stride: Any, padding: Any,
                needed: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
    """dW, db (when ``b`` is given) and dx of the 2-D convolution."""
    xb, _ = _batched(x, 2)
    gb, _ = _batched(g, 2)
    s, p, kh, kw, _, _ = _geometry2d(xb, w, stride, padding)
    gw = gbias = gx = None
    if needed[0]:
        fused = _fuses_bias(w, b, xb)
        kept = residuals.load(out, _COLS, _key2d(xb, w, s, p, fused))
        cols, hwc = kept if kept is not None else _cols2d(xb, kh, kw, s, p, gb.shape[2],
                                                          gb.shape[3], fused)
        gw, gbias = _weight_grad2d(gb, cols, hwc, tuple(w.shape))
    if needed[1] and gbias is None:
        rows = _rows_of(gb)  # one GEMV: NumPy's axis-0 sum of these rows runs 20x slower
        gbias = np.ones(rows.shape[0], dtype=rows.dtype) @ rows
    if needed[2]:
        out_pad = _output_padding_for(tuple(x.shape[-2:]), tuple(g.shape[-2:]), (kh, kw), s, p)
        if _flip_ok(s, p, kh, kw, out_pad):
            gx = _input_grad2d(w, gb, p)
            gx = gx if x.ndim == 4 else gx[0]
        else:
            gx = _transpose_nd(w, g, s, p, out_pad)
    return gw, gbias if needed[1] else None, gx


# ---------------------------------------------------------------------------------------------
# Other dimensions: (N, C, ...) results.


def _key(xb: Any, kernel: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]) -> Any:
    return (xb.shape, xb.dtype.str, kernel, s, p)


def _cols(xb: Any, kernel: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]) -> Any:
    """The im2col matrix ``(C * prod(k), N * prod(out))`` of a batched input (contiguous)."""
    cols, _ = _im2col_rows(xb, kernel, s, p)
    return np.ascontiguousarray(cols)


def _core_nd(w: Any, x: Any, stride: Any, padding: Any, bias: Any = None) -> Any:
    d = w.ndim - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    xb, batched = _batched(x, d)
    kernel = tuple(w.shape[2:])
    cols = _cols(xb, kernel, s, p)
    n, co = xb.shape[0], w.shape[0]
    out = _out_sizes(xb, kernel, s, p)
    # One GEMM per image against a per-image view of the matrix: the result is already
    # (N, outC, P), so no transposed copy of the output, and the bias is added in place.
    # Explicit sizes, not -1: a zero-size batch leaves -1 undetermined.
    per_image = cols.reshape(cols.shape[0], n, size(out)).swapaxes(0, 1)
    y = np.matmul(w.reshape(co, size(w.shape[1:])), per_image)
    if bias is not None:
        y += bias.reshape(co, 1)
    y = y.reshape((n, co) + out)
    result = y if batched else y[0]
    residuals.save(result, _COLS, _key(xb, kernel, s, p), cols)
    return result


def _out_sizes(xb: Any, kernel: tuple[int, ...], s: tuple[int, ...],
               p: tuple[int, ...]) -> tuple[int, ...]:
    spatial = xb.shape[2:]
    return tuple((n + 2 * q - k) // st + 1
                 for n, k, st, q in zip(spatial, kernel, s, p, strict=True))


def _weight_grad(a: Any, cols: Any, ca: int, cb: int, kernel: tuple[int, ...]) -> Any:
    """dW from the cotangent ``a`` (N, outC, ...) and ``b``'s im2col matrix: one GEMM per image
    against a per-image view of it, summed over the batch (the reference's order)."""
    n = a.shape[0]
    positions = size(a.shape[2:])
    per_image = cols.reshape(cols.shape[0], n, positions).transpose(1, 2, 0)  # (N, P, C*K) view
    dw = np.matmul(a.reshape(n, ca, positions), per_image).sum(axis=0)
    return dw.reshape((ca, cb) + kernel)


def _core_nd_vjp(ops: Any, g: Any, w: Any, x: Any, out: Any, stride: Any, padding: Any,
                 need_w: bool, need_x: bool) -> tuple[Any, Any]:
    d = len(w.shape) - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    kernel = tuple(w.shape[2:])
    gw = gx = None
    if need_w:
        xb, _ = _batched(x, d)
        gb, _ = _batched(g, d)
        cols = residuals.load(out, _COLS, _key(xb, kernel, s, p))
        if cols is None:  # recomputed with the forward's code: the same bits
            cols = _cols(xb, kernel, s, p)
        gw = _weight_grad(gb, cols, gb.shape[1], xb.shape[1], kernel)
    if need_x:
        out_pad = _output_padding_for(tuple(x.shape[-d:]), tuple(g.shape[-d:]), kernel, s, p)
        gx = _transpose_nd(w, g, s, p, out_pad)
    return gw, gx


def _transpose_nd(w: Any, x: Any, s: tuple[int, ...], p: tuple[int, ...],
                  out_pad: tuple[int, ...]) -> Any:
    """The transposed convolution: one GEMM into a batch-last layout, col2im over long runs.

    The GEMM writes ``(K, outC, *spatial, N)``, so each kernel offset's block is added into a
    ``(outC, *full, N)`` buffer in runs of ``width * N`` contiguous entries, and one transpose
    comes at the end (measured 2.18 -> 1.38 ms on W3's second layer against the reference's
    row-long runs)."""
    d = w.ndim - 2
    xb, batched = _batched(x, d)
    n, ci = xb.shape[0], xb.shape[1]
    co, kernel = w.shape[1], tuple(w.shape[2:])
    spatial = tuple(xb.shape[2:])
    k = size(kernel)
    rows = np.moveaxis(xb, 0, -1).reshape(ci, size(spatial) * n)  # (inC, *spatial, N)
    # The weights as (K, outC, inC): the GEMM writes each kernel offset's block contiguously.
    wt = np.moveaxis(w.reshape(ci, co, k), 0, -1).swapaxes(0, 1).reshape(k * co, ci)
    cols = (wt @ rows).reshape((k, co) + spatial + (n,))
    full = tuple((i - 1) * st + kk + o
                 for i, st, kk, o in zip(spatial, s, kernel, out_pad, strict=True))
    buf = np.zeros((co,) + full + (n,), dtype=cols.dtype)
    whole = (slice(None),)
    for j, off in enumerate(kernel_offsets(kernel)):
        target = whole + tuple(slice(o, o + st * (i - 1) + 1, st)
                               for o, st, i in zip(off, s, spatial, strict=True)) + whole
        buf[target] += cols[j]
    out = tuple(f - 2 * q for f, q in zip(full, p, strict=True))
    inner = whole + tuple(slice(q, q + o) for q, o in zip(p, out, strict=True)) + whole
    y = np.ascontiguousarray(np.moveaxis(buf[inner], -1, 0))
    return y if batched else y[0]


# ---------------------------------------------------------------------------------------------
# The kernels attached to the primitives.


def conv_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0) -> Any:
    """Fast ``conv_core``: one GEMM into a channels-last result (2-D), keeping the columns."""
    if w.ndim == 4:
        return _core2d(w, x, stride, padding)
    return _core_nd(w, x, stride, padding)


def conv(w: Any, b: Any, x: Any, stride: Any = 1, padding: Any = 0) -> Any:
    """Fast ``conv`` / ``conv2d``: ``conv_core``'s kernel with the bias added in place."""
    if w.ndim == 4:
        return _core2d(w, x, stride, padding, b)
    return _core_nd(w, x, stride, padding, b)


def conv_core_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
                  needed: tuple[bool, ...] = (True, True)) -> tuple[Any, Any]:
    """Fast VJP of ``conv_core``: the kernel gradient from the forward's im2col matrix."""
    w, x = xs
    if w.ndim == 4:
        gw, _, gx = _core2d_vjp(g, w, None, x, out, stride, padding,
                                (needed[0], False, needed[-1]))
        return gw, gx
    return _core_nd_vjp(ops, g, w, x, out, stride, padding, needed[0], needed[-1])


def conv_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
             needed: tuple[bool, ...] = (True, True, True)) -> tuple[Any, Any, Any]:
    """Fast VJP of ``conv`` / ``conv2d``: as ``conv_core_vjp``, plus the bias gradient (2-D:
    from the kernel-gradient GEMM; else the reference's sum)."""
    w, b, x = xs
    if w.ndim == 4:
        return _core2d_vjp(g, w, b, x, out, stride, padding, (needed[0], needed[1], needed[2]))
    gw, gx = _core_nd_vjp(ops, g, w, x, out, stride, padding, needed[0], needed[2])
    return gw, _bias_grad(ops, g, len(w.shape) - 2) if needed[1] else None, gx


def conv_weight_grad(a: Any, b: Any, kernel: Any, stride: Any = 1, padding: Any = 0) -> Any:
    """Fast ``conv_weight_grad`` (as a node of its own): built from b's columns, never a kept
    matrix (b may have been refilled since a forward)."""
    kernel = tuple(kernel)
    d = len(kernel)
    ab, _ = _batched(a, d)
    bb, _ = _batched(b, d)
    if d == 2:
        s, p = axes_tuple(stride, 2), axes_tuple(padding, 2)
        cols, hwc = _cols2d(bb, kernel[0], kernel[1], s, p, ab.shape[2], ab.shape[3])
        return _weight_grad2d(ab, cols, hwc, (ab.shape[1], bb.shape[1]) + kernel)[0]
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    return _weight_grad(ab, _cols(bb, kernel, s, p), ab.shape[1], bb.shape[1], kernel)


def conv_transpose_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0,
                        output_padding: Any = 0) -> Any:
    """Fast ``conv_transpose_core``: the flipped-kernel convolution (2-D, stride 1), else one
    GEMM into a batch-last layout and col2im over long runs."""
    d = w.ndim - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    out_pad = axes_tuple(output_padding, d)
    if d == 2 and _flip_ok(s, p, w.shape[2], w.shape[3], out_pad):
        xb, batched = _batched(x, 2)
        y = _input_grad2d(w, xb, p, fresh=True)
        return y if batched else y[0]
    return _transpose_nd(w, x, s, p, out_pad)


for _name in ("conv", "conv2d"):
    attach_fast(_name, forward=conv, vjp=conv_vjp)
attach_fast("conv_core", forward=conv_core, vjp=conv_core_vjp)
attach_fast("conv_weight_grad", forward=conv_weight_grad)
attach_fast("conv_transpose_core", forward=conv_transpose_core)
