"""The bound engine's one-example fast paths (relu on active and unstable neurons only, passing a
``Compact`` multiplier; linear layers over the neurons with a nonzero multiplier; unit rows as
rows of W; a first layer concretizing its own product; IBP of point-weight linear layers).

On random ReLU MLPs with many inactive neurons, traced for one example: sampled float32
executions (a third of them box corners) never leave any node's bounds nor the specification's;
the bounds agree with the general paths' (the same box twice in a batch of two) to round-off;
each fast path is taken; and a planted error in each of them breaks the sampled checks.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import bounds as B
from torchlean import nn
from torchlean.bounds import engine, ibp

F32 = np.float32


def _mlp(rng, sizes, seed):
    """A relu MLP whose hidden biases switch off about half the neurons for small boxes."""
    tl.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
        lin = nn.Linear(a, b)
        shift = np.where(rng.random(b) < 0.5, -1.5, 0.0).astype(F32)
        lin.bias.data = lin.bias.data + tl.tensor(shift)
        layers += [lin, nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def _case(seed, width):
    rng = np.random.default_rng(seed)
    sizes = (6, 24, 24, 24, 4)
    model = _mlp(rng, sizes, seed)
    one = tl.compile(lambda v: model(v), (1, sizes[0]))
    two = tl.compile(lambda v: model(v), (2, sizes[0]))
    centre = rng.uniform(-1, 1, (1, sizes[0]))
    lo, hi = centre - width, centre + width
    spec = rng.standard_normal((1, 3, sizes[-1]))
    return one, two, lo, hi, spec, rng


def _violations(c, result, spec, lo, hi, rng, n=150):
    """Entries of node and specification bounds broken by sampled float32 executions."""
    graph = c.graph
    u = rng.random((n,) + lo.shape)
    u[: n // 3] = u[: n // 3] < 0.5  # corners
    xs = (lo + (hi - lo) * u).astype(F32)
    xs = np.where(xs < lo, np.nextafter(xs, F32(np.inf)), xs)
    xs = np.where(xs > hi, np.nextafter(xs, F32(-np.inf)), xs)
    bad = 0
    for x in xs:
        values = graph.evaluate(graph.check_inputs("check", c._full([x])))
        for i, (nlo, nhi) in enumerate(result.nodes):
            if nlo is None or graph.nodes[i].kind != "op":
                continue
            v = np.asarray(values[i], np.float64)
            bad += int(np.sum(v < nlo) + np.sum(v > nhi))
        y = np.asarray(values[graph.output], np.float64)
        rows = (spec * y[:, None, :]).sum(axis=-1)
        bad += int(np.sum(rows < result.spec[0]) + np.sum(rows > result.spec[1]))
    return bad


def _recording(fn, out):
    def recorded(*args):
        out.append(fn(*args))
        return out[-1]

    return recorded


def _spy(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_example_paths_sound_and_equal_to_the_general_ones(seed, monkeypatch):
    for width in (0.05, 0.3):
        one, two, lo, hi, spec, rng = _case(seed, width)
        calls: dict[str, int] = {}
        for name in ("_relu_one", "_linear_shared", "linear_point", "_find_input_box"):
            _spy(monkeypatch, engine, name, calls)
        fused: list = []
        monkeypatch.setattr(engine, "_input_box", _recording(engine._input_box, fused))
        fast = B.compute_bounds(one, lo, hi, method="crown", spec=spec)
        assert calls.get("linear_point", 0) >= 4 and calls.get("_linear_shared", 0) > 0
        assert calls.get("_relu_one", 0) > 0
        assert any(f is not None for f in fused)  # the first layer concretized its product
        assert _violations(one, fast, spec, lo, hi, rng) == 0
        monkeypatch.undo()
        # Same arithmetic as the general paths (real-valued bounds: the kernel terms of the
        # batched paths are summed differently, ~1e-7 apart, both sound)
        fast = B.compute_bounds(one, lo, hi, method="crown", spec=spec, kernel=False)
        general = B.compute_bounds(two, np.concatenate([lo, lo]), np.concatenate([hi, hi]),
                                   method="crown", spec=np.concatenate([spec, spec]),
                                   kernel=False)
        for (a_lo, a_hi), (b_lo, b_hi) in zip(fast.nodes, general.nodes, strict=True):
            if a_lo is None:
                continue
            if np.shape(b_lo)[:1] == (2,) and np.shape(a_lo)[:1] == (1,):
                b_lo, b_hi = b_lo[:1], b_hi[:1]  # a node of the example: its first copy
            scale = 1e-9 * (1.0 + np.abs(b_lo) + np.abs(b_hi))
            assert np.all(np.abs(a_lo - b_lo) <= scale)
            assert np.all(np.abs(a_hi - b_hi) <= scale)
        for a, b in zip(fast.spec, general.spec, strict=True):
            assert np.all(np.abs(a - b[:1]) <= 1e-9 * (1.0 + np.abs(b[:1])))


def _planted(monkeypatch, which):
    """Replace one fast path by a wrong version of itself."""
    if which == "relu":
        real = engine._relu_one

        def wrong(prop, px, v, nu, terms, slack):  # halves the multiplier passed on
            return real(prop, px, 0.5 * v, nu, terms, slack)

        monkeypatch.setattr(engine, "_relu_one", wrong)
    elif which == "linear":
        real_l = engine._linear_shared

        def wrong_l(prop, i, v, w, b, *rest):  # drops the bias
            return real_l(prop, i, v, w, 0.0 * b, *rest)

        monkeypatch.setattr(engine, "_linear_shared", wrong_l)
    elif which == "input":
        real_b = engine._input_box

        def wrong_b(*args):  # the input box's radius halved
            got = real_b(*args)
            return None if got is None else (got[0], got[1] * np.array([0.5, 1.0]))

        monkeypatch.setattr(engine, "_input_box", wrong_b)
    else:
        real_p = engine.linear_point

        def wrong_p(w, b, x, ctx, abs_w=None):  # an interval a fifth too narrow
            out = real_p(w, b, x, ctx, abs_w)
            c, r = 0.5 * (out.lo + out.hi), 0.5 * (out.hi - out.lo)
            return ibp.Interval(c - 0.8 * r, c + 0.8 * r, out.eps)

        monkeypatch.setattr(engine, "linear_point", wrong_p)


@pytest.mark.parametrize("which", ["relu", "linear", "input", "ibp"])
def test_a_planted_error_in_each_fast_path_is_caught(which, monkeypatch):
    one, _, lo, hi, spec, rng = _case(3, 0.3)
    _planted(monkeypatch, which)
    method = "ibp" if which == "ibp" else "crown"
    result = B.compute_bounds(one, lo, hi, method=method, spec=spec)
    assert _violations(one, result, spec, lo, hi, rng) > 0
