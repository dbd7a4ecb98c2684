"""Normalisation: layer_norm (last axis) and batch_norm (per channel), population variance.

Both are ``gamma * standardize(x) + beta`` for a set of statistic axes: the last axis for layer
norm; H x W for a ``(C, H, W)`` batch norm and N x H x W for ``(N, C, H, W)`` (PyTorch training
semantics; running statistics and eval mode belong to the ``nn.BatchNorm2d`` layer).

Their rules close over two helper primitives:

- ``standardize(x, axes, eps)``: ``xhat = (x - mean) / sqrt(var + eps)`` over ``axes``;
- ``standardize_backward(x, g, axes, eps)``: ``J(x) g`` where ``J`` is standardize's Jacobian,
  ``rstd * (g - mean(g) - xhat * mean(g * xhat))``. ``J`` is symmetric, so this one primitive is
  both standardize's VJP and its JVP. Its own derivative in ``x`` is written below with primitives,
  so hvp / hessian work through normalisation.

Means over the statistic axes are ``sum_to`` a keep-dims shape, scaled by 1/count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, register
from ..core.shape import Shape, can_broadcast_to, size
from .array_api import amean, astype, asum, reshape
from .samples import normal


def _keep_shape(shape: Shape, axes: tuple[int, ...]) -> Shape:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _count(shape: Shape, axes: tuple[int, ...]) -> int:
    return size(tuple(shape[a] for a in axes))


# ---------------------------------------------------------------------------------------------
# Kernels.


def _trailing(x: Any, axes: tuple[int, ...]) -> bool:
    return axes == tuple(range(x.ndim - len(axes), x.ndim))


def _extended(xp: Any) -> bool:
    """Whether ``xp`` has the NumPy extensions the fast paths below use (``einsum``, ``out=``):
    NumPy, CuPy and the tests' stand-in device do; a namespace with only the array API standard
    (``array_api_strict``) takes ``vecdot`` and a fresh quotient instead."""
    return xp is np or hasattr(xp, "einsum")


def _row_dots(xp: Any, a: Any, b: Any) -> Any:
    """``sum_j a[i, j] b[i, j]`` for each row i."""
    return xp.einsum("ij,ij->i", a, b) if _extended(xp) else xp.vecdot(a, b, axis=-1)


def _column_dots(xp: Any, a: Any, b: Any) -> Any:
    """``sum_i a[i, j] b[i, j]`` for each column j."""
    return xp.einsum("ij,ij->j", a, b) if _extended(xp) else xp.vecdot(a, b, axis=-2)


def _rows_centred(x2: Any, eps: float) -> tuple[Any, Any]:
    """Row-wise ``x - mean`` and ``rstd`` (a vector) of a 2-D array; means are BLAS matvecs."""
    xp = namespace_of(x2)
    d = x2.shape[1]
    inv_d = xp.full(d, 1.0 / d, dtype=x2.dtype)
    c = x2 - (x2 @ inv_d)[:, None]
    var = _row_dots(xp, c, c)
    var *= 1.0 / d
    var += eps
    rstd = xp.sqrt(var)
    if _extended(xp):
        xp.divide(1.0, rstd, out=rstd)
    else:
        rstd = 1.0 / rstd
    return c, rstd


def _rows_stats(x2: Any, eps: float) -> tuple[Any, Any]:
    c, rstd = _rows_centred(x2, eps)
    rstd = rstd[:, None]
    c *= rstd
    return c, rstd


def _stats(x: Any, axes: tuple[int, ...], eps: float) -> tuple[Any, Any]:
    """``xhat`` (x's shape) and ``rstd`` (keep-dims) over ``axes``."""
    if _trailing(x, axes):
        lead = x.shape[: x.ndim - len(axes)]
        # Explicit sizes, not -1: a zero-size batch leaves -1 undetermined.
        xhat, rstd = _rows_stats(reshape(x, (size(lead), size(x.shape[len(lead):]))), eps)
        return reshape(xhat, x.shape), reshape(rstd, lead + (1,) * len(axes))
    xp = namespace_of(x)
    c = x - amean(x, axes, True)
    var = amean(xp.square(c), axes, True)
    rstd = astype(1.0 / xp.sqrt(var + eps), x.dtype, copy=False)
    c *= rstd
    return c, rstd


def _standardize(x: Any, axes: Any, eps: float) -> Any:
    return _stats(x, tuple(axes), eps)[0]


def _standardize_backward(x: Any, g: Any, axes: Any, eps: float) -> Any:
    axes = tuple(axes)
    if _trailing(x, axes):
        # rstd (g - mean g) - c * (mean(g c) rstd^3), with c = x - mean x: five passes.
        lead = x.shape[: x.ndim - len(axes)]
        x2 = reshape(x, (size(lead), size(x.shape[len(lead):])))
        g2 = reshape(g, x2.shape)
        c, rstd = _rows_centred(x2, eps)
        xp = namespace_of(x2)
        inv_d = xp.full(x2.shape[1], 1.0 / x2.shape[1], dtype=x.dtype)
        coef = _row_dots(xp, g2, c)
        coef *= (1.0 / x2.shape[1]) * rstd * rstd * rstd
        out = g2 - (g2 @ inv_d)[:, None]
        out *= rstd[:, None]
        c *= coef[:, None]
        out -= c
        return reshape(out, x.shape)
    xhat, rstd = _stats(x, axes, eps)
    a = amean(g, axes, True)
    b = amean(g * xhat, axes, True)
    xhat *= b
    out = g - a
    out -= xhat
    out *= rstd
    return out


def _norm_param_grad(x: Any, g: Any, axes: Any, eps: float, shape: Any) -> Any:
    axes, shape = tuple(axes), tuple(shape)
    if _trailing(x, axes) and shape == x.shape[x.ndim - len(axes):]:
        # Layer norm's parameter gradient: sum over rows of (g rstd) * (x - mean).
        x2 = reshape(x, (-1, size(shape)))
        c, rstd = _rows_centred(x2, eps)
        gr = reshape(g, x2.shape) * rstd[:, None]
        return reshape(_column_dots(namespace_of(gr), gr, c), shape)
    xhat = _stats(x, axes, eps)[0]
    xhat *= g
    lead = x.ndim - len(shape)
    red = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                     if n == 1 and x.shape[lead + i] != 1)
    return reshape(asum(xhat, red, True), shape)


