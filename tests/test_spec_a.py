"""The reference specs of the elementwise, reductions, linalg, layout, indexing, encoding and
random primitives (``torchlean.spec``), checked against the runtime kernels.

For every primitive of these families and every registry sample: the spec over Python floats
matches the kernel to 1e-12; the rational specs over ``Fraction`` equal the kernel exactly where
the kernel is exact by construction, equal its correctly rounded value where it rounds once, and
stay within a float64 accumulation bound elsewhere. Further tests show the comparison catches
deliberately wrong kernels and that sympy can differentiate the specs.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import sympy

import torchlean  # noqa: F401  (registers every primitive)
from torchlean.core.errors import DomainError, ShapeError
from torchlean.core.registry import REGISTRY, Sample
from torchlean.spec import SPECS, get_spec
from torchlean.spec.random import draw_bits, round_to_format, splitmix64

FAMILIES = ("elementwise", "reductions", "linalg", "layout", "indexing", "encoding", "random")
EPS = float(np.finfo(np.float64).eps)


def _declared_in(family: str) -> set[str]:
    """Names of the primitives that ``torchlean.ops.<family>`` declares.

    A call whose first argument is a registered name's string literal (``register(Primitive(
    "add", ...))``, ``elementwise_unary("relu", ...)``, ``_minmax("max", ...)``) declares it; read
    from the source so a primitive added later is covered without editing this file.
    """
    module = importlib.import_module(f"torchlean.ops.{family}")
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in REGISTRY):
            names.add(node.args[0].value)
    return names


FAMILY_OF = {name: family for family in FAMILIES for name in _declared_in(family)}
NAMES = sorted(FAMILY_OF)
RATIONAL = [n for n in NAMES if (e := get_spec(n)) is not None and e.rational]
TRANSCENDENTAL = [n for n in NAMES if (e := get_spec(n)) is not None and not e.rational]

# Kernels that only move, compare or select entries: their output is exactly the spec's.
EXACT = {
    "max", "min", "max_weight", "sign", "positive_mask", "interval_mask", "zeros_like",
    "detach", "abs", "relu", "clamp", "one_hot", "gather_scalar", "gather_row",
    "gather_scalar_nat", "gather_vec_nat", "gather_rows_nat", "concat_vectors", "concat_dim0",
    "slice_range0", "pad_range0", "reshape", "flatten", "transpose2d",
    "transpose3d_first_to_last", "transpose3d_last_to_first", "transpose3d_last_two",
    "swap_adjacent_at_depth", "broadcast_to", "rand_uniform", "bernoulli_mask",
}
# Kernels that round once per entry (IEEE): their output is the spec's value correctly rounded.
ROUNDED_ONCE = {"add", "sub", "mul", "scale", "add_scalar", "square", "inv",
                "scatter_add_vec", "scatter_add_row"}
# Everything else rational accumulates sums; bounded by ACCUMULATION_ULPS * n * eps * magnitude.
ACCUMULATION_ULPS = 2


def _samples(name: str, seeds: tuple[int, ...] = (0, 1, 2, 3)) -> list[Sample]:
    prim = REGISTRY[name]
    return [s for seed in seeds for s in prim.samples(np.random.default_rng(seed))]


def _objects(x: np.ndarray, convert: Callable[[Any], Any]) -> np.ndarray:
    out = np.empty(x.shape, dtype=object)
    for i in np.ndindex(x.shape):
        out[i] = convert(float(x[i]))
    return out


def _spec(name: str, sample: Sample, convert: Callable[[Any], Any] = float) -> np.ndarray:
    spec = SPECS[name].fn
    assert spec is not None
    return spec(*[_objects(x, convert) for x in sample.inputs], **sample.attrs)


def _as_float(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=np.float64)
    for i in np.ndindex(values.shape):
        out[i] = float(values[i])
    return out


def float_mismatch(name: str, kernel: Callable[..., Any], sample: Sample) -> str | None:
    """Why ``kernel`` disagrees with the spec over floats on ``sample``, or None if it agrees."""
    expected = _spec(name, sample)
    found = np.asarray(kernel(*sample.inputs, **sample.attrs))
    if found.shape != expected.shape:
        return f"shape {found.shape} != spec {expected.shape}"
    ref = _as_float(expected)
    err = np.abs(found - ref)
    tol = 1e-12 * np.maximum(1.0, np.abs(ref))
    if err.size and not (err <= tol).all():
        return f"max error {float(err.max()):.3g} (tolerance 1e-12 relative)"
    return None


def _magnitude(name: str, sample: Sample) -> np.ndarray:
    """Sum of the absolute values of the terms the spec adds up, entrywise (exact Fractions).

    The spec run on |inputs| gives it for sums of products; mse sums (a - b)^2, bounded by the
    spec at (|a|, -|b|).
    """
    inputs = [np.abs(x) for x in sample.inputs]
    if name == "mse_loss":
        inputs[1] = -inputs[1]
    return _spec(name, Sample(tuple(inputs), sample.attrs), Fraction)


def exact_mismatch(name: str, kernel: Callable[..., Any], sample: Sample) -> str | None:
    """Why ``kernel`` disagrees with the spec over Fractions on ``sample``, or None.

    Exact kernels must equal the spec; single-rounding kernels its correctly rounded value;
    accumulating kernels must stay within the float64 bound of their sums.
    """
    expected = _spec(name, sample, Fraction)
    found = np.asarray(kernel(*sample.inputs, **sample.attrs))
    if found.shape != expected.shape:
        return f"shape {found.shape} != spec {expected.shape}"
    for i in np.ndindex(expected.shape):
        # An int is exact too: the 0 a spec fills in when no input entry gives a scalar type.
        if not isinstance(expected[i], Fraction | int):
            return f"spec entry {i} is {type(expected[i]).__name__}, not an exact rational"
    if name in EXACT:
        bad = [i for i in np.ndindex(found.shape) if Fraction(float(found[i])) != expected[i]]
        return f"entries {bad[:3]} differ from the spec" if bad else None
    if name in ROUNDED_ONCE:
        bad = [i for i in np.ndindex(found.shape) if float(found[i]) != float(expected[i])]
        return f"entries {bad[:3]} are not the spec correctly rounded" if bad else None
    magnitude = _magnitude(name, sample)
    terms = max(x.size for x in sample.inputs) + 1
    for i in np.ndindex(found.shape):
        error = abs(Fraction(float(found[i])) - expected[i])
        bound = ACCUMULATION_ULPS * terms * Fraction(EPS) * magnitude[i]
        if error > bound:
            return f"entry {i}: error {float(error):.3g} > bound {float(bound):.3g}"
    return None


# --- Coverage ---------------------------------------------------------------------------------


def test_every_primitive_of_these_families_has_a_spec() -> None:
    assert {"add", "matmul", "softmax", "one_hot", "rand_uniform", "gather_rows_nat",
            "sum_to", "tanh"} <= set(NAMES)
    missing = [n for n in NAMES if get_spec(n) is None]
    assert missing == []
    for name in NAMES:
        entry = get_spec(name)
        assert entry is not None and entry.fn is SPECS[name].fn
        assert entry.fn.__module__ == f"torchlean.spec.{FAMILY_OF[name]}", name
        assert entry.fn.__doc__, f"{name}: the spec needs a docstring stating its meaning"
    assert set(EXACT | ROUNDED_ONCE) <= set(RATIONAL)


# --- Spec == kernel ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_spec_matches_kernel_over_floats(name: str) -> None:
    prim = REGISTRY[name]
    samples = _samples(name)
    assert samples
    for sample in samples:
        assert _spec(name, sample).shape == tuple(
            prim.infer(*[x.shape for x in sample.inputs], **sample.attrs))
        assert float_mismatch(name, prim.forward, sample) is None, (name, sample.note)


@pytest.mark.parametrize("name", RATIONAL)
def test_rational_spec_is_exact_over_fractions(name: str) -> None:
    for sample in _samples(name):
        assert exact_mismatch(name, REGISTRY[name].forward, sample) is None, (name, sample.note)


@pytest.mark.parametrize("name", TRANSCENDENTAL)
def test_transcendental_spec_over_fractions_is_symbolic_and_right(name: str) -> None:
    # Fraction inputs give exact sympy values (no silent rounding); they evaluate to the kernel.
    sample = _samples(name, (0,))[0]
    exact = _spec(name, sample, Fraction)
    kernel = REGISTRY[name].forward(*sample.inputs, **sample.attrs)
    for i in np.ndindex(exact.shape):
        assert not isinstance(exact[i], float)
        assert abs(float(sympy.N(exact[i], 30)) - kernel[i]) <= 1e-12 * max(1.0, abs(kernel[i]))


def test_spec_over_float32_kernels_within_ulps() -> None:
    # Kernels run in float32 in training; the spec (exact) bounds their error in float32 ulps.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((2, 4)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32)
    for name, inputs in (("tanh", (x,)), ("softmax", (x,)), ("linear", (w, b, x))):
        kernel = REGISTRY[name].forward(*inputs)
        assert kernel.dtype == np.float32
        spec = SPECS[name].fn
        ref = _as_float(spec(*[_objects(v, float) for v in inputs]))
        # Relative to the value for tanh and softmax; to the sum of |terms| for linear's sums.
        scale = _as_float(spec(*[_objects(np.abs(v), float) for v in inputs])) if (
            name == "linear") else np.abs(ref)
        assert (np.abs(kernel - ref) <= 8 * float(np.finfo(np.float32).eps) * scale).all(), name


def test_out_of_range_rules_agree_beyond_the_registry_samples() -> None:
    # Labels outside [0, num_classes) or not integers give zero rows; Nat indices past the end
    # read 0; both in the spec and in the kernel.
    labels = Sample((np.array([-1.0, 4.0, 2.5, 1.0, 0.0]),), {"num_classes": 4})
    assert exact_mismatch("one_hot", REGISTRY["one_hot"].forward, labels) is None
    rows = _spec("one_hot", labels, Fraction)
    assert [sum(rows[j]) for j in range(5)] == [0, 0, 0, 1, 1]
    empty_gather = Sample((np.zeros(0),), {"idx": [0, 2]})
    assert exact_mismatch("gather_vec_nat", REGISTRY["gather_vec_nat"].forward,
                          empty_gather) is None
    assert list(_spec("gather_vec_nat", empty_gather, Fraction)) == [0, 0]


# --- The comparison catches wrong kernels -----------------------------------------------------


def test_exact_comparison_catches_a_relu_off_by_a_hair() -> None:
    sample = _samples("relu", (0,))[0]
    assert exact_mismatch("relu", REGISTRY["relu"].forward, sample) is None

    def wrong(x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0) * (1 + 1e-15)  # far below any float tolerance: only exact sees it

    assert float_mismatch("relu", wrong, sample) is None
    assert exact_mismatch("relu", wrong, sample) is not None


def test_comparison_catches_a_nat_gather_that_wraps_out_of_range() -> None:
    (sample,) = [s for s in _samples("gather_vec_nat", (0,)) if s.note == "out of range"]
    assert exact_mismatch("gather_vec_nat", REGISTRY["gather_vec_nat"].forward, sample) is None

    def wrapping(x: np.ndarray, idx: Any) -> np.ndarray:
        return x[np.asarray(idx) % x.shape[0]]  # a plausible bug: modular instead of zero fill

    assert float_mismatch("gather_vec_nat", wrapping, sample) is not None


def test_comparison_catches_a_max_weight_that_breaks_ties_one_way() -> None:
    tie = Sample((np.array([1.0, 2.0, -3.0]), np.array([1.0, 0.5, -3.0])))
    assert exact_mismatch("max_weight", REGISTRY["max_weight"].forward, tie) is None

    def one_sided(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a >= b).astype(a.dtype)

    assert exact_mismatch("max_weight", one_sided, tie) is not None


def test_comparison_catches_softmax_on_the_wrong_axis_and_a_bad_rng() -> None:
    sample = Sample((np.random.default_rng(5).standard_normal((3, 4)),))

    def first_axis(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=0, keepdims=True))
        return e / e.sum(axis=0, keepdims=True)

    assert float_mismatch("softmax", REGISTRY["softmax"].forward, sample) is None
    assert float_mismatch("softmax", first_axis, sample) is not None

    draw = Sample((), {"shape": (2, 3), "seed": 5, "counter": 1, "dtype": "float64"})

    def high_bits(shape: Any, seed: int, counter: int = 0, dtype: Any = "float32") -> np.ndarray:
        key = splitmix64(seed + counter)
        bits = [splitmix64((key + k) % 2**64) >> 32 for k in range(6)]
        return (np.array(bits, dtype=np.float64) / 2**32).reshape(shape).astype(dtype)

    assert exact_mismatch("rand_uniform", REGISTRY["rand_uniform"].forward, draw) is None
    assert exact_mismatch("rand_uniform", high_bits, draw) is not None


def test_accumulation_bound_is_tight_enough_to_catch_a_dropped_term() -> None:
    sample = _samples("matmul", (0,))[0]

    def dropped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a[:, 1:] @ b[1:, :]  # forgets the k = 0 term

    assert exact_mismatch("matmul", REGISTRY["matmul"].forward, sample) is None
    assert exact_mismatch("matmul", dropped, sample) is not None


def test_comparison_catches_a_wrong_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check is symmetric: a spec that says the wrong thing fails against a right kernel.
    sample = _samples("max", (0,))[1]
    assert exact_mismatch("max", REGISTRY["max"].forward, sample) is None
    monkeypatch.setitem(SPECS, "max", SPECS["min"])
    assert exact_mismatch("max", REGISTRY["max"].forward, sample) is not None


# --- Random: integer arithmetic and rounding ---------------------------------------------------


def test_round_to_format_is_numpys_rounding() -> None:
    rng = np.random.default_rng(7)
    ks = [int(k) for k in rng.integers(0, 2**32, size=300)]
    # Halfway cases between float32 neighbours (ties go to even) and values next to 1.
    ks += [(2**31 + 2**7 * j + 2**6) for j in range(8)] + [2**32 - j for j in range(1, 200, 7)]
    ks += [0, 1, 2**24 - 1, 2**24 + 1, 2**25 + 3]
    for dtype in ("float32", "float16", "float64"):
        for k in ks:
            rounded = round_to_format(Fraction(k, 2**32), dtype)
            assert rounded == Fraction(float(np.asarray(k / 2**32).astype(dtype))), (dtype, k)


def test_draws_follow_the_documented_integer_recipe() -> None:
    # splitmix64(0) is the published first output of SplitMix64 seeded with 0.
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    out = SPECS["rand_uniform"].fn(shape=(2, 2), seed=3, counter=4, dtype="float64")
    assert out[1, 0] == Fraction(draw_bits(3, 4, 2), 2**32)
    assert all(0 <= out[i] < 1 for i in np.ndindex(out.shape))


# --- sympy: the specs can be differentiated ---------------------------------------------------


def _symbols(*names: str) -> np.ndarray:
    return np.array([sympy.Symbol(n, real=True) for n in names], dtype=object)


def test_smooth_spec_differentiates_to_the_known_derivative() -> None:
    x = _symbols("x0", "x1", "x2")
    y = SPECS["softmax"].fn(x)
    point = {x[0]: 0.3, x[1]: -1.2, x[2]: 0.7}
    s = REGISTRY["softmax"].forward(np.array([0.3, -1.2, 0.7]))
    for j in range(3):
        for k in range(3):
            d = float(sympy.diff(y[j], x[k]).subs(point))
            assert abs(d - (s[j] * ((j == k) - s[k]))) < 1e-12

    (t,) = _symbols("t")
    sp = SPECS["softplus"].fn(np.array([t], dtype=object))[0]
    for value in (-2.0, 0.5):
        derivative = float(sympy.diff(sp, t).subs(t, value))
        assert abs(derivative - 1 / (1 + np.exp(-value))) < 1e-12


def test_piecewise_spec_differentiates_branch_by_branch() -> None:
    (t,) = _symbols("t")
    relu = SPECS["relu"].fn(np.array([t], dtype=object))[0]
    assert isinstance(relu, sympy.Piecewise)
    slope = sympy.diff(relu, t)
    assert (float(slope.subs(t, 1.5)), float(slope.subs(t, -0.5))) == (1.0, 0.0)
    clamp = SPECS["clamp"].fn(np.array([t], dtype=object), lo=-0.5, hi=0.75)[0]
    slopes = [float(sympy.diff(clamp, t).subs(t, v)) for v in (-1.0, 0.0, 1.0)]
    assert slopes == [0.0, 1.0, 0.0]

    w, bias, v = _symbols("w00", "w01"), _symbols("b0"), _symbols("v0", "v1")
    out = SPECS["linear"].fn(w.reshape(1, 2), bias, v)
    assert sympy.diff(out[0], w[1]) == v[1] and sympy.diff(out[0], bias[0]) == 1


def test_max_and_min_of_two_expressions_in_one_symbol_differentiate() -> None:
    # Both inputs moving along t: sympy 1.14 recursed without end on Piecewise((a, a >= b), ...)
    # for these numbers; the specs compare a - b against 0 instead.
    (t,) = _symbols("t")
    a = sympy.Float("1.6452134544805177", 40) - sympy.Float("0.02968333387146478", 40) * t
    b = sympy.Float("0.46771459530925652", 40) * t + sympy.Float("1.6501217528309111", 40)
    pair = (np.array([a], dtype=object), np.array([b], dtype=object))
    assert float(sympy.diff(SPECS["max"].fn(*pair)[0], t).subs(t, 0)) == pytest.approx(
        0.46771459530925652, abs=1e-15)
    assert float(sympy.diff(SPECS["min"].fn(*pair)[0], t).subs(t, 0)) == pytest.approx(
        -0.02968333387146478, abs=1e-15)
    assert SPECS["max_weight"].fn(*pair)[0].subs(t, 0) == 0


def test_float_attributes_may_be_given_as_their_exact_fractions() -> None:
    x = np.array([Fraction(1, 3), Fraction(-2)], dtype=object)
    assert list(SPECS["scale"].fn(x, c=Fraction(5, 2))) == [Fraction(5, 6), Fraction(-5)]
    assert list(SPECS["clamp"].fn(x, lo=Fraction(-1, 2), hi=Fraction(1, 4))) == [
        Fraction(1, 4), Fraction(-1, 2)]


# --- Bad calls ----------------------------------------------------------------------------------


def test_specs_reject_bad_calls_like_the_runtime() -> None:
    spec = {name: SPECS[name].fn for name in ("matmul", "gather_scalar", "log", "reshape")}
    with pytest.raises(ShapeError, match="matmul"):
        spec["matmul"](np.zeros((2, 3), dtype=object), np.zeros((2, 3), dtype=object))
    with pytest.raises(ShapeError, match="gather_scalar"):
        spec["gather_scalar"](np.zeros(3, dtype=object), i=3)
    with pytest.raises(ShapeError, match="reshape"):
        spec["reshape"](np.zeros(6, dtype=object), shape=(4, 2))
    with pytest.raises(DomainError, match="log"):
        spec["log"](np.array([Fraction(1), Fraction(0)], dtype=object))
