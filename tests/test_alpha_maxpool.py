"""alpha-CROWN's max-pool weights: a convex mix of each window's entries as its lower bound.

CROWN bounds ``max(x) >= x_j`` with the window's entry of greatest lower bound; alpha-CROWN
optimises a mix ``sum_j w_j x_j`` (weights on the simplex, projected after each step, as
auto_LiRPA's BoundMaxPool). Checked here: bounds of conv / relu / max-pool networks enclose the
float32 network's sampled outputs; the optimised weights are never looser than the fixed entry and
tighter on a case; the engine stays sound for weights off the simplex (it pays for the gap), and a
handler that trusted such weights is caught by the same enclosure check. Work is bounded by
counts (examples, samples, alpha steps).
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import bounds as B
from torchlean import nn
from torchlean.bounds import alpha, engine

SHAPE = (1, 8, 8)


def _net(seed: int) -> nn.Module:
    tl.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(6 * 2 * 2, 5))
    model.eval()
    return model


def _case(seed: int, batch: int = 3, radius: float = 0.12):
    model = _net(seed)
    rng = np.random.default_rng(seed)
    compiled = tl.compile(lambda x: model(x), (batch, *SHAPE))
    centre = rng.random((batch, *SHAPE))
    lo, hi = np.clip(centre - radius, 0, 1), np.clip(centre + radius, 0, 1)
    spec = rng.normal(size=(batch, 4, 5))
    return model, compiled, lo, hi, spec


def _sampled_spec(model, lo, hi, spec, n: int, seed: int, nodes=None) -> np.ndarray:
    """Per example and row, the least ``spec . f(x)`` over ``n`` float32 points of its box (a
    third of them corners), run by the float32 network; with ``nodes`` (a result's node
    bounds), every node's sampled values are checked inside them too."""
    rng = np.random.default_rng(seed)
    batch, shape = lo.shape[0], lo.shape[1:]
    u = rng.random((n, batch, *shape))
    u[: n // 3] = u[: n // 3] < 0.5
    x = (lo + (hi - lo) * u).astype(np.float32)
    x = np.clip(x, np.nextafter(lo.astype(np.float32), np.float32(np.inf)),
                np.nextafter(hi.astype(np.float32), np.float32(-np.inf)))
    assert np.all((x >= lo) & (x <= hi))
    big = tl.compile(lambda t: model(t), (n * batch, *shape))
    values = big.graph.evaluate(big.graph.check_inputs("sample", big._full(
        [x.reshape(n * batch, *shape)])))
    checked = 0
    for i, (nlo, nhi) in enumerate(nodes or []):
        v = np.asarray(values[i], np.float64)
        if (nlo is None or np.ndim(nlo) < 2 or v.shape[1:] != np.shape(nlo)[1:]
                or v.shape[0] != n * batch or np.shape(nlo)[0] != batch):
            continue  # constants (weights)
        v = v.reshape((n, batch) + v.shape[1:])
        assert np.all((v >= nlo) & (v <= nhi)), f"node %{i} outside its bounds"
        checked += 1
    assert nodes is None or checked >= 8
    out = np.asarray(values[big.graph.output], np.float64).reshape(n, batch, -1)
    return np.einsum("bko,nbo->nbk", spec, out).min(axis=0)


def _pools(prop) -> list[int]:
    return [i for i, nd in enumerate(prop.nodes)
            if nd.op is not None and nd.op.name in ("max_pool2d", "max_pool")]


def test_project_simplex():
    w = np.array([[0.2, 0.9, -0.5, 0.4], [0.25, 0.25, 0.25, 0.25], [3.0, 0.0, 0.0, 0.0]])
    p = alpha.project_simplex(w)
    assert np.all(p >= 0) and np.allclose(p.sum(axis=-1), 1.0)
    assert np.allclose(p[0], [0.2 - 1 / 6, 0.9 - 1 / 6, 0.0, 0.4 - 1 / 6])  # theta = 1/6
    assert np.allclose(p[1], w[1]) and np.allclose(p[2], [1, 0, 0, 0])
    # the projection is the nearest simplex point: no random simplex point is nearer
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 4))
    q = alpha.project_simplex(v)
    other = rng.dirichlet(np.ones(4), size=(200, 50))
    assert np.all(np.linalg.norm(v - q, axis=-1) <= np.linalg.norm(v - other, axis=-1).min(0)
                  + 1e-12)