# ---------------------------------------------------------------------------------------------
# Rules, written with primitives.


def _mean_keep(ops: Any, v: Any, axes: tuple[int, ...]) -> Any:
    shape = tuple(v.shape)
    return ops.scale(ops.sum_to(v, shape=_keep_shape(shape, axes)), c=1.0 / _count(shape, axes))


def _rstd(ops: Any, x: Any, axes: tuple[int, ...], eps: float) -> Any:
    c = ops.sub(x, _mean_keep(ops, x, axes))
    return ops.inv(ops.sqrt(ops.add_scalar(_mean_keep(ops, ops.square(c), axes), c=eps)))


def _sb_dx(ops: Any, x: Any, g: Any, h: Any, u: Any, axes: tuple[int, ...], eps: float,
           transpose: bool) -> Any:
    """Derivative of h = J(x) g in x: along tangent u (JVP) or against cotangent u (VJP).

    With s = rstd, xh = standardize(x), b = mean(g xh) and h = J g:
      JVP: dh[u] = -s (mean(xh u) h + b J u + mean(g J u) xh)
      VJP:         -s (mean(u h) xh + b J u + mean(u xh) h)
    """
    s = _rstd(ops, x, axes, eps)
    xh = ops.standardize(x, axes=axes, eps=eps)
    b = _mean_keep(ops, ops.mul(g, xh), axes)
    ju = ops.standardize_backward(x, u, axes=axes, eps=eps)
    if transpose:
        first = ops.mul(_mean_keep(ops, ops.mul(u, h), axes), xh)
        third = ops.mul(_mean_keep(ops, ops.mul(u, xh), axes), h)
    else:
        first = ops.mul(_mean_keep(ops, ops.mul(xh, u), axes), h)
        third = ops.mul(_mean_keep(ops, ops.mul(g, ju), axes), xh)
    total = ops.add(ops.add(first, ops.mul(b, ju)), third)
    return ops.scale(ops.mul(s, total), c=-1.0)


