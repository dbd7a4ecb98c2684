"""ReLU-splitting branch and bound with beta-CROWN (bounds.beta, bounds.relu_bab) against the
exact truth.

On small random ReLU nets the truth is found by enumerating activation patterns: neurons whose
interval sign is fixed keep it, every pattern of the others gives a linear program (scipy's
``linprog``: the pattern's affine network, its sign constraints and the input box), and the least
value of each output row is the least over feasible patterns. Thresholds are put a margin below
(safe) or above (unsafe) it. ``relu_bab.search`` must answer ``unsat`` exactly on the safe
cases, ``sat`` (with a point the float32 network really maps into the unsafe set) on the others;
planted wrong rules (a beta sign flip, an unsound split intersection) must make this fail. The
alpha-CROWN start is kept weak (no steps) so that most cases need splits. Budgets are counts.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np
import pytest
from relu_patterns import interval_signs

import torchlean as tl
from torchlean import nn
from torchlean.bounds import bab, beta, relu_bab
from torchlean.vnn import instance, vnnlib

MARGIN = 0.02  # of the output rows' sampled spread
MAX_FREE = 8  # unstable neurons enumerated at most (2^8 LPs per row)
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "vnncomp2021"


def _net(seed):
    rng = np.random.default_rng(seed)
    n_in = int(rng.integers(2, 7))
    hidden = [int(rng.integers(4, 9)) for _ in range(int(rng.integers(2, 4)))]
    tl.manual_seed(seed)
    mods = []
    for a, b in zip([n_in] + hidden[:-1], hidden, strict=True):
        mods += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*mods, nn.Linear(hidden[-1], 3))
    return rng, n_in, model


def _affine(model):
    return [(np.asarray(m.weight.data, np.float64), np.asarray(m.bias.data, np.float64))
            for m in model if isinstance(m, nn.Linear)]


def _exact_least(layers, lo, hi, rows):
    """Least value of each row ``rows[r] . y`` over the box, by one LP per activation pattern
    of the neurons whose interval sign is not fixed (real arithmetic)."""
    from scipy.optimize import linprog

    # interval bounds fix the sign of some neurons
    fixed = interval_signs(layers[:-1], lo, hi)
    free = [(k, j) for k, f in enumerate(fixed) for j in np.flatnonzero(f < 0)]
    if len(free) > MAX_FREE:
        return None
    best = np.full(len(rows), np.inf)
    for bits in itertools.product((0, 1), repeat=len(free)):
        pattern = [f.copy() for f in fixed]
        for (k, j), s in zip(free, bits, strict=True):
            pattern[k][j] = s
        # z_k = M_k x + v_k along the pattern; constraints (2 s - 1) z_kj >= 0
        m, v = np.eye(len(lo)), np.zeros(len(lo))
        a_ub, b_ub = [], []
        for (w, b), p in zip(layers[:-1], pattern, strict=True):
            m, v = w @ m, w @ v + b
            sgn = (1 - 2 * p)[:, None]  # active: -z <= 0, inactive: z <= 0
            a_ub.append(sgn * m)
            b_ub.append(-(sgn[:, 0] * v))
            m, v = p[:, None] * m, p * v
        w, b = layers[-1]
        m, v = w @ m, w @ v + b
        for r, row in enumerate(rows):
            res = linprog(row @ m, A_ub=np.concatenate(a_ub), b_ub=np.concatenate(b_ub),
                          bounds=list(zip(lo, hi, strict=True)), method="highs")
            if res.status == 0:
                best[r] = min(best[r], res.fun + row @ v)
            elif res.status != 2:  # 2: infeasible pattern
                raise AssertionError(f"linprog failed: {res.message}")
    return best


def _case(seed):
    """(model, spec, truth): a net, a box and two one-row conjunctions ``a_j . y <= b_j``."""
    rng, n_in, model = _net(seed)
    layers = _affine(model)
    centre = rng.uniform(-1, 1, n_in)
    radius = rng.uniform(0.1, 0.6, n_in)
    a = rng.normal(size=(2, 3))
    least = None
    while least is None:  # a smaller box until few enough neurons are unstable
        lo = (centre - radius).astype(np.float32).astype(np.float64)
        hi = (centre + radius).astype(np.float32).astype(np.float64)
        least = _exact_least(layers, lo, hi, a)
        radius = radius * 0.7
    x = rng.uniform(lo, hi, size=(2000, n_in)).astype(np.float32)
    y = np.asarray(tl.compile(lambda v: model(v), (2000, n_in)).forward(x), np.float64)
    spread = np.ptp(y @ a.T, axis=0) + 1e-3
    safe = bool(rng.integers(0, 2))
    b = least + (-1 if safe else 1) * MARGIN * spread * np.array([1.0, 1.0 if safe else -5.0])
    spec = bab.Spec(lo, hi, lo.astype(np.float32), hi.astype(np.float32), a, b, np.arange(2), 2)
    return model, spec, "unsat" if safe else "sat"


def _run(model, spec, **options):
    n_in = spec.lower.size
    models = bab.Models(lambda n: tl.compile(lambda v: model(v), (n, n_in)), max_batch=64)

    def confirm(x):
        y = models.forward(np.asarray(x, np.float32)[None])[0]
        inside = np.all(x >= spec.inner_lower) and np.all(x <= spec.inner_upper)
        return (np.asarray(x, np.float64), y) if inside and np.any(y @ spec.a.T <= spec.b) else None

    options = {"batch": 16, "max_domains": 5000, "root_steps": 0, **options}
    result = relu_bab.search(models, spec, confirm, **options)
    if result.status == "sat":
        assert confirm(result.counterexample[0]) is not None
    return result


CASES = [(seed, *_case(seed)) for seed in range(12)]


def _wrong(**options):
    out, split = [], 0
    for seed, model, spec, truth in CASES:
        result = _run(model, spec, **options)
        split += result.domains > 1
        if result.status != truth:
            out.append((seed, truth, result.status, result.reason))
    return out, split


@pytest.mark.parametrize("options", [{}, {"per_conjunction": True, "child_steps": 3},
                                     {"warm": True, "refresh": True},
                                     {"fsb": 3, "skip": False}, {"deep": 3}])
def test_verdicts_match_enumerated_truth(options):
    wrong, split = _wrong(**options)
    assert wrong == []
    assert split >= 3  # the cases exercise splitting, not only the first pass


def test_planted_beta_sign_flip_is_caught(monkeypatch):
    # the split constraints' multipliers enter with the wrong sign, both in the optimised
    # objective and in the rigorous evaluation: the optimiser then inflates the bound by terms
    # that are >= 0 on the domain, so a domain with a counterexample gets "proved"
    real_lower, real_parts = beta.Propagation.lower, beta._objective_parts

    def flipped(self, target, nu0):
        self.extra = {p: -e for p, e in self.extra.items()}
        return real_lower(self, target, nu0)

    monkeypatch.setattr(beta.Propagation, "lower", flipped)
    monkeypatch.setattr(beta, "_objective_parts",
                        lambda chain, lo, hi, sign: real_parts(chain, lo, hi, [-s for s in sign]))
    wrong, _ = _wrong()
    assert any(truth == "sat" and status == "unsat" for _, truth, status, _ in wrong)


def test_planted_unsound_split_is_caught(monkeypatch):
    real = beta._propagate

    def both_active(model, chain, x_lo, x_hi, lo, hi, kernel, refresh=frozenset()):
        # the inactive child also gets l := max(l, 0): part of its domain is lost
        lo = [np.where(np.isfinite(h) & (h <= 0) & (l < 0), np.minimum(h, 0.0), l)
              for l, h in zip(lo, hi, strict=True)]
        return real(model, chain, x_lo, x_hi, lo, hi, kernel, refresh)

    monkeypatch.setattr(beta, "_propagate", both_active)
    wrong, _ = _wrong()
    assert wrong


def test_relu_chain_and_bad_input():
    _, n_in, model = _net(0)
    compiled = tl.compile(lambda v: model(v), (2, n_in))
    chain = beta.relu_chain(compiled)
    assert chain is not None and len(chain.pre) == len(chain.relus) >= 2
    assert relu_bab.supports(compiled)
    other = tl.compile(lambda v: nn.functional.tanh(model(v)), (2, n_in))
    assert beta.relu_chain(other) is None
    seed, model, spec, _ = CASES[0]
    with pytest.raises(bab.BabError, match="batch must be"):
        _run(model, spec, batch=0)


def _published():
    rows = {}
    with open(SHARED / "PUBLISHED.csv") as f:
        for r in csv.DictReader(f):
            if r["benchmark"] == "mnistfc":
                rows[(r["onnx"], r["vnnlib"])] = r["abcrown_result"]
    return rows


@pytest.mark.skipif(not (SHARED / "mnistfc").is_dir(), reason="VNN-COMP 2021 files not here")
@pytest.mark.parametrize("prop", ["prop_0_0.03.vnnlib", "prop_1_0.05.vnnlib"])
def test_mnistfc_never_contradicts_published(prop):
    published = _published()
    net = instance.Network(SHARED / "mnistfc" / "mnist-net_256x2.onnx")
    found = relu_bab.verify_network(net, vnnlib.read(SHARED / "mnistfc" / prop),
                                    max_domains=200, max_batch=64, root_steps=20)
    truth = published.get(("mnist-net_256x2.onnx", prop), "?")
    assert found.status in (truth, "unknown", "timeout")
    assert found.status == "unsat" or prop != "prop_0_0.03.vnnlib"


def test_hand_written_objective_equals_the_traced_one():
    # the optimiser climbs beta._Objective (NumPy, gradient written out by hand); the traced
    # graph of the same Lagrangian, differentiated by torchlean's reverse mode, is the oracle
    seed, model, spec, _ = CASES[2]
    chain = beta.relu_chain(tl.compile(lambda v: model(v), (5, spec.lower.size)))
    rng = np.random.default_rng(1)
    lo = [rng.normal(size=(5, n)) - 0.3 for n in chain.sizes]
    hi = [l + rng.uniform(0, 2, size=l.shape) for l in lo]
    sign = [np.where((l < 0) & (h > 0), rng.integers(-1, 2, size=l.shape), 0).astype(np.int8)
            for l, h in zip(lo, hi, strict=True)]
    parts = beta._objective_parts(chain, lo, hi, sign)
    rows = rng.normal(size=(5, 3))
    x_lo = np.broadcast_to(spec.lower, (5, spec.lower.size))
    x_hi = np.broadcast_to(spec.upper, (5, spec.lower.size))
    graph, marks = beta._trace(chain, rows, parts, x_lo, x_hi)
    alphas = [rng.uniform(0, 1, l.shape).astype(np.float32) for l in lo]
    betas = [(rng.uniform(0, 1, l.shape) * (s != 0)).astype(np.float32)
             for l, s in zip(lo, sign, strict=True)]
    weight = np.array([1, 0, 1, 1, 0], np.float32)
    values = graph.evaluate(graph.check_inputs("test", alphas + betas))
    grads = graph.backprop(values, graph.output, weight)
    objective = beta._Objective(chain, rows, parts, (spec.lower + spec.upper) / 2,
                                (spec.upper - spec.lower) / 2)
    total, mus, mu_in = objective.run(alphas, betas)
    g_alpha, g_beta = objective.grad(weight)
    scale = np.abs(values[graph.output]).max()
    np.testing.assert_allclose(total, values[graph.output], rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(mu_in, values[marks[-1]], rtol=1e-5, atol=1e-6)
    for k in range(len(chain.pre)):
        np.testing.assert_allclose(mus[k], values[marks[k]], rtol=1e-5, atol=1e-6)
        for mine, ref in ((g_alpha[k], grads[graph.inputs[k]]),
                          (g_beta[k], grads[graph.inputs[len(lo) + k]])):
            np.testing.assert_allclose(mine, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    assert any(np.abs(g).max() > 0 for g in g_alpha + g_beta)  # not a vacuous comparison


def _random_domain(seed, n_pairs):
    """A chain of one of the small cases, random crossing bounds, split signs on some unstable
    neurons, slopes and multipliers (``(P, n_k)`` per layer)."""
    _, model, spec, _ = CASES[seed]
    chain = beta.relu_chain(tl.compile(lambda v: model(v), (n_pairs, spec.lower.size)))
    rng = np.random.default_rng(seed)
    lo = [rng.normal(size=(n_pairs, n)) - 0.3 for n in chain.sizes]
    hi = [l + rng.uniform(0, 2, size=l.shape) for l in lo]
    # a few split neurons (a fifth of the unstable ones), the rest free to split
    sign = [np.where((l < 0) & (h > 0) & (rng.uniform(size=l.shape) < 0.2),
                     rng.choice([-1, 1], size=l.shape), 0).astype(np.int8)
            for l, h in zip(lo, hi, strict=True)]
    alphas = [rng.uniform(0, 1, l.shape).astype(np.float32) for l in lo]
    betas = [(rng.uniform(0, 1, l.shape) * (s != 0)).astype(np.float32)
             for l, s in zip(lo, sign, strict=True)]
    return model, spec, chain, rng, lo, hi, sign, alphas, betas


def test_child_bounds_equal_the_split_domains_objective():
    # FSB's look-ahead value of a child must be the traced bound of the domain with the split
    # applied (bounds intersected, sign set) and the parent's slopes and multipliers
    n_pairs = 4
    _, spec, chain, rng, lo, hi, sign, alphas, betas = _random_domain(3, n_pairs)
    free = np.concatenate([((l < 0) & (h > 0) & (s == 0)) for l, h, s in
                           zip(lo, hi, sign, strict=True)], axis=1)
    cand = np.array([rng.choice(np.flatnonzero(f), size=2, replace=False) for f in free])
    cand[0, 1] = -1  # no candidate: -inf
    rows = rng.normal(size=(n_pairs, 3))
    x_lo, x_hi = spec.lower[None], spec.upper[None]
    got = beta.child_bounds(chain, rows, lo, hi, sign, alphas, betas, x_lo, x_hi, cand)
    assert got.shape == (n_pairs, 2, 2) and np.all(np.isneginf(got[0, 1]))
    cut = np.cumsum(chain.sizes)[:-1]
    checked = 0
    for p in range(n_pairs):
        for i in range(2):
            if cand[p, i] < 0:
                continue
            for side, s in enumerate((1, -1)):
                f_lo = np.concatenate([l[p] for l in lo])
                f_hi = np.concatenate([h[p] for h in hi])
                f_sign = np.concatenate([g[p] for g in sign])
                c = cand[p, i]
                f_lo[c], f_hi[c] = (max(f_lo[c], 0.0), f_hi[c]) if s > 0 else (f_lo[c], 0.0)
                f_sign[c] = s
                parts = beta._objective_parts(chain, [v[None] for v in np.split(f_lo, cut)],
                                              [v[None] for v in np.split(f_hi, cut)],
                                              [v[None] for v in np.split(f_sign, cut)])
                objective = beta._Objective(chain, rows[[p]], parts,
                                            (spec.lower + spec.upper) / 2,
                                            (spec.upper - spec.lower) / 2)
                want, _, _ = objective.run([a[[p]] for a in alphas], [b[[p]] for b in betas])
                np.testing.assert_allclose(got[p, i, side], want[0], rtol=1e-5, atol=1e-5)
                checked += 1
    assert checked == 14
    assert not np.allclose(got[1:, :, 0], got[1:, :, 1])  # the two sides differ


def test_skipped_rigorous_pass_proves_the_same_pairs():
    # bound_pairs(prove_at=...) runs the rigorous pass only where the traced bound is near the
    # threshold: the pairs it evaluates get exactly the full pass's bound, the others stay
    # below their threshold (so the proved pairs are the same)
    n_pairs = 16
    model, spec, chain, rng, lo, hi, sign, alphas, betas = _random_domain(5, n_pairs)
    compiled = tl.compile(lambda v: model(v), (n_pairs, spec.lower.size))
    x_lo = np.broadcast_to(spec.lower, (n_pairs, spec.lower.size))
    x_hi = np.broadcast_to(spec.upper, (n_pairs, spec.lower.size))
    rows = rng.normal(size=(n_pairs, 3))
    lo = [np.full_like(l, -np.inf) for l in lo]  # nothing inherited: the box's own bounds
    hi = [np.full_like(h, np.inf) for h in hi]
    sign = [np.zeros_like(g) for g in sign]
    full = beta.bound_pairs(compiled, chain, x_lo, x_hi, rows, lo, hi, sign,
                            thresholds=np.full(n_pairs, 1e9), steps=3)
    # thresholds around the pairs' bounds: half provable, half not
    at = full.lower + np.where(np.arange(n_pairs) % 2 == 0, -0.5, 0.5) * (1 + np.abs(full.lower))
    part = beta.bound_pairs(compiled, chain, x_lo, x_hi, rows, lo, hi, sign,
                            thresholds=np.full(n_pairs, 1e9), steps=3, prove_at=at)
    np.testing.assert_array_equal(part.lower > at, full.lower > at)
    assert (full.lower > at).sum() == n_pairs // 2
    near = part.traced >= at - beta.SKIP_TOLERANCE * (1 + np.abs(at))
    assert near.any() and (~near).any()
    np.testing.assert_array_equal(part.lower[near], full.lower[near])
    assert np.all(part.lower[~near] < at[~near])


def test_shared_domain_sweep_equals_the_per_pair_pass():
    # bound_pairs(owner=...): pairs that share a domain share its interval sweep; every output
    # (rigorous bounds, intervals, multipliers, inputs) must equal the pass with each pair's
    # domain copied out, and a wrong pair -> domain map must change the bounds
    n_dom, n_pairs = 4, 8
    model, spec, chain, rng, _, _, sign, _, _ = _random_domain(5, n_dom)
    # the box's own bounds intersected with each domain's splits
    lo = [np.where(g > 0, 0.0, -np.inf) for g in sign]
    hi = [np.where(g < 0, 0.0, np.inf) for g in sign]
    at = np.array([0, 0, 1, 2, 2, 2, 3, 1])
    n_in = spec.lower.size
    per_pair = tl.compile(lambda v: model(v), (n_pairs, n_in))
    p_chain = beta.relu_chain(per_pair)
    x_lo = np.broadcast_to(spec.lower, (n_pairs, n_in))
    x_hi = np.broadcast_to(spec.upper, (n_pairs, n_in))
    rows = rng.normal(size=(n_pairs, 3))
    thr = np.full(n_pairs, 1e9)
    full = beta.bound_pairs(per_pair, p_chain, x_lo, x_hi, rows, [l[at] for l in lo],
                            [h[at] for h in hi], [g[at] for g in sign], thresholds=thr,
                            steps=3)
    owner = (tl.compile(lambda v: model(v), (n_dom, n_in)), chain, at)
    shared = beta.bound_pairs(per_pair, p_chain, x_lo, x_hi, rows, lo, hi, sign,
                              thresholds=thr, steps=3, owner=owner)
    assert np.isfinite(full.lower).sum() >= 3  # (some domains are empty: +inf)
    np.testing.assert_array_equal(shared.lower, full.lower)
    np.testing.assert_array_equal(shared.primal, full.primal)
    for got, want in zip(shared.lo + shared.hi + shared.mu, full.lo + full.hi + full.mu,
                         strict=True):
        np.testing.assert_array_equal(got, want)
    wrong = beta.bound_pairs(per_pair, p_chain, x_lo, x_hi, rows, lo, hi, sign,
                             thresholds=thr, steps=3, owner=(*owner[:2], at[::-1]))
    assert not np.array_equal(wrong.lower, full.lower)


def test_planted_overtight_deepening_is_caught(monkeypatch):
    # deepen's intermediate bounds made tighter than they are (each lower bound raised, each
    # upper bound lowered by 45% of the width): domains lose executions, a wrong unsat (seed 1)
    real = relu_bab._Passes.deepen
    counted = []

    def over_tight(self, lo, hi, sign, first, steps):
        new_lo, new_hi = real(self, lo, hi, sign, first, steps)
        counted.append(1)
        width = np.where(np.isfinite(new_hi - new_lo), new_hi - new_lo, 0.0)
        return new_lo + 0.45 * width, new_hi - 0.45 * width

    monkeypatch.setattr(relu_bab._Passes, "deepen", over_tight)
    wrong, _ = _wrong(deep=3)
    assert counted
    assert any(truth == "sat" and status == "unsat" for _, truth, status, _ in wrong)


def test_shared_box_first_layer_equals_the_per_example_sweep(monkeypatch):
    # every example has the same input box: _propagate computes the first layer's interval for
    # one example and broadcasts it; it must equal the per-example sweep and hold the float32
    # network's pre-activations of points in the box
    n_pairs = 8
    model, spec, chain, rng, lo, hi, _, _, _ = _random_domain(3, n_pairs)
    compiled = tl.compile(lambda v: model(v), (n_pairs, spec.lower.size))
    x_lo = np.broadcast_to(spec.lower, (n_pairs, spec.lower.size))
    x_hi = np.broadcast_to(spec.upper, (n_pairs, spec.lower.size))
    lo = [np.full_like(l, -np.inf) for l in lo]  # nothing inherited: the box's own bounds
    hi = [np.full_like(h, np.inf) for h in hi]
    shared, _ = beta._propagate(compiled, chain, x_lo, x_hi, lo, hi, True)
    monkeypatch.setattr(beta, "_first_layer", lambda prop, i: prop.interval(i))
    each, _ = beta._propagate(compiled, chain, x_lo, x_hi, lo, hi, True)
    first = chain.pre[0]
    for p in chain.pre:
        np.testing.assert_allclose(shared.ivals[p].lo, each.ivals[p].lo, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(shared.ivals[p].hi, each.ivals[p].hi, rtol=1e-12, atol=1e-12)
    x = rng.uniform(spec.lower, spec.upper, size=(64, spec.lower.size)).astype(np.float32)
    z = np.asarray(tl.compile(lambda v: model[0](v), (64, x.shape[1])).forward(x), np.float64)
    assert np.all(z >= shared.ivals[first].lo[:1]) and np.all(z <= shared.ivals[first].hi[:1])
    # with different boxes per example the sweep stays per example
    wide = np.array(x_hi, copy=True)
    wide[1:] += 0.5
    sep, _ = beta._propagate(compiled, chain, x_lo, wide, lo, hi, True)
    assert np.all(sep.ivals[first].hi[1:] >= sep.ivals[first].hi[:1])
    assert np.any(sep.ivals[first].hi[1:] > sep.ivals[first].hi[:1])
