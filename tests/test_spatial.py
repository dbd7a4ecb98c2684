"""Spatial and sequence ops (issue 3): conv, conv_transpose, pooling, normalisation, attention.

The per-op battery (finite differences, JVP, dot-product, PyTorch) runs over every registered
primitive in tests/test_op_battery.py, these ops included. Here: hypothesis-drawn sizes, strides,
paddings and batch / no-batch inputs against torch.nn.functional (forward and gradients, in
float64), the adjoint identity of conv_transpose, smooth max pooling against a direct
log-sum-exp, fully masked attention rows, second derivatives (hvp) against torch.func, and the
ShapeErrors for bad input.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.errors import ShapeError

SETTINGS = settings(max_examples=15, deadline=None)
TF = torch.nn.functional


def run(op: str, inputs: list[np.ndarray], attrs: dict[str, Any],
        seed: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Forward value and gradients of ``<seed, op(inputs)>`` on a float64 tape."""
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(a) for a in inputs]
    out = tape.apply(op, *ids, **attrs)
    value = tape.value(out)
    if seed is None:
        seed = np.random.default_rng(7).standard_normal(value.shape)
    grads = tape.backward_dense_all(out, seed)
    return value, [grads[i] for i in ids]


def torch_run(fn: Any, inputs: list[np.ndarray],
              seed: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    leaves = [torch.tensor(a, requires_grad=True) for a in inputs]
    out = fn(*leaves)
    out.backward(torch.tensor(seed))
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else
                                  np.zeros(t.shape) for t in leaves]


def agree(op: str, inputs: list[np.ndarray], attrs: dict[str, Any], torch_fn: Any,
          atol: float = 1e-9) -> None:
    value, grads = run(op, inputs, attrs)
    seed = np.random.default_rng(7).standard_normal(value.shape)
    ref, ref_grads = torch_run(torch_fn, inputs, seed)
    assert value.shape == ref.shape
    np.testing.assert_allclose(value, ref, rtol=1e-9, atol=atol)
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        assert g.shape == r.shape, f"input {i}"
        np.testing.assert_allclose(g, r, rtol=1e-8, atol=atol, err_msg=f"{op} input {i}")


def batched(torch_fn: Any, d: int) -> Any:
    """Apply a torch functional that wants a batch axis to a possibly unbatched input."""

    def fn(x: Any, *rest: Any) -> Any:
        if x.dim() == d + 2:
            return torch_fn(x, *rest)
        return torch_fn(x.unsqueeze(0), *rest).squeeze(0)

    return fn


# ---------------------------------------------------------------------------------------------
# Convolution


@st.composite
def conv_case(draw: Any, transpose: bool = False) -> tuple[Any, ...]:
    d = draw(st.integers(1, 3))
    cin, cout = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    k = tuple(draw(st.integers(1, 3)) for _ in range(d))
    s = tuple(draw(st.integers(1, 3)) for _ in range(d))
    p = tuple(draw(st.integers(0, 2)) for _ in range(d))
    batch = draw(st.sampled_from([None, 1, 2]))
    if transpose:
        p = tuple(min(pp, kk - 1) for pp, kk in zip(p, k, strict=True))
        spatial = tuple(draw(st.integers(1, 4)) for _ in range(d))
    else:
        spatial = tuple(max(draw(st.integers(1, 6)), kk - 2 * pp) for kk, pp in zip(k, p,
                                                                                     strict=True))
    per_axis = draw(st.booleans())
    stride: Any = s if per_axis or len(set(s)) > 1 else s[0]
    padding: Any = p if per_axis or len(set(p)) > 1 else p[0]
    seed = draw(st.integers(0, 2**31))
    return d, cin, cout, k, s, p, stride, padding, batch, spatial, seed


@SETTINGS
@given(conv_case())
def test_conv_matches_torch(case: tuple[Any, ...]) -> None:
    d, cin, cout, k, s, p, stride, padding, batch, spatial, seed = case
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    w = rng.standard_normal((cout, cin) + k)
    b = rng.standard_normal(cout)
    x = rng.standard_normal(lead + (cin,) + spatial)
    conv_nd = getattr(TF, f"conv{d}d")
    ref = batched(lambda xx, ww, bb: conv_nd(xx, ww, bb, stride=s, padding=p), d)
    agree("conv", [w, b, x], {"stride": stride, "padding": padding},
          lambda ww, bb, xx: ref(xx, ww, bb))
    if d == 2:
        agree("conv2d", [w, b, x], {"stride": stride, "padding": padding},
              lambda ww, bb, xx: ref(xx, ww, bb))


