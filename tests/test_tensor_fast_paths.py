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


# --- indexing, cat and stack on float host tensors (lean paths of recurrent loops) ------------

def _general_index(x, index):
    """``x[index]`` through the generic ``Ref`` indexing the lean path stands in for."""
    return T.Ref.__getitem__(x, index)


@pytest.mark.parametrize("shape", [(5,), (5, 3), (5, 3, 2), (5, 1, 2, 2)])
@pytest.mark.parametrize("index", [0, 3, -1, -5, slice(1, 4), slice(None), slice(3, 1),
                                   slice(-2, None), slice(None, None, 1)])
def test_lean_indexing_records_what_the_general_path_records(shape, index):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape).astype(np.float32)
    leaf = tl.tensor(a, requires_grad=True)
    x = leaf * 1.0
    lean, general = x[index], _general_index(x, index)
    assert lean.shape == general.shape
    np.testing.assert_array_equal(lean.detach().numpy(), general.detach().numpy())
    chain = []
    for t in (lean, general):
        ops = []
        while t._op is not None and t is not x:
            ops.append((t._op.name, dict(t._attrs)))
            t = t._parents[0]
        chain.append(ops)
    assert chain[0] == chain[1]
    # values, gradients and aliasing as torch's
    tx = torch.tensor(a, requires_grad=True)
    ty = tx * 1.0
    w = rng.standard_normal(lean.shape).astype(np.float32)
    (lean * tl.tensor(w)).sum().backward()
    (ty[index] * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), tx.grad.numpy())


def test_lean_indexing_is_a_view_and_checks_its_range():
    x = tl.tensor(np.zeros((4, 3), np.float32), requires_grad=True) * 1.0
    row = x[2]
    with tl.no_grad():
        row.fill_(5.0)  # a view: the write reaches the base, as in torch
    assert x.detach().numpy()[2].tolist() == [5.0, 5.0, 5.0]
    for bad in (4, -5):
        with pytest.raises(tl.TorchLeanError, match="out of bounds"):
            x[bad]


def _depth(t, leaves):
    if t in leaves or t._op is None:
        return 0
    return 1 + max(_depth(p, leaves) for p in t._parents)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("op", ["cat", "stack"])
def test_lean_cat_and_stack_match_torch_and_form_a_balanced_tree(n, op):
    rng = np.random.default_rng(n)
    arrays = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(n)]
    xs = [tl.tensor(a, requires_grad=k % 3 != 1) for k, a in enumerate(arrays)]
    ts = [torch.tensor(a, requires_grad=k % 3 != 1) for k, a in enumerate(arrays)]
    out, ref = getattr(tl, op)(xs), getattr(torch, op)(ts)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    # a balanced tree of concatenations (a chain would be n - 1 deep: quadratic copying)
    assert _depth(out, set(xs)) <= int(np.ceil(np.log2(n))) + (op == "stack")
    w = rng.standard_normal(out.shape).astype(np.float32)
    (out * tl.tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts, strict=True):
        assert (x.grad is None) == (t.grad is None)
        if t.grad is not None:
            np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())
    with tl.no_grad():
        plain = getattr(tl, op)(xs)
    assert not plain.requires_grad and plain._op is None
    np.testing.assert_array_equal(plain.numpy(), ref.detach().numpy())


def test_lean_cat_and_stack_leave_other_calls_to_the_general_path():
    a = tl.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    b = tl.tensor(np.ones((2, 3)))  # float64: the general path's dtype check names it
    for op in (tl.cat, tl.stack):
        with pytest.raises(tl.TorchLeanError, match="dtypes differ"):
            op([a, b])
    with pytest.raises(tl.TorchLeanError, match="differs"):
        tl.cat([a, tl.tensor(np.ones((2, 4), np.float32))])
    with pytest.raises(tl.TorchLeanError, match="expected"):
        tl.stack([a, tl.tensor(np.ones((3, 3), np.float32))])
    with pytest.raises(tl.TorchLeanError, match="zero-dimensional"):
        tl.cat([tl.tensor(1.0), tl.tensor(2.0)])
    s = tl.stack([tl.tensor(1.0, requires_grad=True), tl.tensor(2.0)])  # scalars
    assert s.shape == (2,) and s.requires_grad
    empty = tl.tensor(np.zeros(0, np.float32))  # torch's legacy rule: a 1-d empty one joins
    assert tl.cat([a, empty]).shape == (2, 3)
    assert tl.stack([a, a], dim=1).shape == (2, 2, 3)


