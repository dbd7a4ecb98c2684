"""Floating-point evaluation for the checks: a primitive on a fresh tape, its VJP and JVP, central
finite differences, and the one comparison every check uses.

Derivatives come from the eager tape (``tape.record`` then its reverse or forward pass), forward
values from the kernel. ``compare`` checks shape, then dtype kind, then values with a tolerance
scaled by the reference's largest finite entry, and raises ``Mismatch`` with the largest error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.registry import Primitive, Sample
from ..engine.tape import Tape

FD_STEP = 1e-6  # central differences in float64: truncation ~h^2, round-off ~1e-16/h
LINEAR_STEP = 1.0  # exact for linear maps, up to round-off

# (rtol, atol) per check; atol is scaled by max(1, |largest finite reference entry|).
TOLERANCES: dict[str, tuple[float, float]] = {
    "fd": (1e-5, 1e-6),
    "dot": (1e-9, 1e-11),
    "exact_derivative": (1e-12, 1e-12),
    "second_fd": (1e-5, 1e-6),
    "torch_forward": (1e-10, 1e-12),
    "torch_vjp": (1e-9, 1e-11),
}


class Mismatch(AssertionError):
    """A value disagrees with its reference; ``error`` is the largest absolute difference."""

    def __init__(self, message: str, error: float | None = None) -> None:
        super().__init__(message)
        self.error = error


def compare(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> float:
    """Raise ``Mismatch`` unless shapes, dtype kinds and values agree; return the largest error."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        raise Mismatch(f"{what}: shape {actual.shape} != expected {expected.shape}")
    if actual.dtype.kind != expected.dtype.kind:
        raise Mismatch(f"{what}: dtype {actual.dtype} != expected {expected.dtype}")
    if actual.size == 0:
        return 0.0
    finite = np.abs(expected[np.isfinite(expected)])
    # Scale by the finite entries only: an inf in the reference must not make atol infinite.
    scale = max(1.0, float(np.max(finite))) if finite.size else 1.0
    with np.errstate(invalid="ignore"):  # inf - inf at entries that agree
        diff = np.abs(actual - expected)
        both = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
        diff = np.where(both, 0.0, diff)
    bad = ~np.isclose(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True)
    worst = float(np.max(diff)) if diff.size else 0.0
    if bad.any():
        worst_bad = float(np.max(diff[bad]))
        raise Mismatch(
            f"{what}: {int(bad.sum())} of {actual.size} entries differ (max abs diff "
            f"{worst_bad:.3g}, rtol {rtol}, atol {atol * scale:.3g})", worst_bad)
    return worst


def bitwise(actual: Any, expected: Any, what: str) -> None:
    """Raise ``Mismatch`` unless the two arrays are identical (shape, dtype and every bit)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        raise Mismatch(f"{what}: {a.dtype}{a.shape} != {e.dtype}{e.shape}")
    if not np.array_equal(a, e, equal_nan=True):
        with np.errstate(invalid="ignore"):
            err = float(np.nanmax(np.abs(a - e))) if a.size else 0.0
        raise Mismatch(f"{what}: not bitwise equal (max abs diff {err:.3g})", err)


def describe(prim: Primitive, sample: Sample) -> str:
    shapes = ", ".join(str(tuple(np.shape(x))) for x in sample.inputs)
    attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
             for k, v in sample.attrs.items()}
    note = f" [{sample.note}]" if sample.note else ""
    text = f"{prim.name}({shapes}; {attrs}){note}"
    return text if len(text) <= 160 else text[:157] + "..."


def full_attrs(prim: Primitive, attrs: dict[str, Any], dtype: str = "float64") -> dict[str, Any]:
    """Every attribute bound (defaults filled), plus ``dtype`` for nullary ops."""
    bound = prim.bind_attrs((), attrs)
    if not prim.inputs and "dtype" in prim.attrs:
        bound["dtype"] = np.dtype(dtype)
    return bound


def record(prim: Primitive, inputs: Sequence[Any], attrs: dict[str, Any],
           dtype: str = "float64") -> tuple[Tape, list[int], int]:
    """A fresh tape with one leaf per input and ``prim`` recorded on them (shape rule runs)."""
    tape = Tape(dtype=dtype)
    ids = [tape.leaf(np.asarray(x, dtype=dtype)) for x in inputs]
    out = tape.record(prim, ids, prim.bind_attrs((), attrs))
    return tape, ids, out


def forward(prim: Primitive, inputs: Sequence[Any], attrs: dict[str, Any],
            dtype: str = "float64") -> np.ndarray:
    tape, _, out = record(prim, inputs, attrs, dtype)
    return np.asarray(tape.value(out))


def kernel(prim: Primitive, attrs: dict[str, Any]) -> Callable[..., np.ndarray]:
    """The bare float64 forward kernel at fixed attributes (for the many FD evaluations)."""
    full = full_attrs(prim, attrs)
    return lambda *xs: np.asarray(prim.forward(*xs, **full), dtype=np.float64)


def vjp(prim: Primitive, inputs: Sequence[Any], attrs: dict[str, Any],
        seed: np.ndarray) -> list[np.ndarray]:
    """``J^T seed`` for every input, from the tape's reverse pass (zeros where none arrives)."""
    tape, ids, out = record(prim, inputs, attrs)
    grads = tape.backward_dense_all(out, seed)
    return [np.asarray(grads[i]) for i in ids]


