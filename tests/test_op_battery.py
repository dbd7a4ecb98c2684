"""The registry-wide battery: every primitive in REGISTRY, on its samples and on hypothesis-drawn
seeds feeding the samples' rng, gets the checks that make sense for its kind:

- forward through the tape equals the kernel's shape rule, and PyTorch's ``torch_ref`` in float64;
- VJP vs central finite differences, JVP vs finite differences, the dot-product test, and the
  tape's reverse pass vs ``apply_vjp`` (differentiable ops; FD checks only where ``fd_smooth``);
- VJP vs PyTorch autograd wherever ``torch_ref`` exists, except the samples that an intended
  difference (tests/intended_differences.py) covers;
- nondiff ops pass no cotangent and have zero tangents; reverse-only ops raise in forward mode;
- the float32 forward stays close to the float64 one.

A primitive registered later (by any module) joins automatically; one without samples fails.
The last tests prove the checker rejects a wrong VJP rule and a wrong JVP rule.
"""

from __future__ import annotations

from typing import Any

import gradcheck as gc
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from intended_differences import BY_OP, torch_skips

from torchlean.ops.registry import REGISTRY, Primitive, Sample

NAMES = sorted(REGISTRY)
FIXED_SEED = 1234


def samples_of(prim: Primitive, seed: int) -> list[Sample]:
    return prim.samples(np.random.default_rng(seed))


def torch_compare(prim: Primitive, sample: Sample, rng: np.random.Generator) -> None:
    """Forward and (for differentiable ops) VJP against PyTorch in float64."""
    if prim.torch_ref is None or torch_skips(prim.name, sample):
        return
    attrs = prim.bind_attrs((), sample.attrs)
    leaves = [torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=not prim.nondiff)
              for x in sample.inputs]
    ref = prim.torch_ref(torch, *leaves, **attrs)
    ours = gc.forward(prim, sample.inputs, sample.attrs)
    rtol, atol = gc.TOLERANCES["float64"]["torch_forward"]
    gc.assert_close(ours, ref.detach().numpy(), rtol, atol,
                    f"forward vs PyTorch, {gc.describe(prim, sample)}")
    if prim.nondiff or not leaves or not ref.requires_grad:
        return
    v = rng.standard_normal(ours.shape)
    grads = torch.autograd.grad(ref, leaves, torch.tensor(v), allow_unused=True)
    mine = gc.vjp(prim, sample.inputs, sample.attrs, v)
    rtol, atol = gc.TOLERANCES["float64"]["torch_vjp"]
    for j, (g_t, g_ours) in enumerate(zip(grads, mine, strict=True)):
        expected = np.zeros(leaves[j].shape) if g_t is None else g_t.numpy()
        gc.assert_close(g_ours, expected, rtol, atol,
                        f"VJP vs PyTorch autograd, input {j}, {gc.describe(prim, sample)}")


def run_battery(prim: Primitive, seed: int) -> None:
    samples = samples_of(prim, seed)
    rng = np.random.default_rng(seed + 1)
    for sample in samples:
        for check in gc.derivative_checks(prim):
            check(prim, sample, rng)
        torch_compare(prim, sample, rng)
        gc.check_float32_forward(prim, sample)


# --- coverage ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_primitive_has_valid_samples(name: str) -> None:
    """Every registered primitive has samples (an op without tests fails here), each with one
    float64 array per declared input, accepted by the shape rule, which predicts the output."""
    prim = REGISTRY[name]
    samples = samples_of(prim, FIXED_SEED)
    assert samples, f"{name}: no samples; add some to its declaration"
    assert prim.semantics, f"{name}: no documented semantics"
    for sample in samples:
        assert len(sample.inputs) == len(prim.inputs), f"{name}: sample arity"
        for x in sample.inputs:
            assert isinstance(x, np.ndarray) and x.dtype == np.float64, gc.describe(prim, sample)
        attrs = prim.bind_attrs((), sample.attrs)
        if not prim.inputs and "dtype" in prim.attrs:
            attrs["dtype"] = np.dtype("float64")
        predicted = prim.infer(*[x.shape for x in sample.inputs], **attrs)
        out = gc.forward(prim, sample.inputs, sample.attrs)
        assert tuple(predicted) == out.shape, f"{gc.describe(prim, sample)}: shape rule"


def test_intended_differences_name_registered_ops() -> None:
    for op in BY_OP:
        assert op in REGISTRY, f"intended difference for unknown op {op}"


# --- the battery -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_battery_on_samples(name: str) -> None:
    run_battery(REGISTRY[name], FIXED_SEED)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_battery_hypothesis(name: str, seed: int) -> None:
    run_battery(REGISTRY[name], seed)


# --- the checker is itself tested ----------------------------------------------------------------