@pytest.mark.parametrize(("seed", "chord"), [(0, True), (1, True), (1, False)])
def test_alpha_with_pool_weights_encloses_float32_samples(seed, chord, monkeypatch):
    monkeypatch.setattr(engine, "POOL_CHORD", chord)
    model, compiled, lo, hi, spec = _case(seed)
    result = B.compute_bounds(compiled, lo, hi, method="alpha-crown", spec=spec, alpha_steps=8)
    assert result.info["alpha_pools"] == 2  # both poolings' weights were optimised
    sampled = _sampled_spec(model, lo, hi, spec, 200, seed, result.nodes)
    assert np.all(result.spec[0] <= sampled)
    assert np.all(result.spec[0] > -np.inf)


def test_optimised_pool_weights_never_looser_and_tighter_on_a_case(monkeypatch):
    gains = []
    for seed in range(3):
        _, compiled, lo, hi, spec = _case(seed)
        mixed = B.compute_bounds(compiled, lo, hi, method="alpha-crown", spec=spec,
                                 alpha_steps=8).spec[0]
        monkeypatch.setattr(alpha, "POOL_MIX", False)
        fixed = B.compute_bounds(compiled, lo, hi, method="alpha-crown", spec=spec,
                                 alpha_steps=8)
        monkeypatch.setattr(alpha, "POOL_MIX", True)
        assert "alpha_pools" not in fixed.info or fixed.info["alpha_pools"] == 0
        gains.append(mixed - fixed.spec[0])
    gains = np.concatenate([g.ravel() for g in gains])
    print(f"pool weights' gain over the fixed entry: min {gains.min():.3g} max {gains.max():.3g}"
          f" mean {gains.mean():.3g}")
    assert gains.min() >= -1e-9
    assert gains.max() > 1e-3


def _crown_prop(seed: int):
    model, compiled, lo, hi, spec = _case(seed)
    crown = B.compute_bounds(compiled, lo, hi, method="crown", spec=spec)
    return model, compiled, lo, hi, spec, crown._prop


def _onehot_mix(prop, pool: int, rows: int) -> np.ndarray:
    node = prop.nodes[pool]
    px = node.parents[0]
    k = engine.pool_geometry(node, prop.nodes[px].shape)
    box = prop.bx(px)
    onehot = engine.pool_window_view(engine.pool_windows(box.lo, box.hi, k)[0], k)
    return np.repeat(onehot[:, None], rows, axis=1)


def test_onehot_weights_give_crowns_bound():
    _, compiled, _, _, spec, prop = _crown_prop(0)
    out = compiled.graph.output
    plain = prop.lower(out, spec)
    prop.alpha = {p: _onehot_mix(prop, p, spec.shape[1]) for p in _pools(prop)}
    mixed = prop.lower(out, spec)
    prop.alpha = {}
    assert np.all(mixed <= plain + 1e-12) and np.allclose(mixed, plain, atol=1e-9)


def _planted(prop, spec, scale: float) -> dict[int, np.ndarray]:
    """Weights off the simplex: ``scale`` times the one-hot (sum ``scale``) plus a negative
    and a NaN entry in the first window of every pooling."""
    mixes = {}
    for p in _pools(prop):
        m = scale * _onehot_mix(prop, p, spec.shape[1])
        m[..., 0, 0, 0, :2] = [-0.7, np.nan]
        mixes[p] = m
    return mixes


@pytest.mark.parametrize("scale", [0.3, 2.5])
def test_weights_off_the_simplex_stay_sound(scale):
    model, compiled, lo, hi, spec, prop = _crown_prop(1)
    sampled = _sampled_spec(model, lo, hi, spec, 200, 1)
    prop.alpha = _planted(prop, spec, scale)
    bound = prop.lower(compiled.graph.output, spec)
    prop.alpha = {}
    assert np.all(bound <= sampled)


def test_a_handler_trusting_the_weights_is_caught(monkeypatch):
    """Planted: the gap term dropped (the weights taken to sum to 1). Weights summing to 2.5
    then lift ``max(x) >= sum w_j x_j`` above the max, and the sampled outputs show it."""
    model, compiled, lo, hi, spec, prop = _crown_prop(1)
    sampled = _sampled_spec(model, lo, hi, spec, 200, 1)
    monkeypatch.setattr(engine, "mix_gap", lambda d_lo, d_hi, lo_, hi_: np.zeros(
        np.broadcast_shapes(np.shape(d_lo), np.shape(lo_))))
    prop.alpha = _planted(prop, spec, 2.5)
    bound = prop.lower(compiled.graph.output, spec)
    prop.alpha = {}
    assert np.any(bound > sampled)


def test_chord_upper_bound_sound_and_tighter_than_the_constant(monkeypatch):
    """CROWN with the chord upper side (``engine.pool_upper``) against the constant ``max u``
    (auto_LiRPA's CROWN): both enclose the samples; the chord is tighter on a case."""
    gains = []
    for seed in range(3):
        model, compiled, lo, hi, spec = _case(seed)
        sampled = _sampled_spec(model, lo, hi, spec, 150, seed)
        got = {}
        for chord in (True, False):
            monkeypatch.setattr(engine, "POOL_CHORD", chord)
            got[chord] = B.compute_bounds(compiled, lo, hi, method="crown", spec=spec).spec[0]
            assert np.all(got[chord] <= sampled)
        gains.append((got[True] - got[False]).ravel())
    assert np.concatenate(gains).max() > 1e-3


