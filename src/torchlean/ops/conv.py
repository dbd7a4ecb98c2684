"""Convolution and transposed convolution (N-D, d = 1, 2, 3), as GEMMs over strided windows.

Public primitives: ``conv`` / ``conv2d`` (cross-correlation plus bias, kernel ``(outC, inC, k...)``)
and ``conv_transpose`` / ``conv_transpose2d`` (kernel ``(inC, outC, k...)``). Inputs are
``(C, spatial...)`` or ``(N, C, spatial...)``; stride and padding are ints or per-axis tuples;
padding is zeros.

The derivative rules close over three bias-free bilinear primitives, each the adjoint of the
others in one argument, so every derivative of a convolution is again a convolution and hvp /
hessian work through them:

- ``conv_core(w, x)``: cross-correlation (im2col of the whole batch + one GEMM);
- ``conv_transpose_core(w, x)``: its adjoint in ``x`` (one whole-batch GEMM + col2im scatter);
- ``conv_weight_grad(a, b)``: its adjoint in ``w`` (im2col of ``b`` + one batched matmul).

The strided-window helpers live in ``windows.py`` (shared with pooling). The only Python loop is
col2im's loop over the ``prod(k)`` kernel offsets.

Kernels run in the namespace of their inputs (``backend.namespace_of``): the same code serves
NumPy and a CUDA device (CuPy's strided views, cuBLAS GEMMs and batched matmuls), with no
host round trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import (
    ErrorInput,
    Primitive,
    Sample,
    add_tangents,
    bilinear,
    bilinear_jvp,
    register,
)
from ..core.shape import Shape, per_axis, size
from .samples import normal
from .windows import axes_tuple, crop_spatial, out_sizes, pad_spatial, scatter_windows, window_view

# ---------------------------------------------------------------------------------------------
# im2col over the whole batch.


def _im2col(xb: Any, kernel: tuple[int, ...], stride: tuple[int, ...],
            padding: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
    """Columns ``(N, C * prod(k), prod(out))`` of a batched input, and the output size."""
    view = window_view(pad_spatial(xb, padding), kernel, stride, kernel_first=True)
    d = len(kernel)
    out = view.shape[view.ndim - d:]
    n, c = xb.shape[0], xb.shape[1]
    return view.reshape(n, c * size(kernel), size(out)), out


def _im2col_rows(xb: Any, kernel: tuple[int, ...], stride: tuple[int, ...],
                 padding: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
    """Columns ``(C * prod(k), N * prod(out))`` of a batched input: the whole batch as one
    GEMM operand (NumPy's batched matmul runs one small GEMM per image, about half as fast)."""
    # (N, C, *k, *out)
    view = window_view(pad_spatial(xb, padding), kernel, stride, kernel_first=True)
    d = len(kernel)
    out = view.shape[view.ndim - d:]
    n, c = xb.shape[0], xb.shape[1]
    order = (1,) + tuple(range(2, 2 + d)) + (0,) + tuple(range(2 + d, 2 + 2 * d))
    return view.transpose(order).reshape(c * size(kernel), n * size(out)), out


def _batched(x: Any, d: int) -> tuple[Any, bool]:
    return (x, True) if x.ndim == d + 2 else (x[None], False)


# ---------------------------------------------------------------------------------------------
# Kernels.


def _conv_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0) -> Any:
    d = w.ndim - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    xb, batched = _batched(x, d)
    cols, out = _im2col_rows(xb, tuple(w.shape[2:]), s, p)
    y = (w.reshape(w.shape[0], size(w.shape[1:])) @ cols).reshape((w.shape[0], xb.shape[0]) + out)
    y = y.swapaxes(0, 1)  # (N, outC, *out): a view of the GEMM's (outC, N, *out) result
    return y if batched else y[0]


