"""``tl.Tensor`` code runs the fast kernels (issue 26): a PyTorch program's convolutions, poolings,
layer norms, GELUs, softmaxes and SGD updates take the fast variants by default, their residuals
live as long as the op's output, and the reference stays one switch away
(``fast_kernels(False)``, ``set_tensor_kernels(False)``). Also the lean layout paths of the
tensor methods (reshape, permute, transpose, softmax, ``@``): the same primitives, values,
gradients and errors as the general path. No timing here."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import ShapeError, SignatureError, TorchLeanError
from torchlean.core.registry import (
    ARRAY_OPS,
    FAST_RTOL,
    KERNELS,
    REGISTRY,
    fast_kernels,
    set_tensor_kernels,
)
from torchlean.engine.ops_interface import Ref
from torchlean.ops.fast import residuals
from torchlean.ops.fast import softmax as fast_softmax
from torchlean.optim import fast_update

nnf = tl.nn.functional


def _cnn_grads(seed: int = 0) -> tuple[float, list[np.ndarray], bool]:
    """A W3-shaped CNN step in PyTorch's words: loss, gradients, and whether the first
    convolution's output came back in the fast kernel's channels-last layout."""
    rng = np.random.default_rng(seed)
    x = tl.tensor(rng.standard_normal((4, 1, 12, 12)).astype(np.float32))
    y = tl.tensor(rng.integers(0, 10, 4))
    w1 = tl.tensor(rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.3,
                   requires_grad=True)
    b1 = tl.tensor(np.zeros(8, np.float32), requires_grad=True)
    w2 = tl.tensor(rng.standard_normal((10, 8 * 6 * 6)).astype(np.float32) * 0.05,
                   requires_grad=True)
    c = nnf.conv2d(x, w1, b1, padding=1)
    channels_last = not c.detach().numpy().flags.c_contiguous
    h = nnf.max_pool2d(tl.relu(c), 2)
    loss = nnf.cross_entropy(nnf.linear(h.reshape(4, -1), w2), y)
    loss.backward()
    return loss.item(), [w1.grad.numpy(), b1.grad.numpy(), w2.grad.numpy()], channels_last


def _block_grads(seed: int = 1) -> list[np.ndarray]:
    """A W5-shaped attention + MLP block (layer norm, softmax, GELU) in PyTorch's words."""
    rng = np.random.default_rng(seed)
    b, n, d, heads = 4, 32, 32, 2
    x = tl.tensor(rng.standard_normal((b, n, d)).astype(np.float32))
    ps = [tl.tensor(rng.standard_normal(s).astype(np.float32) * 0.2, requires_grad=True)
          for s in ((d, d), (d, d), (d, d), (4 * d, d))]
    wq, wk, wv, m1 = ps
    a = nnf.layer_norm(x, (d,))

    def split(m):
        return m.reshape(b, n, heads, d // heads).transpose(1, 2)

    q, k, v = split(a @ wq), split(a @ wk), split(a @ wv)
    p = tl.softmax(q @ k.transpose(-1, -2) / (d // heads) ** 0.5, dim=-1)
    h = (p @ v).transpose(1, 2).reshape(b, n, d)
    u = nnf.gelu(nnf.linear(h, m1), approximate="tanh")
    u.square().mean().backward()
    return [t.grad.numpy() for t in ps]


def test_tensor_code_runs_the_fast_kernels_by_default_within_tolerance():
    assert KERNELS.tensors and not KERNELS.fast
    loss, grads, channels_last = _cnn_grads()
    with fast_kernels(False):
        ref_loss, ref_grads, ref_layout = _cnn_grads()
    assert channels_last and not ref_layout  # the fast convolution ran, then the reference
    assert not KERNELS.fast and KERNELS.tensors  # both restored
    np.testing.assert_allclose(loss, ref_loss, rtol=FAST_RTOL["float32"])
    for g, r in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(g, r, rtol=FAST_RTOL["float32"],
                                   atol=FAST_RTOL["float32"] * np.abs(r).max())


def test_block_fast_and_reference_agree_and_differ_only_by_rounding():
    fast = _block_grads()
    with fast_kernels(False):
        ref = _block_grads()
    assert any(not np.array_equal(f, r) for f, r in zip(fast, ref, strict=True))
    for f, r in zip(fast, ref, strict=True):
        np.testing.assert_allclose(f, r, rtol=FAST_RTOL["float32"],
                                   atol=FAST_RTOL["float32"] * np.abs(r).max())


def test_set_tensor_kernels_switches_the_default_and_checks_its_argument():
    before = set_tensor_kernels(False)
    try:
        assert before is True and not KERNELS.tensors
        off = _cnn_grads()
        with fast_kernels(False):
            ref = _cnn_grads()
        assert not off[2]
        assert off[0] == ref[0]
        for a, b in zip(off[1], ref[1], strict=True):
            assert np.array_equal(a, b)  # the reference, bit for bit
        with fast_kernels(True):
            assert KERNELS.tensors
        assert not KERNELS.tensors
    finally:
        set_tensor_kernels(before)
    with pytest.raises(SignatureError, match="set_tensor_kernels: expected a bool"):
        set_tensor_kernels("yes")  # type: ignore[arg-type]
    assert KERNELS.tensors


def test_residuals_live_as_long_as_the_output_and_a_second_backward_reuses_them():
    gc.collect()
    start = residuals.size()
    rng = np.random.default_rng(2)
    x = tl.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), requires_grad=True)
    w = tl.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    out = nnf.max_pool2d(nnf.conv2d(x, w, padding=1), 2)
    assert residuals.size() > start  # the convolution's and the pooling's
    loss = nnf.gelu(out, approximate="tanh").sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy(), w.grad.numpy().copy()
    loss.backward()  # residuals are only read: the second pass sees them unchanged
    np.testing.assert_allclose(x.grad.numpy(), 2 * first[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), 2 * first[1], rtol=1e-6, atol=1e-5)
    del out, loss
    gc.collect()
    assert residuals.size() == start  # gone with their outputs


def test_an_output_changed_in_place_after_the_op_falls_back_to_the_reference_backward():
    # max pooling's reference VJP never reads its output (torch allows changing it), but the
    # fast VJP routes by the output's maxima: such a backward must run the reference.
    # With a relu before it, the fused step would mask by the (changed) maxima: all routed
    # gradient would vanish.
    rng = np.random.default_rng(3)
    xa = rng.standard_normal((1, 2, 4, 4)).astype(np.float32) + 1.0
    for before in (lambda t: t, tl.relu):
        x = tl.tensor(xa, requires_grad=True)
        y = nnf.max_pool2d(before(x), 2)
        y.detach().sub_(100.0)  # same storage, no history
        (y * 1.0).sum().backward()
        with fast_kernels(False):
            x2 = tl.tensor(xa, requires_grad=True)
            nnf.max_pool2d(before(x2), 2).sum().backward()
        assert x2.grad.numpy().sum() == 8  # one winner per window
        assert np.array_equal(x.grad.numpy(), x2.grad.numpy())


def test_double_backward_records_the_reference_rules():
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((4, 32, 16)).astype(np.float32)
    x = tl.tensor(xa, requires_grad=True)
    (g,) = tl.autograd.grad(tl.softmax(x, dim=-1).square().sum(), [x], create_graph=True)
    g.sum().backward()
    with fast_kernels(False):
        x2 = tl.tensor(xa, requires_grad=True)
        (g2,) = tl.autograd.grad(tl.softmax(x2, dim=-1).square().sum(), [x2],
                                 create_graph=True)
        g2.sum().backward()
    np.testing.assert_allclose(g.detach().numpy(), g2.detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_optimiser_steps_outside_a_block_take_the_in_place_update():
    p = np.ones(fast_update.MIN_SIZE, np.float32)
    g = np.full_like(p, 0.5)
    assert fast_update.sgd_update(p, g, 0.1) or not fast_update.axpy(p.copy(), g, 0.1)
    with fast_kernels(False):
        assert not fast_update.sgd_update(p, g, 0.1)


# --- the fast softmax kernel ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(8, 4, 32, 32), (512, 17), (64, 64)])
def test_fast_softmax_matches_the_reference_within_tolerance(dtype, shape):
    prim = REGISTRY["softmax"]
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    want = prim.reference_forward(x)
    got = fast_softmax.forward(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    rtol = FAST_RTOL[np.dtype(dtype).name]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-3)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=rtol)
    want_g = prim.reference_vjp(ARRAY_OPS, g, (x,), want)[0]
    got_g = fast_softmax.vjp(ARRAY_OPS, g, (x,), want)[0]
    np.testing.assert_allclose(got_g, want_g, rtol=rtol, atol=rtol * np.abs(want_g).max())


def test_fast_softmax_keeps_the_reference_where_it_does_not_pay():
    prim = REGISTRY["softmax"]
    rng = np.random.default_rng(6)
    for shape in ((64, 1000), (16, 10), (5,)):  # long rows, small inputs, one axis
        x = rng.standard_normal(shape).astype(np.float32)
        assert np.array_equal(fast_softmax.forward(x), prim.reference_forward(x))
    big = rng.standard_normal((256, 32)) * 50  # shifted by the exact maximum: no overflow
    big[0, 3] = 1e4
    out = fast_softmax.forward(big)
    assert np.isfinite(out).all() and out[0, 3] == 1.0


# --- the lean layout paths ---------------------------------------------------------------

def _pair(seed: int = 7):
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal((2, 3, 4)).astype(np.float32)
    return tl.tensor(xa, requires_grad=True), tl.tensor(xa, requires_grad=True)


@pytest.mark.parametrize("lean, general", [
    (lambda t: t.reshape(6, 4), lambda t: Ref.reshape(t, 6, 4)),
    (lambda t: t.reshape((-1, 2)), lambda t: Ref.reshape(t, (-1, 2))),
    (lambda t: t.view(tl.Size([4, 6])), lambda t: Ref.reshape(t, (4, 6))),
    (lambda t: t.permute(2, 0, 1), lambda t: Ref.permute(t, 2, 0, 1)),
    (lambda t: t.permute((-1, 1, 0)), lambda t: Ref.permute(t, (-1, 1, 0))),
    (lambda t: t.transpose(0, -1), lambda t: Ref.transpose(t, 0, -1)),
    (lambda t: t.softmax(-1), lambda t: Ref.softmax(t, -1)),
    (lambda t: t.softmax(1), lambda t: Ref.softmax(t, 1)),
])
def test_lean_layout_methods_record_what_the_general_path_records(lean, general):
    a, b = _pair()
    out, ref = lean(a), general(b)
    assert out.shape == ref.shape and out._op is ref._op and out._attrs == ref._attrs
    assert np.array_equal(out.detach().numpy(), ref.detach().numpy())
    w = np.random.default_rng(8).standard_normal(out.shape).astype(np.float32)
    (out * tl.tensor(w)).sum().backward()
    (ref * tl.tensor(w)).sum().backward()
    assert np.array_equal(a.grad.numpy(), b.grad.numpy())


@pytest.mark.parametrize("sa, sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                                    ((2, 3, 4), (2, 4, 5)), ((2, 2, 3, 4), (2, 2, 4, 5)),
                                    ((2, 1, 3, 4), (2, 4, 5)), ((4,), (4, 5))])