def _records(t, stop):
    ops = []
    while t._op is not None and t is not stop:
        ops.append((t._op.name, dict(t._attrs)))
        t = t._parents[0]
    return ops


@pytest.mark.parametrize("shape", [(4,), (4, 3), (2, 3, 5)])
@pytest.mark.parametrize("dim", [0, -1, 1, 2, -3, None])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "mean", "var"])
def test_lean_reductions_record_what_the_general_path_records(shape, dim, keepdim, op):
    if dim is not None and not -len(shape) <= dim < len(shape):
        with pytest.raises(tl.TorchLeanError):
            getattr(tl.tensor(np.ones(shape, np.float32), requires_grad=True), op)(dim)
        return
    rng = np.random.default_rng(2)
    a = rng.standard_normal(shape).astype(np.float32)
    leaf = tl.tensor(a, requires_grad=True)
    x = leaf * 1.0
    out = getattr(x, op)(dim, keepdim=keepdim)
    if op != "var":
        general = getattr(T.Ref, op)(x, dim, keepdim)
        assert _records(out, x) == _records(general, x)
        np.testing.assert_array_equal(out.detach().numpy(), general.detach().numpy())
    tx = torch.tensor(a, requires_grad=True)
    ref = getattr(tx * 1.0, op)(dim, keepdim=keepdim)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = rng.standard_normal(out.shape).astype(np.float32)
    (out * tl.tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    with tl.no_grad():
        plain = getattr(x, op)(dim, keepdim=keepdim)
    assert not plain.requires_grad
    np.testing.assert_allclose(plain.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["max", "min", "amax", "amin"])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_extrema_without_history_are_one_reduction_with_the_general_values(op, dim, keepdim):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (5, 4)).astype(np.float32)  # ties
    a[2, 1] = np.nan if op in ("max", "amin") else a[2, 1]  # NaN propagates, as torch's
    x, tx = tl.tensor(a), torch.tensor(a)
    if op in ("amax", "amin") and dim is None:
        out, ref = getattr(x, op)(), getattr(tx, op)()
    elif dim is None:
        out, ref = getattr(x, op)(), getattr(tx, op)()
    else:
        out, ref = getattr(x, op)(dim, keepdim=keepdim), getattr(tx, op)(dim, keepdim=keepdim)
    if isinstance(ref, tuple):  # (values, indices)
        np.testing.assert_array_equal(out[0].numpy(), ref[0].numpy())
        np.testing.assert_array_equal(out[1].numpy(), ref[1].numpy())
        out = out[0]
    else:
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert out._op is None and not out.requires_grad
    general = getattr(T.Ref, op)(x, dim, keepdim) if dim is not None else getattr(T.Ref, op)(x)
    general = general[0] if isinstance(general, tuple) else general
    np.testing.assert_array_equal(out.numpy(), general.numpy())


@pytest.mark.parametrize("op", ["max", "min"])
def test_extrema_of_every_entry_with_history_split_ties_as_torch(op):
    a = np.array([[1.0, 3.0, 3.0], [3.0, 0.0, 0.0]], np.float32)  # three maxima, two minima
    for values in (a, np.where(a == 1.0, np.nan, a).astype(np.float32)):
        x, tx = tl.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
        out, ref = getattr(x * 2.0, op)(), getattr(tx * 2.0, op)()
        assert out._op is not None and out.shape == ()
        np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
        (out * out).backward()
        (ref * ref).backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    x = tl.tensor(a, requires_grad=True)
    (g,) = tl.autograd.grad(getattr(x, op)(), x, create_graph=True)  # recorded again
    np.testing.assert_allclose(g.detach().numpy().sum(), 1.0, rtol=1e-6)
    assert x.max(1).values._op is not None  # one axis: the general path's tree


