"""The spec side of the checks: exact forward references and exact derivatives by sympy.

Forward references. A ``rational`` spec runs on ``fractions.Fraction`` inputs (every float64 is
exactly a Fraction), so its result is the exact real value R. Any other spec runs on sympy
``Float`` inputs at 40 significant digits (133 bits), so R is within about 1e-38 relative (under
``--quick``, on Python floats: about 1e-16 relative, still far inside the bound below).

What "equal to the spec" means for a float kernel K (``forward_error``):

- rational ops: ``|K - R| <= ulp(R)/2 + gamma_N * N * M`` per entry, where N is the number of
  input scalars (at least the number of terms any output entry sums), ``gamma_N = N u / (1 - N u)``
  with u the unit round-off (2^-53 for float64, 2^-24 for float32), and
  ``M = (2 max(1, |inputs|, |float attributes|))^2`` bounds one term (every rational op here is at
  most a product of two sums of inputs). That is the a-priori bound for recursive summation of N
  terms, plus the final rounding. Entries that are the correctly rounded R exactly are counted.
- other ops: ``|K - R| <= 2^-40 * max(1, max |R|)`` in float64 (about 4096 ulps at the output's
  scale) and 128 float32 ulps of the output scale in float32.

Exact derivatives. Every input becomes ``x0 + t u`` (one sympy symbol t, u a random direction;
exact ``Rational`` coordinates for rational specs, 40-digit ``Float`` ones otherwise); sympy
differentiates output entries of the spec with respect to t at t = 0, which is the exact
``(J u)_i``, and twice for the second order (at most ``limit`` entries per sample, kinks first).
Where a ``Piecewise`` condition of the spec sits on its boundary at t = 0 the entry is a kink:
its one-sided derivatives (t = +-1e-30) and, for "first maximum" conventions, the derivative with
ties broken toward earlier entries are returned so the checks can say which documented
convention the rules follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

import numpy as np

from ..core.registry import Primitive, Sample

DIGITS = 40
TRANSCENDENTAL_BOUND = 2.0**-40
FLOAT32_ULPS = 128
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24}
EPS_SIDE = "1e-30"


def sympy_module() -> Any:
    import sympy  # the `verify` extra

    return sympy


def objects(x: Any, convert: Any) -> np.ndarray:
    """An object array of the same shape whose entries are ``convert(float entry)``."""
    arr = np.asarray(x, dtype=np.float64)
    out = np.empty(arr.shape, dtype=object)
    for idx in np.ndindex(arr.shape):
        out[idx] = convert(float(arr[idx]))
    return out


def _magnitude(inputs: Sequence[Any], attrs: dict[str, Any]) -> float:
    values = [1.0] + [float(np.max(np.abs(x))) for x in inputs if np.size(x)]
    # Float attributes (scale's c, clamp's bounds) enter the arithmetic; integer ones are sizes.
    values += [abs(float(v)) for v in attrs.values() if isinstance(v, float | np.floating)]
    return (2.0 * max(values)) ** 2


def reference(spec: Any, rational: bool, inputs: Sequence[Any],
              attrs: dict[str, Any], high_precision: bool = True) -> np.ndarray:
    """The spec's exact (Fraction) or 40-digit (sympy Float) value at float inputs; with
    ``high_precision=False`` a non-rational spec runs on Python floats (``--quick``: its own
    round-off, about 1e-16 relative, is far inside the 2^-40 bound)."""
    if rational:
        xs = [objects(x, Fraction) for x in inputs]
        return np.asarray(spec(*xs, **attrs), dtype=object)
    if not high_precision:
        return np.asarray(spec(*[objects(x, float) for x in inputs], **attrs), dtype=object)
    sp = sympy_module()
    xs = [objects(x, lambda f: sp.Float(f, DIGITS)) for x in inputs]
    return np.asarray(spec(*xs, **attrs), dtype=object)


@dataclass
class ForwardError:
    """How far a kernel's output is from the spec: worst ratio error / bound, and the counts."""

    worst_error: float
    worst_ratio: float
    entries: int
    correctly_rounded: int


def forward_error(kernel_out: np.ndarray, ref: np.ndarray, rational: bool,
                  inputs: Sequence[Any], attrs: dict[str, Any], dtype: str) -> ForwardError:
    """Compare a kernel output with the spec's reference, entry by entry, under the bounds
    stated in the module docstring (``worst_ratio <= 1`` means within the bound everywhere)."""
    k = np.asarray(kernel_out)
    if k.shape != ref.shape:
        raise ValueError(f"kernel output shape {k.shape} != spec output shape {ref.shape}")
    u = UNIT_ROUNDOFF[dtype]
    n = max(1, sum(int(np.size(x)) for x in inputs))
    gamma = n * u / (1 - n * u)
    summation = gamma * n * _magnitude(inputs, attrs)
    worst_error, worst_ratio, exact = 0.0, 0.0, 0
    scale = 1.0
    if not rational:
        finite = [abs(float(r)) for r in ref.reshape(-1) if np.isfinite(float(r))]
        scale = max([1.0] + finite)
    for idx in np.ndindex(k.shape):
        kv, rv = float(k[idx]), ref[idx]
        rv = cast(Any, rv)
        if rational:
            r = rv if isinstance(rv, Fraction) else Fraction(rv)
            rounded = float(r)
            if kv == rounded:
                exact += 1
                continue
            if not np.isfinite(kv):
                err, bound = float("inf"), 0.0
            else:
                err = float(abs(Fraction(kv) - r))
                half_ulp = float(np.spacing(np.abs(np.asarray(rounded, dtype=dtype)))) / 2
                bound = half_ulp + summation
        else:
            rf = float(rv)
            if kv == rf or (np.isnan(kv) and np.isnan(rf)):
                exact += 1
                continue
            if not (np.isfinite(kv) and np.isfinite(rf)):
                err, bound = float("inf"), 0.0
            else:
                if isinstance(rv, float):
                    err = abs(kv - rv)
                else:
                    err = float(abs(sympy_module().Float(kv, DIGITS) - rv))
                if dtype == "float64":
                    bound = TRANSCENDENTAL_BOUND * scale
                else:
                    bound = FLOAT32_ULPS * float(np.spacing(np.float32(scale)))
        ratio = err / bound if bound > 0 else float("inf")
        worst_error = max(worst_error, err)
        worst_ratio = max(worst_ratio, ratio)
    return ForwardError(worst_error, worst_ratio, int(k.size), exact)


