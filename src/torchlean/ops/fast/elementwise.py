"""Exact array VJPs of the hot elementwise primitives (NumPy only; see ``core.autodiff``).

The reference VJPs are written against the Ops interpreter so that they can be recorded and
differentiated again: tanh's is ``g * (1 + (-1 * y^2))``, four kernel calls behind six Python
frames, two of them with a Python-float operand (NumPy's slowest scalar path, ~0.7 us against
~0.3 us for an array operand on a length-16 vector). On the array interpreter those frames are
the cost of the eager backward. Each rule here computes the *same arithmetic* in the same order
(the same IEEE operations on the same operands, so the same bits), with the Python-float
constants as 0-d arrays of the value's dtype: tanh is ``g * (1 - y * y)``, three calls in one
frame. They are not fast kernels in ``registry.fast_kernels``' sense (those change rounding and
run only inside that block): ``autodiff.run_reverse`` uses them whenever it runs on
``ARRAY_OPS``, and anything else (another dtype, a device array) takes the reference rule. A
test checks every rule bitwise against its reference on random and special values (NaN, inf,
signed zeros) in float32 and float64.

Measured per call on length-16 float32 (1 thread): tanh 4.9 -> 1.3 us, relu 3.6 -> 1.6 us,
sigmoid 3.1 -> 1.3 us, mul 0.95 -> 0.75 us. Taken over ``g - g * y * y`` for tanh (one call
fewer, but other rounding) and ``np.where(x > 0, g, 0)`` for relu (slower, and ``-0.0 * g``
differs in sign).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.autodiff import register_array_rule
from ...core.registry import REGISTRY, Rule

_ND = np.ndarray
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
# The Python-float constants of the reference rules, as 0-d arrays of each float dtype: the
# same value in the same dtype (NumPy casts a Python float to the array's dtype), so the same
# arithmetic without the scalar conversion.
_ONE = {_F32: np.ones((), _F32), _F64: np.ones((), _F64)}
_ZERO = {_F32: np.zeros((), _F32), _F64: np.zeros((), _F64)}
_MINUS_ONE = {_F32: np.full((), -1.0, _F32), _F64: np.full((), -1.0, _F64)}


def _tanh(reference: Rule) -> Rule:
    # reference: mul(g, add_scalar(scale(square(y), c=-1.0), c=1.0)) = g * ((-(y * y)) + 1.0);
    # 1.0 + (-s) and 1.0 - s are the same IEEE operation.
    def vjp(ops: Any, g: Any, xs: Any, y: Any) -> Any:
        one = _ONE.get(y.dtype)
        if one is None or type(y) is not _ND or type(g) is not _ND:
            return reference(ops, g, xs, y)
        return (g * (one - y * y),)

    return vjp


def _relu(reference: Rule) -> Rule:
    # reference: mul(g, positive_mask(x)) = g * astype(x > 0, x.dtype); a bool operand is cast
    # to g's dtype as 1.0 / 0.0, the same factors.
    def vjp(ops: Any, g: Any, xs: Any, y: Any) -> Any:
        x = xs[0]
        zero = _ZERO.get(x.dtype)
        # (g of another dtype: the reference's product promotes to the wider one, a bool factor
        # would not.)
        if zero is None or type(x) is not _ND or type(g) is not _ND or g.dtype != x.dtype:
            return reference(ops, g, xs, y)
        return (g * (x > zero),)

    return vjp


def _sigmoid(reference: Rule) -> Rule:
    # reference: mul(g, mul(y, add_scalar(scale(y, c=-1.0), c=1.0))) = g * (y * ((-y) + 1.0)).
    def vjp(ops: Any, g: Any, xs: Any, y: Any) -> Any:
        one = _ONE.get(y.dtype)
        if one is None or type(y) is not _ND or type(g) is not _ND:
            return reference(ops, g, xs, y)
        return (g * (y * (one - y)),)

    return vjp


def _exp(reference: Rule) -> Rule:
    # reference: mul(g, y).
    def vjp(ops: Any, g: Any, xs: Any, y: Any) -> Any:
        if type(y) is not _ND or type(g) is not _ND:
            return reference(ops, g, xs, y)
        return (g * y,)

    return vjp


def _mul(reference: Rule) -> Rule:
    # reference: (mul(g, b), mul(g, a)), both computed (mul is not selective).
    def vjp(ops: Any, g: Any, xs: Any, out: Any) -> Any:
        a, b = xs
        if type(g) is not _ND or type(a) is not _ND or type(b) is not _ND:
            return reference(ops, g, xs, out)
        return (g * b, g * a)

    return vjp


def _sub(reference: Rule) -> Rule:
    # reference: (g, scale(g, c=-1.0)) = (g, g * -1.0): a product, not a negation (the two
    # differ on a NaN's sign bit).
    def vjp(ops: Any, g: Any, xs: Any, out: Any) -> Any:
        minus_one = _MINUS_ONE.get(g.dtype)
        if minus_one is None or type(g) is not _ND:
            return reference(ops, g, xs, out)
        return (g, g * minus_one)

    return vjp


EXACT: dict[str, Callable[[Rule], Rule]] = {
    "tanh": _tanh, "relu": _relu, "sigmoid": _sigmoid, "exp": _exp, "mul": _mul, "sub": _sub,
}

for _name, _make in EXACT.items():
    _prim = REGISTRY[_name]
    assert _prim.vjp is not None and _prim.fast_vjp is None
    register_array_rule(_prim.vjp, _make(_prim.vjp))

# The reverse driver's sum of two contributions: ``add``'s forward, ``a + b``, is
# ``operator.add`` (the same NumPy operator, without a Python frame).
assert REGISTRY["add"].fast_forward is None
register_array_rule(REGISTRY["add"].forward, operator.add)