def test_extrema_keep_the_general_checks():
    a = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], np.float32)
    x = tl.tensor(a, requires_grad=True)
    with tl.no_grad():
        assert x.max()._op is None and x.max().item() == 3.0
    with pytest.raises(tl.TorchLeanError):
        tl.tensor(np.zeros((0, 3), np.float32)).max()
    with pytest.raises(tl.TorchLeanError):
        tl.tensor(a).max(2)
    assert tl.tensor(np.arange(6).reshape(2, 3)).max().item() == 5  # integers: general path


# --- integer indexing, indexed writes and in-place updates that record nothing ---------------


def test_integer_indexing_without_history_is_the_general_paths_view_or_copy():
    """``x[k, j]`` / ``x[ix]`` (Python ints, 0-d index tensors) on a tensor without a history:
    the same value, dtype, view-or-copy and storage link as the general path (reached here
    through NumPy integers, which the lean path leaves to it)."""
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for index in [(1,), (1, 2), (-1, 0, 3), (0, -2)]:
        lean_t, general_t = tl.tensor(base.copy()), tl.tensor(base.copy())
        lean = lean_t[tuple(tl.tensor(i) if k == 0 else i for k, i in enumerate(index))]
        general = general_t[tuple(np.int64(i) for i in index)]
        assert lean.shape == general.shape and lean.dtype == general.dtype
        np.testing.assert_array_equal(lean.numpy(), general.numpy())
        np.testing.assert_array_equal(lean.numpy(), torch.tensor(base)[index].numpy())
        assert (lean._base is lean_t) == (general._base is general_t)
        assert (np.shares_memory(lean.numpy(), lean_t.numpy())
                == np.shares_memory(general.numpy(), general_t.numpy()))
    with pytest.raises(tl.TorchLeanError, match="out of bounds"):
        tl.tensor(base)[2]
    with pytest.raises(tl.TorchLeanError, match="too many indices"):
        tl.tensor(base)[0, 0, 0, 0]
    ints = tl.tensor(np.arange(6).reshape(2, 3))
    assert ints[1, 2].item() == 5 and ints[1, 2].dtype == np.int64


def test_indexed_writes_and_updates_without_history_match_torch_and_bump_versions():
    """The embedding-gradient loop of Karpathy's backprop lecture (``dC[ix] += demb[k, j]``)
    gives torch's values; each lean write bumps the version once, as the general one."""
    rng = np.random.default_rng(0)
    demb_a, ids = rng.standard_normal((5, 3, 4)).astype(np.float32), rng.integers(0, 6, (5, 3))

    def loop(m):
        dc, demb, xb = m.zeros(6, 4), m.tensor(demb_a), m.tensor(ids)
        for k in range(5):
            for j in range(3):
                ix = xb[k, j]
                dc[ix] += demb[k, j]
        dc[0] = 0.5
        dc[1, 2] = demb[0, 0, 1]
        return dc

    with tl.no_grad():
        np.testing.assert_allclose(loop(tl).numpy(), loop(torch).numpy(), rtol=1e-6)
    np.testing.assert_allclose(loop(tl).numpy(), loop(torch).numpy(), rtol=1e-6)
    lean, general = tl.zeros(3, 2), tl.zeros(3, 2)
    lean[1] = tl.ones(2)
    general[np.int64(1)] = tl.ones(2)
    lean.add_(tl.ones(2))
    general.add_(tl.full((2,), 0.5), alpha=2)  # (alpha != 1: the general path)
    assert lean._version == general._version == 2
    np.testing.assert_allclose(lean.numpy(), general.numpy())


