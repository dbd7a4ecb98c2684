"""F: derived ops against PyTorch, operators on refs, and plain-array evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.registry import REGISTRY


def _grad_pair(fn, tfn, *xs):  # type: ignore[no-untyped-def]
    """Value and gradients from torchlean and from torch for scalar functions."""
    value, grads = tl.value_and_grad(fn, argnums=tuple(range(len(xs))))(*xs)
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    out = tfn(*ts)
    out.backward()
    return (value, grads), (out.detach().numpy(), [t.grad.numpy() for t in ts])


@pytest.mark.parametrize("ours,theirs", [
    (F.silu, torch.nn.functional.silu),
    (F.gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
])
def test_activations_match_torch(ours, theirs) -> None:  # type: ignore[no-untyped-def]
    x = np.linspace(-4, 4, 17)
    (v, g), (tv, tg) = _grad_pair(lambda a: F.sum(ours(a) * a), lambda a: (theirs(a) * a).sum(), x)
    np.testing.assert_allclose(v, tv, rtol=1e-12)
    np.testing.assert_allclose(g[0], tg[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours(x), theirs(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 4, 5)])
def test_global_avg_pool2d(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal(shape)
    out = F.global_avg_pool2d(x)
    np.testing.assert_allclose(out, x.mean(axis=(-2, -1)), rtol=1e-12)
    g = tl.grad(lambda a: F.sum(F.square(F.global_avg_pool2d(a))))(x)
    t = torch.tensor(x, requires_grad=True)
    t.mean(dim=(-2, -1)).square().sum().backward()
    np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-12)
    with pytest.raises(tl.ShapeError, match="global_avg_pool2d"):
        F.global_avg_pool2d(np.ones((3, 4)))


def test_cross_entropy_and_nll_match_torch() -> None:
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((6, 4))
    labels = rng.integers(0, 4, size=6)
    (v, g), (tv, tg) = _grad_pair(
        lambda z: F.cross_entropy(z, labels),
        lambda z: torch.nn.functional.cross_entropy(z, torch.tensor(labels)), logits)
    np.testing.assert_allclose(v, tv, rtol=1e-12)
    np.testing.assert_allclose(g[0], tg[0], rtol=1e-10, atol=1e-14)
    # Float class indices (how labels travel through compiled graphs) give the same loss.
    v2, g2 = tl.value_and_grad(lambda z, y: F.cross_entropy(z, y), argnums=(0, 1))(
        logits, labels.astype(np.float64))
    assert v2 == v
    np.testing.assert_array_equal(g2[0], g[0])
    np.testing.assert_array_equal(g2[1], np.zeros(6))  # labels receive nothing
    logp = np.log(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))
    nll = F.nll(logp, labels)
    tn = torch.nn.functional.nll_loss(torch.tensor(logp), torch.tensor(labels))
    np.testing.assert_allclose(nll, tn.numpy(), rtol=1e-12)
    with pytest.raises(tl.ShapeError, match="labels shape"):
        F.cross_entropy(logits, labels[:3])
    with pytest.raises(tl.ShapeError, match=r"\[0, 4\)"):
        F.cross_entropy(logits, labels + 4)


def test_operators_record_the_expected_primitives() -> None:
    def fn(x: object, y: object) -> object:
        return F.sum(((x + 1.0) * 2.0 - y) / y + 1.0 / x - (-x) ** 2 + 3.0 - x)

    c = tl.compile(fn, (3,), (3,), dtype="float64")
    ops = {n.op.name for n in c.graph.nodes if n.op is not None}
    assert {"add_scalar", "scale", "sub", "mul", "inv", "square", "sum"} <= ops
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    expected = np.sum(((x + 1.0) * 2.0 - y) / y + 1.0 / x - (-x) ** 2 + 3.0 - x)
    assert c.forward(x, y) == pytest.approx(expected, rel=1e-12)


def test_indexing_and_matmul_shapes() -> None:
    s = tl.Session(tl.Options(dtype="float64"))
    m = s.input(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(s.value(m[1]), [4.0, 5.0, 6.0, 7.0])
    np.testing.assert_array_equal(s.value(m[-1]), [8.0, 9.0, 10.0, 11.0])
    np.testing.assert_array_equal(s.value(m[1:3]), np.arange(4.0, 12.0).reshape(2, 4))
    np.testing.assert_array_equal(s.value(m[0][2]), 2.0)
    np.testing.assert_array_equal(s.value(m.T), np.arange(12.0).reshape(3, 4).T)
    b = s.input(np.ones((2, 3, 4)))
    w = s.input(np.ones((4, 5)))
    assert (b @ w).shape == (2, 3, 5)
    with pytest.raises(tl.ShapeError, match=r"inner dimensions differ: \(2, 3, 4\) @ \(5, 5\)"):
        b @ s.input(np.ones((5, 5)))
    # Integer exponents are repeated products (square-and-multiply); others are refused.
    np.testing.assert_allclose(s.value(m ** 3), np.arange(12.0).reshape(3, 4) ** 3)
    np.testing.assert_allclose(s.value(m ** -2)[1:], np.arange(4.0, 12.0).reshape(2, 4) ** -2.0)
    with pytest.raises(tl.ShapeError, match="only integer exponents and 0.5"):
        m ** 1.5


def test_plain_arrays_are_computed_directly() -> None:
    np.testing.assert_array_equal(F.relu(np.array([-1.0, 2.0])), [0.0, 2.0])
    with pytest.raises(tl.ShapeError, match="reshape"):
        F.reshape(np.ones(3), shape=(2, 2))


def test_every_primitive_with_inputs_has_a_generated_F_function_that_records_it() -> None:
    # Generated at import (so dir(F) and `from torchlean.functional import relu` list them),
    # documented with the primitive's semantics, and recording exactly that primitive with the
    # sample's attributes: a wrong or missing generated function fails here.
    rng = np.random.default_rng(0)
    for name, prim in REGISTRY.items():
        if not prim.inputs:
            assert name not in vars(F), f"{name} needs an owner to draw from (see Session)"
            continue
        function = vars(F).get(name)
        assert callable(function) and function.__name__ == name, name
        assert prim.semantics in (function.__doc__ or ""), name
        sample = prim.samples(rng)[0]
        s = tl.Session(tl.Options(dtype="float64"))
        refs = [s.input(x, requires_grad=False) for x in sample.inputs]
        out = function(*refs, **sample.attrs)
        node = s.tape.node(out.id)
        assert node.op is prim and node.parents == tuple(r.id for r in refs), name
        for key, value in sample.attrs.items():
            assert repr(node.attrs[key]) == repr(value), (name, key)
        np.testing.assert_array_equal(s.value(out), prim.forward(*sample.inputs, **sample.attrs),
                                      err_msg=name)


def test_plain_arrays_check_dtypes_as_the_tape_does() -> None:
    a32, a64 = np.ones(3, np.float32), np.ones(3)
    tape = tl.Tape()
    with pytest.raises(tl.ShapeError, match="add: dtypes differ"):
        tape.add(tape.leaf(a32), tape.leaf(a64))
    with pytest.raises(tl.ShapeError, match="add: dtypes differ"):
        F.add(a32, a64)
    # Untyped data (Python numbers, lists, integer arrays) takes the typed operand's dtype.
    assert F.add(a32, [1, 2, 3]).dtype == np.float32
    assert F.mul(np.arange(3), a32).dtype == np.float32
    assert F.relu(np.arange(3)).dtype == np.float64
    with pytest.raises(tl.ShapeError, match="relu: expected numeric data"):
        F.relu(np.array(["a"]))
