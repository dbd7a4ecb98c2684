"""Multi-head self-attention (no biases) and the masked softmax it needs.

``multi_head_attention(wq, wk, wv, wo, x, mask=None, num_heads=H)``: ``x`` is ``(n, d_model)`` or
``(B, n, d_model)``; ``wq, wk, wv: (d_model, H*D)``; ``wo: (H*D, d_model)``. Heads split as
``(n, H*D) -> (n, H, D) -> (H, n, D)`` (PyTorch's convention), scores are scaled by
``1/sqrt(D)``, and the optional boolean ``(n, n)`` mask (True = allowed) is a static attribute.
Masked scores are excluded exactly (weight 0, not a large negative number); a row with no allowed
entry gives output 0 and gradient 0, never NaN.

The forward kernel is fused NumPy (batched matmuls over ``(B, H)``, no Python loop over batch or
heads). The VJP and JVP are written with primitives (``matmul``, ``bmm``, ``reshape``,
``swap_adjacent_at_depth``, ``masked_softmax``...), so hvp / hessian work through attention.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, add_tangents, device_constant, register
from ..core.shape import Shape
from .array_api import amax, astype, asum, permute_dims, reshape
from .samples import normal

# ---------------------------------------------------------------------------------------------
# masked_softmax


def _masked_softmax(x: Any, mask: Any = None) -> Any:
    xp = namespace_of(x)
    if mask is None:
        e = xp.exp(x - amax(x, -1, True))
        e /= asum(e, -1, True)
        return e
    # The mask is a static attribute: on a device it is uploaded once (device_constant).
    allowed = device_constant(mask, xp, lambda m: np.asarray(m, dtype=bool))
    masked = xp.where(allowed, x, -np.inf)
    m = amax(masked, -1, True)
    m = xp.where(xp.isfinite(m), m, 0)  # a fully masked row: any shift works, all weights are 0
    e = xp.exp(masked - m)
    s = asum(e, -1, True)
    e /= xp.where(s > 0, s, 1)
    return astype(e, x.dtype, copy=False)


def _softmax_rule(ops: Any, g: Any, y: Any) -> Any:
    """y * (g - sum(g * y)) on the last axis: softmax's VJP and (symmetric) JVP."""
    s = ops.reduce_sum(ops.mul(g, y), axis=-1)
    return ops.mul(y, ops.sub(g, ops.reshape(s, shape=tuple(s.shape) + (1,))))


def _check_mask(op: str, mask: Any, n: int, m: int) -> None:
    if mask is None:
        return
    shape = tuple(np.shape(mask))
    if shape != (n, m):
        raise ShapeError(f"{op}: mask must have shape ({n}, {m}), found {shape}")
    if np.asarray(mask).dtype != np.bool_:
        raise ShapeError(f"{op}: mask must be boolean (True = allowed), found dtype "
                         f"{np.asarray(mask).dtype}")


def _ms_infer(x: Shape, mask: Any = None) -> Shape:
    if len(x) < 1 or x[-1] == 0:
        raise ShapeError(f"masked_softmax: needs a non-empty last axis, found shape {x}")
    if mask is not None:
        if len(x) < 2:
            raise ShapeError(f"masked_softmax: a mask needs at least 2-D input, found {x}")
        _check_mask("masked_softmax", mask, x[-2], x[-1])
    return x


def _causal(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))


def _with_empty_row(n: int) -> np.ndarray:
    mask = _causal(n)
    mask[1, :] = False
    return mask


def _torch_masked_softmax(torch: Any, x: Any, mask: Any = None) -> Any:
    if mask is None:
        return torch.softmax(x, dim=-1)
    allowed = torch.as_tensor(np.asarray(mask, dtype=bool))
    row_any = allowed.any(dim=-1, keepdim=True)
    # Fully masked rows: softmax over an all-allowed row, then zeroed (no NaN anywhere).
    safe = allowed | ~row_any
    p = torch.softmax(x.masked_fill(~safe, float("-inf")), dim=-1)
    return p * row_any.to(x.dtype)


