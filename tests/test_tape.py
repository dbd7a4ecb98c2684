"""Tape semantics (issue 2, DESIGN section 5): accumulation, frozen leaves and detach, the three
backward results, seeds and ids, refused ops, dtypes, deep chains, and op details (log's domain
error, sqrt / softplus / safe_log, softmax's backward, seeded randomness bit for bit)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import torchlean as tl
from torchlean.ops.random import splitmix64, splitmix64_int, uniform_bits


def f64() -> tl.Tape:
    return tl.Tape("float64")


# --- accumulation, frozen leaves, detach ---------------------------------------------------------


def test_shared_parent_receives_the_sum_of_contributions() -> None:
    tape = f64()
    x = tape.leaf(np.array([0.5, -1.0, 2.0]))
    sq = tape.mul(x, x)  # x used twice by one node
    both = tape.add(tape.tanh(x), tape.relu(x))  # and by two more nodes
    out = tape.sum(tape.add(sq, both))
    g = tape.backward_scalar(out)[x]
    xv = tape.value(x)
    expected = 2 * xv + (1 - np.tanh(xv) ** 2) + (xv > 0)
    np.testing.assert_allclose(g, expected, rtol=1e-14)


def test_diamond_accumulates_in_a_fixed_order() -> None:
    def run() -> np.ndarray:
        tape = f64()
        x = tape.leaf(np.linspace(-1, 1, 7))
        a, b, c = tape.exp(x), tape.square(x), tape.sigmoid(x)
        out = tape.sum(tape.add(tape.add(a, b), c))
        return tape.backward_scalar(out)[x]

    first = run()
    assert all(np.array_equal(first, run()) for _ in range(3))  # bitwise deterministic
    x = np.linspace(-1, 1, 7)
    sig = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(first, np.exp(x) + 2 * x + sig * (1 - sig), rtol=1e-14)


def test_frozen_leaf_receives_and_passes_nothing() -> None:
    tape = f64()
    x = tape.leaf(np.array([1.0, 2.0]))
    c = tape.leaf(np.array([3.0, 4.0]), name="c", requires_grad=False)
    cc = tape.square(c)  # only a frozen parent: needs no gradient
    prod = tape.mul(x, cc)
    out = tape.sum(prod)
    dense = tape.backward_dense(out, 1.0)
    assert dense[c] is None and dense[cc] is None
    np.testing.assert_array_equal(dense[x], [9.0, 16.0])
    assert not tape.node(cc).requires_grad and tape.node(c).name == "c"
    assert set(tape.backward_scalar(out)) == {x, prod, out}


def test_detach_receives_and_passes_nothing() -> None:
    tape = f64()
    x = tape.leaf(np.array([1.5, -2.0]))
    d = tape.detach(x)
    out = tape.sum(tape.mul(d, x))  # d(x * stop(x))/dx = stop(x)
    dense = tape.backward_dense(out, 1.0)
    assert dense[d] is None
    np.testing.assert_array_equal(dense[x], [1.5, -2.0])
    np.testing.assert_array_equal(tape.value(d), tape.value(x))


def test_dense_vs_all_vs_map() -> None:
    tape = f64()
    x = tape.leaf(np.array([1.0, 2.0]))
    unused = tape.leaf(np.array([5.0]))
    y = tape.scale(x, 3.0)
    later = tape.relu(x)  # after y: not reached from y
    dense = tape.backward_dense(y, [1.0, 1.0])
    assert len(dense) == tape.size == 4
    assert dense[unused] is None and dense[later] is None
    np.testing.assert_array_equal(dense[x], [3.0, 3.0])
    dense_all = tape.backward_dense_all(y, [1.0, 1.0])
    np.testing.assert_array_equal(dense_all[unused], [0.0])
    np.testing.assert_array_equal(dense_all[later], [0.0, 0.0])
    grads = tape.backward(y, np.array([1.0, 1.0]))
    assert sorted(grads) == [x, y]
    np.testing.assert_array_equal(grads[y], [1.0, 1.0])


# --- seeds, ids, refused ops, dtypes -------------------------------------------------------------


def test_seed_shape_must_match_the_output() -> None:
    tape = f64()
    y = tape.relu(tape.leaf(np.ones((2, 3))))
    for method in (tape.backward_dense, tape.backward_dense_all, tape.backward):
        with pytest.raises(tl.ShapeError, match=r"seed has shape \(3,\).*\(2, 3\)"):
            method(y, np.ones(3))


def test_backward_scalar_needs_a_scalar() -> None:
    tape = f64()
    y = tape.relu(tape.leaf(np.ones(2)))
    with pytest.raises(tl.ShapeError, match="expected a scalar"):
        tape.backward_scalar(y)
    s = tape.sum(y)
    np.testing.assert_array_equal(tape.backward_scalar(s)[0], [1.0, 1.0])


def test_bad_ids_raise_tape_error() -> None:
    tape = f64()
    x = tape.leaf(np.ones(2))
    for call in (lambda: tape.relu(5), lambda: tape.relu(-1), lambda: tape.relu(True),
                 lambda: tape.relu(0.0), lambda: tape.add(x, 9), lambda: tape.value(3),
                 lambda: tape.node(1), lambda: tape.backward(7, 1.0),
                 lambda: tape.backward_scalar(-2), lambda: tape.require_value(4, (2,))):
        with pytest.raises(tl.TapeError):
            call()
    assert tape.size == 1
    with pytest.raises(tl.ShapeError):
        tape.require_value(x, (3,))
    np.testing.assert_array_equal(tape.require_value(x, (2,)), [1.0, 1.0])


def test_refused_ops_leave_the_tape_unchanged() -> None:
    tape = f64()
    a = tape.leaf(np.ones((2, 3)))
    b = tape.leaf(np.ones((4,)))
    before = tape.size
    refused = [lambda: tape.add(a, b), lambda: tape.reshape(a, (4,)),
               lambda: tape.matmul(a, a), lambda: tape.reduce_sum(a, 2),
               lambda: tape.broadcast_to(b, (3,)), lambda: tape.slice_range0(b, 3, 2),
               lambda: tape.gather_row(a, 2), lambda: tape.linear(a, b, b)]
    for call in refused:
        with pytest.raises(tl.ShapeError):
            call()
    assert tape.size == before


def test_mixing_float32_and_float64_in_one_op_is_an_error() -> None:
    tape = tl.Tape()  # float32 by default
    a = tape.leaf(np.ones(3, dtype=np.float32))
    b = tape.leaf(np.ones(3, dtype=np.float64))  # float data keeps its dtype: no silent cast
    assert tape.value(a).dtype == np.float32 and tape.value(b).dtype == np.float64
    size = tape.size
    with pytest.raises(tl.ShapeError, match="add: dtypes differ: float32, float64"):
        tape.add(a, b)
    assert tape.size == size
    c = tape.leaf([1, 2, 3])  # non-float data takes the tape's dtype
    assert tape.value(tape.add(a, c)).dtype == np.float32


def test_a_100000_node_chain_runs_forward_and_backward() -> None:
    tape = f64()
    x = tape.leaf(np.array([1.0, -2.0, 3.0]))
    y = x
    for k in range(100_000):
        y = tape.scale(y, 2.0) if k % 2 == 0 else tape.scale(y, 0.5)
    assert tape.size == 100_001
    np.testing.assert_array_equal(tape.value(y), [1.0, -2.0, 3.0])
    grads = tape.backward_dense(y, np.ones(3))
    np.testing.assert_array_equal(grads[x], [1.0, 1.0, 1.0])


# --- op details ----------------------------------------------------------------------------------


def test_log_domain_error_names_the_op_and_the_count() -> None:
    tape = f64()
    x = tape.leaf(np.array([1.0, 0.0, -1.0, np.nan, 2.0]))
    size = tape.size
    with pytest.raises(tl.TorchLeanError, match=r"log: 3 of 5 entries are <= 0 or NaN"):
        tape.log(x)
    assert tape.size == size
    y = tape.leaf(np.array([0.5, 4.0]))
    out = tape.log(y)
    np.testing.assert_array_equal(tape.backward(out, np.ones(2))[y], [2.0, 0.25])


def test_sqrt_softplus_safe_log_details() -> None:
    tape = f64()
    x = tape.leaf(np.array([-4.0, 0.0, 0.25]))
    s = tape.sqrt(x)
    np.testing.assert_array_equal(tape.value(s), [0.0, 0.0, 0.5])
    np.testing.assert_array_equal(tape.backward(s, np.ones(3))[x], [0.0, 0.0, 1.0])

    big = tape.leaf(np.array([-1000.0, -20.0, 0.0, 20.0, 1000.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stable form never overflows
        sp = tape.softplus(big)
        sl = tape.safe_log(big)
        sl_eps = tape.safe_log(big, eps=0.5)
    v = tape.value(big)
    np.testing.assert_allclose(tape.value(sp), np.logaddexp(0.0, v), rtol=1e-15)
    assert tape.value(sp)[-1] == 1000.0 and tape.value(sp)[0] == 0.0
    sig = np.exp(-np.logaddexp(0.0, -v))  # sigmoid, overflow-free
    np.testing.assert_allclose(tape.backward(sp, np.ones(5))[big], sig, rtol=1e-15)
    np.testing.assert_allclose(tape.value(sl), np.log(np.logaddexp(0.0, v) + 1e-6), rtol=1e-13)
    assert tape.value(sl)[0] == pytest.approx(np.log(1e-6))
    np.testing.assert_allclose(tape.value(sl_eps), np.log(np.logaddexp(0.0, v) + 0.5))
    np.testing.assert_allclose(tape.backward(sl, np.ones(5))[big],
                               sig / (np.logaddexp(0.0, v) + 1e-6), rtol=1e-12)


def test_softmax_backward_is_y_times_g_minus_sum_gy_on_the_last_axis() -> None:
    rng = np.random.default_rng(3)
    xv, gv = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    tape = f64()
    x = tape.leaf(xv)
    y = tape.softmax(x)
    yv = tape.value(y)
    grad = tape.backward(y, gv)[x]
    np.testing.assert_allclose(grad, yv * (gv - (gv * yv).sum(-1, keepdims=True)), rtol=1e-13)
    for i in range(2):  # the same as the explicit Jacobian diag(y) - y y^T, per row
        for j in range(3):
            p = yv[i, j]
            jac = np.diag(p) - np.outer(p, p)
            np.testing.assert_allclose(grad[i, j], jac.T @ gv[i, j], rtol=1e-12)
    np.testing.assert_allclose(yv.sum(-1), 1.0, rtol=1e-15)


# --- seeded randomness ---------------------------------------------------------------------------


def reference_splitmix64(x: int) -> int:
    """SplitMix64 written from its definition, independently of the library."""
    mask = 2**64 - 1
    z = (x + 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return (z ^ (z >> 31)) & mask


def reference_uniform(n: int, seed: int, counter: int) -> list[float]:
    key = reference_splitmix64((seed + counter) % 2**64)
    return [(reference_splitmix64((key + i) % 2**64) % 2**32) / 2**32 for i in range(n)]


def test_splitmix64_matches_the_reference_and_known_outputs() -> None:
    # Vigna's splitmix64.c seeded with 0 yields these first two outputs.
    assert reference_splitmix64(0) == 0xE220A8397B1DCDAF
    assert reference_splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    xs = [0, 1, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15, 123456789] + [
        int(v) for v in np.random.default_rng(0).integers(0, 2**63, size=50)]
    vectorised = splitmix64(np.array(xs, dtype=np.uint64))
    assert [int(v) for v in vectorised] == [reference_splitmix64(x) for x in xs]
    assert [splitmix64_int(x) for x in xs] == [reference_splitmix64(x) for x in xs]


def test_rand_uniform_exact_bits_and_determinism() -> None:
    tape = f64()
    r = tape.rand_uniform((3, 5), 42, counter=7)
    assert tape.value(r).dtype == np.float64
    expected = np.array(reference_uniform(15, 42, 7)).reshape(3, 5)
    np.testing.assert_array_equal(tape.value(r), expected)  # bit for bit
    np.testing.assert_array_equal(uniform_bits((3, 5), 42, 7), expected * 2**32)
    again = tl.Tape("float64")
    np.testing.assert_array_equal(again.value(again.rand_uniform((3, 5), 42, 7)), expected)
    other = tape.value(tape.rand_uniform((3, 5), 42, counter=8))
    assert not np.array_equal(other, expected)
    # float32 tapes round the same draws once.
    t32 = tl.Tape()
    u32 = t32.value(t32.rand_uniform((3, 5), 42, 7))
    assert u32.dtype == np.float32
    np.testing.assert_array_equal(u32, expected.astype(np.float32))
    # Huge seeds wrap mod 2**64, like TorchLean's UInt64.ofNat.
    np.testing.assert_array_equal(tape.value(tape.rand_uniform((4,), 2**64 + 3)),
                                  tape.value(tape.rand_uniform((4,), 3)))
    assert not tape.node(r).requires_grad
    with pytest.raises(tl.ShapeError):
        tape.rand_uniform((2,), -1)


def test_bernoulli_mask_is_keep_prob_greater_than_u() -> None:
    tape = f64()
    p = tape.leaf(np.array(0.3))
    m = tape.bernoulli_mask(p, (40, 50), 9, counter=1)
    u = np.array(reference_uniform(2000, 9, 1)).reshape(40, 50)
    np.testing.assert_array_equal(tape.value(m), (0.3 > u).astype(np.float64))
    assert abs(tape.value(m).mean() - 0.3) < 0.03
    out = tape.sum(tape.mul(m, p))
    grads = tape.backward_dense(out, 1.0)
    # Only the product's direct path reaches p; the mask passes nothing.
    assert grads[m] is None
    np.testing.assert_array_equal(grads[p], tape.value(m).sum())
    assert tape.jvp(m, {p: np.array(1.0)}).sum() == 0.0
    with pytest.raises(tl.ShapeError, match="keep_prob must be a scalar"):
        tape.bernoulli_mask(tape.leaf(np.ones(2)), (3,), 0)


def test_selective_rules_skip_cotangents_nobody_receives(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen input of linear / conv2d costs no GEMM, and the other gradients are unchanged."""
    from torchlean.core.registry import ARRAY_OPS

    rng = np.random.default_rng(0)
    w, b, x = rng.standard_normal((3, 4)), rng.standard_normal(3), rng.standard_normal((5, 4))
    kw, kb, img = (rng.standard_normal((2, 3, 3, 3)), rng.standard_normal(2),
                   rng.standard_normal((2, 3, 6, 6)))

    def grads(frozen_input: bool) -> list[np.ndarray]:
        tape = tl.Tape("float64")
        wi, bi = tape.leaf(w), tape.leaf(b)
        xi = tape.leaf(x, requires_grad=not frozen_input)
        ki, kbi = tape.leaf(kw), tape.leaf(kb)
        ii = tape.leaf(img, requires_grad=not frozen_input)
        out = tape.add(tape.sum(tape.linear(wi, bi, xi)),
                       tape.sum(tape.conv2d(ki, kbi, ii, 1, 1)))
        result = tape.backward_scalar(out)
        assert (xi in result, ii in result) == (not frozen_input, not frozen_input)
        return [result[i] for i in (wi, bi, ki, kbi)]

    full = grads(False)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("an input cotangent was computed for a frozen input")

    monkeypatch.setattr(ARRAY_OPS, "conv_transpose_core", forbidden)
    original_matmul = ARRAY_OPS.matmul
    calls = []
    monkeypatch.setattr(ARRAY_OPS, "matmul", lambda a, c: calls.append(1) or original_matmul(a, c))
    for a, c in zip(grads(True), full, strict=True):
        np.testing.assert_array_equal(a, c)
    assert len(calls) == 1  # the weight gradient of linear only