def _conv_transpose_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0,
                         output_padding: Any = 0) -> Any:
    d = w.ndim - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    out_pad = axes_tuple(output_padding, d)
    xb, batched = _batched(x, d)
    n, ci = xb.shape[0], xb.shape[1]
    co, kernel = w.shape[1], tuple(w.shape[2:])
    spatial = tuple(xb.shape[2:])
    # Explicit sizes, not -1: a zero-size batch or spatial axis leaves -1 undetermined.
    rows = xb.reshape(n, ci, size(spatial)).swapaxes(0, 1).reshape(ci, n * size(spatial))
    cols = w.reshape(ci, co * size(kernel)).T @ rows  # (Co * K, N * P_in), one GEMM
    windows = namespace_of(cols).moveaxis(cols.reshape((co,) + kernel + (n,) + spatial), 1 + d, 0)
    full = tuple((i - 1) * st + k + o
                 for i, st, k, o in zip(spatial, s, kernel, out_pad, strict=True))
    buf = scatter_windows(windows, full, s, kernel_first=True)
    out = tuple(f - 2 * q for f, q in zip(full, p, strict=True))
    y = crop_spatial(buf, p, out)
    return y if batched else y[0]


def _conv_weight_grad(a: Any, b: Any, kernel: Any, stride: Any = 1, padding: Any = 0) -> Any:
    kernel = tuple(kernel)
    d = len(kernel)
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    ab, _ = _batched(a, d)
    bb, _ = _batched(b, d)
    n, ca = ab.shape[0], ab.shape[1]
    if n == 1:
        cols, _ = _im2col(bb, kernel, s, p)  # (1, B * K, P)
        dw = ab.reshape(ca, size(ab.shape[2:])) @ cols[0].T
    else:
        # The whole batch as one GEMM (one small GEMM per image is several times slower).
        rows, _ = _im2col_rows(bb, kernel, s, p)  # (B * K, N * P)
        a2 = ab.reshape(n, ca, size(ab.shape[2:])).swapaxes(0, 1).reshape(ca, rows.shape[1])
        dw = a2 @ rows.T
    return dw.reshape((ca, bb.shape[1]) + kernel)


# ---------------------------------------------------------------------------------------------
# Shape rules.


def _check_input(op: str, x: Shape, d: int) -> None:
    if len(x) not in (d + 1, d + 2):
        raise ShapeError(f"{op}: input must be (C, spatial x{d}) or (N, C, spatial x{d}) for a "
                         f"{d}-D kernel, found shape {x}")


def _kernel_d(op: str, w: Shape, only: int | None) -> int:
    d = len(w) - 2
    if d not in (1, 2, 3) or (only is not None and d != only):
        want = f"{only}" if only is not None else "1, 2 or 3"
        raise ShapeError(f"{op}: kernel must have {want} spatial dims (outC, inC, k...), "
                         f"found shape {w}")
    if any(k <= 0 for k in w[2:]) or w[0] <= 0 or w[1] <= 0:
        raise ShapeError(f"{op}: kernel dims must be positive, found shape {w}")
    return d


def _conv_geometry(op: str, w: Shape, x: Shape, stride: Any, padding: Any,
                   only: int | None = None) -> Shape:
    """Output shape of a (bias-free) convolution; every check before any compute."""
    d = _kernel_d(op, w, only)
    _check_input(op, x, d)
    s = per_axis(op, "stride", stride, d, 1)
    p = per_axis(op, "padding", padding, d, 0)
    cin = x[-d - 1]
    if cin != w[1]:
        raise ShapeError(f"{op}: channel mismatch: input {x} has {cin} channels, kernel {w} "
                         f"expects {w[1]}")
    out = out_sizes(op, x[-d:], w[2:], s, p, f"input {x}, kernel {w}")
    return x[:-d - 1] + (w[0],) + out


