"""Reference definitions of the elementwise primitives (``torchlean.ops.elementwise``).

Binary ops broadcast by NumPy's rule: ``out[i] = f(a[ia], b[ib])`` where ``ia`` and ``ib`` are
what ``broadcast_index`` maps the output index ``i`` to. Unary ops apply a scalar function to
every entry. Scalar attributes (``c``, ``lo``, ``hi``, ``eps``) are converted to the inputs'
scalar type first, so a ``Fraction`` input stays exact (``Fraction(0.1)`` is the double 0.1).

Comparisons of two inputs are written ``a - b > 0`` rather than ``a > b``: the same condition,
but sympy 1.14's ``Piecewise`` recurses without end on many relations between two expressions
in the same symbol (e.g. ``0.5 + 0.3 t >= 0.2 - 0.1 t``) and never on a difference against 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.errors import DomainError
from ..ops.elementwise import GELU_C, GELU_K, INV_SQRT2
from ._arrays import broadcast_index, broadcast_shape, empty, prepare
from .defs import define
from .scalar import constant, erf, exp, is_true, log, log1p, select, sqrt, tanh


def binary(name: str, a: Any, b: Any, f: Callable[[Any, Any], Any]) -> np.ndarray:
    """``out[i] = f(a[ia], b[ib])`` over the broadcast shape of ``a`` and ``b``."""
    a, b = prepare(name, a, b)
    out = empty(broadcast_shape(name, a.shape, b.shape))
    for i in np.ndindex(out.shape):
        out[i] = f(a[broadcast_index(i, a.shape)], b[broadcast_index(i, b.shape)])
    return out


def unary(name: str, x: Any, f: Callable[[Any], Any], **attrs: Any) -> np.ndarray:
    """``out[i] = f(x[i])`` for every index ``i`` of ``x``."""
    (x,) = prepare(name, x, **attrs)
    out = empty(x.shape)
    for i in np.ndindex(x.shape):
        out[i] = f(x[i])
    return out


# --- Binary arithmetic ------------------------------------------------------------------------


@define("add", rational=True)
def add(a: Any, b: Any) -> np.ndarray:
    """out[i] = a[ia] + b[ib], NumPy broadcasting."""
    return binary("add", a, b, lambda u, v: u + v)


@define("sub", rational=True)
def sub(a: Any, b: Any) -> np.ndarray:
    """out[i] = a[ia] - b[ib], NumPy broadcasting."""
    return binary("sub", a, b, lambda u, v: u - v)


@define("mul", rational=True)
def mul(a: Any, b: Any) -> np.ndarray:
    """out[i] = a[ia] * b[ib], NumPy broadcasting."""
    return binary("mul", a, b, lambda u, v: u * v)


def _max_weight(u: Any, v: Any) -> Any:
    return select(u - v > 0, constant(1, u), select(u - v < 0, constant(0, u), constant(0.5, u)))


@define("max_weight", rational=True)
def max_weight(a: Any, b: Any) -> np.ndarray:
    """out[i] = 1 if a > b, 1/2 if a == b (a tie), 0 if a < b; NumPy broadcasting.

    The share of max's gradient that goes to ``a`` (min uses max_weight(b, a)).
    """
    return binary("max_weight", a, b, _max_weight)


@define("max", rational=True)
def maximum(a: Any, b: Any) -> np.ndarray:
    """out[i] = a if a >= b else b; NumPy broadcasting. At a tie both candidates are equal."""
    return binary("max", a, b, lambda u, v: select(u - v >= 0, u, v))


@define("min", rational=True)
def minimum(a: Any, b: Any) -> np.ndarray:
    """out[i] = a if a <= b else b; NumPy broadcasting. At a tie both candidates are equal."""
    return binary("min", a, b, lambda u, v: select(u - v <= 0, u, v))


# --- Scalar-attribute arithmetic --------------------------------------------------------------


@define("scale", rational=True)
def scale(x: Any, c: float) -> np.ndarray:
    """out[i] = x[i] * c for a real number c."""
    return unary("scale", x, lambda v: v * constant(c, v), c=c)


@define("add_scalar", rational=True)
def add_scalar(x: Any, c: float) -> np.ndarray:
    """out[i] = x[i] + c for a real number c."""
    return unary("add_scalar", x, lambda v: v + constant(c, v), c=c)


# --- Piecewise-constant masks -----------------------------------------------------------------


@define("sign", rational=True)
def sign(x: Any) -> np.ndarray:
    """out[i] = 1 if x > 0, -1 if x < 0, 0 if x == 0."""
    return unary("sign", x, lambda v: select(
        v > 0, constant(1, v), select(v < 0, constant(-1, v), constant(0, v))))


@define("positive_mask", rational=True)
def positive_mask(x: Any) -> np.ndarray:
    """out[i] = 1 if x > 0 else 0 (so 0 at x == 0)."""
    return unary("positive_mask", x, lambda v: select(v > 0, constant(1, v), constant(0, v)))


@define("interval_mask", rational=True)
def interval_mask(x: Any, lo: float, hi: float) -> np.ndarray:
    """out[i] = 1 if lo < x < hi (open interval) else 0 (so 0 at both boundaries)."""

    def inside(v: Any) -> Any:
        low, high = constant(lo, v), constant(hi, v)
        return select(v > low, select(v < high, constant(1, v), constant(0, v)), constant(0, v))

    return unary("interval_mask", x, inside, lo=lo, hi=hi)


@define("zeros_like", rational=True)
def zeros_like(x: Any) -> np.ndarray:
    """out[i] = 0 for every index of x (x's shape, x's scalar type)."""
    return unary("zeros_like", x, lambda v: constant(0, v))


@define("detach", rational=True)
def detach(x: Any) -> np.ndarray:
    """out[i] = x[i]: the identity (it only differs from a copy in passing no gradient)."""
    return unary("detach", x, lambda v: v)


# --- Unary functions --------------------------------------------------------------------------


@define("square", rational=True)
def square(x: Any) -> np.ndarray:
    """out[i] = x[i] * x[i]."""
    return unary("square", x, lambda v: v * v)


@define("abs", rational=True)
def absolute(x: Any) -> np.ndarray:
    """out[i] = -x if x < 0 else x (so |0| = 0)."""
    return unary("abs", x, lambda v: select(v < 0, -v, v))


@define("relu", rational=True)
def relu(x: Any) -> np.ndarray:
    """out[i] = x if x > 0 else 0, i.e. max(x, 0)."""
    return unary("relu", x, lambda v: select(v > 0, v, constant(0, v)))


@define("sqrt_deriv", rational=False)
def sqrt_deriv(x: Any) -> np.ndarray:
    """out[i] = 1 / (2 sqrt(x)) if x > 0 else 0: sqrt's derivative, totalised to 0 at x <= 0."""
    return unary("sqrt_deriv", x, lambda v: select(v > 0, 1 / (2 * sqrt(v)), constant(0, v)))


