"""Call checking and window geometry shared by the conv, pool, norm and attention specs.

A spec definition is a public entry point, so it rejects a bad call the way the primitive does:
``checked`` binds the attributes with the primitive's own signature (``SignatureError``), runs
its shape rule through ``_arrays.prepare`` (``ShapeError``) before any arithmetic, and hands back
the inputs as NumPy object arrays. Only the *checks* come from the registry record; every
definition computes its output geometry and its values itself.

The window helpers spell out the one geometry convolution and pooling share: output position
``i`` of a window op with kernel ``k``, stride ``s`` and padding ``p`` reads input positions
``i * s + q - p`` for the kernel offsets ``q`` in row-major order; a position outside
``[0, n)`` is a padded cell.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..core.errors import DomainError, SignatureError
from ..core.registry import REGISTRY
from ._arrays import Index, prepare


def _is_scalar(value: Any) -> bool:
    if isinstance(value, bool | np.bool_ | complex):
        return False
    if isinstance(value, numbers.Real):
        return True
    import sympy  # the `verify` extra: only reached for entries that are not plain numbers

    return isinstance(value, sympy.Expr)


def checked(name: str, inputs: Sequence[Any], attrs: dict[str, Any]
            ) -> tuple[tuple[np.ndarray, ...], dict[str, Any]]:
    """The inputs of a call to spec ``name`` as object arrays, and its attributes with defaults.

    Raises what the primitive raises for a bad call: ``SignatureError`` for a wrong number of
    inputs or an unknown attribute (the primitive's own signature binds them), ``ShapeError``
    from its shape rule (``_arrays.prepare``), and ``DomainError`` for an entry that is not a
    real number or a sympy expression.
    """
    prim = REGISTRY[name]
    args, bound = prim.split_call(tuple(inputs), attrs)
    arrays = tuple(prepare(name, *args, **bound))
    for which, array in zip(prim.inputs, arrays, strict=True):
        for value in array.flat:
            if not _is_scalar(value):
                raise DomainError(f"spec {name}: input {which!r} must hold real numbers "
                                  f"(float, Fraction) or sympy expressions, found {value!r}")
    return arrays, bound


def signature_checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` raising ``SignatureError`` (naming the op) instead of Python's bare ``TypeError``
    when called with a wrong number of inputs or an unknown attribute name."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise SignatureError(f"spec {fn.__name__}: {exc}; expected {fn.__name__}"
                                 f"{signature}") from None
        return fn(*args, **kwargs)

    return call


def per_axis(value: int | Sequence[int], d: int) -> Index:
    """An int or per-axis sequence (stride, padding, kernel size) as ``d`` ints."""
    if isinstance(value, int | np.integer):
        return (int(value),) * d
    return tuple(int(v) for v in value)


def window_out_size(n: int, k: int, s: int, p: int) -> int:
    """Number of windows along one axis: ``(n + 2p - k) // s + 1``."""
    return (n + 2 * p - k) // s + 1


def inside(pos: Index, spatial: Index) -> bool:
    """Whether ``pos`` is a real cell of an input with spatial size ``spatial``."""
    return all(0 <= i < n for i, n in zip(pos, spatial, strict=True))


def window_cells(i: Index, kernel: Index, stride: Index, padding: Index
                 ) -> Iterator[tuple[Index, Index]]:
    """``(q, pos)`` for each kernel offset ``q`` of window ``i`` in row-major order, where
    ``pos = i * s + q - p`` is the input position it reads (maybe a padded cell)."""
    for q in np.ndindex(*kernel):
        yield q, tuple(ii * s + qq - p for ii, qq, s, p in zip(i, q, stride, padding,
                                                               strict=True))
