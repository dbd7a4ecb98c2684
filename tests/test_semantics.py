"""Every intended difference from PyTorch (tests/intended_differences.py), tested at the exact
points where the convention matters: torchlean's value, and PyTorch's where it has one.

The op battery skips exactly these points; this file is where they are pinned down. A new entry
in INTENDED_DIFFERENCES without a test here fails ``test_every_intended_difference_is_tested``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from intended_differences import INTENDED_DIFFERENCES

import torchlean as tl


def grads_of(op: str, *inputs: np.ndarray, **attrs: object) -> tuple[np.ndarray, list]:
    """Forward value and d(sum of output)/d(each input) through a float64 tape."""
    tape = tl.Tape("float64")
    ids = [tape.leaf(x) for x in inputs]
    out = getattr(tape, op)(*ids, **attrs)
    grads = tape.backward_dense_all(out, np.ones(tape.value(out).shape))
    return tape.value(out), [grads[i] for i in ids]


def torch_grads(fn: Callable, *inputs: np.ndarray) -> tuple[np.ndarray, list]:
    leaves = [torch.tensor(x, requires_grad=True) for x in inputs]
    out = fn(*leaves)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in leaves]


def tie_split() -> None:
    a = np.array([1.0, 2.0, -3.0])
    b = np.array([1.0, 0.5, -3.0])  # ties at entries 0 and 2
    for op, ref in (("max", torch.maximum), ("min", torch.minimum)):
        _, (ga, gb) = grads_of(op, a, b)
        np.testing.assert_array_equal(ga[[0, 2]], [0.5, 0.5])
        np.testing.assert_array_equal(gb[[0, 2]], [0.5, 0.5])
        _, (ta, tb) = torch_grads(ref, a, b)
        np.testing.assert_array_equal(ga, ta)  # PyTorch splits ties too
        np.testing.assert_array_equal(gb, tb)


def clamp_boundary() -> None:
    x = np.array([-0.5, 0.75, 0.0, -2.0, 3.0])
    y, (g,) = grads_of("clamp", x, lo=-0.5, hi=0.75)
    np.testing.assert_array_equal(y, [-0.5, 0.75, 0.0, -0.5, 0.75])
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, 0.0, 0.0])  # open interval
    _, (tg,) = torch_grads(lambda t: torch.clamp(t, -0.5, 0.75), x)
    np.testing.assert_array_equal(tg, [1.0, 1.0, 1.0, 0.0, 0.0])  # PyTorch: closed interval


def sqrt_nonpositive() -> None:
    x = np.array([-1.0, 0.0, 4.0])
    y, (g,) = grads_of("sqrt", x)
    np.testing.assert_array_equal(y, [0.0, 0.0, 2.0])
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.25])
    ty, (tg,) = torch_grads(torch.sqrt, x)
    assert np.isnan(ty[0]) and np.isnan(tg[0]) and np.isinf(tg[1])


def relu_at_zero() -> None:
    x = np.array([-1.0, 0.0, 2.0])
    _, (g,) = grads_of("relu", x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(torch_grads(torch.relu, x)[1][0], g)


def abs_at_zero() -> None:
    x = np.array([-1.0, 0.0, 2.0])
    _, (g,) = grads_of("abs", x)
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(torch_grads(torch.abs, x)[1][0], g)


def nat_out_of_range() -> None:
    x = np.array([10.0, 20.0, 30.0])
    y, (g,) = grads_of("gather_vec_nat", x, idx=[2, 5, 2, 3])
    np.testing.assert_array_equal(y, [30.0, 0.0, 30.0, 0.0])
    np.testing.assert_array_equal(g, [0.0, 0.0, 2.0])  # repeats accumulate, 5 and 3 give nothing
    y, (g,) = grads_of("gather_scalar_nat", x, i=3)
    assert y == 0.0 and not g.any()
    tape = tl.Tape("float64")
    xi = tape.leaf(x)
    out = tape.gather_scalar_nat(xi, 7)
    assert tape.backward(out, 1.0) == {out: 1.0}  # x receives nothing at all
    m = np.arange(6.0).reshape(3, 2)
    y, (g,) = grads_of("gather_rows_nat", m, idx=np.array([0, 3, 0]))
    np.testing.assert_array_equal(y, [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(g, [[2.0, 2.0], [0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(IndexError):
        torch.tensor(x)[torch.tensor([2, 5])]


TESTS: dict[str, Callable[[], None]] = {
    "tie_split": tie_split,
    "clamp_boundary": clamp_boundary,
    "sqrt_nonpositive": sqrt_nonpositive,
    "relu_at_zero": relu_at_zero,
    "abs_at_zero": abs_at_zero,
    "nat_out_of_range": nat_out_of_range,
}


def test_every_intended_difference_is_tested() -> None:
    assert {d.key for d in INTENDED_DIFFERENCES} == set(TESTS)


@pytest.mark.parametrize("key", sorted(TESTS))
def test_intended_difference(key: str) -> None:
    TESTS[key]()


def test_fin_indices_are_checked_when_recorded() -> None:
    tape = tl.Tape("float64")
    v = tape.leaf(np.arange(3.0))
    m = tape.leaf(np.zeros((2, 3)))
    s = tape.leaf(np.array(1.0))
    before = tape.size
    for call in (lambda: tape.gather_scalar(v, 3), lambda: tape.gather_scalar(v, -1),
                 lambda: tape.gather_row(m, 2), lambda: tape.scatter_add_vec(v, s, 5),
                 lambda: tape.scatter_add_row(m, v, 2), lambda: tape.gather_vec_nat(v, [-1]),
                 lambda: tape.gather_vec_nat(v, [0.5]), lambda: tape.slice_range0(v, 2, 2)):
        with pytest.raises(tl.ShapeError):
            call()
    assert tape.size == before
    with pytest.raises(tl.ShapeError, match=r"gather_scalar: index 3 out of range"):
        tape.gather_scalar(v, 3)
    with pytest.raises(tl.ShapeError, match=r"slice_range0: start \+ length = 2 \+ 2 exceeds"):
        tape.slice_range0(v, 2, 2)


def test_scatter_add_semantics() -> None:
    x = np.array([1.0, 2.0, 3.0])
    y, (gx, gv) = grads_of("scatter_add_vec", x, np.array(10.0), i=1)
    np.testing.assert_array_equal(y, [1.0, 12.0, 3.0])
    np.testing.assert_array_equal(gx, [1.0, 1.0, 1.0])
    assert gv == 1.0
    m = np.zeros((2, 3))
    y, (gm, gr) = grads_of("scatter_add_row", m, x, i=1)
    np.testing.assert_array_equal(y, [[0, 0, 0], [1, 2, 3]])
    np.testing.assert_array_equal(gm, np.ones((2, 3)))
    np.testing.assert_array_equal(gr, [1.0, 1.0, 1.0])
    assert x[1] == 2.0  # inputs are never written in place


def test_linear_matmul_errors_name_the_op_and_shapes() -> None:
    tape = tl.Tape("float64")
    a = tape.leaf(np.zeros((64, 1568)))
    b = tape.leaf(np.zeros((6272, 10)))
    with pytest.raises(tl.ShapeError, match=r"matmul: inner dimensions differ: \(64, 1568\) @ "
                                            r"\(6272, 10\)"):
        tape.matmul(a, b)
    w, bias, x = tape.leaf(np.zeros((3, 4))), tape.leaf(np.zeros(3)), tape.leaf(np.zeros((2, 5)))
    with pytest.raises(tl.ShapeError, match=r"linear: input must have shape \(\.\.\., 4\)"):
        tape.linear(w, bias, x)
    with pytest.raises(tl.ShapeError, match="bmm: batch sizes differ"):
        tape.bmm(tape.leaf(np.zeros((2, 3, 4))), tape.leaf(np.zeros((3, 4, 5))))


def test_linear_over_batch_axes_matches_per_row_matvec() -> None:
    rng = np.random.default_rng(5)
    w, b, x = rng.standard_normal((3, 4)), rng.standard_normal(3), rng.standard_normal((2, 5, 4))
    tape = tl.Tape("float64")
    ids = [tape.leaf(a) for a in (w, b, x)]
    out = tape.linear(*ids)
    rows = np.stack([[w @ x[i, j] + b for j in range(5)] for i in range(2)])
    np.testing.assert_allclose(tape.value(out), rows, rtol=1e-13)
    grads = tape.backward(out, np.ones((2, 5, 3)))
    np.testing.assert_allclose(grads[ids[1]], np.full(3, 10.0))
    np.testing.assert_allclose(grads[ids[0]], np.tile(x.reshape(10, 4).sum(0), (3, 1)))
