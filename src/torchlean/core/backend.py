"""Array namespaces, the dtype policy and the only two ways data crosses host and device.

Kernels never assume NumPy where a device array may arrive: they ask ``namespace_of(x)`` and call
that namespace (``xp.exp``, ``xp.zeros``); NumPy and CuPy share one spelling of the functions
kernels use. CuPy is imported lazily, only when a CUDA device is asked for, so the core stays
NumPy-only.

Transfers are explicit: ``to_device`` uploads, ``to_host`` downloads, and nothing else in the
library moves data between host and device (a device array mixed with a host array is an error on
CuPy and in the test suite's strict stand-in device, never a silent copy). Tests swap the "cuda"
namespace for that stand-in with ``cuda_namespace_override``; it counts both kinds of transfer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from .errors import DeviceError, ShapeError, dtypes_differ

DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
DEVICES = ("cpu", "cuda")


def as_dtype(dtype: Any) -> np.dtype:
    """The float dtype named by ``dtype`` ("float32", "float64" or a NumPy dtype)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ShapeError(f"dtype: expected float32 or float64, found {dtype!r}") from None
    if dt.name not in DTYPES:
        raise ShapeError(f"dtype: expected float32 or float64, found {dt.name}")
    return dt


def numeric_array(op: str, data: Any, xp: Any = np, dtype: Any = None) -> Any:
    """``data`` as an array of real numbers (bool, int or float; then ``dtype`` if given).

    Ragged nested lists, strings, objects and complex numbers raise ``ShapeError`` naming ``op``
    instead of whatever NumPy would raise (or, for complex, silently drop).
    """
    try:
        arr = xp.asarray(data)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"{op}: expected a rectangular array of numbers, found "
                         f"{type(data).__name__} ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise ShapeError(f"{op}: expected numeric data, found dtype {arr.dtype}")
    return arr if dtype is None else arr.astype(dtype, copy=False)


def operand_arrays(op: str, inputs: Sequence[Any], xp: Any = np) -> list[Any]:
    """Operands of one op given as plain data, converted and checked as the tape's are.

    Each must be a rectangular array of numbers. Typed float data (float32/float64 arrays and
    NumPy float scalars) keeps its dtype, and all of it must agree: mixing float32 and float64
    in one op is a ``ShapeError``, as on the tape. Untyped data (Python numbers, lists, integer
    or bool arrays) takes that common float dtype, or float64 when there is none.
    """
    arrays = [numeric_array(op, x, xp) for x in inputs]
    typed = {a.dtype for a, x in zip(arrays, inputs, strict=True)
             if a.dtype.kind == "f" and isinstance(x, xp.ndarray | np.floating)}
    if len(typed) > 1:
        raise dtypes_differ(op, [a.dtype for a in arrays])
    dtype = typed.pop() if typed else np.dtype(np.float64)
    return [a if a.dtype == dtype else a.astype(dtype) for a in arrays]


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise DeviceError(f"device: expected one of {DEVICES}, found {device!r}")
    return device


# The namespace "cuda" resolves to while a test's stand-in device is active (None: real CuPy).
_cuda_override: Any = None


@contextmanager
def cuda_namespace_override(namespace: Any) -> Iterator[Any]:
    """Within the block, device "cuda" means ``namespace`` (the tests' strict stand-in device,
    which runs on NumPy but refuses implicit host transfers and counts explicit ones)."""
    global _cuda_override
    previous, _cuda_override = _cuda_override, namespace
    try:
        yield namespace
    finally:
        _cuda_override = previous


def cupy_module() -> ModuleType:
    """CuPy, or a ``DeviceError`` saying why CUDA cannot be used here."""
    if _cuda_override is not None:
        return _cuda_override  # type: ignore[no-any-return]
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError:
        raise DeviceError(
            "device 'cuda': CuPy is not installed (pip install 'torchlean[cuda12]' or "
            "'torchlean[cuda13]')"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise DeviceError("device 'cuda': CuPy is installed but no CUDA GPU is visible")
    except Exception as exc:  # CuPy raises its own runtime errors when no driver is present
        if isinstance(exc, DeviceError):
            raise
        raise DeviceError(f"device 'cuda': CuPy is installed but there is no usable GPU "
                          f"({exc})") from None
    return cupy


def is_cupy(xp: Any) -> bool:
    """Whether ``xp`` is real CuPy (where CuPy-only kernels such as ``ElementwiseKernel`` and
    CUDA graphs are available), not NumPy or a stand-in."""
    return getattr(xp, "__name__", "") == "cupy"


def namespace_for(device: str) -> ModuleType:
    """The array module for a device name."""
    return np if check_device(device) == "cpu" else cupy_module()


def device_of(xp: Any) -> str:
    """The device name of a namespace ("cpu" for NumPy, "cuda" otherwise)."""
    return "cpu" if xp is np else "cuda"


def namespace_of(x: Any) -> ModuleType:
    """The array module an array belongs to: NumPy for NumPy arrays and scalars (and anything
    that is not an array), CuPy for CuPy arrays, else the array's ``__array_namespace__()``."""
    if type(x) is np.ndarray or isinstance(x, np.ndarray | np.generic):
        return np
    if type(x).__module__.startswith("cupy"):
        import cupy  # type: ignore[import-not-found]

        return cupy  # type: ignore[no-any-return]
    get = getattr(x, "__array_namespace__", None)
    return np if get is None else get()  # type: ignore[no-any-return]


def on_host(x: Any) -> bool:
    """Whether ``x`` is host data (a NumPy array or scalar, or a Python number or list)."""
    return namespace_of(x) is np


def to_host(x: Any) -> np.ndarray:
    """Download a device array to a NumPy array (an explicit transfer; NumPy arrays pass
    through, other host data becomes a NumPy array)."""
    if isinstance(x, np.ndarray):
        return x
    xp = namespace_of(x)
    if xp is np:
        return np.asarray(x)
    download = getattr(xp, "asnumpy", None)  # CuPy's (and the stand-in's) explicit download
    if download is None:  # another array-API library: the standard's exchange protocol
        return np.from_dlpack(x, copy=True)
    return download(x)  # type: ignore[no-any-return]


def to_device(x: Any, xp: Any) -> Any:
    """``x`` as an array of namespace ``xp``: uploads host data to a device (an explicit
    transfer), downloads device data when ``xp`` is NumPy, and passes arrays already there."""
    if xp is np:
        return to_host(x)
    src = namespace_of(x)
    if src is xp:
        return x
    if src is not np:
        x = to_host(x)
    return xp.asarray(x)
