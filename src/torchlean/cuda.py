"""``torch.cuda``'s everyday questions, for torchlean: is a GPU usable here, and waiting for it.

``tl.cuda.is_available()`` lets one script pick its device (``"cuda" if ... else "cpu"``)
instead of catching the ``DeviceError`` that ``Options(device="cuda")`` raises without CuPy or a
GPU. Within the tests' stand-in device (``backend.cuda_namespace_override``) it is true.
"""

from __future__ import annotations

from .core.backend import cupy_module, is_cupy
from .core.errors import DeviceError


def is_available() -> bool:
    """Whether ``device="cuda"`` can be used: CuPy is installed and a GPU is usable."""
    try:
        cupy_module()
    except DeviceError:
        return False
    return True


def device_count() -> int:
    """The number of visible CUDA GPUs (0 without CuPy or a usable GPU)."""
    if not is_available():
        return 0
    xp = cupy_module()
    return int(xp.cuda.runtime.getDeviceCount()) if is_cupy(xp) else 1


def synchronize() -> None:
    """Wait until the current GPU has finished all queued work (before timing, say).
    A ``DeviceError`` says why when CUDA cannot be used."""
    xp = cupy_module()
    if is_cupy(xp):
        xp.cuda.Device().synchronize()