def _sb_vjp(ops: Any, cot: Any, xs: Any, out: Any, axes: Any, eps: float) -> tuple[Any, Any]:
    x, g = xs
    axes = tuple(axes)
    gx = _sb_dx(ops, x, g, out, cot, axes, eps, transpose=True)
    gg = ops.standardize_backward(x, cot, axes=axes, eps=eps)
    return gx, gg


def _sb_jvp(ops: Any, ts: Any, xs: Any, out: Any, axes: Any, eps: float) -> Any:
    x, g = xs
    tx, tg = ts
    axes = tuple(axes)
    parts = []
    if tg is not None:
        parts.append(ops.standardize_backward(x, tg, axes=axes, eps=eps))
    if tx is not None:
        parts.append(_sb_dx(ops, x, g, out, tx, axes, eps, transpose=False))
    return parts[0] if len(parts) == 1 else ops.add(parts[0], parts[1])


# ---------------------------------------------------------------------------------------------
# Shape rules.


def _check_eps(op: str, eps: Any) -> None:
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps >= 0:
        raise ShapeError(f"{op}: eps must be a non-negative number, found {eps!r}")


def _check_axes(op: str, x: Shape, axes: Any) -> tuple[int, ...]:
    axes = tuple(axes)
    if not axes or any(not isinstance(a, int) or not 0 <= a < len(x) for a in axes):
        raise ShapeError(f"{op}: axes {axes} must be non-negative axes of shape {x}")
    if any(x[a] == 0 for a in axes):
        raise ShapeError(f"{op}: statistics need non-empty axes {axes}, found shape {x}")
    return axes


def _standardize_infer(x: Shape, axes: Any, eps: float) -> Shape:
    _check_axes("standardize", x, axes)
    _check_eps("standardize", eps)
    return x


def _sb_infer(x: Shape, g: Shape, axes: Any, eps: float) -> Shape:
    _check_axes("standardize_backward", x, axes)
    _check_eps("standardize_backward", eps)
    if g != x:
        raise ShapeError(f"standardize_backward: g {g} must have x's shape {x}")
    return x


def _std_samples(two: bool) -> Any:
    def make(rng: np.random.Generator) -> list[Sample]:
        cases = [((3, 4), (1,)), ((2, 3, 2, 2), (0, 2, 3)), ((3, 2, 2), (1, 2))]
        return [Sample((normal(rng, *shape),) + ((normal(rng, *shape),) if two else ()),
                       {"axes": axes, "eps": 1e-3}) for shape, axes in cases]

    return make


def _torch_standardize(torch: Any, x: Any, axes: Any, eps: float) -> Any:
    dims = tuple(axes)
    mu = x.mean(dim=dims, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=dims, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps)


def _torch_sb(torch: Any, x: Any, g: Any, axes: Any, eps: float) -> Any:
    with torch.enable_grad():
        z = x if x.requires_grad else x.detach().requires_grad_(True)
        y = _torch_standardize(torch, z, axes, eps)
        (gz,) = torch.autograd.grad((y * g).sum(), z, create_graph=True)
    return gz


register(Primitive(
    "standardize", ("x",), _standardize_infer, _standardize, attrs=("axes", "eps"),
    attr_kinds={"axes": K.AXES, "eps": K.NON_NEGATIVE_REAL},
    vjp=lambda ops, g, xs, out, axes, eps: (
        ops.standardize_backward(xs[0], g, axes=tuple(axes), eps=eps),),
    jvp=lambda ops, ts, xs, out, axes, eps: ops.standardize_backward(
        xs[0], ts[0], axes=tuple(axes), eps=eps),
    semantics="(x - mean) / sqrt(var + eps) over the given axes (population variance). Its "
              "Jacobian is symmetric: VJP and JVP are both standardize_backward.",
    samples=_std_samples(False), torch_ref=_torch_standardize,
    error_inputs=[ErrorInput(((3, 4),), {"axes": (2,), "eps": 1e-3}, ShapeError,
                             r"axes \(2,\) must be non-negative axes of shape \(3, 4\)"),
                  ErrorInput(((3, 0),), {"axes": (1,), "eps": 1e-3}, ShapeError,
                             "statistics need non-empty axes"),
                  ErrorInput(((3, 4),), {"axes": (1,), "eps": -1.0}, ShapeError,
                             "eps must be a non-negative number.*found -1.0")],
))

