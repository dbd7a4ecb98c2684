"""grad / value_and_grad / vjp / jvp / hvp / hessian against finite differences and torch.func."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.registry import ARRAY_OPS, REGISTRY, Primitive, Sample, register


def mlp_loss(x: object, w1: object, w2: object) -> object:
    h = F.tanh(x @ w1)
    return F.mean(F.square(F.softplus(h @ w2)))


def torch_mlp_loss(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = torch.tanh(x @ w1)
    return torch.nn.functional.softplus(h @ w2).square().mean()


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 3)), rng.standard_normal((3, 5)) * 0.5,
            rng.standard_normal((5, 2)) * 0.5]


def test_grad_matches_torch_and_argnums() -> None:
    xs = _inputs(0)
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    torch_mlp_loss(*ts).backward()
    g1 = tl.grad(mlp_loss, argnums=1)(*xs)
    np.testing.assert_allclose(g1, ts[1].grad.numpy(), rtol=1e-12, atol=1e-14)
    both = tl.grad(mlp_loss, argnums=(0, 2))(*xs)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[0], ts[0].grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(both[1], ts[2].grad.numpy(), rtol=1e-12, atol=1e-14)
    value, g = tl.value_and_grad(mlp_loss)(*xs)
    assert value == pytest.approx(float(torch_mlp_loss(*[torch.tensor(x) for x in xs])))
    np.testing.assert_allclose(g, ts[0].grad.numpy(), rtol=1e-12, atol=1e-14)


def test_vjp_and_jvp_match_torch_func() -> None:
    xs = _inputs(1)
    rng = np.random.default_rng(2)

    def f(x: object, w1: object, w2: object) -> object:
        return F.tanh(x @ w1) @ w2

    def tf(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w1) @ w2

    out, vjp_fn = tl.vjp(f, *xs)
    seed = rng.standard_normal(out.shape)
    t_out, t_vjp = torch.func.vjp(tf, *[torch.tensor(x) for x in xs])
    np.testing.assert_allclose(out, t_out.numpy(), rtol=1e-12)
    for a, b in zip(vjp_fn(seed), t_vjp(torch.tensor(seed)), strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)
    tangents = tuple(rng.standard_normal(x.shape) for x in xs)
    out2, tangent = tl.jvp(f, tuple(xs), tangents)
    _, t_tangent = torch.func.jvp(tf, tuple(torch.tensor(x) for x in xs),
                                  tuple(torch.tensor(t) for t in tangents))
    np.testing.assert_allclose(tangent, t_tangent.numpy(), rtol=1e-10, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16))
def test_hvp_matches_torch_and_finite_differences(seed: int) -> None:
    xs = _inputs(seed)
    rng = np.random.default_rng(seed + 1)
    vs = tuple(rng.standard_normal(x.shape) for x in xs)
    hv = tl.hvp(mlp_loss, tuple(xs), vs)
    _, t_hv = torch.func.jvp(torch.func.grad(torch_mlp_loss, argnums=(0, 1, 2)),
                             tuple(torch.tensor(x) for x in xs), tuple(torch.tensor(v) for v in vs))
    for a, b in zip(hv, t_hv, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-11)
    # Central differences of the gradient along v.
    h = 1e-5
    plus = tl.grad(mlp_loss, argnums=(0, 1, 2))(*[x + h * v for x, v in zip(xs, vs, strict=True)])
    minus = tl.grad(mlp_loss, argnums=(0, 1, 2))(*[x - h * v for x, v in zip(xs, vs, strict=True)])
    for a, p, m in zip(hv, plus, minus, strict=True):
        np.testing.assert_allclose(a, (p - m) / (2 * h), rtol=1e-5, atol=1e-7)


def test_hessian_matches_torch_func() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3))
    a = rng.standard_normal((3, 3))

    def f(x: object) -> object:
        return F.sum(F.log_softmax(F.sigmoid(x @ a))) + F.sum(F.square(F.tanh(x)))

    def tf(x: torch.Tensor) -> torch.Tensor:
        t = torch.tensor(a)
        return torch.log_softmax(torch.sigmoid(x @ t), -1).sum() + torch.tanh(x).square().sum()

    hess = tl.hessian(f)(x)
    assert hess.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(hess, torch.func.hessian(tf)(torch.tensor(x)).numpy(),
                               rtol=1e-9, atol=1e-11)


def test_compiled_hvp_matches_functional() -> None:
    xs = _inputs(5)
    vs = [np.ones_like(x) for x in xs]
    c = tl.compile(mlp_loss, *[x.shape for x in xs], dtype="float64")
    for a, b in zip(c.hvp(xs, vs), tl.hvp(mlp_loss, tuple(xs), tuple(vs)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_ties_split_evenly_in_every_path() -> None:
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([1.0, 0.0, 3.0])

    def f(a: object, b: object) -> object:
        return F.sum(F.max(a, b))

    ga, gb = tl.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(ga, [0.5, 1.0, 0.5])
    np.testing.assert_array_equal(gb, [0.5, 0.0, 0.5])
    # Forward mode: the tangent of max at a tie is the mean of the two tangents.
    _, t = tl.jvp(lambda a, b: F.max(a, b), (x, y), (np.ones(3), np.zeros(3)))
    np.testing.assert_array_equal(t, [0.5, 1.0, 0.5])
    # Second order through the recorded backward pass uses the same weights.
    def g(a: object, b: object) -> object:
        return F.sum(F.square(F.max(a, b)))

    # d/da sum(max^2) = 2 max w with w the tie weight, so H v (v on a) = 2 w^2: 0.5 at ties.
    hv = tl.hvp(g, (x, y), (np.ones(3), np.zeros(3)))
    np.testing.assert_array_equal(hv[0], [0.5, 2.0, 0.5])


def test_reverse_only_op_raises_in_forward_modes() -> None:
    prim = register(Primitive(
        "test_reverse_only_cube", ("x",), lambda s: s, lambda x: x ** 3,
        vjp=lambda ops, g, xs, out: (ops.mul(g, ops.scale(ops.square(xs[0]), c=3.0)),),
        reverse_only=True, semantics="x^3 without a JVP (test fixture).",
        samples=lambda rng: [Sample((rng.standard_normal(3),))],
    ))
    try:
        def f(x: object) -> object:
            return F.sum(F.apply(prim, x))

        x = np.array([1.0, 2.0, 3.0])
        np.testing.assert_allclose(tl.grad(f)(x), 3 * x ** 2)
        with pytest.raises(tl.UnsupportedJvpError, match="test_reverse_only_cube"):
            tl.jvp(f, (x,), (np.ones(3),))
        with pytest.raises(tl.UnsupportedJvpError, match="test_reverse_only_cube"):
            tl.hvp(f, (x,), (np.ones(3),))
        with pytest.raises(tl.UnsupportedJvpError, match="test_reverse_only_cube"):
            tl.hessian(f)(x)
    finally:
        del REGISTRY["test_reverse_only_cube"]


def test_no_primitive_is_reverse_only() -> None:
    assert [n for n, p in REGISTRY.items() if p.reverse_only] == []


def test_transform_errors() -> None:
    with pytest.raises(tl.ShapeError, match="expected a scalar"):
        tl.grad(lambda x: F.tanh(x))(np.ones(3))
    with pytest.raises(tl.ShapeError, match="must be a tuple"):
        tl.jvp(lambda x: x, np.ones(3), np.ones(3))
    with pytest.raises(tl.ShapeError, match="mix dtypes"):
        tl.grad(lambda x, y: F.sum(x * y))(np.ones(3, np.float32), np.ones(3))
    with pytest.raises(tl.ShapeError, match="argnums"):
        tl.grad(lambda x: F.sum(x), argnums=3)(np.ones(3))


def test_vjp_returns_one_cotangent_per_argument_with_modules() -> None:
    tl.manual_seed(0)
    layer = tl.nn.Linear(3, 2, dtype="float64")

    def f(x: object) -> object:
        return F.tanh(layer(x))

    x = np.ones((4, 3))
    out, vjp_fn = tl.vjp(f, x)
    cotangents = vjp_fn(np.ones(out.shape))
    assert len(cotangents) == 1 and cotangents[0].shape == (4, 3)
    expected = (1 - out ** 2) @ layer.weight.value
    np.testing.assert_allclose(cotangents[0], expected, rtol=1e-12)


@pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
def test_linear_jvp_tangent_input_term_has_no_zero_bias(lead: tuple[int, ...]) -> None:
    """linear's JVP: w tx + tw x + tb, the ``w tx`` term as a bias-free product (1-D inputs
    keep ``linear`` with a zero bias); against the formula, with only ``tx`` and with all three
    tangents, for a vector, a batch and two batch axes."""
    rng = np.random.default_rng(len(lead))
    w, b = rng.standard_normal((4, 3)), rng.standard_normal(4)
    x = rng.standard_normal(lead + (3,))
    tw, tb, tx = rng.standard_normal((4, 3)), rng.standard_normal(4), rng.standard_normal(x.shape)

    def f(w_: object, b_: object, x_: object) -> object:
        return F.linear(w_, b_, x_)

    out, t = tl.jvp(f, (w, b, x), (np.zeros_like(w), np.zeros_like(b), tx))
    np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-12)
    np.testing.assert_allclose(t, tx @ w.T, rtol=1e-12, atol=1e-12)
    _, t = tl.jvp(f, (w, b, x), (tw, tb, tx))
    np.testing.assert_allclose(t, tx @ w.T + x @ tw.T + tb, rtol=1e-12, atol=1e-12)
    got = REGISTRY["linear"].jvp(ARRAY_OPS, (None, None, tx), (w, b, x), None)
    assert got.shape == lead + (4,)
    np.testing.assert_allclose(got, tx @ w.T, rtol=1e-12, atol=1e-12)


def test_hvp_computes_only_the_values_its_rules_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreted hvp (``tl.hvp``, a compiled graph's first call) computes a forward value
    only when a tangent rule hands it to a kernel: W4's gradient graph never computes the
    gradients' own values (g^T x per weight), only their tangents; the result has the full
    pass's bits."""
    from torchlean.bench import harness as H
    from torchlean.engine import graph as graph_mod

    data = H.make_data("W4")
    loss, (x, y) = H._tl_loss("W4", data), H._tl_inputs("W4", data)
    params, vs = data["params"], data["v"]
    c = tl.compile(loss, *[p.shape for p in params], x.shape, y.shape,
                   wrt=tuple(range(len(params))))
    gg = c._hvp_graph()
    arrays = gg.check_inputs("hvp", c._full([*params, x, y]))
    tangents = gg.check_inputs("hvp", [*vs, None, None], allow_none=True)
    made: list[object] = []
    real = graph_mod._LazyValues

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(graph_mod, "_LazyValues", Spy)
    got = gg.lazy_tangents(arrays, tangents)
    assert got is not None
    values = gg.evaluate(arrays)
    full = gg.tangents(values, tangents)
    for t, i in zip(got, gg.outputs, strict=True):
        want = np.zeros_like(values[i]) if full[i] is None else full[i]
        assert t.dtype == want.dtype and t.tobytes() == want.tobytes()
    (lazy,) = made
    skipped = [n for i, n in enumerate(gg.nodes) if lazy.vals[i] is graph_mod._MISSING]
    big = [n for n in skipped if n.op is not None and n.op.name == "matmul"
           and min(n.shape) >= 128]
    assert len(big) == 3  # dW1 = g1^T x, dW2 = g2^T h1 and g1 = g2 W2 are never computed
    c.codegen = False
    interpreted = c.hvp([*params, x, y], [*vs, None, None])
    assert all(a.tobytes() == b.tobytes() for a, b in zip(interpreted, got, strict=True))


