"""Parameters: tensors that live across steps, with the gradient of the last backward.

A ``Param`` (``nn.Parameter``) *is* a ``tl.Tensor``: a leaf that requires grad, usable in
arithmetic, indexing and in-place ops as torch's ``nn.Parameter`` is. ``.grad`` is a tensor
(accumulated by ``backward``, as in PyTorch, until ``zero_grad``) and ``.data`` the same values as
a tensor without history. It is also what optimisers update and checkpoints save, with the
seed's API kept on the same object: ``value`` (a host NumPy array), ``name``, ``assign``,
``version`` (the tensor's version counter: a recorded pass that used an older value is detected,
by sessions and by ``backward``), ``array`` (the value where it lives: optimisers update it in
place) and device residency (``on``).

On a device, a parameter is uploaded once, when a device session first uses it (``on``); from
then on its value lives there, optimisers update it in place there, and the host sees it only
through an explicit readback (``value``, cached until the next change).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import as_dtype, namespace_of, numeric_array, to_device, to_host
from ..core.errors import ShapeError, TorchLeanError
from .tensor import Tensor, _counter, _init_slots, _leaf

_GRAD = Tensor.__dict__["grad"]  # the tensor's grad slot (Param adds a converting setter)


def _as_grad(value: Any) -> Tensor | None:
    """What may be stored as a gradient: None, a tensor, or an array (wrapped, not copied)."""
    if value is None or isinstance(value, Tensor):
        return value
    if hasattr(value, "__array_namespace__") or isinstance(value, np.ndarray):
        return _leaf(value)
    raise TorchLeanError(f"grad: expected a Tensor, an array or None, found "
                         f"{type(value).__name__}")


class Param(Tensor):
    """A trainable (or frozen) tensor: ``Param(value, name=None, requires_grad=True,
    dtype=None)``, or torch's ``nn.Parameter(data, requires_grad=True)``."""

    __slots__ = ("name", "_readback")

    def __init__(self, value: Any = None, name: Any = None, requires_grad: bool = True,
                 dtype: Any = None) -> None:
        if isinstance(name, bool):  # nn.Parameter(data, requires_grad)
            name, requires_grad = None, name
        if name is not None and not isinstance(name, str):
            raise TorchLeanError(f"Parameter: name must be a str, found {type(name).__name__}")
        label = f"Param {name or ''}"
        source = value if isinstance(value, Tensor) else None
        if source is not None:
            value = value._value
        arr = value if hasattr(value, "__array_namespace__") else numeric_array(label, value)
        if arr.dtype.kind not in "biuf":
            raise ShapeError(f"{label}: expected numeric data, found dtype {arr.dtype}")
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype))
        elif arr.dtype.kind != "f":
            arr = arr.astype(np.float32)
        as_dtype(arr.dtype)  # float32 or float64 only
        # nn.Parameter(t) shares t's storage and version counter, as torch's (arrays and
        # converted values are copied: the parameter owns them)
        shared = source is not None and arr is source._value
        _init_slots(self, arr if shared else arr.copy(), None, (), {})
        self.requires_grad = bool(requires_grad)
        self._vc = (_counter(source) if shared and source is not None
                    else [0, 0, 0, None])  # see Tensor._vc
        self.name = name
        self._readback: tuple[int, np.ndarray] | None = None  # (version, host copy)

    grad = property(lambda self: _GRAD.__get__(self),
                    lambda self, value: _GRAD.__set__(self, _as_grad(value)),
                    doc="The accumulated gradient (a tensor) or None.")

    @property
    def version(self) -> int:
        """Counts changes of the value (assign, optimiser steps, in-place ops): a recorded pass
        that used an older version is stale, and sessions and tensors refuse to go on with
        it."""
        return self._version

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

    def on(self, xp: Any) -> Any:
        """The value in array namespace ``xp``, moving it there first if it lives elsewhere (one
        explicit transfer; later calls return the same array)."""
        arr = self._value
        if namespace_of(arr) is not xp:
            arr = self._value = to_device(arr, xp)
            self._readback = None
        return arr

    def assign(self, new: Any) -> None:
        """Replace the value; the shape must stay the same (dtype is converted)."""
        label = f"Param {self.name or ''}"
        if isinstance(new, Tensor):
            new = new._value
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
        self._bump()

    def mark_updated(self) -> None:
        """Record an in-place change of ``array`` (optimisers call this after each update)."""
        self._bump()

    def accumulate_grad(self, g: Any) -> None:
        """``grad += g`` (a copy of ``g`` when there is none yet), as PyTorch's backward does."""
        if isinstance(g, Tensor):
            g = g._value
        old = _GRAD.__get__(self)
        _GRAD.__set__(self, _leaf(g.copy() if old is None else old._value + g))

    def zero_grad(self, set_to_none: bool = True) -> None:
        if set_to_none or self.grad is None:
            self.grad = None
        else:
            self.grad._value[...] = 0

    def _stale_hint(self) -> str:
        return (f"parameter {self.name or '(unnamed)'} was updated in place (an optimiser "
                "step) after this graph used it; call backward before opt.step(), then run a "
                "new forward pass")

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __copy__(self) -> Param:
        """``copy.copy``: a parameter over the same storage and version counter (torch's
        shallow copy; ``copy.deepcopy`` copies the data)."""
        return Param(self.detach(), self.name, self.requires_grad)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild, (to_host(self._value), self.name, self.requires_grad))


def _rebuild(value: Any, name: str | None, requires_grad: bool) -> Param:
    return Param(value, name, requires_grad)


Parameter = Param