def _conv_transpose_geometry(op: str, w: Shape, x: Shape, stride: Any, padding: Any,
                             output_padding: Any, only: int | None = None) -> Shape:
    d = _kernel_d(op, w, only)
    _check_input(op, x, d)
    s = per_axis(op, "stride", stride, d, 1)
    p = per_axis(op, "padding", padding, d, 0)
    out_pad = per_axis(op, "output_padding", output_padding, d, 0)
    if any(o >= ss for o, ss in zip(out_pad, s, strict=True)):
        raise ShapeError(f"{op}: output_padding {out_pad} must be smaller than stride {s}")
    cin = x[-d - 1]
    if cin != w[0]:
        raise ShapeError(f"{op}: channel mismatch: input {x} has {cin} channels, kernel {w} "
                         f"(inC, outC, k...) expects {w[0]}")
    spatial = x[-d:]
    if any(n <= 0 for n in spatial):
        raise ShapeError(f"{op}: spatial dims must be positive, found input {x}")
    out = []
    for n, k, ss, pp, o in zip(spatial, w[2:], s, p, out_pad, strict=True):
        size_ = (n - 1) * ss - 2 * pp + k + o
        if size_ <= 0:
            raise ShapeError(f"{op}: output size ({n} - 1)*{ss} - 2*{pp} + {k} = {size_} is not "
                             f"positive (input {x}, kernel {w})")
        out.append(size_)
    return x[:-d - 1] + (w[1],) + tuple(out)


def _check_bias(op: str, b: Shape, channels: int) -> None:
    if b != (channels,):
        raise ShapeError(f"{op}: bias must have shape ({channels},), found {b}")


def _output_padding_for(x_spatial: Shape, g_spatial: Shape, kernel: Shape,
                        s: tuple[int, ...], p: tuple[int, ...]) -> tuple[int, ...]:
    """The output_padding that makes conv_transpose recover the conv input's exact size."""
    return tuple(n + 2 * pp - k - (o - 1) * ss
                 for n, o, k, ss, pp in zip(x_spatial, g_spatial, kernel, s, p, strict=True))


# ---------------------------------------------------------------------------------------------
# The bias-free bilinear cores.


def _conv_core_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
                   needed: tuple[bool, ...] = (True, True)) -> Any:
    w, x = xs
    d = len(w.shape) - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    kernel = tuple(w.shape[2:])
    gw = gx = None
    if needed[0]:
        gw = ops.conv_weight_grad(g, x, kernel=kernel, stride=s, padding=p)
    if needed[-1]:
        out_pad = _output_padding_for(tuple(x.shape[-d:]), tuple(g.shape[-d:]), kernel, s, p)
        gx = ops.conv_transpose_core(w, g, stride=s, padding=p, output_padding=out_pad)
    return gw, gx


def _conv_transpose_core_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
                             output_padding: Any, needed: tuple[bool, ...] = (True, True)) -> Any:
    w, x = xs
    d = len(w.shape) - 2
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    kernel = tuple(w.shape[2:])
    gw = ops.conv_weight_grad(x, g, kernel=kernel, stride=s, padding=p) if needed[0] else None
    gx = ops.conv_core(w, g, stride=s, padding=p) if needed[-1] else None
    return gw, gx


def _conv_weight_grad_vjp(ops: Any, g: Any, xs: Any, out: Any, kernel: Any, stride: Any,
                          padding: Any) -> Any:
    a, b = xs
    d = len(kernel)
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    out_pad = _output_padding_for(tuple(b.shape[-d:]), tuple(a.shape[-d:]), tuple(kernel), s, p)
    ga = ops.conv_core(g, b, stride=s, padding=p)
    gb = ops.conv_transpose_core(g, a, stride=s, padding=p, output_padding=out_pad)
    return ga, gb


def _core_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample((normal(rng, 3, 2, 3, 3), normal(rng, 2, 5, 6)), {"stride": 1, "padding": 1}),
        Sample((normal(rng, 2, 3, 2, 2), normal(rng, 2, 3, 5, 4)),
               {"stride": (2, 1), "padding": (0, 1)}, note="batch, per-axis stride/padding"),
        Sample((normal(rng, 2, 2, 3), normal(rng, 2, 2, 7)), {"stride": 2, "padding": 1},
               note="1-D"),
        Sample((normal(rng, 2, 1, 2, 2, 2), normal(rng, 1, 3, 3, 4)), {"stride": 1, "padding": 0},
               note="3-D"),
    ]