@SETTINGS
@given(conv_case(transpose=True))
def test_conv_transpose_matches_torch(case: tuple[Any, ...]) -> None:
    d, cin, cout, k, s, p, stride, padding, batch, spatial, seed = case
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    w = rng.standard_normal((cin, cout) + k)
    b = rng.standard_normal(cout)
    x = rng.standard_normal(lead + (cin,) + spatial)
    out = [(n - 1) * ss - 2 * pp + kk for n, ss, pp, kk in zip(spatial, s, p, k, strict=True)]
    if min(out) <= 0:
        with pytest.raises(ShapeError, match="conv_transpose"):
            run("conv_transpose", [w, b, x], {"stride": stride, "padding": padding})
        return
    ct = getattr(TF, f"conv_transpose{d}d")
    ref = batched(lambda xx, ww, bb: ct(xx, ww, bb, stride=s, padding=p), d)
    agree("conv_transpose", [w, b, x], {"stride": stride, "padding": padding},
          lambda ww, bb, xx: ref(xx, ww, bb))
    if d == 2:
        agree("conv_transpose2d", [w, b, x], {"stride": stride, "padding": padding},
              lambda ww, bb, xx: ref(xx, ww, bb))


@SETTINGS
@given(conv_case())
def test_conv_transpose_is_the_adjoint_of_conv(case: tuple[Any, ...]) -> None:
    """<conv(x; w), y> == <x, conv_transpose(y; w)> with zero bias, output_padding restoring
    the exact input size when the stride does not divide evenly."""
    d, cin, cout, k, s, p, stride, padding, batch, spatial, seed = case
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    w = rng.standard_normal((cout, cin) + k)
    x = rng.standard_normal(lead + (cin,) + spatial)
    y_conv, _ = run("conv", [w, np.zeros(cout), x], {"stride": stride, "padding": padding})
    y = rng.standard_normal(y_conv.shape)
    extra = tuple(n + 2 * pp - kk - (o - 1) * ss for n, pp, kk, o, ss in
                  zip(spatial, p, k, y_conv.shape[-d:], s, strict=True))
    back, _ = run("conv_transpose", [w, np.zeros(cin), y],
                  {"stride": stride, "padding": padding, "output_padding": extra})
    assert back.shape == x.shape
    lhs = float((y_conv * y).sum())
    rhs = float((x * back).sum())
    assert math.isclose(lhs, rhs, rel_tol=1e-10, abs_tol=1e-10)


def test_conv_without_output_padding_uses_pytorch_size() -> None:
    tape = tl.Tape(dtype="float64")
    w = tape.leaf(np.ones((2, 3, 3, 3)))
    b = tape.leaf(np.zeros(3))
    x = tape.leaf(np.ones((2, 4, 5)))
    assert tape.value(tape.conv_transpose2d(w, b, x, 2, 1)).shape == (3, 7, 9)


# ---------------------------------------------------------------------------------------------
# Pooling


