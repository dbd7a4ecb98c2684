"""Random bits on the device, the registry's device-kernel check, and device attribute uploads.

SplitMix64 is computed where the draw is used: on the strict stand-in device (``strict_device``)
the uint64 words, the float32/float64 uniforms and the Bernoulli masks must equal the CPU's bit
for bit, with no upload at all (a host draw uploaded would count one). ``rand_uniform`` and
``bernoulli_mask`` have no CuPy-only branch, so the stand-in runs the very code CuPy runs.

Also here: ``registry.check_device_kernel`` (an op without a device kernel is a ``DeviceError``
naming it on a device, never a host fallback), ``registry.device_constant`` (a static mask or
index attribute is uploaded once, and again only when its contents change), and the device
``erf`` (fdlibm's algorithm written with array operations) against the C library's.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pytest
from strict_device import StrictArray, strict_cuda

from torchlean.core.backend import is_cupy, to_device, to_host
from torchlean.core.errors import DeviceError, DomainError
from torchlean.core.registry import (
    REGISTRY,
    Primitive,
    Sample,
    check_device_kernel,
    device_constant,
    same_shape,
)
from torchlean.core.rng import Generator
from torchlean.ops import random as rnd
from torchlean.ops.general import _erf, erf_array

CASES = [((3, 4), 0, 0), ((7,), 7, 3), ((2, 3, 5), 2**31 - 1, 11), ((1000,), 123456789, 0),
         ((0,), 5, 1), ((), 9, 2), ((64, 33), 2**63 + 5, 2**64 - 1)]


def _host(x: Any) -> np.ndarray:
    assert isinstance(x, StrictArray), f"expected a device array, found {type(x).__name__}"
    return to_host(x)


@pytest.mark.parametrize(("shape", "seed", "counter"), CASES)
def test_uniform_bits_on_the_device_equal_the_cpu_without_uploads(
        shape: tuple[int, ...], seed: int, counter: int) -> None:
    want = rnd.uniform_bits(shape, seed, counter)
    with strict_cuda() as xp:
        got = rnd.uniform_bits(shape, seed, counter, xp)
        assert xp.transfers.uploads == 0
        host = _host(got)
    assert host.dtype == np.uint64 and host.shape == shape
    np.testing.assert_array_equal(host, want)


def test_splitmix64_on_the_device_matches_the_integer_reference() -> None:
    words = [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15, 12345678901234567]
    with strict_cuda() as xp:
        dev = to_device(np.array(words, dtype=np.uint64), xp)  # the one upload: the inputs
        out = _host(rnd.splitmix64(dev))
        assert xp.transfers.uploads == 1
    assert [int(v) for v in out] == [rnd.splitmix64_int(w) for w in words]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "seed", "counter"), CASES)
def test_rand_uniform_on_the_device_equals_the_cpu(shape: tuple[int, ...], seed: int,
                                                   counter: int, dtype: str) -> None:
    prim = REGISTRY["rand_uniform"]
    attrs = prim.check_attrs({"shape": shape, "seed": seed, "counter": counter, "dtype": dtype})
    want = prim.forward(**attrs)
    with strict_cuda() as xp:
        got = prim.forward(**attrs, xp=xp)
        assert xp.transfers.uploads == 0
        host = _host(got)
    assert host.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(host, want)
    assert host.size == 0 or (host.min() >= 0 and host.max() <= 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keep", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize(("shape", "seed", "counter"), CASES[:5])
def test_bernoulli_mask_draws_on_keep_probs_device(shape: tuple[int, ...], seed: int,
                                                   counter: int, keep: float,
                                                   dtype: Any) -> None:
    prim = REGISTRY["bernoulli_mask"]
    attrs = {"shape": shape, "seed": seed, "counter": counter}
    want = prim.forward(np.array(keep, dtype=dtype), **attrs)
    with strict_cuda() as xp:
        keep_prob = xp.full((), keep, dtype=dtype)  # made on the device: nothing to upload
        got = prim.forward(keep_prob, **attrs)
        assert xp.transfers.uploads == 0
        host = _host(got)
    assert host.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(host, want)
    if keep in (0.0, 1.0) and host.size:
        assert (host == keep).all()  # u lies in [0, 1): keep 1 keeps all, keep 0 drops all


def test_generator_draws_on_the_device_follow_the_same_stream() -> None:
    cpu, dev = Generator(2024), Generator(2024)
    with strict_cuda() as xp:
        for shape, dtype in [((3, 4), np.float32), ((5,), np.float64), ((2, 2, 2), np.float32)]:
            np.testing.assert_array_equal(_host(dev.uniform(shape, dtype, xp=xp)),
                                          cpu.uniform(shape, dtype))
            np.testing.assert_array_equal(_host(dev.normal(shape, dtype, xp=xp)),
                                          cpu.normal(shape, dtype))
        assert xp.transfers.uploads == 0
    assert dev.counter == cpu.counter == 9


def test_random_kernels_have_no_cupy_only_branch() -> None:
    # The stand-in is not CuPy, and the random kernels never ask: what passes here is what
    # CuPy runs (the GPU test compares the bits on real hardware).
    with strict_cuda() as xp:
        assert not is_cupy(xp)
    for fn in (rnd.splitmix64, rnd.uniform_bits, rnd._uniform, rnd._rand_forward,
               rnd._mask_forward):
        assert "is_cupy" not in inspect.getsource(fn)


# --- check_device_kernel ------------------------------------------------------------------------


def _throwaway(device_kernel: bool) -> Primitive:
    # Not registered: the registry stays as it was.
    return Primitive("host_only_probe", ("x",), same_shape, lambda x: x, nondiff=True,
                     semantics="A probe.", samples=lambda rng: [Sample((np.zeros(2),))],
                     device_kernel=device_kernel)


def test_check_device_kernel_refuses_a_host_only_op_on_a_device() -> None:
    prim = _throwaway(device_kernel=False)
    assert "host_only_probe" not in REGISTRY
    check_device_kernel(prim, np)  # the host always runs it
    with strict_cuda() as xp:
        with pytest.raises(DeviceError, match=r"^host_only_probe: no device kernel for device "
                                              r"'cuda'; "):
            check_device_kernel(prim, xp)
        check_device_kernel(_throwaway(device_kernel=True), xp)
        assert xp.transfers.uploads == 0 and xp.transfers.downloads == 0


def test_every_builtin_primitive_has_a_device_kernel() -> None:
    assert all(prim.device_kernel for prim in REGISTRY.values())
    with strict_cuda() as xp:
        for prim in REGISTRY.values():
            check_device_kernel(prim, xp)


# --- device_constant: static attributes uploaded once ---------------------------------------------


def test_a_static_mask_is_uploaded_once_and_again_when_it_changes() -> None:
    prim = REGISTRY["masked_softmax"]
    mask = np.tril(np.ones((4, 4), dtype=bool))
    x = np.random.default_rng(0).standard_normal((2, 4, 4))
    with strict_cuda() as xp:
        dx = to_device(x, xp)
        assert xp.transfers.uploads == 1
        first = _host(prim.forward(dx, mask=mask))
        assert xp.transfers.uploads == 2  # the mask
        for _ in range(3):
            np.testing.assert_array_equal(_host(prim.forward(dx, mask=mask)), first)
        assert xp.transfers.uploads == 2  # reused, not uploaded per call
        mask[3, 0] = False  # an attribute changed in place is seen, never served stale
        np.testing.assert_array_equal(_host(prim.forward(dx, mask=mask)),
                                      prim.forward(x, mask=mask))
        assert xp.transfers.uploads == 3
    np.testing.assert_array_equal(first, prim.forward(x, mask=np.tril(np.ones((4, 4), bool))))


def test_device_constant_derivations_and_plain_values() -> None:
    idx = np.array([3, 0, 5])
    with strict_cuda() as xp:
        a = device_constant(idx, xp, lambda v: v + 1, "plus one")
        b = device_constant(idx, xp, lambda v: v * 2, "twice")
        assert xp.transfers.uploads == 2
        assert device_constant(idx, xp, lambda v: v + 1, "plus one") is a
        assert xp.transfers.uploads == 2
        np.testing.assert_array_equal(_host(a), [4, 1, 6])
        np.testing.assert_array_equal(_host(b), [6, 0, 10])
        device_constant([1, 2], xp)  # a list cannot be tracked: uploaded on each call
        device_constant([1, 2], xp)
        assert xp.transfers.uploads == 4
    host = device_constant(idx, np, lambda v: v + 1)
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, [4, 1, 6])


def test_gathers_and_scatters_upload_their_indices_once() -> None:
    idx = np.array([2, 0, 7, 2])
    x = np.random.default_rng(1).standard_normal((4, 3))
    gather, scatter = REGISTRY["gather_rows_nat"], REGISTRY["scatter_add_nat"]
    with strict_cuda() as xp:
        dx = to_device(x, xp)
        for _ in range(3):
            rows = gather.forward(dx, idx=idx)
            back = scatter.forward(rows, idx=idx, n=4)
        uploads = xp.transfers.uploads
        np.testing.assert_array_equal(_host(rows), gather.forward(x, idx=idx))
        np.testing.assert_array_equal(_host(back), scatter.forward(gather.forward(x, idx=idx),
                                                                   idx=idx, n=4))
    assert uploads == 1 + 2 + 2  # x; the gather's clipped index and mask; the scatter's two


# --- values that need a host decision on a device ----------------------------------------------


def test_log_domain_error_on_the_device_is_one_explicit_download() -> None:
    with strict_cuda() as xp:
        x = to_device(np.array([1.0, -1.0, 0.0, np.nan]), xp)
        with pytest.raises(DomainError, match="3 of 4 entries are <= 0 or NaN"):
            REGISTRY["log"].forward(x)
        assert xp.transfers.downloads == 1
        ok = REGISTRY["log"].forward(to_device(np.array([0.5, 2.0]), xp))
        assert xp.transfers.downloads == 2
        np.testing.assert_array_equal(_host(ok), np.log(np.array([0.5, 2.0])))


# --- erf ----------------------------------------------------------------------------------------


def _reference_erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.ravel()], dtype=np.float64).reshape(x.shape)


def _erf_inputs() -> np.ndarray:
    rng = np.random.default_rng(5)
    special = [0.0, -0.0, np.inf, -np.inf, 0.84375, -0.84375, 1.25, -1.25, 6.0, -6.0, 2.0**-28,
               5e-324, -1e-310, 1e300, 2.857142925262451, 2.8571429252624507, 27.0]
    return np.concatenate([np.array(special), rng.standard_normal(20000) * 3,
                           rng.standard_normal(2000) * 1e-9, rng.standard_normal(2000) * 1e-310])


def test_device_erf_equals_the_c_library_in_float32() -> None:
    x = _erf_inputs()
    x = x[np.abs(x) < 1e30].astype(np.float32)
    want = _reference_erf(x.astype(np.float64)).astype(np.float32)
    with strict_cuda() as xp:
        got = _host(_erf(to_device(x, xp)))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_erf(x), want)  # the host path


def test_device_erf_float64_bits_and_its_one_documented_difference() -> None:
    x = _erf_inputs()
    want = _reference_erf(x)
    got = erf_array(x)  # the device algorithm, run on NumPy
    outside = (np.abs(x) < 1.25) | (np.abs(x) >= 6) | np.isnan(x)
    np.testing.assert_array_equal(got[outside], want[outside])
    assert np.array_equal(np.signbit(got), np.signbit(want))
    # On [1.25, 6) exp comes from the namespace, not the C library: at most one ulp apart.
    ulps = np.abs(got[~outside].view(np.int64) - want[~outside].view(np.int64))
    assert ulps.max() <= 1
    assert (ulps == 0).mean() > 0.99
    nan = erf_array(np.array([np.nan]))
    assert np.isnan(nan[0])
