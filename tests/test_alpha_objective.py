"""alpha-CROWN's NumPy objective (bounds.alpha_objective) against the traced graph, its oracle.

On relu chains (``linear`` layers, and ``matmul`` + ``add`` as ONNX imports them, with a
shifted, reshaped input), with intermediate targets and random slopes, the NumPy objective's value
and its hand-derived gradient equal the traced graph's value and torchlean's reverse mode; a
planted error in the gradient is caught; networks that are not such chains (tanh, sigmoid) keep
the traced objective; and the final bounds of the fast path enclose sampled float32 outputs and
equal the traced path's.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import bounds as B
from torchlean.bounds import alpha, alpha_objective


def _net(seed: int, kind: str, sizes: tuple[int, ...] = (4, 16, 16, 16, 3)):
    rng = np.random.default_rng(seed)
    ws = [(rng.normal(size=(m, n)) / np.sqrt(m)).astype(np.float32)
          for m, n in zip(sizes, sizes[1:], strict=False)]
    bs = [(rng.normal(size=(n,)) * 0.3).astype(np.float32) for n in sizes[1:]]
    shift = rng.normal(size=(1, 1, sizes[0])).astype(np.float32)

    def net(x):
        if kind == "matmul":  # ONNX-style: a shifted, reshaped input, MatMul then Add
            x = (x - shift).reshape(x.shape[0], sizes[0])
        for k, (w, b) in enumerate(zip(ws, bs, strict=True)):
            x = x @ w + b if kind == "matmul" else tl.nn.functional.linear(x, w.T.copy(), b)
            if k < len(ws) - 1:
                x = {"tanh": x.tanh, "sigmoid": x.sigmoid}.get(kind, x.relu)()
        return x

    shape = (2, 1, sizes[0]) if kind == "matmul" else (2, sizes[0])
    compiled = tl.compile(net, shape)
    lo = rng.uniform(-1.0, 0.0, shape).astype(np.float32).astype(np.float64)
    hi = (lo + rng.uniform(0.3, 0.8, shape)).astype(np.float32).astype(np.float64)
    return compiled, lo, hi, rng


def _setup(seed: int, kind: str):
    compiled, lo, hi, rng = _net(seed, kind)
    crown = B.compute_bounds(compiled, lo, hi, method="crown", kernel=False)
    prop = crown._prop.copy()
    out_id = compiled.graph.output
    spec = rng.normal(size=(1, 3, 3))
    problem = alpha._problem(prop, out_id, spec, True)
    assert problem is not None
    return prop, out_id, spec, problem, rng


def _random_slopes(problem, rng):
    # slopes anywhere in [0, 1], with some exactly 0 and 1 (the projection's ends)
    out = []
    for a in problem.init:
        s = rng.uniform(0.0, 1.0, a.shape)
        s[rng.uniform(size=a.shape) < 0.2] = 0.0
        s[rng.uniform(size=a.shape) < 0.1] = 1.0
        out.append(s)
    return out


def _compare(seed: int, kind: str):
    prop, out_id, spec, problem, rng = _setup(seed, kind)
    assert problem.targets  # intermediate bounds are optimised: the chords carry gradients
    fast = alpha_objective.build(prop, out_id, spec, problem.layout, problem.targets,
                                 alpha.DIRECT_WEIGHT)
    assert fast is not None
    graph, spec_node = problem.traced()
    worst = 0.0
    for _ in range(3):
        slopes = _random_slopes(problem, rng)
        values = graph.evaluate(graph.check_inputs("t", slopes))
        total = fast.value(slopes)
        np.testing.assert_allclose(total, values[graph.output], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(fast.spec_value(), values[spec_node], rtol=1e-10,
                                   atol=1e-10)
        seed_ = (rng.uniform(size=np.shape(total)) < 0.7).astype(np.float64)
        dense = graph.backprop(values, graph.output, seed_)
        grads = fast.gradient(seed_, slopes)
        for j in range(len(slopes)):
            want = dense[graph.inputs[j]]
            want = np.zeros(slopes[j].shape) if want is None else want
            got = np.zeros(slopes[j].shape) if grads[j] is None else grads[j]
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
            worst = max(worst, float(np.abs(want).max()))
    assert worst > 1e-3  # the gradients compared are not all zero
    return fast, graph, problem, slopes


@pytest.mark.parametrize("kind", ["linear", "matmul"])
def test_numpy_objective_equals_traced_graph(kind):
    for seed in range(3):
        _compare(seed, kind)


def test_planted_gradient_error_is_caught():
    fast, graph, problem, slopes = _compare(0, "linear")
    rng = np.random.default_rng(9)
    values = graph.evaluate(graph.check_inputs("t", slopes))
    seed_ = np.ones(np.shape(values[graph.output]))
    dense = graph.backprop(values, graph.output, seed_)
    original = alpha_objective.ChainObjective._box_grad

    def planted(self, k, ds, dt, dbox):  # the chord's gradient with the wrong sign of dt
        return original(self, k, ds, -dt, dbox)

    alpha_objective.ChainObjective._box_grad = planted
    try:
        fast.value(slopes)
        grads = fast.gradient(seed_, slopes)
    finally:
        alpha_objective.ChainObjective._box_grad = original
    differ = [not np.allclose(0.0 if g is None else g, dense[graph.inputs[j]], atol=1e-9)
              for j, g in enumerate(grads)]
    assert any(differ)
    del rng


@pytest.mark.parametrize("kind", ["tanh", "sigmoid"])
def test_smooth_networks_keep_the_traced_objective(kind):
    prop, out_id, spec, problem, _ = _setup(0, kind)
    assert alpha_objective.build(prop, out_id, spec, problem.layout, problem.targets) is None


def test_fast_path_bounds_are_sound_and_equal_the_traced_path():
    for seed in range(2):
        compiled, lo, hi, rng = _net(seed, "matmul")
        spec = rng.normal(size=(2, 3, 3))
        results = {}
        for fast in (True, False):
            alpha.FAST = fast
            try:
                results[fast] = B.compute_bounds(compiled, lo, hi, method="alpha-crown",
                                                 spec=spec, alpha_steps=15)
            finally:
                alpha.FAST = True
        assert results[True].info["alpha_objective"] == "numpy"
        assert results[False].info["alpha_objective"] == "traced"
        a, b = results[True].spec, results[False].spec
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-6)
        crown = B.compute_bounds(compiled, lo, hi, method="crown", spec=spec)
        assert np.all(a[0] >= crown.spec[0] - 1e-12)
        # sampled float32 runs (a third of them box corners) never leave the final bounds
        xs = rng.uniform(lo, hi, (300,) + lo.shape).astype(np.float32)
        corner = rng.uniform(size=xs.shape) < 0.5
        xs[:100] = np.where(corner[:100], lo, hi).astype(np.float32)
        for x in xs:
            y = np.asarray(compiled(x), np.float64).reshape(2, 3)
            vals = np.einsum("bko,bo->bk", spec, y)
            assert np.all(vals >= a[0]) and np.all(vals <= results[True].spec[1])


def test_float32_objective_is_close_to_float64():
    # alpha.FAST_DTYPE = float32 only changes the ranking arithmetic (the reported bound is the
    # rigorous pass): its value and gradient stay within float32 rounding of float64's
    prop, out_id, spec, problem, rng = _setup(1, "matmul")
    objs = {dt: alpha_objective.build(prop, out_id, spec, problem.layout, problem.targets,
                                      alpha.DIRECT_WEIGHT, dt) for dt in (np.float64, np.float32)}
    slopes = _random_slopes(problem, rng)
    vals = {dt: o.value(slopes) for dt, o in objs.items()}
    scale = np.abs(vals[np.float64]).max()
    np.testing.assert_allclose(vals[np.float32], vals[np.float64], atol=1e-5 * scale)
    seed_ = np.ones(np.shape(vals[np.float64]))
    g64, g32 = (objs[dt].gradient(seed_, slopes) for dt in (np.float64, np.float32))
    for a, b in zip(g64, g32, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(b, a, atol=1e-4 * max(1.0, np.abs(a).max()))
