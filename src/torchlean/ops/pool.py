"""Pooling (N-D, d = 1, 2, 3): max, average and smooth (log-sum-exp) max, over strided windows.

Public primitives: ``max_pool`` / ``max_pool2d`` / ``max_pool2d_pad``, ``avg_pool`` /
``avg_pool2d`` / ``avg_pool2d_pad`` and ``smooth_max_pool`` / ``smooth_max_pool2d``. Inputs are
``(C, spatial...)`` or ``(N, C, spatial...)``; kernel, stride and padding are ints or per-axis
tuples; stride defaults to the kernel size. An int ``kernel_size`` for the N-D ops means 2-D
pooling for 3-D and 4-D inputs, 1-D for 2-D inputs and 3-D for 5-D inputs; pass a tuple to say
which.

Padding semantics differ by op, as PyTorch's do: max pooling *ignores* padded cells (they never
win; padding may be at most half the kernel so every window holds a real cell); average pooling
counts them as zeros in the divisor (count_include_pad=True); smooth max pooling enters them as
zeros in the log-sum-exp.

Derivative rules close over four helper primitives so that every derivative is again
differentiable (hvp / hessian work through pooling):

- ``max_pool_backward(x, g)``: routes g to each window's first maximum (row-major window order);
  linear in g. ``max_pool_gather(x, h)``: reads h at the same positions, its adjoint in h and
  max_pool's JVP. Both treat x as piecewise constant (zero derivative in x).
- ``pool_unfold(x)``: the windows of zero-padded x, flattened to a last axis of size prod(k).
  ``pool_fold(c)``: its adjoint (col2im). Both linear; avg and smooth max pooling use them.

Kernels run in the namespace of their inputs (``backend.namespace_of``): one code path for NumPy
and a CUDA device (strided views, masked copies and in-place ufuncs with ``out=``, all of which
CuPy shares), with no host round trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError, SignatureError
from ..core.registry import _REQUIRED, ErrorInput, Primitive, Sample, register
from ..core.shape import Shape, per_axis, size
from .samples import distinct, normal
from .windows import (
    axes_tuple,
    crop_spatial,
    kernel_offsets,
    out_sizes,
    pad_spatial,
    scatter_windows,
    window_view,
)

Geometry = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]


# ---------------------------------------------------------------------------------------------
# Geometry: every check before any compute.


def _infer_d(op: str, x: Shape, kernel_size: Any, fixed_d: int | None) -> int:
    if fixed_d is not None:
        return fixed_d
    if isinstance(kernel_size, int | np.integer):
        return {2: 1, 3: 2, 4: 2, 5: 3}.get(len(x), 2)
    try:
        return len(tuple(kernel_size))
    except TypeError:
        raise ShapeError(f"{op}: kernel_size must be an int or a tuple of ints, found "
                         f"{kernel_size!r}") from None


def geometry(op: str, x: Shape, kernel_size: Any, stride: Any, padding: Any,
             fixed_d: int | None = None, max_pad_half: bool = False) -> tuple[Geometry, Shape]:
    """``(d, kernel, stride, padding)`` as tuples, and the output shape; ``ShapeError`` if bad."""
    d = _infer_d(op, x, kernel_size, fixed_d)
    if d not in (1, 2, 3):
        raise ShapeError(f"{op}: pooling is 1-, 2- or 3-D, found kernel_size {kernel_size!r}")
    if len(x) not in (d + 1, d + 2):
        raise ShapeError(f"{op}: input must be (C, spatial x{d}) or (N, C, spatial x{d}), "
                         f"found shape {x}")
    k = per_axis(op, "kernel_size", kernel_size, d, 1)
    s = k if stride is None else per_axis(op, "stride", stride, d, 1)
    p = per_axis(op, "padding", padding, d, 0)
    if max_pad_half and any(pp > kk // 2 for pp, kk in zip(p, k, strict=True)):
        raise ShapeError(f"{op}: padding {p} must be at most half the kernel {k} (so every "
                         "window holds a real cell)")
    out = out_sizes(op, x[-d:], k, s, p, f"input {x}")
    return (d, k, s, p), x[:-d] + out


def _geom_of(op: str, shape: Shape, attrs: dict[str, Any], fixed_d: int | None,
             max_pad_half: bool = False) -> Geometry:
    return geometry(op, tuple(shape), attrs["kernel_size"], attrs.get("stride"),
                    attrs.get("padding", 0), fixed_d, max_pad_half)[0]


def _helper_attrs(geom: Geometry) -> dict[str, Any]:
    _, k, s, p = geom
    return {"kernel_size": k, "stride": s, "padding": p}


# ---------------------------------------------------------------------------------------------
# Kernels.


def _window_cols(x: Any, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...],
                 fill: float) -> Any:
    """Windows of the padded input as ``lead + out + (prod(k),)`` (one strided copy)."""
    view = window_view(pad_spatial(x, p, fill), k, s, kernel_first=False)
    d = len(k)
    return view.reshape(view.shape[: view.ndim - d] + (size(k),))


def _offset_views(padded: Any, k: tuple[int, ...], s: tuple[int, ...]) -> list[Any]:
    """For each kernel offset, the strided view (lead + out) of the cells it reads."""
    view = window_view(padded, k, s, kernel_first=True)
    rest = (slice(None),) * len(k)
    return [view[(Ellipsis,) + off + rest] for off in kernel_offsets(k)]


def _window_max(views: list[Any]) -> Any:
    xp = namespace_of(views[0])
    best = views[0].copy()
    for v in views[1:]:
        xp.maximum(best, v, out=best)
    return best


def _first_max_masks(x: Any, k: tuple[int, ...], s: tuple[int, ...],
                     p: tuple[int, ...], best: Any = None) -> list[Any]:
    """One boolean mask (lead + out) per kernel offset, true where that offset holds its window's
    first maximum in row-major order. -inf padding: padded cells never win. ``best``: the
    windows' maxima when the caller has them (the fast kernels keep the forward's)."""
    views = _offset_views(pad_spatial(x, p, -np.inf), k, s)
    if best is None:
        best = _window_max(views)
    xp = namespace_of(best)
    masks = []
    taken = None
    for j, v in enumerate(views):
        hit = v == best
        if taken is None:
            taken = hit.copy()
        else:
            xp.greater(hit, taken, out=hit)  # hit and not taken, in one pass
            if j + 1 < len(views):
                taken |= hit
        masks.append(hit)
    return masks


def _fold(cols: Any, spatial: tuple[int, ...], k: tuple[int, ...], s: tuple[int, ...],
          p: tuple[int, ...]) -> Any:
    """Adjoint of ``_window_cols`` with zero padding: sum window entries back, crop padding."""
    full = tuple(n + 2 * pp for n, pp in zip(spatial, p, strict=True))
    buf = scatter_windows(cols.reshape(cols.shape[:-1] + k), full, s, kernel_first=False)
    y = crop_spatial(buf, p, spatial)
    return y if not any(p) else namespace_of(y).ascontiguousarray(y)


def _max_pool(x: Any, kernel_size: Any, stride: Any, padding: Any, fixed_d: int | None) -> Any:
    _, k, s, p = geometry("max_pool", x.shape, kernel_size, stride, padding, fixed_d)[0]
    return _window_max(_offset_views(pad_spatial(x, p, -np.inf), k, s))


def _max_pool_backward(x: Any, g: Any, kernel_size: Any, stride: Any, padding: Any,
                       best: Any = None) -> Any:
    k = tuple(kernel_size)
    s, p = axes_tuple(stride, len(k)), axes_tuple(padding, len(k))  # an int means every axis
    d = len(k)
    xp = namespace_of(g)
    spatial = tuple(x.shape[x.ndim - d:])
    full = tuple(n + 2 * pp for n, pp in zip(spatial, p, strict=True))
    out = g.shape[g.ndim - d:]
    # Windows that tile the input exactly write each cell once: no zero fill, no accumulation.
    tiled = s == k and not any(p) and all(
        o * kk == n for o, kk, n in zip(out, k, spatial, strict=True))
    buf = (xp.empty if tiled else xp.zeros)(x.shape[: x.ndim - d] + full, dtype=g.dtype)
    for off, mask in zip(kernel_offsets(k), _first_max_masks(x, k, s, p, best), strict=True):
        target = (Ellipsis,) + tuple(slice(o, o + ss * (n - 1) + 1, ss)
                                     for o, ss, n in zip(off, s, out, strict=True))
        view = buf[target]
        if tiled:
            xp.multiply(g, mask, out=view)
        else:
            xp.add(view, xp.multiply(g, mask, dtype=g.dtype), out=view)
    y = crop_spatial(buf, p, spatial)
    return y if not any(p) else xp.ascontiguousarray(y)


def _max_pool_gather(x: Any, h: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    k = tuple(kernel_size)
    s, p = axes_tuple(stride, len(k)), axes_tuple(padding, len(k))  # an int means every axis
    views = _offset_views(pad_spatial(h, p, 0.0), k, s)
    masks = _first_max_masks(x, k, s, p)
    xp = namespace_of(h)
    out = xp.zeros(masks[0].shape, dtype=h.dtype)
    for v, mask in zip(views, masks, strict=True):
        xp.copyto(out, v, where=mask)
    return out


def _pool_unfold(x: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    k = tuple(kernel_size)
    return _window_cols(x, k, axes_tuple(stride, len(k)), axes_tuple(padding, len(k)), 0.0)


def _pool_fold(c: Any, spatial: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    k = tuple(kernel_size)
    return _fold(c, tuple(spatial), k, axes_tuple(stride, len(k)), axes_tuple(padding, len(k)))


def _avg_pool(x: Any, kernel_size: Any, stride: Any, padding: Any, fixed_d: int | None) -> Any:
    _, k, s, p = geometry("avg_pool", x.shape, kernel_size, stride, padding, fixed_d)[0]
    views = _offset_views(pad_spatial(x, p, 0.0), k, s)
    out = views[0].copy()
    for v in views[1:]:
        out += v
    out *= 1.0 / size(k)
    return out


def _smooth_max_pool(x: Any, beta: float, kernel_size: Any, stride: Any, padding: Any,
                     fixed_d: int | None) -> Any:
    _, k, s, p = geometry("smooth_max_pool", x.shape, kernel_size, stride, padding, fixed_d)[0]
    cols = _window_cols(x, k, s, p, 0.0)
    xp = namespace_of(cols)
    m = cols.max(axis=-1, keepdims=True)
    lse = xp.log(xp.exp((cols - m) * beta).sum(axis=-1)) / beta
    return (m[..., 0] + lse).astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Helper primitives.


def _helper_geometry(op: str, x: Shape, kernel_size: Any, stride: Any, padding: Any) -> Shape:
    if not isinstance(kernel_size, tuple | list):
        raise ShapeError(f"{op}: kernel_size must be a tuple, found {kernel_size!r}")
    return geometry(op, x, tuple(kernel_size), stride, padding, len(kernel_size))[1]


def _same_shapes(op: str, expected: Shape, other: Shape, what: str, whose: str) -> None:
    if expected != other:
        raise ShapeError(f"{op}: {what} {other} must have {whose} shape {expected}")


def _mpb_infer(x: Shape, g: Shape, kernel_size: Any, stride: Any, padding: Any) -> Shape:
    out = _helper_geometry("max_pool_backward", x, kernel_size, stride, padding)
    _same_shapes("max_pool_backward", out, g, "cotangent", "the pooled output's")
    return x


def _mpg_infer(x: Shape, h: Shape, kernel_size: Any, stride: Any, padding: Any) -> Shape:
    out = _helper_geometry("max_pool_gather", x, kernel_size, stride, padding)
    _same_shapes("max_pool_gather", x, h, "h", "x's")
    return out


_HELPER_GEOMS = (
    ((2, 5, 5), {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
    ((2, 2, 5, 4), {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 1)}),
    ((2, 7), {"kernel_size": (3,), "stride": (2,), "padding": (1,)}),
    ((1, 3, 4, 3), {"kernel_size": (2, 2, 2), "stride": (1, 2, 1), "padding": (0, 1, 0)}),
)


def _helper_samples(second: str) -> Any:
    def make(rng: np.random.Generator) -> list[Sample]:
        out = []
        for shape, attrs in _HELPER_GEOMS:
            x = distinct(rng, *shape)
            if second == "out":
                other = normal(rng, *_helper_geometry("s", shape, **attrs))
            else:
                other = normal(rng, *shape)
            out.append(Sample((x, other), dict(attrs)))
        return out

    return make


# The 2x2, stride-2 window the helpers' error inputs use (on a (2, 5, 5) input: output (2, 2, 2)).
_ERROR_GEOM: dict[str, Any] = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}


def _torch_batch(x: Any, d: int) -> tuple[Any, bool]:
    return (x, True) if x.dim() == d + 2 else (x.unsqueeze(0), False)


def _torch_max_pool(torch: Any, x: Any, k: Any, s: Any, p: Any, d: int,
                    return_indices: bool = False) -> Any:
    f = getattr(torch.nn.functional, f"max_pool{d}d")
    xb, batched = _torch_batch(x, d)
    res = f(xb, k, s, p, return_indices=return_indices)
    if return_indices:
        y, idx = res
        return (y, idx) if batched else (y[0], idx[0])
    return res if batched else res[0]


def _torch_max_pool_backward(torch: Any, x: Any, g: Any, kernel_size: Any, stride: Any,
                             padding: Any) -> Any:
    z = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = _torch_max_pool(torch, z, kernel_size, stride, padding, len(kernel_size))
        (gx,) = torch.autograd.grad((y * g).sum(), z, create_graph=True)
    return gx


def _torch_max_pool_gather(torch: Any, x: Any, h: Any, kernel_size: Any, stride: Any,
                           padding: Any) -> Any:
    d = len(kernel_size)
    y, idx = _torch_max_pool(torch, x.detach(), kernel_size, stride, padding, d, True)
    lead = h.shape[:-d]
    flat = h.reshape(lead + (-1,))
    return torch.gather(flat, -1, idx.reshape(lead + (-1,))).reshape(y.shape)


register(Primitive(
    "max_pool_backward", ("x", "g"), _mpb_infer, _max_pool_backward,
    attrs=("kernel_size", "stride", "padding"), attr_kinds=K.POOL_HELPER,
    vjp=lambda ops, g, xs, out, **a: (None, ops.max_pool_gather(xs[0], g, **a)),
    jvp=lambda ops, ts, xs, out, **a: (
        None if ts[1] is None else ops.max_pool_backward(xs[0], ts[1], **a)),
    semantics="The VJP of max pooling: each window's g goes to the window's first maximum in "
              "row-major order (padded cells never win); contributions of overlapping windows "
              "add. Linear in g; x only selects positions (zero derivative in x). VJP in g: "
              "max_pool_gather.",
    samples=_helper_samples("out"), torch_ref=_torch_max_pool_backward,
    error_inputs=[
        ErrorInput(((2, 5, 5), (2, 3, 3)), _ERROR_GEOM, ShapeError,
                   r"cotangent \(2, 3, 3\) must have the pooled output's shape \(2, 2, 2\)"),
        ErrorInput(((2, 5, 5), (2, 2, 2)), {"kernel_size": 2, "stride": (2, 2), "padding": (0, 0)},
                   ShapeError, "kernel_size must be a non-empty tuple.*found 2"),
    ],
))

register(Primitive(
    "max_pool_gather", ("x", "h"), _mpg_infer, _max_pool_gather,
    attrs=("kernel_size", "stride", "padding"), attr_kinds=K.POOL_HELPER,
    vjp=lambda ops, g, xs, out, **a: (None, ops.max_pool_backward(xs[0], g, **a)),
    jvp=lambda ops, ts, xs, out, **a: (
        None if ts[1] is None else ops.max_pool_gather(xs[0], ts[1], **a)),
    semantics="h read at each window's first maximum of x (row-major order, padded cells never "
              "win): max pooling's JVP and the adjoint of max_pool_backward in g. Linear in h; "
              "zero derivative in x.",
    samples=_helper_samples("in"), torch_ref=_torch_max_pool_gather,
    error_inputs=[ErrorInput(((2, 5, 5), (2, 4, 4)), _ERROR_GEOM, ShapeError,
                             r"h \(2, 4, 4\) must have x's shape \(2, 5, 5\)")],
))


def _unfold_infer(x: Shape, kernel_size: Any, stride: Any, padding: Any) -> Shape:
    out = _helper_geometry("pool_unfold", x, kernel_size, stride, padding)
    return out + (size(tuple(kernel_size)),)


def _fold_infer(c: Shape, spatial: Any, kernel_size: Any, stride: Any, padding: Any) -> Shape:
    op = "pool_fold"
    d = len(kernel_size)
    spatial = tuple(spatial)
    if len(spatial) != d or len(c) < d + 2:
        raise ShapeError(f"{op}: columns {c} do not fit spatial size {spatial} and kernel "
                         f"{tuple(kernel_size)}")
    x = c[: len(c) - d - 1] + spatial
    out = _helper_geometry(op, x, kernel_size, stride, padding)
    if out + (size(tuple(kernel_size)),) != c:
        raise ShapeError(f"{op}: columns have shape {c}, expected {out + (size(kernel_size),)} "
                         f"for input {x}")
    return x


def _torch_unfold_axes(torch: Any, x: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    """Windows of zero-padded x, lead + out + (prod(k),), with torch's Tensor.unfold."""
    d = len(kernel_size)
    pad: list[int] = []
    for pp in reversed(padding):
        pad += [pp, pp]
    z = torch.nn.functional.pad(x, pad) if any(padding) else x
    first = x.dim() - d
    for i in range(d):
        z = z.unfold(first + i, kernel_size[i], stride[i])
    return z.reshape(tuple(z.shape[: x.dim()]) + (-1,))