@st.composite
def pool_case(draw: Any, max_pad_half: bool) -> tuple[Any, ...]:
    d = draw(st.integers(1, 3))
    k = tuple(draw(st.integers(1, 3)) for _ in range(d))
    s = tuple(draw(st.integers(1, 3)) for _ in range(d))
    p = tuple(draw(st.integers(0, kk // 2 if max_pad_half else 2)) for kk in k)
    # PyTorch's pooling refuses inputs smaller than the kernel even when padding would fit
    # them; torchlean accepts any padded fit, so the PyTorch comparisons draw inputs >= kernel.
    low = [kk if max_pad_half else kk - 2 * pp for kk, pp in zip(k, p, strict=True)]
    spatial = tuple(max(draw(st.integers(1, 6)), lo) for lo in low)
    batch = draw(st.sampled_from([None, 2]))
    return d, k, s, p, spatial, batch, draw(st.integers(0, 2**31))


def _distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) - n / 2) * 0.1


@SETTINGS
@given(pool_case(max_pad_half=True))
def test_max_pool_matches_torch(case: tuple[Any, ...]) -> None:
    d, k, s, p, spatial, batch, seed = case
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    x = _distinct(rng, lead + (2,) + spatial)
    mp = getattr(TF, f"max_pool{d}d")
    ref = batched(lambda xx: mp(xx, k, s, p), d)
    agree("max_pool", [x], {"kernel_size": k, "stride": s, "padding": p}, ref)
    if d == 2:
        agree("max_pool2d_pad", [x], {"kernel_size": k, "stride": s, "padding": p}, ref)
        if not any(p):
            agree("max_pool2d", [x], {"kernel_size": k, "stride": s}, ref)


@SETTINGS
@given(pool_case(max_pad_half=True))
def test_avg_pool_matches_torch_count_include_pad(case: tuple[Any, ...]) -> None:
    d, k, s, p, spatial, batch, seed = case
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    x = rng.standard_normal(lead + (2,) + spatial)
    ap = getattr(TF, f"avg_pool{d}d")
    ref = batched(lambda xx: ap(xx, k, s, p, count_include_pad=True), d)
    agree("avg_pool", [x], {"kernel_size": k, "stride": s, "padding": p}, ref)
    if d == 2:
        agree("avg_pool2d_pad", [x], {"kernel_size": k, "stride": s, "padding": p}, ref)


def test_pool_stride_defaults_to_kernel() -> None:
    x = np.arange(2 * 6 * 6, dtype=np.float64).reshape(2, 6, 6)
    y, _ = run("max_pool2d", [x], {"kernel_size": 3})
    assert y.shape == (2, 2, 2)
    np.testing.assert_array_equal(y[0], [[14, 17], [32, 35]])
    a, _ = run("avg_pool2d", [x], {"kernel_size": 2})
    np.testing.assert_allclose(a[0, 0, 0], (0 + 1 + 6 + 7) / 4)


def test_max_pool_gradient_goes_to_first_maximum_and_padding_never_wins() -> None:
    x = np.array([[[1.0, 5.0, 5.0, 2.0], [5.0, 0.0, 3.0, 5.0]]])  # (1, 2, 4), ties
    y, (g,) = run("max_pool2d", [x], {"kernel_size": 2}, seed=np.ones((1, 1, 2)))
    np.testing.assert_array_equal(y, [[[5.0, 5.0]]])
    np.testing.assert_array_equal(g, [[[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    # All-negative input with padding: zero padding would win; ignored padding does not.
    neg = -1.0 - np.arange(9.0).reshape(1, 3, 3)
    y, _ = run("max_pool2d_pad", [neg], {"kernel_size": 2, "stride": 2, "padding": 1})
    np.testing.assert_array_equal(y, [[[-1.0, -2.0], [-4.0, -5.0]]])


def _lse_reference(x: np.ndarray, beta: float, k: tuple[int, ...], s: tuple[int, ...],
                   p: tuple[int, ...]) -> np.ndarray:
    """Direct per-window log-sum-exp with Python loops (zero padding)."""
    d = len(k)
    xp = np.pad(x, [(0, 0)] * (x.ndim - d) + [(pp, pp) for pp in p])
    out_sp = [(n - kk) // ss + 1 for n, kk, ss in zip(xp.shape[-d:], k, s, strict=True)]
    out = np.empty(x.shape[:-d] + tuple(out_sp))
    for lead in np.ndindex(*x.shape[:-d]):
        for pos in itertools.product(*(range(o) for o in out_sp)):
            win = xp[lead + tuple(slice(i * ss, i * ss + kk) for i, ss, kk in
                                  zip(pos, s, k, strict=True))]
            out[lead + pos] = math.log(float(np.exp(beta * win).sum())) / beta
    return out


@SETTINGS
@given(pool_case(max_pad_half=False), st.sampled_from([0.5, 1.0, 3.0]))
def test_smooth_max_pool_is_log_sum_exp(case: tuple[Any, ...], beta: float) -> None:
    d, k, s, p, spatial, batch, seed = case
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    x = rng.standard_normal(lead + (2,) + spatial)
    y, _ = run("smooth_max_pool", [x], {"beta": beta, "kernel_size": k, "stride": s,
                                        "padding": p})
    np.testing.assert_allclose(y, _lse_reference(x, beta, k, s, p), rtol=1e-12, atol=1e-12)


def test_smooth_max_pool_large_beta_no_overflow_and_softmax_gradient() -> None:
    x = np.array([[[800.0, 1.0], [2.0, 799.0]]])
    y, (g,) = run("smooth_max_pool2d", [x], {"beta": 10.0, "kernel_size": 2},
                  seed=np.ones((1, 1, 1)))
    assert np.isfinite(y).all() and np.isfinite(g).all()
    expected = 800.0 + math.log1p(math.exp(-10.0) + math.exp(-7980) + math.exp(-7990)) / 10.0
    np.testing.assert_allclose(y[0, 0, 0], expected, rtol=1e-14)
    w = np.exp(10.0 * (x - x.max()))
    np.testing.assert_allclose(g, w / w.sum(), rtol=1e-12, atol=1e-300)
    # Smooth max tends to max as beta grows.
    big, _ = run("smooth_max_pool2d", [x], {"beta": 1e4, "kernel_size": 2})
    assert abs(big[0, 0, 0] - 800.0) < 1e-3


# ---------------------------------------------------------------------------------------------
# Normalisation


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=0, max_size=2), st.integers(1, 6),
       st.sampled_from([1e-6, 1e-5, 1e-3]), st.integers(0, 2**31))
def test_layer_norm_matches_torch(lead: list[int], dim: int, eps: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(tuple(lead) + (dim,))
    gamma, beta = rng.standard_normal(dim), rng.standard_normal(dim)
    agree("layer_norm", [x, gamma, beta], {"eps": eps},
          lambda xx, gg, bb: TF.layer_norm(xx, (dim,), gg, bb, eps=eps), atol=1e-8)


def test_layer_norm_default_eps_is_1e_minus_6() -> None:
    """Intended difference: torchlean's default eps is 1e-6, PyTorch's 1e-5."""
    x = np.array([[0.0, 1e-3, -1e-3, 2e-3]])
    ones, zeros = np.ones(4), np.zeros(4)
    ours, _ = run("layer_norm", [x, ones, zeros], {})
    t = torch.tensor(x)
    np.testing.assert_allclose(ours, TF.layer_norm(t, (4,), eps=1e-6).numpy(), rtol=1e-12)
    assert not np.allclose(ours, TF.layer_norm(t, (4,)).numpy(), rtol=1e-3)


@SETTINGS
@given(st.sampled_from([None, 1, 3]), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4),
       st.integers(0, 2**31))
def test_batch_norm_matches_torch_training_mode(n: int | None, c: int, h: int, w: int,
                                                seed: int) -> None:
    if n is None and h * w == 1 or n == 1 and h * w == 1:
        return  # a single value per channel: variance 0, torch refuses; covered below
    rng = np.random.default_rng(seed)
    lead = () if n is None else (n,)
    x = rng.standard_normal(lead + (c, h, w))
    gamma, beta = rng.standard_normal(c), rng.standard_normal(c)

    def ref(xx: Any, gg: Any, bb: Any) -> Any:
        xb = xx if xx.dim() == 4 else xx.unsqueeze(0)
        y = TF.batch_norm(xb, None, None, gg, bb, training=True, eps=1e-6)
        return y if xx.dim() == 4 else y[0]

    agree("batch_norm", [x, gamma, beta], {"eps": 1e-6}, ref, atol=1e-7)


def test_batch_norm_single_value_per_channel_is_beta() -> None:
    x = np.array([[[3.0]], [[-2.0]]])
    y, _ = run("batch_norm", [x, np.array([2.0, 5.0]), np.array([0.5, -1.0])], {})
    np.testing.assert_allclose(y, [[[0.5]], [[-1.0]]])


# ---------------------------------------------------------------------------------------------
# Attention


def torch_attention(wq: Any, wk: Any, wv: Any, wo: Any, x: Any, mask: np.ndarray | None,
                    heads: int) -> Any:
    """PyTorch's scaled_dot_product_attention with the same weights and head split."""
    n, dm = x.shape[-2], x.shape[-1]
    xb = x.reshape(-1, n, dm)
    b, hd = xb.shape[0], wq.shape[1]
    d = hd // heads

    def split(m: Any) -> Any:
        return m.reshape(b, n, heads, d).transpose(1, 2)

    attn_mask = None if mask is None else torch.tensor(mask)
    o = TF.scaled_dot_product_attention(split(xb @ wq), split(xb @ wk), split(xb @ wv),
                                        attn_mask=attn_mask)
    return (o.transpose(1, 2).reshape(b, n, hd) @ wo).reshape(x.shape)


@SETTINGS
@given(st.sampled_from([None, 1, 3]), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 4), st.sampled_from(["none", "causal", "random"]), st.integers(0, 2**31))
def test_attention_matches_torch(batch: int | None, n: int, heads: int, head_dim: int,
                                 dm: int, mask_kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    hd = heads * head_dim
    ws = [rng.standard_normal((dm, hd)) * 0.7 for _ in range(3)]
    wo = rng.standard_normal((hd, dm)) * 0.7
    x = rng.standard_normal(((batch,) if batch else ()) + (n, dm))
    mask: np.ndarray | None = None
    if mask_kind == "causal":
        mask = np.tril(np.ones((n, n), dtype=bool))
    elif mask_kind == "random":
        mask = rng.random((n, n)) < 0.6
        mask[np.arange(n), rng.integers(0, n, n)] = True  # every row keeps one key
    agree("multi_head_attention", [*ws, wo, x], {"mask": mask, "num_heads": heads},
          lambda a, b_, c, d_, e: torch_attention(a, b_, c, d_, e, mask, heads), atol=1e-8)


def test_fully_masked_rows_give_zero_output_and_zero_gradient() -> None:
    rng = np.random.default_rng(3)
    n, dm = 4, 4
    mask = np.tril(np.ones((n, n), dtype=bool))
    mask[2] = False
    ws = [rng.standard_normal((dm, dm)) for _ in range(4)]
    x = rng.standard_normal((2, n, dm))
    y, grads = run("multi_head_attention", [*ws, x], {"mask": mask, "num_heads": 2})
    assert all(np.isfinite(g).all() for g in grads) and np.isfinite(y).all()
    np.testing.assert_array_equal(y[:, 2], 0.0)
    # Row 2's output is 0 whatever row 2's input is (it attends to nothing) ...
    x2 = x.copy()
    x2[:, 2] += 5.0
    y2, _ = run("multi_head_attention", [*ws, x2], {"mask": mask, "num_heads": 2})
    np.testing.assert_array_equal(y2[:, 2], 0.0)
    # ... and a cotangent on that row alone sends no gradient anywhere.
    seed = np.zeros_like(y)
    seed[:, 2] = 1.0
    _, grads = run("multi_head_attention", [*ws, x], {"mask": mask, "num_heads": 2}, seed=seed)
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)
    # Forward mode agrees: no NaN tangent either.
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(a) for a in [*ws, x]]
    out = tape.multi_head_attention(*ids, mask=mask, num_heads=2)
    t = tape.jvp(out, {ids[-1]: np.ones_like(x)})
    assert np.isfinite(t).all()
    np.testing.assert_array_equal(t[:, 2], 0.0)


# ---------------------------------------------------------------------------------------------
# Second order (hvp) through the helper primitives, against torch.func


def _hvp_torch(fn: Any, primals: list[np.ndarray], tangents: list[np.ndarray]) -> list[Any]:
    ps = tuple(torch.tensor(p) for p in primals)
    ts = tuple(torch.tensor(t) for t in tangents)
    grad = torch.func.grad(fn, argnums=tuple(range(len(ps))))
    _, out = torch.func.jvp(grad, ps, ts)
    return [o.numpy() for o in out]


def _check_hvp(fn_tl: Any, fn_torch: Any, primals: list[np.ndarray], seed: int) -> None:
    rng = np.random.default_rng(seed)
    tangents = [rng.standard_normal(p.shape) for p in primals]
    ours = tl.hvp(fn_tl, primals, tangents)
    ref = _hvp_torch(fn_torch, primals, tangents)
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)


def test_hvp_conv_and_conv_transpose() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2, 3, 3))
    x = rng.standard_normal((2, 2, 5, 6))
    b = np.full(3, 0.5)

    def ours(w_: Any, x_: Any) -> Any:
        y = F.conv2d(w_, b, x_, stride=2, padding=1)
        z = F.conv_transpose2d(w_, np.zeros(2), F.tanh(y), stride=2, padding=1)
        return F.sum(F.square(z)) + F.sum(F.square(y))

    def theirs(w_: Any, x_: Any) -> Any:
        y = TF.conv2d(x_, w_, torch.tensor(b), stride=2, padding=1)
        z = TF.conv_transpose2d(torch.tanh(y), w_, None, stride=2, padding=1)
        return (z ** 2).sum() + (y ** 2).sum()

    _check_hvp(ours, theirs, [w, x], 1)


