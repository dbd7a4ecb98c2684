"""Checkpoints that survive anything (issue 15, item 5): a save killed mid-write leaves a temporary
file the next save removes; saving through a symlink updates its target; permission and missing
files are named; a SHA-256 of the data section is verified on load."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import torchlean as tl
from torchlean.core import safe_files
from torchlean.core.errors import CheckpointError


def _model(seed: int = 0) -> tl.nn.Module:
    tl.nn.manual_seed(seed)
    return tl.nn.Sequential(tl.nn.Linear(4, 3), tl.nn.ReLU(), tl.nn.Linear(3, 2))


def _temps(path: Path) -> list[str]:
    return glob.glob(str(path.parent / f".{path.name}.*.tmp"))


def test_a_save_killed_mid_write_leaves_a_temp_file_the_next_save_removes(
        tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    # The child writes its temporary file, then stops just before the rename and is killed.
    child = textwrap.dedent(f"""
        import os, sys, time
        import torchlean as tl
        def stuck(src, dst):
            print("written", flush=True)
            time.sleep(600)
        os.replace = stuck
        tl.nn.manual_seed(0)
        tl.save(tl.nn.Linear(4, 3), {str(path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    orphans = _temps(path)
    assert len(orphans) == 1 and f".{proc.pid}." in orphans[0]
    # A temporary file of a running process (this one) is left alone.
    mine = tmp_path / f".model.safetensors.{os.getpid()}.abcd1234.tmp"
    mine.write_bytes(b"in progress")
    model = _model()
    tl.save(model, path)
    assert _temps(path) == [str(mine)]
    restored = _model(seed=1)
    tl.load(path, restored)
    for (k, a), (_, b) in zip(model.state_dict().items(), restored.state_dict().items(),
                              strict=True):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_a_load_also_removes_stale_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    tl.save(_model(), path)
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(proc.stdout)  # a process that has exited
    stale = tmp_path / f".m.safetensors.{dead}.zz99.tmp"
    stale.write_bytes(b"partial")
    tl.load(path)
    assert not stale.exists()


def test_saving_through_a_symlink_updates_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real" / "weights.safetensors"
    target.parent.mkdir()
    tl.save(_model(0), target)
    link = tmp_path / "latest.safetensors"
    link.symlink_to(target)
    model = _model(5)
    tl.save(model, link)
    assert link.is_symlink() and os.path.realpath(link) == str(target)
    loaded = tl.load(target)
    np.testing.assert_array_equal(loaded["0.weight"], model.state_dict()["0.weight"])
    assert not _temps(link) and not _temps(target)


def test_missing_directory_and_unreadable_files_are_named(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    with pytest.raises(CheckpointError, match=r"missing\.safetensors: no such file"):
        tl.load(tmp_path / "missing.safetensors")
    with pytest.raises(CheckpointError, match="is a directory"):
        tl.load(tmp_path)
    path = tmp_path / "m.safetensors"
    tl.save(_model(), path)

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    # Simulated (the suite may run as root, which ignores file modes).
    monkeypatch.setattr(safe_files.os, "open", denied)
    with pytest.raises(CheckpointError, match=r"m\.safetensors: permission denied"):
        tl.load(path)


def test_flipped_bytes_in_the_data_section_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    model = _model()
    tl.save(model, path)
    assert safe_files.CHECKSUM_KEY not in tl.read_metadata(path)  # kept out of the metadata
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # inside the last array's bytes
    path.write_bytes(bytes(data))
    target = _model(seed=3)
    before = {k: np.array(v, copy=True) for k, v in target.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"m\.safetensors: does not match its SHA-256"):
        tl.load(path, target)
    for k, v in target.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(CheckpointError, match="SHA-256"):
        tl.load(path)


def test_files_without_a_checksum_load_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    weights = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    safetensors.numpy.save_file(weights, str(path))  # another tool: no checksum
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = tl.load(path)
    np.testing.assert_array_equal(loaded["w"], weights["w"])
    assert any("without an integrity check" in str(w.message) for w in caught)


def test_non_path_arguments_are_checkpoint_errors() -> None:
    model = _model()
    for call in (lambda: tl.load(None, model), lambda: tl.load(3),
                 lambda: tl.save(model, None), lambda: tl.save(None, model)):
        with pytest.raises(CheckpointError):
            call()
