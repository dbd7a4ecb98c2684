"""Reference definitions of the normalisation primitives: standardize and its helpers,
layer_norm and batch_norm.

A *group* is the set of entries that share one statistic: all indices of ``x`` that agree on
every axis outside ``axes``. Over a group of ``m`` entries: ``mean = (1/m) sum x``, ``var = (1/m)
sum (x - mean)^2`` (population variance, no Bessel correction), ``rstd = 1 / sqrt(var + eps)``
and ``xhat = (x - mean) * rstd``. These use ``sqrt``, so none of them is rational.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import Index, broadcast_index, sample_entry
from ._calls import checked, signature_checked
from .defs import define
from .scalar import constant, sqrt


def _groups(shape: Index, axes: tuple[int, ...]) -> list[list[Index]]:
    """The indices of an array of ``shape``, grouped by their coordinates outside ``axes``."""
    groups: dict[Index, list[Index]] = {}
    for idx in np.ndindex(*shape):
        key = tuple(v for a, v in enumerate(idx) if a not in axes)
        groups.setdefault(key, []).append(idx)
    return list(groups.values())


def _mean(values: list[Any]) -> Any:
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total / len(values)


def _standardized(x: np.ndarray, axes: tuple[int, ...], eps: Any
                  ) -> list[tuple[list[Index], Any, dict[Index, Any]]]:
    """Per group: its indices, its ``rstd`` and ``xhat`` at each of its indices."""
    result = []
    for members in _groups(x.shape, axes):
        mean = _mean([x[i] for i in members])
        var = _mean([(x[i] - mean) * (x[i] - mean) for i in members])
        rstd = 1 / sqrt(var + constant(eps, x[members[0]]))
        result.append((members, rstd, {i: (x[i] - mean) * rstd for i in members}))
    return result


@define("standardize", rational=False)
@signature_checked
def standardize(x: Any, axes: Any, eps: float) -> np.ndarray:
    """``out = (x - mean) / sqrt(var + eps)`` over each group of ``axes`` (population
    variance); the shape of ``x``."""
    (x,), attrs = checked("standardize", (x,), {"axes": axes, "eps": eps})
    out = np.empty(x.shape, dtype=object)
    for _, _, xhat in _standardized(x, tuple(attrs["axes"]), eps):
        for i, v in xhat.items():
            out[i] = v
    return out


@define("standardize_backward", rational=False)
@signature_checked
def standardize_backward(x: Any, g: Any, axes: Any, eps: float) -> np.ndarray:
    """``J(x) g`` for standardize's symmetric Jacobian ``J``, per group:
    ``out = rstd * (g - mean(g) - xhat * mean(g * xhat))``."""
    (x, g), attrs = checked("standardize_backward", (x, g), {"axes": axes, "eps": eps})
    out = np.empty(x.shape, dtype=object)
    for members, rstd, xhat in _standardized(x, tuple(attrs["axes"]), eps):
        mean_g = _mean([g[i] for i in members])
        mean_gx = _mean([g[i] * xhat[i] for i in members])
        for i in members:
            out[i] = rstd * (g[i] - mean_g - xhat[i] * mean_gx)
    return out


@define("norm_param_grad", rational=False)
@signature_checked
def norm_param_grad(x: Any, g: Any, axes: Any, eps: float, shape: Any) -> np.ndarray:
    """``sum_to(g * standardize(x, axes, eps), shape)``: each entry ``g[t] * xhat[t]`` is added to
    ``out[u]``, where ``u`` is ``t``'s trailing ``len(shape)`` coordinates with 0 on the axes
    where ``shape`` has size 1 (NumPy broadcasting of ``shape`` against ``x``, undone)."""
    (x, g), attrs = checked("norm_param_grad", (x, g), {"axes": axes, "eps": eps,
                                                        "shape": shape})
    target = tuple(attrs["shape"])
    out = np.full(target, constant(0, sample_entry(x, g)), dtype=object)
    for _, _, xhat in _standardized(x, tuple(attrs["axes"]), eps):
        for t, v in xhat.items():
            u = broadcast_index(t, target)
            out[u] = out[u] + g[t] * v
    return out


@define("layer_norm", rational=False)
@signature_checked
def layer_norm(x: Any, gamma: Any, beta: Any, eps: float = 1e-6) -> np.ndarray:
    """``out[..., j] = gamma[j] * xhat[..., j] + beta[j]``, statistics over the last axis
    (population variance); eps defaults to 1e-6."""
    (x, gamma, beta), _ = checked("layer_norm", (x, gamma, beta), {"eps": eps})
    out = np.empty(x.shape, dtype=object)
    for _, _, xhat in _standardized(x, (x.ndim - 1,), eps):
        for i, v in xhat.items():
            out[i] = gamma[i[-1]] * v + beta[i[-1]]
    return out


@define("batch_norm", rational=False)
@signature_checked
def batch_norm(x: Any, gamma: Any, beta: Any, eps: float = 1e-6) -> np.ndarray:
    """Batch statistics per channel: ``out[..., c, h, w] = gamma[c] * xhat + beta[c]`` with the
    statistics over H x W for a (C, H, W) input and over N x H x W for (N, C, H, W) (population
    variance, no running statistics); eps defaults to 1e-6."""
    (x, gamma, beta), _ = checked("batch_norm", (x, gamma, beta), {"eps": eps})
    axes = (1, 2) if x.ndim == 3 else (0, 2, 3)
    out = np.empty(x.shape, dtype=object)
    for _, _, xhat in _standardized(x, axes, eps):
        for i, v in xhat.items():
            c = i[-3]
            out[i] = gamma[c] * v + beta[c]
    return out
