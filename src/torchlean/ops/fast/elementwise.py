"""Exact array VJPs of the hot elementwise primitives (NumPy only; see ``core.autodiff``),
the fast GELU kernel (a fast kernel proper, other rounding), and relu's forward as a compiled
loop where numba is loaded (the same bits; at the end).

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
from ...core.registry import REGISTRY, Rule, attach_fast
from ..elementwise import GELU_C, GELU_K, INV_SQRT2, INV_SQRT_2PI
from . import pool_jit, residuals

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


# ---------------------------------------------------------------------------------------------
# Fast GELU: a fast kernel proper (other rounding, within FAST_RTOL of the reference). The
# reference forward is the old composite's nine ops (a fresh array each) and its VJP the
# derivative written with primitives (about twenty more). Here the tanh form is rewritten with
# 1 + tanh(z) = 2 sigmoid(2z): gelu(x) = x s, s = 1 / (1 + exp(-2z)), z = C x (1 + K x^2), one
# exp in place of NumPy's float32 tanh (about 3x dearer than exp on W5's 65,536 entries); the
# forward keeps s, and the VJP is g (s + 2C x (1 + 3K x^2) s (1 - s)), all in place on two
# buffers. The exact form keeps Phi(x) = (1 + erf(x / sqrt 2)) / 2 and its VJP is
# g (Phi + x phi(x)). A VJP that finds no residual recomputes it with the forward's code.


def gelu_forward_saving(x: Any, approximate: str = "tanh") -> tuple[Any, Any]:
    """The output and ``s`` (tanh form) or ``Phi(x)`` (exact form), ``gelu_vjp_from``'s
    ``saved``."""
    if approximate == "tanh":
        s = x * x
        s *= -2.0 * GELU_C * GELU_K
        s -= 2.0 * GELU_C
        s *= x
        with np.errstate(over="ignore"):  # exp(+large) = inf gives s = 0: gelu's 0 tail
            np.exp(s, out=s)
        s += 1.0
        np.reciprocal(s, out=s)
        return x * s, s
    # SciPy's erf ufunc (float32 in, float32 out); imported on first use: loading
    # scipy.special costs most of a second, and only the exact form needs it.
    from scipy.special import erf

    phi = erf(x * INV_SQRT2)
    phi += 1.0
    phi *= 0.5
    return x * phi, phi


def gelu_forward(x: Any, approximate: str = "tanh") -> Any:
    """Fast ``gelu`` forward, keeping its residual against the output."""
    y, saved = gelu_forward_saving(x, approximate)
    residuals.save(y, "gelu", (x.shape, x.dtype.str, approximate), saved)
    return y


def gelu_vjp(ops: Any, g: Any, xs: Any, out: Any, approximate: str = "tanh") -> tuple[Any]:
    """Fast ``gelu`` VJP from the saved (or recomputed) residual."""
    x = xs[0]
    saved = residuals.load(out, "gelu", (x.shape, x.dtype.str, approximate))
    return gelu_vjp_from(ops, g, xs, out, saved, approximate)


def gelu_vjp_from(ops: Any, g: Any, xs: Any, out: Any, saved: Any,
                  approximate: str = "tanh") -> tuple[Any]:
    """The VJP from ``gelu_forward_saving``'s residual (recomputed when ``None``); the
    residual is only read (a second backward over the same forward finds it unchanged)."""
    x = xs[0]
    if saved is None:
        saved = gelu_forward_saving(x, approximate)[1]
    d = x * x
    if approximate == "tanh":
        s = saved
        d *= 3.0 * GELU_K
        d += 1.0
        d *= 2.0 * GELU_C
        d *= x  # 2C x (1 + 3K x^2) = dz/dx times 2
        sd = d * s
        d -= sd
        d += 1.0
        d *= s  # s (1 + (1 - s) 2C x (1 + 3K x^2))
    else:
        d *= -0.5
        np.exp(d, out=d)
        d *= INV_SQRT_2PI
        d *= x
        d += saved  # Phi(x) + x phi(x)
    d *= g
    return (d,)




def _gelu_vjp_rule(ops: Any, g: Any, xs: Any, out: Any, approximate: str = "tanh") -> Any:
    # The dispatcher hands over any NumPy cotangent; another dtype than the input's (a float64
    # seed on a float32 node) takes the reference, which promotes as the reference does.
    x = xs[0]
    if g.dtype != x.dtype or type(x) is not _ND or x.dtype not in (_F32, _F64):
        reference = REGISTRY["gelu"].reference_vjp
        assert reference is not None
        return reference(ops, g, xs, out, approximate=approximate)
    return gelu_vjp(ops, g, xs, out, approximate)


def _gelu_forward_rule(x: Any, approximate: str = "tanh") -> Any:
    if x.dtype not in (_F32, _F64):  # integer or bool input: the reference casts as NumPy does
        return REGISTRY["gelu"].reference_forward(x, approximate=approximate)
    return gelu_forward(x, approximate)


attach_fast("gelu", forward=_gelu_forward_rule, vjp=_gelu_vjp_rule)


# ---------------------------------------------------------------------------------------------
# relu's forward as one compiled pass (``pool_jit.relu``: NumPy's ``maximum(x, 0)`` bit for
# bit, where numba is already loaded and the array is large; the reference elsewhere). Exact,
# like the rules above, but a fast kernel in form, because it runs only where numba is loaded.


def _relu_forward_rule(x: Any) -> Any:
    out = pool_jit.relu(x)
    return out if out is not None else REGISTRY["relu"].reference_forward(x)


attach_fast("relu", forward=_relu_forward_rule)
residuals.explicit("gelu", gelu_forward_saving, gelu_vjp_from)