def test_lean_matmul_equals_the_general_path(sa, sb):
    from torchlean.engine import ops_interface as F

    rng = np.random.default_rng(9)
    aa, ba = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    a1, b1 = tl.tensor(aa, requires_grad=True), tl.tensor(ba, requires_grad=True)
    a2, b2 = tl.tensor(aa, requires_grad=True), tl.tensor(ba, requires_grad=True)
    out, ref = a1 @ b1, F.matmul_any(a2, b2)
    assert out.shape == ref.shape and out._op is ref._op
    assert np.array_equal(out.detach().numpy(), ref.detach().numpy())
    out.sum().backward()
    ref.sum().backward()
    assert np.array_equal(a1.grad.numpy(), a2.grad.numpy())
    assert np.array_equal(b1.grad.numpy(), b2.grad.numpy())


def test_lean_paths_raise_the_general_errors():
    x = tl.tensor(np.zeros((2, 3, 4), np.float32), requires_grad=True)
    with pytest.raises(ShapeError, match="reshape"):
        x.reshape(5, 5)
    with pytest.raises(ShapeError, match="reshape"):
        x.reshape(-1, -1)
    with pytest.raises(TorchLeanError):
        x.reshape(2.0, 12)
    with pytest.raises(ShapeError, match="permute"):
        x.permute(0, 0, 1)
    with pytest.raises(ShapeError, match="permute"):
        x.permute(0, 1)
    with pytest.raises(ShapeError, match="transpose"):
        x.transpose(0, 3)
    with pytest.raises(ShapeError, match="softmax"):
        x.softmax(3)
    m = tl.tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    with pytest.raises(ShapeError, match="inner dimensions"):
        m @ m  # equal shapes, inner dimensions differ: the shape rule still runs
    with pytest.raises(ShapeError):
        x @ tl.tensor(np.zeros((2, 5, 5), np.float32))
    assert x.grad is None and m.grad is None


