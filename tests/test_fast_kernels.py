"""Fast kernels (issue 26 item 1, the seed's ``Options.fastKernels``).

Each fast kernel against its reference on random shapes (strides, per-axis padding, output
padding, overlapping pool windows, 1-D/2-D/3-D, batch and no batch, masks) in float32 and
float64, forward and gradients through the tape; the dispatch (off by default, on only inside
``fast_kernels(True)``, NumPy only, restored after); the residual store (a miss gives the same
bits as a hit, entries go with their arrays); the tape/graph link bitwise with the fast kernels
on; ``Options(fast_kernels=...)`` choosing the set in eager and compiled training, and training
converging the same either way. Timings are in ``torchlean bench``, never here.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.registry import (
    ARRAY_OPS,
    FAST_RTOL,
    KERNELS,
    REGISTRY,
    Sample,
    attach_fast,
    fast_kernels,
)
from torchlean.engine.tape import Tape
from torchlean.ops.fast import blas as fast_blas
from torchlean.ops.fast import linalg as fast_linalg
from torchlean.ops.fast import residuals
from torchlean.verify.checks import Settings as VerifySettings
from torchlean.verify.checks import check_fast, column_fast

FAST = sorted(n for n, p in REGISTRY.items() if p.fast_forward is not None
              or p.fast_vjp is not None)


def _record(name: str, inputs: list[np.ndarray], attrs: dict[str, Any], v: np.ndarray | None,
            dtype: str) -> list[np.ndarray]:
    tape = Tape(dtype=dtype)
    prim = REGISTRY[name]
    ids = [tape.leaf(np.asarray(x, dtype=dtype)) for x in inputs]
    out = tape.record(prim, ids, prim.bind_attrs((), attrs))
    result = [np.asarray(tape.value(out))]
    if v is not None:
        grads = tape.backward_dense_all(out, v.astype(dtype))
        result += [np.asarray(grads[i]) for i in ids]
    return result


def _agree(name: str, inputs: list[np.ndarray], attrs: dict[str, Any], seed: int = 0) -> None:
    """Forward and every input gradient: fast set == reference set within FAST_RTOL."""
    rng = np.random.default_rng(seed)
    for dtype in ("float32", "float64"):
        out = _record(name, inputs, attrs, None, dtype)[0]
        v = rng.standard_normal(out.shape)
        want = _record(name, inputs, attrs, v, dtype)
        with fast_kernels(True):
            got = _record(name, inputs, attrs, v, dtype)
        rtol = FAST_RTOL[dtype]
        for a, e in zip(got, want, strict=True):
            assert a.dtype == e.dtype == np.dtype(dtype)
            scale = max(1.0, float(np.max(np.abs(e), initial=0.0)))
            np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * scale)


def test_the_fast_set_is_the_expected_one() -> None:
    # What ops.fast attaches (a kernel removed or added must be a decision, seen here).
    assert FAST == ["conv", "conv2d", "conv_core", "conv_transpose_core", "conv_weight_grad",
                    "gelu", "layer_norm", "linear", "lstm_scan", "max_pool", "max_pool2d",
                    "max_pool2d_pad", "multi_head_attention", "relu", "rnn_scan", "softmax"]
    for name in FAST:
        prim = REGISTRY[name]
        assert prim.forward is not prim.reference_forward or prim.fast_forward is None


@pytest.fixture
def gemm_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """linear's SciPy GEMM path whatever this machine's OpenBLAS core (``fast_blas.gemm_pays``
    picks it on the AVX-512 cores only)."""
    pytest.importorskip("scipy.linalg")
    monkeypatch.setattr(fast_blas, "FORCE_GEMM", True)


@pytest.mark.parametrize("shape", [(128, 784, 512), (64, 512, 512), (256, 64, 256)])
def test_linear_fast_gemm_equals_reference(shape: tuple[int, int, int], gemm_path: None) -> None:
    rows, fan_in, fan_out = shape
    assert rows * fan_in * fan_out >= fast_linalg.MIN_WORK  # (the GEMM path, not the fallback)
    rng = np.random.default_rng(rows)
    w = rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)
    b, x = rng.standard_normal(fan_out), rng.standard_normal((rows, fan_in))
    _agree("linear", [w, b, x], {})
    for dtype in ("float32", "float64"):
        args = [a.astype(dtype) for a in (w, b, x)]
        want = REGISTRY["linear"].reference_forward(*args)
        with fast_kernels(True):
            got = REGISTRY["linear"].forward(*args)
        assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=FAST_RTOL[dtype],
                                   atol=FAST_RTOL[dtype] * float(np.abs(want).max()))
        assert not np.shares_memory(got, args[1])  # a fresh output, the bias untouched
        assert np.array_equal(args[1], b.astype(dtype))


def test_verify_fast_column_check_on_the_linear_gemm_path(gemm_path: None) -> None:
    # linear's registry samples are below MIN_WORK (a sample above it makes the other verify
    # columns take minutes), so verify's fast column sees the fallback there; its check runs
    # here on the GEMM path: forward and VJP within FAST_RTOL, then the link bitwise.
    rng = np.random.default_rng(7)
    sample = Sample((rng.standard_normal((32, 512)) / 16, rng.standard_normal(32),
                     rng.standard_normal((128, 512))))
    assert 128 * 32 * 512 >= fast_linalg.MIN_WORK
    worst = check_fast(REGISTRY["linear"], sample, rng)
    # Not 0: with 512 inputs OpenBLAS adds C (the bias) before the last block of the sum, not
    # after it, so the GEMM path's bits differ (0 would mean the reference ran on both sides).
    assert 0.0 < worst < FAST_RTOL["float32"]


@pytest.mark.parametrize("core", ["Haswell", "SkylakeX", None])
def test_linear_gemm_path_chosen_by_the_openblas_core(core: str | None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """SciPy's GEMM runs on the AVX-512 cores (measured faster there), not on the AVX2 Haswell
    kernels (measured slower: there the reference runs, its bits exactly); an unknown core
    keeps the GEMM. The choice is made once, never by timing (at one thread: with NumPy's
    BLAS on more, its matmul runs, ``test_fast_update``)."""
    pytest.importorskip("scipy.linalg")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(fast_blas, "_gemm_core", core)
    assert fast_blas.FORCE_GEMM is None
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((512, 784), (512,), (128, 784))]
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        want = REGISTRY["linear"].reference_forward(*args)
        with fast_kernels(True):
            got = REGISTRY["linear"].forward(*args)
    pays = core != "Haswell"
    assert fast_blas.gemm_pays() is pays
    # 784 inputs: past one block of the sum, the GEMM path's bits differ from the reference's.
    assert np.array_equal(got, want) is not pays
    np.testing.assert_allclose(got, want, rtol=FAST_RTOL["float32"],
                               atol=FAST_RTOL["float32"] * float(np.abs(want).max()))
    monkeypatch.setattr(fast_blas, "FORCE_GEMM", False)
    assert not fast_blas.gemm_pays()


def test_linear_fast_falls_back_to_the_reference_bits() -> None:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    cases = [(w[:10], b[:10], x),                       # too small to pay for the call
             (w, b, x.T.copy().T),                      # an F-ordered input
             (w, b, np.stack([x, x])),                  # a stacked (3-D) input
             (w, b.astype(np.float64), x)]              # mixed dtypes
    for args in cases:
        want = REGISTRY["linear"].reference_forward(*args)
        with fast_kernels(True):
            got = REGISTRY["linear"].forward(*args)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("case", range(8))
def test_conv_fast_equals_reference_on_random_geometry(case: int) -> None:
    rng = np.random.default_rng(100 + case)
    d = (1, 2, 3, 2, 2, 2, 1, 2)[case]
    batched = case % 3 != 2
    cin, cout = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    k = tuple(int(v) for v in rng.integers(1, 4, size=d))
    s = tuple(int(v) for v in rng.integers(1, 3, size=d))
    p = tuple(int(rng.integers(0, kk)) for kk in k)
    spatial = tuple(int(kk + rng.integers(1, 5)) for kk in k)
    x = rng.standard_normal(((2,) if batched else ()) + (cin,) + spatial)
    w = rng.standard_normal((cout, cin) + k)
    b = rng.standard_normal(cout)
    _agree("conv", [w, b, x], {"stride": s, "padding": p}, case)
    _agree("conv_core", [w, x], {"stride": s, "padding": p}, case)
    # The transposed convolution's core (conv's input gradient), with output padding.
    wt = rng.standard_normal((cin, cout) + k)
    op = tuple(int(rng.integers(0, ss)) for ss in s)
    y = rng.standard_normal(((2,) if batched else ()) + (cin,) + spatial)
    _agree("conv_transpose_core", [wt, y], {"stride": s, "padding": p, "output_padding": op},
           case)


def test_conv_fast_on_an_empty_batch() -> None:
    rng = np.random.default_rng(9)
    w, b = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    _agree("conv2d", [w, b, np.zeros((0, 2, 5, 5))], {"stride": 1, "padding": 1})


def _channels_last(a: np.ndarray) -> np.ndarray:
    """The same (N, C, H, W) values stored (N, H, W, C)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _is_channels_last(a: np.ndarray) -> bool:
    return bool(a.transpose(0, 2, 3, 1).flags.c_contiguous)