register(Primitive(
    "standardize_backward", ("x", "g"), _sb_infer, _standardize_backward,
    attrs=("axes", "eps"),
    attr_kinds={"axes": K.AXES, "eps": K.NON_NEGATIVE_REAL}, vjp=_sb_vjp, jvp=_sb_jvp,
    semantics="J(x) g for standardize's (symmetric) Jacobian J: rstd * (g - mean(g) - xhat * "
              "mean(g * xhat)) over the axes. Linear in g; its derivative in x is written with "
              "primitives (see norm.py), so second derivatives of normalisation work.",
    samples=_std_samples(True), torch_ref=_torch_sb,
    error_inputs=[ErrorInput(((3, 4), (4, 3)), {"axes": (1,), "eps": 1e-3}, ShapeError,
                             r"g \(4, 3\) must have x's shape \(3, 4\)")],
))


def _npg_infer(x: Shape, g: Shape, axes: Any, eps: float, shape: Any) -> Shape:
    op = "norm_param_grad"
    _check_axes(op, x, axes)
    _check_eps(op, eps)
    if g != x:
        raise ShapeError(f"{op}: g {g} must have x's shape {x}")
    shape = tuple(shape)
    if not can_broadcast_to(shape, x):
        raise ShapeError(f"{op}: parameter shape {shape} does not broadcast to {x}")
    return shape


def _npg_vjp(ops: Any, cot: Any, xs: Any, out: Any, axes: Any, eps: float,
             shape: Any) -> tuple[Any, Any]:
    x, g = xs
    axes = tuple(axes)
    gx = ops.standardize_backward(x, ops.mul(g, cot), axes=axes, eps=eps)
    gg = ops.mul(ops.standardize(x, axes=axes, eps=eps), cot)
    return gx, gg


def _npg_jvp(ops: Any, ts: Any, xs: Any, out: Any, axes: Any, eps: float, shape: Any) -> Any:
    x, g = xs
    tx, tg = ts
    axes, shape = tuple(axes), tuple(shape)
    parts = []
    if tg is not None:
        parts.append(ops.sum_to(ops.mul(tg, ops.standardize(x, axes=axes, eps=eps)),
                                shape=shape))
    if tx is not None:
        parts.append(ops.sum_to(ops.mul(g, ops.standardize_backward(x, tx, axes=axes, eps=eps)),
                                shape=shape))
    return parts[0] if len(parts) == 1 else ops.add(parts[0], parts[1])


def _npg_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((normal(rng, 3, 4), normal(rng, 3, 4)),
                   {"axes": (1,), "eps": 1e-3, "shape": (4,)}),
            Sample((normal(rng, 2, 3, 2, 2), normal(rng, 2, 3, 2, 2)),
                   {"axes": (0, 2, 3), "eps": 1e-3, "shape": (3, 1, 1)})]


def _torch_npg(torch: Any, x: Any, g: Any, axes: Any, eps: float, shape: Any) -> Any:
    y = _torch_standardize(torch, x, axes, eps) * g
    lead = y.dim() - len(shape)
    y = y.sum(dim=tuple(range(lead))) if lead else y
    return y.sum_to_size(*shape)


register(Primitive(
    "norm_param_grad", ("x", "g"), _npg_infer, _norm_param_grad,
    attrs=("axes", "eps", "shape"),
    attr_kinds={"axes": K.AXES, "eps": K.NON_NEGATIVE_REAL, "shape": K.SHAPE}, vjp=_npg_vjp,
    jvp=_npg_jvp,
    semantics="sum_to(g * standardize(x, axes, eps), shape): the gradient of a normalisation's "
              "scale parameter (gamma), fused. Linear in g. VJP: standardize_backward(x, g * G) "
              "to x, standardize(x) * G to g.",
    samples=_npg_samples, torch_ref=_torch_npg,
    error_inputs=[ErrorInput(((3, 4), (3, 4)), {"axes": (1,), "eps": 1e-3, "shape": (3,)},
                             ShapeError, r"parameter shape \(3,\) does not broadcast to"),
                  ErrorInput(((3, 4), (3, 5)), {"axes": (1,), "eps": 1e-3, "shape": (4,)},
                             ShapeError, "must have x's shape")],
))