def _torch_conv(torch: Any, w: Any, x: Any, b: Any, stride: Any, padding: Any) -> Any:
    d = w.dim() - 2
    f = getattr(torch.nn.functional, f"conv{d}d")
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    batched = x.dim() == d + 2
    y = f(x if batched else x.unsqueeze(0), w, b, stride=s, padding=p)
    return y if batched else y.squeeze(0)


def _torch_conv_transpose(torch: Any, w: Any, x: Any, b: Any, stride: Any, padding: Any,
                          output_padding: Any = 0) -> Any:
    d = w.dim() - 2
    f = getattr(torch.nn.functional, f"conv_transpose{d}d")
    s, p = axes_tuple(stride, d), axes_tuple(padding, d)
    o = axes_tuple(output_padding, d)
    batched = x.dim() == d + 2
    y = f(x if batched else x.unsqueeze(0), w, b, stride=s, padding=p, output_padding=o)
    return y if batched else y.squeeze(0)


def _torch_weight_grad(torch: Any, a: Any, b: Any, kernel: Any, stride: Any,
                       padding: Any) -> Any:
    # The adjoint of conv in its kernel: d/dW <a, conv(W, b)>, kept differentiable.
    w = torch.zeros((a.shape[-len(kernel) - 1], b.shape[-len(kernel) - 1]) + tuple(kernel),
                    dtype=a.dtype, requires_grad=True)
    with torch.enable_grad():
        y = _torch_conv(torch, w, b, None, stride, padding)
        (gw,) = torch.autograd.grad((y * a).sum(), w, create_graph=True)
    return gw


register(Primitive(
    "conv_core", ("w", "x"),
    lambda w, x, stride, padding: _conv_geometry("conv_core", w, x, stride, padding),
    _conv_core, attrs={"stride": 1, "padding": 0}, attr_kinds=K.CONV,
    vjp=_conv_core_vjp, jvp=bilinear_jvp("conv_core"), selective=True,
    semantics="Bias-free N-D cross-correlation (the bilinear core of conv): kernel (outC, inC, "
              "k...), input (inC, ...) or (N, inC, ...), zero padding, out = (n + 2p - k)//s + 1. "
              "VJP: conv_weight_grad to w, conv_transpose_core to x (its exact adjoint).",
    samples=_core_samples,
    torch_ref=lambda torch, w, x, stride, padding: _torch_conv(torch, w, x, None, stride, padding),
    error_inputs=[
        ErrorInput(((3, 2, 3, 3), (4, 5, 6)), {"stride": 1, "padding": 0}, ShapeError,
                   r"channel mismatch: input \(4, 5, 6\) has 4 channels, kernel .* expects 2"),
        ErrorInput(((1, 1, 5, 5), (1, 3, 3)), {"stride": 1, "padding": 0}, ShapeError,
                   r"kernel \(5, 5\) larger than padded input \(3, 3\) with padding \(0, 0\)"),
        ErrorInput(((1, 1, 2, 2), (1, 3, 3)), {"stride": 0, "padding": 0}, ShapeError,
                   "stride must be >= 1.*found 0"),
        ErrorInput(((1, 1, 2, 2), (1, 1, 1, 3, 3)), {"stride": 1, "padding": 0}, ShapeError,
                   r"input must be \(C, spatial x2\) or \(N, C, spatial x2\)"),
    ],
))


def _ct_core_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample((normal(rng, 2, 3, 3, 3), normal(rng, 2, 3, 4)),
               {"stride": 2, "padding": 1, "output_padding": 1}),
        Sample((normal(rng, 3, 2, 2, 3), normal(rng, 2, 3, 3, 2)),
               {"stride": (1, 2), "padding": 0, "output_padding": 0}, note="batch"),
        Sample((normal(rng, 2, 2, 3), normal(rng, 2, 4)), {"stride": 1, "padding": 1,
                                                   "output_padding": 0}, note="1-D"),
    ]


