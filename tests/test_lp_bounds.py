"""LP-tightened intermediate bounds (bounds.lp_bounds) against sampled float32 values, the exact
ranges of small ReLU nets, and the LPs' own optimum.

The nets are small random ReLU chains; the exact range of a pre-activation is found by
enumerating the activation patterns of the earlier layers' unstable neurons (one LP per pattern,
scipy's ``linprog``). The tightened bounds must contain it and every sampled float32 value of
the network, must lie inside the bounds they started from, and (the duals turned into slopes
correctly) must be within round-off of the triangle LP's own optimum. A planted wrong dual (the
two lower multipliers swapped) leaves the bounds sound but looser than the LP: the tightness
check catches it; a planted bound above the rigorous one is caught by the enclosure checks.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from relu_patterns import interval_signs
from scipy.optimize import linprog

import torchlean as tl
from torchlean import nn
from torchlean.bounds import bab, compute_bounds, lp_bounds, relu_bab
from torchlean.bounds.beta import relu_chain

MAX_FREE = 7  # unstable neurons enumerated at most for an exact range
EXACT_PER_LAYER = 3  # neurons per layer whose exact range is checked


def _net(seed, shrink=1.0):
    rng = np.random.default_rng(seed)
    n_in = int(rng.integers(3, 6))
    hidden = [int(rng.integers(4, 7)) for _ in range(3)]
    tl.manual_seed(seed)
    mods = []
    for a, b in zip([n_in] + hidden[:-1], hidden, strict=True):
        mods += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*mods, nn.Linear(hidden[-1], 2))
    centre = rng.uniform(-1, 1, n_in)
    radius = rng.uniform(0.2, 0.6, n_in) * shrink
    lo = (centre - radius).astype(np.float32).astype(np.float64)
    hi = (centre + radius).astype(np.float32).astype(np.float64)
    return model, n_in, lo, hi


def _setup(seed, shrink=1.0):
    """The net, its Models and chain, the box and CROWN's pre-activation bounds per layer."""
    model, n_in, lo, hi = _net(seed, shrink)
    models = bab.Models(lambda n: tl.compile(lambda v: model(v), (n, n_in)), max_batch=64)
    one = models.get(1)
    chain = relu_chain(one)
    root = compute_bounds(one, lo[None], hi[None], method="crown", kernel=True)
    b_lo = [np.asarray(root.nodes[p][0], np.float64).reshape(-1) for p in chain.pre]
    b_hi = [np.asarray(root.nodes[p][1], np.float64).reshape(-1) for p in chain.pre]
    return model, models, chain, lo, hi, b_lo, b_hi


def _exact_range(layers, lo, hi, k, j):
    """Least and greatest value of pre-activation ``j`` of relu layer ``k`` over the box (real
    arithmetic), by one LP per activation pattern of the earlier layers; None if too many."""
    fixed = interval_signs(layers[:k], lo, hi)
    free = [(i, n) for i, f in enumerate(fixed) for n in np.flatnonzero(f < 0)]
    if len(free) > MAX_FREE:
        return None
    least, most = np.inf, -np.inf
    for bits in itertools.product((0, 1), repeat=len(free)):
        pattern = [f.copy() for f in fixed]
        for (i, n), s in zip(free, bits, strict=True):
            pattern[i][n] = s
        m, v = np.eye(len(lo)), np.zeros(len(lo))
        a_ub, b_ub = [], []
        for (w, b), p in zip(layers[:k], pattern, strict=True):
            m, v = w @ m, w @ v + b
            sgn = (1 - 2 * p)[:, None]
            a_ub.append(sgn * m)
            b_ub.append(-(sgn[:, 0] * v))
            m, v = p[:, None] * m, p * v
        w, b = layers[k]
        row, off = (w @ m)[j], (w @ v + b)[j]
        for sign in (1.0, -1.0):
            res = linprog(sign * row, A_ub=np.concatenate(a_ub), b_ub=np.concatenate(b_ub),
                          bounds=list(zip(lo, hi, strict=True)), method="highs")
            if res.status == 0:
                if sign > 0:
                    least = min(least, res.fun + off)
                else:
                    most = max(most, -res.fun + off)
            elif res.status != 2:
                raise AssertionError(f"linprog failed: {res.message}")
    return least, most


