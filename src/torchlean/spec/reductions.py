"""Reference definitions of the reductions (``torchlean.ops.reductions``).

A sum starts from 0 and adds the entries in index order (an empty sum is 0). ``softmax`` and
``log_softmax`` act on the last axis; see ``_shift`` for the one liberty they take.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ._arrays import empty, prepare
from .defs import define
from .scalar import exp, log, select


def _axis_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """out[i] = sum_k x[i with k inserted at position axis]: the axis is removed."""
    a = axis % x.ndim
    out = empty(x.shape[:a] + x.shape[a + 1:])
    for i in np.ndindex(out.shape):
        total: Any = 0
        for k in range(x.shape[a]):
            total = total + x[i[:a] + (k,) + i[a:]]
        out[i] = total
    return out


@define("reduce_sum", rational=True)
def reduce_sum(x: Any, axis: int) -> np.ndarray:
    """out[i] = sum_k x[i_0, ..., i_{a-1}, k, i_a, ...]: sum along ``axis`` (negative counts
    from the end), which is removed from the shape."""
    (x,) = prepare("reduce_sum", x, axis=axis)
    return _axis_sum(x, axis)


@define("reduce_mean", rational=True)
def reduce_mean(x: Any, axis: int) -> np.ndarray:
    """out[i] = (sum_k x[..., k, ...]) / n with n the length of ``axis`` (n >= 1), which is
    removed from the shape."""
    (x,) = prepare("reduce_mean", x, axis=axis)
    sums = _axis_sum(x, axis)
    n = x.shape[axis]
    out = empty(sums.shape)
    for i in np.ndindex(sums.shape):
        out[i] = sums[i] / n
    return out


@define("sum", rational=True)
def total(x: Any) -> np.ndarray:
    """out = sum of every entry of x, a scalar (0 for an empty x)."""
    (x,) = prepare("sum", x)
    result: Any = 0
    for i in np.ndindex(x.shape):
        result = result + x[i]
    out = empty(())
    out[()] = result
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | Fraction) or bool(getattr(v, "is_Number", False))


def _shift(row: list[Any]) -> Any:
    """The constant m subtracted before exp: the row maximum for numbers, 0 for symbols.

    softmax and log_softmax do not depend on m (the factor exp(-m) cancels), so m is free. For
    numbers m = max keeps every exp argument <= 0, as the kernel does, so floats never overflow.
    For symbolic rows m = 0: a max written with Piecewise would only obscure the derivative.
    """
    if not all(_is_number(v) for v in row):
        return 0
    best = row[0]
    for v in row[1:]:
        best = select(v > best, v, best)
    return best


def _rows(x: np.ndarray) -> list[tuple[int, ...]]:
    """The indices of x's last-axis rows (all axes but the last)."""
    return list(np.ndindex(x.shape[:-1]))


@define("softmax", rational=False)
def softmax(x: Any) -> np.ndarray:
    """out[..., j] = exp(x[..., j]) / sum_k exp(x[..., k]) along the last axis (non-empty)."""
    (x,) = prepare("softmax", x)
    out = empty(x.shape)
    for r in _rows(x):
        row = [x[r + (k,)] for k in range(x.shape[-1])]
        m = _shift(row)
        weights = [exp(v - m) for v in row]
        denominator: Any = 0
        for w in weights:
            denominator = denominator + w
        for j, w in enumerate(weights):
            out[r + (j,)] = w / denominator
    return out


@define("log_softmax", rational=False)
def log_softmax(x: Any) -> np.ndarray:
    """out[..., j] = x[..., j] - log(sum_k exp(x[..., k])) along the last axis (non-empty)."""
    (x,) = prepare("log_softmax", x)
    out = empty(x.shape)
    for r in _rows(x):
        row = [x[r + (k,)] for k in range(x.shape[-1])]
        m = _shift(row)
        denominator: Any = 0
        for v in row:
            denominator = denominator + exp(v - m)
        for j, v in enumerate(row):
            out[r + (j,)] = (v - m) - log(denominator)
    return out


@define("mse_loss", rational=True)
def mse_loss(yhat: Any, target: Any) -> np.ndarray:
    """out = (1/N) sum_i (yhat[i] - target[i])^2 over all N entries (same shapes, N >= 1)."""
    yhat, target = prepare("mse_loss", yhat, target)
    squares: Any = 0
    for i in np.ndindex(yhat.shape):
        d = yhat[i] - target[i]
        squares = squares + d * d
    out = empty(())
    out[()] = squares / yhat.size
    return out