@pytest.mark.parametrize("cin,k,p,layout", [
    (1, (3, 3), (1, 1), "nchw"),   # few channels in (N, C, H, W) order: the row-order columns
    (5, (3, 3), (1, 1), "nchw"),
    (5, (3, 3), (1, 1), "last"),   # a channels-last input: the channels-last columns
    (2, (2, 3), (0, 2), "last"),   # uneven kernel, padding up to k - 1
    (6, (5, 5), (2, 0), "nchw"),
    (3, (1, 1), (0, 0), "last"),   # 1x1: the columns must not alias the input
])
def test_conv2d_fast_channels_last_paths_equal_reference(cin: int, k: tuple[int, int],
                                                         p: tuple[int, int],
                                                         layout: str) -> None:
    # Stride 1: the input gradient is the flat-grid transposed convolution; every route of the
    # columns (row order for few (N, C, H, W) channels, channels-last otherwise) and the fused
    # bias (a column of ones) against the reference, forward and all three gradients.
    rng = np.random.default_rng(cin + sum(k) + sum(p))
    x = rng.standard_normal((3, cin, 6, 7))
    x = _channels_last(x) if layout == "last" else x
    w = rng.standard_normal((4, cin) + k)
    b = rng.standard_normal(4)
    _agree("conv2d", [w, b, x], {"stride": 1, "padding": p})
    _agree("conv_core", [w, x], {"stride": 1, "padding": p})
    _agree("conv_transpose_core", [rng.standard_normal((cin, 4) + k), x],
           {"stride": 1, "padding": p, "output_padding": 0})
    with fast_kernels(True):
        out = REGISTRY["conv2d"].forward(w, b, x, stride=1, padding=p)
        assert _is_channels_last(out)  # the GEMM's result, not a transposed copy
        g = _channels_last(rng.standard_normal(out.shape))
        # The bias gradient alone (one GEMV) and with the kernel's (the GEMM's ones column).
        alone = REGISTRY["conv2d"].vjp(ARRAY_OPS, g, [w, b, x], out, stride=1, padding=p,
                                       needed=(False, True, False))
        both = REGISTRY["conv2d"].vjp(ARRAY_OPS, g, [w, b, x], out, stride=1, padding=p,
                                      needed=(True, True, True))
    assert alone[0] is None and alone[2] is None
    want = g.sum(axis=(0, 2, 3))
    np.testing.assert_allclose(alone[1], want, rtol=1e-10)
    np.testing.assert_allclose(both[1], want, rtol=1e-10)
    assert not np.shares_memory(both[0], x) and both[0].flags.c_contiguous
    del out


