"""Shapes as tuples of ints, and the shape arithmetic the ops need.

Every helper raises ``ShapeError`` naming the op, so shape rules read as one line each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import ShapeError

Shape = tuple[int, ...]


def size(shape: Shape) -> int:
    """Number of entries in a tensor of this shape (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= d
    return n


class StaticShape:
    """``ndim`` and ``size`` read off a ``shape`` tuple, for stand-ins that are known by their
    static shape before (or instead of) their values: a traced value in the code generator, a
    graph value not computed yet."""

    __slots__ = ()
    shape: Shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return size(self.shape)


def as_shape(op: str, shape: Iterable[int] | int) -> Shape:
    """Validate a user-given shape: non-negative ints."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{op}: expected a shape (tuple of ints), found {shape!r}") from None
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise ShapeError(f"{op}: shape entries must be non-negative ints, found {dims!r}")
    return dims


def broadcast_shapes(op: str, a: Shape, b: Shape) -> Shape:
    """NumPy broadcasting of two shapes, or ``ShapeError`` naming the op and both shapes."""
    if a == b:
        return a
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise ShapeError(f"{op}: shapes do not broadcast: {a} and {b}")
    return tuple(reversed(out))


def can_broadcast_to(src: Shape, dst: Shape) -> bool:
    """Whether ``src`` broadcasts to exactly ``dst`` (NumPy's rule, one direction)."""
    if len(src) > len(dst):
        return False
    for i in range(1, len(src) + 1):
        if src[-i] != dst[-i] and src[-i] != 1:
            return False
    return True


def check_axis(op: str, axis: int, shape: Shape) -> int:
    """Normalise a (possibly negative) axis for ``shape``; out of range is a ``ShapeError``."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ShapeError(f"{op}: axis must be an int, found {axis!r}")
    ndim = len(shape)
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} out of range for shape {shape} (ndim {ndim})")
    return axis % ndim


def per_axis(op: str, name: str, value: int | Sequence[int], d: int, minimum: int) -> Shape:
    """Expand an int or per-axis sequence (stride, padding, kernel) to ``d`` ints >= minimum."""
    vals = (value,) * d if isinstance(value, int) else tuple(value)
    if len(vals) != d or any(not isinstance(v, int) or isinstance(v, bool) for v in vals):
        raise ShapeError(f"{op}: {name} must be an int or {d} ints, found {value!r}")
    if any(v < minimum for v in vals):
        raise ShapeError(f"{op}: {name} must be >= {minimum}, found {value!r}")
    return vals


def conv_out_size(op: str, n: int, k: int, s: int, p: int) -> int:
    """Output length of a convolution or pooling window along one axis."""
    if n + 2 * p < k:
        raise ShapeError(f"{op}: kernel {k} larger than padded input {n} + 2*{p}")
    return (n + 2 * p - k) // s + 1

