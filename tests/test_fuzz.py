"""Fuzz every primitive through every entry point (issue 15): no exception but a TorchLeanError.

Starting from each primitive's own samples, seeded generators make hostile calls: a bad value for
every declared attribute kind, NumPy scalars where Python numbers are expected, inputs of the
wrong dtype (complex, strings, ragged lists, bool, int), zero-size dimensions, and NaN / infinite
entries. Each call goes through the eager tape (forward and backward), ``F.apply`` on plain arrays
and ``tl.compile`` (forward and VJP); bad attributes also go through ``tl.Tensor``. The only
acceptable outcomes are a result or a ``TorchLeanError``; a refused tape call must leave the tape
unchanged; a bad attribute value must be refused before any compute by the kind's
``ShapeError`` naming the op and the attribute.

The work is bounded by case counts (never by time). ``python tests/test_fuzz.py`` prints the
counts: cases, named errors, other exceptions.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core import attr_kinds as K
from torchlean.core.errors import ShapeError, TorchLeanError
from torchlean.core.registry import REGISTRY, Primitive

NAN = float("nan")
INF = float("inf")

# Values each kind must refuse (by a ShapeError naming the op and the attribute).
BAD: dict[Any, list[Any]] = {
    K.POSITIVE_INT: [0, -1, 1.5, "2", None, True, (1,), np.float64(2.0)],
    K.NON_NEGATIVE_INT: [-1, 1.5, "0", None, True, [0], np.int64(-3)],
    K.AXIS: [1.5, "0", None, True, (0,), np.float32(0.0)],
    K.POSITIVE_PER_AXIS: [0, -1, 1.5, None, "1", (1, 0), (1.5, 1), True, [[1]], np.int64(0)],
    K.OPTIONAL_POSITIVE_PER_AXIS: [0, -1, 1.5, "1", (1, 0), (1.5, 1), True, [[1]]],
    K.NON_NEGATIVE_PER_AXIS: [-1, 1.5, None, "0", (0, -1), True, np.float64(0.0)],
    K.POSITIVE_INT_TUPLE: [2, (), (0,), (1.5,), "22", None, (True, 1)],
    K.SIZES: [2, (-1,), (1.5,), "22", None],
    K.PERM: [1, "01", None, (0.5,), [[0]]],
    K.AXES: [(), (0, 0), 1, None, (1.5,), "0"],
    K.SHAPE: [(-1,), (1.5,), None, "3", (True,), [[2]], (10**6, 10**6)],
    K.FINITE_REAL: [NAN, INF, -INF, None, "1", True, [1.0], np.array([1.0]), np.float32("nan")],
    K.POSITIVE_REAL: [0, -1.0, NAN, INF, None, "1", True, np.float64(-2.0)],
    K.NON_NEGATIVE_REAL: [-1.0, NAN, INF, None, "1", True],
    K.NOT_NAN_REAL: [NAN, None, "1", True, (1, 2, 3), np.float64("nan")],
    K.NAT_INDICES: [-1, [0, -1], [0.5], "a", [[0], [1, 2]], None],
    K.OPTIONAL_BOOL_MASK: [np.ones((2, 2)), "a", [[True], [True, False]], 1],
    K.FLOAT_DTYPE: ["int32", "complex64", "nope", 3],
    K.INDEX_TUPLE: [0, [0], None, "a"],
    K.GELU_APPROXIMATE: ["erf", "Tanh", None, True, 1, ("tanh",), b"tanh"],
    K.RNN_MODE: ["lstm", "Tanh", None, True, 1, ("gru",), b"gru"],
    K.BOOL: [1, 0, "True", None, (True,), 1.0],
}

# Limit results to a million entries while fuzzing, so an oversized request is refused cheaply.
LIMIT = 10**6
# How many of a primitive's samples seed each family of cases.
SAMPLES_PER_OP = 2


@dataclass
class Counts:
    """Outcomes over all cases; ``other`` holds a description of every non-TorchLeanError."""

    cases: int = 0
    ok: int = 0
    named: int = 0
    other: list[str] = field(default_factory=list)

    def add(self, other: Counts) -> None:
        self.cases += other.cases
        self.ok += other.ok
        self.named += other.named
        self.other.extend(other.other)


def _outcome(counts: Counts, what: str, call: Callable[[], Any]) -> tuple[bool, Any]:
    """Run one call: (True, result) or (False, the TorchLeanError); anything else is logged."""
    counts.cases += 1
    try:
        result = call()
    except TorchLeanError as exc:
        counts.named += 1
        return False, exc
    except Exception as exc:  # noqa: BLE001  (the point of the test: nothing else may escape)
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        counts.other.append(f"{what}: {type(exc).__name__}: {exc} "
                            f"({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})")
        return False, exc
    counts.ok += 1
    return True, result


def _is_float_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64)


def _drive(prim: Primitive, inputs: list[Any], attrs: dict[str, Any], what: str,
           counts: Counts, graph: bool = True) -> list[tuple[bool, Any]]:
    """One call through the tape (forward, backward), F on arrays and the graph (forward, vjp).

    Returns the forward outcomes of the tape and of F (for the caller's own assertions)."""
    name = prim.name
    outcomes = []
    # The tape: leaves first (the tape refuses bad data itself), then the op.
    tape = tl.Tape(dtype="float64")
    leaves_ok = True
    ids = []
    for k, x in enumerate(inputs):
        ok, leaf = _outcome(counts, f"{what} tape leaf {k}", lambda x=x: tape.leaf(x))
        if not ok:
            leaves_ok = False
            break
        ids.append(leaf)
    if leaves_ok:
        before = tape.size
        ok, out = _outcome(counts, f"{what} tape", lambda: tape.apply(name, *ids, **attrs))
        outcomes.append((ok, out))
        if not ok:
            assert tape.size == before, f"{what}: a refused call changed the tape"
        elif not prim.nondiff and tape.value(out).dtype.kind == "f":
            seed = np.ones_like(tape.value(out))
            ok, grads = _outcome(counts, f"{what} tape backward",
                                 lambda: tape.backward_dense_all(out, seed))
            if ok:
                for i in ids:
                    assert grads[i].shape == tape.value(i).shape, f"{what}: cotangent shape"
    # F on plain data (converted and checked as the tape's data is).
    outcomes.append(_outcome(counts, f"{what} F", lambda: F.apply(name, *inputs, **attrs)))
    # The graph: traced on the input shapes, then run and differentiated.
    if graph and inputs and all(_is_float_array(x) for x in inputs):
        arrays = [np.asarray(x, dtype=np.float64) for x in inputs]

        def fn(*refs: Any) -> Any:
            return F.apply(name, *refs, **attrs)

        ok, compiled = _outcome(counts, f"{what} compile",
                                lambda: tl.compile(fn, *[a.shape for a in arrays],
                                                   dtype="float64"))
        if ok:
            ok, value = _outcome(counts, f"{what} graph forward",
                                 lambda: compiled.forward(*arrays))
            if ok and not prim.nondiff and np.asarray(value).dtype.kind == "f":
                _outcome(counts, f"{what} graph vjp",
                         lambda: compiled.vjp(arrays, np.ones_like(value)))
    return outcomes


def _samples(prim: Primitive) -> list[Any]:
    return prim.samples(np.random.default_rng(15))[:SAMPLES_PER_OP]


def _numpy_scalars(value: Any) -> Any:
    """The same attribute value spelled with NumPy scalars (and lists), or ``None``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return np.int64(value)
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, tuple) and value and all(type(v) is int for v in value):
        return [np.int32(v) for v in value]
    return None


def _zero_variants(shapes: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """Shapes with one axis of one input set to 0, and with every axis of one size set to 0."""
    variants = []
    for j, shape in enumerate(shapes):
        for a, d in enumerate(shape):
            if d:
                variants.append([s if k != j else s[:a] + (0,) + s[a + 1:]
                                 for k, s in enumerate(shapes)])
    for size in sorted({d for s in shapes for d in s if d}):
        variants.append([tuple(0 if d == size else d for d in s) for s in shapes])
    return variants


def _bad_attribute(prim: Primitive, inputs: list[Any], attrs: dict[str, Any], key: str,
                   counts: Counts) -> None:
    """A call whose attribute ``key`` is bad: refused on every path by a ShapeError naming the
    op and the attribute, the tape unchanged."""
    name = prim.name
    what = f"{name} {key}={attrs[key]!r}"
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(x) for x in inputs]
    before = tape.size
    calls = [("F", lambda: F.apply(name, *inputs, **attrs))]
    if not (key == "dtype" and not inputs):  # a tape sets a nullary op's dtype itself
        calls.append(("tape", lambda: tape.apply(name, *ids, **attrs)))
    if inputs:
        tensors = [tl.tensor(x, requires_grad=True) for x in inputs]
        calls.append(("tensor", lambda: F.apply(name, *tensors, **attrs)))

        def fn(*refs: Any) -> Any:
            return F.apply(name, *refs, **attrs)

        calls.append(("compile",
                      lambda: tl.compile(fn, *[x.shape for x in inputs], dtype="float64")))
    for path, call in calls:
        ok, err = _outcome(counts, f"{what} {path}", call)
        assert not ok, f"{what}: accepted on the {path}"
        if isinstance(err, TorchLeanError):
            assert type(err) is ShapeError, f"{what} {path}: {type(err).__name__}: {err}"
            assert re.match(rf"{re.escape(name)}: .*\b{key}\b", str(err)), str(err)
    assert tape.size == before, f"{what}: a refused call changed the tape"


def _same_result(prim: Primitive, inputs: list[Any], attrs: dict[str, Any],
                 numpy_attrs: dict[str, Any], counts: Counts) -> None:
    """The call with NumPy-spelled attributes is accepted and gives the same result."""
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(x) for x in inputs]
    expected = tape.value(tape.apply(prim.name, *ids, **attrs))
    ok, out = _outcome(counts, f"{prim.name} numpy scalars {numpy_attrs}",
                       lambda: tape.value(tape.apply(prim.name, *ids, **numpy_attrs)))
    assert ok, f"{prim.name}: NumPy scalar attributes {numpy_attrs} refused: {out}"
    np.testing.assert_array_equal(out, expected)


def fuzz(prim: Primitive) -> Counts:
    """Every family of hostile calls for one primitive; returns the counts."""
    counts = Counts()
    name = prim.name
    rng = np.random.default_rng(1500 + sum(map(ord, name)))
    for n, sample in enumerate(_samples(prim)):
        inputs = [np.array(x, dtype=np.float64) for x in sample.inputs]
        attrs = dict(sample.attrs)
        base = _drive(prim, inputs, attrs, f"{name}[{n}] sample", counts)
        # 1. A bad value for every declared attribute: the kind refuses it, naming both.
        for key, kind in prim.attr_kinds.items():
            for bad in BAD[kind]:
                _bad_attribute(prim, inputs, {**attrs, key: bad}, key, counts)
        # 2. NumPy scalars (and lists) where Python numbers (and tuples) are: same result.
        full = prim.bind_attrs((), attrs)  # defaults too: stride=np.int64(1) is the classic
        spelled = {k: _numpy_scalars(v) for k, v in full.items()}
        if any(v is not None for v in spelled.values()) and base[0][0]:
            numpy_attrs = {k: v if spelled[k] is None else spelled[k] for k, v in full.items()}
            _same_result(prim, inputs, attrs, numpy_attrs, counts)
        # 2b. A per-axis tuple of equal ints spelled as one int: same result.
        per_axis = (K.POSITIVE_PER_AXIS, K.OPTIONAL_POSITIVE_PER_AXIS, K.NON_NEGATIVE_PER_AXIS)
        ints = {k: v[0] for k, v in full.items() if prim.attr_kinds.get(k) in per_axis
                and isinstance(v, tuple) and v and len(set(v)) == 1}
        if ints and base[0][0]:
            _same_result(prim, inputs, full, {**full, **ints}, counts)
        if not inputs:
            continue
        # 3. Wrong dtypes: complex, strings and ragged data are refused; bool and int convert.
        for j in range(len(inputs)):
            shape = inputs[j].shape
            for label, data, must_refuse in (
                    ("complex", inputs[j] + 1j, True),
                    ("str", np.full(shape, "a"), True),
                    ("ragged", [[1.0], [1.0, 2.0]], True),
                    ("bool", inputs[j] > 0, False),
                    ("int", np.round(inputs[j]).astype(np.int64), False),
                    ("float32", inputs[j].astype(np.float32), False)):
                bad_inputs = [data if k == j else x for k, x in enumerate(inputs)]
                outs = _drive(prim, bad_inputs, attrs, f"{name}[{n}] input {j} {label}",
                              counts, graph=False)
                if must_refuse:
                    assert all(not ok for ok, _ in outs), f"{name}: {label} input accepted"
        # 4. Zero-size dimensions, forward and backward.
        for shapes in _zero_variants([x.shape for x in inputs]):
            zero_inputs = [rng.standard_normal(s) for s in shapes]
            _drive(prim, zero_inputs, attrs, f"{name}[{n}] zero {shapes}", counts)
        # 5. Non-finite entries.
        for special in (NAN, INF, -INF):
            odd = [x.copy() for x in inputs]
            for x in odd:
                if x.size:
                    x.flat[rng.integers(x.size)] = special
            _drive(prim, odd, attrs, f"{name}[{n}] {special}", counts, graph=False)
    return counts


@pytest.fixture(autouse=True)
def _small_limit() -> Any:
    previous = K.set_max_elements(LIMIT)
    with np.errstate(all="ignore"):  # NaN and infinite inputs are the point: no warnings
        yield
    K.set_max_elements(previous)


def test_every_attribute_has_a_kind_with_bad_values() -> None:
    for name, prim in REGISTRY.items():
        assert set(prim.attr_kinds) == set(prim.attrs), f"{name}: attributes without a kind"
        for key, kind in prim.attr_kinds.items():
            assert kind in BAD, f"{name}.{key}: no bad values listed for its kind"


def test_allocation_limit_is_refused_by_name() -> None:
    tape = tl.Tape(dtype="float64")
    labels = tape.leaf(np.zeros(3))
    with pytest.raises(ShapeError, match=r"one_hot: .*allocation limit"):
        tape.one_hot(labels, num_classes=2**40)
    assert tape.size == 1
    with pytest.raises(ShapeError, match=r"rand_uniform: .*allocation limit"):
        F.apply("rand_uniform", shape=(10**4, 10**4), seed=0)
    with pytest.raises(ShapeError, match=r"set_max_elements"):
        K.set_max_elements(0)


def test_issue_examples_are_checked_by_kind() -> None:
    """The calls issue 15 found slipping through, each now accepted or refused by name."""
    rng = np.random.default_rng(0)
    w, b, x = rng.standard_normal((2, 3, 3, 3)), np.zeros(2), rng.standard_normal((1, 3, 5, 5))
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(a) for a in (w, b, x)]
    plain = tape.value(tape.conv2d(*ids))
    np.testing.assert_array_equal(tape.value(tape.conv2d(*ids, stride=np.int64(1))), plain)
    np.testing.assert_array_equal(tape.value(tape.conv2d(*ids, padding=np.int32(0))), plain)
    size = tape.size
    for bad in (1.0, None, "1", (1,), (1, 1, 1)):
        with pytest.raises(ShapeError, match=r"conv2d: stride"):
            tape.conv2d(*ids, stride=bad)
    assert tape.size == size
    cols = F.pool_unfold(x[0], kernel_size=(2, 2), stride=1, padding=0)
    assert cols.shape == (3, 4, 4, 4)
    for name, attrs, match in (
            ("standardize", {"axes": (1, 1), "eps": 1e-5}, "axes .*no duplicates"),
            ("standardize", {"axes": (1, -1), "eps": 1e-5}, "axes"),
            ("sum_to", {"shape": (1.5,)}, "shape must be a shape"),
            ("interval_mask", {"lo": (1, 2, 3), "hi": 4.0}, "lo must be a real number"),
            ("safe_log", {"eps": -1.0}, "eps must be a positive number"),
            ("scale", {"c": float("nan")}, "c must be a real number"),
            ("add_scalar", {"c": float("inf")}, "c must be a real number"),
            ("clamp", {"lo": float("nan"), "hi": 1.0}, "lo must be a real number")):
        with pytest.raises(ShapeError, match=rf"{name}: {match}"):
            F.apply(name, np.ones((2, 3)), **attrs)
    with pytest.raises(ShapeError, match="one_hot: .*allocation limit"):
        F.one_hot(np.zeros(4), num_classes=2**40)
    # F on plain data converts and checks as the tape does.
    with pytest.raises(ShapeError, match="log: expected numeric data, found dtype complex"):
        F.log(np.ones(3, dtype=complex))
    with pytest.raises(ShapeError, match="add: expected a rectangular array"):
        F.add([[1.0], [1.0, 2.0]], np.ones(2))
    np.testing.assert_array_equal(F.sign(np.array([True, False])), [1.0, 0.0])


def test_zero_size_batches_forward_and_backward() -> None:
    rng = np.random.default_rng(1)
    cases = [
        ("conv_transpose2d", [(2, 3, 3, 3), (3,), (0, 2, 4, 4)], {}, (0, 3, 6, 6)),
        ("conv2d", [(2, 3, 3, 3), (2,), (0, 3, 5, 5)], {}, (0, 2, 3, 3)),
        ("standardize", [(0, 2, 2)], {"axes": (1, 2), "eps": 1e-5}, (0, 2, 2)),
        ("layer_norm", [(3, 4), (4,), (4,)], {}, (3, 4)),
    ]
    for name, shapes, attrs, out_shape in cases:
        arrays = [rng.standard_normal(s) for s in shapes]
        tape = tl.Tape(dtype="float64")
        ids = [tape.leaf(a) for a in arrays]
        out = tape.apply(name, *ids, **attrs)
        assert tape.value(out).shape == out_shape, name
        grads = tape.backward_dense_all(out, np.ones(out_shape))
        assert [grads[i].shape for i in ids] == [tuple(s) for s in shapes], name
        compiled = tl.compile(lambda *r, name=name, attrs=attrs: F.apply(name, *r, **attrs),
                              *shapes, dtype="float64")
        cotangents = compiled.vjp(arrays, np.ones(out_shape))
        for g, t in zip(cotangents, (grads[i] for i in ids), strict=True):
            np.testing.assert_allclose(g, t, atol=1e-12)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_fuzz_primitive(name: str) -> None:
    counts = fuzz(REGISTRY[name])
    assert counts.cases > 0
    assert not counts.other, "\n".join(counts.other[:20])


def main() -> None:
    """Run the whole fuzz and print the counts (for reports)."""
    np.seterr(all="ignore")  # NaN and infinite inputs are the point; their warnings are noise
    previous = K.set_max_elements(LIMIT)
    total = Counts()
    failed = []
    for name in sorted(REGISTRY):
        try:
            total.add(fuzz(REGISTRY[name]))
        except AssertionError as exc:
            failed.append(f"{name}: {exc}")
    K.set_max_elements(previous)
    print(f"cases {total.cases}, results {total.ok}, named errors {total.named}, "
          f"other exceptions {len(total.other)}, failed assertions {len(failed)}")
    for line in total.other + failed:
        print(" ", line)


if __name__ == "__main__":
    main()