def test_conv2d_fast_with_a_bias_of_another_dtype() -> None:
    # No fused column when the bias's dtype differs: the result's dtype is NumPy's promotion,
    # as the reference's.
    rng = np.random.default_rng(8)
    w, x = rng.standard_normal((2, 3, 3, 3)).astype(np.float32), rng.standard_normal((2, 3, 5, 5))
    x = x.astype(np.float32)
    b = rng.standard_normal(2)
    want = REGISTRY["conv2d"].reference_forward(w, b, x, stride=1, padding=1)
    with fast_kernels(True):
        got = REGISTRY["conv2d"].forward(w, b, x, stride=1, padding=1)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_cnn_chain_stays_channels_last_and_pools_bitwise() -> None:
    # conv -> relu -> max pool -> conv: the pooled activation keeps the convolution's layout
    # (no transposing copy between the layers), and the pooling is bitwise the reference's
    # (maxima and first-maximum routing) whatever the layouts of its input and cotangent.
    rng = np.random.default_rng(12)
    w1, b1 = rng.standard_normal((4, 1, 3, 3)), rng.standard_normal(4)
    x = rng.standard_normal((2, 1, 8, 8))
    attrs = {"kernel_size": 2}
    with fast_kernels(True):
        h = np.maximum(REGISTRY["conv2d"].forward(w1, b1, x, stride=1, padding=1), 0.0)
        pooled = REGISTRY["max_pool2d"].forward(h, **attrs)
        assert _is_channels_last(h) and _is_channels_last(pooled)
        for g in (rng.standard_normal(pooled.shape), _channels_last(
                rng.standard_normal(pooled.shape))):
            got = REGISTRY["max_pool2d"].vjp(ARRAY_OPS, g, [h], pooled, **attrs)[0]
            assert _is_channels_last(got)
            want = REGISTRY["max_pool2d"].reference_vjp(ARRAY_OPS, g, [h], pooled, **attrs)[0]
            assert np.array_equal(got, want)
    assert np.array_equal(pooled, REGISTRY["max_pool2d"].reference_forward(h, **attrs))