# ---------------------------------------------------------------------------------------------
# layer_norm and batch_norm.


def _ln_infer(x: Shape, gamma: Shape, beta: Shape, eps: float = 1e-6) -> Shape:
    op = "layer_norm"
    if len(x) == 0 or 0 in x:
        raise ShapeError(f"layer_norm: needs a non-empty last axis and batch, found shape {x}")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if s != (x[-1],):
            raise ShapeError(f"{op}: {name} must have shape ({x[-1]},) for input {x}, found {s}")
    _check_eps(op, eps)
    return x


def _bn_axes(shape: Shape) -> tuple[int, ...]:
    return (1, 2) if len(shape) == 3 else (0, 2, 3)


def _bn_infer(x: Shape, gamma: Shape, beta: Shape, eps: float = 1e-6) -> Shape:
    op = "batch_norm"
    if len(x) not in (3, 4):
        raise ShapeError(f"{op}: input must be (C, H, W) or (N, C, H, W), found shape {x}")
    if any(n == 0 for n in x):
        raise ShapeError(f"{op}: statistics need non-empty dims, found shape {x}")
    c = x[-3]
    for name, s in (("gamma", gamma), ("beta", beta)):
        if s != (c,):
            raise ShapeError(f"{op}: {name} must have shape ({c},) for input {x}, found {s}")
    _check_eps(op, eps)
    return x


def _ln_forward(x: Any, gamma: Any, beta: Any, eps: float = 1e-6) -> Any:
    y = _stats(x, (x.ndim - 1,), eps)[0]
    y *= gamma
    y += beta
    return y


def _bn_forward(x: Any, gamma: Any, beta: Any, eps: float = 1e-6) -> Any:
    y = _standardize(x, _bn_axes(x.shape), eps)
    y *= reshape(gamma, (-1, 1, 1))
    y += reshape(beta, (-1, 1, 1))
    return y


def _affine_norm_rules(axes_of: Any, param_shape_of: Any) -> tuple[Any, Any]:
    """VJP and JVP of ``gamma * standardize(x) + beta`` with gamma broadcast as ``pshape``."""

    def vjp(ops: Any, g: Any, xs: Any, out: Any, eps: float = 1e-6) -> tuple[Any, Any, Any]:
        x, gamma, _ = xs
        shape = tuple(x.shape)
        axes = axes_of(shape)
        pshape = param_shape_of(shape)
        c = gamma.shape[0]
        gam = gamma if pshape == (c,) else ops.reshape(gamma, shape=pshape)
        gx = ops.standardize_backward(x, ops.mul(g, gam), axes=axes, eps=eps)
        ggamma = ops.norm_param_grad(x, g, axes=axes, eps=eps, shape=pshape)
        gbeta = ops.sum_to(g, shape=pshape)
        if pshape != (c,):
            ggamma = ops.reshape(ggamma, shape=(c,))
            gbeta = ops.reshape(gbeta, shape=(c,))
        return gx, ggamma, gbeta

    def jvp(ops: Any, ts: Any, xs: Any, out: Any, eps: float = 1e-6) -> Any:
        x, gamma, _ = xs
        tx, tgamma, tbeta = ts
        shape = tuple(x.shape)
        axes = axes_of(shape)
        pshape = param_shape_of(shape)

        def param(p: Any) -> Any:
            return p if pshape == (p.shape[0],) else ops.reshape(p, shape=pshape)

        parts = []
        if tx is not None:
            parts.append(ops.mul(ops.standardize_backward(x, tx, axes=axes, eps=eps),
                                 param(gamma)))
        if tgamma is not None:
            parts.append(ops.mul(ops.standardize(x, axes=axes, eps=eps), param(tgamma)))
        if tbeta is not None:
            parts.append(ops.broadcast_to(param(tbeta), shape=shape))
        total = parts[0]
        for p in parts[1:]:
            total = ops.add(total, p)
        if tuple(total.shape) != shape:
            total = ops.broadcast_to(total, shape=shape)
        return total

    return vjp, jvp