def _torch_fold(torch: Any, c: Any, spatial: Any, kernel_size: Any, stride: Any,
                padding: Any) -> Any:
    d = len(kernel_size)
    z = torch.zeros(tuple(c.shape[: c.dim() - d - 1]) + tuple(spatial), dtype=c.dtype,
                    requires_grad=True)
    with torch.enable_grad():
        cols = _torch_unfold_axes(torch, z, kernel_size, stride, padding)
        (gz,) = torch.autograd.grad((cols * c).sum(), z, create_graph=True)
    return gz


def _unfold_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((normal(rng, *shape),), dict(attrs)) for shape, attrs in _HELPER_GEOMS]


def _fold_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for shape, attrs in _HELPER_GEOMS:
        c = normal(rng, *_unfold_infer(shape, **attrs))
        out.append(Sample((c,), {"spatial": shape[len(shape) - len(attrs["kernel_size"]):],
                                 **attrs}))
    return out


register(Primitive(
    "pool_unfold", ("x",), _unfold_infer, _pool_unfold,
    attrs=("kernel_size", "stride", "padding"), attr_kinds=K.POOL_HELPER, linear=True,
    vjp=lambda ops, g, xs, out, **a: (ops.pool_fold(
        g, spatial=tuple(xs[0].shape[len(xs[0].shape) - len(a["kernel_size"]):]), **a),),
    semantics="The pooling windows of zero-padded x, each flattened row-major into a last axis "
              "of size prod(kernel): lead + out + (prod(k),). Linear; VJP: pool_fold.",
    samples=_unfold_samples, torch_ref=_torch_unfold_axes,
    error_inputs=[ErrorInput(((2, 5, 5),), {"kernel_size": 2, "stride": 2, "padding": 0},
                             ShapeError, "kernel_size must be a non-empty tuple.*found 2")],
))

