"""Fast multi-head attention (NumPy only; see ``ops.fast``).

The reference VJP recomputes the whole forward through primitives (three projections, the
scores, the softmax: about 30 kernel calls) so that it differentiates again. Here the forward
projects q, k, v with one GEMM against the three weights side by side, and keeps q, k, v, the
softmax probabilities and the merged head outputs against its output (``residuals``); the VJP
reads them and runs fused NumPy: batched matmuls over ``(B, H)``, one GEMM for the three
projection-weight gradients and one for the input gradient. A VJP that finds no residual (a
second backward after the output was replaced, say) recomputes them with the same code, so the
bits are the same either way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ..attention import _masked_softmax
from . import residuals
from .softmax import exp_rows

_SAVED = "attention.saved"


def _softmax_rows(s: Any) -> Any:
    """Softmax over the last axis of the (fresh, C-ordered) scores. NumPy reduces a short last
    axis row by row (about 55 us for the max of W5's 1,024 rows of 32 scores, one thread):
    here the shift and the row sums come from ``softmax.exp_rows`` (the maximum of all the
    scores where that is safe, a matrix-vector product for the sums), then one reciprocal per
    row; 123 -> 71 us on W5's scores with row maxima from a transposed copy, 71 -> about 40 us
    with the global shift. The same function as the reference's ``exp(s - max) / sum``,
    rounded differently (another shift, a reciprocal, BLAS sums)."""
    n = s.shape[-1]
    e, r = exp_rows(s.reshape(-1, n))
    np.divide(1.0, r, out=r)
    e *= r[:, None]
    return e.reshape(s.shape)


def _parts(wq: Any, wk: Any, wv: Any, x: Any, mask: Any, num_heads: int) -> tuple[Any, ...]:
    """q, k, v as (B, H, n, D), the probabilities p (B, H, n, n) and the merged head outputs."""
    n, dm = x.shape[-2], x.shape[-1]
    b = x.size // (n * dm)
    hd = wq.shape[1]
    h, d = num_heads, hd // num_heads
    x2 = x.reshape(b * n, dm)
    qkv = x2 @ np.concatenate((wq, wk, wv), axis=1)  # (B*n, 3*H*D): one GEMM
    heads = qkv.reshape(b, n, 3, h, d).transpose(2, 0, 3, 1, 4)  # (3, B, H, n, D), a view
    q, k, v = heads[0], heads[1], heads[2]
    scores = q @ k.swapaxes(-1, -2)
    scores *= 1.0 / math.sqrt(d)
    p = _masked_softmax(scores, mask) if mask is not None else _softmax_rows(scores)
    merged = (p @ v).transpose(0, 2, 1, 3).reshape(b * n, hd)
    return x2, q, k, v, p, merged


def forward_saving(wq: Any, wk: Any, wv: Any, wo: Any, x: Any, mask: Any = None,
                   num_heads: int = 1) -> tuple[Any, tuple[Any, ...]]:
    """The output and what the VJP needs (``vjp_from``'s ``saved``)."""
    parts = _parts(wq, wk, wv, x, mask, num_heads)
    return (parts[-1] @ wo).reshape(x.shape), parts


def forward(wq: Any, wk: Any, wv: Any, wo: Any, x: Any, mask: Any = None,
            num_heads: int = 1) -> Any:
    """Fast ``multi_head_attention`` forward, keeping what the VJP needs."""
    out, parts = forward_saving(wq, wk, wv, wo, x, mask, num_heads)
    residuals.save(out, _SAVED, (x.shape, wq.shape, num_heads), parts)
    return out


def vjp(ops: Any, g: Any, xs: Any, out: Any, mask: Any = None,
        num_heads: int = 1) -> tuple[Any, ...]:
    """Fast ``multi_head_attention`` VJP from the saved (or recomputed) forward."""
    wq, _, _, _, x = xs
    parts = residuals.load(out, _SAVED, (x.shape, wq.shape, num_heads))
    return vjp_from(ops, g, xs, out, parts, mask, num_heads)


def vjp_from(ops: Any, g: Any, xs: Any, out: Any, parts: Any, mask: Any = None,
             num_heads: int = 1) -> tuple[Any, ...]:
    """The VJP from ``forward_saving``'s ``saved`` (recomputed when ``None``: the same bits)."""
    wq, wk, wv, wo, x = xs
    if parts is None:
        parts = _parts(wq, wk, wv, x, mask, num_heads)
    x2, q, k, v, p, merged = parts
    b, h, n, d = q.shape
    hd = h * d
    g2 = g.reshape(b * n, x.shape[-1])
    gwo = merged.T @ g2
    go = (g2 @ wo.T).reshape(b, n, h, d).transpose(0, 2, 1, 3)  # (B, H, n, D)
    gp = go @ v.swapaxes(-1, -2)
    gv = p.swapaxes(-1, -2) @ go
    # Softmax VJP, then the score scale: p * (gp - sum(gp * p)) / sqrt(D); the row sums as a
    # matrix-vector product (45 -> 25 us on W5: NumPy sums a short last axis row by row).
    gs = gp * p
    gs -= p * (gs @ np.ones(gs.shape[-1], dtype=gs.dtype))[..., None]
    gs *= 1.0 / math.sqrt(d)
    gqkv = np.empty((b, n, 3, h, d), dtype=g.dtype)
    gqkv[:, :, 0] = (gs @ k).transpose(0, 2, 1, 3)
    gqkv[:, :, 1] = (gs.swapaxes(-1, -2) @ q).transpose(0, 2, 1, 3)
    gqkv[:, :, 2] = gv.transpose(0, 2, 1, 3)
    gqkv2 = gqkv.reshape(b * n, 3 * hd)
    gw = x2.T @ gqkv2  # (dm, 3*H*D): the three projection gradients in one GEMM
    gx = gqkv2 @ np.concatenate((wq, wk, wv), axis=1).T
    return (gw[:, :hd], gw[:, hd:2 * hd], gw[:, 2 * hd:], gwo, gx.reshape(x.shape))


attach_fast("multi_head_attention", forward=forward, vjp=vjp)
residuals.explicit("multi_head_attention", forward_saving, vjp_from)