def _shallow(seed: int):
    """conv / max pool / linear on 2x4 images: the pooling's relaxation is the only one, and
    samples of the 8-dimensional boxes come near each row's least value."""
    tl.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(3 * 1 * 2, 3))
    model.eval()
    rng = np.random.default_rng(seed)
    compiled = tl.compile(lambda x: model(x), (3, 1, 2, 4))
    centre = rng.random((3, 1, 2, 4))
    lo, hi = np.clip(centre - 0.15, 0, 1), np.clip(centre + 0.15, 0, 1)
    return model, compiled, lo, hi, rng.normal(size=(3, 4, 3))


_POOL_UPPER = engine.pool_upper


def _steep(lo, hi, k):
    """Planted: the chord's slope from the other entries' LOWER bounds (too steep)."""
    onehot, a, m_lo, l_i = _POOL_UPPER(lo, hi, k)
    others = np.where(onehot > 0, -np.inf, engine.pool_window_view(lo, k)).max(axis=-1)
    top = engine.pool_window_view(hi, k).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        steep = np.where(top > l_i, (top - others) / (top - l_i), 0.0)
    return onehot, np.clip(np.nan_to_num(steep), 0.0, 1.0), m_lo, l_i


def _trusting_chord(v, dom, top, onehot, a, m_lo, l_i, terms, slack):
    """Planted: the dual term taken as the line's intercept ``v (1 - a) U`` (right only for the
    true chord slope)."""
    neg = ~dom & (v < 0)
    q = np.where(neg, v * engine._with_k(a), 0.0)
    terms.append(engine._sum_rest_down(np.where(neg, (v - q) * engine._with_k(top), 0.0)))
    return q[..., None] * onehot[:, None]


@pytest.mark.parametrize("trusting", [False, True])
def test_too_steep_chord_is_paid_for_and_a_trusting_rule_is_caught(trusting, monkeypatch):
    """A too steep chord slope: the engine's term (the least of the two ends) keeps the bound
    sound; a rule that trusted the line's intercept is caught by the sampled outputs."""
    wrong = 0
    for seed in range(3):
        model, compiled, lo, hi, spec = _shallow(seed)
        sampled = _sampled_spec(model, lo, hi, spec, 150, seed)
        with monkeypatch.context() as m:
            m.setattr(engine, "pool_upper", _steep)
            if trusting:
                m.setattr(engine, "_pool_chord", _trusting_chord)
            bound = B.compute_bounds(compiled, lo, hi, method="crown", spec=spec).spec[0]
        wrong += int(np.any(bound > sampled))
    assert wrong >= 1 if trusting else wrong == 0


def test_traced_gradient_of_the_weights_is_the_upward_derivative():
    """alpha-CROWN's traced objective: the reverse-mode gradient of each pooling weight equals
    the one-sided difference upward (the feasible direction of a weight the simplex projection
    left at 0, whose multiplier entries are then exactly 0 at the relu below); its value does
    not depend on which relu form runs."""
    _, compiled, _, _, spec, prop = _crown_prop(0)
    out = compiled.graph.output
    problem = alpha._problem(prop, out, spec, True)
    graph, _ = problem.traced()
    aux = alpha._offsets(prop, problem.layout, problem.init)
    flags = alpha._pool_flags(prop, problem.layout)
    rng = np.random.default_rng(0)
    pts = [alpha.project_simplex(a + 0.3 * rng.random(a.shape)) if f else a
           for a, f in zip(problem.init, flags, strict=True)]

    def value(p):
        return float(np.sum(graph.evaluate(graph.check_inputs("t", p + aux))[graph.output]))

    values = graph.evaluate(graph.check_inputs("t", pts + aux))
    dense = graph.backprop(values, graph.output, np.ones(np.shape(values[graph.output])))
    base, h, checked = value(pts), 1e-6, 0
    for j in np.flatnonzero(flags):
        a, grad = pts[j], dense[graph.inputs[j]]
        for zero in (True, False):
            cand = np.argwhere(a == 0 if zero else a > 1e-3)
            for idx in map(tuple, cand[rng.choice(len(cand), 4, replace=False)]):
                up = [x.copy() for x in pts]
                up[j][idx] += h
                slope = (value(up) - base) / h
                assert abs(grad[idx] - slope) <= 1e-6 + 1e-4 * abs(slope), (j, idx, zero)
                checked += 1
    assert checked >= 16