register(Primitive(
    "pool_fold", ("c",), _fold_infer, _pool_fold,
    attrs=("spatial", "kernel_size", "stride", "padding"),
    attr_kinds={"spatial": K.SIZES, **K.POOL_HELPER}, linear=True,
    vjp=lambda ops, g, xs, out, spatial, **a: (ops.pool_unfold(g, **a),),
    semantics="The adjoint of pool_unfold (col2im): each window entry is added back at its "
              "input position, padding cropped away. Linear; VJP: pool_unfold.",
    samples=_fold_samples, torch_ref=_torch_fold,
    error_inputs=[ErrorInput(((2, 2, 2, 3),), {"spatial": (5, 5), **_ERROR_GEOM}, ShapeError,
                             r"columns have shape \(2, 2, 2, 3\), expected \(2, 2, 2, 4\)")],
))


# ---------------------------------------------------------------------------------------------
# Public pooling primitives.


def _keep_last(ops: Any, v: Any) -> Any:
    return ops.reshape(v, shape=tuple(v.shape) + (1,))


def _max_rules(fixed_d: int | None) -> dict[str, Any]:
    def vjp(ops: Any, g: Any, xs: Any, out: Any, **attrs: Any) -> tuple[Any]:
        geom = _geom_of("max_pool", xs[0].shape, attrs, fixed_d)
        return (ops.max_pool_backward(xs[0], g, **_helper_attrs(geom)),)

    def jvp(ops: Any, ts: Any, xs: Any, out: Any, **attrs: Any) -> Any:
        geom = _geom_of("max_pool", xs[0].shape, attrs, fixed_d)
        return ops.max_pool_gather(xs[0], ts[0], **_helper_attrs(geom))

    return {"vjp": vjp, "jvp": jvp}


