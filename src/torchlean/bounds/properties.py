"""General specifications: input boxes, linear output constraints and their disjunctions.

A ``Property`` describes the *unsafe* set of a network ``y = N(x)``, in the form VNN-LIB writes
it: a disjunction of ``Region``s, each an input box ``lower <= x <= upper`` together with a
disjunction of ``Conjunction``s of linear output constraints ``sum_j a_j y_j <= b``. The network
violates the property (``sat``) when some input of some region's box maps to an output that
meets every constraint of one of that region's conjunctions; it satisfies it (``unsat``) when no
region and conjunction can be met.

Numbers are kept exactly (``fractions.Fraction``, as the text gave them), so that

* a bound pass refutes a conjunction over a box when one of its rows has a certified lower bound
  ``min_x a . N(x)`` strictly above ``b``: the box handed to ``compute_bounds`` is the exact box
  rounded *outward* to float64 and the threshold is rounded *up*, so the pass may only see a
  larger unsafe set than the real one (``refute``);
* a counterexample is accepted only when it lies in the exact box and its output meets every
  exact constraint, checked in rational arithmetic on the float values the network produced
  (``Region.contains``, ``Conjunction.holds``); attacks search the box rounded *inward* to the
  network's float type, so every point they try lies in the exact box.

Coefficients ``a_j`` that are not float64 numbers (``0.1``) are rounded to the nearest float64 for
the bound pass; ``Property.exact_coefficients`` says whether that happened (the claim then holds
for the rounded coefficients; the counterexample check is exact either way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from . import compute_bounds
from .engine import BoundsError

Array = Any

__all__ = ["Conjunction", "Constraint", "Property", "PropertyError", "Refutation", "Region",
           "refute"]


class PropertyError(BoundsError):
    """A specification that does not fit the network or is malformed."""


def _sign_minus(f: float, value: Fraction) -> int:
    """The sign of ``f - value``, exactly (integer arithmetic: no Fraction is built)."""
    p, q = f.as_integer_ratio()
    left, right = p * value.denominator, value.numerator * q
    return (left > right) - (left < right)


def _down(value: Fraction) -> float:
    """The largest float64 <= ``value``."""
    f = float(value)
    return float(np.nextafter(f, -np.inf)) if _sign_minus(f, value) > 0 else f


def _up(value: Fraction) -> float:
    """The smallest float64 >= ``value``."""
    f = float(value)
    return float(np.nextafter(f, np.inf)) if _sign_minus(f, value) < 0 else f


def _roundings(values: Sequence[Fraction]) -> tuple[Array, Array]:
    """Each value rounded down and up to float64 (the same float where it is one), exactly."""
    nearest = np.array([float(v) for v in values], dtype=np.float64)
    side = np.array([_sign_minus(float(f), v) for f, v in zip(nearest, values, strict=True)],
                    dtype=np.int64)
    return (np.where(side > 0, np.nextafter(nearest, -np.inf), nearest),
            np.where(side < 0, np.nextafter(nearest, np.inf), nearest))


def _ceil_to(x: Array, dt: Any) -> Array:
    """The smallest ``dt`` numbers >= the float64 numbers ``x``."""
    with np.errstate(over="ignore"):
        c = x.astype(dt)
    return np.where(c.astype(np.float64) < x, np.nextafter(c, dt.type(np.inf)), c).astype(dt)


def _floor_to(x: Array, dt: Any) -> Array:
    """The largest ``dt`` numbers <= the float64 numbers ``x``."""
    with np.errstate(over="ignore"):
        c = x.astype(dt)
    return np.where(c.astype(np.float64) > x, np.nextafter(c, dt.type(-np.inf)), c).astype(dt)


def _inward(value: Fraction, dtype: Any, towards: float) -> Any:
    """The ``dtype`` number nearest ``value`` on the side of ``towards`` (inside the box)."""
    f = dtype.type(float(value))
    step = dtype.type(towards)
    # Two roundings (decimal -> float64 -> dtype) can land on either side: walk back inside.
    while (_sign_minus(float(f), value) < 0) if towards > 0 else (
            _sign_minus(float(f), value) > 0):
        f = np.nextafter(f, step)
    return f


@dataclass(frozen=True)
class Constraint:
    """``sum(coef * y[index] for index, coef in terms) <= bound``, exactly."""

    terms: tuple[tuple[int, Fraction], ...]
    bound: Fraction

    def holds(self, y: Sequence[float]) -> bool:
        """Whether the constraint holds at ``y`` (flat outputs), in exact arithmetic."""
        return sum((c * Fraction(float(y[i])) for i, c in self.terms), Fraction(0)) <= self.bound


@dataclass(frozen=True)
class Conjunction:
    """One unsafe output set: every constraint holds (``A y <= b``)."""

    constraints: tuple[Constraint, ...]

    def matrix(self, n_outputs: int) -> tuple[Array, Array]:
        """``A`` (rows x n_outputs, float64, nearest) and ``b`` (rounded up: the unsafe set only
        grows, so refuting it refutes the exact one)."""
        a = np.zeros((len(self.constraints), n_outputs))
        b = np.zeros(len(self.constraints))
        for r, con in enumerate(self.constraints):
            for i, c in con.terms:
                a[r, i] += float(c)
            b[r] = _up(con.bound)
        return a, b

    def holds(self, y: Sequence[float]) -> bool:
        return all(con.holds(y) for con in self.constraints)

    def holds_throughout(self, y_lo: Sequence[float], y_hi: Sequence[float]) -> bool:
        """Whether every constraint holds at every point of the box ``[y_lo, y_hi]``, exactly:
        each left side's maximum over the box (an upper end per positive coefficient, a lower
        end per negative one) is at most its bound."""
        return all(
            sum((c * Fraction(float(y_hi[i] if c > 0 else y_lo[i])) for i, c in con.terms),
                Fraction(0)) <= con.bound
            for con in self.constraints)


@dataclass(frozen=True)
class Region:
    """An input box (exact ends, one per input) and the conjunctions unsafe over it."""

    lower: tuple[Fraction, ...]
    upper: tuple[Fraction, ...]
    outputs: tuple[Conjunction, ...]
    # The rounded boxes, computed on first use (not part of the region's value).
    _rounded: dict[tuple[str, Any], Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def empty(self) -> bool:
        key = ("empty", None)
        if key not in self._rounded:  # computed once: an exact comparison per input
            self._rounded[key] = any(lo > hi for lo, hi in zip(self.lower, self.upper,
                                                                strict=True))
        return bool(self._rounded[key])

    def _ends(self) -> tuple[Array, Array, Array, Array]:
        """Each end rounded down and up to float64: ``(lower down, lower up, upper down,
        upper up)``, computed once per region."""
        key = ("ends", None)
        if key not in self._rounded:
            self._rounded[key] = (*_roundings(self.lower), *_roundings(self.upper))
        return self._rounded[key]  # type: ignore[no-any-return]

    def box(self) -> tuple[Array, Array]:
        """The box rounded outward to float64 (contains the exact box)."""
        lo_down, _, _, hi_up = self._ends()
        return lo_down.copy(), hi_up.copy()

    def inner_box(self, dtype: Any = np.float32) -> tuple[Array, Array]:
        """The box rounded inward to ``dtype`` (inside the exact box); ``None`` ends are never
        produced: a box with no ``dtype`` point inside raises ``PropertyError``."""
        dt = np.dtype(dtype)
        key = ("inner", dt.str)
        if key not in self._rounded:
            # The smallest dtype number >= an end is the smallest >= its upward float64
            # rounding (dtype numbers are float64 numbers), and likewise downward.
            _, lo_up, hi_down, _ = self._ends()
            lo, hi = _ceil_to(lo_up, dt), _floor_to(hi_down, dt)
            if np.any(lo > hi):
                raise PropertyError(f"property: an input box holds no {dt} point (an interval "
                                    f"narrower than the {dt} spacing at input "
                                    f"{int(np.argmax(lo > hi))})")
            self._rounded[key] = (lo, hi)
        lo, hi = self._rounded[key]
        return lo.copy(), hi.copy()

    def contains(self, x: Sequence[float]) -> bool:
        """Whether the flat input ``x`` lies in the exact box."""
        return all(lo <= Fraction(float(v)) <= hi
                   for v, lo, hi in zip(x, self.lower, self.upper, strict=True))


@dataclass(frozen=True)
class Property:
    """The unsafe set: the union over regions of (box x union of conjunctions)."""

    n_inputs: int
    n_outputs: int
    regions: tuple[Region, ...]
    exact_coefficients: bool = True
    label: str = "<property>"

    def violated_by(self, x: Any, y: Any) -> tuple[int, int] | None:
        """``(region, conjunction)`` indices that the pair ``(x, y)`` (flat sequences of floats)
        meets exactly, or None."""
        return self._first_met(x, lambda conj: conj.holds(y))

    def violated_throughout(self, x: Any, y_lo: Any, y_hi: Any) -> tuple[int, int] | None:
        """As ``violated_by``, for every output in the box ``[y_lo, y_hi]`` at once (a certified
        enclosure of the network's outputs at ``x``: ``enclose_outputs``)."""
        return self._first_met(x, lambda conj: conj.holds_throughout(y_lo, y_hi))

    def _first_met(self, x: Any, meets: Any) -> tuple[int, int] | None:
        for r, region in enumerate(self.regions):
            # The outputs first: a few constraints, where the box has an exact test per input.
            met = [c for c, conj in enumerate(region.outputs) if meets(conj)]
            if met and region.contains(x):
                return r, met[0]
        return None


@dataclass
class Refutation:
    """What one bound pass showed about a region: per conjunction, proved infeasible or not, and
    its margin (the largest ``lower bound - threshold`` over its rows; > 0 means refuted)."""

    proved: list[bool]
    margins: list[float]
    bounds: Any = None
    info: dict[str, Any] = field(default_factory=dict)


def _spec_shape(out_shape: tuple[int, ...], n_outputs: int, label: str) -> tuple[int, ...]:
    size = int(np.prod(out_shape)) if out_shape else 1
    if size != n_outputs:
        raise PropertyError(f"{label}: the property has {n_outputs} outputs (Y_i), the network "
                            f"{size} (output shape {out_shape})")
    if not out_shape or out_shape[0] != 1:
        raise PropertyError(f"{label}: expected a network output with a batch axis of 1, found "
                            f"shape {out_shape}")
    return out_shape[1:]


def enclose_outputs(compiled: Any, x: Any, kernel: bool = True) -> tuple[Array, Array]:
    """Certified lower and upper ends of every output (flat, float64) at the one input ``x``:
    the bound engine's interval pass over the point box. With ``kernel`` they hold for the
    network's float32 computation whatever order its sums take (the engine's rounding error
    terms); without, for the real-valued network."""
    graph = compiled.graph
    in_shape = graph.nodes[graph.inputs[0]].shape
    rest = tuple(compiled.out_shape)[1:]
    m = int(np.prod(rest)) if rest else 1
    eye = np.eye(m)
    spec = np.concatenate([eye, -eye]).reshape((1, 2 * m, *rest))
    point = np.asarray(x, np.float64).reshape(in_shape)
    result = compute_bounds(compiled, point, point, method="crown", spec=spec, kernel=kernel)
    assert result.spec is not None
    lower = np.asarray(result.spec[0], np.float64).reshape(2 * m)
    return lower[:m], -lower[m:]


def confirm(compiled: Any, prop: Property, x: Any, y: Any) -> bool:
    """Whether ``x`` is a counterexample to report: the network's float32 output ``y`` meets an
    unsafe set exactly (``violated_by``) and so does every output the engine encloses at ``x``
    (``enclose_outputs`` with the float32 error terms, which also enclose the real-valued
    output), so that another float32 evaluation order (another runtime's summation,
    onnxruntime's) or exact arithmetic cannot take it out. A point within rounding of the
    boundary is not reported; the search goes on."""
    if not np.all(np.isfinite(y)) or prop.violated_by(x, y) is None:
        return False
    y_lo, y_hi = enclose_outputs(compiled, x, kernel=True)
    return prop.violated_throughout(x, y_lo, y_hi) is not None


def refute(compiled: Any, prop: Property, region: Region, *, method: str = "crown",
           kernel: bool = True, **options: Any) -> Refutation:
    """Try to prove every conjunction of ``region`` infeasible with one bound pass.

    All conjunctions' rows go into one specification matrix ``C`` of shape ``(1, K, *out)`` over
    the region's box (rounded outward), with the rows' thresholds; a conjunction is refuted when
    one of its rows has a lower bound above its threshold. ``options`` go to ``compute_bounds``
    (``reuse``: a CROWN ``Refutation.bounds`` of the same region, for alpha-CROWN).
    """
    graph = compiled.graph
    in_shape = graph.nodes[graph.inputs[0]].shape
    if int(np.prod(in_shape)) != prop.n_inputs:
        raise PropertyError(f"{prop.label}: the property has {prop.n_inputs} inputs (X_i), the "
                            f"network {int(np.prod(in_shape))} (input shape {in_shape})")
    rest = _spec_shape(tuple(compiled.out_shape), prop.n_outputs, prop.label)
    mats = [conj.matrix(prop.n_outputs) for conj in region.outputs]
    if region.empty:
        return Refutation([True] * len(mats), [np.inf] * len(mats))
    rows = [a for a, _ in mats]
    # A conjunction without output constraints (or with one that no output can meet) needs no
    # bound pass: it is unsafe over the whole (non-empty) box, or infeasible outright.
    k = sum(len(a) for a in rows)
    lo, hi = region.box()
    if k == 0:
        return Refutation([False] * len(mats), [-np.inf] * len(mats))
    spec = np.concatenate(rows, axis=0).reshape((1, k, *rest))
    thresholds = np.concatenate([b for _, b in mats])[None, :]
    groups = np.concatenate([np.full(len(b), c, dtype=np.int64) for c, (_, b) in enumerate(mats)])
    # The thresholds and groups let alpha-CROWN aim at (and stop on) the rows that matter: one
    # row per conjunction suffices.
    result = compute_bounds(compiled, lo.reshape(in_shape), hi.reshape(in_shape), method=method,
                            spec=spec, thresholds=thresholds, kernel=kernel, groups=groups,
                            **options)
    assert result.spec is not None
    lower = np.asarray(result.spec[0]).reshape(k)
    proved, margins, start = [], [], 0
    for a, b in mats:
        stop = start + len(a)
        gap = lower[start:stop] - b
        margin = float(np.max(gap)) if len(a) else -np.inf
        # lower > b compares two float64 numbers exactly: no rounding to account for here.
        proved.append(bool(np.any(lower[start:stop] > b)))
        margins.append(margin)
        start = stop
    return Refutation(proved, margins, result, dict(result.info))
