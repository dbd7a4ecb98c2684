"""Forward-mode intermediate bounds (torchlean.bounds.forward) on chain networks.

Every pre-activation value the float32 network computes at sampled points of a box (and at its
corners) must lie inside the bounds ``forward_bounds`` sets; a planted wrong relaxation must make
that check fail. Networks that are not plain chains are refused (None), so callers fall back to
backward CROWN.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.bounds import forward
from torchlean.bounds.engine import Propagation


def _mlp(sizes, seed):
    tl.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def _prop(compiled, lo, hi, kernel=True):
    graph = compiled.graph
    consts = dict(graph.consts)
    n_data = len(graph.inputs) - len(graph.params)
    for k, p in enumerate(graph.params):
        consts[graph.inputs[n_data + k]] = np.asarray(p.data)
    return Propagation(graph, consts, lo, hi, kernel=kernel, n_data=n_data)


def _violations(seed, n_points=400, planted=None):
    """Sampled float32 pre-activation values outside the forward bounds (a count)."""
    rng = np.random.default_rng(seed)
    n_in = int(rng.integers(2, 6))
    sizes = (n_in, *[int(rng.integers(4, 12))] * int(rng.integers(2, 5)), 3)
    model = _mlp(sizes, seed)
    batch = 8
    compiled = tl.compile(lambda v: model(v), (batch, n_in))
    centre = rng.uniform(-1, 1, (batch, n_in))
    width = rng.uniform(0.01, 1.0, (batch, n_in))
    lo = (centre - width).astype(np.float32).astype(np.float64)
    hi = (centre + width).astype(np.float32).astype(np.float64)
    prop = _prop(compiled, lo, hi)
    chain = forward.chain_of(prop)
    assert chain is not None and len(chain.layers) == len(sizes) - 1
    forward.forward_bounds(prop, chain, {})
    graph = compiled.graph
    bad = 0
    corners = np.array(np.meshgrid(*[[0.0, 1.0]] * n_in)).reshape(n_in, -1).T
    fracs = np.concatenate([corners, rng.uniform(size=(n_points, n_in))])
    for f in fracs:
        x = (lo + f * (hi - lo)).astype(np.float32)
        x = np.minimum(np.maximum(x, lo), hi).astype(np.float32)
        params = [np.asarray(p.data) for p in graph.params]
        values = graph.evaluate(graph.check_inputs("test", [x, *params]))
        for layer in chain.layers:
            v = np.asarray(values[layer.pre], np.float64)
            iv = prop.ivals[layer.pre]
            bad += int(np.sum(v < iv.lo) + np.sum(v > iv.hi))
    return bad


@pytest.mark.parametrize("seed", range(6))
def test_forward_bounds_enclose_the_float32_network(seed):
    assert _violations(seed) == 0


def test_a_planted_wrong_relaxation_is_caught(monkeypatch):
    real = forward._relu

    def too_tight(f, lo, hi, vmag, lower_slope):
        out = real(f, lo, hi, vmag, lower_slope)
        out.cu = out.cu - 0.3 * (hi - lo)  # the upper line moved down: no longer above relu
        return out

    monkeypatch.setattr(forward, "_relu", too_tight)
    assert sum(_violations(seed) for seed in range(6)) > 0


def test_forward_bounds_are_tighter_than_intervals_on_deep_layers():
    model = _mlp((3, 20, 20, 20, 2), 7)
    compiled = tl.compile(lambda v: model(v), (4, 3))
    lo = np.full((4, 3), -0.1)
    hi = np.full((4, 3), 0.1)
    plain = _prop(compiled, lo, hi)
    for i, node in enumerate(plain.nodes):
        if node.kind == "op":
            plain.interval(i)
    prop = _prop(compiled, lo, hi)
    chain = forward.chain_of(prop)
    forward.forward_bounds(prop, chain, {})
    last = chain.layers[-2].pre
    width = np.mean(prop.ivals[last].hi - prop.ivals[last].lo)
    ibp_width = np.mean(plain.ivals[last].hi - plain.ivals[last].lo)
    assert width < 0.9 * ibp_width


def test_graphs_that_are_not_chains_are_refused():
    tl.manual_seed(0)
    lin1, lin2 = nn.Linear(3, 4), nn.Linear(4, 4)

    def residual(v):
        h = nn.functional.relu(lin1(v))
        return lin2(h) + h

    compiled = tl.compile(residual, (2, 3))
    prop = _prop(compiled, np.zeros((2, 3)), np.ones((2, 3)))
    assert forward.chain_of(prop) is None
    smooth = tl.compile(lambda v: lin2(nn.functional.tanh(lin1(v))), (2, 3))
    assert forward.chain_of(_prop(smooth, np.zeros((2, 3)), np.ones((2, 3)))) is None