# --- several outputs in one reverse pass ----------------------------------------------------

def test_grad_of_several_outputs_is_one_pass_equal_to_the_sum_of_single_passes():
    rng = np.random.default_rng(10)
    wa = rng.standard_normal((5, 4)).astype(np.float64)
    xa = rng.standard_normal((3, 5)).astype(np.float64)
    w = tl.tensor(wa, requires_grad=True)
    x = tl.tensor(xa)
    h = (x @ w).tanh()
    outs = [h.sum(), (h * h).sum(), h[0].sum(), h.sum()]  # one output twice, one inside another
    seeds = [tl.tensor(np.array(s)) for s in (1.0, -2.0, 0.5, 3.0)]
    (got,) = tl.autograd.grad(outs, [w], grad_outputs=seeds, retain_graph=True)
    want = np.zeros_like(wa)
    for o, s in zip(outs, seeds, strict=True):
        (g,) = tl.autograd.grad(o, [w], grad_outputs=s, retain_graph=True)
        want += g.numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_hvp_by_double_backward_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    wa = rng.standard_normal((6, 4)).astype(np.float64)
    ba = rng.standard_normal(6).astype(np.float64)
    xa = rng.standard_normal((8, 4)).astype(np.float64)
    va = [rng.standard_normal(wa.shape), rng.standard_normal(ba.shape)]

    def hvp(mod):
        w, b = (mod.tensor(a, requires_grad=True) for a in (wa, ba))
        loss = mod.tanh(mod.nn.functional.linear(mod.tensor(xa), w, b)).square().sum()
        gs = mod.autograd.grad(loss, [w, b], create_graph=True)
        out = mod.autograd.grad(gs, [w, b], grad_outputs=[mod.tensor(v) for v in va])
        return [t.detach().numpy() for t in out]

    for a, b in zip(hvp(tl), hvp(torch), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_backward_adopts_a_gradient_nothing_else_holds_and_copies_shared_ones(monkeypatch):
    from torchlean.engine import tensor as T

    copies = []
    accumulate = T._accumulate
    monkeypatch.setattr(T, "_accumulate", lambda t, g: (copies.append(t), accumulate(t, g)))
    w = tl.tensor(np.ones((3, 3)), requires_grad=True)
    (tl.tensor(np.ones((2, 3))) @ w).sum().backward()
    assert copies == []  # the product's fresh array became w.grad as it was
    b = tl.tensor(np.ones(3), requires_grad=True)
    c = tl.tensor(np.ones(3), requires_grad=True)
    # The product's cotangent is a fresh array (not a view), and add hands that one array to
    # both b and c: each must get its own copy.
    ((b + c) * tl.tensor(np.array([1.0, 2.0, 3.0]))).sum().backward()
    assert len(copies) == 2
    b.grad.add_(10.0)
    assert np.array_equal(c.grad.numpy(), np.array([1.0, 2.0, 3.0]))  # no aliasing
    w2 = tl.tensor(np.ones((3, 3)), requires_grad=True)
    y = tl.tensor(np.ones((2, 3))) @ w2
    y.sum().backward()
    first = w2.grad.numpy().copy()
    (tl.tensor(np.ones((2, 3))) @ w2).sum().backward()  # accumulates into the adopted array
    assert np.array_equal(w2.grad.numpy(), 2 * first)


# --- relu then max pooling: one fused reverse step ----------------------------------------

def _relu_pool_grads(pool, two_uses=False, retain=False):
    rng = np.random.default_rng(12)
    x = tl.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), requires_grad=True)
    w = tl.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    h = tl.relu(nnf.conv2d(x, w, padding=1))
    if retain:
        h.retain_grad()
    out = pool(h).square().sum()
    if two_uses:
        out = out + (h * 0.5).sum()
    out.backward()
    return [x.grad.numpy(), w.grad.numpy()] + ([h.grad.numpy()] if retain else [])