# --- exact derivatives ------------------------------------------------------------------------


@dataclass
class SpecDerivatives:
    """Exact directional derivatives of the spec at one sample along directions ``us``."""

    chosen: np.ndarray  # bool, output shape: the entries differentiated (the others are 0)
    first: np.ndarray  # (J u)_i, float64, output shape (at kinks: the t = 0 branch's value)
    kink: np.ndarray  # bool, output shape: entries where a branch condition is on its boundary
    right: np.ndarray  # one-sided derivative from t > 0 (equals ``first`` where smooth)
    left: np.ndarray  # one-sided derivative from t < 0
    tie_first: np.ndarray | None  # derivative with ties broken toward earlier entries
    second: np.ndarray | None  # d^2/dt^2 of each output entry at t = 0


def _kink_at_zero(expr: Any, t: Any, sp: Any) -> bool:
    for pw in expr.atoms(sp.Piecewise):
        for _, cond in pw.args:
            for rel in cond.atoms(sp.core.relational.Relational):
                gap = (rel.lhs - rel.rhs).subs(t, 0)
                if gap.is_number and abs(complex(gap)) <= 1e-30:
                    return True
    return False


def spec_derivatives(spec: Any, prim: Primitive, sample: Sample, us: Sequence[np.ndarray],
                     attrs: dict[str, Any], second: bool, tie_break: bool,
                     rational: bool = False, limit: int | None = None,
                     rng: np.random.Generator | None = None) -> SpecDerivatives:
    """Differentiate the spec along ``us`` at the sample (see the module docstring).

    At most ``limit`` output entries are differentiated (sympy's ``diff`` costs tens of
    milliseconds per entry): every kink entry, then a random choice of the others; ``chosen``
    marks them, and the checks restrict their cotangents to them.

    Rational specs get exact ``Rational`` coordinates (sympy's Piecewise canonicalisation can
    recurse without end on comparisons between Float-coefficient expressions); the others get
    40-digit ``Float`` ones, which keeps transcendental expressions numeric and small.
    """
    sp = sympy_module()

    def num(value: float) -> Any:
        return sp.Rational(value) if rational else sp.Float(value, DIGITS)

    t = sp.Symbol("t", real=True)

    def along(shift: Any) -> np.ndarray:
        # Each input entry k becomes x0 - shift * k + t u: a positive ``shift`` makes earlier
        # (row-major) entries larger, which breaks ties toward the first one.
        xs = []
        for j, (x, u) in enumerate(zip(sample.inputs, us, strict=True)):
            x0 = np.asarray(x, dtype=np.float64)
            arr = np.empty(x0.shape, dtype=object)
            fixed = prim.inputs[j] in prim.index_inputs  # integer ids: never moved
            for k, idx in enumerate(np.ndindex(x0.shape)):
                arr[idx] = num(float(x0[idx])) if fixed else (
                    num(float(x0[idx])) - shift * k + t * num(float(u[idx])))
            xs.append(arr)
        return np.asarray(spec(*xs, **attrs), dtype=object)

    out = along(0)
    shape = out.shape
    kink = np.zeros(shape, dtype=bool)
    for idx in np.ndindex(shape):
        e = out[idx] = sp.sympify(out[idx])
        kink[idx] = bool(e.has(sp.Piecewise) and _kink_at_zero(e, t, sp))
    chosen = np.ones(shape, dtype=bool)
    if limit is not None and out.size > limit:
        chosen = kink.copy()
        others = np.flatnonzero(~kink.reshape(-1))
        room = max(0, limit - int(kink.sum()))
        pick = (rng or np.random.default_rng(0)).permutation(others)[:room]
        chosen.reshape(-1)[pick] = True
    first = np.zeros(shape)
    right = np.zeros(shape)
    left = np.zeros(shape)
    sec = np.zeros(shape) if second else None
    eps = sp.Float(EPS_SIDE, DIGITS)
    for idx in np.ndindex(shape):
        if not chosen[idx]:
            continue
        e = out[idx]
        d = sp.diff(e, t)
        first[idx] = float(d.subs(t, 0))
        if kink[idx]:
            right[idx] = float(d.subs(t, eps))
            left[idx] = float(d.subs(t, -eps))
        else:
            right[idx] = left[idx] = first[idx]
        if sec is not None:
            sec[idx] = float(sp.diff(d, t).subs(t, 0))
    tie_first = None
    if tie_break and kink.any():
        broken = along(sp.Rational(1, 2**80))
        tie_first = first.copy()
        for idx in np.ndindex(shape):
            if not kink[idx]:
                continue
            tie_first[idx] = float(sp.diff(sp.sympify(broken[idx]), t).subs(t, 0))
    return SpecDerivatives(chosen, first, kink, right, left, tie_first, sec)
