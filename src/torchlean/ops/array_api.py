"""The array API standard's spellings of the array methods kernels use, NumPy's methods kept.

The standard (and so ``array_api_strict``) has no array methods such as ``x.sum()``,
``x.astype()`` or ``x.reshape()``: it spells them as namespace functions (``xp.sum(x)``,
``xp.astype(x, dtype)``, ``xp.reshape(x, shape)``), which NumPy 2 and CuPy 14 provide too. On the
host, though, NumPy's functions cost 1 to 6 us more per call than the methods (``np.sum`` goes
through ``_wrapreduction``, ``np.permute_dims`` through array-function dispatch), and per-op
overhead matters there. So each helper below takes the method for a NumPy array (one type check,
the same routine and bits as before; NumPy scalars too) and the standard function of
``namespace_of(x)`` for anything else: CuPy, the tests' strict stand-in device and
``array_api_strict`` alike.

``copy`` and ``contiguous`` use the namespace's ``copy`` / ``ascontiguousarray`` (NumPy, CuPy and
the stand-in have them) and ``asarray(x, copy=True)`` where it has none (the standard's way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.backend import namespace_of

_NDARRAY = np.ndarray


def astype(x: Any, dtype: Any, copy: bool = True) -> Any:
    """``x`` as ``dtype`` (a dtype of ``x``'s namespace: take it from an array, ``y.dtype``)."""
    if type(x) is _NDARRAY:
        return x.astype(dtype) if copy else x.astype(dtype, copy=False)
    xp = namespace_of(x)
    if xp is np:  # NumPy scalars and ndarray subclasses
        return x.astype(dtype) if copy else x.astype(dtype, copy=False)
    return xp.astype(x, dtype, copy=copy)


def reshape(x: Any, shape: Any) -> Any:
    """``x`` with a new shape (a tuple; -1 allowed once), row-major."""
    if type(x) is _NDARRAY:
        return x.reshape(shape)
    xp = namespace_of(x)
    if xp is np:  # NumPy scalars and ndarray subclasses
        return x.reshape(shape)
    return xp.reshape(x, shape)


def _reduction(name: str, doc: str) -> Callable[..., Any]:
    """The reduction ``name`` (``sum``, ``max``, ``mean``) over ``axis`` (an int, a tuple or None
    for all): NumPy's method on the host, the namespace's ``xp.<name>`` elsewhere."""
    method = getattr(_NDARRAY, name)

    def reduce(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        if type(x) is _NDARRAY:
            return method(x, axis=axis, keepdims=True) if keepdims else method(x, axis=axis)
        xp = namespace_of(x)
        if xp is np:  # NumPy scalars and ndarray subclasses
            return getattr(x, name)(axis=axis, keepdims=keepdims)
        return getattr(xp, name)(x, axis=axis, keepdims=keepdims)

    reduce.__name__ = reduce.__qualname__ = f"a{name}"
    reduce.__doc__ = doc
    return reduce


asum = _reduction("sum", "Sum over ``axis``; a NumPy scalar for a full NumPy sum.")
amax = _reduction("max", "Maximum over ``axis``.")
amean = _reduction("mean", "Mean over ``axis``.")


def permute_dims(x: Any, axes: tuple[int, ...]) -> Any:
    """Axes reordered: output axis k is input axis ``axes[k]`` (a view where the namespace can)."""
    if type(x) is _NDARRAY:
        return x.transpose(axes)
    xp = namespace_of(x)
    if xp is np:  # NumPy scalars and ndarray subclasses
        return x.transpose(axes)
    return xp.permute_dims(x, axes)


def swapaxes(x: Any, a: int, b: int) -> Any:
    """Axes ``a`` and ``b`` swapped (non-negative axes)."""
    if type(x) is _NDARRAY:
        return x.swapaxes(a, b)
    xp = namespace_of(x)
    if xp is np:
        return x.swapaxes(a, b)
    axes = list(range(x.ndim))
    axes[a], axes[b] = b, a
    return xp.permute_dims(x, tuple(axes))


def copy(x: Any) -> Any:
    """A fresh copy of ``x`` (never a view of it)."""
    if type(x) is _NDARRAY:
        return x.copy()
    xp = namespace_of(x)
    if xp is np:
        return x.copy()
    fn = getattr(xp, "copy", None)
    return fn(x) if fn is not None else xp.asarray(x, copy=True)


def contiguous(x: Any) -> Any:
    """A row-major copy of ``x`` where it is not one already (``ascontiguousarray``); the
    standard has no memory layout, so there it is a copy."""
    if type(x) is _NDARRAY:
        return np.ascontiguousarray(x)
    xp = namespace_of(x)
    fn = getattr(xp, "ascontiguousarray", None)
    return fn(x) if fn is not None else xp.asarray(x, copy=True)


def take0(x: Any, index: Any) -> Any:
    """Rows ``x[index]`` along axis 0 for a 1-D integer array ``index`` of ``x``'s namespace
    (``xp.take``: the standard has no integer-array index beside other axes)."""
    if type(x) is _NDARRAY:
        return x[index]
    return namespace_of(x).take(x, index, axis=0)
