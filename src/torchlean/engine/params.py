"""Parameters: named arrays that live across steps, with the gradient of the last backward.

A ``Param`` is what optimisers update and checkpoints save. Sessions read ``param.value`` when a
forward pass uses the parameter and write ``param.grad`` on backward (accumulating, like
PyTorch's ``.grad``, until ``zero_grad``). ``version`` counts value changes, so a recorded pass
that used an older value is detected (PyTorch's version counter, for the same reason).

On a device, a parameter is uploaded once, when a device session first uses it (``on``); from
then on its value lives there (``data``), optimisers update it in place there, and the host sees
it only through an explicit readback (``value``, cached until the next change).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import as_dtype, namespace_of, numeric_array, to_device, to_host
from ..core.errors import ShapeError


class Param:
    """A trainable (or frozen) tensor: ``value``, ``name``, ``requires_grad`` and ``grad``."""

    __slots__ = ("_value", "name", "requires_grad", "grad", "version", "_readback")

    def __init__(self, value: Any, name: str | None = None, requires_grad: bool = True,
                 dtype: Any = None) -> None:
        arr = value if hasattr(value, "__array_namespace__") else numeric_array(
            f"Param {name or ''}", value)
        if arr.dtype.kind not in "biuf":
            raise ShapeError(f"Param {name or ''}: expected numeric data, found dtype {arr.dtype}")
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype))
        elif arr.dtype.kind != "f":
            arr = arr.astype(np.float32)
        as_dtype(arr.dtype)  # float32 or float64 only
        self._value = arr.copy()
        self.name = name
        self.requires_grad = bool(requires_grad)
        self.grad: Any = None
        # Counts changes of the value (assign, optimiser steps): a recorded pass that used an
        # older version is stale, and sessions and tensors refuse to go on with it.
        self.version = 0
        self._readback: tuple[int, np.ndarray] | None = None  # (version, host copy)

    @property
    def value(self) -> Any:
        """The current value as a host NumPy array. For a parameter on a device this is an
        explicit readback, made once per version (later reads reuse it until the next change);
        treat it as read-only (``assign`` changes a parameter)."""
        arr = self._value
        if isinstance(arr, np.ndarray):
            return arr
        cached = self._readback
        if cached is None or cached[0] != self.version:
            cached = self._readback = (self.version, to_host(arr))
        return cached[1]

    @value.setter
    def value(self, new: Any) -> None:
        self.assign(new)

    @property
    def data(self) -> Any:
        """The current value where it lives (NumPy or CuPy); optimisers update this in place."""
        return self._value

    @property
    def device(self) -> str:
        """Where the value lives: "cpu" or "cuda"."""
        return "cpu" if isinstance(self._value, np.ndarray) else "cuda"

    def on(self, xp: Any) -> Any:
        """The value in array namespace ``xp``, moving it there first if it lives elsewhere (one
        explicit transfer; later calls return the same array)."""
        arr = self._value
        if namespace_of(arr) is not xp:
            arr = self._value = to_device(arr, xp)
            self._readback = None
        return arr

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._value.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._value.dtype)

    def assign(self, new: Any) -> None:
        """Replace the value; the shape must stay the same (dtype is converted)."""
        label = f"Param {self.name or ''}"
        arr = new if hasattr(new, "__array_namespace__") else numeric_array(label, new)
        if arr.dtype.kind not in "biuf":
            raise ShapeError(f"{label}: cannot assign data of dtype {arr.dtype}")
        if tuple(arr.shape) != self.shape:
            raise ShapeError(f"Param {self.name or ''}: cannot assign shape {tuple(arr.shape)} "
                             f"to a parameter of shape {self.shape}")
        # The value stays where the parameter lives. A device parameter receives an upload into
        # its own buffer, which stays the same array: a captured CUDA graph reads it there.
        xp = namespace_of(self._value)
        if xp is np:
            self._value = arr.astype(self._value.dtype, copy=True)
        else:
            self._value[...] = to_device(arr, xp).astype(self._value.dtype, copy=False)
        self.version += 1

    def mark_updated(self) -> None:
        """Record an in-place change of ``data`` (optimisers call this after each update)."""
        self.version += 1

    def accumulate_grad(self, g: Any) -> None:
        """``grad += g`` (a copy of ``g`` when there is none yet), as PyTorch's backward does."""
        self.grad = g.copy() if self.grad is None else self.grad + g

    def zero_grad(self) -> None:
        self.grad = None

    def __repr__(self) -> str:
        return (f"Param(name={self.name!r}, shape={self.shape}, dtype={self.dtype.name}, "
                f"requires_grad={self.requires_grad})")