def _samples(model, n_in, lo, hi, k, n=3000, seed=0):
    """Float32 pre-activations of relu layer ``k`` on box samples (a third of them corners),
    from the net's own first ``2 k + 1`` modules compiled (the same float32 kernels)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, size=(n, n_in))
    x[: n // 3] = np.where(rng.random((n // 3, n_in)) < 0.5, lo, hi)
    x = x.astype(np.float32)
    head = nn.Sequential(*list(model)[: 2 * k + 1])
    return np.asarray(tl.compile(lambda v: head(v), (n, n_in)).forward(x), np.float64)


SEEDS = range(5)


def _check(seed, lp_value_slack=1e-6):
    """Tighten every layer after the first; return the worst excess of the rigorous bound over
    the LP optimum (should be round-off only) after asserting soundness."""
    model, models, chain, lo, hi, b_lo, b_hi = _setup(seed)
    n_in = lo.shape[0]
    t_lo, t_hi, stats = lp_bounds.tighten(models, chain, lo, hi, b_lo, b_hi, kernel=True)
    assert stats.lps > 0
    layers = chain.layers
    worst = 0.0
    for k in range(1, len(chain.pre)):
        assert np.all(t_lo[k] >= b_lo[k]) and np.all(t_hi[k] <= b_hi[k])
        z = _samples(model, n_in, lo, hi, k)
        assert np.all(z >= t_lo[k][None]) and np.all(z <= t_hi[k][None]), (seed, k)
        for j in range(min(EXACT_PER_LAYER, len(t_lo[k]))):
            exact = _exact_range(layers, lo, hi, k, j)
            if exact is not None:
                assert t_lo[k][j] <= exact[0] + 1e-9 and t_hi[k][j] >= exact[1] - 1e-9
        # the LPs on the bounds the tightening used: the rigorous bound must reach them
        uns = np.flatnonzero((t_lo[k] < 0) & (t_hi[k] > 0))
        if len(uns):
            _, _, values = lp_bounds.lp_slopes(chain, lo, hi, t_lo, t_hi, k, uns)
            n = len(uns)
            ok = np.isfinite(values)
            gaps = np.concatenate([values[:n] - t_lo[k][uns], values[n:] + t_hi[k][uns]])
            scale = 1.0 + np.abs(np.concatenate([t_lo[k][uns], t_hi[k][uns]]))
            worst = max(worst, float(np.max(np.where(ok, gaps / scale, 0.0))))
    return worst


@pytest.mark.parametrize("seed", SEEDS)
def test_lp_bounds_are_sound_and_reach_the_lp(seed):
    # re-solving on the tightened bounds can only give a value at most the old LP's, which
    # the rigorous bound reached up to round-off (float32 kernel terms: relative 1e-5)
    assert _check(seed) < 1e-4


def test_planted_swapped_duals_leave_the_lp_unreached(monkeypatch):
    real = lp_bounds._Relaxation.solve

    def swapped(self, j, sign):
        got = real(self, j, sign)
        if got is None:
            return None
        value, slopes = got
        return value, [np.where(np.isfinite(a), 1.0 - a, a) for a in slopes]

    monkeypatch.setattr(lp_bounds._Relaxation, "solve", swapped)
    assert max(_check(seed) for seed in SEEDS) > 1e-3


def test_planted_unsound_bound_is_caught(monkeypatch):
    real = lp_bounds.rigorous_lower

    def lifted(*args, **kwargs):
        return real(*args, **kwargs) + 0.05

    monkeypatch.setattr(lp_bounds, "rigorous_lower", lifted)
    caught = 0
    for seed in SEEDS:
        try:
            _check(seed)
        except AssertionError:
            caught += 1
    assert caught >= len(SEEDS) // 2


def test_search_with_lp_matches_truth_on_small_nets():
    """``relu_bab.search(lp=True)`` answers as the enumeration says: unsat a margin below the
    least value of the row, sat a margin above it (with a checked counterexample)."""
    answers = []
    row = np.array([1.0, -1.0])
    for seed in SEEDS:
        exact, shrink = None, 1.0
        while exact is None:  # a smaller box until few enough neurons are unstable
            model, models, chain, lo, hi, _, _ = _setup(seed, shrink)
            layers = chain.layers
            # the output row y_0 - y_1: its exact least value by enumeration over every layer
            w_last, b_last = layers[-1]
            layers_out = layers[:-1] + [(row[None] @ w_last, np.array([row @ b_last]))]
            exact = _exact_range(layers_out, lo, hi, len(layers) - 1, 0)
            shrink *= 0.7
        for safe in (True, False):
            b = exact[0] + (-0.05 if safe else 0.05) * (1 + abs(exact[0]))
            spec = bab.Spec(lo, hi, lo.astype(np.float32), hi.astype(np.float32), row[None],
                            np.array([b]), np.zeros(1, int), 1)

            def confirm(x, spec=spec, models=models):
                y = models.forward(np.asarray(x, np.float32)[None])[0]
                inside = np.all(x >= spec.inner_lower) and np.all(x <= spec.inner_upper)
                if inside and np.any(y @ spec.a.T <= spec.b):
                    return np.asarray(x, np.float64), y
                return None

            result = relu_bab.search(models, spec, confirm, lp=True, batch=8, root_steps=0,
                                     max_domains=4000)
            answers.append((seed, safe, result.status))
            assert result.status == ("unsat" if safe else "sat"), (seed, safe, result.reason)
            if result.status == "sat":
                assert confirm(result.counterexample[0]) is not None
    assert len(answers) == 2 * len(SEEDS)


def test_tighten_rejects_the_first_layer():
    _, models, chain, lo, hi, b_lo, b_hi = _setup(0)
    with pytest.raises(ValueError, match="relu layer after the first"):
        lp_bounds.tighten(models, chain, lo, hi, b_lo, b_hi, layers=[0])
