"""The compiled max pooling loops (``ops.fast.pool_jit``, numba): taken where they apply, the
NumPy kernels' bits on the shapes training meets (planted NaN, infinities, signed zeros and
ties), and never loaded where they do not pay (``import torchlean``, small poolings,
``TORCHLEAN_NUMBA=0``). ``test_fast_conv_pool`` runs the reference-bitwise tests through both
paths."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from torchlean.core.registry import ARRAY_OPS, REGISTRY, fast_kernels
from torchlean.ops.fast import pool as fast_pool
from torchlean.ops.fast import pool_jit


def _special_channels_last(rng: np.random.Generator, shape: tuple[int, ...],
                           dtype: str) -> np.ndarray:
    """A relu'd (N, C, H, W) activation stored channels-last, with specials planted."""
    n, c, h, w = shape
    x = np.maximum(rng.standard_normal((n, h, w, c)), 0.0).astype(dtype)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=(5, flat.size // 50), replace=False)
    flat[picks[0]] = -0.0
    flat[picks[1]] = np.nan
    flat[picks[2]] = -np.inf
    flat[picks[3]] = np.inf
    flat[picks[4]] = 1.25
    return x.transpose(0, 3, 1, 2)


def _numpy_path(monkeypatch: pytest.MonkeyPatch, fn, *args):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setattr(pool_jit, "MIN_SIZE", 1 << 62)
        return fn(*args)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,k,s", [
    ((32, 16, 28, 28), (2, 2), (2, 2)),   # W3's first pooling
    ((32, 32, 14, 14), (2, 2), (2, 2)),   # its second
    ((4, 24, 33, 31), (2, 2), (2, 2)),    # ragged edges: the forward's loops only
])
def test_loops_give_the_numpy_kernels_bits(dtype: str, shape: tuple[int, ...],
                                           k: tuple[int, int], s: tuple[int, int],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(sum(shape))
    x = _special_channels_last(rng, shape, dtype)
    assert x.size >= pool_jit.MIN_SIZE and pool_jit.kernels() is not None
    p = (0, 0)
    with np.errstate(invalid="ignore"):
        compiled = pool_jit.forward(x, k, s, p)
        assert compiled is not None  # a large channels-last pooling takes the loops
        best, code = fast_pool._forward(x, k, s, p)
        want_best, want_code = _numpy_path(monkeypatch, fast_pool._forward, x, k, s, p)
        assert best.strides == want_best.strides  # the input's layout kept, as NumPy's
        assert best.tobytes() == want_best.tobytes()
        assert np.array_equal(code, want_code)
        assert (code == 255).any() and (code > 0).any()  # the specials reached some windows
        g = rng.standard_normal(best.shape).astype(dtype).transpose(0, 2, 3, 1).copy()
        g = g.transpose(0, 3, 1, 2)
        g.reshape(-1)[::11] = np.inf  # g * 0.0 is NaN: the non-winners' factor must match
        g[0, 0, 0, :] = -1.0          # and -0.0 from negative cotangents
        for positive in (False, True):
            got = fast_pool._backward(x, g, best, k, s, p, code, positive)
            want = _numpy_path(monkeypatch, fast_pool._backward, x, g, best, k, s, p, code,
                               positive)
            assert got.shape == want.shape == x.shape
            assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
    if shape[2] % 2 == 0 and shape[3] % 2 == 0:  # the VJP's loops need tiling windows
        assert pool_jit.backward(x, g, best, code, k, False) is not None


def test_loops_decline_what_they_do_not_cover(monkeypatch: pytest.MonkeyPatch) -> None:
    """(N, C, H, W)-ordered, padded, other windows, integer, strided and small inputs go to the
    NumPy kernels."""
    rng = np.random.default_rng(3)
    assert pool_jit.kernels() is not None  # (loaded: the forwards below may use them)
    big = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)  # (N, C, H, W) order
    assert pool_jit.forward(big, (2, 2), (2, 2), (0, 0)) is None
    last = np.ascontiguousarray(big.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    assert pool_jit.forward(last, (2, 2), (2, 2), (0, 0)) is not None
    assert pool_jit.forward(last, (2, 2), (2, 2), (1, 1)) is None
    assert pool_jit.forward(last, (3, 3), (2, 2), (0, 0)) is None
    assert pool_jit.forward(last, (2, 2), (1, 1), (0, 0)) is None
    assert pool_jit.forward(last.astype(np.int32), (2, 2), (2, 2), (0, 0)) is None
    small = np.ascontiguousarray(last[:1, :, :8, :8].transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    assert pool_jit.forward(small, (2, 2), (2, 2), (0, 0)) is None
    assert pool_jit.forward(last[:, :, :31, :31], (2, 2), (2, 2), (0, 0)) is None  # a strided view
    monkeypatch.setattr(pool_jit, "MIN_SIZE", 0)
    assert pool_jit.forward(small, (2, 2), (2, 2), (0, 0)) is not None


def test_training_step_routes_through_the_loops_and_matches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A relu -> max pool -> sum chain under the fast kernels: value and input gradient equal
    to the NumPy kernels' on a W3-sized channels-last activation."""
    rng = np.random.default_rng(7)
    c = _special_channels_last(rng, (32, 16, 28, 28), "float32") - np.float32(0.3)
    prim = REGISTRY["max_pool2d"]
    calls = []
    real = pool_jit.kernels()
    assert real is not None
    monkeypatch.setattr(pool_jit, "_kernels", (
        lambda *a: (calls.append("f"), real[0](*a))[1],
        lambda *a: (calls.append("b"), real[1](*a))[1]))

    def step() -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore"), fast_kernels(True):
            x = np.maximum(c, np.float32(0))
            out = prim.forward(x, kernel_size=2)
            g = np.ones_like(out)
            return out, prim.vjp(ARRAY_OPS, g, [x], out, kernel_size=2)[0]

    out, dx = step()
    assert calls == ["f", "b"]
    want_out, want_dx = _numpy_path(monkeypatch, step)
    assert calls == ["f", "b"]  # (not called again on the NumPy path)
    assert out.tobytes() == want_out.tobytes()
    assert np.ascontiguousarray(dx).tobytes() == np.ascontiguousarray(want_dx).tobytes()


def _fresh(code: str, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True, timeout=600)
    return proc.stdout.strip()


def test_numba_is_loaded_only_where_it_pays() -> None:
    """``import torchlean``, a large relu, a small pooling's forward and VJP, and a large
    pooling's forward (inference) leave numba unloaded; a large pooling's VJP (training) loads
    it, and the next forward then runs the loops; ``TORCHLEAN_NUMBA=0`` keeps the NumPy kernels
    throughout."""
    code = (
        "import sys, numpy as np, torchlean\n"
        "from torchlean.core.registry import ARRAY_OPS, REGISTRY, fast_kernels\n"
        "from torchlean.ops.fast import pool_jit\n"
        "prim = REGISTRY['max_pool2d']\n"
        "seen = ['numba' in sys.modules]\n"
        "with fast_kernels(True):\n"
        "    REGISTRY['relu'].forward(np.ones((64, 16, 28, 28), np.float32))\n"
        "seen.append('numba' in sys.modules)\n"
        "for n in (2, 64):\n"
        "    x = np.ones((n, 28, 28, 16), np.float32).transpose(0, 3, 1, 2)\n"
        "    with fast_kernels(True):\n"
        "        out = prim.forward(x, kernel_size=2)\n"
        "        seen.append('numba' in sys.modules)\n"
        "        prim.vjp(ARRAY_OPS, np.ones_like(out), [x], out, kernel_size=2)\n"
        "        seen.append('numba' in sys.modules)\n"
        "seen.append(pool_jit.forward(x, (2, 2), (2, 2), (0, 0)) is not None)\n"
        "print(seen)\n")
    assert _fresh(code) == "[False, False, False, False, False, True, True]"
    assert _fresh(code, TORCHLEAN_NUMBA="0") == (
        "[False, False, False, False, False, False, False]")


def test_verify_fast_column_runs_the_loops_and_catches_a_wrong_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``torchlean verify``'s fast column takes max_pool2d's tiled sample through the loops (on
    a channels-last copy) and fails when they route the gradient to the wrong cell."""
    from torchlean.verify.checks import Settings, column_fast
    from torchlean.verify.report import FAIL, PASS

    prim = REGISTRY["max_pool2d"]
    samples = prim.samples(np.random.default_rng(0))
    real = pool_jit.kernels()
    assert real is not None
    calls: list[str] = []

    def spy_forward(*a: object) -> None:
        calls.append("f")
        real[0](*a)

    def spy_backward(*a: object) -> None:
        calls.append("b")
        real[1](*a)

    monkeypatch.setattr(pool_jit, "_kernels", (spy_forward, spy_backward))
    assert column_fast(prim, samples, Settings.make(quick=True)).status == PASS
    assert "f" in calls and "b" in calls

    def wrong_backward(g, code, best, positive, dx):  # type: ignore[no-untyped-def]
        real[1](g, (code + 1) % 4, best, positive, dx)  # every window routed one cell on

    monkeypatch.setattr(pool_jit, "_kernels", (real[0], wrong_backward))
    assert column_fast(prim, samples, Settings.make(quick=True)).status == FAIL


@pytest.mark.parametrize("path", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4, 8, 12, 10), (3, 5, 9, 7)])  # tiled; ragged edges
def test_relu_fused_pool_forward_gives_the_two_calls_bits(
        path: str, dtype: str, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """``relu_max_forward(c)`` and the relu-fused VJP handed ``c`` (what generated code runs
    after the forward peephole) against ``max_pool(relu(c))`` and the VJP handed ``relu(c)``:
    the same pooled values and the same gradient bits, with NaN, infinities, signed zeros and
    windows whose maximum is 0 or negative (where the loops' codes differ, unrouted), through
    the compiled loops and without them."""
    monkeypatch.setattr(pool_jit, "MIN_SIZE", 0 if path == "numba" else 1 << 62)
    assert pool_jit.kernels() is not None
    rng = np.random.default_rng(sum(shape))
    c = _special_channels_last(rng, shape, dtype) - np.asarray(0.6, dtype)
    c.reshape(-1)[::13] = -0.0
    c[0, 0, :4, :4] = -1.0  # whole windows below 0
    name, attrs = "max_pool2d", {"kernel_size": 2}
    prim = REGISTRY[name]
    with np.errstate(invalid="ignore"), fast_kernels(True):
        x = REGISTRY["relu"].forward(c)
        want_p = prim.forward(x, **attrs)
        g = rng.standard_normal(want_p.shape).astype(dtype)
        g.reshape(-1)[::5] = -np.inf
        g.reshape(-1)[1::5] = -1.0
        want = fast_pool.RELU_FUSED[name](g, x, want_p, **attrs)
        p = fast_pool.RELU_FUSED_FORWARD[name](c, **attrs)
        got = fast_pool.RELU_FUSED[name](g, c, p, **attrs)
    assert p.tobytes() == want_p.tobytes() and p.strides == want_p.strides
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


def _small_cnn(w: Any, b: Any, w2: Any, b2: Any, x: Any, y: Any, *, extra: bool) -> Any:
    import torchlean.engine.ops_interface as F

    h = F.relu(F.conv2d(w, b, x, padding=1))
    p = F.max_pool2d(h, kernel_size=2)
    loss = F.cross_entropy(F.linear(w2, b2, F.reshape(p, (p.shape[0], 6 * 6 * 6))), y)
    return F.add(loss, F.mean(h)) if extra else loss  # extra: relu's value used elsewhere


@pytest.mark.parametrize("extra", [False, True])
def test_generated_plan_fuses_relu_into_the_pooling_and_keeps_the_bits(extra: bool) -> None:
    """A compiled conv -> relu -> max pool step: the generated plan calls the relu-fused
    pooling forward and no relu (only where relu's value feeds nothing else), and returns the
    interpreted plan's bits; many windows are all negative (a negative bias)."""
    import functools

    import torchlean as tl

    rng = np.random.default_rng(2)
    params = [rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.5,
              np.full(6, -0.8, np.float32),
              rng.standard_normal((4, 216)).astype(np.float32) * 0.1, np.zeros(4, np.float32)]
    x = rng.standard_normal((16, 3, 12, 12)).astype(np.float32)
    y = rng.integers(0, 4, 16).astype(np.float32)
    loss = functools.partial(_small_cnn, extra=extra)
    c = tl.compile(lambda *a: loss(*a), *[p.shape for p in params], x.shape, y.shape,
                   wrt=tuple(range(4)))
    with fast_kernels(True), pool_jit.every_size():
        c.codegen = False
        ref_value, ref_grads = c.value_and_backward(*params, x, y)
        c.codegen = True
        for _ in range(3):
            value, grads = c.value_and_backward(*params, x, y)
            assert np.asarray(value).tobytes() == np.asarray(ref_value).tobytes()
            assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
                       for a, b in zip(grads, ref_grads, strict=True))
    plans = [p for p in c._generated.values() if hasattr(p, "source")]
    assert len(plans) == 1
    glob = plans[0].fn.__globals__
    fused = any(v is fast_pool.RELU_FUSED_FORWARD["max_pool2d"] for v in glob.values())
    assert fused is not extra


def test_a_failing_loop_falls_back_to_numpy_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A numba that cannot compile or run a loop switches the loops off for the process (one
    RuntimeWarning) and the pooling still returns NumPy's result."""
    rng = np.random.default_rng(4)
    x = _special_channels_last(rng, (32, 16, 28, 28), "float32")
    with np.errstate(invalid="ignore"):
        want_best, want_code = _numpy_path(monkeypatch, fast_pool._forward, x, (2, 2), (2, 2),
                                           (0, 0))

    def broken(*a: object) -> None:
        raise TypeError("cannot compile for this NumPy")

    monkeypatch.setattr(pool_jit, "_kernels", (broken, broken))
    with pytest.warns(RuntimeWarning, match="numba loops switched off"), \
            np.errstate(invalid="ignore"):
        best, code = fast_pool._forward(x, (2, 2), (2, 2), (0, 0))
    assert best.tobytes() == want_best.tobytes() and np.array_equal(code, want_code)
    assert pool_jit.kernels() is None  # off for the rest of the process (until reloaded)


def test_a_read_only_install_compiles_without_the_disk_cache(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """numba refuses ``cache=True`` where no cache directory is writable; the loops are then
    compiled without it instead of failing."""
    import numba

    real_njit = numba.njit

    def njit(*args: Any, **kw: Any) -> Any:
        if kw.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return real_njit(*args, **kw)

    monkeypatch.setattr(numba, "njit", njit)
    monkeypatch.setattr(pool_jit, "_kernels", pool_jit._UNLOADED)
    loops = pool_jit.kernels()
    assert loops is not None
    x = np.ones((1, 4, 4, 2), np.float32)
    best, code = np.empty((1, 2, 2, 2), np.float32), np.empty((1, 2, 2, 2), np.uint8)
    loops[0](x, False, best, code)
    assert (best == 1).all() and (code == 0).all()


def test_describe_says_whether_the_loops_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's report line: loaded, not yet loaded, switched off, or turned off."""
    assert pool_jit.kernels() is not None
    assert "loaded" in pool_jit.describe() and "not loaded" not in pool_jit.describe()
    monkeypatch.setattr(pool_jit, "_kernels", pool_jit._UNLOADED)
    assert "not loaded" in pool_jit.describe()
    monkeypatch.setattr(pool_jit, "_kernels", None)
    assert "switched off" in pool_jit.describe()
    monkeypatch.setenv("TORCHLEAN_NUMBA", "0")
    assert pool_jit.describe().startswith("off")


def _special_dense(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Normal entries with NaNs of both signs, infinities, signed zeros and subnormals planted."""
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    tiny = np.finfo(dtype).smallest_subnormal
    for k, v in enumerate((-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, tiny, -tiny)):
        flat[k::53] = v
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["channels_last", "c_order", "flat"])
def test_relu_loop_gives_numpys_maximum_bits(dtype: str, layout: str) -> None:
    """``pool_jit.relu`` and relu's fast forward: NumPy's ``maximum(x, 0)`` bit for bit (NaNs
    of either sign keep their bits, -0.0 and negatives give +0.0), in the input's layout."""
    rng = np.random.default_rng(11)
    assert pool_jit.kernels() is not None
    if layout == "channels_last":
        x = _special_dense(rng, (32, 28, 28, 16), dtype).transpose(0, 3, 1, 2)
    elif layout == "c_order":
        x = _special_dense(rng, (32, 16, 14, 14), dtype)
    else:
        x = _special_dense(rng, (100_000,), dtype)
    assert x.size >= pool_jit.MIN_SIZE
    want = np.maximum(x, np.zeros((), dtype))
    got = pool_jit.relu(x)
    assert got is not None
    with fast_kernels(True):
        through = REGISTRY["relu"].forward(x)
    for y in (got, through):
        assert y.dtype == want.dtype and y.strides == want.strides
        assert y.tobytes(order="A") == want.tobytes(order="A")
        assert np.ascontiguousarray(y).tobytes() == np.ascontiguousarray(want).tobytes()


def test_relu_loop_declines_what_it_does_not_cover(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strided, integer and small arrays, and a process whose loops are not loaded, take
    NumPy's maximum (the reference), which the fast forward then returns."""
    rng = np.random.default_rng(12)
    assert pool_jit.kernels() is not None
    x = rng.standard_normal((32, 16, 28, 28)).astype(np.float32)
    assert pool_jit.relu(x[:, ::2]) is None
    assert pool_jit.relu(x.astype(np.int32)) is None
    assert pool_jit.relu(x[:1, :1]) is None
    assert pool_jit.relu(x.transpose(3, 1, 2, 0)) is None  # dense, in another order
    with fast_kernels(True):
        y = REGISTRY["relu"].forward(x[:, ::2])
    assert np.array_equal(y, np.maximum(x[:, ::2], 0))
    monkeypatch.setattr(pool_jit, "_kernels", None)
    assert pool_jit.relu(x) is None
