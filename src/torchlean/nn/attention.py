"""torch's multi-head attention forward (``F.multi_head_attention_forward``) over tensors.

``nn.MultiheadAttention`` called torch's way, ``attn(query, key, value, key_padding_mask=...,
attn_mask=...)``, and the ``nn.Transformer*`` layers run this: the in-projection with its bias,
heads split off the embedding axis, ``softmax(q k^T / sqrt(d_head) + masks)``, dropout on the
weights in training mode, the heads merged and the out-projection. It is written with
``nn.functional`` and tensor methods only (no new kernel), so its gradient is whatever the
primitives' rules compose to.

Masks follow torch: a boolean ``attn_mask`` (``(L, S)`` or ``(N * heads, L, S)``) and
``key_padding_mask`` (``(N, S)``) mark with ``True`` the pairs that may *not* attend; float masks
are added to the scores. Layouts: ``(L, N, E)`` (``batch_first=False``, torch's default),
``(N, L, E)`` with ``batch_first=True``, or unbatched ``(L, E)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.tensor import Tensor, tensor
from . import functional

__all__ = ["attention_forward", "float_mask"]


def float_mask(op: str, mask: Any, dtype: Any) -> Tensor | None:
    """A mask as the float tensor torch adds to the scores: a boolean one becomes ``-inf``
    where ``True`` (not allowed) and 0 elsewhere; a float one is used as it is."""
    if mask is None:
        return None
    m = mask if isinstance(mask, Tensor) else tensor(np.asarray(mask))
    if m.dtype == np.bool_:
        values = np.where(m.numpy(), -np.inf, 0.0).astype(dtype)
        return tensor(values)
    if m.dtype.kind != "f":
        raise TorchLeanError(f"{op}: only bool and float masks are supported, found {m.dtype}")
    return m.to(dtype) if m.dtype != dtype else m


def _check_dims(op: str, query: Tensor, key: Tensor, value: Tensor, embed_dim: int) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TorchLeanError(f"{op}: expected {name} as a tensor, found {type(t).__name__}")
        if t.ndim != query.ndim or t.ndim not in (2, 3) or t.shape[-1] != embed_dim:
            raise ShapeError(f"{op}: query, key and value must all be (L, E) or 3-D with "
                             f"E = {embed_dim}, found {query.shape}, {key.shape}, {value.shape}")
    if key.shape != value.shape:
        raise ShapeError(f"{op}: key and value must have the same shape, found {key.shape} and "
                         f"{value.shape}")


def attention_forward(module: Any, query: Any, key: Any, value: Any, key_padding_mask: Any,
                      need_weights: bool, attn_mask: Any, average_attn_weights: bool,
                      is_causal: bool) -> tuple[Tensor, Tensor | None]:
    """torch's ``MultiheadAttention.forward`` for ``module`` (its ``in_proj_weight``,
    ``in_proj_bias``, ``out_proj``, ``num_heads``, ``dropout``, ``batch_first``)."""
    op = "MultiheadAttention"
    e, h = module.embed_dim, module.num_heads
    _check_dims(op, query, key, value, e)
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    elif module.batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    length, n, _ = query.shape
    src = key.shape[0]
    if key.shape[1] != n:
        raise ShapeError(f"{op}: query and key must have the same batch size, found "
                         f"{query.shape} and {key.shape}")
    if is_causal and attn_mask is None:
        raise TorchLeanError(f"{op}: is_causal is a hint that attn_mask is the causal mask; "
                             "give attn_mask too (as torch requires)")
    dtype = query.dtype
    w, b = module.in_proj_weight, module.in_proj_bias
    wq, wk, wv = w[:e], w[e:2 * e], w[2 * e:]
    bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
    d = e // h
    # (L, N, E) -> (N, heads, L, d)
    q = functional.linear(query, wq, bq).reshape(length, n, h, d).permute(1, 2, 0, 3)
    k = functional.linear(key, wk, bk).reshape(src, n, h, d).permute(1, 2, 0, 3)
    v = functional.linear(value, wv, bv).reshape(src, n, h, d).permute(1, 2, 0, 3)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    mask = float_mask(op, attn_mask, dtype)
    if mask is not None:
        if mask.ndim == 2 and mask.shape == (length, src):
            scores = scores + mask
        elif mask.ndim == 3 and mask.shape == (n * h, length, src):
            scores = scores + mask.reshape(n, h, length, src)
        else:
            raise ShapeError(f"{op}: attn_mask must be ({length}, {src}) or ({n * h}, {length}, "
                             f"{src}), found {tuple(mask.shape)}")
    pad: Any = float_mask(op, key_padding_mask, dtype)
    if pad is not None:
        if unbatched and pad.shape == (src,):
            pad = pad.reshape(1, src)
        if pad.shape != (n, src):
            raise ShapeError(f"{op}: key_padding_mask must be ({n}, {src}), found "
                             f"{tuple(pad.shape)}")
        scores = scores + pad.reshape(n, 1, 1, src)
    weights = functional.softmax(scores, dim=-1)
    if module.training and module.dropout > 0:
        weights = functional.dropout(weights, module.dropout, training=True)
    out = (weights @ v).permute(2, 0, 1, 3).reshape(length, n, e)
    out = module.out_proj(out)
    if unbatched:
        out = out.squeeze(1)
    elif module.batch_first:
        out = out.transpose(0, 1)
    if not need_weights:
        return out, None
    attn = weights.mean(1) if average_attn_weights else weights
    return out, (attn.squeeze(0) if unbatched else attn)