register(Primitive(
    "masked_softmax", ("x",), _ms_infer, _masked_softmax, attrs={"mask": None},
    attr_kinds={"mask": K.OPTIONAL_BOOL_MASK},
    vjp=lambda ops, g, xs, out, mask=None: (_softmax_rule(ops, g, out),),
    jvp=lambda ops, ts, xs, out, mask=None: _softmax_rule(ops, ts[0], out),
    semantics="Softmax along the last axis over the entries a boolean (rows, cols) mask allows "
              "(True = allowed; broadcast over leading axes; None = plain softmax). Masked "
              "entries get weight exactly 0; a row with nothing allowed is all 0 (PyTorch "
              "gives NaN there: an intended difference). VJP/JVP: y * (g - sum(g * y)).",
    samples=lambda rng: [Sample((normal(rng, 2, 3, 3),), {"mask": _causal(3)}),
                         Sample((normal(rng, 4, 4),), {"mask": _with_empty_row(4)},
                                note="fully masked row"),
                         Sample((normal(rng, 2, 5),), {"mask": None})],
    torch_ref=_torch_masked_softmax,
    error_inputs=[ErrorInput(((3, 4),), {"mask": np.ones((3, 3), dtype=bool)}, ShapeError,
                             r"mask must have shape \(3, 4\), found \(3, 3\)"),
                  ErrorInput(((3, 3),), {"mask": np.ones((3, 3))}, ShapeError,
                             "mask must be None or a boolean array"),
                  ErrorInput(((4,),), {"mask": np.ones((1, 4), dtype=bool)}, ShapeError,
                             "a mask needs at least 2-D input")],
))


# ---------------------------------------------------------------------------------------------
# multi_head_attention