@pytest.mark.parametrize("pool", [lambda h: nnf.max_pool2d(h, 2),
                                  lambda h: nnf.max_pool2d(h, 3, stride=2, padding=1),
                                  lambda h: nnf.max_pool2d(h, 3, stride=1)])
@pytest.mark.parametrize("case", [{}, {"two_uses": True}, {"retain": True}])
def test_relu_pool_fusion_gives_the_unfused_bits(monkeypatch, pool, case):
    from torchlean.engine import tensor as T

    fused_steps = []
    step = T._relu_pool_step
    monkeypatch.setattr(T, "_relu_pool_step", lambda *a: fused_steps.append(step(*a))
                        or fused_steps[-1])
    got = _relu_pool_grads(pool, **case)
    assert any(s is not None for s in fused_steps) == (not case)  # fused only when it may be
    monkeypatch.setattr(T, "_relu_pool_step", lambda *a: None)
    want = _relu_pool_grads(pool, **case)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)


def test_grad_of_the_relu_output_itself_is_not_fused_away():
    rng = np.random.default_rng(13)
    c = tl.tensor(rng.standard_normal((1, 2, 4, 4)).astype(np.float32), requires_grad=True)
    h = tl.relu(c)
    loss = nnf.max_pool2d(h, 2).sum()
    (gh, gc) = tl.autograd.grad(loss, [h, c])
    assert gh.numpy().sum() == 4 * 2  # one winner per window
    np.testing.assert_array_equal(gc.numpy(), gh.numpy() * (c.detach().numpy() > 0))


