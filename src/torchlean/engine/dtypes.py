"""torch's type system for ``tl.Tensor``: dtype names, ``torch.device``, the default dtype and
the type-promotion rule of elementwise ops.

A torchlean dtype *is* a NumPy dtype (``tl.float32 == np.dtype("float32")``), so every kernel,
checkpoint and comparison that already speaks NumPy keeps working, and ``tensor.dtype ==
tl.float`` holds as ``tensor.dtype == torch.float`` does. The half-precision names exist so that
a script naming them gets a clear "not supported" where it uses one, not an AttributeError.

Promotion follows ``torch.result_type``: categories bool < integer < float; among tensors, those
with dimensions decide the dtype within the highest category, and 0-d tensors and Python numbers
only lift the category (an int tensor plus a Python float is the *default* float dtype; an int32
tensor plus a Python int stays int32).
"""

from __future__ import annotations

import builtins
import threading
from typing import Any

import numpy as np

from ..core.errors import DeviceError, TorchLeanError

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)
int32 = np.dtype(np.int32)
int16 = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

# torch's aliases
float = float32  # noqa: A001  (torch.float)
double = float64
long = int64
int = int32  # noqa: A001  (torch.int)
short = int16


class UnsupportedDtype:
    """A torch dtype name torchlean cannot compute in (float16, bfloat16, complex): using one
    raises a ``TorchLeanError`` saying so."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torchlean.{self.name} (not supported)"

    def refuse(self, op: str) -> TorchLeanError:
        return TorchLeanError(f"{op}: dtype {self.name} is not supported by torchlean (it "
                              "computes in float32, float64, integer and bool dtypes); use "
                              "float32 or float64")


float16 = half = UnsupportedDtype("float16")
bfloat16 = UnsupportedDtype("bfloat16")
complex64 = cfloat = UnsupportedDtype("complex64")
complex128 = cdouble = UnsupportedDtype("complex128")

SUPPORTED = (float32, float64, int64, int32, int16, int8, uint8, bool_)
_BY_NAME = {d.name: d for d in SUPPORTED} | {"float": float32, "double": float64,
                                             "long": int64, "int": int32, "short": int16,
                                             "bool": bool_}

_state = threading.local()


def get_default_dtype() -> np.dtype:
    """The float dtype Python floats and float factories get (float32 unless set)."""
    return getattr(_state, "default", float32)  # type: ignore[no-any-return]


def set_default_dtype(dtype: Any) -> None:
    """Set the default float dtype (float32 or float64, as torch allows)."""
    dt = as_dtype("set_default_dtype", dtype)
    if dt.kind != "f":
        raise TorchLeanError(f"set_default_dtype: only floating-point types are supported as the "
                             f"default type, found {dt.name}")
    _state.default = dt


def as_dtype(op: str, dtype: Any, default: np.dtype | None = None) -> np.dtype:
    """``dtype`` (a torchlean/NumPy dtype, its name, or a Python type) as a supported NumPy
    dtype; ``None`` gives ``default`` (the default float dtype when that is None too)."""
    if dtype is None:
        return get_default_dtype() if default is None else default
    if isinstance(dtype, UnsupportedDtype):
        raise dtype.refuse(op)
    if dtype is bool:
        return bool_
    if dtype is builtins.float:
        return get_default_dtype()
    if dtype is builtins.int:
        return int64
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in _BY_NAME:
        return _BY_NAME[dtype.removeprefix("torch.")]
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TorchLeanError(f"{op}: expected a dtype (torchlean.float32, torchlean.long, ...), "
                             f"found {dtype!r}") from None
    if dt not in SUPPORTED:
        raise TorchLeanError(f"{op}: dtype {dt.name} is not supported by torchlean; expected one "
                             f"of {', '.join(d.name for d in SUPPORTED)}")
    return dt


class device:  # noqa: N801  (torch's name)
    """``torch.device``: a type ("cpu" or "cuda") and an optional index; compares equal to the
    string torch would print for it."""

    __slots__ = ("type", "index")
    type: str
    index: builtins.int | None

    def __init__(self, type: Any, index: Any = None) -> None:  # noqa: A002
        if isinstance(type, device):
            type, index = str(type.type), type.index  # noqa: A001
        if not isinstance(type, str):
            raise DeviceError(f"device: expected 'cpu' or 'cuda' (optionally ':index'), found "
                              f"{type!r}")
        name, _, idx = type.partition(":")
        if name not in ("cpu", "cuda"):
            raise DeviceError(f"device: expected 'cpu' or 'cuda', found {type!r}")
        if idx:
            if index is not None or not idx.isdigit():
                raise DeviceError(f"device: invalid device string {type!r}")
            index = builtins.int(idx)
        if index is not None and (isinstance(index, bool) or not isinstance(index, builtins.int)
                                  or index < 0):
            raise DeviceError(f"device: the index must be a non-negative int, found {index!r}")
        self.type = name
        self.index = index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (
            ")" if self.index is None else f", index={self.index})")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = device(other)
        if not isinstance(other, device):
            return NotImplemented
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> builtins.int:
        return hash((self.type, self.index))


def category(dt: np.dtype) -> builtins.int:
    """0 for bool, 1 for integers, 2 for floats."""
    return 0 if dt.kind == "b" else (2 if dt.kind == "f" else 1)


def _scalar_category(x: Any) -> builtins.int:
    if isinstance(x, bool | np.bool_):
        return 0
    if isinstance(x, builtins.int | np.integer):
        return 1
    return 2


def result_type(op: str, operands: tuple[Any, ...]) -> np.dtype:
    """torch's ``result_type`` of an elementwise op over tensors (anything with ``dtype`` and
    ``shape``) and Python numbers."""
    dims: list[np.dtype] = []
    zero: list[np.dtype] = []
    scalar_cat = -1
    for x in operands:
        dt = getattr(x, "dtype", None)
        if dt is not None and hasattr(x, "shape"):
            (dims if len(x.shape) else zero).append(np.dtype(dt))
        elif isinstance(x, builtins.int | builtins.float | bool | np.number | np.bool_):
            scalar_cat = max(scalar_cat, _scalar_category(x))
        else:
            raise TorchLeanError(f"{op}: expected tensors or numbers, found "
                                 f"{type(x).__name__}")
    result: np.dtype | None = None
    for group in (dims, zero):
        if not group:
            continue
        best = _promote(group)
        if result is None:
            result = best
        elif category(best) > category(result):
            result = best
    assert result is not None, "result_type needs at least one tensor"
    if scalar_cat > category(result):
        result = bool_ if scalar_cat == 0 else (int64 if scalar_cat == 1 else get_default_dtype())
    return result


def _promote(group: list[np.dtype]) -> np.dtype:
    """The promoted dtype of tensors of one priority: within the highest category only (an
    int64 tensor does not widen a float32 one, as in torch)."""
    top = max(category(dt) for dt in group)
    members = [dt for dt in group if category(dt) == top]
    out = members[0]
    for dt in members[1:]:
        out = np.promote_types(out, dt)
    return out


__all__ = [
    "float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool_", "float", "double",
    "long", "int", "short", "float16", "half", "bfloat16", "complex64", "cfloat", "complex128",
    "cdouble", "UnsupportedDtype", "get_default_dtype", "set_default_dtype", "as_dtype", "device",
    "result_type", "category",
]
