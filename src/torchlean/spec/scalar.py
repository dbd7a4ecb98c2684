"""Scalar functions for the spec layer, generic over float, ``Fraction`` and sympy expressions.

Every definition in ``torchlean.spec`` does its arithmetic with Python operators (which all three
scalar types support) and calls these for everything else, so one definition serves three uses:
floats for quick reading, ``Fraction`` for exact rational checks, sympy for exact derivatives.

- ``select(cond, a, b)``: ``a`` where ``cond`` holds, else ``b``. ``cond`` is a Python bool for
  numbers, or a sympy relation for symbolic inputs, in which case the result is a ``Piecewise``.
- Transcendentals (``exp``, ``log``, ``tanh``, ``sqrt``, ``erf``, ...) map to ``math`` on floats and
  to sympy on sympy expressions. A ``Fraction`` is converted to a sympy ``Rational`` first, so the
  result is exact (symbolic) rather than silently rounded.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def _sympy() -> Any:
    import sympy  # the `verify` extra; only needed for symbolic or Fraction transcendentals

    return sympy


def _symbolic(x: Any) -> Any:
    if isinstance(x, Fraction):
        return _sympy().Rational(x.numerator, x.denominator)
    return x


def is_true(cond: Any) -> bool | None:
    """``cond`` as a Python bool, or ``None`` when it is an undecided sympy relation."""
    if isinstance(cond, bool | np.bool_):
        return bool(cond)
    sympy = _sympy()
    if cond in (sympy.true, sympy.false):
        return bool(cond)
    return None


def select(cond: Any, a: Any, b: Any) -> Any:
    """``a`` if ``cond`` else ``b``; a ``Piecewise`` when ``cond`` is symbolic."""
    decided = is_true(cond)
    if decided is not None:
        return a if decided else b
    # Compare ``lhs - rhs`` with 0: sympy 1.14 can recurse without end on ``a >= b`` when both
    # sides are linear in one symbol with high-precision Float coefficients.
    cond = type(cond)(cond.lhs - cond.rhs, 0)
    return _sympy().Piecewise((a, cond), (b, True))


def _unary(math_fn: Any, sympy_name: str) -> Any:
    def fn(x: Any) -> Any:
        if _is_number(x):
            return math_fn(float(x))
        return getattr(_sympy(), sympy_name)(_symbolic(x))

    fn.__name__ = sympy_name
    return fn


exp = _unary(math.exp, "exp")
log = _unary(math.log, "log")
tanh = _unary(math.tanh, "tanh")
sqrt = _unary(math.sqrt, "sqrt")
erf = _unary(math.erf, "erf")
cos = _unary(math.cos, "cos")
sin = _unary(math.sin, "sin")


def to_int(x: Any) -> int:
    """An index value (stored as a float, Fraction or integer sympy number) as a Python int."""
    value = x if _is_number(x) or isinstance(x, Fraction) else float(x)
    if value != int(value):
        raise ValueError(f"index {x!r} is not an integer")
    return int(value)


def log1p(x: Any) -> Any:
    """``log(1 + x)``; on floats ``math.log1p``, accurate for tiny x (softplus needs it)."""
    if _is_number(x):
        return math.log1p(float(x))
    return _sympy().log(1 + _symbolic(x))


def constant(value: int | float | Fraction, like: Any) -> Any:
    """``value`` (an int, a float such as 0.5, or a Fraction) as a scalar of ``like``'s type.

    Masks, zero fills and one-hot rows produce constants; this keeps an output's entries of one
    scalar type (a ``Fraction`` input gives ``Fraction`` zeros, a sympy input sympy numbers).
    """
    if isinstance(like, Fraction):
        return Fraction(value)
    if isinstance(like, bool | int | np.integer):
        return value
    if _is_number(like):
        return float(value)
    return _sympy().Rational(value)  # exact: every float and Fraction is a rational number