def test_inference_keeps_no_residuals():
    gc.collect()
    start = residuals.size()
    rng = np.random.default_rng(14)
    x = tl.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    w = tl.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    with tl.no_grad():
        out = nnf.gelu(nnf.max_pool2d(nnf.conv2d(x, w, padding=1), 2), approximate="tanh")
    assert residuals.size() == start  # nothing kept for outputs no backward will reach
    kept = nnf.conv2d(x, w, padding=1)
    assert residuals.size() > start  # (with a history they are kept)
    with fast_kernels(False):
        ref = nnf.gelu(nnf.max_pool2d(nnf.conv2d(x, w, padding=1), 2), approximate="tanh")
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    del kept


def test_the_kernel_choice_is_per_thread():
    import threading

    inside, release, seen = threading.Event(), threading.Event(), {}

    def other() -> None:
        with fast_kernels(True):
            seen["fast"] = KERNELS.fast
            inside.set()
            release.wait(60)  # (a hang guard only: the main thread releases it at once)

    worker = threading.Thread(target=other)
    worker.start()
    try:
        assert inside.wait(60)
        assert seen["fast"] and not KERNELS.fast  # the other thread's block is its own
        x = tl.tensor(np.random.default_rng(15).standard_normal((64, 32)).astype(np.float32))
        with fast_kernels(False):
            out = tl.softmax(x, dim=-1).numpy()
        assert np.array_equal(out, REGISTRY["softmax"].reference_forward(x.numpy()))
    finally:
        release.set()
        worker.join(60)
    before = set_tensor_kernels(False)
    try:
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("tensors", KERNELS.tensors))
        t.start()
        t.join(60)
        assert got["tensors"] is False  # a thread started after takes the default
    finally:
        set_tensor_kernels(before)


def test_functional_linear_lean_path_equals_the_general_path_and_checks_shapes():
    rng = np.random.default_rng(16)
    xa = rng.standard_normal((2, 3, 5)).astype(np.float32)
    wa = rng.standard_normal((4, 5)).astype(np.float32)
    ba = rng.standard_normal(4).astype(np.float32)
    x1, w1, b1 = (tl.tensor(a, requires_grad=True) for a in (xa, wa, ba))
    out = nnf.linear(x1, w1, b1)  # tensors: the lean path
    x2, w2, b2 = (tl.tensor(a, requires_grad=True) for a in (xa, wa, ba))
    ref = nnf.linear(x2, w2, b2.detach().numpy())  # an array bias: the general path
    assert out._op is REGISTRY["linear"] and out.shape == (2, 3, 4)
    assert np.array_equal(out.detach().numpy(), ref.detach().numpy())
    out.sum().backward()
    ref.sum().backward()
    assert np.array_equal(x1.grad.numpy(), x2.grad.numpy())
    assert np.array_equal(w1.grad.numpy(), w2.grad.numpy())
    with pytest.raises(ShapeError, match="torch's order"):
        nnf.linear(w1, x1, b1)  # swapped: the wrapper's own message
    with pytest.raises(ShapeError):
        nnf.linear(x1, w1, tl.tensor(np.zeros(3, np.float32)))
    with pytest.raises(TorchLeanError):
        nnf.linear(x1, w1.double(), b1)  # two dtypes: the general path refuses