register(Primitive(
    "conv_transpose_core", ("w", "x"),
    lambda w, x, stride, padding, output_padding: _conv_transpose_geometry(
        "conv_transpose_core", w, x, stride, padding, output_padding),
    _conv_transpose_core, attrs={"stride": 1, "padding": 0, "output_padding": 0},
    attr_kinds=K.CONV_T,
    vjp=_conv_transpose_core_vjp, jvp=bilinear_jvp("conv_transpose_core"),
    selective=True,
    semantics="Bias-free N-D transposed convolution: kernel (inC, outC, k...), out = (n - 1)*s - "
              "2p + k + output_padding (output_padding < stride, added at the far end). The "
              "exact adjoint of conv_core in x. VJP: conv_core to x, conv_weight_grad(x, g) to w.",
    samples=_ct_core_samples,
    torch_ref=lambda torch, w, x, stride, padding, output_padding: _torch_conv_transpose(
        torch, w, x, None, stride, padding, output_padding),
    error_inputs=[
        ErrorInput(((2, 3, 3, 3), (2, 3, 4)), {"stride": 2, "padding": 0, "output_padding": 2},
                   ShapeError,
                   r"output_padding \(2, 2\) must be smaller than stride \(2, 2\)"),
        ErrorInput(((2, 3, 3, 3), (3, 3, 4)), {"stride": 1, "padding": 0, "output_padding": 0},
                   ShapeError, "channel mismatch"),
        ErrorInput(((1, 1, 1, 1), (1, 1, 1)), {"stride": 1, "padding": 1, "output_padding": 0},
                   ShapeError,
                   r"output size \(1 - 1\)\*1 - 2\*1 \+ 1 = -1 is not positive"),
    ],
))


def _wg_infer(a: Shape, b: Shape, kernel: Any, stride: Any, padding: Any) -> Shape:
    op = "conv_weight_grad"
    if not isinstance(kernel, tuple | list) or not all(isinstance(k, int) for k in kernel):
        raise ShapeError(f"{op}: kernel must be a tuple of ints, found {kernel!r}")
    d = len(kernel)
    if d not in (1, 2, 3) or len(a) != len(b):
        raise ShapeError(f"{op}: a {a} and b {b} must both be (C, ...) or (N, C, ...) for a "
                         f"{d}-D kernel {tuple(kernel)}")
    if len(a) == d + 2 and a[0] != b[0]:
        raise ShapeError(f"{op}: batch sizes differ: {a} and {b}")
    w = (a[-d - 1], b[-d - 1]) + tuple(kernel)
    out = _conv_geometry(op, w, b, stride, padding)
    if out != a:
        raise ShapeError(f"{op}: a has shape {a}, but convolving b {b} with a {w} kernel gives "
                         f"{out}")
    return w


def _wg_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample((normal(rng, 3, 5, 6), normal(rng, 2, 5, 6)),
               {"kernel": (3, 3), "stride": 1, "padding": 1}),
        Sample((normal(rng, 2, 2, 2, 3), normal(rng, 2, 3, 5, 4)),
               {"kernel": (2, 2), "stride": (2, 1), "padding": (0, 0)}, note="batch"),
        Sample((normal(rng, 2, 3), normal(rng, 3, 6)), {"kernel": (2,), "stride": 2, "padding": 0},
               note="1-D, uneven"),
    ]


register(Primitive(
    "conv_weight_grad", ("a", "b"), _wg_infer, _conv_weight_grad,
    attrs={"kernel": (1, 1), "stride": 1, "padding": 0},
    attr_kinds={"kernel": K.POSITIVE_INT_TUPLE, **K.CONV},
    vjp=_conv_weight_grad_vjp, jvp=bilinear_jvp("conv_weight_grad"),
    semantics="dW[o, i, k] = sum over batch and output positions of a[o, pos] * pad(b)[i, pos*s "
              "+ k]: the adjoint of conv_core in its kernel (a is conv's output cotangent, b its "
              "input). Bilinear. VJP: conv_core(G, b) to a, conv_transpose_core(G, a) to b.",
    samples=_wg_samples, torch_ref=_torch_weight_grad,
    error_inputs=[
        ErrorInput(((3, 5, 6), (2, 5, 6)), {"kernel": (3, 3), "stride": 1, "padding": 0},
                   ShapeError,
                   r"a has shape \(3, 5, 6\), but convolving b \(2, 5, 6\)"),
        ErrorInput(((3, 3, 4), (2, 5, 6)), {"kernel": 3, "stride": 1, "padding": 0}, ShapeError,
                   "kernel must be a non-empty tuple of positive ints, found 3"),
        ErrorInput(((2, 3, 3, 4), (3, 2, 5, 6)), {"kernel": (3, 3), "stride": 1, "padding": 0},
                   ShapeError,
                   "batch sizes differ"),
    ],
))