_ln_vjp, _ln_jvp = _affine_norm_rules(lambda s: (len(s) - 1,), lambda s: (s[-1],))
_bn_vjp, _bn_jvp = _affine_norm_rules(_bn_axes, lambda s: (s[-3], 1, 1))


def _ln_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((normal(rng, 3, 5), normal(rng, 5), normal(rng, 5)), {"eps": 1e-6}),
            Sample((normal(rng, 2, 3, 4), normal(rng, 4), normal(rng, 4)), {"eps": 1e-3},
                   note="3-D"),
            Sample((normal(rng, 6), normal(rng, 6), normal(rng, 6)), {"eps": 1e-6}, note="1-D")]


def _bn_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((normal(rng, 2, 3, 3), normal(rng, 2), normal(rng, 2)), {"eps": 1e-6},
                   note="CHW"),
            Sample((normal(rng, 2, 3, 2, 2), normal(rng, 3), normal(rng, 3)), {"eps": 1e-3},
                   note="NCHW")]


def _torch_bn(torch: Any, x: Any, gamma: Any, beta: Any, eps: float = 1e-6) -> Any:
    xb = x if x.dim() == 4 else x.unsqueeze(0)
    y = torch.nn.functional.batch_norm(xb, None, None, gamma, beta, training=True, eps=eps)
    return y if x.dim() == 4 else y[0]


register(Primitive(
    "layer_norm", ("x", "gamma", "beta"), _ln_infer, _ln_forward, attrs={"eps": 1e-6},
    attr_kinds={"eps": K.NON_NEGATIVE_REAL},
    vjp=_ln_vjp, jvp=_ln_jvp,
    semantics="gamma * (x - mean) / sqrt(var + eps) + beta over the last axis, population "
              "variance; gamma, beta: (D,). eps defaults to 1e-6 (PyTorch's default is 1e-5: an "
              "intended difference; with equal eps the results agree). VJP: "
              "standardize_backward(x, g * gamma) to x, sum(g * xhat) to gamma, sum(g) to beta.",
    samples=_ln_samples,
    torch_ref=lambda torch, x, gamma, beta, eps=1e-6: torch.nn.functional.layer_norm(
        x, (x.shape[-1],), gamma, beta, eps=eps),
    error_inputs=[ErrorInput(((3, 4), (3,), (4,)), {}, ShapeError,
                             r"gamma must have shape \(4,\) for input \(3, 4\), found \(3,\)"),
                  ErrorInput(((0, 4), (4,), (4,)), {}, ShapeError,
                             "needs a non-empty last axis and batch"),
                  ErrorInput(((3, 4), (4,), (4,)), {"eps": "small"}, ShapeError,
                             "eps must be a non-negative number")],
))

register(Primitive(
    "batch_norm", ("x", "gamma", "beta"), _bn_infer, _bn_forward, attrs={"eps": 1e-6},
    attr_kinds={"eps": K.NON_NEGATIVE_REAL},
    vjp=_bn_vjp, jvp=_bn_jvp,
    semantics="Per-channel batch normalisation with batch statistics (PyTorch training mode, "
              "population variance): on (C, H, W) statistics over H x W (the seed's single "
              "image); on (N, C, H, W) over N x H x W. gamma, beta: (C,). eps defaults to 1e-6 "
              "(PyTorch: 1e-5). No running statistics here (nn.BatchNorm2d keeps them).",
    samples=_bn_samples, torch_ref=_torch_bn,
    error_inputs=[ErrorInput(((3, 4), (3,), (3,)), {}, ShapeError,
                             r"input must be \(C, H, W\) or \(N, C, H, W\)"),
                  ErrorInput(((2, 3, 3), (2,), (3,)), {}, ShapeError,
                             r"beta must have shape \(2,\)")],
))
