"""Certified output intervals of a model without labels (``bounds.regression``).

Sampled float32 executions in each ball (corners included) must lie inside the intervals, CROWN
may not be looser than IBP, and bad input is a named error.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.bounds import BoundsError
from torchlean.bounds.regression import output_intervals


def _model():
    tl.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 24), nn.Tanh(), nn.Linear(24, 24), nn.ReLU(),
                         nn.Linear(24, 2))


def test_intervals_hold_every_sampled_output_and_crown_is_tighter():
    model = _model()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(70, 4)).astype(np.float32)  # more than one chunk, padded last one
    eps = 0.1
    results = {m: output_intervals(model, x, eps, m) for m in ("ibp", "crown", "alpha-crown")}
    wide = tl.compile(lambda v: model(v), (70, 4), dtype="float32")
    for k in range(40):
        u = rng.uniform(-1, 1, size=x.shape)
        if k % 4 == 0:
            u = np.sign(u)  # corners
        pts = (x.astype(np.float64) + eps * u).astype(np.float32)
        pts = np.clip(pts, np.nextafter((x - eps).astype(np.float32), np.float32(np.inf)),
                      np.nextafter((x + eps).astype(np.float32), np.float32(-np.inf)))
        y = np.asarray(wide.forward(pts), dtype=np.float64)
        for r in results.values():
            assert np.all(y >= r.lower) and np.all(y <= r.upper), r.method
    assert np.all(results["crown"].width <= results["ibp"].width + 1e-9)
    assert results["crown"].width.mean() < results["ibp"].width.mean()
    assert np.allclose(results["ibp"].clean, np.asarray(wide.forward(x)))


def test_intervals_reject_bad_input():
    model = _model()
    with pytest.raises(BoundsError, match="unknown method"):
        output_intervals(model, np.zeros((2, 4)), 0.1, "beta")
    with pytest.raises(BoundsError, match="inputs"):
        output_intervals(model, np.zeros(4), 0.1)
    with pytest.raises(BoundsError, match="non-finite"):
        output_intervals(model, np.full((2, 4), np.nan), 0.1)
    with pytest.raises(BoundsError, match="eps"):
        output_intervals(model, np.zeros((2, 4)), -1.0)