def _mul_like(name: str, vjp: Any, jvp: Any) -> Primitive:
    mul = REGISTRY["mul"]
    return Primitive(name, ("a", "b"), mul.infer, mul.forward, vjp=vjp, jvp=jvp,
                     broadcasting=True, semantics="a * b (a test double)", samples=mul.samples)


def _correct_jvp(ops: Any, ts: Any, xs: Any, out: Any) -> Any:
    return ops.add(ops.mul(ts[0], xs[1]), ops.mul(xs[0], ts[1]))


GOOD = _mul_like("good_mul", lambda ops, g, xs, out: (ops.mul(g, xs[1]), ops.mul(g, xs[0])),
                 _correct_jvp)
# Swapped operands: the classic wrong product rule.
BAD_VJP = _mul_like("bad_vjp_mul",
                    lambda ops, g, xs, out: (ops.mul(g, xs[0]), ops.mul(g, xs[1])), _correct_jvp)
# Forgets the tangent of b.
BAD_JVP = _mul_like("bad_jvp_mul", GOOD.vjp, lambda ops, ts, xs, out: ops.mul(ts[0], xs[1]))

SAME_SHAPE = Sample((np.random.default_rng(0).standard_normal((3, 4)),
                     np.random.default_rng(1).standard_normal((3, 4))))


def test_checker_accepts_correct_rules() -> None:
    for check in (gc.check_vjp_fd, gc.check_jvp_fd, gc.check_dot, gc.check_vjp_paths):
        check(GOOD, SAME_SHAPE, np.random.default_rng(0))


def test_checker_rejects_wrong_vjp_rule() -> None:
    with pytest.raises(gc.GradcheckError, match="VJP vs finite differences"):
        gc.check_vjp_fd(BAD_VJP, SAME_SHAPE, np.random.default_rng(0))
    with pytest.raises(gc.GradcheckError, match="dot-product test"):
        gc.check_dot(BAD_VJP, SAME_SHAPE, np.random.default_rng(0))
    gc.check_jvp_fd(BAD_VJP, SAME_SHAPE, np.random.default_rng(0))  # its JVP is right


def test_checker_rejects_wrong_jvp_rule() -> None:
    with pytest.raises(gc.GradcheckError, match="JVP vs finite differences"):
        gc.check_jvp_fd(BAD_JVP, SAME_SHAPE, np.random.default_rng(0))
    with pytest.raises(gc.GradcheckError, match="dot-product test"):
        gc.check_dot(BAD_JVP, SAME_SHAPE, np.random.default_rng(0))
    gc.check_vjp_fd(BAD_JVP, SAME_SHAPE, np.random.default_rng(0))  # its VJP is right


def test_checker_rejects_wrong_broadcast_reduction() -> None:
    """A VJP that is right elementwise but ignores broadcasting is caught by shape."""
    sample = Sample((np.ones((3, 4)), np.ones(4)))
    no_unbroadcast = Primitive(
        "no_unbroadcast_add", ("a", "b"), REGISTRY["add"].infer, REGISTRY["add"].forward,
        vjp=lambda ops, g, xs, out: (g, g), linear=False,
        jvp=lambda ops, ts, xs, out: ops.add(ts[0], ts[1]),
        semantics="add without reducing cotangents (a test double)", samples=lambda rng: [])
    with pytest.raises(gc.GradcheckError, match="shape"):
        gc.check_vjp_fd(no_unbroadcast, sample, np.random.default_rng(0))


def test_finite_differences_match_a_known_derivative() -> None:
    x = np.array([0.5, -1.0, 2.0])
    v = np.array([1.0, 2.0, -1.0])
    (g,) = gc.fd_vjp(lambda a: a**3, [x], v, gc.FD_STEP)
    np.testing.assert_allclose(g, 3 * x**2 * v, rtol=1e-8)
    t = gc.fd_jvp(lambda a: a**3, [x], [v], gc.FD_STEP)
    np.testing.assert_allclose(t, 3 * x**2 * v, rtol=1e-8)


def test_assert_close_reports_shape_then_dtype_then_values() -> None:
    with pytest.raises(gc.GradcheckError, match="shape"):
        gc.assert_close(np.zeros(3), np.zeros(4), 0, 0, "x")
    with pytest.raises(gc.GradcheckError, match="dtype"):
        gc.assert_close(np.zeros(3, dtype=np.int64), np.zeros(3), 0, 0, "x")
    with pytest.raises(gc.GradcheckError, match="1 of 3 entries differ"):
        gc.assert_close(np.array([0.0, 0.0, 1.0]), np.zeros(3), 1e-6, 1e-6, "x")
    # An inf in the reference does not stretch the tolerance of the finite entries.
    with pytest.raises(gc.GradcheckError, match="1 of 2 entries differ"):
        gc.assert_close(np.array([np.inf, 5.0]), np.array([np.inf, 0.0]), 1e-6, 1e-6, "x")
