"""The registry-wide battery, run through ``torchlean.verify`` (the checks live in the library;
this file only drives them over more draws and tests the checker itself).

Every primitive in REGISTRY, on its samples and on hypothesis-drawn seeds feeding the samples'
rng, gets the numeric columns of ``torchlean verify``:

- ``fd``: VJP vs central finite differences and JVP vs finite differences (float64), or for
  nondiff ops: no cotangent and a zero tangent; reverse-only ops raise in forward mode;
- ``dot``: the dot-product test ``<v, J u> == <J^T v, u>``;
- ``link``: compiled == eager bitwise, and ``to_tape`` + ``backward_dense_all`` ==
  ``backprop_all`` bitwise (this replaces the old check that compared ``apply_vjp`` with itself);
- ``torch``: forward and VJP against PyTorch's ``torch_ref`` in float64, except the samples that
  an intended difference covers.

Also registry-wide: second order, the VJP rule differentiated again (``Compiled.hvp``, forward
over the recorded reverse pass) against central differences of the VJP. The spec columns
(forward == spec, exact derivatives by sympy) run in tests/test_verify.py through
``torchlean verify --quick``.

A primitive registered later joins automatically; one without samples fails. The last tests
prove the checker rejects a wrong VJP rule, a wrong JVP rule, a VJP rule that is right only at
first order, and a missing broadcast reduction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from intended_differences import BY_OP

from torchlean.core.registry import REGISTRY, Primitive, Sample
from torchlean.verify import Mismatch, Settings, check_op
from torchlean.verify import checks as vc
from torchlean.verify import numeric as vn

NAMES = sorted(REGISTRY)
FIXED_SEED = 1234
NUMERIC = ("fd", "dot", "link", "torch")


def samples_of(prim: Primitive, seed: int) -> list[Sample]:
    return prim.samples(np.random.default_rng(seed))


def run_battery(prim: Primitive, seed: int) -> None:
    result = check_op(prim, Settings.make(quick=True, seed=seed, columns=NUMERIC))
    assert set(result.checks) == set(NUMERIC)
    failures = {c: f"{r.detail} on {r.sample}" for c, r in result.checks.items() if r.failed}
    assert not failures, f"{prim.name}: {failures}"
    ran = [c for c, r in result.checks.items() if r.status == "pass"]
    # Every differentiable primitive with inputs is really exercised, not waved through as n/a.
    if prim.inputs and not prim.nondiff:
        assert {"fd", "dot", "link"} <= set(ran), f"{prim.name}: only {ran} ran"


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
            assert isinstance(x, np.ndarray) and x.dtype == np.float64, vn.describe(prim, sample)
        attrs = vn.full_attrs(prim, sample.attrs)
        predicted = prim.infer(*[x.shape for x in sample.inputs], **attrs)
        out = vn.forward(prim, sample.inputs, sample.attrs)
        assert tuple(predicted) == out.shape, f"{vn.describe(prim, sample)}: shape rule"


def test_intended_differences_name_registered_ops() -> None:
    for op in BY_OP:
        assert op in REGISTRY, f"intended difference for unknown op {op}"


def test_a_primitive_without_samples_fails() -> None:
    mul = REGISTRY["mul"]
    empty = Primitive("no_samples_mul", ("a", "b"), mul.infer, mul.forward, vjp=mul.vjp,
                      jvp=mul.jvp, broadcasting=True, semantics="a * b (a test double)",
                      samples=lambda rng: [])
    result = check_op(empty, Settings.make(quick=True, columns=NUMERIC))
    assert all(r.failed and "no samples" in r.detail for r in result.checks.values())


# --- the battery -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_battery_on_samples(name: str) -> None:
    run_battery(REGISTRY[name], FIXED_SEED)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_battery_hypothesis(name: str, seed: int) -> None:
    run_battery(REGISTRY[name], seed)


SECOND_ORDER = [n for n in NAMES if REGISTRY[n].inputs and not REGISTRY[n].nondiff
                and not REGISTRY[n].linear]


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order_vs_finite_differences_of_the_vjp(name: str) -> None:
    """The VJP rule differentiated again (hvp) equals central differences of the VJP, for every
    non-linear differentiable primitive (linear ones have a zero second derivative)."""
    prim = REGISTRY[name]
    rng = np.random.default_rng(FIXED_SEED)
    for sample in samples_of(prim, FIXED_SEED)[:3]:
        vc.check_second_fd(prim, sample, rng)


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


def test_checker_accepts_correct_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    # The graph verifier (link, second order) accepts registered primitives only.
    monkeypatch.setitem(REGISTRY, GOOD.name, GOOD)
    for check in (vc.check_vjp_fd, vc.check_jvp_fd, vc.check_dot, vc.check_link,
                  vc.check_second_fd):
        check(GOOD, SAME_SHAPE, np.random.default_rng(0))


def test_checker_rejects_wrong_vjp_rule() -> None:
    with pytest.raises(Mismatch, match="VJP vs finite differences"):
        vc.check_vjp_fd(BAD_VJP, SAME_SHAPE, np.random.default_rng(0))
    with pytest.raises(Mismatch, match="dot-product test"):
        vc.check_dot(BAD_VJP, SAME_SHAPE, np.random.default_rng(0))
    vc.check_jvp_fd(BAD_VJP, SAME_SHAPE, np.random.default_rng(0))  # its JVP is right


# Right at first order, but the cotangent of a is recorded through detach(b): differentiating
# the recorded reverse pass loses the cross term d^2/da db, which only a second-order check sees.
DETACHED_VJP = _mul_like("detached_vjp_mul", lambda ops, g, xs, out: (
    ops.mul(g, ops.detach(xs[1])), ops.mul(g, xs[0])), _correct_jvp)


def test_checker_rejects_a_vjp_rule_that_is_wrong_only_at_second_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, DETACHED_VJP.name, DETACHED_VJP)
    rng = np.random.default_rng(0)
    for first_order in (vc.check_vjp_fd, vc.check_jvp_fd, vc.check_dot, vc.check_link):
        first_order(DETACHED_VJP, SAME_SHAPE, rng)
    with pytest.raises(Mismatch, match="hvp vs finite differences of the VJP"):
        vc.check_second_fd(DETACHED_VJP, SAME_SHAPE, rng)


def test_checker_rejects_wrong_jvp_rule() -> None:
    with pytest.raises(Mismatch, match="JVP vs finite differences"):
        vc.check_jvp_fd(BAD_JVP, SAME_SHAPE, np.random.default_rng(0))
    with pytest.raises(Mismatch, match="dot-product test"):
        vc.check_dot(BAD_JVP, SAME_SHAPE, np.random.default_rng(0))
    vc.check_vjp_fd(BAD_JVP, SAME_SHAPE, np.random.default_rng(0))  # its VJP is right


def test_checker_rejects_wrong_broadcast_reduction() -> None:
    """A VJP that is right elementwise but ignores broadcasting is caught by shape."""
    sample = Sample((np.ones((3, 4)), np.ones(4)))
    no_unbroadcast = Primitive(
        "no_unbroadcast_add", ("a", "b"), REGISTRY["add"].infer, REGISTRY["add"].forward,
        vjp=lambda ops, g, xs, out: (g, g), linear=False,
        jvp=lambda ops, ts, xs, out: ops.add(ts[0], ts[1]),
        semantics="add without reducing cotangents (a test double)", samples=lambda rng: [])
    with pytest.raises(Mismatch, match="shape"):
        vc.check_vjp_fd(no_unbroadcast, sample, np.random.default_rng(0))


def test_finite_differences_match_a_known_derivative() -> None:
    x = np.array([0.5, -1.0, 2.0])
    v = np.array([1.0, 2.0, -1.0])
    (g,) = vn.fd_vjp(lambda a: a**3, [x], v, vn.FD_STEP)
    np.testing.assert_allclose(g, 3 * x**2 * v, rtol=1e-8)
    t = vn.fd_jvp(lambda a: a**3, [x], [v], vn.FD_STEP)
    np.testing.assert_allclose(t, 3 * x**2 * v, rtol=1e-8)


def test_compare_reports_shape_then_dtype_then_values() -> None:
    with pytest.raises(Mismatch, match="shape"):
        vn.compare(np.zeros(3), np.zeros(4), 0, 0, "x")
    with pytest.raises(Mismatch, match="dtype"):
        vn.compare(np.zeros(3, dtype=np.int64), np.zeros(3), 0, 0, "x")
    with pytest.raises(Mismatch, match="1 of 3 entries differ"):
        vn.compare(np.array([0.0, 0.0, 1.0]), np.zeros(3), 1e-6, 1e-6, "x")
    # An inf in the reference does not stretch the tolerance of the finite entries.
    with pytest.raises(Mismatch, match="1 of 2 entries differ"):
        vn.compare(np.array([np.inf, 5.0]), np.array([np.inf, 0.0]), 1e-6, 1e-6, "x")
    assert vn.compare(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]), 1e-6, 0, "x") > 0


def test_bitwise_rejects_one_ulp() -> None:
    a = np.array([1.0, 2.0])
    vn.bitwise(a, a.copy(), "x")
    with pytest.raises(Mismatch, match="not bitwise equal"):
        vn.bitwise(a, np.nextafter(a, 3.0), "x")
    with pytest.raises(Mismatch):
        vn.bitwise(a, a.astype(np.float32), "x")