# ---------------------------------------------------------------------------------------------
# Public conv / conv_transpose (with bias).


def _add_bias(y: Any, b: Any, d: int) -> Any:
    # y is freshly computed by a core kernel (possibly a transposed view of its GEMM result);
    # a new array in C order keeps conv outputs contiguous for the layers after it.
    bias = b.reshape((b.shape[0],) + (1,) * d)
    if type(y) is np.ndarray:
        return np.add(y, bias, order="C")
    # CuPy's ufuncs take no ``order``: add into a fresh C-ordered array (one kernel).
    xp = namespace_of(y)
    out = xp.empty(y.shape, dtype=xp.result_type(y.dtype, b.dtype))
    xp.add(y, bias, out=out)
    return out


def _conv_forward(w: Any, b: Any, x: Any, stride: Any = 1, padding: Any = 0) -> Any:
    return _add_bias(_conv_core(w, x, stride, padding), b, w.ndim - 2)


def _conv_transpose_forward(w: Any, b: Any, x: Any, stride: Any = 1, padding: Any = 0,
                            output_padding: Any = 0) -> Any:
    return _add_bias(_conv_transpose_core(w, x, stride, padding, output_padding), b, w.ndim - 2)


def _bias_grad(ops: Any, g: Any, d: int) -> Any:
    c = g.shape[-d - 1]
    return ops.reshape(ops.sum_to(g, shape=(c,) + (1,) * d), shape=(c,))


def _bias_tangent(ops: Any, tb: Any, out: Any, d: int) -> Any:
    return ops.broadcast_to(ops.reshape(tb, shape=(tb.shape[0],) + (1,) * d), shape=out.shape)


def _affine_jvp(core: str) -> Any:
    """JVP of ``core(w, x) + b``: the bilinear core's JVP plus the bias tangent, broadcast."""

    def jvp(ops: Any, ts: Any, xs: Any, out: Any, **attrs: Any) -> Any:
        tw, tb, tx = ts
        w, _, x = xs
        f = getattr(ops, core)
        through_core = bilinear(ops, lambda a, b: f(a, b, **attrs), w, x, tw, tx)
        bias = None if tb is None else _bias_tangent(ops, tb, out, len(w.shape) - 2)
        return add_tangents(ops, through_core, bias)

    return jvp


def _conv_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
              needed: tuple[bool, ...] = (True, True, True)) -> Any:
    w, _, x = xs
    gw, gx = _conv_core_vjp(ops, g, (w, x), out, stride, padding, (needed[0], needed[2]))
    return gw, _bias_grad(ops, g, len(w.shape) - 2) if needed[1] else None, gx


def _conv_transpose_vjp(ops: Any, g: Any, xs: Any, out: Any, stride: Any, padding: Any,
                        output_padding: Any = 0, needed: tuple[bool, ...] = (True, True, True)
                        ) -> Any:
    w, _, x = xs
    gw, gx = _conv_transpose_core_vjp(ops, g, (w, x), out, stride, padding, output_padding,
                                      (needed[0], needed[2]))
    return gw, _bias_grad(ops, g, len(w.shape) - 2) if needed[1] else None, gx


def _conv_infer(op: str, only: int | None) -> Any:
    def infer(w: Shape, b: Shape, x: Shape, stride: Any = 1, padding: Any = 0) -> Shape:
        out = _conv_geometry(op, w, x, stride, padding, only)
        _check_bias(op, b, w[0])
        return out

    return infer


def _conv_transpose_infer(op: str, only: int | None) -> Any:
    def infer(w: Shape, b: Shape, x: Shape, stride: Any = 1, padding: Any = 0,
              output_padding: Any = 0) -> Shape:
        out = _conv_transpose_geometry(op, w, x, stride, padding, output_padding, only)
        _check_bias(op, b, w[1])
        return out

    return infer