def jvp(prim: Primitive, inputs: Sequence[Any], attrs: dict[str, Any],
        tangents: Sequence[np.ndarray]) -> np.ndarray:
    """``J tangents`` from the tape's forward mode."""
    tape, ids, out = record(prim, inputs, attrs)
    return np.asarray(tape.jvp(out, dict(zip(ids, tangents, strict=True))))


def fd_vjp(f: Callable[..., np.ndarray], inputs: Sequence[np.ndarray], v: np.ndarray,
           h: float, fixed: Sequence[int] = ()) -> list[np.ndarray]:
    """Central differences of ``<v, f(x)>`` with respect to every entry of every input; the
    inputs numbered in ``fixed`` (integer indices) are never perturbed and get zeros."""
    xs = [np.array(x, dtype=np.float64) for x in inputs]
    grads = []
    for j, x in enumerate(xs):
        g = np.zeros_like(x)
        if j in fixed:
            grads.append(g)
            continue
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for k in range(flat.size):
            orig = flat[k]
            flat[k] = orig + h
            plus = float(np.sum(v * f(*xs)))
            flat[k] = orig - h
            minus = float(np.sum(v * f(*xs)))
            flat[k] = orig
            gflat[k] = (plus - minus) / (2 * h)
        grads.append(g)
    return grads


def fd_jvp(f: Callable[..., Any], inputs: Sequence[np.ndarray],
           tangents: Sequence[np.ndarray], h: float) -> Any:
    """``(f(x + h u) - f(x - h u)) / 2h`` (``f`` may return an array or a list of arrays)."""
    plus = f(*[x + h * t for x, t in zip(inputs, tangents, strict=True)])
    minus = f(*[x - h * t for x, t in zip(inputs, tangents, strict=True)])
    if isinstance(plus, list | tuple):
        return [(p - m) / (2 * h) for p, m in zip(plus, minus, strict=True)]
    return (plus - minus) / (2 * h)


def directions(prim: Primitive, sample: Sample, rng: np.random.Generator
               ) -> tuple[list[np.ndarray], np.ndarray]:
    """Random input tangents ``u`` and an output cotangent ``v`` of the right shapes."""
    out = kernel(prim, sample.attrs)(*sample.inputs)
    us = [rng.standard_normal(np.shape(x)) for x in sample.inputs]
    for j in index_positions(prim):
        us[j] = np.zeros(np.shape(sample.inputs[j]))  # integer indices are never perturbed
    return us, rng.standard_normal(out.shape)


def index_positions(prim: Primitive) -> tuple[int, ...]:
    """Positions of the inputs that hold integer indices (``Primitive.index_inputs``)."""
    return tuple(prim.inputs.index(name) for name in prim.index_inputs)


def step(prim: Primitive) -> float:
    return LINEAR_STEP if prim.linear else FD_STEP