def _mha_infer(wq: Shape, wk: Shape, wv: Shape, wo: Shape, x: Shape, mask: Any = None,
               num_heads: int = 1) -> Shape:
    op = "multi_head_attention"
    if len(x) not in (2, 3):
        raise ShapeError(f"{op}: x must be (n, d_model) or (B, n, d_model), found {x}")
    n, dm = x[-2], x[-1]
    if n == 0 or dm == 0 or (len(x) == 3 and x[0] == 0):
        raise ShapeError(f"{op}: x needs non-empty dims, found {x}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ShapeError(f"{op}: num_heads must be a positive int, found {num_heads!r}")
    if len(wq) != 2 or wq[0] != dm:
        raise ShapeError(f"{op}: wq must be (d_model, H*D) = ({dm}, ...) for x {x}, found {wq}")
    hd = wq[1]
    if hd == 0 or hd % num_heads:
        raise ShapeError(f"{op}: projection width {hd} (wq {wq}, d_model {dm}) is not divisible "
                         f"into num_heads={num_heads} heads")
    for name, w in (("wk", wk), ("wv", wv)):
        if w != wq:
            raise ShapeError(f"{op}: {name} must have wq's shape {wq}, found {w}")
    if wo != (hd, dm):
        raise ShapeError(f"{op}: wo must be (H*D, d_model) = ({hd}, {dm}), found {wo}")
    _check_mask(op, mask, n, n)
    return x


def _mha_forward(wq: Any, wk: Any, wv: Any, wo: Any, x: Any, mask: Any = None,
                 num_heads: int = 1) -> Any:
    n, dm = x.shape[-2], x.shape[-1]
    b = x.size // (n * dm)
    hd = wq.shape[1]
    h, d = num_heads, hd // num_heads
    x2 = reshape(x, (b * n, dm))

    def heads(m: Any) -> Any:  # (B*n, H*D) -> (B, H, n, D), a view
        return permute_dims(reshape(m, (b, n, h, d)), (0, 2, 1, 3))

    q, k, v = heads(x2 @ wq), heads(x2 @ wk), heads(x2 @ wv)
    scores = q @ permute_dims(k, (0, 1, 3, 2))
    scores *= 1.0 / math.sqrt(d)
    p = _masked_softmax(scores, mask)
    o = reshape(permute_dims(p @ v, (0, 2, 1, 3)), (b * n, hd))
    return reshape(o @ wo, x.shape)


class _Layout:
    """Head splitting and merging with primitives: (B*n, H*D) <-> (B*H, n, D)."""

    def __init__(self, x_shape: Shape, hd: int, num_heads: int) -> None:
        self.n, self.dm = x_shape[-2], x_shape[-1]
        self.b = 1 if len(x_shape) == 2 else x_shape[0]
        self.h, self.d = num_heads, hd // num_heads
        self.hd = hd

    def heads(self, ops: Any, m: Any) -> Any:
        split = ops.reshape(m, shape=(self.b, self.n, self.h, self.d))
        return ops.reshape(ops.swap_adjacent_at_depth(split, depth=1),
                           shape=(self.b * self.h, self.n, self.d))

    def merge(self, ops: Any, t: Any) -> Any:
        split = ops.reshape(t, shape=(self.b, self.h, self.n, self.d))
        return ops.reshape(ops.swap_adjacent_at_depth(split, depth=1),
                           shape=(self.b * self.n, self.hd))


def _recompute(ops: Any, xs: Any, mask: Any, num_heads: int) -> Any:
    wq, wk, wv, _, x = xs
    lay = _Layout(tuple(x.shape), wq.shape[1], num_heads)
    x2 = ops.reshape(x, shape=(lay.b * lay.n, lay.dm))
    q = lay.heads(ops, ops.matmul(x2, wq))
    k = lay.heads(ops, ops.matmul(x2, wk))
    v = lay.heads(ops, ops.matmul(x2, wv))
    scores = ops.scale(ops.bmm(q, ops.transpose3d_last_two(k)), c=1.0 / math.sqrt(lay.d))
    p = ops.masked_softmax(scores, mask=mask)
    return lay, x2, q, k, v, p


def _mha_vjp(ops: Any, g: Any, xs: Any, out: Any, mask: Any = None,
             num_heads: int = 1) -> tuple[Any, ...]:
    wq, wk, wv, wo, x = xs
    lay, x2, q, k, v, p = _recompute(ops, xs, mask, num_heads)
    om = lay.merge(ops, ops.bmm(p, v))
    g2 = ops.reshape(g, shape=(lay.b * lay.n, lay.dm))
    gwo = ops.matmul(ops.transpose2d(om), g2)
    go = lay.heads(ops, ops.matmul(g2, ops.transpose2d(wo)))
    gp = ops.bmm(go, ops.transpose3d_last_two(v))
    gv = ops.bmm(ops.transpose3d_last_two(p), go)
    gs = ops.scale(_softmax_rule(ops, gp, p), c=1.0 / math.sqrt(lay.d))
    gq = lay.merge(ops, ops.bmm(gs, k))
    gk = lay.merge(ops, ops.bmm(ops.transpose3d_last_two(gs), q))
    gvm = lay.merge(ops, gv)
    x2t = ops.transpose2d(x2)
    gwq, gwk, gwv = ops.matmul(x2t, gq), ops.matmul(x2t, gk), ops.matmul(x2t, gvm)
    gx2 = ops.add(ops.add(ops.matmul(gq, ops.transpose2d(wq)),
                          ops.matmul(gk, ops.transpose2d(wk))),
                  ops.matmul(gvm, ops.transpose2d(wv)))
    return gwq, gwk, gwv, gwo, ops.reshape(gx2, shape=tuple(x.shape))


def _mha_jvp(ops: Any, ts: Any, xs: Any, out: Any, mask: Any = None,
             num_heads: int = 1) -> Any:
    wq, wk, wv, wo, x = xs
    twq, twk, twv, two, tx = ts
    lay, x2, q, k, v, p = _recompute(ops, xs, mask, num_heads)
    tx2 = None if tx is None else ops.reshape(tx, shape=(lay.b * lay.n, lay.dm))

    def proj_tangent(w: Any, tw: Any) -> Any:
        t = add_tangents(ops, None if tx2 is None else ops.matmul(tx2, w),
                 None if tw is None else ops.matmul(x2, tw))
        return None if t is None else lay.heads(ops, t)

    tq, tk, tv = proj_tangent(wq, twq), proj_tangent(wk, twk), proj_tangent(wv, twv)
    ts_ = add_tangents(ops, None if tq is None else ops.bmm(tq, ops.transpose3d_last_two(k)),
               None if tk is None else ops.bmm(q, ops.transpose3d_last_two(tk)))
    tp = None if ts_ is None else _softmax_rule(
        ops, ops.scale(ts_, c=1.0 / math.sqrt(lay.d)), p)
    to = add_tangents(ops, None if tp is None else ops.bmm(tp, v),
              None if tv is None else ops.bmm(p, tv))
    ty = add_tangents(ops, None if to is None else ops.matmul(lay.merge(ops, to), wo),
              None if two is None else ops.matmul(lay.merge(ops, ops.bmm(p, v)), two))
    return ops.reshape(ty, shape=tuple(x.shape))


def _torch_mha(torch: Any, wq: Any, wk: Any, wv: Any, wo: Any, x: Any, mask: Any = None,
               num_heads: int = 1) -> Any:
    n, dm = x.shape[-2], x.shape[-1]
    xb = x.reshape(-1, n, dm)
    b, hd = xb.shape[0], wq.shape[1]
    h, d = num_heads, hd // num_heads

    def heads(m: Any) -> Any:
        return m.reshape(b, n, h, d).transpose(1, 2)

    q, k, v = heads(xb @ wq), heads(xb @ wk), heads(xb @ wv)
    p = _torch_masked_softmax(torch, q @ k.transpose(-1, -2) / math.sqrt(d), mask)
    o = (p @ v).transpose(1, 2).reshape(b, n, hd)
    return (o @ wo).reshape(x.shape)


def _mha_samples(rng: np.random.Generator) -> list[Sample]:
    def weights(dm: int, hd: int) -> tuple[np.ndarray, ...]:
        return tuple(normal(rng, dm, hd) * 0.5 for _ in range(3)) + (normal(rng, hd, dm) * 0.5,)

    return [
        Sample(weights(4, 4) + (normal(rng, 3, 4),), {"mask": None, "num_heads": 2}),
        Sample(weights(3, 4) + (normal(rng, 2, 4, 3),), {"mask": _causal(4), "num_heads": 2},
               note="batch, causal"),
        Sample(weights(4, 6) + (normal(rng, 4, 4),), {"mask": _with_empty_row(4), "num_heads": 3},
               note="fully masked row"),
        Sample(weights(2, 2) + (normal(rng, 3, 2),), {"mask": None, "num_heads": 1}),
    ]


register(Primitive(
    "multi_head_attention", ("wq", "wk", "wv", "wo", "x"), _mha_infer, _mha_forward,
    attrs={"mask": None, "num_heads": 1},
    attr_kinds={"mask": K.OPTIONAL_BOOL_MASK, "num_heads": K.POSITIVE_INT}, vjp=_mha_vjp,
    jvp=_mha_jvp,
    semantics="Multi-head self-attention without biases: Q, K, V = x wq, x wk, x wv split into "
              "heads (n, H*D) -> (n, H, D) -> (H, n, D); softmax(Q K^T / sqrt(D)) over allowed "
              "keys (boolean (n, n) mask, True = allowed, masked scores excluded exactly); "
              "heads merged back and projected by wo. x: (n, d_model) or (B, n, d_model). A "
              "fully masked row gives output 0 and gradient 0 (PyTorch gives NaN). Rules are "
              "written with matmul / bmm / masked_softmax, so they differentiate again.",
    samples=_mha_samples, torch_ref=_torch_mha,
    error_inputs=[ErrorInput(((4, 4), (4, 4), (4, 4), (4, 4), (3, 4)), {"num_heads": 3},
                             ShapeError, "projection width 4 .* num_heads=3"),
                  ErrorInput(((4, 4), (4, 2), (4, 4), (4, 4), (3, 4)), {"num_heads": 2},
                             ShapeError, r"wk must have wq's shape \(4, 4\)"),
                  ErrorInput(((4, 4), (4, 4), (4, 4), (4, 4), (3, 4)),
                             {"num_heads": 2, "mask": np.ones((3, 3))}, ShapeError,
                             "mask must be None or a boolean array"),
                  ErrorInput(((4, 4), (4, 4), (4, 4), (4, 4), (4,)), {"num_heads": 1},
                             ShapeError, r"x must be \(n, d_model\) or \(B, n, d_model\)")],
))
