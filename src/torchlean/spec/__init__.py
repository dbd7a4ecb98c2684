"""The spec layer: a plain reference definition of every registered primitive's forward.

Each definition says exactly what its op computes, written for a reader rather than for speed:
explicit loops over output indices (``numpy.ndindex``), scalar arithmetic only, padding, ties and
out-of-range rules spelled out where they apply. Definitions are generic over the scalar type:
inputs are NumPy *object* arrays (0-d for scalars) holding Python floats, ``fractions.Fraction``
or sympy expressions, and the result is an object array of the output shape. Transcendental
functions and branches go through ``torchlean.spec.scalar`` so the same code runs on every
scalar type (a branch on a sympy expression becomes a ``Piecewise``, which sympy differentiates).

Calling convention, the same as the primitive's: ``spec(*inputs, **attrs)`` with the op's
attributes (``dtype`` included for nullary ops). ``rational=True`` marks definitions that use only
``+ - * /``, comparisons and integer index arithmetic, so they are exact over ``Fraction``.

The runtime never calls a spec: ``torchlean.verify`` compares the kernels with it, and
``torchlean ops`` shows which definition each primitive links to (``Primitive.spec``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ops.registry import REGISTRY


@dataclass(frozen=True)
class SpecEntry:
    """One reference definition and what it promises."""

    name: str
    fn: Callable[..., Any]
    rational: bool


SPECS: dict[str, SpecEntry] = {}


def define(name: str, *, rational: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as the reference definition of primitive ``name``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name not in REGISTRY:
            raise TypeError(f"spec for {name!r}: no such primitive is registered")
        if name in SPECS:
            raise TypeError(f"spec for {name!r} defined twice")
        SPECS[name] = SpecEntry(name, fn, rational)
        REGISTRY[name].spec = fn
        return fn

    return register


def get_spec(name: str) -> SpecEntry | None:
    """The reference definition of primitive ``name``, or ``None`` if it has none yet."""
    return SPECS.get(name)


def _load_all() -> None:
    # Imported for their side effect: each module of this package defines the specs of one op
    # family (``scalar`` holds the shared scalar functions).
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_load_all()

__all__ = ["SPECS", "SpecEntry", "define", "get_spec"]