@pytest.mark.parametrize("attrs", [
    {"kernel_size": 2},
    {"kernel_size": (3, 2), "stride": (1, 2)},
    {"kernel_size": 3, "stride": 2, "padding": 1},
])
def test_max_pool_fast_equals_reference_with_ties(attrs: dict[str, Any]) -> None:
    rng = np.random.default_rng(7)
    x = np.maximum(rng.standard_normal((2, 3, 7, 8)), 0.0)  # relu'd: many tied zeros
    name = "max_pool" if "padding" in attrs else "max_pool2d"
    _agree(name, [x], attrs)
    # Ties go to the first maximum on both sides: bitwise, not just close.
    v = rng.standard_normal(_record(name, [x], attrs, None, "float64")[0].shape)
    want = _record(name, [x], attrs, v, "float64")
    with fast_kernels(True):
        got = _record(name, [x], attrs, v, "float64")
    for a, e in zip(got, want, strict=True):
        assert np.array_equal(a, e)


@pytest.mark.parametrize("batched,masked", [(True, False), (False, True), (True, True)])
def test_attention_fast_equals_reference(batched: bool, masked: bool) -> None:
    rng = np.random.default_rng(3)
    n, dm, heads = 5, 8, 2
    ws = [rng.standard_normal((dm, dm)) * 0.4 for _ in range(4)]
    x = rng.standard_normal(((3,) if batched else ()) + (n, dm))
    mask = np.tril(np.ones((n, n), dtype=bool)) if masked else None
    if masked:
        mask[2] = False  # a fully masked row: output and gradient 0 on both sides
    _agree("multi_head_attention", [*ws, x], {"num_heads": heads, "mask": mask})


@pytest.mark.parametrize("shape", [(6,), (4, 7), (2, 3, 5)])
def test_layer_norm_fast_equals_reference(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    d = shape[-1]
    _agree("layer_norm", [rng.standard_normal(shape) * 3 + 1, rng.standard_normal(d),
                          rng.standard_normal(d)], {"eps": 1e-5})


def test_dispatch_is_reference_by_default_and_restored() -> None:
    assert KERNELS.fast is False
    with fast_kernels(True):
        assert KERNELS.fast is True
        with fast_kernels(False):
            assert KERNELS.fast is False
        assert KERNELS.fast is True
    assert KERNELS.fast is False
    with pytest.raises(RuntimeError), fast_kernels(True):
        raise RuntimeError("restored on the way out")
    assert KERNELS.fast is False


def test_attach_twice_is_refused() -> None:
    with pytest.raises(TypeError, match="already attached"):
        attach_fast("conv2d", forward=lambda *a, **k: None)
    assert REGISTRY["tanh"].fast_forward is None


def test_residual_miss_gives_the_same_bits_and_entries_go_with_arrays() -> None:
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    x = rng.standard_normal((2, 3, 6, 6))
    g = rng.standard_normal((2, 4, 6, 6))
    prim = REGISTRY["conv2d"]
    attrs = {"stride": 1, "padding": 1}
    with fast_kernels(True):
        out = prim.forward(w, b, x, **attrs)  # keeps x's im2col matrix against ``out``
        assert residuals.size() == 1
        hit = prim.vjp(ARRAY_OPS, g, [w, b, x], out, **attrs)
        miss = prim.vjp(ARRAY_OPS, g, [w, b, x], out.copy(), **attrs)  # another array: misses
        for a, e in zip(hit, miss, strict=True):
            assert np.array_equal(a, e)
        del out
        gc.collect()
        assert residuals.size() == 0  # gone with its array
        kept = prim.forward(w, b, x, **attrs)
        assert residuals.size() == 1
    assert residuals.size() == 0  # nothing outlives the outermost block
    del kept


def test_a_refilled_input_buffer_never_meets_a_stale_matrix() -> None:
    # An input array refilled in place after a conv (as a generated plan may reuse a buffer):
    # the kernel gradient as a node of its own builds the matrix from what the array holds now.
    rng = np.random.default_rng(4)
    w, b = rng.standard_normal((2, 1, 3, 3)), np.zeros(2)
    x = rng.standard_normal((2, 1, 5, 5))
    g = rng.standard_normal((2, 2, 5, 5))
    attrs = {"kernel": (3, 3), "stride": (1, 1), "padding": (1, 1)}
    with fast_kernels(True):
        out = REGISTRY["conv2d"].forward(w, b, x, stride=1, padding=1)
        x[...] = rng.standard_normal(x.shape)
        got = REGISTRY["conv_weight_grad"].forward(g, x, **attrs)
    want = REGISTRY["conv_weight_grad"].reference_forward(g, x, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    del out


def test_device_arrays_run_the_reference() -> None:
    # The dispatcher hands anything that is not a NumPy array to the reference kernel.
    prim = REGISTRY["conv2d"]

    class NotNumpy(np.ndarray):
        pass

    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 1, 4, 4)).view(NotNumpy)
    w, b = rng.standard_normal((1, 1, 2, 2)), np.zeros(1)
    before = residuals.size()
    with fast_kernels(True):
        prim.forward(w, b, x)
    assert residuals.size() == before  # the fast kernel (which keeps a residual) did not run


