"""Array namespaces and the dtype policy.

Kernels never assume NumPy where a device array may arrive: they ask ``namespace_of(x)``. CuPy is
imported lazily, only when a CUDA device is asked for, so the core stays NumPy-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from .errors import DeviceError, ShapeError

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
        raise ShapeError(f"{op}: dtypes differ: {', '.join(str(a.dtype) for a in arrays)}")
    dtype = typed.pop() if typed else np.dtype(np.float64)
    return [a if a.dtype == dtype else a.astype(dtype) for a in arrays]


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise DeviceError(f"device: expected one of {DEVICES}, found {device!r}")
    return device


def cupy_module() -> ModuleType:
    """CuPy, or a ``DeviceError`` saying why CUDA cannot be used here."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError:
        raise DeviceError(
            "device 'cuda': CuPy is not installed (pip install cupy-cuda12x)"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise DeviceError("device 'cuda': no CUDA GPU is visible")
    except Exception as exc:  # CuPy raises its own runtime errors when no driver is present
        if isinstance(exc, DeviceError):
            raise
        raise DeviceError(f"device 'cuda': no usable GPU ({exc})") from None
    return cupy


def namespace_for(device: str) -> ModuleType:
    """The array module for a device name."""
    return np if check_device(device) == "cpu" else cupy_module()


def namespace_of(x: Any) -> ModuleType:
    """The array module an array belongs to (NumPy unless it is a CuPy array)."""
    if isinstance(x, np.ndarray | np.generic):
        return np
    mod = type(x).__module__
    if mod.startswith("cupy"):
        import cupy  # type: ignore[import-not-found]

        return cupy
    return np


def to_host(x: Any) -> np.ndarray:
    """Copy a device array to a NumPy array (NumPy arrays pass through)."""
    if isinstance(x, np.ndarray):
        return x
    get = getattr(x, "get", None)
    return np.asarray(get() if get is not None else x)
