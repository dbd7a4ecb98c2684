"""``torchlean train / eval / graph``: exit codes, outputs, checkpoints, and bad-input messages.

Trainings here are one or two epochs (seconds). The accuracy targets of the default trainings
are measured by ``benchmarks/accuracy.py``, not here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors  # noqa: F401  (a test dependency: missing means failing, not skipping)
import sklearn  # noqa: F401

import torchlean as tl
from torchlean import checkpoint, cli
from torchlean.zoo import models
from torchlean.zoo.datasets import DatasetBundle, adder, digits

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One short MLP-on-digits run with every output written."""
    root = tmp_path_factory.mktemp("trained")
    paths = {k: str(root / name) for k, name in
             (("save", "mlp.safetensors"), ("json", "metrics.json"), ("plot", "curves.png"))}
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["train", "--epochs", "2", "--seed", "3", "--save", paths["save"],
                         "--json", paths["json"], "--plot", paths["plot"]])
    return {"code": code, "stdout": out.getvalue(), **paths}


# ---------------------------------------------------------------------------------------------
# train


def test_train_exits_zero_and_prints_one_line_per_epoch(trained: dict[str, Any]) -> None:
    assert trained["code"] == 0
    lines = trained["stdout"].splitlines()
    epoch_lines = [line for line in lines if line.startswith("epoch ")]
    assert [line.split()[1] for line in epoch_lines] == ["1/2", "2/2"]
    for line in epoch_lines:
        for part in ("train loss", "test loss", "test acc", "ex/s"):
            assert part in line
    assert lines[0].startswith("training mlp") and "on digits" in lines[0]


