"""CROWN over many boxes of a chain network (torchlean.bounds.chain_crown), sound under round-off.

Every value the float32 network computes at sampled points (and corners) of a box must lie inside
the pre-activation bounds, every row value above the row's lower bound and above its linear
function (``const + coef . v``), also concretized on sub-boxes; a planted wrong relaxation must
make these checks fail. On an ACAS Xu network (ONNX MatMul + Add layers) the same holds, and the
bound is as tight as the engine's CROWN.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn, onnx
from torchlean.bounds import bab, chain_crown
from torchlean.bounds.chain_crown import ChainCrown, concretize


def _mlp(sizes, seed):
    tl.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def _violations(models, lo, hi, rows, rng, n_points=300, kernel=True):
    """Sampled float32 values outside the bounds (a count) for the boxes ``[lo, hi]``."""
    found = models.chain_crown(kernel)
    assert found is not None
    chain, crown = found
    v_lo, v_hi = models.chain_input(lo, hi, chain, kernel)
    got = crown.bound(v_lo, v_hi, rows)
    n_box, n_in = lo.shape
    model = models.get(n_box)
    graph = model.graph
    params = [np.asarray(p.data) for p in graph.params]
    corners = np.array(np.meshgrid(*[[0.0, 1.0]] * n_in)).reshape(n_in, -1).T
    bad = 0
    # sub-boxes: the lower half of every box along its first input
    sub_hi = hi.copy()
    sub_hi[:, 0] = lo[:, 0] + (hi[:, 0] - lo[:, 0]) / 2
    s_lo, s_hi = models.chain_input(lo, sub_hi, chain, kernel)
    sub_bound = concretize(got.coef, got.const, s_lo, s_hi)
    for f in np.concatenate([corners, rng.uniform(size=(n_points, n_in))]):
        x = (lo + f * (hi - lo)).astype(np.float32)
        x = np.minimum(np.maximum(x, lo), hi).astype(np.float32)
        x = x.reshape((n_box, *models.features))
        values = graph.evaluate(graph.check_inputs("test", [x, *params]))
        for layer, (l, u) in zip(chain.layers, got.layers, strict=False):
            v = np.asarray(values[layer.pre], np.float64).reshape(n_box, -1)
            bad += int(np.sum(v < l) + np.sum(v > u))
        y = np.asarray(values[graph.output], np.float64).reshape(n_box, -1)
        vals = y @ rows.T
        bad += int(np.sum(vals < got.lower))
        v_in = np.asarray(values[chain.start], np.float64).reshape(n_box, -1)
        bad += int(np.sum(vals < got.const + np.einsum("nkd,nd->nk", got.coef, v_in)))
        in_sub = x.reshape(n_box, -1)[:, 0] <= sub_hi[:, 0]
        bad += int(np.sum((vals < sub_bound)[in_sub]))
    return bad


def _random_case(seed):
    rng = np.random.default_rng(seed)
    n_in = int(rng.integers(2, 6))
    sizes = (n_in, *[int(rng.integers(4, 12))] * int(rng.integers(2, 5)), 3)
    model = _mlp(sizes, seed)
    models = bab.Models(lambda b: tl.compile(lambda v: model(v), (b, n_in)), max_batch=8)
    centre = rng.uniform(-1, 1, (8, n_in))
    width = rng.uniform(0.01, 1.0, (8, n_in))
    lo = (centre - width).astype(np.float32).astype(np.float64)
    hi = (centre + width).astype(np.float32).astype(np.float64)
    rows = rng.normal(size=(2, 3))
    return models, lo, hi, rows, rng


@pytest.mark.parametrize("seed", range(6))
def test_bounds_enclose_the_float32_network(seed):
    models, lo, hi, rows, rng = _random_case(seed)
    assert _violations(models, lo, hi, rows, rng) == 0


def test_a_planted_wrong_relaxation_is_caught(monkeypatch):
    real = ChainCrown._relax

    def too_tight(self, lo, hi):
        real(self, lo, hi)
        self._t[-1] = 0.3 * self._t[-1]  # the upper line's intercept moved down: below relu

    monkeypatch.setattr(ChainCrown, "_relax", too_tight)
    assert sum(_violations(*_random_case(seed)) for seed in range(6)) > 0


def test_kernel_errors_only_loosen_and_the_root_matches_the_engine():
    models, lo, hi, rows, _ = _random_case(3)
    tight, loose = [], []
    for kernel, out in ((False, tight), (True, loose)):
        chain, crown = models.chain_crown(kernel)
        out.append(crown.bound(*models.chain_input(lo, hi, chain, kernel), rows).lower)
    assert np.all(loose[0] <= tight[0])
    engine = models.bound(lo, hi, rows, method="crown", kernel=True, options={})
    ibp = models.bound(lo, hi, rows, method="ibp", kernel=True, options={})
    assert np.all(loose[0] >= ibp - 1e-9)
    scale = np.abs(engine) + 1.0
    assert np.all(np.abs(loose[0] - engine) <= 0.05 * scale)


@pytest.mark.parametrize("pairs32", [False, True])
def test_bab_with_pair_bounds_gives_the_exact_verdicts(monkeypatch, pairs32):
    from test_bab import CASES, _verdicts  # the MILP-checked cases of tests/test_bab.py

    monkeypatch.setattr(ChainCrown, "pairs32", pairs32)
    assert _verdicts(CASES, intermediate="pairs", attack_steps=0) == []


def test_bab_with_a_planted_wrong_pair_relaxation_is_caught(monkeypatch):
    from test_bab import CASES, _verdicts

    real = ChainCrown._relax

    def too_tight(self, lo, hi):
        real(self, lo, hi)
        self._t[-1] = 0.0 * self._t[-1]

    monkeypatch.setattr(ChainCrown, "_relax", too_tight)
    wrong = _verdicts(CASES, intermediate="pairs", attack_steps=0)
    assert any(truth == "sat" and answer == "unsat" for _, truth, answer, _ in wrong)


ACAS = Path(__file__).resolve().parents[1] / ".." / "shared" / "vnncomp2021" / "acasxu"


@pytest.mark.skipif(not ACAS.is_dir(), reason="the shared benchmarks are absent")
def test_acas_xu_bounds_enclose_the_network_and_match_the_engine():
    proto = onnx.load(str(ACAS / "ACASXU_run2a_1_1_batch_2000.onnx")).proto
    models = bab.Models(lambda n: onnx.load(proto, [(n, 1, 1, 5)]), max_batch=4)
    rng = np.random.default_rng(0)
    centre = rng.uniform(-0.3, 0.3, (4, 5))
    lo = centre - 0.02
    hi = centre + 0.02
    rows = np.array([[-1.0, 1, 0, 0, 0], [1.0, 0, 0, 0, -1]])
    assert models.chain_crown(True)[1].kinds == ["matmul+add"] * 7
    assert _violations(models, lo, hi, rows, rng, n_points=100) == 0
    chain, crown = models.chain_crown(True)
    mine = crown.bound(*models.chain_input(lo, hi, chain, True), rows).lower
    engine = models.bound(lo, hi, rows, method="crown", kernel=True, options={})
    assert np.all(np.abs(mine - engine) <= 0.05 * (np.abs(engine) + 1.0))
    assert chain_crown.ROW_CHUNK > 0


def test_networks_ending_in_a_relu_fall_back_to_the_engine():
    model = nn.Sequential(_mlp((3, 6, 2), 0), nn.ReLU())
    models = bab.Models(lambda b: tl.compile(lambda v: model(v), (b, 3)), max_batch=4)
    assert models.chain_crown(True) is None  # its output is not the last pre-activation
    plain = _mlp((3, 6, 2), 0)
    models = bab.Models(lambda b: tl.compile(lambda v: plain(v), (b, 3)), max_batch=4)
    assert models.chain_crown(True) is not None


def _alpha_violations(models, lo, hi, spec_rows, rng, n_points=200):
    """Sampled float32 values outside the bounds after ``Models.alpha_pairs`` (a count), and
    how much alpha-CROWN tightened the rows (the summed gain)."""
    b = np.full(len(spec_rows), 1e6)  # thresholds never met: every box stays open
    spec = bab.Spec(lo[0], hi[0], lo[0], hi[0],
                    spec_rows, b, np.zeros(len(b), np.int64), 1)
    lower, kept, _, _, _ = models.bound_pairs(lo, hi, spec_rows, None, None, kernel=True,
                                              settled=lambda low, idx: np.zeros(len(idx), bool))
    low2, kept2 = models.alpha_pairs(lo, hi, spec, lower, kept, kernel=True, steps=8)
    assert np.all(low2 >= lower) and kept2.dtype == kept.dtype
    chain = models.chain_crown(True)[0]
    n_box = len(lo)
    graph = models.get(n_box).graph
    params = [np.asarray(p.data) for p in graph.params]
    bad = 0
    for f in rng.uniform(size=(n_points, lo.shape[1])):
        x = np.minimum(np.maximum((lo + f * (hi - lo)).astype(np.float32), lo), hi)
        values = graph.evaluate(graph.check_inputs("test", [x.astype(np.float32).reshape(
            (n_box, *models.features)), *params]))
        offset = 0
        for layer in chain.layers[:-1]:
            n = layer.w.shape[0]
            v = np.asarray(values[layer.pre], np.float64).reshape(n_box, -1)
            bad += int(np.sum(v < kept2[:, offset:offset + n])
                       + np.sum(v > kept2[:, offset + n:offset + 2 * n]))
            offset += 2 * n
        y = np.asarray(values[graph.output], np.float64).reshape(n_box, -1)
        bad += int(np.sum(y @ spec_rows.T < low2))
    return bad, float(np.sum(low2 - lower))


@pytest.mark.parametrize("seed", range(3))
def test_alpha_pairs_bounds_enclose_the_float32_network(seed):
    models, lo, hi, rows, rng = _random_case(seed)
    bad, _ = _alpha_violations(models, lo, hi, rows, rng)
    assert bad == 0


def test_bab_with_alpha_on_open_children_gives_the_exact_verdicts():
    from test_bab import CASES, _verdicts

    assert _verdicts(CASES[::2], intermediate="pairs", attack_steps=0, alpha_after=0,
                     alpha_steps=4) == []


def test_a_planted_wrong_alpha_bound_is_caught(monkeypatch):
    from test_bab import CASES, _verdicts

    real = bab.optimise

    def too_tight(prop, *args, **kwargs):
        out = real(prop, *args, **kwargs)
        for iv in prop.ivals:  # every interval shrunk towards its middle: wrong
            if iv is not None and np.ndim(iv.lo) == 2:
                mid = 0.5 * (iv.lo + iv.hi)
                iv.lo, iv.hi = mid - 0.2 * (mid - iv.lo), mid + 0.2 * (iv.hi - mid)
        return out

    monkeypatch.setattr(bab, "optimise", too_tight)
    models, lo, hi, rows, rng = _random_case(1)
    assert _alpha_violations(models, lo, hi, rows, rng)[0] > 0
    wrong = _verdicts(CASES, intermediate="pairs", attack_steps=0, alpha_after=0,
                      alpha_steps=2)
    assert any(truth == "sat" and answer == "unsat" for _, truth, answer, _ in wrong)


@pytest.mark.skipif(not ACAS.is_dir(), reason="the shared benchmarks are absent")
def test_alpha_pairs_on_acas_xu_property_1_boxes_tighten_and_enclose():
    # boxes of property 1 where CROWN's intermediate bounds stall (network 4_9)
    proto = onnx.load(str(ACAS / "ACASXU_run2a_4_9_batch_2000.onnx")).proto
    models = bab.Models(lambda n: onnx.load(proto, [(n, 1, 1, 5)]), max_batch=4)
    lo = np.array([[0.6, 0.0, 0.0625, 0.45, -0.5], [0.6, -0.0625, 0.4375, 0.45, -0.5]])
    hi = lo + np.array([0.04, 0.0625, 0.0625, 0.05, 0.05])
    rows = np.array([[-1.0, 0, 0, 0, 0]])
    bad, gain = _alpha_violations(models, lo, hi, rows, np.random.default_rng(0), n_points=60)
    assert bad == 0
    assert gain > 10.0  # CROWN's margins there are about -230 and -140; alpha's far better


def _exact(chain, v, rows):
    """``rows @ y`` of the real-valued chain at the point ``v`` and every layer's
    pre-activations, in exact rational arithmetic."""
    from fractions import Fraction

    h = [Fraction(float(x)) for x in v]
    pre = []
    for layer in chain.layers:
        z = [sum((Fraction(float(w)) * x for w, x in zip(row, h, strict=True)), Fraction(0))
             + Fraction(float(b)) for row, b in zip(layer.w, layer.b, strict=True)]
        pre.append(z)
        h = [max(x, Fraction(0)) for x in z] if layer.relu is not None else z
    return [sum((Fraction(float(r)) * y for r, y in zip(row, h, strict=True)), Fraction(0))
            for row in rows], pre


def _point_violations(seed, n_points=6):
    """Rows whose lower bound (or linear function) over a one-point box lies above the exact
    real value there, and neurons whose CROWN bounds (the float32 pass of the pair bounds,
    run here on every neuron) miss the exact value (a count): with every neuron stable the
    bounds are exact up to round-off, so only the round-off accounting keeps them sound.
    Large, cancelling weights (many thousands, alternating signs) make the float32
    multipliers' rounding far larger than float64's."""
    rng = np.random.default_rng(seed)
    n_in, width = 4, 24
    model = _mlp((n_in, width, width, width, 3), seed)
    for m in model:
        if isinstance(m, nn.Linear):
            w = np.asarray(m.weight.data, np.float64)
            big = rng.uniform(1e3, 1e4, w.shape) * np.where(rng.uniform(size=w.shape) < 0.5,
                                                                 -1.0, 1.0)
            m.weight.data[...] = (w + big).astype(np.float32)
    models = bab.Models(lambda b: tl.compile(lambda v: model(v), (b, n_in)), max_batch=8)
    chain, crown = models.chain_crown(False)  # the real network: no kernel errors to hide in
    v = rng.uniform(-1, 1, (n_points, n_in)).astype(np.float32).astype(np.float64)
    rows = rng.normal(size=(2, 3))
    got = crown.bound(v, v, rows)
    pair = {}
    for k in range(1, len(chain.layers) - 1):
        n = chain.layers[k].w.shape[0]
        box, j = np.repeat(np.arange(n_points), n), np.tile(np.arange(n), n_points)
        lo_p, hi_p = crown._pair_bounds(k, box, j)
        pair[k] = lo_p.reshape(n_points, n), hi_p.reshape(n_points, n)
    bad = 0
    for i in range(n_points):
        exact, pre = _exact(chain, v[i], rows)
        linear = got.const[i] + got.coef[i] @ v[i]
        for r in range(len(rows)):
            bad += int(got.lower[i, r] > exact[r]) + int(linear[r] > exact[r])
        for k, (lo_p, hi_p) in pair.items():
            bad += sum(int(lo_p[i, q] > z) + int(hi_p[i, q] < z) for q, z in enumerate(pre[k]))
    return bad


@pytest.mark.parametrize("pairs32,rows32", [(False, False), (True, False), (True, True)])
def test_bounds_on_points_stay_below_the_exact_value(monkeypatch, pairs32, rows32):
    # the pair bounds (here every neuron's) and the rows, by the float32 pass or not
    monkeypatch.setattr(ChainCrown, "pairs32", pairs32)
    monkeypatch.setattr(ChainCrown, "rows32", rows32)
    assert sum(_point_violations(seed) for seed in range(4)) == 0


def test_a_planted_float64_accounting_of_the_float32_multipliers_is_caught(monkeypatch):
    # the float32 pass's multipliers and sums: accounting their rounding with float64's unit
    # roundoff must let some bound rise above the exact value
    monkeypatch.setattr(ChainCrown, "pairs32", True)
    monkeypatch.setattr(chain_crown, "MULT_U", 2.0 ** -53)
    assert sum(_point_violations(seed) for seed in range(4)) > 0  # the pairs'
    monkeypatch.setattr(ChainCrown, "rows32", True)
    assert sum(_point_violations(seed) for seed in range(4)) > 0


@pytest.mark.parametrize("seed", range(6))
def test_the_float32_pass_encloses_the_float32_network(monkeypatch, seed):
    monkeypatch.setattr(ChainCrown, "pairs32", True)
    monkeypatch.setattr(ChainCrown, "rows32", True)
    models, lo, hi, rows, rng = _random_case(seed)
    assert _violations(models, lo, hi, rows, rng) == 0


def test_a_float32_overflow_of_the_multipliers_gives_no_bound_never_a_wrong_one(monkeypatch):
    monkeypatch.setattr(ChainCrown, "rows32", True)
    models, lo, hi, _, rng = _random_case(2)
    rows = np.array([[1e40, -1e40, 0.0], [0.0, 1.0, -1.0]])  # rows @ W: past float32's range
    chain, crown = models.chain_crown(True)
    got = crown.bound(*models.chain_input(lo, hi, chain, True), rows)
    assert np.all(np.isneginf(got.const[:, 0])) and np.all(got.coef[:, 0] == 0.0)
    assert np.all(np.isfinite(got.const[:, 1])) and not np.any(np.isnan(got.lower))
    assert _violations(models, lo, hi, rows, rng, n_points=50) == 0
