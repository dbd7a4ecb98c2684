"""Compiled training steps replayed from a captured CUDA graph (``Options.cuda_graph``), on the
strict stand-in device: where the graph is used, that it changes no number, that a failed
capture falls back (auto) or raises (required), and the option's checks.

On the stand-in ``GraphedStep`` runs the step directly with the graph's buffer discipline (static
inputs and outputs); the CuPy capture itself is covered by ``test_cuda_graph.py`` against a
recording fake and by the ``gpu`` tests on hardware.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from strict_device import strict_cuda

from torchlean import cli, optim
from torchlean.core.errors import DeviceError, TorchLeanError
from torchlean.data import Dataset
from torchlean.engine import ops_interface as F
from torchlean.engine.session import Options
from torchlean.training import cuda_graph
from torchlean.training.fit import fit
from torchlean.zoo import models

CONFIG = {"model": "mlp", "in_features": 6, "hidden": [9], "num_classes": 3, "seed": 4}


def _data() -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset(rng.normal(size=(24, 6)).astype(np.float32), rng.integers(0, 3, size=24))


def _train(cuda_graph_option: bool | None, device: str | None) -> tuple[list[np.ndarray], Any]:
    model = models.build(CONFIG)
    history = fit(model, F.cross_entropy, optim.Adam(model.parameters(), lr=1e-2), _data(),
                  epochs=2, batch_size=8, backend="compiled", progress=False, device=device,
                  cuda_graph=cuda_graph_option)
    return [np.array(p.value, copy=True) for p in model.parameters()], history


def _graphed_steps() -> int:
    return sum(step.calls for step in list(cuda_graph._STEPS.values()))


def test_compiled_training_on_a_device_is_graphed_and_changes_no_number() -> None:
    cpu, cpu_history = _train(None, None)
    with strict_cuda():
        before = _graphed_steps()
        graphed, history = _train(None, "cuda")  # auto: graphed on a device
        used = _graphed_steps() - before
        plain, plain_history = _train(False, "cuda")
        assert _graphed_steps() - before == used  # cuda_graph=False never graphs
    assert used == 2 * 3  # every training step of 2 epochs x 3 batches went through the graph
    for a, b, c in zip(graphed, plain, cpu, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert [r.train_loss for r in history] == [r.train_loss for r in plain_history] \
        == [r.train_loss for r in cpu_history]


def test_auto_mode_falls_back_with_a_warning_and_required_mode_raises(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(compiled: Any, xs: Any) -> Any:
        raise DeviceError("CUDA graph capture of the step failed (test)")

    cpu, _ = _train(None, None)
    monkeypatch.setattr(cuda_graph, "maybe_graphed", refuse)
    with strict_cuda():
        with pytest.warns(RuntimeWarning, match="without a CUDA graph") as caught:
            values, _ = _train(None, "cuda")
        # One warning per compiled step shape (full batches; the epoch's batches are equal).
        assert len([w for w in caught if "CUDA graph" in str(w.message)]) == 1
        for a, b in zip(values, cpu, strict=True):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(DeviceError, match="capture of the step failed"):
            _train(True, "cuda")


def test_the_option_is_checked() -> None:
    with pytest.raises(TorchLeanError, match="needs backend='compiled'"):
        Options(backend="eager", cuda_graph=True)
    with pytest.raises(TorchLeanError, match="cannot be combined"):
        Options(backend="compiled", cuda_graph=True, check_finite=True)
    with pytest.raises(TorchLeanError, match="None, True or False"):
        Options(backend="compiled", cuda_graph="yes")  # type: ignore[arg-type]
    assert not Options(backend="compiled").graphs_steps  # the CPU has nothing to capture
    with strict_cuda():
        assert not Options(backend="eager", device="cuda").graphs_steps
        assert Options(backend="compiled", device="cuda").graphs_steps
        assert not Options(backend="compiled", device="cuda", check_finite=True).graphs_steps


def test_the_cli_flag_needs_the_compiled_backend(capsys: pytest.CaptureFixture[str]) -> None:
    with strict_cuda():
        code = cli.main(["train", "--model", "mlp", "--epochs", "1", "--device", "cuda",
                         "--backend", "eager", "--cuda-graph"])
    assert code == 2
    assert "needs backend='compiled'" in capsys.readouterr().err
