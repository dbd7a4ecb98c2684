"""Attribute kinds: what each primitive's static attributes may be, checked in one place.

A primitive declares each attribute with a *kind* (``Primitive.attr_kinds``): a positive int, a
per-axis int tuple, an axis, axes without duplicates, a shape, a finite real, and so on. One
validator (``Primitive.check_attrs``) runs every call's attributes through their kinds on every
entry point (tape, graph builder, F on arrays, sessions, tensors) before any shape rule or kernel
sees them. A kind both checks and normalises: NumPy integer and float scalars become Python ints
and floats, lists become tuples, so the kernels only ever see the types they were written for.

Rank-dependent checks (a per-axis tuple's length, an axis's range) stay in the shape rules, which
know the input shapes; the kinds make sure those rules receive well-typed values. Each primitive
declares its kinds where it is declared (``Primitive(..., attr_kinds={...})``, with the shared
groups ``POOL``, ``CONV``, ``RANDOM``, ... below). ``tests/test_fuzz.py`` checks
that every attribute of every primitive has a kind.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ShapeError

# A kind: ``check(op, name, value) -> normalised value``, raising ``ShapeError``.
Kind = Callable[[str, str, Any], Any]


def _bad(op: str, name: str, expected: str, value: Any) -> ShapeError:
    shown = repr(value)
    if len(shown) > 80:  # a huge array attribute would bury the message
        shown = shown[:77] + "..."
    return ShapeError(f"{op}: {name} must be {expected}, found {shown}")


def _as_int(value: Any) -> int | None:
    """``value`` as a Python int when it is an integer scalar (not a bool), else ``None``."""
    if type(value) is int:
        return value
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, np.ndarray) and value.ndim != 0:
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _as_real(value: Any) -> float | None:
    """``value`` as a Python float when it is a real scalar (not a bool), else ``None``."""
    if type(value) is float:
        return value
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer
                                                            | np.floating):
        return None
    return float(value)


def int_kind(minimum: int | None, expected: str) -> Kind:
    """An int scalar (NumPy ints accepted) that is at least ``minimum`` when given."""

    def check(op: str, name: str, value: Any) -> int:
        v = _as_int(value)
        if v is None or (minimum is not None and v < minimum):
            raise _bad(op, name, expected, value)
        return v

    return check


POSITIVE_INT = int_kind(1, "a positive int")
NON_NEGATIVE_INT = int_kind(0, "a non-negative int")
AXIS = int_kind(None, "an int axis")


def _int_tuple(op: str, name: str, value: Any, expected: str, minimum: int | None) -> tuple[
        int, ...]:
    if isinstance(value, str | bytes | dict) or not hasattr(value, "__iter__"):
        raise _bad(op, name, expected, value)
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise _bad(op, name, expected, value)
    out = []
    for item in value:
        v = _as_int(item)
        if v is None or (minimum is not None and v < minimum):
            raise _bad(op, name, expected, value)
        out.append(v)
    return tuple(out)


def per_axis_kind(minimum: int, optional: bool = False) -> Kind:
    """An int or a tuple of ints (one per spatial axis), each at least ``minimum``; the shape
    rule checks the tuple's length against the op's rank."""
    expected = f">= {minimum} (an int or a tuple of ints{' or None' if optional else ''})"

    def check(op: str, name: str, value: Any) -> Any:
        if optional and value is None:
            return None
        if type(value) is int and value >= minimum:
            return value
        if type(value) is tuple and all(type(v) is int and v >= minimum for v in value):
            return value
        v = _as_int(value)
        if v is not None:
            if v < minimum:
                raise _bad(op, name, expected, value)
            return v
        return _int_tuple(op, name, value, expected, minimum)

    return check


def int_tuple_kind(minimum: int | None, expected: str, nonempty: bool = False) -> Kind:
    """A tuple of ints (lists, NumPy arrays and NumPy ints accepted)."""

    def check(op: str, name: str, value: Any) -> tuple[int, ...]:
        if type(value) is tuple and all(type(v) is int and (minimum is None or v >= minimum)
                                        for v in value):
            out = value
        else:
            out = _int_tuple(op, name, value, expected, minimum)
        if nonempty and not out:
            raise _bad(op, name, expected, value)
        return out

    return check


POSITIVE_INT_TUPLE = int_tuple_kind(1, "a non-empty tuple of positive ints", nonempty=True)
PERM = int_tuple_kind(None, "a tuple of int axes")


def _axes(op: str, name: str, value: Any) -> tuple[int, ...]:
    out = int_tuple_kind(None, "a non-empty tuple of distinct int axes", nonempty=True)(
        op, name, value)
    if len(set(out)) != len(out):
        raise _bad(op, name, "a non-empty tuple of distinct int axes (no duplicates)", value)
    return out


AXES: Kind = _axes


def _shape(op: str, name: str, value: Any) -> tuple[int, ...]:
    # (A tuple first: ``_as_int`` of a tuple tries ``operator.index`` and catches its
    # TypeError, about 1 us of every reshape.)
    v = None if type(value) is tuple else _as_int(value)
    if v is not None:  # one int is a 1-D shape, as numpy.zeros(3) takes it
        if v < 0:
            raise _bad(op, name, "a shape (tuple of non-negative ints)", value)
        out: tuple[int, ...] = (v,)
    else:
        out = int_tuple_kind(0, "a shape (tuple of non-negative ints)")(op, name, value)
    check_size(op, f"attribute {name}", out)
    return out


SHAPE: Kind = _shape


def real_kind(expected: str, ok: Callable[[float], bool]) -> Kind:
    """A real scalar (ints and NumPy scalars accepted) satisfying ``ok``; becomes a float."""

    def check(op: str, name: str, value: Any) -> float:
        v = _as_real(value)
        if v is None or not ok(v):
            raise _bad(op, name, expected, value)
        return v

    return check


FINITE_REAL = real_kind("a real number (finite)", math.isfinite)
POSITIVE_REAL = real_kind("a positive number (finite)", lambda v: math.isfinite(v) and v > 0)
NON_NEGATIVE_REAL = real_kind("a non-negative number (finite)",
                              lambda v: math.isfinite(v) and v >= 0)
NOT_NAN_REAL = real_kind("a real number (not NaN; infinite bounds are allowed)",
                         lambda v: not math.isnan(v))
PROBABILITY = real_kind("a probability in [0, 1]", lambda v: 0.0 <= v <= 1.0)


def _bool(op: str, name: str, value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise _bad(op, name, "a bool", value)


BOOL: Kind = _bool


def choice_kind(choices: tuple[str, ...]) -> Kind:
    """One of the strings ``choices`` (exactly: not a bytes, not another case)."""
    expected = " or ".join(repr(c) for c in choices)

    def check(op: str, name: str, value: Any) -> str:
        if type(value) is not str or value not in choices:
            raise _bad(op, name, expected, value)
        return value

    return check


GELU_APPROXIMATE = choice_kind(("tanh", "none"))  # torch's and ONNX Gelu's names
RNN_MODE = choice_kind(("tanh", "relu", "gru"))  # rnn_scan's recurrences


def _nat_indices(op: str, name: str, value: Any) -> Any:
    """An int or an array of ints (any shape), each >= 0: Nat-style indices."""
    v = _as_int(value)
    if v is not None:
        if v < 0:
            raise _bad(op, name, "non-negative int indices", value)
        return v
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise _bad(op, name, "a rectangular array of non-negative int indices", value) from None
    if arr.size and arr.dtype.kind not in "iu":
        raise _bad(op, name, "non-negative int indices", value)
    if arr.size and int(arr.min()) < 0:
        raise _bad(op, name, "non-negative int indices", value)
    return value


NAT_INDICES: Kind = _nat_indices


def _bool_mask(op: str, name: str, value: Any) -> Any:
    """``None`` or a rectangular boolean array (its shape is the rule's to check)."""
    if value is None or (isinstance(value, np.ndarray) and value.dtype == np.bool_):
        return value
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise _bad(op, name, "None or a rectangular boolean array", value) from None
    if arr.dtype != np.bool_:
        raise _bad(op, name, "None or a boolean array (True = allowed)", value)
    return value


OPTIONAL_BOOL_MASK: Kind = _bool_mask


def _dtype(op: str, name: str, value: Any) -> np.dtype:
    try:
        dt = np.dtype(value)
    except TypeError:
        raise _bad(op, name, "float32 or float64", value) from None
    if dt not in (np.float32, np.float64):
        raise _bad(op, name, "float32 or float64", value)
    return dt


FLOAT_DTYPE: Kind = _dtype


def _index_tuple(op: str, name: str, value: Any) -> Any:
    """A normalised index tuple (``take``); its entries are the shape rule's to check."""
    if not isinstance(value, tuple):
        raise _bad(op, name, "a tuple (see tensor.normalize_index)", value)
    return value


INDEX_TUPLE: Kind = _index_tuple


# --- allocation limit --------------------------------------------------------------------------

# The most entries one result may have (about 4 GiB of float32). A typo such as
# ``one_hot(num_classes=2**40)`` is refused with a message instead of asking for terabytes.
_MAX_ELEMENTS = [1 << 30]


def max_elements() -> int:
    """The current allocation limit, in entries per result."""
    return _MAX_ELEMENTS[0]


def set_max_elements(n: int) -> int:
    """Set the allocation limit (entries per result); returns the previous one."""
    v = _as_int(n)
    if v is None or v < 1:
        raise ShapeError(f"set_max_elements: expected a positive int, found {n!r}")
    previous = _MAX_ELEMENTS[0]
    _MAX_ELEMENTS[0] = v
    return previous


def check_size(op: str, what: str, shape: tuple[int, ...]) -> None:
    """Refuse a shape with more entries than the allocation limit (``set_max_elements``)."""
    n = 1
    for d in shape:
        n *= d
    if n > _MAX_ELEMENTS[0]:
        raise ShapeError(f"{op}: {what} {shape} has {n} entries, more than the allocation "
                         f"limit {_MAX_ELEMENTS[0]} (torchlean.ops.attr_kinds.set_max_elements)")


# --- the schema of every built-in primitive ----------------------------------------------------

POSITIVE_PER_AXIS = per_axis_kind(1)
OPTIONAL_POSITIVE_PER_AXIS = per_axis_kind(1, optional=True)
NON_NEGATIVE_PER_AXIS = per_axis_kind(0)
SIZES = int_tuple_kind(0, "a tuple of non-negative ints")

POOL = {"kernel_size": POSITIVE_PER_AXIS, "stride": OPTIONAL_POSITIVE_PER_AXIS,
         "padding": NON_NEGATIVE_PER_AXIS}
POOL_2D = {"kernel_size": POSITIVE_PER_AXIS, "stride": OPTIONAL_POSITIVE_PER_AXIS}
POOL_HELPER = {"kernel_size": POSITIVE_INT_TUPLE, "stride": POSITIVE_PER_AXIS,
                "padding": NON_NEGATIVE_PER_AXIS}
CONV = {"stride": POSITIVE_PER_AXIS, "padding": NON_NEGATIVE_PER_AXIS}
CONV_T = {**CONV, "output_padding": NON_NEGATIVE_PER_AXIS}
RANDOM = {"shape": SHAPE, "seed": NON_NEGATIVE_INT, "counter": NON_NEGATIVE_INT}

