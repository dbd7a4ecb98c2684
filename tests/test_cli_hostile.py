"""The command line refuses bad input at once, in one line (issue 25, item 8).

One path for two outputs (or an input that is also an output), every numeric option outside its
range, empty paths: exit status 2 and one message naming the option, before any work. Argparse
errors are one line ending in a pointer to ``--help`` (no usage block). Never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlean.cli import main


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "iris.safetensors"
    assert main(["train", "--dataset", "iris", "--epochs", "1", "--save", str(path)]) == 0
    return path


@pytest.mark.parametrize("first,second", [("--save", "--json"), ("--save", "--plot"),
                                          ("--json", "--plot")])
def test_train_refuses_one_path_for_two_outputs(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path, first: str,
                                                second: str) -> None:
    out = str(tmp_path / "x")
    code, err = _run(capsys, ["train", "--dataset", "iris", "--epochs", "1", first, out,
                              second, out])
    assert code == 2
    assert "same file" in err and first in err and second in err, err
    assert not (tmp_path / "x").exists()  # refused before any work


def test_train_refuses_two_spellings_of_one_path(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    code, err = _run(capsys, ["train", "--dataset", "iris", "--epochs", "1",
                              "--save", str(tmp_path / "x"), "--json",
                              str(tmp_path / "." / "x")])
    assert code == 2 and "same file" in err, err


def test_export_refuses_writing_over_its_input(capsys: pytest.CaptureFixture[str],
                                               trained: Path) -> None:
    before = trained.read_bytes()
    code, err = _run(capsys, ["export", "--checkpoint", str(trained), "--out", str(trained)])
    assert code == 2 and "same file" in err, err
    assert trained.read_bytes() == before


def test_eval_refuses_writing_over_its_checkpoint(capsys: pytest.CaptureFixture[str],
                                                  trained: Path) -> None:
    code, err = _run(capsys, ["eval", "--checkpoint", str(trained), "--json", str(trained)])
    assert code == 2 and "same file" in err, err


@pytest.mark.parametrize("argv,option", [
    (["train", "--save", ""], "--save"),
    (["train", "--json", " "], "--json"),
    (["train", "--threads", "1000000"], "--threads"),
    (["train", "--threads", "0"], "--threads"),
    (["train", "--epochs", "0"], "--epochs"),
    (["train", "--epochs", "10000000000"], "--epochs"),
    (["train", "--batch-size", "-3"], "--batch-size"),
    (["train", "--lr", "nan"], "--lr"),
    (["train", "--lr", "1e309"], "--lr"),
    (["train", "--lr", "-0.1"], "--lr"),
    (["train", "--seed", "-1"], "--seed"),
    (["train", "--seed", "1e3"], "--seed"),
    (["train", "--seed", str(10 ** 30)], "--seed"),
    (["graph", "--seed", str(1 << 63)], "--seed"),
    (["verify", "--seed", "-1"], "--seed"),
    (["verify", "--batch-size", "0"], "--batch-size"),
    (["bench", "--rounds", "0"], "--rounds"),
    (["bench", "--threads", "1000000"], "--threads"),
    (["train", "--check-every", "-1"], "--check-every"),
    (["train", "--collective-timeout", "0"], "--collective-timeout"),
    (["train", "--collective-timeout", "inf"], "--collective-timeout"),
    (["eval", "--batch-size", "0"], "--batch-size"),
    (["graph", "--batch-size", "0"], "--batch-size"),
    (["export", "--checkpoint", "c", "--out", "o", "--opset", "99999"], "--opset"),
    (["export", "--checkpoint", "c", "--out", "o", "--opset", "16"], "--opset"),
    (["export", "--checkpoint", "c", "--out", "o", "--batch-size", "0"], "--batch-size"),
    (["certify", "--eps", "1e308"], "--eps"),
    (["certify", "--eps", "nan"], "--eps"),
    (["certify", "--eps", "-0.1"], "--eps"),
    (["certify", "--limit", "0"], "--limit"),
    (["certify", "--pgd-steps", "0"], "--pgd-steps"),
    (["certify", "--alpha-steps", "-1"], "--alpha-steps"),
    (["certify", "--threads", "1000000"], "--threads"),
])
def test_numeric_options_are_range_checked_in_one_line(capsys: pytest.CaptureFixture[str],
                                                       argv: list[str], option: str) -> None:
    code, err = _run(capsys, argv)
    assert code == 2
    line = _one_line(err)
    assert option in line, line
    assert "usage:" not in err


def test_argparse_errors_are_one_line_pointing_to_help(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    for argv in (["train", "--no-such-option"], ["frobnicate"], ["train", "--model", "x"], []):
        code, err = _run(capsys, argv)
        assert code == 2, argv
        line = _one_line(err)
        assert "--help" in line and "usage:" not in line, line