@pytest.mark.parametrize("name", FAST)
def test_verify_fast_column_passes_with_the_link_bitwise(name: str) -> None:
    prim = REGISTRY[name]
    rng = np.random.default_rng(5)
    samples = prim.samples(np.random.default_rng(0))
    for s in samples[:2]:
        check_fast(prim, s, rng)  # raises Mismatch on a difference or a broken link
    result = column_fast(prim, samples, VerifySettings.make(quick=True))
    assert result.status == "pass", result.detail


def test_verify_fast_column_is_na_without_a_fast_kernel() -> None:
    result = column_fast(REGISTRY["tanh"], [Sample((np.ones(3),))],
                         VerifySettings.make(quick=True))
    assert result.status == "n/a"


def _cnn(w1: Any, b1: Any, w2: Any, b2: Any, x: Any, y: Any) -> Any:
    h = F.max_pool2d(F.relu(F.conv2d(w1, b1, x, padding=1)), kernel_size=2)
    h = F.reshape(h, (h.shape[0], 4 * 4 * 4))
    return F.cross_entropy(F.linear(w2, b2, h), y)


def _train(backend: str, fast: bool, steps: int = 25) -> tuple[list[float], list[np.ndarray]]:
    rng = np.random.default_rng(11)
    params = [rng.standard_normal((4, 1, 3, 3)).astype(np.float32) * 0.5,
              np.zeros(4, np.float32),
              rng.standard_normal((3, 64)).astype(np.float32) * 0.2, np.zeros(3, np.float32)]
    x = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
    labels = (x[:, 0, :4].sum(axis=(1, 2)) > 0).astype(np.float32) + (x[:, 0, 0, 0] > 1)
    trainer = tl.ScalarTrainer(params, _cnn, tl.Options(backend=backend, fast_kernels=fast))
    losses = [trainer.step(0.2, x, labels) for _ in range(steps)]
    return losses, trainer.params()


def test_training_converges_the_same_with_fast_kernels_on_and_off() -> None:
    ref_losses, ref_params = _train("eager", False)
    assert ref_losses[-1] < 0.6 * ref_losses[0]  # it learns
    for backend in ("eager", "compiled"):
        losses, params = _train(backend, True)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-5)
        for a, e in zip(params, ref_params, strict=True):
            np.testing.assert_allclose(a, e, rtol=1e-3, atol=1e-5)
    assert KERNELS.fast is False  # the trainer's block is closed after each step


def test_options_choose_the_kernel_set_in_training() -> None:
    prim = REGISTRY["conv2d"]
    seen: list[bool] = []
    original = prim.forward

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(KERNELS.fast)
        return original(*args, **kwargs)

    prim.forward = spy  # what the tape and a graph's plan call
    try:
        for backend in ("eager", "compiled"):
            for fast in (False, True):
                seen.clear()
                _train(backend, fast, steps=1)
                assert seen and set(seen) == {fast}, (backend, fast)
    finally:
        prim.forward = original