@define("sqrt", rational=False)
def square_root(x: Any) -> np.ndarray:
    """out[i] = sqrt(max(x, 0)): sqrt(x) if x > 0 else 0 (negative input is clipped to 0)."""
    return unary("sqrt", x, lambda v: select(v > 0, sqrt(v), constant(0, v)))


@define("clamp", rational=True)
def clamp(x: Any, lo: float, hi: float) -> np.ndarray:
    """out[i] = lo if x < lo, hi if x > hi, else x: min(max(x, lo), hi), for lo <= hi."""

    def clip(v: Any) -> Any:
        low, high = constant(lo, v), constant(hi, v)
        return select(v < low, low, select(v > high, high, v))

    return unary("clamp", x, clip, lo=lo, hi=hi)


def _sigmoid(v: Any) -> Any:
    # Two equal forms of 1 / (1 + exp(-v)); each is the one whose exp cannot overflow on floats.
    return select(v >= 0, 1 / (1 + exp(-v)), exp(v) / (1 + exp(v)))


@define("sigmoid", rational=False)
def sigmoid(x: Any) -> np.ndarray:
    """out[i] = 1 / (1 + exp(-x)), written as exp(x) / (1 + exp(x)) for x < 0 (same value)."""
    return unary("sigmoid", x, _sigmoid)


@define("tanh", rational=False)
def hyperbolic_tangent(x: Any) -> np.ndarray:
    """out[i] = tanh(x) = (exp(x) - exp(-x)) / (exp(x) + exp(-x))."""
    return unary("tanh", x, tanh)


@define("exp", rational=False)
def exponential(x: Any) -> np.ndarray:
    """out[i] = exp(x)."""
    return unary("exp", x, exp)


def _softplus(v: Any) -> Any:
    # log(1 + exp(v)) = v + log(1 + exp(-v)); each form is the one accurate on floats.
    return select(v > 0, v + log1p(exp(-v)), log1p(exp(v)))


@define("softplus", rational=False)
def softplus(x: Any) -> np.ndarray:
    """out[i] = log(1 + exp(x)), written as x + log(1 + exp(-x)) for x > 0 (same value)."""
    return unary("softplus", x, _softplus)


def _checked_log(v: Any) -> Any:
    if is_true(v > 0) is False:
        raise DomainError(f"log: needs positive input, found an entry {v!r} <= 0 (safe_log is "
                          "total)")
    return log(v)


@define("log", rational=False)
def logarithm(x: Any) -> np.ndarray:
    """out[i] = log(x), the natural log; an entry x <= 0 is a DomainError (log is not total)."""
    return unary("log", x, _checked_log)


@define("inv", rational=True)
def inverse(x: Any) -> np.ndarray:
    """out[i] = 1 / x (undefined at x == 0: Python raises ZeroDivisionError there)."""
    return unary("inv", x, lambda v: 1 / v)


@define("safe_log", rational=False)
def safe_log(x: Any, eps: float = 1e-6) -> np.ndarray:
    """out[i] = log(softplus(x) + eps), total on all reals (softplus(x) + eps > 0)."""
    return unary("safe_log", x, lambda v: log(_softplus(v) + constant(eps, v)), eps=eps)


def _gelu_tanh(v: Any) -> Any:
    inner = constant(GELU_C, v) * (v + constant(GELU_K, v) * v * v * v)
    return constant(0.5, v) * v * (1 + tanh(inner))


def _gelu_exact(v: Any) -> Any:
    return constant(0.5, v) * v * (1 + erf(v * constant(INV_SQRT2, v)))


@define("gelu", rational=False)
def gelu(x: Any, approximate: str = "tanh") -> np.ndarray:
    """out[i] = 0.5 x (1 + tanh(C (x + K x^3))) for approximate='tanh', 0.5 x (1 + erf(x S))
    for approximate='none', with the float64 constants the kernel uses: C = sqrt(2/pi),
    K = 0.044715, S = 1/sqrt(2), each rounded to the nearest double."""
    return unary("gelu", x, _gelu_tanh if approximate == "tanh" else _gelu_exact,
                 approximate=approximate)