def _with_bias(samples: Any, channel_axis: int) -> Any:
    def make(rng: np.random.Generator) -> list[Sample]:
        return [Sample((s.inputs[0], normal(rng, s.inputs[0].shape[channel_axis]), s.inputs[1]),
                       s.attrs, s.note) for s in samples(rng)]

    return make


def _only_2d(samples: Any) -> Any:
    def make(rng: np.random.Generator) -> list[Sample]:
        return [s for s in samples(rng) if s.inputs[0].ndim == 4]

    return make


_CONV_SEMANTICS = (
    "Cross-correlation plus bias (torch.nn.functional.conv{d}d): kernel (outC, inC, k...), bias "
    "(outC,), input (inC, ...) or (N, inC, ...); stride and padding are ints or per-axis tuples; "
    "zero padding; out = (n + 2p - k)//s + 1. VJP: conv_weight_grad to w, sum of g to b, "
    "conv_transpose_core to x. ShapeError for kernel larger than padded input, stride < 1, "
    "channel mismatch, wrong bias."
)
_CT_SEMANTICS = (
    "Transposed convolution plus bias (torch.nn.functional.conv_transpose{d}d): kernel (inC, "
    "outC, k...), bias (outC,), out = (n - 1)*s - 2p + k (+ output_padding). The exact adjoint "
    "of conv in its input. VJP: conv_weight_grad(x, g) to w, sum of g to b, conv_core to x."
)



def _conv_errors(only: int | None) -> list[ErrorInput]:
    records = [ErrorInput(((3, 2, 3, 3), (4,), (2, 5, 6)), {}, ShapeError,
                          r"bias must have shape \(3,\), found \(4,\)")]
    if only == 2:
        records.append(ErrorInput(((3, 2, 3), (3,), (2, 5)), {}, ShapeError,
                                  r"kernel must have 2 spatial dims \(outC, inC, k\.\.\.\)"))
    return records


def _conv_transpose_errors(only: int | None) -> list[ErrorInput]:
    records = [ErrorInput(((2, 3, 3, 3), (2,), (2, 3, 4)), {}, ShapeError,
                          r"bias must have shape \(3,\), found \(2,\)")]
    if only == 2:
        records.append(ErrorInput(((2, 3, 3), (3,), (2, 4)), {}, ShapeError,
                                  "kernel must have 2 spatial dims"))
    return records


for _name, _only in (("conv", None), ("conv2d", 2)):
    register(Primitive(
        _name, ("w", "b", "x"), _conv_infer(_name, _only), _conv_forward,
        attrs={"stride": 1, "padding": 0}, attr_kinds=K.CONV, vjp=_conv_vjp,
        jvp=_affine_jvp("conv_core"),
        selective=True,
        semantics=_CONV_SEMANTICS.format(d="N" if _only is None else "2"),
        samples=_with_bias(_core_samples if _only is None else _only_2d(_core_samples), 0),
        torch_ref=lambda torch, w, b, x, stride, padding: _torch_conv(
            torch, w, x, b, stride, padding),
        error_inputs=_conv_errors(_only),
    ))

for _name, _only in (("conv_transpose", None), ("conv_transpose2d", 2)):
    register(Primitive(
        _name, ("w", "b", "x"), _conv_transpose_infer(_name, _only), _conv_transpose_forward,
        attrs={"stride": 1, "padding": 0, "output_padding": 0}, attr_kinds=K.CONV_T,
        vjp=_conv_transpose_vjp,
        jvp=_affine_jvp("conv_transpose_core"), selective=True,
        semantics=_CT_SEMANTICS.format(d="N" if _only is None else "2"),
        samples=_with_bias(_ct_core_samples if _only is None else _only_2d(_ct_core_samples), 1),
        torch_ref=lambda torch, w, b, x, stride, padding, output_padding=0: _torch_conv_transpose(
            torch, w, x, b, stride, padding, output_padding),
        error_inputs=_conv_transpose_errors(_only),
    ))