def test_metrics_json_is_well_formed(trained: dict[str, Any]) -> None:
    with open(trained["json"]) as f:
        report = json.load(f)
    assert report["model"] == "mlp" and report["dataset"] == "digits"
    assert report["interrupted"] is False and report["epochs_run"] == 2
    assert report["settings"]["epochs"] == 2 and report["settings"]["seed"] == 3
    assert report["config"] == models.config_for("mlp", digits(seed=3), seed=3)
    history = report["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    for h in history:
        assert np.isfinite(h["train_loss"]) and h["train_loss"] > 0
        assert np.isfinite(h["test_loss"]) and h["test_loss"] > 0
        assert 0.0 <= h["test_accuracy"] <= 1.0
        assert h["seconds"] >= 0 and h["examples_per_second"] >= 0  # exact values: test_train
    assert history[1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["test_accuracy"] > 0.5  # two epochs learn something
    assert report["final"] == history[-1]


def test_plot_is_a_png(trained: dict[str, Any]) -> None:
    with open(trained["plot"], "rb") as f:
        assert f.read(8) == PNG_MAGIC
    assert os.path.getsize(trained["plot"]) > 5000


def test_checkpoint_holds_config_and_optimizer_state(trained: dict[str, Any]) -> None:
    meta = checkpoint.read_metadata(trained["save"])
    config = json.loads(meta["config"])
    assert config["model"] == "mlp" and config["hidden"] == [256, 128]
    arrays = checkpoint.read_arrays(trained["save"])
    assert "model.0.weight" in arrays and arrays["model.0.weight"].shape == (256, 64)
    assert int(arrays["optimizer.step"]) == 2 * -(-1438 // 32)  # two epochs of batches
    # It loads back with the public API into a rebuilt model and a fresh optimiser.
    model = models.build(config)
    opt = tl.optim.Adam(model.parameters(), lr=1.0)
    tl.load(trained["save"], {"model": model, "optimizer": opt})
    np.testing.assert_array_equal(model.state_dict()["4.bias"], arrays["model.4.bias"])
    assert json.loads(meta["settings"])["schedule"] == "cosine"
    assert opt.lr == pytest.approx(0.0, abs=1e-12)  # the saved state: cosine decay ends at 0


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_eval_reloads_to_the_same_accuracy(trained: dict[str, Any], backend: str,
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out_json = str(tmp_path / "eval.json")
    code, out, err = run(["eval", "--checkpoint", trained["save"], "--backend", backend,
                          "--json", out_json], capsys)
    assert code == 0, err
    with open(trained["json"]) as f:
        final = json.load(f)["final"]
    with open(out_json) as f:
        result = json.load(f)
    assert result["examples"] == 359 and result["seed"] == 3
    assert result["accuracy"] == final["test_accuracy"]
    assert result["loss"] == pytest.approx(final["test_loss"], rel=1e-5)
    assert f"test acc {final['test_accuracy']:.4f}" in out


def test_runs_are_reproducible_and_compiled_matches_eager(tmp_path: Path) -> None:
    def history(*extra: str) -> list[dict[str, Any]]:
        path = str(tmp_path / f"h{len(list(tmp_path.iterdir()))}.json")
        assert cli.main(["train", "--dataset", "iris", "--epochs", "3", "--json", path,
                         *extra]) == 0
        with open(path) as f:
            return json.load(f)["history"]  # type: ignore[no-any-return]

    first, second, compiled = history(), history(), history("--backend", "compiled")
    keys = ("train_loss", "test_loss", "test_accuracy")
    assert [[h[k] for k in keys] for h in first] == [[h[k] for k in keys] for h in second]
    for a, c in zip(first, compiled, strict=True):
        assert c["test_accuracy"] == a["test_accuracy"]
        assert c["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)


@pytest.mark.parametrize("argv", [
    ["--model", "cnn", "--epochs", "1"],
    ["--model", "transformer", "--epochs", "1", "--batch-size", "128"],
    ["--dataset", "iris", "--epochs", "1", "--optimizer", "sgd", "--lr", "0.1"],
])
def test_other_models_train(argv: list[str], tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "m.json")
    code, out, err = run(["train", *argv, "--json", path], capsys)
    assert code == 0, err
    with open(path) as f:
        final = json.load(f)["final"]
    assert 0.0 <= final["test_accuracy"] <= 1.0 and np.isfinite(final["train_loss"])
    if "transformer" in argv:
        assert "exact match" in out and 0.0 <= final["token_accuracy"] <= 1.0


def test_python_dash_m_runs_one_epoch(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "torchlean", "train", "--epochs", "1"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "epoch 1/1" in proc.stdout and "test accuracy" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_ctrl_c_stops_cleanly_and_saves(tmp_path: Path) -> None:
    save, metrics = str(tmp_path / "stopped.safetensors"), str(tmp_path / "stopped.json")
    proc = subprocess.Popen([sys.executable, "-m", "torchlean", "train", "--epochs", "100000",
                             "--save", save, "--json", metrics],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # wait until training is under way
            if line.startswith("epoch "):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)  # a hang guard, not a budget
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupt" in err
    assert "saved checkpoint" in out
    with open(metrics) as f:
        report = json.load(f)
    assert report["interrupted"] is True and len(report["history"]) < 100000
    assert json.loads(checkpoint.read_metadata(save)["interrupted"]) is True
    assert cli.main(["eval", "--checkpoint", save]) == 0


# ---------------------------------------------------------------------------------------------
# graph


def test_graph_prints_the_ir_and_writes_dot(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    dot = str(tmp_path / "mlp.dot")
    code, out, err = run(["graph", "--model", "mlp", "--batch-size", "4", "--dot", dot], capsys)
    assert code == 0, err
    assert "graph(%0" in out and "= input[0] : (4, 64) float32" in out
    assert "linear(" in out and "log_softmax(" in out and "return %" in out
    with open(dot) as f:
        text = f.read()
    assert text.startswith("digraph torchlean {") and "->" in text and text.rstrip().endswith("}")


def test_graph_of_the_transformer_has_attention(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["graph", "--model", "transformer"], capsys)
    assert code == 0
    assert out.count("multi_head_attention(") == 3 and "layer_norm(" in out


# ---------------------------------------------------------------------------------------------
# bad input: one message on stderr, exit status 2, no traceback


def _bad(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run(argv, capsys)
    assert code == 2, (out, err)
    assert "Traceback" not in err and "epoch " not in out
    return err


@pytest.mark.parametrize("argv, names", [
    (["train", "--model", "resnet"], ["mlp", "cnn", "transformer"]),
    (["train", "--dataset", "mnist"], ["digits", "iris", "adder"]),
    (["graph", "--model", "rnn"], ["mlp", "cnn", "transformer"]),
])
def test_unknown_names_list_the_valid_ones(argv: list[str], names: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(argv, capsys)
    assert "invalid choice" in err
    for name in names:
        assert name in err


@pytest.mark.parametrize("model, dataset, hint", [
    ("transformer", "digits", "use --model mlp or cnn"),
    ("cnn", "iris", "use --model mlp"),
    ("mlp", "adder", "use --model transformer"),
])
def test_nonsensical_combinations_are_rejected(model: str, dataset: str, hint: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(["train", "--model", model, "--dataset", dataset], capsys)
    assert f"model {model!r} cannot be trained on dataset {dataset!r}" in err and hint in err


def test_cuda_without_cupy_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(["train", "--device", "cuda"], capsys)
    assert "device 'cuda'" in err
    try:
        import cupy  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        assert "CuPy is not installed" in err


@pytest.mark.parametrize("option", ["--save", "--json", "--plot"])
def test_unwritable_output_fails_before_training(option: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "no-such-dir" / "out")
    err = _bad(["train", option, missing], capsys)
    assert f"{option} {missing}: directory" in err and "does not exist" in err
    err = _bad(["train", option, str(tmp_path)], capsys)
    assert "is a directory" in err
    assert list(tmp_path.iterdir()) == []  # no probe or partial file left behind


@pytest.mark.parametrize("option, module", [("--plot", "matplotlib"),
                                             ("--save", "safetensors")])
def test_missing_optional_library_fails_before_training(option: str, module: str,
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    err = _bad(["train", option, str(tmp_path / "out")], capsys)
    assert f"{option}: {module} is not installed" in err


@pytest.mark.parametrize("argv", [["--epochs", "0"], ["--lr", "-1"], ["--batch-size", "x"]])
def test_bad_numbers_are_usage_errors(argv: list[str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(["train", *argv], capsys)
    assert "expected" in err and argv[0] in err
    # One line: the reason and where to read more, not argparse's usage block.
    assert err.strip().count("\n") == 0 and "see 'torchlean train --help'" in err


def _rewrite(src: str, dst: str, config_change: dict[str, Any]) -> None:
    """Copy a checkpoint with its metadata's model config changed."""
    meta = checkpoint.read_metadata(src)
    config = json.loads(meta["config"])
    config.update(config_change)
    meta["config"] = json.dumps(config)
    checkpoint.save(dst, checkpoint.read_arrays(src), metadata=meta)


def test_checkpoint_that_does_not_fit_names_the_tensors(trained: dict[str, Any], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    wrong = str(tmp_path / "wrong.safetensors")
    _rewrite(trained["save"], wrong, {"hidden": [32]})
    err = _bad(["eval", "--checkpoint", wrong], capsys)
    assert "does not fit the mlp" in err
    assert "0.weight: shape mismatch: expected (32, 64), found (256, 64)" in err
    assert "2.weight: shape mismatch: expected (10, 32), found (128, 256)" in err
    assert "unexpected keys: 4.bias, 4.weight" in err


def test_eval_rejects_other_files_and_datasets(trained: dict[str, Any], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    plain = str(tmp_path / "plain.safetensors")
    tl.save(plain, {"w": np.zeros(3, np.float32)})
    assert "not written by 'torchlean train --save'" in _bad(
        ["eval", "--checkpoint", plain], capsys)
    assert "no such file" in _bad(["eval", "--checkpoint", str(tmp_path / "nope")], capsys)
    err = _bad(["eval", "--checkpoint", trained["save"], "--dataset", "iris"], capsys)
    assert "in_features = 64, but dataset iris needs 4" in err
    err = _bad(["eval", "--checkpoint", trained["save"], "--dataset", "adder"], capsys)
    assert "cannot be trained on dataset 'adder'" in err
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a checkpoint")
    assert "not a valid safetensors file" in _bad(["eval", "--checkpoint", str(garbage)], capsys)


# ---------------------------------------------------------------------------------------------
# models


def _bundle(name: str) -> DatasetBundle:
    return adder(seed=0, size=100) if name == "adder" else digits(seed=0)


@pytest.mark.parametrize("name", models.NAMES)
def test_models_are_deterministic_from_the_config_seed(name: str) -> None:
    config = models.config_for(name, _bundle(models.DEFAULT_DATASET[name]), seed=5)
    assert json.loads(json.dumps(config)) == config  # it fits in checkpoint metadata
    a, b = models.build(config), models.build(config)
    c = models.build({**config, "seed": 6})
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(value, b.state_dict()[key])
    assert any(not np.array_equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())


def test_transformer_is_causal() -> None:
    data = adder(seed=0, size=100)
    model = models.build(models.config_for("transformer", data))
    model.eval()
    tokens = data.train.inputs[:3].astype(np.float32)
    changed = tokens.copy()
    changed[:, 5:] = (changed[:, 5:] + 1) % 10
    before, after = np.asarray(model(tokens)), np.asarray(model(changed))
    assert before.shape == (3, 8, 12)
    np.testing.assert_allclose(before[:, :5], after[:, :5], rtol=1e-5, atol=1e-6)
    assert not np.allclose(before[:, 5:], after[:, 5:])


def test_build_rejects_unknown_or_incomplete_configs() -> None:
    with pytest.raises(tl.TorchLeanError, match="unknown model 'lstm'; valid models: mlp, cnn"):
        models.build({"model": "lstm"})
    with pytest.raises(tl.TorchLeanError, match="lacks the entry 'hidden'"):
        models.build({"model": "mlp", "in_features": 4, "num_classes": 3})


def test_ops_lists_every_primitive(capsys: pytest.CaptureFixture[str]) -> None:
    from torchlean.core.registry import REGISTRY

    assert cli.main(["ops"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    names = [row.split("`")[1] for row in rows]
    # One row per primitive: none missing, none twice, in name order.
    assert names == sorted(REGISTRY)
    # Rows whose content is known without the table code: signature, derivative kind, spec.
    for row in ("| `relu` | `relu(x)` | vjp + jvp |",
                "| `scale` | `scale(x, c)` | linear |",
                "| `conv2d` | `conv2d(w, b, x, stride, padding)` | vjp + jvp |",
                "| `max_pool2d_pad` | `max_pool2d_pad(x, kernel_size, stride, padding)` | vjp + "
                "jvp |",
                "| `rand_uniform` | `rand_uniform(shape, seed, counter, dtype)` | zero "
                "derivative |"):
        assert row in out, row
    relu = next(row for row in rows if row.startswith("| `relu`"))
    assert relu.endswith("| `torchlean.spec.elementwise` |")


def test_docs_ops_table_is_current() -> None:
    from torchlean.spec.table import markdown_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "OPS.md").read_text()
    assert doc.rstrip().endswith(markdown_table()), "regenerate: torchlean ops > docs/OPS.md"
