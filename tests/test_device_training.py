"""Training on the strict stand-in device (``strict_device``): optimisers, ``fit``, checkpoints,
``nn.Module.to`` and ``torchlean train --device cuda``.

The stand-in runs NumPy underneath, so every number must equal the CPU run's (checked to 1e-6,
they are in fact identical); it raises on any implicit host transfer, so a test that finishes made
none, and it counts the explicit ones, so each parameter is seen to be uploaded once, not once
per step.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from strict_device import StrictArray, TransferLog, strict_cuda

from torchlean import checkpoint, cli, nn, optim
from torchlean.core.backend import to_device
from torchlean.core.errors import DeviceError
from torchlean.data import Dataset
from torchlean.engine import ops_interface as F
from torchlean.engine.anomaly import TrainingDiverged
from torchlean.engine.params import Param
from torchlean.training.fit import fit
from torchlean.zoo import datasets, models


@contextlib.contextmanager
def device() -> Iterator[Any]:
    """``strict_cuda()``: within the block device "cuda" is the stand-in; yields its namespace."""
    with strict_cuda() as xp:
        yield xp


def transfers(xp: Any) -> TransferLog:
    log = xp.transfers
    assert isinstance(log, TransferLog)
    return log


def host_values(module: Any) -> list[np.ndarray]:
    return [np.array(p.value, copy=True) for p in module.parameters()]


def assert_close(a: Any, b: Any) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Optimisers


OPTIMISERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "sgd-momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1,
                                         weight_decay=0.01),
    "sgd-nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
    "adam-low-beta": lambda ps: optim.Adam(ps, lr=0.01, betas=(0.3, 0.9)),
    "adamw": lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}


def _params_and_grads(steps: int) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(7)
    shapes = [(5, 3), (3,), (2, 2, 2)]
    values = [rng.normal(size=s).astype(np.float32) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return values, grads


@pytest.mark.parametrize("kind", sorted(OPTIMISERS))
def test_optimisers_on_the_device_match_the_cpu_in_place(kind: str) -> None:
    values, grads = _params_and_grads(4)
    cpu = [Param(v, f"p{i}") for i, v in enumerate(values)]
    cpu_opt = OPTIMISERS[kind](cpu)
    for g in grads:
        cpu_opt.step(g)
    with device() as xp:
        log = transfers(xp)
        dev = [Param(v, f"p{i}") for i, v in enumerate(values)]
        opt = OPTIMISERS[kind](dev)  # built while the parameters are still on the host
        for p in dev:
            p.on(xp)
        device_grads = [[to_device(g, xp) for g in step] for step in grads]
        buffers = [p.array for p in dev]
        before = (log.uploads, log.downloads)
        for g in device_grads:
            opt.step(g)
        # No transfer at all during the steps: the fresh state is made on the device.
        assert (log.uploads, log.downloads) == before
        assert all(p.array is b for p, b in zip(dev, buffers, strict=True))  # in place
        for state in opt.state:
            assert all(type(v) is StrictArray for k, v in state.items() if k != "step")
        for p, q in zip(dev, cpu, strict=True):
            assert p.device == "cuda"
            assert np.array_equal(p.value, q.value)
        # state_dict reads back; it equals the CPU optimiser's, key by key
        sd, cpu_sd = opt.state_dict(), cpu_opt.state_dict()
        assert sd.keys() == cpu_sd.keys()
        assert all(type(v) is np.ndarray and np.array_equal(v, cpu_sd[k]) for k, v in sd.items())
        # load_state_dict into a device optimiser uploads and keeps going in step with the CPU
        fresh = [Param(np.array(p.value), p.name) for p in dev]
        for p in fresh:
            p.on(xp)
        opt2 = OPTIMISERS[kind](fresh)
        # (a copy: as torch's, load_state_dict takes the given host arrays themselves, the
        # step counters included, and cpu_sd refers to cpu_opt's live state)
        opt2.load_state_dict(copy.deepcopy(cpu_sd))
        extra = [to_device(g, xp) for g in grads[0]]
        opt2.step(extra)
        cpu_opt.step(grads[0])
        for p, q in zip(fresh, cpu, strict=True):
            assert np.array_equal(p.value, q.value)


def test_a_stepped_state_follows_its_parameter_to_the_device() -> None:
    values, grads = _params_and_grads(3)
    cpu = [Param(v) for v in values]
    cpu_opt = optim.Adam(cpu, lr=0.01)
    moved = [Param(v) for v in values]
    opt = optim.Adam(moved, lr=0.01)
    cpu_opt.step(grads[0])
    opt.step(grads[0])  # on the host
    with device() as xp:
        for p in moved:
            p.on(xp)
        device_grads = [to_device(g, xp) for g in grads[1]]
        uploads = transfers(xp).uploads
        opt.step(device_grads)
        # exp_avg and exp_avg_sq of each parameter: one explicit upload each, once
        assert transfers(xp).uploads - uploads == 2 * len(moved)
        opt.step(grads[2])  # host gradients for device parameters: uploaded explicitly
        cpu_opt.step(grads[1])
        cpu_opt.step(grads[2])
        for p, q in zip(moved, cpu, strict=True):
            assert np.array_equal(p.value, q.value)


# ---------------------------------------------------------------------------------------------
# fit on the default models of ``torchlean train``


def _data(name: str) -> tuple[dict[str, Any], Dataset, Dataset]:
    """A small config of model ``name`` and train/test data for it (sizes chosen so that no
    batch or constant has the shape of a parameter: parameter uploads can be counted)."""
    rng = np.random.default_rng(3)
    if name == "mlp":
        config = {"model": "mlp", "in_features": 12, "hidden": [20, 14], "num_classes": 5,
                  "seed": 1}
        x = rng.normal(size=(30, 12)).astype(np.float32)
        y = rng.integers(0, 5, size=30)
    elif name == "cnn":
        config = {"model": "cnn", "image_shape": [1, 8, 8], "channels": [3, 5], "num_classes": 6,
                  "seed": 1}
        x = rng.normal(size=(30, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, 6, size=30)
    else:
        bundle = datasets.adder(seed=1, digits_per_operand=2, size=40)
        config = models.config_for("transformer", bundle, seed=1)
        config.update(d_model=16, num_heads=2, num_layers=2, d_ff=24)
        return config, bundle.train[:30], bundle.test[:10]
    return config, Dataset(x[:20], y[:20]), Dataset(x[20:], y[20:])


def _train(config: dict[str, Any], train: Dataset, test: Dataset, kind: str, backend: str,
           where: str | None) -> tuple[Any, list[Any], Any]:
    model = models.build(config)
    opt = {"sgd": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9),
           "adam": lambda ps: optim.Adam(ps, lr=3e-3),
           "adamw": lambda ps: optim.AdamW(ps, lr=3e-3, weight_decay=0.01)}[kind](
        model.parameters())
    history = fit(model, F.cross_entropy, opt, train, epochs=2, batch_size=8, test_data=test,
                  backend=backend, progress=False, metrics=datasets.score, device=where)
    return model, history, opt


CASES = [(m, k, "eager") for m in ("mlp", "cnn", "transformer") for k in ("sgd", "adam", "adamw")]
CASES += [(m, "adam", "compiled") for m in ("mlp", "cnn", "transformer")]


@pytest.mark.parametrize("name, kind, backend", CASES)
def test_fit_on_the_device_matches_the_cpu(name: str, kind: str, backend: str) -> None:
    config, train, test = _data(name)
    cpu_model, cpu_history, _ = _train(config, train, test, kind, backend, None)
    with device() as xp:
        log = transfers(xp)
        model, history, opt = _train(config, train, test, kind, backend, "cuda")
        shapes = Counter(p.shape for p in model.parameters())
        uploads = Counter(log.upload_shapes)
        assert all(p.device == "cuda" for p in model.parameters())
        assert all(type(v) is StrictArray for s in opt.state for k, v in s.items()
                   if k != "step")
    steps = 2 * -(-len(train) // 8)
    assert steps >= 6
    # Each parameter was uploaded once (not once per step); the optimiser state was made there.
    for shape, count in shapes.items():
        assert uploads[shape] == count, (shape, uploads[shape], count)
    # Batches: inputs and labels once per step (the last batch of 20 or 30 is smaller).
    assert sum(uploads.values()) >= 2 * steps
    for a, b in zip(host_values(model), host_values(cpu_model), strict=True):
        assert_close(a, b)
    assert len(history) == len(cpu_history) == 2
    for r, c in zip(history, cpu_history, strict=True):
        assert_close(r.train_loss, c.train_loss)
        assert r.test_loss is not None and c.test_loss is not None
        assert_close(r.test_loss, c.test_loss)
        assert r.test_accuracy == c.test_accuracy
        assert r.extra == c.extra


def test_fit_on_the_device_downloads_one_loss_per_step() -> None:
    config, train, _ = _data("mlp")
    with device() as xp:
        model = models.build(config)
        model.to("cuda")
        opt = optim.SGD(model.parameters(), lr=0.1)
        log = transfers(xp)
        before = (log.uploads, log.downloads)
        fit(model, F.cross_entropy, opt, train, epochs=1, batch_size=4, progress=False)
        # 5 steps: one 0-d loss each, plus one readback of the parameters for the
        # last-finite-state snapshot at the start
        assert log.downloads - before[1] == 5 + len(model.parameters())
        # inputs and labels of each batch; the parameters are there already
        assert log.uploads - before[0] == 2 * 5


def test_divergence_on_the_device_stops_as_on_the_cpu() -> None:
    lr = 1e30
    config, train, _ = _data("mlp")

    def diverge(where: str) -> tuple[str, list[np.ndarray], list[str]]:
        model = models.build(config)
        opt = optim.SGD(model.parameters(), lr=lr)
        with pytest.raises(TrainingDiverged) as info:
            fit(model, F.cross_entropy, opt, train, epochs=2, batch_size=4, progress=False,
                device=where)
        return str(info.value), host_values(model), [p.device for p in model.parameters()]

    cpu_message, cpu_values, _ = diverge("cpu")
    with device():
        message, values, where = diverge("cuda")
    assert message == cpu_message
    assert set(where) == {"cuda"}
    for a, b in zip(values, cpu_values, strict=True):
        assert np.array_equal(a, b)


def test_check_finite_on_the_device_matches_the_cpu() -> None:
    config, train, test = _data("mlp")
    cpu = models.build(config)
    fit(cpu, F.cross_entropy, optim.Adam(cpu.parameters(), lr=1e-3), train, epochs=1,
        batch_size=8, progress=False, check_finite=True)
    with device():
        dev = models.build(config)
        fit(dev, F.cross_entropy, optim.Adam(dev.parameters(), lr=1e-3), train, epochs=1,
            batch_size=8, progress=False, check_finite=True, device="cuda")
        for a, b in zip(host_values(dev), host_values(cpu), strict=True):
            assert np.array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoint_saved_on_the_device_loads_on_the_cpu_and_back(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    config, train, _ = _data("mlp")
    path = tmp_path / "dev.safetensors"
    with device():
        model = models.build(config)
        opt = optim.Adam(model.parameters(), lr=1e-2)
        fit(model, F.cross_entropy, opt, train, epochs=1, batch_size=8, progress=False,
            device="cuda")
        checkpoint.save(path, {"model": model, "optimizer": opt})
        saved_params, saved_state = host_values(model), opt.state_dict()
    # on the CPU
    cpu = models.build({**config, "seed": 9})
    cpu_opt = optim.Adam(cpu.parameters(), lr=1e-2)
    checkpoint.load(path, {"model": cpu, "optimizer": cpu_opt})
    assert all(p.device == "cpu" for p in cpu.parameters())
    for a, b in zip(host_values(cpu), saved_params, strict=True):
        assert np.array_equal(a, b)
    assert all(np.array_equal(v, saved_state[k]) for k, v in cpu_opt.state_dict().items())
    # and back onto the device: the parameters and the optimiser state stay there
    back = tmp_path / "cpu.safetensors"
    checkpoint.save(back, {"model": cpu, "optimizer": cpu_opt})
    with device() as xp:
        dev = models.build({**config, "seed": 5}).to("cuda")
        dev_opt = optim.Adam(dev.parameters(), lr=1e-2)
        uploads = transfers(xp).uploads
        checkpoint.load(back, {"model": dev, "optimizer": dev_opt})
        assert transfers(xp).uploads > uploads
        assert all(p.device == "cuda" for p in dev.parameters())
        assert all(type(v) is StrictArray for s in dev_opt.state for k, v in s.items()
                   if k != "step")
        for a, b in zip(host_values(dev), saved_params, strict=True):
            assert np.array_equal(a, b)
        # one more step on both gives the same parameters
        x, y = train.inputs[:8], train.targets[:8]
        fit(dev, F.cross_entropy, dev_opt, Dataset(x, y), epochs=1, batch_size=8,
            shuffle=False, progress=False)
        fit(cpu, F.cross_entropy, cpu_opt, Dataset(x, y), epochs=1, batch_size=8,
            shuffle=False, progress=False)
        for a, b in zip(host_values(dev), host_values(cpu), strict=True):
            assert np.array_equal(a, b)
        state = checkpoint.load(back, map_location="cuda")
        assert all(type(v) is StrictArray for v in state["model"].values())


# ---------------------------------------------------------------------------------------------
# nn.Module.to, plain device arrays


def test_module_to_moves_parameters_once_and_back() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    expected = model(x)
    with device() as xp:
        log = transfers(xp)
        assert model.cuda() is model and model.device == "cuda"
        assert log.uploads == 4
        model.to("cuda")
        assert log.uploads == 4  # already there: nothing moves
        out = model(to_device(x, xp))  # a plain device array runs on the device
        assert type(out) is StrictArray
        assert np.array_equal(xp.asnumpy(out), expected)
        with pytest.raises(DeviceError, match="move the module"):
            model(x)  # host input, device parameters: refused, not copied
        model.cpu()
        assert model.device == "cpu" and log.downloads >= 4
        assert np.array_equal(model(x), expected)
    with pytest.raises(DeviceError):
        model.to("tpu")


# ---------------------------------------------------------------------------------------------
# distributed: host only


def test_data_parallel_refuses_device_parameters() -> None:
    from torchlean.training.distributed import Communicator, DataParallel

    config, train, _ = _data("mlp")
    with device():
        model = models.build(config).to("cuda")
        opt = optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(DeviceError, match="runs on the host"):
            DataParallel(model.parameters(), opt, Communicator())
        with pytest.raises(DeviceError, match="runs on the host"):
            fit(model, F.cross_entropy, opt, train, epochs=1, distributed=True, device="cuda",
                progress=False)


# ---------------------------------------------------------------------------------------------
# torchlean train --device cuda


@pytest.mark.parametrize("name", models.NAMES)
def test_cli_train_on_the_device_matches_the_cpu(name: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # One epoch of a few large batches of the default model on its default dataset (the adder
    # task generated with 600 instead of 10,000 sums) keeps it fast.
    monkeypatch.setitem(datasets._LOADERS, "adder", functools.partial(datasets.adder, size=600))
    args = ["train", "--model", name, "--epochs", "1", "--batch-size", "256"]
    cpu_json, dev_json = tmp_path / "cpu.json", tmp_path / "dev.json"
    assert cli.main([*args, "--json", str(cpu_json)]) == 0
    with device():
        assert cli.main([*args, "--device", "cuda", "--json", str(dev_json)]) == 0
    out = capsys.readouterr().out
    assert "on cuda" in out
    cpu_report, dev_report = json.loads(cpu_json.read_text()), json.loads(dev_json.read_text())
    assert dev_report["settings"]["device"] == "cuda"
    for key in ("train_loss", "test_loss", "test_accuracy"):
        assert_close(dev_report["final"][key], cpu_report["final"][key])


def test_cli_refuses_cuda_with_distributed(capsys: pytest.CaptureFixture[str]) -> None:
    with device():
        assert cli.main(["train", "--device", "cuda", "--distributed"]) == 2
    assert "--distributed" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# nn.functional and losses on plain device arrays


def test_nn_functional_on_plain_device_arrays_matches_the_cpu() -> None:
    import torchlean.nn.functional as TF

    rng = np.random.default_rng(5)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    w = rng.normal(size=(3, 4)).astype(np.float32)
    labels = np.array([0, 2, 1, -100, 2, 0])
    table = rng.normal(size=(5, 4)).astype(np.float32)
    ids = np.array([[0, 4], [3, 1]])
    image = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)

    def run(up: Any) -> dict[str, Any]:
        logits = TF.linear(up(x), up(w))  # no bias: a zero constant made next to the input
        return {
            "linear": logits,
            "ce": TF.cross_entropy(logits, up(labels), weight=np.array([1.0, 2.0, 0.5]),
                                   label_smoothing=0.1),
            "nll": TF.nll_loss(TF.log_softmax(logits, dim=1), up(labels)),
            "mse": nn.MSELoss()(logits, up(np.ones((6, 3), np.float32))),
            "one_hot": TF.one_hot(up(ids), num_classes=5),
            "embedding": TF.embedding(up(ids), up(table), padding_idx=1),
            "layer_norm": TF.layer_norm(up(x), 4),
            "pad": TF.pad(up(x), (1, 2), value=0.5),
            "pool": TF.adaptive_avg_pool2d(up(image), 2),
        }

    expected = run(lambda a: a)
    with device() as xp:
        got = run(lambda a: to_device(a, xp))
        for key, value in got.items():
            assert type(value) is StrictArray, key
            np.testing.assert_array_equal(xp.asnumpy(value), expected[key], err_msg=key)