def _avg_vjp(fixed_d: int | None) -> Any:
    def vjp(ops: Any, g: Any, xs: Any, out: Any, **attrs: Any) -> tuple[Any]:
        geom = _geom_of("avg_pool", xs[0].shape, attrs, fixed_d)
        d, k = geom[0], geom[1]
        kk = size(k)
        spread = ops.broadcast_to(_keep_last(ops, ops.scale(g, c=1.0 / kk)),
                                  shape=tuple(g.shape) + (kk,))
        spatial = tuple(xs[0].shape[len(xs[0].shape) - d:])
        return (ops.pool_fold(spread, spatial=spatial, **_helper_attrs(geom)),)

    return vjp


def _smooth_rules(fixed_d: int | None) -> dict[str, Any]:
    def weights(ops: Any, x: Any, beta: float, geom: Geometry) -> Any:
        return ops.softmax(ops.scale(ops.pool_unfold(x, **_helper_attrs(geom)), c=beta))

    def vjp(ops: Any, g: Any, xs: Any, out: Any, beta: float, **attrs: Any) -> tuple[Any]:
        geom = _geom_of("smooth_max_pool", xs[0].shape, attrs, fixed_d)
        w = weights(ops, xs[0], beta, geom)
        spatial = tuple(xs[0].shape[len(xs[0].shape) - geom[0]:])
        return (ops.pool_fold(ops.mul(w, _keep_last(ops, g)), spatial=spatial,
                              **_helper_attrs(geom)),)

    def jvp(ops: Any, ts: Any, xs: Any, out: Any, beta: float, **attrs: Any) -> Any:
        geom = _geom_of("smooth_max_pool", xs[0].shape, attrs, fixed_d)
        w = weights(ops, xs[0], beta, geom)
        return ops.reduce_sum(ops.mul(w, ops.pool_unfold(ts[0], **_helper_attrs(geom))), axis=-1)

    return {"vjp": vjp, "jvp": jvp}


