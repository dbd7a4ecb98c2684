"""A gradient checker for registry primitives, itself tested (tests/test_op_battery.py).

Every check takes a primitive, one sample (float64 inputs plus static attributes) and a seeded
``rng`` for the random directions, and raises ``GradcheckError`` (an ``AssertionError``) with a
message naming the op, the check and the sample when it fails:

- ``check_vjp_fd``: the VJP ``J^T v`` equals central finite differences of ``<v, f(x)>``, entry by
  entry, in float64;
- ``check_jvp_fd``: the JVP ``J u`` equals the central difference
  ``(f(x + h u) - f(x - h u)) / 2h``;
- ``check_dot``: the dot-product test ``<v, J u> == <J^T v, u>`` (JVP and VJP are adjoint);
- ``check_vjp_paths``: the tape's reverse pass equals calling ``Primitive.apply_vjp`` directly.

Linear primitives are checked with a large step (h = 1), where central differences are exact up to
round-off. Derivatives come from the eager tape (``tape.<op>``), forward values from the kernel.
Tolerances live in one table per dtype. Arrays are compared shape first, then dtype, then values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import torchlean as tl
from torchlean.errors import UnsupportedJvpError
from torchlean.ops.registry import ARRAY_OPS, REGISTRY, Primitive, Sample

FD_STEP = 1e-6  # central differences in float64: truncation ~h^2, round-off ~1e-16/h
LINEAR_STEP = 1.0  # exact for linear maps

# (rtol, atol) per check and dtype. atol is scaled by max(1, |reference|) in assert_close.
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "float64": {
        "fd": (1e-5, 1e-6),
        "dot": (1e-9, 1e-11),
        "exact": (1e-12, 1e-13),
        "torch_forward": (1e-10, 1e-12),
        "torch_vjp": (1e-9, 1e-11),
    },
    "float32": {
        "forward": (2e-4, 2e-5),
    },
}


class GradcheckError(AssertionError):
    """A derivative rule (or forward) disagrees with its reference."""


def assert_close(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> None:
    """Compare shape, then dtype kind, then values (scale-aware absolute tolerance)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        raise GradcheckError(f"{what}: shape {actual.shape} != expected {expected.shape}")
    if actual.dtype.kind != expected.dtype.kind:
        raise GradcheckError(f"{what}: dtype {actual.dtype} != expected {expected.dtype}")
    if actual.size == 0:
        return
    finite = np.abs(expected[np.isfinite(expected)])
    # Scale by the finite entries only: an inf in the reference must not make atol infinite.
    scale = max(1.0, float(np.max(finite))) if finite.size else 1.0
    bad = ~np.isclose(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True)
    if bad.any():
        with np.errstate(invalid="ignore"):  # inf - inf at entries that agree
            worst = float(np.max(np.abs(actual - expected)[bad]))
        raise GradcheckError(
            f"{what}: {int(bad.sum())} of {actual.size} entries differ (max abs diff {worst:.3g}, "
            f"rtol {rtol}, atol {atol * scale:.3g})\nactual:\n{actual}\nexpected:\n{expected}")


def describe(prim: Primitive, sample: Sample) -> str:
    shapes = ", ".join(str(x.shape) for x in sample.inputs)
    note = f" [{sample.note}]" if sample.note else ""
    return f"{prim.name}({shapes}; {sample.attrs}){note}"


# --- evaluation ------------------------------------------------------------------------------


def forward(prim: Primitive, inputs: Sequence[np.ndarray], attrs: dict[str, Any],
            dtype: str = "float64") -> np.ndarray:
    """The forward value through a fresh tape of ``dtype`` (so shape rules run too)."""
    tape, _, out = record(prim, inputs, attrs, dtype)
    return np.asarray(tape.value(out))


