"""The per-op fast paths of ``tl.Tensor`` (operators and unary methods recording their primitive
directly, and the reverse plan built straight from the tensors) give torch's values, gradients
and dtypes, and the same plan as the generic builder (issue 24). No timing here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.core.autodiff import reverse_plan
from torchlean.core.node import Node
from torchlean.engine import tensor as T


def _chain(x, y, relu, tanh, sin, exp):
    h = x
    for i in range(6):
        h = tanh((h + y) * y)
        h = relu(h) if i % 2 else tanh(h)
        h = sin(h - 0.5) * 2 + 1 - y / 3.0
        h = 0.5 - h * exp(h * 0.1) + 2 * h
        h = h / (y + 3.0) + (1.5 + h) * (-h)
    return h.sum()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_operator_chain_matches_torch(dtype):
    rng = np.random.default_rng(0)
    xa, ya = rng.standard_normal(16).astype(dtype), rng.standard_normal(16).astype(dtype)
    x, y = tl.tensor(xa, requires_grad=True), tl.tensor(ya, requires_grad=True)
    out = _chain(x, y, lambda t: t.relu(), lambda t: t.tanh(), lambda t: t.sin(),
                 lambda t: t.exp())
    tx, ty = torch.tensor(xa, requires_grad=True), torch.tensor(ya, requires_grad=True)
    ref = _chain(tx, ty, torch.relu, torch.tanh, torch.sin, torch.exp)
    assert out.dtype == np.dtype(dtype)
    out.backward()
    ref.backward()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out.item(), ref.item(), rtol=tol)
    for g, r in ((x.grad, tx.grad), (y.grad, ty.grad)):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=tol, atol=tol)


def test_fast_paths_keep_promotion_grad_mode_and_checks():
    x = tl.tensor(np.arange(3, dtype=np.float32), requires_grad=True)
    d = tl.tensor(np.ones(3), requires_grad=True)  # float64: mixed dtypes promote as torch
    assert (x + d).dtype == np.float64 and (x * d).dtype == np.float64
    assert (x + 1).dtype == np.float32 and (2.5 * x).dtype == np.float32
    i = tl.tensor(np.arange(3))  # int64 + float tensor -> float32, as torch
    assert (x + i).dtype == np.float32
    with tl.no_grad():
        assert not (x * x).requires_grad and not x.tanh().requires_grad
        assert not (x + 1.0).requires_grad
    assert (x * x).requires_grad and x.tanh().requires_grad and (x - 2).requires_grad
    with pytest.raises(tl.TorchLeanError):
        x + tl.tensor(np.ones(4, np.float32))  # shapes do not broadcast: the shape rule runs
    z = x + float("inf")  # a non-finite scalar takes the general path
    assert np.isinf(z.detach().numpy()).all()


def test_plan_from_tensors_equals_generic_plan():
    x = tl.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    b = tl.tensor(np.ones(3, np.float32), requires_grad=True)
    c = tl.tensor(np.full(3, 2.0, np.float32))  # no grad: not a target
    h = ((x + b) * c).tanh()
    out = (h.relu() * x + 2.0).sum()
    nodes, _ = T._graph_of([out])
    position = {t: k for k, t in enumerate(nodes)}
    views = [Node(t._op, tuple(position[p] for p in t._parents), t._attrs,
                  t.requires_grad, t.shape) for t in nodes]
    fast, generic = T._plan_of(nodes, position), reverse_plan(views)
    assert len(fast) == len(generic) == len(nodes)
    assert sum(step is not None for step in fast) == 7  # add mul tanh relu mul add_scalar sum
    for a, b in zip(fast, generic, strict=True):
        if a is None or b is None:
            assert a is b
            continue
        # A broadcasting rule is a fresh closure per step: compare its code, not its identity.
        assert getattr(a[1], "__code__", a[1]) == getattr(b[1], "__code__", b[1])
        assert (a[0], a[2], a[3], a[4]) == (b[0], b[2], b[3], b[4])


def test_skipped_shape_rules_are_the_identity():
    # The hot paths skip these primitives' shape rules (and a binary op's on equal shapes):
    # each rule must give back its input's shape, so skipping it cannot change what is refused.
    for prim in T._IDENTITY_SHAPED:
        attrs = {"c": 2.0} if "c" in prim.attrs else {}
        assert not set(prim.attrs) - {"c"}, prim.name
        for shape in [(), (3,), (2, 5), (1, 4, 3)]:
            assert tuple(prim.infer(shape, **attrs)) == shape, prim.name
    for prim in (T._ADD, T._SUB, T._MUL):
        assert tuple(prim.infer((2, 3), (2, 3))) == (2, 3)
    x = tl.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(tl.TorchLeanError):
        x * tl.tensor(np.ones((3, 2), np.float32))  # unequal shapes: the rule runs and refuses


@pytest.mark.parametrize("name", ["tanh", "relu", "sigmoid", "exp"])
def test_hot_unary_methods_name_a_wrong_call(name):
    x = tl.tensor(np.ones(3, np.float32), requires_grad=True)
    for args, kwargs in [((1,), {}), ((), {"dim": 0})]:
        with pytest.raises(tl.SignatureError, match=f"{name}: takes no arguments"):
            getattr(x, name)(*args, **kwargs)
    assert getattr(x, name)().shape == (3,)


def test_subclasses_keep_the_identity_hash_the_reverse_pass_keys_by():
    class Eq(tl.Tensor):  # __eq__ alone: Python would make it unhashable
        def __eq__(self, other):
            return tl.Tensor.__eq__(self, other)

    x = tl.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    a = Eq(np.array([3.0, 4.0], np.float32)).requires_grad_()
    (x * a + a).sum().backward()
    assert np.array_equal(a.grad.numpy(), np.array([2.0, 3.0], np.float32))
    assert hash(a) == object.__hash__(a)
    with pytest.raises(tl.TorchLeanError, match="cannot redefine __hash__"):
        class ByValue(tl.Tensor):
            def __hash__(self):
                return 0
