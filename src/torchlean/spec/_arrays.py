"""Shared plumbing of the spec modules: object arrays, input checks and row-major index maps.

A definition converts its inputs with ``prepare`` (which also runs the primitive's own shape
rule, so a bad call raises the same ``ShapeError`` the runtime would), allocates its result with
``empty`` and fills it entry by entry. The index helpers spell out the two index maps that
layout and broadcasting ops rely on, so no definition hides them inside a NumPy call.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import numpy as np

from ..core.errors import ShapeError
from ..core.registry import REGISTRY

Index = tuple[int, ...]


def as_object(x: Any) -> np.ndarray:
    """``x`` as a NumPy object array (0-d for a scalar), entries unchanged."""
    if isinstance(x, np.ndarray) and x.dtype == object:
        return x
    return np.asarray(x, dtype=object)


def prepare(name: str, *xs: Any, **attrs: Any) -> list[np.ndarray]:
    """The inputs of primitive ``name`` as object arrays, checked by the primitive's shape rule.

    The shape rule raises the runtime's ``ShapeError`` (naming the op, the expected and the found
    shapes or attributes), so the spec accepts exactly the calls the kernel accepts.
    """
    arrays = [as_object(x) for x in xs]
    # Shape rules accept real-number attributes as floats; a caller that passes a float attribute
    # as its exact Fraction (to keep a rational spec exact) means the same number.
    shown = {k: float(v) if isinstance(v, Fraction) else v for k, v in attrs.items()}
    REGISTRY[name].infer(*[a.shape for a in arrays], **shown)
    return arrays


def empty(shape: Iterable[int]) -> np.ndarray:
    """An object array of ``shape`` to be filled entry by entry."""
    return np.empty(tuple(shape), dtype=object)


def sample_entry(*arrays: np.ndarray) -> Any:
    """Some entry of the inputs, whose scalar type constants take (0 when all are empty)."""
    for a in arrays:
        if a.size:
            return a.flat[0]
    return 0


def as_shape(op: str, shape: Any) -> tuple[int, ...]:
    """A shape attribute (an int or a sequence of ints) as a tuple."""
    if isinstance(shape, int | np.integer):
        return (int(shape),)
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        raise ShapeError(f"{op}: expected a shape (tuple of ints), found {shape!r}") from None


def flat_index(index: Index, shape: tuple[int, ...]) -> int:
    """Row-major position of ``index`` in ``shape``: the last axis varies fastest."""
    k = 0
    for i, d in zip(index, shape, strict=True):
        k = k * d + i
    return k


def unflat_index(k: int, shape: tuple[int, ...]) -> Index:
    """The index at row-major position ``k`` of ``shape`` (inverse of ``flat_index``)."""
    index = []
    for d in reversed(shape):
        index.append(k % d)
        k //= d
    return tuple(reversed(index))


def broadcast_index(out_index: Index, in_shape: tuple[int, ...]) -> Index:
    """The entry of an input of ``in_shape`` that NumPy broadcasting reads at ``out_index``.

    Shapes align on the right: the input's axis j is the output's axis j + (out ndim - in ndim),
    leading output axes the input lacks are ignored, and an input axis of length 1 is read at 0
    whatever the output index is.
    """
    lead = len(out_index) - len(in_shape)
    return tuple(0 if d == 1 else out_index[lead + j] for j, d in enumerate(in_shape))


def broadcast_shape(op: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast shape of ``a`` and ``b``: per right-aligned axis, the length not 1."""
    out = []
    for j in range(1, max(len(a), len(b)) + 1):
        da = a[-j] if j <= len(a) else 1
        db = b[-j] if j <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise ShapeError(f"{op}: shapes do not broadcast: {a} and {b}")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))
