"""fit on both backends, reproducibility, save/load/resume, and the README's examples."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
import torchlean.training.fit


def _blobs(seed: int = 0, n: int = 120) -> tl.Dataset:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, size=n)
    centers = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    x = centers[labels] + 0.5 * rng.standard_normal((n, 2))
    return tl.Dataset(x.astype(np.float32), labels)


def _model(seed: int = 0) -> tl.nn.Module:
    tl.manual_seed(seed)
    return tl.nn.Sequential(tl.nn.Linear(2, 16), tl.nn.Tanh(), tl.nn.Linear(16, 3))


def _train(backend: str, epochs: int = 3) -> tuple[list[tl.train.EpochMetrics], tl.nn.Module]:
    train, test = _blobs().split(0.75, seed=1)
    model = _model()
    opt = tl.optim.Adam(model.parameters(), lr=0.05)
    history = tl.train.fit(model, F.cross_entropy, opt, train, epochs=epochs, batch_size=16,
                           test_data=test, backend=backend, seed=3, progress=False)
    return history, model


def test_fit_learns_and_backends_agree_bitwise() -> None:
    eager, m1 = _train("eager")
    compiled, m2 = _train("compiled")
    assert eager[-1].train_loss < eager[0].train_loss
    assert eager[-1].test_accuracy is not None and eager[-1].test_accuracy > 0.9
    assert [e.train_loss for e in eager] == [c.train_loss for c in compiled]
    assert [e.test_accuracy for e in eager] == [c.test_accuracy for c in compiled]
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=True):
        assert np.array_equal(a, b), k


def test_fit_is_reproducible_and_reports_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    h1, _ = _train("eager", epochs=2)
    # A fake clock that advances 2.5 s per reading: an epoch is read at its start and its end,
    # so each epoch lasts exactly 2.5 s and 90 training examples give 36 examples per second.
    # No real timing is involved, and a wrong count or a wrong clock reading fails.
    ticks = iter(np.arange(1000) * 2.5)
    monkeypatch.setattr(torchlean.training.fit.time, "perf_counter", lambda: float(next(ticks)))
    h2, _ = _train("eager", epochs=2)
    assert [m.as_dict()["train_loss"] for m in h1] == [m.as_dict()["train_loss"] for m in h2]
    record = h2[0].as_dict()
    assert {"epoch", "train_loss", "test_loss", "test_accuracy", "examples_per_second"} <= set(
        record)
    assert [m.seconds for m in h2] == [2.5, 2.5]
    assert [m.examples_per_second for m in h2] == [36.0, 36.0]


def test_fit_rejects_bad_arguments() -> None:
    model = _model()
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(tl.TorchLeanError, match="epochs"):
        tl.train.fit(model, F.cross_entropy, opt, _blobs(), epochs=0)
    with pytest.raises(tl.TorchLeanError, match="backend"):
        tl.train.fit(model, F.cross_entropy, opt, _blobs(), epochs=1, backend="jit")


class _OrderRecorder:
    """A training objective that only records the inputs of each batch (no gradients)."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def bind(self, *args: object) -> None:
        pass

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.seen += [int(v) for v in np.asarray(x)[:, 0]]
        return 0.0

    def postfix(self) -> dict[str, str]:
        return {}

    def epoch_stats(self) -> dict[str, float]:
        return {}


def _orders(seed: int, epochs: int = 3, n: int = 40, first_epoch: int = 1) -> list[list[int]]:
    """The example order of each epoch ``fit`` trains with (example i has input i)."""
    data = tl.Dataset(np.arange(n, dtype=np.float32)[:, None], np.zeros(n, dtype=np.int64))
    model = tl.nn.Sequential(tl.nn.Linear(1, 2))
    recorder = _OrderRecorder()
    tl.train.fit(model, F.cross_entropy, tl.optim.SGD(model.parameters(), lr=0.1), data,
                 epochs=epochs, batch_size=7, seed=seed, progress=False, objective=recorder,
                 first_epoch=first_epoch)
    return [recorder.seen[k * n:(k + 1) * n] for k in range(epochs)]


def test_batch_orders_come_from_one_generator_per_run() -> None:
    run = _orders(5)
    assert all(sorted(order) == list(range(40)) for order in run)  # each epoch a permutation
    assert len({tuple(order) for order in run}) == 3  # reshuffled every epoch
    assert _orders(5) == run  # the seed fixes every batch
    other = _orders(6)
    assert other[0] != run[0]
    # Seeds are independent runs: epoch e + 1 of seed s is not epoch e of seed s + 1 (as it was
    # when epoch e shuffled with seed s + e), nor any other epoch of it.
    assert not {tuple(order) for order in run} & {tuple(order) for order in other}
    # Resuming at epoch 3 sees the third epoch's order of the uninterrupted run.
    assert _orders(5, epochs=1, first_epoch=3) == run[2:]
    for bad in ({"seed": -1}, {"first_epoch": 0}):
        with pytest.raises(tl.TorchLeanError, match=next(iter(bad))):
            _orders(**{"seed": 0, **bad})


def test_save_load_resume_is_bitwise(tmp_path: Path) -> None:
    train = _blobs(n=64)

    def run(model: tl.nn.Module, opt: tl.optim.Optimizer, epochs: int, seed: int) -> None:
        tl.train.fit(model, F.cross_entropy, opt, train, epochs=epochs, batch_size=8, seed=seed,
                     progress=False)

    model = _model()
    opt = tl.optim.AdamW(model.parameters(), lr=0.02)
    run(model, opt, 1, seed=0)
    path = tmp_path / "ckpt.safetensors"
    tl.save(path, {"model": model, "optim": opt})
    run(model, opt, 2, seed=10)  # 16 more steps, uninterrupted

    resumed = _model(seed=99)  # different initial weights, overwritten by the load
    resumed_opt = tl.optim.AdamW(resumed.parameters(), lr=0.02)
    tl.load(path, {"model": resumed, "optim": resumed_opt})
    run(resumed, resumed_opt, 2, seed=10)
    for (k, a), (_, b) in zip(model.state_dict().items(), resumed.state_dict().items(),
                              strict=True):
        assert np.array_equal(a, b), k


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """Every Python block of the README runs on its own, in a fresh namespace (as a reader
    pastes it), and the two trainings print the accuracies they promise."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    printed = []
    for k, block in enumerate(blocks):
        exec(compile(block, f"README.md block {k}", "exec"), {"__name__": "__readme__"})  # noqa: S102
        printed.append(capsys.readouterr().out)
    tensor_lines = [line for out in printed for line in out.splitlines()
                    if line.startswith("loss ") and "train accuracy" in line]
    assert tensor_lines and float(tensor_lines[0].split()[-1]) > 0.95
    fit_block = next(k for k, b in enumerate(blocks) if "tl.train.fit(" in b)
    assert float(printed[fit_block].strip().splitlines()[-1]) > 0.9
    assert (tmp_path / "digits.safetensors").exists()
