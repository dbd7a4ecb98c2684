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
``torchlean ops`` shows which definition each primitive links to (``SPECS``, a side table
keyed by the primitive's name).
"""

from __future__ import annotations

# Imported for their side effect: each module defines the specs of one op family (``scalar``
# holds the shared scalar functions; ``table`` renders the registry with them).
from . import (  # noqa: F401
    attention,
    conv,
    elementwise,
    encoding,
    general,
    indexing,
    layout,
    linalg,
    norm,
    pool,
    random,
    recurrent,
    reductions,
    take,
)
from .defs import SPECS, SpecEntry, define, get_spec

__all__ = ["SPECS", "SpecEntry", "define", "get_spec"]
