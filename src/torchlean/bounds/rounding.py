"""Outward-rounded float64 arithmetic: the helpers every bound rule uses to stay sound.

Bounds are carried in float64. Each helper returns an enclosure of the exact real result of the
operation on its (float64) arguments: the computed value is pushed outward by an a-priori error
bound (Higham's ``gamma_n = n u / (1 - n u)`` for sums of ``n`` terms, ``u = 2**-53``), and then by
one more ``numpy.nextafter`` step so the last rounding of the correction itself cannot cut into
the enclosure. Underflow is covered by an absolute term (``n`` times the smallest subnormal).

The float32 constants (``U32``, ``ETA32``) are for the *kernel* error terms: how far a float32
kernel's result may lie from the exact real result of the same operation on the same float32
inputs (see ``torchlean.bounds`` for the argument).
"""

from __future__ import annotations

from typing import Any

import numpy as np

U64 = 2.0 ** -53
ETA64 = 2.0 ** -1074
U32 = 2.0 ** -24
ETA32 = 2.0 ** -149
LIBM_ULPS = 4.0
"""Assumed worst error of NumPy's float64 transcendental functions (exp, tanh, log1p, ...), in
ulps; glibc documents at most 1-2 for these, so 4 leaves a margin."""
KERNEL32_ULPS = 16.0
"""Assumed worst relative error, in float32 ulps, of a float32 kernel built from a few
transcendental calls and roundings (sigmoid = 1 / (1 + exp(-x)), softplus, tanh)."""

Array = Any
NEG_INF = -np.inf
POS_INF = np.inf


def gamma(n: float, u: float = U64) -> float:
    """Higham's ``gamma_n`` (rounded up): the relative error bound of an n-term float sum."""
    nu = n * u
    if nu >= 0.5:
        raise ValueError(f"gamma: {n} terms is too many for a rounding bound with u = {u}")
    return float(np.nextafter(nu / (1.0 - nu), POS_INF)) * (1.0 + 4 * U64)


def down(x: Array) -> Array:
    """One step toward -inf (the computed value was correctly rounded, so this encloses it)."""
    return np.nextafter(x, NEG_INF)


def up(x: Array) -> Array:
    """One step toward +inf."""
    return np.nextafter(x, POS_INF)


def up_wide(x: Array) -> Array:
    """An upper bound at least one step above ``x``, about 10x cheaper than ``up`` on float64
    arrays (``numpy.nextafter`` calls libm per element): ``x + (|x| 2**-52 + ETA64)`` rounded to
    nearest. The step above a finite ``x`` is at most ``max(|x| 2**-52, ETA64)`` (both floats:
    scaling by a power of two rounds monotonically, and ``ETA64`` is the subnormal spacing), so
    the exact sum is at least ``up(x)``, a float, and rounding to nearest keeps it there; it may
    land one more step out (a tie), never less. Where the sum is ``nan`` (``x = -inf``) and for
    anything but a float64 array, ``up`` itself."""
    return _wide(x, 1.0)


def down_wide(x: Array) -> Array:
    """A lower bound at least one step below ``x``: ``up_wide`` mirrored."""
    return _wide(x, -1.0)


def _wide(x: Array, sign: float) -> Array:
    step = up if sign > 0 else down
    if not (isinstance(x, np.ndarray) and x.dtype == np.float64):
        return step(x)
    y = np.abs(x)
    y *= sign * 2.0 ** -52
    y += sign * ETA64
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is inf; inf - inf is redone
        y += x
    bad = np.isnan(y)
    if bad.any():
        y[bad] = step(x[bad])
    return y


def widen(lo: Array, hi: Array, err: Array) -> tuple[Array, Array]:
    """``[lo - err, hi + err]`` rounded outward (``err >= 0``, an upper bound already)."""
    return down(lo - err), up(hi + err)


def sum_down(terms: Array, axis: Any) -> Array:
    """A lower bound of the exact sum of ``terms`` (float64) along ``axis``."""
    n = _count(terms, axis)
    s = np.sum(terms, axis=axis)
    mag = np.sum(np.abs(terms), axis=axis)
    return down(s - gamma(n + 2) * mag - (n + 2) * ETA64)


def _count(terms: Array, axis: Any) -> int:
    shape = np.shape(terms)
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return int(np.prod([shape[a] for a in axes]))


def mid_rad(lo: Array, hi: Array) -> tuple[Array, Array]:
    """Centre ``c`` and radius ``r`` with ``[lo, hi]`` inside ``[c - r, c + r]`` (exactly)."""
    if lo is hi:  # a constant (weights): the point itself, radius 0, without a pass over it
        return lo, np.zeros(np.shape(lo))
    c = 0.5 * lo + 0.5 * hi  # no overflow; halving is exact (bar subnormals, covered by up())
    r = up(np.maximum(up(hi - c), up(c - lo)))
    # A point stays a point (radius exactly 0): subnormal radii would be useless, and slow.
    point = lo == hi
    return np.where(point, lo, c), np.where(point, 0.0, r)


def mag(lo: Array, hi: Array) -> Array:
    """``max(|lo|, |hi|)``: a bound on the absolute value of everything in ``[lo, hi]``."""
    return np.maximum(np.abs(lo), np.abs(hi))


def libm_lo(v: Array) -> Array:
    """A lower bound of the exact value of a transcendental function computed as ``v``."""
    return down(v - LIBM_ULPS * U64 * np.abs(v) - ETA64)


def libm_hi(v: Array) -> Array:
    """An upper bound of the exact value of a transcendental function computed as ``v``."""
    return up(v + LIBM_ULPS * U64 * np.abs(v) + ETA64)


def mul_lo(a: Array, b: Array) -> Array:
    """A lower bound of the exact product (one rounding, hence one step down)."""
    return down(a * b)


def mul_hi(a: Array, b: Array) -> Array:
    return up(a * b)
