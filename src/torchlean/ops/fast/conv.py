"""Fast convolution kernels (NumPy only; see ``ops.fast``).

The reference (``ops.conv``) runs three GEMMs per training step and two im2col copies; here:

- ``conv`` / ``conv2d`` / ``conv_core`` forward: the reference's whole-batch im2col, kept against
  the output (``residuals``), then one GEMM per image against a view of it, which writes the
  (N, outC, ...) result directly, the bias added in place (the reference: one whole-batch GEMM
  into (outC, N, ...), then a transposing copy with the bias; measured 0.41 -> 0.21 ms and
  1.19 -> 0.98 ms on W3's two layers, one thread);
- their VJP: the kernel gradient from the kept matrix (one GEMM per image against a per-image
  view of it, summed over the batch: the reference's order), where the reference builds the
  matrix again; the input gradient through ``conv_transpose_core``. (One whole-batch GEMM for
  the kernel gradient was measured: no faster for 16 -> 32 channels, 3x slower for the
  1-channel first layer, whose long inner dimension OpenBLAS runs poorly.) ``conv_weight_grad``
  as a node of its own (hvp graphs, ``conv_transpose``'s VJP) builds the matrix itself;
- ``conv_transpose_core`` (conv's input gradient): the GEMM writes a batch-last layout
  ``(K, outC, *spatial, N)``, so each kernel offset's block is added into a ``(outC, *full, N)``
  buffer in runs of ``width * N`` contiguous entries, and one transpose comes at the end (the
  reference adds views whose contiguous runs are one image row, or scatter a moved batch axis:
  the same sums in the same order; measured 2.18 -> 1.38 ms on W3's second layer and
  0.41 -> 0.18 ms on the digits CNN's, one thread).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ...core.shape import size
from ..conv import _batched, _bias_grad, _im2col_rows, _output_padding_for
from ..windows import axes_tuple, kernel_offsets
from . import residuals

_COLS = "conv.cols"


def _key(xb: Any, kernel: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]) -> Any:
    return (xb.shape, xb.dtype.str, kernel, s, p)


def _cols(xb: Any, kernel: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...]) -> Any:
    """The im2col matrix ``(C * prod(k), N * prod(out))`` of a batched input (contiguous)."""
    cols, _ = _im2col_rows(xb, kernel, s, p)
    return np.ascontiguousarray(cols)


def _core(w: Any, x: Any, stride: Any, padding: Any, bias: Any = None) -> Any:
    d = w.ndim - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    xb, batched = _batched(x, d)
    kernel = tuple(w.shape[2:])
    cols = _cols(xb, kernel, s, p)
    n, co = xb.shape[0], w.shape[0]
    out = _out_sizes(xb, kernel, s, p)
    # One GEMM per image against a per-image view of the matrix: the result is already
    # (N, outC, P), so no transposed copy of the output (the reference's one big GEMM gives
    # (outC, N, P) and copies it), and the bias is added in place. Explicit sizes, not -1: a
    # zero-size batch leaves -1 undetermined.
    per_image = cols.reshape(cols.shape[0], n, size(out)).swapaxes(0, 1)
    y = np.matmul(w.reshape(co, size(w.shape[1:])), per_image)
    if bias is not None:
        y += bias.reshape(co, 1)
    y = y.reshape((n, co) + out)
    result = y if batched else y[0]
    # Kept against the result, the array this op's VJP receives as ``out`` (a fresh array of
    # this kernel's, which nothing writes into), never against an input that a generated plan
    # might later reuse as a buffer for another value.
    residuals.save(result, _COLS, _key(xb, kernel, s, p), cols)
    return result


def _out_sizes(xb: Any, kernel: tuple[int, ...], s: tuple[int, ...],
               p: tuple[int, ...]) -> tuple[int, ...]:
    spatial = xb.shape[2:]
    return tuple((n + 2 * q - k) // st + 1
                 for n, k, st, q in zip(spatial, kernel, s, p, strict=True))


def conv_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0) -> Any:
    """Fast ``conv_core``: per-image GEMMs into (N, outC, ...), keeping the im2col matrix."""
    return _core(w, x, stride, padding)


def conv(w: Any, b: Any, x: Any, stride: Any = 1, padding: Any = 0) -> Any:
    """Fast ``conv`` / ``conv2d``: ``conv_core``'s kernel with the bias added in place."""
    return _core(w, x, stride, padding, b)


def _weight_grad(a: Any, cols: Any, ca: int, cb: int, kernel: tuple[int, ...]) -> Any:
    """dW from the cotangent ``a`` (N, outC, ...) and ``b``'s im2col matrix: one GEMM per image
    against a per-image view of it, summed over the batch (the reference's order)."""
    n = a.shape[0]
    positions = size(a.shape[2:])
    per_image = cols.reshape(cols.shape[0], n, positions).transpose(1, 2, 0)  # (N, P, C*K) view
    dw = np.matmul(a.reshape(n, ca, positions), per_image).sum(axis=0)
    return dw.reshape((ca, cb) + kernel)


def conv_weight_grad(a: Any, b: Any, kernel: Any, stride: Any = 1, padding: Any = 0) -> Any:
    """Fast ``conv_weight_grad`` (as a node of its own): ``_weight_grad`` on b's im2col."""
    kernel = tuple(kernel)
    d = len(kernel)
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    ab, _ = _batched(a, d)
    bb, _ = _batched(b, d)
    return _weight_grad(ab, _cols(bb, kernel, s, p), ab.shape[1], bb.shape[1], kernel)


def _core_vjp(ops: Any, g: Any, w: Any, x: Any, out: Any, stride: Any, padding: Any,
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
        gx = ops.conv_transpose_core(w, g, stride=s, padding=p, output_padding=out_pad)
    return gw, gx


def conv_core_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
                  needed: tuple[bool, ...] = (True, True)) -> tuple[Any, Any]:
    """Fast VJP of ``conv_core``: the kernel gradient from the forward's im2col matrix."""
    w, x = xs
    return _core_vjp(ops, g, w, x, out, stride, padding, needed[0], needed[-1])


def conv_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
             needed: tuple[bool, ...] = (True, True, True)) -> tuple[Any, Any, Any]:
    """Fast VJP of ``conv`` / ``conv2d``: as ``conv_core_vjp``, plus the reference bias sum."""
    w, _, x = xs
    gw, gx = _core_vjp(ops, g, w, x, out, stride, padding, needed[0], needed[2])
    return gw, _bias_grad(ops, g, len(w.shape) - 2) if needed[1] else None, gx


def conv_transpose_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0,
                        output_padding: Any = 0) -> Any:
    """Fast ``conv_transpose_core``: one GEMM into a batch-last layout, col2im over long runs."""
    d = w.ndim - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    out_pad = axes_tuple(output_padding, d)
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


for _name in ("conv", "conv2d"):
    attach_fast(_name, forward=conv, vjp=conv_vjp)
attach_fast("conv_core", forward=conv_core, vjp=conv_core_vjp)
attach_fast("conv_weight_grad", forward=conv_weight_grad)
attach_fast("conv_transpose_core", forward=conv_transpose_core)