def test_lean_writes_keep_the_general_refusals_and_recordings():
    leaf = tl.ones(3, requires_grad=True)
    with pytest.raises(tl.TorchLeanError, match="leaf Variable"):
        leaf[0] = 2.0
    with pytest.raises(tl.TorchLeanError, match="leaf Variable"):
        leaf.add_(tl.ones(3))
    with tl.no_grad():
        leaf[0] = 2.0  # torch allows both under no_grad
        leaf.mul_(tl.full((3,), 3.0))
    np.testing.assert_array_equal(leaf.detach().numpy(), [6.0, 3.0, 3.0])
    with pytest.raises(tl.TorchLeanError, match="shape mismatch"):
        tl.zeros(2, 3)[0] = tl.ones(2)
    with pytest.raises(tl.TorchLeanError):
        tl.zeros(2, 3).add_(tl.ones(2, 3, 1))  # the result would not keep self's shape
    # a value with a history makes the write a recorded one: its gradient reaches the value
    v = tl.tensor([1.0, 2.0], requires_grad=True)
    tv = torch.tensor([1.0, 2.0], requires_grad=True)
    out, ref = tl.zeros(3, 2), torch.zeros(3, 2)
    out[1] = v * 3
    ref[1] = tv * 3
    acc, tacc = tl.zeros(2), torch.zeros(2)
    acc += v
    tacc += tv
    ((out * out).sum() + (acc * acc).sum()).backward()
    ((ref * ref).sum() + (tacc * tacc).sum()).backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy())
    assert out.grad_fn is not None and acc.grad_fn is not None


@pytest.mark.parametrize("dim,keepdim,unbiased", [(None, False, True), (None, True, False),
                                                   (0, False, True), (-1, True, True),
                                                   (1, False, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_var_and_std_without_history_equal_the_recorded_path(dim, keepdim, unbiased, dtype):
    """Without a history, var/std run the recorded path's forwards on the arrays: bitwise its
    values (the same tensor with a history takes the general path), and torch's."""
    a = np.random.default_rng(3).standard_normal((4, 5, 3)).astype(dtype) * 3 + 1
    plain = tl.tensor(a)
    general = tl.tensor(a, requires_grad=True)
    for op in ("var", "std"):
        got = getattr(plain, op)(dim, unbiased, keepdim)
        want = getattr(general, op)(dim, unbiased, keepdim)
        assert not got.requires_grad and want.grad_fn is not None
        assert got.shape == want.shape and got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
        ref = getattr(torch.tensor(a), op)(dim, unbiased=unbiased, keepdim=keepdim)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5)
    with tl.no_grad():
        np.testing.assert_array_equal(general.std(dim, unbiased, keepdim).numpy(),
                                      plain.std(dim, unbiased, keepdim).numpy())
    one = tl.tensor(a[:1, :1, :1])
    assert np.isnan(one.var().item())  # n - ddof = 0: the general path's nan
    with pytest.raises(tl.TorchLeanError):
        plain.var(3)


def _graph(t, leaf):
    """Every record from ``t`` back to ``leaf``: (primitive, attributes, parents' records)."""
    if t is leaf or t._op is None:
        return "leaf" if t is leaf else "constant"
    return (t._op.name, dict(t._attrs), tuple(_graph(p, leaf) for p in t._parents))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_int_powers_record_what_the_general_path_records(n, dtype):
    """``x ** n`` (Python int n > 1): the general path's square-and-multiply records (reached
    here with a NumPy integer exponent), its values bitwise, torch's values and gradients."""
    a = np.random.default_rng(4).standard_normal((3, 4)).astype(dtype)
    leaf = tl.tensor(a, requires_grad=True)
    x = leaf * 1.0
    lean, general = x ** n, x ** np.int64(n)
    assert _graph(lean, x) == _graph(general, x)
    assert lean.dtype == general.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(lean.detach().numpy(), general.detach().numpy())
    tx = torch.tensor(a, requires_grad=True)
    ref = (tx * 1.0) ** n
    np.testing.assert_allclose(lean.detach().numpy(), ref.detach().numpy(), rtol=1e-6)
    (lean * lean).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    with tl.no_grad():
        assert not (x ** n).requires_grad
    assert (tl.tensor([2, 3]) ** 2).dtype == np.int64  # integer tensors: the general path
    assert (x ** 0).detach().numpy().tolist() == np.ones((3, 4)).tolist()
