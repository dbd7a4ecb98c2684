"""Reference definitions of masked_softmax and multi_head_attention.

Masks are static boolean ``(rows, cols)`` attributes (True = allowed), so which entries take part
is decided by plain Python, never by a ``select``. A masked entry is excluded exactly: weight 0,
not a large negative score; a row with no allowed entry is all 0 (PyTorch gives NaN there).
Softmax is ``exp(x_j - m) / sum exp(x_i - m)`` for any constant ``m`` (it cancels): the allowed
entries' maximum on numbers, so floats never overflow, and 0 on symbols (the softmax spec's
rule). Both use ``exp``, so neither is rational.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import sample_entry
from ._calls import checked, signature_checked
from .defs import define
from .reductions import _shift as exp_shift
from .scalar import constant, exp, sqrt


def _softmax_row(values: list[Any], allowed: list[bool]) -> list[Any]:
    """``exp(v_j) / sum over allowed i of exp(v_i)`` for allowed ``j``, 0 for the others."""
    zero = constant(0, values[0])
    if not any(allowed):
        return [zero] * len(values)  # nothing allowed: every weight is 0, never 0 / 0
    m = exp_shift([v for v, ok in zip(values, allowed, strict=True) if ok])
    weights = [exp(v - m) if ok else zero for v, ok in zip(values, allowed, strict=True)]
    total = zero
    for w, ok in zip(weights, allowed, strict=True):
        if ok:
            total = total + w
    return [w / total if ok else zero for w, ok in zip(weights, allowed, strict=True)]


def _allowed(mask: Any, row: int, cols: int) -> list[bool]:
    return [True] * cols if mask is None else [bool(mask[row][j]) for j in range(cols)]


@define("masked_softmax", rational=False)
@signature_checked
def masked_softmax(x: Any, mask: Any = None) -> np.ndarray:
    """Softmax along the last axis over the allowed entries: for each row ``r`` (all leading
    indices; the mask row is the second-to-last index, the mask broadcasts over the rest),
    ``out[r, j] = exp(x[r, j]) / sum_{i allowed} exp(x[r, i])`` if ``mask[r[-1], j]`` else 0.
    ``mask=None`` allows everything; a row with nothing allowed is all 0."""
    (x,), _ = checked("masked_softmax", (x,), {"mask": mask})
    out = np.empty(x.shape, dtype=object)
    cols = x.shape[-1]
    for row in np.ndindex(*x.shape[:-1]):
        allowed = _allowed(mask, row[-1] if row else 0, cols)
        weights = _softmax_row([x[row + (j,)] for j in range(cols)], allowed)
        for j, w in enumerate(weights):
            out[row + (j,)] = w
    return out


def _project(x: np.ndarray, w: np.ndarray, lead: tuple[int, ...]) -> list[list[Any]]:
    """``(x[lead] @ w)[t][c] = sum_m x[lead, t, m] * w[m, c]`` as nested lists."""
    n, dm = x.shape[-2], x.shape[-1]
    return [[_dot([x[lead + (t, m)] for m in range(dm)], [w[m, c] for m in range(dm)])
             for c in range(w.shape[1])] for t in range(n)]


def _dot(a: list[Any], b: list[Any]) -> Any:
    total = a[0] * b[0]
    for u, v in zip(a[1:], b[1:], strict=True):
        total = total + u * v
    return total


@define("multi_head_attention", rational=False)
@signature_checked
def multi_head_attention(wq: Any, wk: Any, wv: Any, wo: Any, x: Any, mask: Any = None,
                         num_heads: int = 1) -> np.ndarray:
    """Multi-head self-attention without biases, for each batch entry (x is ``(n, d_model)`` or
    ``(B, n, d_model)``), with ``H = num_heads`` and head width ``D = wq.shape[1] / H``:
    ``Q = x wq, K = x wk, V = x wv``; head ``h`` owns columns ``h*D .. h*D + D - 1``;
    ``score[h, t, u] = sum_e Q[t, h*D+e] K[u, h*D+e] / sqrt(D)``;
    ``p[h, t, :] = masked softmax of score[h, t, :]`` over the keys ``u`` with ``mask[t, u]``;
    ``O[t, h*D+e] = sum_u p[h, t, u] V[u, h*D+e]``; ``out[t, m] = sum_c O[t, c] wo[c, m]``.
    A query row with no allowed key has ``O[t] = 0`` and so ``out[t] = 0``."""
    (wq, wk, wv, wo, x), attrs = checked(
        "multi_head_attention", (wq, wk, wv, wo, x), {"mask": mask, "num_heads": num_heads})
    heads = attrs["num_heads"]
    n, dm = x.shape[-2], x.shape[-1]
    width = wq.shape[1]
    d = width // heads
    zero = constant(0, sample_entry(x))
    scale = 1 / sqrt(constant(d, sample_entry(x)))
    out = np.empty(x.shape, dtype=object)
    for lead in np.ndindex(*x.shape[:-2]):
        q, k, v = _project(x, wq, lead), _project(x, wk, lead), _project(x, wv, lead)
        o: list[list[Any]] = [[zero] * width for _ in range(n)]
        for h in range(heads):
            cols = range(h * d, (h + 1) * d)
            for t in range(n):
                scores = [_dot([q[t][c] for c in cols], [k[u][c] for c in cols]) * scale
                          for u in range(n)]
                p = _softmax_row(scores, _allowed(attrs["mask"], t, n))
                for c in cols:
                    o[t][c] = _dot(p, [v[u][c] for u in range(n)])
        for t in range(n):
            for m in range(dm):
                out[lead + (t, m)] = _dot(o[t], [wo[c, m] for c in range(width)])
    return out
