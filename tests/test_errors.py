"""Bad input raises a TorchLeanError naming the op, before any state changes (DESIGN section 7).

Regression tests for inputs that used to escape as KeyError, TypeError, AttributeError or NumPy
errors, or that changed state (a tape node, a Param) before failing.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F


def test_unknown_op_name_is_a_torchlean_error() -> None:
    tape = tl.Tape()
    x = tape.leaf(np.ones(3))
    with pytest.raises(tl.UnknownOpError, match="no primitive named 'nope'"):
        tape.apply("nope", x)
    with pytest.raises(tl.TorchLeanError):
        F.apply("nope", np.ones(3))
    with pytest.raises(KeyError):  # still a KeyError for generic handlers
        tape.apply("nope", x)
    assert tape.size == 1


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_array_operand_with_bad_shape_records_nothing(backend: str) -> None:
    s = tl.Session(tl.Options(backend=backend))
    x = s.input(np.ones(3))
    size = len(s.graph) if backend == "compiled" else s.tape.size
    with pytest.raises(tl.ShapeError, match="add: shapes do not broadcast"):
        F.add(x, np.ones(5))
    with pytest.raises(tl.ShapeError, match="add"):
        x + np.ones((5,))
    with pytest.raises(tl.ShapeError, match="linear"):
        F.linear(np.ones((2, 4)), np.ones(2), x)
    with pytest.raises(tl.ShapeError, match="not a rectangular array"):
        F.add(x, [[1.0], [1.0, 2.0]])
    assert (len(s.graph) if backend == "compiled" else s.tape.size) == size
    # Arrays that fit still become constants, NatRefs still work as attributes.
    assert s.value(x + np.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert F.gather_vec_nat(x, idx=s.nat_vec([0, 7])).shape == (2,)


RAGGED = [[1.0], [1.0, 2.0]]


def test_non_numeric_data_is_a_shape_error_everywhere() -> None:
    tape = tl.Tape()
    x = tape.leaf(np.ones(3))
    for bad in (RAGGED, "abc", np.ones(2, complex)):
        with pytest.raises(tl.ShapeError, match="leaf"):
            tape.leaf(bad)
    with pytest.raises(tl.ShapeError, match="backward_dense seed"):
        tape.backward(x, "a")
    with pytest.raises(tl.ShapeError, match="seed"):
        tape.backward(tape.sum(x), None)  # used to become a NaN seed
    with pytest.raises(tl.TapeError, match="tangents must be a dict"):
        tape.jvp(x, [np.ones(3)])
    with pytest.raises(tl.ShapeError, match="jvp tangent"):
        tape.jvp(x, {x: "abc"})
    for backend in ("eager", "compiled"):
        s = tl.Session(tl.Options(backend=backend))
        with pytest.raises(tl.ShapeError, match="input"):
            s.input(RAGGED)
        with pytest.raises(tl.ShapeError, match="input"):
            s.input("abc")
        r = s.input(np.ones(2))
        with pytest.raises(tl.TapeError, match="tangents must be a dict"):
            s.jvp(r, [np.ones(2)])


def test_compiled_and_transforms_reject_non_numeric_data() -> None:
    c = tl.compile(lambda x: F.sum(F.relu(x)), (3,))
    with pytest.raises(tl.ShapeError, match="forward: input 0"):
        c.forward("abc")
    with pytest.raises(tl.ShapeError, match="vjp seed"):
        c.vjp([np.ones(3)], "a")
    with pytest.raises(tl.ShapeError, match="grad: argument 0"):
        tl.grad(lambda x: F.sum(x))("abc")
    with pytest.raises(tl.ShapeError, match="complex"):  # used to drop the imaginary part
        tl.grad(lambda x: F.sum(x))(np.ones(3, complex))
    _, vjp_fn = tl.vjp(F.relu, np.ones(3))
    with pytest.raises(tl.ShapeError, match="vjp seed"):
        vjp_fn("abc")


def test_param_data_is_checked_and_left_unchanged() -> None:
    for bad in (RAGGED, "abc", None, np.ones(2, complex)):
        with pytest.raises(tl.ShapeError, match="Param"):
            tl.Param(bad)
    p = tl.Param(np.ones(3), name="w")
    for bad in ("abc", None, np.array(["a", "b", "c"])):
        with pytest.raises(tl.ShapeError, match="Param w"):
            p.assign(bad)
    np.testing.assert_array_equal(p.value, np.ones(3))


def test_optimizer_step_and_dataset_reject_ragged_data() -> None:
    p = tl.Param(np.ones(2))
    opt = tl.optim.SGD([p], lr=0.1)
    with pytest.raises(tl.ShapeError, match="SGD.step"):
        opt.step([RAGGED])
    with pytest.raises(tl.ShapeError, match="grads must be a list"):
        opt.step(5)
    np.testing.assert_array_equal(p.value, np.ones(2))
    with pytest.raises(tl.ShapeError, match="Dataset"):
        tl.Dataset(RAGGED, [1, 2])


def test_compile_validates_leaf_shapes_and_argnums() -> None:
    fn = lambda x: F.sum(F.relu(x))  # noqa: E731
    for bad in ((-1,), (2.5,), ("a",), None):
        with pytest.raises(tl.ShapeError, match="compile: leaf 0 shape"):
            tl.compile(fn, bad)
    with pytest.raises(tl.ShapeError, match="argnums must be an int or a tuple"):
        tl.grad(fn, "a")(np.ones(3))
    with pytest.raises(tl.ShapeError, match="argnums must be an int or a tuple"):
        tl.grad(fn, True)(np.ones(3))
    with pytest.raises(tl.ShapeError, match="hessian: argnums must be one int"):
        tl.hessian(lambda x, y: F.sum(x * y), (0, 1))(np.ones(2), np.ones(2))
    assert tl.grad(lambda x, y: F.sum(x * y), [0, 1])(np.ones(2), np.ones(2))[1].shape == (2,)


def test_require_value_checks_its_shape_argument() -> None:
    tape = tl.Tape()
    x = tape.leaf(np.ones(3))
    with pytest.raises(tl.ShapeError, match="require_value"):
        tape.require_value(x, None)
    with pytest.raises(tl.ShapeError, match="require_value"):
        tape.require_value(x, (4,))
    assert tape.require_value(x, (3,)).shape == (3,)


def test_scalar_attributes_must_be_real_numbers() -> None:
    tape = tl.Tape()
    x = tape.leaf(np.ones(3))
    for call in (lambda: tape.scale(x, "a"), lambda: tape.scale(x, None),
                 lambda: tape.add_scalar(x, "a"), lambda: tape.clamp(x, None, 1.0),
                 lambda: tape.clamp(x, "a", "b"), lambda: tape.safe_log(x, "a")):
        with pytest.raises(tl.ShapeError, match="must be a (real|positive) number"):
            call()
    assert tape.size == 1
    assert tape.value(tape.scale(x, np.float32(2.0))).tolist() == [2.0, 2.0, 2.0]
    assert tape.value(tape.clamp(x, 0, 2)).tolist() == [1.0, 1.0, 1.0]


def test_layer_norm_rejects_an_empty_batch() -> None:
    tape = tl.Tape()
    x, g = tape.leaf(np.ones((0, 4))), tape.leaf(np.ones(4))
    with pytest.raises(tl.ShapeError, match="layer_norm: needs a non-empty"):
        tape.layer_norm(x, g, g)


def test_ref_indexing_pow_and_reshape_errors() -> None:
    s = tl.Session()
    x, c = s.input(np.ones(3)), s.input(np.array(1.0))
    size = s.tape.size
    with pytest.raises(tl.ShapeError, match="scalar ref"):
        c[0:1]
    with pytest.raises(tl.ShapeError, match="indexing"):
        x[True]
    with pytest.raises(tl.ShapeError, match="pow: the exponent must be a number"):
        x ** np.array([2, 2])
    with pytest.raises(tl.ShapeError, match="reshape"):
        x.reshape(None)
    assert s.tape.size == size
    assert s.value(x[-1]) == 1.0 and x.reshape(3, 1).shape == (3, 1)


def test_session_helpers_check_arguments_before_recording() -> None:
    s = tl.Session()
    with pytest.raises(tl.TorchLeanError, match="nat_vec"):
        s.nat_vec(5)
    with pytest.raises(tl.ShapeError, match="rand_uniform"):
        s.rand_uniform(None)
    with pytest.raises(tl.ShapeError, match="bernoulli_mask: keep_prob must be a scalar"):
        s.bernoulli_mask([0.5, 0.5], (2,))
    with pytest.raises(tl.TorchLeanError, match="dropout: p must be a number"):
        s.dropout(s.input(np.ones(2)), "a")
    # Nothing but the one input was recorded and no random draw was used up.
    assert s.tape.size == 1 and s._random_draws == 0
    assert s.value(s.rand_uniform(3)).shape == (3,)


def test_nn_constructors_and_sequential_indexing() -> None:
    for build in (lambda: tl.nn.Conv2d(1, 1, 0), lambda: tl.nn.Conv2d(1, 1, 2, stride=0),
                  lambda: tl.nn.MaxPool2d(0), lambda: tl.nn.AvgPool2d(2, stride=(1, 0)),
                  lambda: tl.nn.Conv2d(1, 1, 2.5), lambda: tl.nn.Dropout("a"),
                  lambda: tl.nn.Flatten("a")):
        with pytest.raises(tl.TorchLeanError):
            build()
    seq = tl.nn.Sequential(tl.nn.ReLU(), tl.nn.ReLU())
    with pytest.raises(tl.IndexRangeError, match="Sequential: index 5"):
        seq[5]
    with pytest.raises(IndexError):
        seq[-3]
    with pytest.raises(tl.TorchLeanError, match="Sequential: index with an int"):
        seq["a"]
    assert seq[-1] is list(seq)[-1]


def test_dataset_index_errors_are_torchlean_errors() -> None:
    ds = tl.Dataset(np.arange(4.0), np.arange(4))
    with pytest.raises(tl.IndexRangeError):
        ds[10]
    with pytest.raises(tl.IndexRangeError):
        ds[np.array([0, 12])]
    with pytest.raises(tl.ShapeError, match="shuffle: seed must be non-negative"):
        ds.shuffle(-1)