def test_hvp_pooling() -> None:
    rng = np.random.default_rng(1)
    x = _distinct(rng, (2, 2, 5, 5))

    def ours(x_: Any) -> Any:
        m = F.max_pool2d_pad(F.square(x_), 3, 2, 1)
        a = F.avg_pool2d_pad(F.tanh(x_), 2, 1, 1)
        s = F.smooth_max_pool(F.square(x_), 1.5, (2, 2), None, 1)
        return F.sum(F.square(m)) + F.sum(F.square(a)) + F.sum(F.square(s))

    def theirs(x_: Any) -> Any:
        m = TF.max_pool2d(x_ ** 2, 3, 2, 1)
        a = TF.avg_pool2d(torch.tanh(x_), 2, 1, 1, count_include_pad=True)
        cols = TF.pad(x_ ** 2, (1, 1, 1, 1)).unfold(2, 2, 2).unfold(3, 2, 2)
        s = torch.logsumexp(1.5 * cols.reshape(cols.shape[:4] + (-1,)), dim=-1) / 1.5
        return (m ** 2).sum() + (a ** 2).sum() + (s ** 2).sum()

    _check_hvp(ours, theirs, [x], 2)


def test_hvp_normalisation() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4))
    xb = rng.standard_normal((2, 3, 2, 2))
    g, b = rng.standard_normal(4), rng.standard_normal(4)
    gc, bc = rng.standard_normal(3), rng.standard_normal(3)

    def ours(x_: Any, g_: Any, xb_: Any, gc_: Any) -> Any:
        y = F.layer_norm(x_, g_, b, eps=1e-3)
        z = F.batch_norm(xb_, gc_, bc, eps=1e-3)
        return F.sum(F.tanh(y) * y) + F.sum(F.tanh(z) * z)

    def theirs(x_: Any, g_: Any, xb_: Any, gc_: Any) -> Any:
        y = TF.layer_norm(x_, (4,), g_, torch.tensor(b), eps=1e-3)
        z = TF.batch_norm(xb_, None, None, gc_, torch.tensor(bc), training=True, eps=1e-3)
        return (torch.tanh(y) * y).sum() + (torch.tanh(z) * z).sum()

    _check_hvp(ours, theirs, [x, g, xb, gc], 3)


