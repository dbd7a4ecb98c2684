"""The newcomer-friction list of the layered-package issue, one test each: one-line errors and
no tracebacks, honest messages, outputs with the user's umask, help for every option, progress
only on a terminal, a checkpoint read once per eval, and the renamed seed namespace."""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean import checkpoint, cli
from torchlean.core import safe_files
from torchlean.zoo import datasets, models


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A one-epoch digits MLP checkpoint, and the same model exported as ONNX."""
    pytest.importorskip("onnx")
    d = tmp_path_factory.mktemp("friction")
    ckpt, onnx_path = str(d / "mlp.safetensors"), str(d / "mlp.onnx")
    assert cli.main(["train", "--epochs", "1", "--save", ckpt]) == 0
    assert cli.main(["export", "--checkpoint", ckpt, "--out", onnx_path, "--batch-size", "8"]) == 0
    cnn = str(d / "cnn.onnx")
    data = datasets.load("digits", seed=0, layout="image")
    model = models.build(models.config_for("cnn", data))
    tl.onnx.export(model, cnn, [(4, 1, 8, 8)])
    return {"ckpt": ckpt, "onnx": onnx_path, "cnn_onnx": cnn}


@pytest.mark.parametrize("command", ["eval", "certify", "verify"])
def test_an_image_model_on_a_table_dataset_is_one_named_error(
        command: str, trained: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """Was: ``TypeError ... 'layout'`` with a traceback."""
    pytest.importorskip("sympy")
    code, _, err = run([command, "--onnx", trained["cnn_onnx"], "--dataset", "iris"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "takes images" in err and "iris" in err


def test_a_model_of_other_features_is_one_named_error(trained: dict[str, str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["eval", "--onnx", trained["onnx"], "--dataset", "iris"], capsys)
    assert code == 2 and "examples have shape (4,)" in err and "(8, 64)" in err


def test_bench_with_only_missing_frameworks_names_them(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """Was: a bare ``StopIteration``."""
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    code, _, err = run(["bench", "--frameworks", "jax", "--workloads", "W1", "--rounds", "1"],
                       capsys)
    assert code == 2 and "Traceback" not in err
    assert "none of the frameworks" in err and "jax" in err


def test_float64_data_into_a_float32_model_says_dtype_not_argument_order() -> None:
    model = tl.nn.Linear(3, 2)
    with pytest.raises(tl.DTypeError) as info:
        model(tl.tensor(np.ones((4, 3))))
    message = str(info.value)
    assert "dtypes differ" in message and "astype" in message
    assert "order" not in message  # the argument-order hint belongs to shape errors only
    assert isinstance(info.value, tl.ShapeError)  # still what older handlers catch


def test_a_swapped_argument_order_still_gets_the_hint() -> None:
    import torchlean.engine.ops_interface as F

    w, b, x = np.ones((2, 3)), np.ones(2), np.ones((5, 3))
    with pytest.raises(tl.ShapeError, match="seed's order linear"):
        F.linear(x, w, b)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_every_output_is_written_with_the_users_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        paths = {name: str(tmp_path / name) for name in ("m.safetensors", "m.json", "m.png",
                                                         "g.dot")}
        assert cli.main(["train", "--epochs", "1", "--save", paths["m.safetensors"], "--json",
                         paths["m.json"], "--plot", paths["m.png"]]) == 0
        assert cli.main(["graph", "--dot", paths["g.dot"]]) == 0
    finally:
        os.umask(old)
    assert {name: _mode(p) for name, p in paths.items()} == dict.fromkeys(paths, 0o644)


def test_one_path_for_two_outputs_is_refused_before_training(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    same = str(tmp_path / "x")
    code, out, err = run(["train", "--save", same, "--json", same], capsys)
    assert code == 2 and "the same file as --save" in err and "epoch" not in out
    assert not os.path.exists(same)


def _actions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [(f"{name} {a.option_strings or a.dest}", a) for _, a in _actions(sub)]
        else:
            out.append(("", action))
    return out


def test_every_option_of_every_command_has_help() -> None:
    missing = [where for where, action in _actions(cli.build_parser())
               if where and action.help is None and action.option_strings
               and "-h" not in action.option_strings]
    assert not missing, missing


def test_bench_help_explains_the_workloads_and_names_no_issue(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--help"]) == 0
    text = capsys.readouterr().out
    assert "issue" not in text.lower()
    for w in ("W1", "W2", "W3", "W4", "W5"):
        assert f"{w}:" in text


def test_argparse_errors_are_one_line_with_a_pointer_to_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["train", "--model", "nope"], capsys)
    assert code == 2
    assert err.strip().count("\n") == 0 and "usage:" not in err
    assert "see 'torchlean train --help'" in err


def test_the_nan_message_names_the_cli_option(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["train", "--epochs", "1", "--lr", "1e30", "--optimizer", "sgd"], capsys)
    assert code == 1
    assert "--check-finite names the op" in err and "fit(..." not in err


def test_eval_of_an_onnx_file_as_a_checkpoint_suggests_onnx(
        trained: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["eval", "--checkpoint", trained["onnx"]], capsys)
    assert code == 2 and f"use --onnx {trained['onnx']}" in err and "header" not in err


def test_eval_reads_and_checks_the_checkpoint_once(trained: dict[str, str],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[Any] = []
    original = safe_files.verify

    def counting(data: Any, path: Any) -> Any:
        calls.append(path)
        return original(data, path)

    monkeypatch.setattr(safe_files, "verify", counting)
    code, _, err = run(["eval", "--checkpoint", trained["ckpt"]], capsys)
    assert code == 0, err
    assert calls == [trained["ckpt"]]


def test_progress_bars_stay_out_of_logs(tmp_path: Path) -> None:
    """stderr to a file (not a terminal): the epoch lines, no bar redraws."""
    log = tmp_path / "err.log"
    with open(log, "w") as err:
        proc = subprocess.run([sys.executable, "-m", "torchlean", "train", "--epochs", "1"],
                              stdout=subprocess.PIPE, stderr=err, text=True, check=False)
    assert proc.returncode == 0
    assert "\r" not in log.read_text() and "it/s" not in log.read_text()


def test_a_library_bug_is_still_one_line_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from torchlean.cli import ops as ops_command

    def broken(args: Any) -> int:
        raise KeyError("planted")

    monkeypatch.setitem(cli._COMMANDS, "ops", (ops_command.add_parser, broken))
    code, _, err = run(["ops"], capsys)
    assert code == 2 and "internal error" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_the_old_seed_namespace_path_warns_and_is_the_same_module() -> None:
    import torchlean.engine.ops_interface as new

    sys.modules.pop("torchlean.functional", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torchlean.functional as old
    assert old is new
    assert any(issubclass(w.category, DeprecationWarning)
               and "torchlean.engine.ops_interface" in str(w.message) for w in caught)


def test_checkpoint_helpers_are_a_public_library_api(trained: dict[str, str]) -> None:
    from torchlean.zoo.trained import check_fits, load_data, load_trained, read_config

    config, settings = read_config(trained["ckpt"])
    model = load_trained(trained["ckpt"])
    assert model.model_config == config and model.train_settings == settings
    check_fits(config, load_data("mlp", "digits", 0), trained["ckpt"])
    with pytest.raises(tl.CheckpointError, match="needs"):
        check_fits(config, load_data("mlp", "iris", 0), trained["ckpt"])
    assert checkpoint.read_file(trained["ckpt"])[1]["format"] == "torchlean.train/1"
