"""Anomaly detection (issue 15, item 4): check_finite names the first non-finite op and node in
forward values, gradients and optimiser updates, on the eager and the compiled backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.errors import DomainError
from torchlean.engine.anomaly import NonFiniteError, TrainingDiverged
from torchlean.engine.params import Param
from torchlean.engine.session import Options
from torchlean.training.stepper import Stepper
from torchlean.training.trainers import Session

BACKENDS = ["eager", "compiled"]


def _exp_loss(w: Param) -> Stepper:
    def fn(owner, x):  # noqa: ANN001, ANN202  (the Stepper protocol)
        return F.sum(F.exp(x * owner.use(w)))

    return fn


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_value_names_the_first_op_and_node(backend: str) -> None:
    w = Param(np.array([1.0, 1000.0]), name="w", dtype="float64")
    x = np.array([2.0, 3.0])
    stepper = Stepper(_exp_loss(w), Options(backend=backend, dtype="float64",
                                            check_finite=True))
    # mul (x * w) is finite; exp of 3000 is the first infinite value.
    with pytest.raises(NonFiniteError, match=r"exp.*\(node \d+"):
        stepper.value_and_grads([x])
    # Without the check the overflow goes through silently (what check_finite is for).
    loose = Stepper(_exp_loss(w), Options(backend=backend, dtype="float64"))
    value, _ = loose.value_and_grads([x])
    assert np.isinf(value)
    # A finite pass is unaffected by the check.
    w.assign(np.array([1.0, 1.0]))
    value, pairs = stepper.value_and_grads([x])
    assert np.isclose(value, np.exp(2.0) + np.exp(3.0))
    np.testing.assert_allclose(pairs[0][1], x * np.exp(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_names_the_node_of_the_reverse_pass(backend: str) -> None:
    w = Param(np.array([1e-200, 4.0]), name="w", dtype="float64")

    def fn(owner, x):  # noqa: ANN001, ANN202
        return F.sum(F.inv(owner.use(w)) * x)  # 1e200 is finite, the derivative -1e400 is not

    stepper = Stepper(fn, Options(backend=backend, dtype="float64", check_finite=True))
    with pytest.raises(NonFiniteError, match=r"gradient \(cotangent\) of .* node \d+ has 1 of 2 "
                       r"entries infinite, made by the VJP of op inv \(node \d+\)"):
        stepper.value_and_grads([np.ones(2)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_session_checks_values_gradients_and_updates(backend: str) -> None:
    s = Session(Options(backend=backend, dtype="float64", check_finite=True))
    x = s.input(np.array([1.0, 0.0]))
    with pytest.raises(DomainError, match=r"inv.*\(node 1"):
        s.value(F.inv(x)) if backend == "compiled" else F.inv(x)
    # An update that overflows names the parameter and the optimiser.
    w = Param(np.array([1.0, 2.0]), name="w", dtype="float64")
    s = Session(Options(backend=backend, dtype="float64", check_finite=True))
    loss = F.sum(s.use(w) * s.input(np.array([1e300, 1.0]), requires_grad=False))
    grads = s.backward(loss)
    with pytest.raises(NonFiniteError, match=r"SGD step.*parameter 'w'"):
        s.sgd_step(1e10, grads)


def test_tape_check_finite_names_the_node() -> None:
    tape = tl.Tape(dtype="float64", check_finite=True)
    x = tape.leaf(np.array([1.0, 0.0]))
    y = tape.exp(x)
    with pytest.raises(NonFiniteError, match=r"inv: 2 of 2 entries are NaN or infinite \(node 3"):
        tape.inv(tape.sub(y, y))
    assert tape.size == 3  # the refused op left nothing


def _blob_data() -> tl.Dataset:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    return tl.Dataset(x, (x[:, 0] > 0).astype(np.int64))


def _mlp() -> tl.nn.Module:
    tl.nn.manual_seed(0)
    return tl.nn.Sequential(tl.nn.Linear(4, 8), tl.nn.ReLU(), tl.nn.Linear(8, 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_stops_when_the_loss_diverges_and_keeps_a_finite_state(backend: str) -> None:
    model = _mlp()
    optimizer = tl.optim.SGD(model.parameters(), lr=1e12)  # every parameter ends up NaN
    with pytest.raises(TrainingDiverged, match=r"fit: stopped at epoch \d+, batch \d+: the loss "
                                               r"is (nan|inf)") as info:
        tl.train.fit(model, F.cross_entropy, optimizer, _blob_data(), epochs=5, batch_size=16,
                     backend=backend, progress=False)
    assert info.value.epoch >= 1 and len(info.value.history) == info.value.epoch - 1
    assert "check_finite=True" in str(info.value)  # says how to find the op
    for p in model.parameters():
        assert np.isfinite(p.value).all(), p.name


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_check_finite_names_the_op_or_the_update(backend: str) -> None:
    model = _mlp()
    optimizer = tl.optim.SGD(model.parameters(), lr=1e30)
    with pytest.raises(TrainingDiverged, match=r"fit: stopped at epoch 1, batch \d+: .*"
                                               r"(node \d+|parameter '[^']+')"):
        tl.train.fit(model, F.cross_entropy, optimizer, _blob_data(), epochs=2, batch_size=16,
                     backend=backend, progress=False, check_finite=True)
    for p in model.parameters():
        assert np.isfinite(p.value).all(), p.name
    # A healthy run is unchanged by the check.
    model, reference = _mlp(), _mlp()
    for m, check in ((model, True), (reference, False)):
        opt = tl.optim.SGD(m.parameters(), lr=0.1)
        tl.train.fit(m, F.cross_entropy, opt, _blob_data(), epochs=2, batch_size=16,
                     backend=backend, progress=False, check_finite=check)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_array_equal(p.value, q.value)


def test_cli_check_finite_and_save_keeps_the_last_finite_state(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture
                                                               ) -> None:
    from torchlean import cli

    save = str(tmp_path / "diverged.safetensors")
    code = cli.main(["train", "--dataset", "iris", "--epochs", "3", "--optimizer", "sgd",
                     "--lr", "1e30", "--check-finite", "--save", save])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "stopped at epoch" in err and "--save" in err
    state = tl.load(save)
    for key, value in state["model"].items():
        assert np.isfinite(value).all(), key
    assert "stopped" in tl.read_metadata(save)
