"""Sample-input generators shared by the op modules (one definition of each kind of draw).

Every generator takes the ``np.random.Generator`` a primitive's ``samples`` function receives, so
hypothesis-drawn seeds give varied values and shapes, and the same seed always gives the same
samples. Values are float64; tests cast as they need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.registry import Sample
from ..core.shape import size


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Standard normal entries."""
    return rng.standard_normal(shape)


def positive(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Entries in [0.5, 2): inside the domain of log and sqrt, away from their poles."""
    return rng.uniform(0.5, 2.0, size=shape)


def away_from_zero(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Entries of magnitude in [0.1, 2), random sign."""
    # Kinks at 0 make finite differences meaningless there; keep samples a margin away.
    x = rng.uniform(0.1, 2.0, size=shape)
    return x * rng.choice([-1.0, 1.0], size=shape)


def distinct(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Entries 0.1 apart in random order: no ties, and finite differences never flip a max."""
    return (rng.permutation(size(shape)).reshape(shape) - size(shape) / 2) * 0.1


def dim(rng: np.random.Generator, lo: int = 1, hi: int = 4) -> int:
    """One dimension in ``[lo, hi]``."""
    return int(rng.integers(lo, hi + 1))


def dims(rng: np.random.Generator, k: int) -> list[int]:
    """``k`` dimensions in ``[1, 4]``, drawn in one call."""
    return [int(d) for d in rng.integers(1, 5, size=k)]


def unary_samples(make: Any = normal) -> Any:
    """A ``samples`` function for elementwise unary ops: a 1-, 2- and 3-D input."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        return [Sample((make(rng, *dims(rng, k)),)) for k in (1, 2, 3)]

    return samples


def binary_samples(make: Any = normal) -> Any:
    """A ``samples`` function for broadcasting binary ops: equal shapes and both broadcasts."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        n, m, k = dims(rng, 3)
        return [
            Sample((make(rng, n), make(rng, n))),
            Sample((make(rng, m, n), make(rng, m, n))),
            Sample((make(rng, m, n), make(rng, n)), note="broadcast"),
            Sample((make(rng, k, 1, n), make(rng, m, 1)), note="broadcast both"),
        ]

    return samples