def record(prim: Primitive, inputs: Sequence[np.ndarray], attrs: dict[str, Any],
           dtype: str = "float64") -> tuple[tl.Tape, list[int], int]:
    """A tape with one leaf per input and ``prim`` applied to them, via ``tape.<op>`` when the
    primitive is registered (``tape.record`` for the unregistered ones the checker tests use)."""
    tape = tl.Tape(dtype=dtype)
    ids = [tape.leaf(np.asarray(x, dtype=dtype)) for x in inputs]
    if REGISTRY.get(prim.name) is prim:
        out = getattr(tape, prim.name)(*ids, **attrs)
    else:
        out = tape.record(prim, ids, dict(attrs))
    return tape, ids, out


def _kernel(prim: Primitive, attrs: dict[str, Any]) -> Callable[..., np.ndarray]:
    """The bare forward kernel at fixed attributes (used for the many finite-difference calls)."""
    extra = {"dtype": np.dtype("float64")} if not prim.inputs and "dtype" in prim.attrs else {}
    full = {**prim.bind_attrs((), attrs), **extra}
    return lambda *xs: np.asarray(prim.forward(*xs, **full), dtype=np.float64)


def vjp(prim: Primitive, inputs: Sequence[np.ndarray], attrs: dict[str, Any],
        seed: np.ndarray) -> list[np.ndarray]:
    """``J^T seed`` for every input, from the tape's reverse pass (zeros where none arrives)."""
    tape, ids, out = record(prim, inputs, attrs)
    grads = tape.backward_dense_all(out, seed)
    return [np.asarray(grads[i]) for i in ids]


def jvp(prim: Primitive, inputs: Sequence[np.ndarray], attrs: dict[str, Any],
        tangents: Sequence[np.ndarray]) -> np.ndarray:
    """``J tangents`` from the tape's forward mode."""
    tape, ids, out = record(prim, inputs, attrs)
    return np.asarray(tape.jvp(out, dict(zip(ids, tangents, strict=True))))


def fd_vjp(f: Callable[..., np.ndarray], inputs: Sequence[np.ndarray], v: np.ndarray,
           h: float) -> list[np.ndarray]:
    """Central differences of ``<v, f(x)>`` with respect to every entry of every input."""
    xs = [np.array(x, dtype=np.float64) for x in inputs]
    grads = []
    for x in xs:
        g = np.zeros_like(x)
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


def fd_jvp(f: Callable[..., np.ndarray], inputs: Sequence[np.ndarray],
           tangents: Sequence[np.ndarray], h: float) -> np.ndarray:
    plus = f(*[x + h * t for x, t in zip(inputs, tangents, strict=True)])
    minus = f(*[x - h * t for x, t in zip(inputs, tangents, strict=True)])
    return (plus - minus) / (2 * h)


def directions(prim: Primitive, sample: Sample, rng: np.random.Generator
               ) -> tuple[list[np.ndarray], np.ndarray]:
    """Random input tangents ``u`` and an output cotangent ``v`` of the right shapes."""
    out = _kernel(prim, sample.attrs)(*sample.inputs)
    us = [rng.standard_normal(np.shape(x)) for x in sample.inputs]
    return us, rng.standard_normal(out.shape)


def _step(prim: Primitive) -> float:
    return LINEAR_STEP if prim.linear else FD_STEP


# --- checks ----------------------------------------------------------------------------------