def test_hvp_attention() -> None:
    rng = np.random.default_rng(4)
    ws = [rng.standard_normal((4, 4)) * 0.5 for _ in range(4)]
    x = rng.standard_normal((2, 3, 4))
    mask = np.tril(np.ones((3, 3), dtype=bool))

    def ours(wq: Any, wk: Any, wv: Any, wo: Any, x_: Any) -> Any:
        y = F.multi_head_attention(wq, wk, wv, wo, x_, mask=mask, num_heads=2)
        return F.sum(F.tanh(y))

    def theirs(wq: Any, wk: Any, wv: Any, wo: Any, x_: Any) -> Any:
        # Written out (torch's fused attention kernel has no forward-mode AD).
        def split(m: Any) -> Any:
            return m.reshape(2, 3, 2, 2).transpose(1, 2)

        q, k, v = split(x_ @ wq), split(x_ @ wk), split(x_ @ wv)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(2)).masked_fill(~torch.tensor(mask),
                                                                      float("-inf"))
        o = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(2, 3, 4)
        return torch.tanh(o @ wo).sum()

    _check_hvp(ours, theirs, [*ws, x], 5)


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(("op", "shapes", "attrs", "message"), [
    ("conv2d", [(2, 3, 5, 5), (2,), (3, 2, 2)], {}, r"conv2d: kernel \(5, 5\) larger than "
                                                      r"padded input \(2, 2\)"),
    ("conv2d", [(2, 3, 3, 3), (2,), (3, 5, 5)], {"stride": 0}, "conv2d: stride must be >= 1"),
    ("conv", [(2, 3, 3), (2,), (4, 7)], {}, r"conv: channel mismatch: input \(4, 7\) has 4"),
    ("conv2d", [(2, 3, 3, 3), (3,), (3, 5, 5)], {}, r"conv2d: bias must have shape \(2,\)"),
    ("conv2d", [(2, 3, 3), (2,), (3, 5)], {}, "conv2d: kernel must have 2 spatial dims"),
    ("conv_transpose", [(3, 2, 2, 2), (2,), (4, 5, 5)], {}, "conv_transpose: channel mismatch"),
    ("conv_transpose2d", [(3, 2, 2, 2), (2,), (3, 1, 1)], {"padding": 1},
     "conv_transpose2d: output size"),
    ("max_pool2d", [(2, 3, 3)], {"kernel_size": 4}, r"max_pool2d: kernel \(4, 4\) larger"),
    ("max_pool2d_pad", [(2, 5, 5)], {"kernel_size": 2, "stride": 0, "padding": 0},
     "max_pool2d_pad: stride must be >= 1"),
    ("max_pool2d_pad", [(2, 5, 5)], {"kernel_size": 2, "stride": 1, "padding": 2},
     "max_pool2d_pad: padding .* at most half the kernel"),
    ("avg_pool", [(5,)], {"kernel_size": (2, 2)}, "avg_pool: input must be"),
    ("smooth_max_pool2d", [(2, 4, 4)], {"beta": 0.0, "kernel_size": 2},
     "smooth_max_pool2d: beta must be a positive number"),
    ("layer_norm", [(3, 0), (0,), (0,)], {}, "layer_norm: needs a non-empty last axis"),
    ("layer_norm", [(3, 4), (3,), (4,)], {}, r"layer_norm: gamma must have shape \(4,\)"),
    ("batch_norm", [(0, 2, 3, 3), (2,), (2,)], {}, "batch_norm: statistics need non-empty"),
    ("batch_norm", [(2, 3), (2,), (2,)], {}, r"batch_norm: input must be \(C, H, W\)"),
    ("multi_head_attention", [(4, 6), (4, 6), (4, 6), (6, 4), (3, 4)], {"num_heads": 4},
     "multi_head_attention: projection width 6 .* not divisible into num_heads=4"),
    ("multi_head_attention", [(4, 4), (4, 4), (4, 4), (4, 4), (3, 4)],
     {"mask": np.ones((2, 2), dtype=bool)}, r"multi_head_attention: mask must have shape \(3, 3\)"),
    ("multi_head_attention", [(4, 4), (4, 4), (4, 4), (4, 4), (0, 4)], {},
     "multi_head_attention: x needs non-empty dims"),
    ("multi_head_attention", [(5, 4), (5, 4), (5, 4), (4, 5), (3, 4)], {},
     r"multi_head_attention: wq must be \(d_model, H\*D\)"),
])
def test_bad_input_is_a_shape_error_naming_the_op(op: str, shapes: list[tuple[int, ...]],
                                                  attrs: dict[str, Any], message: str) -> None:
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(np.ones(s)) for s in shapes]
    size = tape.size
    with pytest.raises(ShapeError, match=message):
        tape.apply(op, *ids, **attrs)
    assert tape.size == size  # nothing recorded


def test_every_spatial_op_is_a_tape_method() -> None:
    for name in ["conv", "conv2d", "conv_transpose", "conv_transpose2d", "max_pool", "max_pool2d",
                 "max_pool2d_pad", "avg_pool", "avg_pool2d", "avg_pool2d_pad", "smooth_max_pool",
                 "smooth_max_pool2d", "layer_norm", "batch_norm", "multi_head_attention"]:
        assert callable(getattr(tl.Tape, name)), name
