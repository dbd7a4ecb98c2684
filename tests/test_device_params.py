"""Parameters on the device (strict stand-in): one upload, explicit cached readback, assignment
into the same device buffer (a captured CUDA graph keeps reading it)."""

from __future__ import annotations

import numpy as np
import pytest
from strict_device import StrictArray, strict_cuda

import torchlean as tl
from torchlean.core.backend import to_device
from torchlean.core.errors import DeviceError, ShapeError
from torchlean.engine.params import Param


def test_a_parameter_is_uploaded_once_and_read_back_once_per_version() -> None:
    p = Param(np.arange(6.0).reshape(2, 3), name="w")
    assert p.device == "cpu"
    with strict_cuda() as xp:
        first = p.on(xp)
        assert isinstance(first, StrictArray) and p.on(xp) is first and p.array is first
        assert p.device == "cuda" and xp.transfers.uploads == 1
        np.testing.assert_array_equal(p.value, np.arange(6.0).reshape(2, 3))
        np.testing.assert_array_equal(p.value, np.arange(6.0).reshape(2, 3))
        assert xp.transfers.downloads == 1  # the second read reuses the readback
        p.array[...] = p.array * 2.0
        p.mark_updated()
        np.testing.assert_array_equal(p.value, 2.0 * np.arange(6.0).reshape(2, 3))
        assert xp.transfers.downloads == 2 and xp.transfers.uploads == 1


def test_assigning_a_device_parameter_writes_into_its_buffer() -> None:
    p = Param(np.zeros((2, 2), dtype=np.float32), name="w")
    with strict_cuda() as xp:
        buffer = p.on(xp)
        p.assign(np.full((2, 2), 3.0))  # host data: one explicit upload, converted to float32
        assert p.array is buffer and p.dtype == np.float32 and p.version == 1
        p.assign(to_device(np.ones((2, 2)), xp))
        assert p.array is buffer
        np.testing.assert_array_equal(p.value, np.ones((2, 2), dtype=np.float32))
        with pytest.raises(ShapeError, match="cannot assign shape"):
            p.assign(np.ones(3))
        assert p.version == 2 and p.array is buffer


def test_moving_back_to_the_host_is_one_download() -> None:
    p = Param(np.ones(4), name="b")
    with strict_cuda() as xp:
        p.on(xp)
        host = p.on(np)
        assert isinstance(host, np.ndarray) and p.device == "cpu"
        assert xp.transfers.downloads == 1


def test_cuda_without_cupy_or_gpu_is_a_clear_device_error() -> None:
    # No override active: the real check runs (CI has neither a GPU nor, usually, CuPy).
    try:
        tl.core.backend.namespace_for("cuda")
    except DeviceError as exc:
        assert "device 'cuda'" in str(exc)
        assert "CuPy is not installed" in str(exc) or "GPU" in str(exc)
    else:
        pytest.skip("a usable CUDA GPU is present (the refusal cannot be observed here)")


def test_cuda_is_available_follows_the_device() -> None:
    with strict_cuda():
        assert tl.cuda.is_available() and tl.cuda.device_count() == 1
        tl.cuda.synchronize()  # nothing to wait for on the stand-in; must not raise
    try:
        tl.core.backend.namespace_for("cuda")
        usable = True
    except DeviceError:
        usable = False
    assert tl.cuda.is_available() is usable
    assert (tl.cuda.device_count() > 0) is usable
    if not usable:
        with pytest.raises(DeviceError, match="device 'cuda'"):
            tl.cuda.synchronize()
        with pytest.raises(DeviceError, match="device 'cuda'"):
            tl.Options(device="cuda")  # refused where it is made, before any session
