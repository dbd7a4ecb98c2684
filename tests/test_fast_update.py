"""SGD's in-place BLAS axpy (optim.fast_update): within the fast-kernel tolerance of the reference
update under ``fast_kernels(True)``, the reference's bits everywhere else."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.registry import FAST_RTOL, fast_kernels
from torchlean.engine import ops_interface as F
from torchlean.engine.params import Param
from torchlean.ops.fast import blas as fast_blas
from torchlean.optim import fast_update

pytest.importorskip("scipy.linalg")


def _pair(n: int, dtype: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)


def _sgd_once(p0: np.ndarray, g: np.ndarray, fast: bool, **hyper: float) -> tuple[np.ndarray,
                                                                                  bool]:
    """One SGD step from p0; returns the new value and whether the array was updated in place."""
    param = Param(p0.copy())
    before = param.array
    opt = tl.optim.SGD([param], lr=0.1, **hyper)
    with fast_kernels(fast):
        opt.step([g])
    return param.array.copy(), param.array is before


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_sgd_is_in_place_and_within_tolerance(dtype: str) -> None:
    p0, g = _pair(3 * fast_update.MIN_SIZE + 5, dtype)
    reference = p0 + (-0.1) * g
    got, in_place = _sgd_once(p0, g, fast=True)
    assert in_place
    assert got.dtype == reference.dtype
    np.testing.assert_allclose(got, reference, rtol=FAST_RTOL[dtype], atol=0)
    # It moved every entry (a dropped or half-applied update would not).
    assert np.all(np.abs(got - p0) >= 0.5 * np.abs(0.1 * g))
    # Where the product is exact (g a multiple of 1/4, lr 0.125 = 2**-3) FMA and the reference's
    # product-then-add round the same single sum: bitwise equal.
    exact = np.round(g * 4) / 4
    param = Param(p0.copy())
    with fast_kernels(True):
        tl.optim.SGD([param], lr=0.125).step([exact])
    assert np.array_equal(param.array, p0 + (-0.125) * exact)


def test_reference_update_outside_the_fast_kernels_and_for_other_cases() -> None:
    p0, g = _pair(2 * fast_update.MIN_SIZE, "float32", seed=1)
    reference = p0 + np.float32(-0.1) * g
    assert np.array_equal(_sgd_once(p0, g, fast=False)[0], reference)
    # Fast kernels on, but small or strided: the reference's bits.
    small_p, small_g = p0[:100].copy(), g[:100].copy()
    assert np.array_equal(_sgd_once(small_p, small_g, fast=True)[0],
                          small_p + np.float32(-0.1) * small_g)
    strided = np.stack([g, g], axis=1)[:, 0]
    assert not strided.flags.c_contiguous
    assert np.array_equal(_sgd_once(p0, strided, fast=True)[0], reference)
    # Momentum and weight decay make the step first; only its final add is the axpy.
    for hyper in ({"momentum": 0.9}, {"weight_decay": 0.01}):
        fast, ref = _sgd_once(p0, g, fast=True, **hyper)[0], _sgd_once(p0, g, fast=False,
                                                                       **hyper)[0]
        np.testing.assert_allclose(fast, ref, rtol=FAST_RTOL["float32"], atol=0)
        assert not np.array_equal(fast, p0)


def test_without_scipy_the_reference_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    p0, g = _pair(2 * fast_update.MIN_SIZE, "float32", seed=2)
    monkeypatch.setattr(fast_blas, "_blas", None)
    assert np.array_equal(_sgd_once(p0, g, fast=True)[0], p0 + np.float32(-0.1) * g)


def _own_scipy_pool(threadpoolctl: object) -> bool:
    return any(i["user_api"] == "blas" and "scipy" in i["filepath"]
               and "numpy" not in i["filepath"]
               for i in threadpoolctl.threadpool_info())  # type: ignore[attr-defined]


def test_scipys_own_pool_is_held_at_one_thread_and_the_axpy_yields_when_raised() -> None:
    # Two OpenBLAS pools with spinning workers on as many cores as threads wait on each other
    # (W2 at 2 threads: 19 ms a step against 4.8): SciPy's own pool stays at one thread, and a
    # step taken while something raised it runs the reference update (NumPy alone), not axpy.
    threadpoolctl = pytest.importorskip("threadpoolctl")
    fast_blas.scipy_blas()
    if not _own_scipy_pool(threadpoolctl):
        pytest.skip("this SciPy shares NumPy's BLAS: there is no second pool to hold")
    # (an earlier in-process command may have left every pool raised: start where a fresh
    # load leaves SciPy's pool, at one thread)
    fast_blas.hold_serial()
    p0, g = _pair(2 * fast_update.MIN_SIZE, "float32", seed=4)
    reference = p0 + np.float32(-0.1) * g
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        fast_blas._load()  # (a fresh load under NumPy at 2 threads)
        counts = {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if i["user_api"] == "blas"}
        assert [n for f, n in counts.items() if "numpy" not in f] == [1]
        assert fast_blas.serial()
        got, in_place = _sgd_once(p0, g, fast=True)
        assert in_place and not np.array_equal(got, p0)
        with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):  # raised again
            assert not fast_blas.serial()
            assert "reference update" in fast_blas.describe()
            assert np.array_equal(_sgd_once(p0, g, fast=True)[0], reference)
            fast_blas.hold_serial()  # (what torchlean bench does after its own limit)
            assert fast_blas.serial()
    assert fast_blas.serial()


def test_scipys_gemm_only_where_numpys_blas_is_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    # On the cores where SciPy's GEMM pays (one thread each), NumPy's matmul on a pool of 2 is
    # the faster product: gemm_now says no there, and yes again at one thread.
    threadpoolctl = pytest.importorskip("threadpoolctl")
    fast_blas.scipy_blas()
    if not _own_scipy_pool(threadpoolctl):
        pytest.skip("this SciPy shares NumPy's BLAS: its GEMM follows NumPy's threads")
    monkeypatch.setattr(fast_blas, "_gemm_core", "SkylakeX")
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        assert fast_blas.gemm_pays() and fast_blas.gemm_now()
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        fast_blas.hold_serial()
        assert fast_blas.gemm_pays() and not fast_blas.gemm_now()
    monkeypatch.setattr(fast_blas, "_gemm_core", "Haswell")
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        assert not fast_blas.gemm_now()


def test_scalar_trainer_steps_use_it_and_eager_equals_compiled() -> None:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((96, 64)) * 0.1).astype(np.float32)  # 6,144 entries: fast path
    b = np.zeros(96, np.float32)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    y = (np.arange(16) % 96).astype(np.float32)

    def loss(w_: object, b_: object, x_: object, y_: object) -> object:
        return F.cross_entropy(F.linear(w_, b_, x_), y_)

    finals = []
    for backend in ("eager", "compiled"):
        trainer = tl.ScalarTrainer([w.copy(), b.copy()], loss, tl.Options(backend=backend))
        for _ in range(3):
            trainer.step(0.5, x, y)
        finals.append([np.array(p) for p in trainer.params()])
    for a, c in zip(*finals, strict=True):
        assert np.array_equal(a, c)
    # The reference update from the same gradients lands within the tolerance of the fast one.
    ref = tl.ScalarTrainer([w.copy(), b.copy()], loss,
                           tl.Options(backend="eager", fast_kernels=False))
    for _ in range(3):
        ref.step(0.5, x, y)
    np.testing.assert_allclose(finals[0][0], np.array(ref.params()[0]), rtol=1e-5, atol=1e-6)
    assert not np.array_equal(finals[0][0], w)


def test_describe_names_the_gemm_library_without_loading_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What ``torchlean bench`` prints as the fast kernels' GEMM: unloaded, absent, loaded.
    monkeypatch.setattr(fast_blas, "_blas", fast_blas._UNLOADED)
    assert "not loaded" in fast_blas.describe()
    assert fast_blas._blas is fast_blas._UNLOADED  # describing loads nothing
    monkeypatch.setattr(fast_blas, "_blas", None)
    assert "NumPy's matmul" in fast_blas.describe()
    monkeypatch.setattr(fast_blas, "_blas", fast_blas._load())
    threadpoolctl = pytest.importorskip("threadpoolctl")
    scipy_libs = [i for i in threadpoolctl.threadpool_info()
                  if i["user_api"] == "blas" and "scipy" in i["filepath"]
                  and "numpy" not in i["filepath"]]
    if scipy_libs:  # (a SciPy sharing NumPy's BLAS has none of its own to name)
        assert str(scipy_libs[0]["version"]) in fast_blas.describe()
