"""Certified output intervals of a model without labels (a regression model, or any network).

``output_intervals(model, inputs, eps, method)`` bounds every output of the model over the
L-infinity ball of radius ``eps`` around each example (clipped to ``clip`` when given): the
interval ``[lo, hi]`` holds every output the float32 network (``kernel=True``) or the real-valued
network (``kernel=False``) produces in that ball. Where ``certify`` asks "does the label win
everywhere?", this answers "how far can each output move?"; the identity specification makes
CROWN bound each output directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.transforms import compile as compile_fn
from . import METHODS, BoundsError, compute_bounds
from . import box as make_box

Array = Any
CHUNK = 64  # examples per bound computation

__all__ = ["Intervals", "output_intervals"]


@dataclass
class Intervals:
    """Per example (rows) and output (columns): the clean output and its certified interval."""

    method: str
    eps: float
    clean: Array
    lower: Array
    upper: Array

    @property
    def width(self) -> Array:
        return self.upper - self.lower

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "eps": self.eps, "clean": self.clean.tolist(),
                "lower": self.lower.tolist(), "upper": self.upper.tolist(),
                "mean_width": float(np.mean(self.width)) if self.width.size else 0.0}


def output_intervals(model: Any, inputs: Array, eps: float, method: str = "crown", *,
                     clip: tuple[float, float] | None = None, kernel: bool = True,
                     chunk: int = CHUNK) -> Intervals:
    """Certified intervals of every output of ``model`` (a module or a function of one batch)
    over each example's ``eps``-ball."""
    if method not in METHODS:
        raise BoundsError(f"output_intervals: unknown method {method!r}; expected one of "
                          f"{METHODS}")
    x = np.asarray(inputs, dtype=np.float32)
    if x.ndim < 2 or not len(x):
        raise BoundsError(f"output_intervals: expected inputs (N, ...) with N >= 1, found "
                          f"shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise BoundsError("output_intervals: the inputs have non-finite entries")
    n = len(x)
    size = min(n, chunk)
    compiled = compile_fn(lambda v: model(v), (size, *x.shape[1:]), dtype="float32")
    out_shape = tuple(compiled.out_shape)
    if not out_shape or out_shape[0] != size:
        raise BoundsError(f"output_intervals: the model must map a batch (N, ...) to (N, ...), "
                          f"found output shape {out_shape}")
    k = int(np.prod(out_shape[1:]))
    eye = np.broadcast_to(np.eye(k).reshape(1, k, *out_shape[1:]), (size, k, *out_shape[1:]))
    clean, lower, upper = [], [], []
    for start in range(0, n, size):
        part = x[start:start + size]
        m = len(part)
        if m < size:  # pad the last chunk by repeating its first example
            part = np.concatenate([part, np.repeat(part[:1], size - m, axis=0)])
        lo, hi = make_box(part, eps, *(clip if clip is not None else (None, None)))
        result = compute_bounds(compiled, lo, hi, method=method, spec=np.array(eye),
                                kernel=kernel)
        assert result.spec is not None
        clean.append(np.asarray(compiled.forward(part)).reshape(size, k)[:m])
        lower.append(np.asarray(result.spec[0])[:m])
        upper.append(np.asarray(result.spec[1])[:m])
    return Intervals(method, float(eps), np.concatenate(clean).astype(np.float64),
                     np.concatenate(lower), np.concatenate(upper))
