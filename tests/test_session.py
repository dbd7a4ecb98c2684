"""Sessions on both backends, ParamList, ScalarTrainer and mean_scalar_over."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.engine.session import NatRef, Options
from torchlean.training.fit import mean_scalar_over
from torchlean.training.trainers import ParamList, ScalarTrainer, Session


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((5, 4)), rng.standard_normal(5) * 0.1,
            rng.standard_normal((8, 4)), rng.integers(0, 5, size=8))


def _loss(s: Session, w: tl.Param, b: tl.Param, x: np.ndarray, y: np.ndarray) -> object:
    logits = F.linear(s.use(w), s.use(b), s.input(x, requires_grad=False))
    return F.cross_entropy(F.relu(logits), s.input(y))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_training_step_same_on_tape_session_and_compiled(dtype: str) -> None:
    w0, b0, x, y = _data()
    results = []
    for backend in ("eager", "compiled"):
        w, b = tl.Param(w0, "w", dtype=dtype), tl.Param(b0, "b", dtype=dtype)
        s = Session(Options(backend=backend, dtype=dtype))
        loss = _loss(s, w, b, x, y)
        grads = s.backward(loss)
        s.sgd_step(0.1, grads)
        results.append((s.value(loss), w.value, b.value))
    # The same step through the raw tape.
    tape = tl.Tape(dtype)
    wi = tape.leaf(w0.astype(dtype))
    bi = tape.leaf(b0.astype(dtype))
    xi = tape.leaf(x.astype(dtype), requires_grad=False)
    logits = tape.relu(tape.linear(wi, bi, xi))
    onehot = tape.leaf(np.eye(5, dtype=dtype)[y], requires_grad=False)
    loss = tape.scale(tape.sum(tape.mul(tape.log_softmax(logits), onehot)), -1.0 / 8)
    grads = tape.backward_scalar(loss)
    raw = (tape.value(loss), w0.astype(dtype) - np.asarray(0.1 * grads[wi], dtype),
           b0.astype(dtype) - np.asarray(0.1 * grads[bi], dtype))
    for other in (results[1], raw):
        for a, c in zip(results[0], other, strict=True):
            assert np.array_equal(a, c)


def test_backward_accumulates_into_param_grad_and_grad_lookup() -> None:
    w = tl.Param(np.array([1.0, 2.0]), "w", dtype="float64")
    s = Session(Options(dtype="float64"))
    wr = s.use(w)
    assert s.use(w) is not None and s.use(w).id == wr.id
    other = s.input(np.ones(2))
    grads = s.backward(F.sum(F.square(wr)))
    np.testing.assert_array_equal(w.grad, [2.0, 4.0])
    s.backward(F.sum(wr))
    np.testing.assert_array_equal(w.grad, [3.0, 5.0])
    np.testing.assert_array_equal(s.grad(grads, other), [0.0, 0.0])
    with pytest.raises(tl.ShapeError, match="explicit seed"):
        s.backward(wr * 2.0)


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_jvp_in_both_backends(backend: str) -> None:
    s = Session(Options(backend=backend, dtype="float64"))
    x = s.input(np.array([0.5, -1.0]))
    y = F.sum(F.tanh(x) * x)
    t = s.jvp(y, {x: np.array([1.0, 2.0])})
    v = np.array([0.5, -1.0])
    expected = np.sum((np.tanh(v) + v * (1 - np.tanh(v) ** 2)) * [1.0, 2.0])
    assert float(t) == pytest.approx(expected, rel=1e-12)


def test_random_bits_agree_across_backends_and_seeds() -> None:
    draws = []
    for backend in ("eager", "compiled"):
        s = Session(Options(backend=backend, seed=7))
        u = s.rand_uniform((3, 4))
        x = s.input(np.ones((3, 4), np.float32))
        d = s.dropout(x, 0.5)
        draws.append((s.value(u), s.value(d)))
    assert np.array_equal(draws[0][0], draws[1][0])
    assert np.array_equal(draws[0][1], draws[1][1])
    assert set(np.unique(draws[0][1])) <= {0.0, 2.0}
    other = Session(Options(seed=8))
    assert not np.array_equal(other.value(other.rand_uniform((3, 4))), draws[0][0])
    s = Session()
    x = s.input(np.ones(3, np.float32))
    assert s.dropout(x, 0.5, training=False) is x


def test_nat_refs_feed_nat_gathers() -> None:
    s = Session(Options(dtype="float64"))
    x = s.input(np.array([1.0, 2.0, 3.0]))
    g = F.gather_vec_nat(x, s.nat_vec([2, 0, 5]))
    np.testing.assert_array_equal(s.value(g), [3.0, 1.0, 0.0])
    assert isinstance(s.nat(1), NatRef)
    with pytest.raises(tl.TorchLeanError, match="non-negative"):
        s.nat(-1)


def test_options_and_session_errors() -> None:
    with pytest.raises(tl.TorchLeanError, match="backend"):
        Options(backend="jit")
    with pytest.raises(tl.DeviceError, match="device"):
        Options(device="tpu")
    with pytest.raises(tl.ShapeError, match="dtype"):
        Options(dtype="int8")
    s1, s2 = Session(), Session()
    a, b = s1.input(np.ones(2)), s2.input(np.ones(2))
    with pytest.raises(tl.TorchLeanError, match="different"):
        _ = a + b
    with pytest.raises(tl.TapeError, match="this session"):
        s1.value(b)


def test_param_list() -> None:
    pl = ParamList([np.ones(2), np.zeros(3)], requires_grad=[True, False], dtype="float64")
    pl.sgd_step(0.5, [np.ones(2), np.ones(3)])
    np.testing.assert_array_equal(pl.values()[0], [0.5, 0.5])
    np.testing.assert_array_equal(pl.values()[1], [0.0, 0.0, 0.0])  # frozen
    with pytest.raises(tl.ShapeError):
        pl.set_values([np.ones(2), np.ones(4)])
    np.testing.assert_array_equal(pl.values()[0], [0.5, 0.5])  # nothing changed
    with pytest.raises(tl.TorchLeanError):
        ParamList([np.ones(2)], requires_grad=[True, False])


@pytest.mark.parametrize("kind", ["step", "adam_step", "adamw_step"])
def test_scalar_trainer_backends_agree(kind: str) -> None:
    w0, b0, x, y = _data(1)

    def loss_fn(w: object, b: object, x: object, y: object) -> object:
        return F.cross_entropy(F.linear(w, b, x), y)

    runs = []
    for backend in ("eager", "compiled"):
        tr = ScalarTrainer([w0, b0], loss_fn, Options(backend=backend, dtype="float64"))
        losses = []
        for _ in range(5):
            if kind == "step":
                losses.append(tr.step(0.1, x, y))
            elif kind == "adam_step":
                losses.append(tr.adam_step(0.01, 0.9, 0.999, 1e-8, x, y))
            else:
                losses.append(tr.adamw_step(0.01, 0.9, 0.999, 1e-8, 0.01, x, y))
        runs.append((losses, tr.params(), tr.forward(x, y), tr.backward(x, y)))
    assert runs[0][0] == runs[1][0]
    assert runs[0][0][-1] < runs[0][0][0]
    for a, b in zip(runs[0][1] + runs[0][3], runs[1][1] + runs[1][3], strict=True):
        assert np.array_equal(a, b)
    assert runs[0][2] == runs[1][2]


def test_mean_scalar_over() -> None:
    s = Session(Options(dtype="float64"))
    x = s.input(np.array([1.0, 2.0, 3.0]))
    losses = [np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])]
    m = mean_scalar_over(losses, lambda v: F.sum(x * s.const(v)))
    assert float(s.value(m)) == 1.5
    grads = s.backward(m)
    np.testing.assert_array_equal(s.grad(grads, x), [0.5, 0.5, 0.0])
    with pytest.raises(tl.TorchLeanError, match="empty"):
        mean_scalar_over([], lambda v: v)
    with pytest.raises(tl.ShapeError, match="scalar"):
        mean_scalar_over([1], lambda v: x)


def test_cuda_without_cupy_is_a_device_error() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here; this test covers machines without it")
    with pytest.raises(tl.DeviceError, match="CuPy is not installed"):
        Options(device="cuda")
    with pytest.raises(tl.DeviceError, match="CuPy is not installed"):
        tl.Tape(device="cuda")


def test_check_finite_and_requires_grad_by_default() -> None:
    s = Session(Options(dtype="float64", check_finite=True))
    x = s.input(np.array([1.0, 0.0]))
    with pytest.raises(tl.DomainError, match="inv: 1 of 2 entries are NaN or infinite"):
        _ = 1.0 / x
    assert s.tape is not None and s.tape.size == 1  # the refused op left nothing behind
    with pytest.raises(tl.DomainError, match="leaf"):
        s.input(np.array([np.nan]))
    loose = Session(Options(dtype="float64"))
    y = loose.input(np.array([1.0]))
    grads = loose.backward(F.sum(y * 2.0))
    np.testing.assert_array_equal(loose.grad(grads, y), [2.0])  # inputs require grad by default
    frozen = Session(Options(dtype="float64", requires_grad_by_default=False))
    z = frozen.input(np.array([1.0]))
    assert frozen.backward(F.sum(z * 2.0)).get(z.id) is None
