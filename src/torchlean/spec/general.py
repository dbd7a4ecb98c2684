"""Reference definitions of the general N-D primitives: ``permute``, ``matmul_nd`` and ``erf``.

Loops over output indices on object arrays, as every definition in ``torchlean.spec``: the
permutation is read index by index, the batched product spells out how a broadcast batch index
maps back to each operand (an axis of size 1 is read at 0), and ``erf`` is the scalar function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import scalar as S
from .defs import define


@define("permute", rational=True)
def permute(x: Any, perm: Any) -> Any:
    """out[i_0, ..., i_{k-1}] = x[j] where j[perm[a]] = i_a (output axis a is input axis
    perm[a])."""
    axes = tuple(int(p) for p in perm)
    out = np.empty(tuple(x.shape[p] for p in axes), dtype=object)
    for idx in np.ndindex(out.shape):
        source = [0] * len(axes)
        for a, p in enumerate(axes):
            source[p] = idx[a]
        out[idx] = x[tuple(source)]
    return out


def _batch_index(idx: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...]:
    """The operand's batch index for the broadcast batch index ``idx`` (right-aligned; an axis
    of size 1 is read at 0, missing leading axes are dropped)."""
    lead = len(idx) - len(batch)
    return tuple(0 if d == 1 else idx[lead + k] for k, d in enumerate(batch))


@define("matmul_nd", rational=True)
def matmul_nd(a: Any, b: Any) -> Any:
    """out[..., i, j] = sum_k a[..., i, k] * b[..., k, j] over broadcast batch axes ``...``."""
    batch_a, batch_b = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    rank = max(len(batch_a), len(batch_b))
    batch = []
    for k in range(1, rank + 1):
        da = batch_a[-k] if k <= len(batch_a) else 1
        db = batch_b[-k] if k <= len(batch_b) else 1
        batch.append(da if db == 1 else db)
    batch.reverse()
    m, n, p = a.shape[-2], a.shape[-1], b.shape[-1]
    out = np.empty(tuple(batch) + (m, p), dtype=object)
    for idx in np.ndindex(out.shape):
        *bidx, i, j = idx
        ia = _batch_index(tuple(bidx), batch_a)
        ib = _batch_index(tuple(bidx), batch_b)
        total: Any = 0
        for k in range(n):
            total = total + a[ia + (i, k)] * b[ib + (k, j)]
        out[idx] = total
    return out


@define("erf", rational=False)
def erf(x: Any) -> Any:
    """out[i] = erf(x[i]) = 2/sqrt(pi) * integral_0^x[i] exp(-t^2) dt."""
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = S.erf(x[idx])
    return out
