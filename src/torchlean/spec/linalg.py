"""Reference definitions of the linear-algebra primitives (``torchlean.ops.linalg``).

Each output entry is a sum of products written out as a loop over the contracted index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import empty, prepare
from .defs import define


@define("linear", rational=True)
def linear(w: Any, b: Any, x: Any) -> np.ndarray:
    """out[..., o] = b[o] + sum_i w[o, i] * x[..., i] for w (out, in), b (out,), x (..., in).

    For a vector x (in,) this is w @ x + b; over a batch x (..., in) every leading index of x is
    kept and the last axis becomes ``out`` (torch.nn.functional.linear).
    """
    w, b, x = prepare("linear", w, b, x)
    out_features, in_features = w.shape
    out = empty(x.shape[:-1] + (out_features,))
    for index in np.ndindex(out.shape):
        batch, o = index[:-1], index[-1]
        acc = b[o]
        for i in range(in_features):
            acc = acc + w[o, i] * x[batch + (i,)]
        out[index] = acc
    return out


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray, batch: tuple[int, ...]) -> None:
    """out[batch, i, j] = sum_k a[batch, i, k] * b[batch, k, j] (an empty sum is 0)."""
    rows, inner = a.shape[-2:]
    cols = b.shape[-1]
    for i in range(rows):
        for j in range(cols):
            acc: Any = 0
            for k in range(inner):
                acc = acc + a[batch + (i, k)] * b[batch + (k, j)]
            out[batch + (i, j)] = acc


@define("matmul", rational=True)
def matmul(a: Any, b: Any) -> np.ndarray:
    """out[i, j] = sum_k a[i, k] * b[k, j] for a (m, n), b (n, p): out (m, p)."""
    a, b = prepare("matmul", a, b)
    out = empty((a.shape[0], b.shape[1]))
    _product(a, b, out, ())
    return out


@define("bmm", rational=True)
def bmm(a: Any, b: Any) -> np.ndarray:
    """out[s, i, j] = sum_k a[s, i, k] * b[s, k, j] for a (B, m, n), b (B, n, p): out (B, m, p)."""
    a, b = prepare("bmm", a, b)
    out = empty((a.shape[0], a.shape[1], b.shape[2]))
    for s in range(a.shape[0]):
        _product(a, b, out, (s,))
    return out