# Sample geometries, one list per attribute set, so every sample names all its attributes.
_ND_CASES: list[tuple[Shape, dict[str, Any]]] = [
    ((2, 4, 4), {"kernel_size": 2, "stride": None, "padding": 0}),
    ((2, 2, 5, 5), {"kernel_size": (3, 2), "stride": (2, 1), "padding": 0}),
    ((2, 5, 4), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 7), {"kernel_size": (3,), "stride": 2, "padding": 1}),
    ((1, 4, 3, 4), {"kernel_size": (2, 2, 2), "stride": 1, "padding": 0}),
]
_2D_CASES: list[tuple[Shape, dict[str, Any]]] = [
    ((2, 4, 4), {"kernel_size": 2, "stride": None}),
    ((2, 2, 5, 5), {"kernel_size": (3, 2), "stride": (2, 1)}),
    # batched 2x2 windows that tile: the fast kernels' compiled loops (ops/fast/pool_jit.py)
    ((2, 3, 4, 6), {"kernel_size": 2}),
]
_2D_PAD_CASES: list[tuple[Shape, dict[str, Any]]] = [
    ((2, 4, 4), {"kernel_size": 2, "stride": 2, "padding": 0}),
    ((2, 2, 5, 5), {"kernel_size": (3, 2), "stride": (2, 1), "padding": 0}),
    ((2, 5, 4), {"kernel_size": 3, "stride": 2, "padding": 1}),
]


