"""Every primitive on the device: forward, VJP and JVP kernels run on the strict stand-in device
(``strict_device``) give the same bits as on the CPU, and never read device data implicitly.

The stand-in runs NumPy underneath, so equal bits are the expectation: a difference means a
kernel took another path on the device. The point of the test is the other half: a kernel that
calls NumPy directly on a device array, mixes in a host array, or branches on device data raises
``ImplicitTransferError`` here (and would fail or silently synchronise on CuPy).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from strict_device import StrictArray, strict_cuda

from torchlean.core.backend import to_device, to_host
from torchlean.core.registry import ARRAY_OPS, REGISTRY, Primitive, Sample

SEED = 7


def _samples(prim: Primitive) -> list[Sample]:
    return prim.samples(np.random.default_rng(SEED))


def _run(prim: Primitive, inputs: tuple[Any, ...], attrs: dict[str, Any], xp: Any) -> Any:
    if not prim.inputs:
        return prim.forward(**attrs, xp=xp)
    return prim.forward(*inputs, **attrs)


def _host(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, tuple | list):
        return type(x)(_host(e) for e in x)
    assert not isinstance(x, np.ndarray), "a device kernel returned a host array"
    return to_host(x)


def _same(device: Any, host: Any, what: str) -> None:
    if host is None:
        assert device is None, what
        return
    if isinstance(host, tuple | list):
        assert len(device) == len(host), what
        for d, h in zip(device, host, strict=True):
            _same(d, h, what)
        return
    assert isinstance(device, StrictArray), f"{what}: result is {type(device).__name__}"
    got = to_host(device)
    assert got.shape == np.shape(host) and got.dtype == np.asarray(host).dtype, what
    np.testing.assert_array_equal(got, host, err_msg=what)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_kernels_on_the_device_match_the_cpu(name: str) -> None:
    prim = REGISTRY[name]
    for k, sample in enumerate(_samples(prim)):
        what = f"{name} sample {k}"
        attrs = prim.check_attrs(dict(sample.attrs))
        host_in = tuple(np.asarray(x, dtype=np.float64) for x in sample.inputs)
        host_out = _run(prim, host_in, attrs, np)
        with strict_cuda() as xp:
            dev_in = tuple(to_device(x, xp) for x in host_in)
            dev_out = _run(prim, dev_in, attrs, xp)
            _same(dev_out, host_out, f"{what} forward")
            if prim.nondiff:
                continue
            rng = np.random.default_rng(SEED + k)
            g = rng.standard_normal(np.shape(host_out))
            host_ct = prim.apply_vjp(ARRAY_OPS, g, host_in, host_out, attrs)
            dev_ct = prim.apply_vjp(ARRAY_OPS, to_device(g, xp), dev_in, dev_out, attrs)
            _same(list(dev_ct), list(host_ct), f"{what} vjp")
            if prim.reverse_only:
                continue
            tangents = [rng.standard_normal(x.shape) for x in host_in]
            host_t = prim.apply_jvp(ARRAY_OPS, tangents, host_in, host_out, attrs)
            dev_t = prim.apply_jvp(ARRAY_OPS, [to_device(t, xp) for t in tangents], dev_in,
                                   dev_out, attrs)
            _same(dev_t, host_t, f"{what} jvp")
