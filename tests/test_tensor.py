"""tl.Tensor: define-by-run autograd on the one reverse driver, against PyTorch.

Forward values and gradients of Tensor programs are compared with the same programs run in
PyTorch (float64), on hypothesis-drawn shapes with broadcasting and indexing; second order goes
through ``tl.autograd.grad(create_graph=True)``. The PyTorch conventions are tested as
behaviour: leaf ``.grad`` accumulation, freed graphs, ``no_grad``, parameter gradients, and the
stale-session error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean as tl
import torchlean.engine.ops_interface as F


def _pair(*arrays: np.ndarray) -> tuple[list[tl.Tensor], list[torch.Tensor]]:
    ours = [tl.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    return ours, theirs


def _check(program: Callable[..., Any], *arrays: np.ndarray, atol: float = 1e-10) -> None:
    """``program`` (written once, with methods both libraries share) on tensors of both:
    same value, same gradient of sum(out * weights) for every input."""
    ours, theirs = _pair(*arrays)
    out, ref = program(*ours), program(*theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol, rtol=1e-10)
    weights = np.random.default_rng(1).standard_normal(ref.shape)
    (out * tl.tensor(weights)).sum().backward()
    (ref * torch.tensor(weights)).sum().backward()
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.grad is not None, f"input {k} got no gradient"
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=1e-10,
                                   err_msg=f"input {k}")


def _shape(draw: Any, lo: int = 1, hi: int = 3, min_dims: int = 1, max_dims: int = 3
           ) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(lo, hi), min_size=min_dims, max_size=max_dims)))


@st.composite
def broadcast_pair(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    shape = _shape(draw, max_dims=3)
    # The second operand drops leading axes and sets some axes to 1: NumPy / torch broadcasting.
    keep = draw(st.integers(0, len(shape)))
    other = tuple(1 if draw(st.booleans()) else d for d in shape[len(shape) - keep:])
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), rng.standard_normal(other)


@settings(max_examples=25, deadline=None)
@given(broadcast_pair())
def test_arithmetic_with_broadcasting_and_scalars(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    b = np.where(np.abs(b) < 0.2, 0.5, b)  # keep division away from 0
    _check(lambda x, y: (x * y + 2.0 - y / x.abs().clamp(0.3) * 3.0) ** 2 - (-x), a, b)
    _check(lambda x, y: (x - y).tanh() * y.sigmoid() + (x * 0.5).exp(), a, b)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_reductions_softmax_and_layout(data: Any) -> None:
    shape = _shape(data.draw, min_dims=2, max_dims=4)
    x = np.random.default_rng(data.draw(st.integers(0, 2**16))).standard_normal(shape)
    n = len(shape)
    dim = data.draw(st.integers(-n, n - 1))
    keep = data.draw(st.booleans())
    _check(lambda t: t.sum(dim=dim, keepdim=keep), x)
    _check(lambda t: t.mean(dim=(0, dim % n) if dim % n else 0, keepdim=keep), x)
    _check(lambda t: t.softmax(dim=dim) * t, x)
    _check(lambda t: t.log_softmax(dim), x)
    _check(lambda t: t.amax(dim=dim, keepdim=keep) + t.amin(dim=dim, keepdim=keep), x)
    perm = tuple(data.draw(st.permutations(range(n))))
    _check(lambda t: t.permute(*perm).reshape(-1, shape[perm[-1]]), x)
    _check(lambda t: t.transpose(0, -1).flatten(1).unsqueeze(1).squeeze(1), x)
    _check(lambda t: t.view(shape[0], -1).t(), x)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_indexing(data: Any) -> None:
    shape = _shape(data.draw, lo=2, hi=4, min_dims=2, max_dims=3)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal(shape)
    rows = rng.integers(0, shape[0], size=data.draw(st.integers(1, 5)))
    step = data.draw(st.integers(1, 2))
    _check(lambda t: t[1:, ::step], x)
    _check(lambda t: t[..., -1], x)
    _check(lambda t: t[None, 0], x)
    _check(lambda t: t[rows.tolist()], x)  # repeated rows accumulate their gradients
    ours, theirs = _pair(x)
    mask = x > 0
    np.testing.assert_array_equal(ours[0][tl.tensor(mask)].detach().numpy(),
                                  theirs[0][torch.tensor(mask)].detach().numpy())
    ours[0][ours[0] > 0].sum().backward()
    theirs[0][theirs[0] > 0].sum().backward()
    np.testing.assert_array_equal(ours[0].grad.numpy(), theirs[0].grad.numpy())


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_matmul_with_batch_broadcasting(data: Any) -> None:
    m, k, p = (data.draw(st.integers(1, 3)) for _ in range(3))
    batch_a = _shape(data.draw, min_dims=0, max_dims=2)
    batch_b = tuple(1 if data.draw(st.booleans()) else d for d in batch_a)[
        data.draw(st.integers(0, len(batch_a))):]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a, b = rng.standard_normal(batch_a + (m, k)), rng.standard_normal(batch_b + (k, p))
    v = rng.standard_normal(k)
    _check(lambda x, y: x @ y, a, b)
    _check(lambda u, y: u @ y, v, b)  # a vector on the left
    _check(lambda x, u: x @ u, a, v)  # a vector on the right


def test_cat_stack_and_max_with_indices() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    _check(lambda x, y: tl.cat([x, y, x], dim=1) if isinstance(x, tl.Tensor)
           else torch.cat([x, y, x], dim=1), a, b)
    _check(lambda x, y: tl.stack([x, y * 2], dim=1) if isinstance(x, tl.Tensor)
           else torch.stack([x, y * 2], dim=1), a, a)
    x = tl.tensor(a)
    values, indices = x.max(dim=1)
    np.testing.assert_array_equal(values.numpy(), a.max(axis=1))
    np.testing.assert_array_equal(indices.numpy(), a.argmax(axis=1))
    assert x.argmax().item() == int(a.argmax()) and x.max().item() == a.max()
    with pytest.raises(tl.ShapeError, match="cat: tensor 1 has shape"):
        tl.cat([x, tl.tensor(rng.standard_normal((3, 3)))], dim=1)


def test_second_order_through_autograd_grad_matches_torch() -> None:
    rng = np.random.default_rng(3)
    w0, x0 = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))

    def loss(w: Any, x: Any) -> Any:
        return ((x @ w).tanh() ** 2).sum() + (w * w).sum() * 0.1

    (w,), (wt,) = _pair(w0)[0], _pair(w0)[1]
    x, xt = tl.tensor(x0), torch.tensor(x0)
    (g,) = tl.autograd.grad(loss(w, x), [w], create_graph=True)
    (gt,) = torch.autograd.grad(loss(wt, xt), [wt], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), gt.detach().numpy(), rtol=1e-12)
    v = rng.standard_normal(w0.shape)
    (hv,) = tl.autograd.grad((g * tl.tensor(v)).sum(), [w])
    (hvt,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), [wt])
    np.testing.assert_allclose(hv.numpy(), hvt.numpy(), rtol=1e-10, atol=1e-12)
    # backward(create_graph=True) leaves a differentiable .grad, as in torch.
    loss(w, x).backward(create_graph=True)
    assert w.grad is not None and w.grad.requires_grad


def test_pytorch_conventions() -> None:
    x = tl.tensor([1.0, -2.0, 3.0], requires_grad=True)
    assert x.dtype == tl.float32 and x.is_leaf and x.grad is None
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()  # accumulates: 2 * (2x)
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, -8.0, 12.0])
    with pytest.raises(tl.TapeError, match="a second time"):
        y.backward()
    with tl.no_grad():
        z = x * 2
    assert not z.requires_grad and z.grad_fn is None
    with pytest.raises(tl.TorchLeanError, match="none of the outputs requires grad"):
        z.sum().backward()
    with pytest.raises(tl.ShapeError, match="only for scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(gradient=tl.ones(3))
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, -6.0, 14.0])  # 2 more, accumulated
    with pytest.raises(tl.TorchLeanError, match="detach"):
        x.numpy()
    labels = tl.tensor([0, 2])
    assert labels.dtype == tl.int64
    with pytest.raises(tl.TorchLeanError, match="only float tensors"):
        tl.tensor([1, 2], requires_grad=True)
    # Integer data computes without a history; mixed with floats it takes their dtype.
    assert (labels * 2.0).tolist() == [0.0, 4.0] and not (labels * 2.0).requires_grad
    assert labels[1:].tolist() == [2] and labels.reshape(2, 1).shape == (2, 1)
    mixed = x[:2] * labels
    assert mixed.dtype == tl.float32 and mixed.requires_grad
    t = tl.tensor(np.zeros(2))
    assert t.dtype == tl.float64  # NumPy arrays keep their dtype
    with pytest.raises(tl.TraceError, match="refs from two different"):
        _ = tl.Session().input(np.ones(3)) + x


def test_autograd_grad_of_non_leaf_and_unused_inputs() -> None:
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    y = (h * h).sum()
    gh, gx = tl.autograd.grad(y, [h, x])
    np.testing.assert_allclose(gh.numpy(), [6.0, 12.0])
    np.testing.assert_allclose(gx.numpy(), [18.0, 36.0])
    assert x.grad is None  # autograd.grad touches no .grad
    unused = tl.tensor([1.0], requires_grad=True)
    with pytest.raises(tl.TorchLeanError, match="input 1 was not used"):
        tl.autograd.grad((x * 2).sum(), [x, unused])
    assert tl.autograd.grad((x * 2).sum(), [x, unused], allow_unused=True)[1] is None


def test_factories_and_generators_are_seeded() -> None:
    tl.manual_seed(7)
    a = tl.randn(3, 4)
    tl.manual_seed(7)
    b = tl.randn(3, 4)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    g1, g2 = tl.Generator(3), tl.Generator(3)
    np.testing.assert_array_equal(tl.rand(5, generator=g1).numpy(),
                                  tl.rand(5, generator=g2).numpy())
    big = tl.randn(20000, generator=tl.Generator(1), dtype=tl.float64).numpy()
    assert abs(big.mean()) < 0.05 and abs(big.std() - 1) < 0.05
    assert tl.zeros(2, 3).shape == (2, 3) and tl.ones((2,)).numpy().tolist() == [1.0, 1.0]
    assert tl.arange(5).dtype == tl.int64 and tl.arange(0.0, 1.0, 0.25).shape == (4,)
    assert tl.full((2,), 7.0).numpy().tolist() == [7.0, 7.0]
    with pytest.raises(tl.TorchLeanError, match="generator must be a tl.Generator"):
        tl.randn(2, generator=np.random.default_rng(0))


def test_layers_record_on_tensors_and_fill_param_grads() -> None:
    tl.manual_seed(0)
    model = tl.nn.Sequential(tl.nn.Linear(4, 8), tl.nn.ReLU(), tl.nn.Linear(8, 3))
    x = tl.tensor(np.random.default_rng(0).standard_normal((5, 4)), dtype=tl.float32)
    y = tl.tensor([0, 1, 2, 1, 0])
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    # The same step on a session gives the same parameter gradients bitwise.
    expected = [p.grad.numpy().copy() for p in model.parameters()]
    for p in model.parameters():
        p.zero_grad()
    s = tl.Session()
    s.backward(F.cross_entropy(model(s.input(x.numpy(), requires_grad=False)), y.numpy()))
    for p, g in zip(model.parameters(), expected, strict=True):
        np.testing.assert_array_equal(p.grad, g)
    # An optimiser step after the forward pass makes that graph stale.
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    out = model(x).sum()
    opt.step()
    with pytest.raises(tl.TapeError, match="updated in place"):
        out.backward()


def test_session_reused_after_a_step_is_refused() -> None:
    w = tl.Param(np.ones(3, np.float32), "w")
    opt = tl.optim.Adam([w], lr=0.1)
    s = tl.Session()
    loss = F.sum(s.use(w) * 2.0)
    s.backward(loss)
    opt.step()
    with pytest.raises(tl.StaleSessionError, match="parameter w changed"):
        s.use(w)
    with pytest.raises(tl.StaleSessionError, match="reset"):
        s.backward(loss)
    s.reset()
    ref = s.use(w)
    assert np.shares_memory(s.tape.node(ref.id).value, w.array)  # no per-step parameter copy
    np.testing.assert_allclose(s.value(F.sum(ref)), 3 * (1 - 0.1), rtol=1e-6)
    w.assign(np.zeros(3, np.float32))
    with pytest.raises(tl.StaleSessionError, match="value: parameter w changed"):
        s.value(ref)


def test_tensor_code_compiles_to_the_same_numbers() -> None:
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((4, 3)), rng.standard_normal((6, 4))

    def f(w: Any, x: Any) -> Any:
        h = (x @ w).relu()
        return (h.softmax(dim=-1) * h).sum(dim=1).mean() + h[:, 1:].amax()

    w, x = tl.tensor(w0, requires_grad=True), tl.tensor(x0)
    eager = f(w, x)
    eager.backward()
    c = tl.compile(f, w0.shape, x0.shape, dtype="float64")
    value, (gw, _) = c.value_and_backward(w0, x0)
    np.testing.assert_array_equal(value, eager.detach().numpy())
    np.testing.assert_array_equal(gw, w.grad.numpy())


def test_model_compile_runs_the_graph_and_fills_the_same_grads() -> None:
    tl.manual_seed(0)
    model = tl.nn.Sequential(tl.nn.Linear(4, 8), tl.nn.Tanh(), tl.nn.Linear(8, 3))
    compiled = model.compile()
    x = tl.tensor(np.random.default_rng(0).standard_normal((5, 4)), dtype=tl.float32)
    y = tl.tensor([0, 1, 2, 1, 0])
    F.cross_entropy(compiled(x), y).backward()
    from_graph = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    for p, g in zip(model.parameters(), from_graph, strict=True):
        np.testing.assert_array_equal(p.grad, g)  # same rules, same driver: bitwise
    assert len(compiled._compiled) == 1
    compiled(tl.tensor(np.ones((2, 4), np.float32)))  # a new shape traces a second graph
    assert len(compiled._compiled) == 2 and compiled.parameters() == model.parameters()
    with pytest.raises(tl.TorchLeanError, match="first-order"):
        x.requires_grad_()
        (g,) = tl.autograd.grad(compiled(x).sum(), [x], create_graph=True)