def _pool_samples(make: Any, cases: list[tuple[Shape, dict[str, Any]]],
                  **extra: Any) -> Any:
    """One sample per case, its input drawn by ``make``; ``extra`` attributes (beta) first."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        return [Sample((make(rng, *shape),), {**extra, **attrs}) for shape, attrs in cases]

    return samples


def _torch_pool(kind: str, fixed_d: int | None) -> Any:
    def ref(torch: Any, x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Any:
        (d, k, s, p), _ = geometry(kind, tuple(x.shape), kernel_size, stride, padding, fixed_d)
        xb, batched = _torch_batch(x, d)
        if kind == "max_pool":
            y = getattr(torch.nn.functional, f"max_pool{d}d")(xb, k, s, p)
        else:
            y = getattr(torch.nn.functional, f"avg_pool{d}d")(xb, k, s, p,
                                                              count_include_pad=True)
        return y if batched else y[0]

    return ref


def _torch_smooth(fixed_d: int | None) -> Any:
    def ref(torch: Any, x: Any, beta: float, kernel_size: Any, stride: Any = None,
            padding: Any = 0) -> Any:
        (d, k, s, p), _ = geometry("smooth_max_pool", tuple(x.shape), kernel_size, stride,
                                   padding, fixed_d)
        cols = _torch_unfold_axes(torch, x, k, s, p)
        return torch.logsumexp(cols * beta, dim=-1) / beta

    return ref


# Attribute sets. The N-D ops take padding with a default; the 2-D ops keep TorchLean's two
# signatures: (kernel_size, stride = kernel) without padding, and the three attributes required.
_ND_ATTRS: dict[str, Any] = {"kernel_size": _REQUIRED, "stride": None, "padding": 0}
_2D_ATTRS: dict[str, Any] = {"kernel_size": _REQUIRED, "stride": None}
_2D_PAD_ATTRS: dict[str, Any] = {"kernel_size": _REQUIRED, "stride": _REQUIRED,
                                 "padding": _REQUIRED}


def _max_infer(name: str, fixed_d: int | None) -> Any:
    def infer(x: Shape, **a: Any) -> Shape:
        return geometry(name, x, a["kernel_size"], a.get("stride"), a.get("padding", 0),
                        fixed_d, max_pad_half=True)[1]

    return infer


def _max_forward(fixed_d: int | None) -> Any:
    def forward(x: Any, **a: Any) -> Any:
        return _max_pool(x, a["kernel_size"], a.get("stride"), a.get("padding", 0),
                         fixed_d)

    return forward


def _avg_infer(name: str, fixed_d: int | None) -> Any:
    def infer(x: Shape, **a: Any) -> Shape:
        return geometry(name, x, a["kernel_size"], a.get("stride"), a.get("padding", 0),
                        fixed_d)[1]

    return infer


def _avg_forward(fixed_d: int | None) -> Any:
    def forward(x: Any, **a: Any) -> Any:
        return _avg_pool(x, a["kernel_size"], a.get("stride"), a.get("padding", 0),
                         fixed_d)

    return forward


def _smooth_infer(name: str, fixed_d: int | None) -> Any:
    def infer(x: Shape, **a: Any) -> Shape:
        beta = a["beta"]
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not beta > 0:
            raise ShapeError(f"{name}: beta must be a positive number, found {beta!r}")
        return geometry(name, x, a["kernel_size"], a.get("stride"), a.get("padding", 0),
                        fixed_d)[1]

    return infer


def _smooth_forward(fixed_d: int | None) -> Any:
    def forward(x: Any, **a: Any) -> Any:
        return _smooth_max_pool(x, a["beta"], a["kernel_size"], a.get("stride"),
                                a.get("padding", 0), fixed_d)

    return forward


_MAX_SEMANTICS = (
    "{dims} max pooling (torch.nn.functional.max_pool{{1,2,3}}d). Padded cells are ignored (never "
    "win; padding <= kernel // 2). The gradient goes to the first maximum of each window in "
    "row-major window order; overlapping windows add. VJP: max_pool_backward; JVP: "
    "max_pool_gather."
)
_AVG_SEMANTICS = (
    "{dims} average pooling with zero padding counted in the divisor (count_include_pad=True): "
    "each window's sum / prod(kernel). Linear; VJP: g / prod(k) spread over each window "
    "(pool_fold)."
)
_SMOOTH_SEMANTICS = (
    "{dims} smooth max pooling: (1/beta) log sum exp(beta x) over each window, padded cells "
    "entering as 0, computed max-shifted (no overflow for large beta x). beta > 0. Gradient: "
    "softmax(beta x) over each window times g (pool_unfold / softmax / pool_fold, so it "
    "differentiates again). Not a PyTorch op; compared with torch.logsumexp over unfolded "
    "windows."
)

# ``fixed_d``: the number of spatial axes an op fixes (2), or None for the N-D ops, which infer
# it from kernel_size and the input (see the module docstring).

register(Primitive(
    "max_pool", ("x",), _max_infer("max_pool", None), _max_forward(None), attrs=_ND_ATTRS,
    attr_kinds=K.POOL,
    **_max_rules(None),
    semantics=_MAX_SEMANTICS.format(dims="N-D"), samples=_pool_samples(distinct, _ND_CASES),
    torch_ref=_torch_pool("max_pool", None),
    error_inputs=[
        ErrorInput(((2, 4, 4),), {"kernel_size": 2, "stride": None, "padding": 2}, ShapeError,
                   r"padding \(2, 2\) must be at most half the kernel \(2, 2\)"),
        ErrorInput(((2, 4, 4),), {"kernel_size": 2.5, "stride": None, "padding": 0}, ShapeError,
                   "kernel_size must be >= 1.*found 2.5"),
    ],
))
register(Primitive(
    "max_pool2d", ("x",), _max_infer("max_pool2d", 2), _max_forward(2), attrs=_2D_ATTRS,
    attr_kinds=K.POOL_2D,
    **_max_rules(2),
    semantics=_MAX_SEMANTICS.format(dims="2-D"), samples=_pool_samples(distinct, _2D_CASES),
    torch_ref=_torch_pool("max_pool", 2),
    error_inputs=[ErrorInput(((2, 4, 4),), {"kernel_size": 5, "stride": None}, ShapeError,
                             r"kernel \(5, 5\) larger than padded input \(4, 4\) with "
                             r"padding \(0, 0\) \(input \(2, 4, 4\)\)")],
))
register(Primitive(
    "max_pool2d_pad", ("x",), _max_infer("max_pool2d_pad", 2), _max_forward(2),
    attrs=_2D_PAD_ATTRS, attr_kinds=K.POOL, **_max_rules(2),
    semantics=_MAX_SEMANTICS.format(dims="2-D"),
    samples=_pool_samples(distinct, _2D_PAD_CASES), torch_ref=_torch_pool("max_pool", 2),
    error_inputs=[ErrorInput(((2, 4, 4),), {"kernel_size": 2, "stride": 0, "padding": 0},
                             ShapeError, "stride must be >= 1.*found 0")],
))

register(Primitive(
    "avg_pool", ("x",), _avg_infer("avg_pool", None), _avg_forward(None), attrs=_ND_ATTRS,
    attr_kinds=K.POOL,
    vjp=_avg_vjp(None), linear=True, semantics=_AVG_SEMANTICS.format(dims="N-D"),
    samples=_pool_samples(normal, _ND_CASES), torch_ref=_torch_pool("avg_pool", None),
    error_inputs=[
        ErrorInput(((4,),), {"kernel_size": 2, "stride": None, "padding": 0}, ShapeError,
                   r"input must be \(C, spatial x2\) or \(N, C, spatial x2\), found shape"),
        ErrorInput(((1, 1, 2, 2, 2, 2),), {"kernel_size": (2, 2, 2, 2), "stride": None,
                                           "padding": 0}, ShapeError,
                   "pooling is 1-, 2- or 3-D"),
    ],
))
register(Primitive(
    "avg_pool2d", ("x",), _avg_infer("avg_pool2d", 2), _avg_forward(2), attrs=_2D_ATTRS,
    attr_kinds=K.POOL_2D,
    vjp=_avg_vjp(2), linear=True, semantics=_AVG_SEMANTICS.format(dims="2-D"),
    samples=_pool_samples(normal, _2D_CASES), torch_ref=_torch_pool("avg_pool", 2),
    error_inputs=[ErrorInput(((2, 3, 3),), {"kernel_size": (2, 2, 2), "stride": None},
                             ShapeError,
                             r"kernel_size must be an int or 2 ints, found \(2, 2, 2\)")],
))
register(Primitive(
    "avg_pool2d_pad", ("x",), _avg_infer("avg_pool2d_pad", 2), _avg_forward(2),
    attrs=_2D_PAD_ATTRS, attr_kinds=K.POOL, vjp=_avg_vjp(2), linear=True,
    semantics=_AVG_SEMANTICS.format(dims="2-D"), samples=_pool_samples(normal, _2D_PAD_CASES),
    torch_ref=_torch_pool("avg_pool", 2),
    error_inputs=[ErrorInput(((2, 4, 4),), {"kernel_size": 3, "stride": 1, "padding": -1},
                             ShapeError, "padding must be >= 0.*found -1")],
))

register(Primitive(
    "smooth_max_pool", ("x",), _smooth_infer("smooth_max_pool", None), _smooth_forward(None),
    attrs={"beta": _REQUIRED, **_ND_ATTRS},
    attr_kinds={"beta": K.POSITIVE_REAL, **K.POOL}, **_smooth_rules(None),
    semantics=_SMOOTH_SEMANTICS.format(dims="N-D"),
    samples=_pool_samples(normal, _ND_CASES, beta=2.0), torch_ref=_torch_smooth(None),
    error_inputs=[ErrorInput(((2, 4, 4),), {"beta": 0, "kernel_size": 2, "stride": None,
                                            "padding": 0}, ShapeError,
                             "beta must be a positive number.*found 0")],
))
register(Primitive(
    "smooth_max_pool2d", ("x",), _smooth_infer("smooth_max_pool2d", 2), _smooth_forward(2),
    attrs={"beta": _REQUIRED, **_2D_ATTRS},
    attr_kinds={"beta": K.POSITIVE_REAL, **K.POOL_2D}, **_smooth_rules(2),
    semantics=_SMOOTH_SEMANTICS.format(dims="2-D"),
    samples=_pool_samples(normal, _2D_CASES, beta=2.0), torch_ref=_torch_smooth(2),
    error_inputs=[ErrorInput(((2, 4, 4),), {"beta": True, "kernel_size": 2, "stride": None},
                             ShapeError, "beta must be a positive number.*found True"),
                  ErrorInput(((2, 4, 4),), {"kernel_size": 2}, SignatureError,
                             "missing attribute 'beta'")],
))