def test_hvp_falls_back_to_the_full_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tangent rule that reads a value's contents outside the Ops interpreter (here a Python
    operator on an input not computed yet) makes the lazy pass give up: the full pass runs,
    same answer."""
    from torchlean.engine.graph import Graph

    prim = register(Primitive(
        "test_cube_operator_jvp", ("x",), lambda s: s, lambda x: x ** 3,
        vjp=lambda ops, g, xs, out: (ops.mul(g, ops.scale(ops.square(xs[0]), c=3.0)),),
        jvp=lambda ops, ts, xs, out: ops.mul(ts[0], 3.0 * xs[0] * xs[0]),
        semantics="x^3 whose JVP multiplies arrays with operators (test fixture).",
        samples=lambda rng: [Sample((rng.standard_normal(3),))],
    ))
    lazy = Graph.lazy_tangents
    gave_up: list[bool] = []

    def spy(self: Graph, *args: object, **kwargs: object) -> object:
        got = lazy(self, *args, **kwargs)  # type: ignore[arg-type]
        gave_up.append(got is None)
        return got

    monkeypatch.setattr(Graph, "lazy_tangents", spy)
    try:
        def f(x: object) -> object:  # sum(x^6): H v = 30 x^4 v
            return F.sum(F.apply(prim, F.mul(x, x)))

        x, v = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0])
        (hv,) = tl.hvp(f, (x,), (v,))
        np.testing.assert_allclose(hv, 30 * x ** 4 * v, rtol=1e-12)
        assert gave_up == [True]
        gave_up.clear()
        (hv,) = tl.hvp(lambda x: F.sum(F.mul(F.mul(x, x), F.mul(x, x))), (x,), (v,))
        np.testing.assert_allclose(hv, 12 * x ** 2 * v, rtol=1e-12)
        assert gave_up == [False]  # (rules on the Ops interpreter only: the lazy pass ran)
    finally:
        del REGISTRY["test_cube_operator_jvp"]
