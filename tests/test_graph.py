"""The compiled graph: tracing, verifier, execution, and the seed-004 link to the eager tape.

For every registered primitive (from its samples) and for random programs drawn by hypothesis:
``to_tape(xs)`` then ``tape.backward_dense_all`` equals ``backprop_all`` bitwise, and compiled
forward / vjp equal the eager session's forward / backward bitwise.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.registry import REGISTRY
from torchlean.engine.graph import GraphError, grad_graph
from torchlean.engine.session import Options
from torchlean.training.trainers import Session


def _differentiable_prims() -> list[str]:
    return sorted(n for n, p in REGISTRY.items() if p.inputs and not p.nondiff)


def _program(prim_name: str, sample_attrs: dict) -> object:
    """A scalar function of the sample inputs built around one primitive."""
    prim = REGISTRY[prim_name]

    def fn(*xs: object) -> object:
        y = F.apply(prim, *xs, **sample_attrs)
        # A nonlinear, input-dependent head so every cotangent is non-trivial.
        return F.sum(F.tanh(y) * y)

    return fn


def _eager(fn: object, xs: list[np.ndarray]) -> tuple[object, list[object]]:
    s = Session(Options(dtype="float64"))
    refs = [s.input(x, requires_grad=True) for x in xs]
    out = fn(*refs)
    grads = s.backward(out)
    return s.value(out), [s.grad(grads, r) for r in refs]


@pytest.mark.parametrize("name", _differentiable_prims())
def test_link_per_primitive(name: str) -> None:
    prim = REGISTRY[name]
    rng = np.random.default_rng(0)
    for sample in prim.samples(rng):
        xs = [np.array(x, dtype=np.float64) for x in sample.inputs]
        fn = _program(name, sample.attrs)
        c = tl.compile(fn, *[x.shape for x in xs], dtype="float64")
        c.graph.verify()
        seed = np.array(0.75)
        tape, leaf_ids, out_id = c.to_tape(*xs)
        from_tape = tape.backward_dense_all(out_id, seed)
        from_graph = c.backprop_all(xs, seed)
        assert len(from_tape) == len(from_graph) == len(c.graph)
        for a, b in zip(from_tape, from_graph, strict=True):
            assert a.shape == b.shape and np.array_equal(a, b)
        value, grads = _eager(fn, xs)
        assert np.array_equal(c.forward(*xs), value)
        for g_c, g_e in zip(c.backward(*xs), grads, strict=True):
            assert np.array_equal(g_c, g_e), name


UNARY = ["relu", "tanh", "sigmoid", "softplus", "exp", "square", "abs", "sqrt", "safe_log",
         "softmax", "log_softmax", "detach"]
BINARY = ["add", "sub", "mul", "max", "min"]


@st.composite
def programs(draw: st.DrawFn) -> tuple[list[tuple], int]:
    steps = []
    for _ in range(draw(st.integers(2, 12))):
        if draw(st.booleans()):
            steps.append(("unary", draw(st.sampled_from(UNARY)), draw(st.integers(0, 50))))
        else:
            steps.append(("binary", draw(st.sampled_from(BINARY)), draw(st.integers(0, 50)),
                          draw(st.integers(0, 50))))
    return steps, draw(st.integers(0, 2**16))


def _run_program(steps: list[tuple], *leaves: object) -> object:
    pool = list(leaves)
    for step in steps:
        if step[0] == "unary":
            x = pool[step[2] % len(pool)]
            if step[1] == "sqrt":
                x = F.square(x)  # keep sqrt away from its kink at 0
            pool.append(getattr(F, step[1])(x))
        else:
            pool.append(getattr(F, step[1])(pool[step[2] % len(pool)], pool[step[3] % len(pool)]))
    # Use every intermediate so the DAG has shared parents.
    total = F.sum(pool[-1])
    for v in pool[:-1]:
        total = total + F.sum(v) * 0.1
    return total


@settings(max_examples=25, deadline=None)
@given(programs())
def test_link_random_programs(drawn: tuple[list[tuple], int]) -> None:
    steps, seed = drawn
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal((4,))]

    def fn(*leaves: object) -> object:
        return _run_program(steps, *leaves)

    c = tl.compile(fn, *[x.shape for x in xs], dtype="float64")
    c.graph.verify()
    tape, _, out_id = c.to_tape(*xs)
    for a, b in zip(tape.backward_dense_all(out_id, 1.0), c.backprop_all(xs, 1.0), strict=True):
        assert np.array_equal(a, b)
    value, grads = _eager(fn, xs)
    assert np.array_equal(c.forward(*xs), value)
    for g_c, g_e in zip(c.vjp(xs, 1.0), grads, strict=True):
        assert np.array_equal(g_c, g_e)
    grad_graph(c.graph).verify()


def test_str_lists_every_node() -> None:
    c = tl.compile(lambda x, w: F.sum(F.relu(x * w) + 1.0), (2, 3), (3,))
    text = str(c.graph)
    assert "input[0] : (2, 3) float32" in text
    assert "mul(%0, %1) : (2, 3)" in text
    assert "add_scalar(%3; c=1.0)" in text
    assert text.strip().endswith(f"return %{c.graph.output}")
    assert len(text.splitlines()) == len(c.graph) + 2
    dot = c.graph.to_dot()
    assert dot.startswith("digraph") and "n0 -> n2" in dot


def test_verifier_catches_corruption() -> None:
    c = tl.compile(lambda x: F.sum(F.tanh(x)), (3,))
    c.graph.nodes[1].shape = (4,)
    with pytest.raises(GraphError, match="recorded shape"):
        c.graph.verify()
    c = tl.compile(lambda x: F.sum(F.tanh(x)), (3,))
    c.graph.nodes[2].parents = (2,)
    with pytest.raises(GraphError, match="not earlier"):
        c.graph.verify()


def test_no_values_baked_in() -> None:
    c = tl.compile(lambda x: F.sum(F.square(x)), (3,), dtype="float64")
    for k in range(3):
        x = np.arange(3.0) + k
        assert c.forward(x) == np.sum(x * x)
        assert np.array_equal(c.backward(x)[0], 2 * x)


def test_bad_inputs_are_clear_errors() -> None:
    c = tl.compile(lambda x: F.sum(x), (3,))
    with pytest.raises(tl.ShapeError, match=r"input 0 has shape \(4,\).*\(3,\)"):
        c.forward(np.ones(4))
    with pytest.raises(tl.ShapeError, match="takes 1 inputs"):
        c.forward(np.ones(3), np.ones(3))
    with pytest.raises(tl.TraceError, match="must return refs"):
        tl.compile(lambda x: 3.0, (3,))
    with pytest.raises(tl.TraceError, match="control flow"):
        tl.compile(lambda x: x if F.sum(x) else x, (3,))
    vector = tl.compile(lambda x: F.tanh(x), (3,))
    with pytest.raises(tl.ShapeError, match="expected a scalar"):
        vector.backward(np.ones(3))
    with pytest.raises(tl.ShapeError, match="seed has shape"):
        vector.vjp([np.ones(3)], np.ones(2))
    with pytest.raises(tl.ShapeError, match="matmul|mul"):
        tl.compile(lambda x, y: x * y, (3,), (4,))


def test_compiled_jvp_and_vjp_are_adjoint() -> None:
    rng = np.random.default_rng(3)

    def fn(x: object, w: object) -> object:
        return F.softmax(F.tanh(x @ w))

    c = tl.compile(fn, (4, 3), (3, 5), dtype="float64")
    xs = [rng.standard_normal((4, 3)), rng.standard_normal((3, 5))]
    us = [rng.standard_normal((4, 3)), rng.standard_normal((3, 5))]
    v = rng.standard_normal((4, 5))
    lhs = float(np.sum(v * c.jvp(xs, us)))
    rhs = sum(float(np.sum(a * b)) for a, b in zip(c.vjp(xs, v), us, strict=True))
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_wrt_marks_data_leaves_and_keeps_the_link() -> None:
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((5, 3)), rng.standard_normal((4, 3)), rng.standard_normal(4)]

    def fn(x: object, w: object, b: object) -> object:
        return F.sum(F.tanh(F.linear(w, b, x)))

    full = tl.compile(fn, *[x.shape for x in xs], dtype="float64")
    params_only = tl.compile(fn, *[x.shape for x in xs], dtype="float64", wrt=(1, 2))
    assert [params_only.graph.nodes[i].requires_grad for i in params_only.graph.inputs] == [
        False, True, True]
    g_full, g_params = full.backward(*xs), params_only.backward(*xs)
    np.testing.assert_array_equal(g_params[0], np.zeros((5, 3)))
    for a, b in zip(g_full[1:], g_params[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    tape, _, out_id = params_only.to_tape(*xs)
    for a, b in zip(tape.backward_dense_all(out_id, 1.0), params_only.backprop_all(xs, 1.0),
                    strict=True):
        assert np.array_equal(a, b)
    with pytest.raises(tl.ShapeError, match="out of range"):
        tl.compile(fn, *[x.shape for x in xs], wrt=(3,))