def check_vjp_fd(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    _, v = directions(prim, sample, rng)
    got = vjp(prim, sample.inputs, sample.attrs, v)
    want = fd_vjp(_kernel(prim, sample.attrs), sample.inputs, v, _step(prim))
    rtol, atol = TOLERANCES["float64"]["fd"]
    for j, (a, e) in enumerate(zip(got, want, strict=True)):
        assert_close(a, e, rtol, atol, f"VJP vs finite differences, input {j}, "
                     f"{describe(prim, sample)}")


def check_jvp_fd(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    us, _ = directions(prim, sample, rng)
    got = jvp(prim, sample.inputs, sample.attrs, us)
    want = fd_jvp(_kernel(prim, sample.attrs), sample.inputs, us, _step(prim))
    rtol, atol = TOLERANCES["float64"]["fd"]
    assert_close(got, want, rtol, atol, f"JVP vs finite differences, {describe(prim, sample)}")


def check_dot(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    """``<v, J u> == <J^T v, u>``: the JVP and VJP rules describe the same Jacobian."""
    us, v = directions(prim, sample, rng)
    ju = jvp(prim, sample.inputs, sample.attrs, us)
    jtv = vjp(prim, sample.inputs, sample.attrs, v)
    left = float(np.sum(v * ju))
    right = float(sum(np.sum(g * u) for g, u in zip(jtv, us, strict=True)))
    rtol, atol = TOLERANCES["float64"]["dot"]
    assert_close(left, right, rtol, atol, f"dot-product test <v, J u> vs <J^T v, u>, "
                 f"{describe(prim, sample)}")


def check_vjp_paths(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    """The tape's reverse pass equals ``Primitive.apply_vjp`` on the arrays (same rule, same
    numbers: the tape adds nothing but bookkeeping)."""
    _, v = directions(prim, sample, rng)
    via_tape = vjp(prim, sample.inputs, sample.attrs, v)
    inputs = [np.asarray(x, dtype=np.float64) for x in sample.inputs]
    out = _kernel(prim, sample.attrs)(*inputs)
    direct = prim.apply_vjp(ARRAY_OPS, v, inputs, out, prim.bind_attrs((), sample.attrs))
    for j, (a, d) in enumerate(zip(via_tape, direct, strict=True)):
        expected = np.zeros_like(inputs[j]) if d is None else np.asarray(d)
        assert_close(a, expected, 0.0, 0.0, f"tape VJP vs apply_vjp, input {j}, "
                     f"{describe(prim, sample)}")


def check_nondiff(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    """A nondiff op passes no cotangent and has a zero tangent."""
    tape, ids, out = record(prim, sample.inputs, sample.attrs)
    if tape.node(out).requires_grad:
        raise GradcheckError(f"{prim.name}: a nondiff op's output must not require grad")
    grads = tape.backward_dense(out, np.ones(tape.value(out).shape))
    if any(grads[i] is not None for i in ids):
        raise GradcheckError(f"{prim.name}: a nondiff op passed a cotangent to its inputs")
    if ids:
        us, _ = directions(prim, sample, rng)
        t = tape.jvp(out, dict(zip(ids, us, strict=True)))
        assert_close(t, np.zeros(tape.value(out).shape), 0.0, 0.0,
                     f"{prim.name}: nondiff tangent")


def check_reverse_only(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    """A reverse-only op raises UnsupportedJvpError naming itself in forward mode."""
    us, _ = directions(prim, sample, rng)
    try:
        jvp(prim, sample.inputs, sample.attrs, us)
    except UnsupportedJvpError as exc:
        if prim.name not in str(exc):
            raise GradcheckError(
                f"{prim.name}: UnsupportedJvpError must name the op: {exc}") from None
        return
    raise GradcheckError(f"{prim.name}: reverse-only op gave a JVP instead of raising")


def check_float32_forward(prim: Primitive, sample: Sample) -> None:
    """The float32 forward stays close to the float64 one (and really is float32)."""
    hi = forward(prim, sample.inputs, sample.attrs, "float64")
    lo = forward(prim, sample.inputs, sample.attrs, "float32")
    if lo.dtype != np.float32:
        raise GradcheckError(f"{prim.name}: float32 inputs gave a {lo.dtype} output")
    rtol, atol = TOLERANCES["float32"]["forward"]
    assert_close(lo.astype(np.float64), hi, rtol, atol,
                 f"float32 forward vs float64, {describe(prim, sample)}")


def derivative_checks(prim: Primitive) -> list[Callable[[Primitive, Sample, Any], None]]:
    """Which checks make sense for an op of this kind."""
    if prim.nondiff:
        return [check_nondiff]
    checks: list[Callable[[Primitive, Sample, Any], None]] = [check_vjp_paths]
    if prim.fd_smooth:
        checks.append(check_vjp_fd)
    if prim.reverse_only:
        checks.append(check_reverse_only)
        return checks
    if prim.fd_smooth:
        checks.append(check_jvp_fd)
    checks.append(check_dot)
    return checks
