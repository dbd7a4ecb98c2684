"""Checkpoints: safetensors round trips, atomic writes, and loud failures on bad files."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from torchlean import checkpoint
from torchlean.checkpoint import load, read_arrays, read_metadata, save
from torchlean.core.errors import CheckpointError
from torchlean.engine.params import Param
from torchlean.optim import SGD, AdamW


class TinyModel:
    """Stands in for nn.Module: named Params and a state_dict of host arrays."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.w = Param(rng.normal(size=(3, 4)), "w", dtype="float64")
        self.b = Param(rng.normal(size=(3,)), "b", dtype="float64")
        self.steps_seen = np.zeros((), dtype=np.int64)  # a buffer, like BatchNorm's counters

    def named_parameters(self):
        return [("w", self.w), ("b", self.b)]

    def parameters(self):
        return [self.w, self.b]

    def state_dict(self):
        return {"w": self.w.value, "b": self.b.value, "steps_seen": self.steps_seen}

    def load_state_dict(self, state):
        self.w.assign(state["w"])
        self.b.assign(state["b"])
        self.steps_seen = np.array(state["steps_seen"])


X = np.random.default_rng(7).normal(size=(10, 4))
Y = np.random.default_rng(8).normal(size=(10, 3))


def train(model: TinyModel, opt, steps: int) -> None:
    for _ in range(steps):
        residual = X @ model.w.value.T + model.b.value - Y
        model.w.grad = residual.T @ X / len(X)
        model.b.grad = residual.sum(axis=0) / len(X)
        opt.step()
        model.steps_seen += 1


def test_list_of_params_and_dict_round_trip(tmp_path):
    params = [Param(np.arange(6.0).reshape(2, 3), "a"), Param(np.ones(4), "b", dtype="float64")]
    path = tmp_path / "params.safetensors"
    save(path, params)
    assert set(read_arrays(path)) == {"0", "1"}
    fresh = [Param(np.zeros((2, 3)), "a"), Param(np.zeros(4), "b", dtype="float64")]
    assert load(path, fresh) == {}
    for p, q in zip(params, fresh, strict=True):
        assert q.dtype == p.dtype and np.array_equal(q.value, p.value)

    arrays = {"x": np.arange(5, dtype=np.int32), "y": np.eye(2, dtype=np.float32),
              "z": np.asarray(3.5)}
    save(tmp_path / "arrays.safetensors", arrays)
    target = {"x": np.zeros(5, np.int32), "y": np.zeros((2, 2), np.float32),
              "z": np.asarray(0.0)}
    load(tmp_path / "arrays.safetensors", target)
    for key, value in arrays.items():
        assert target[key].dtype == value.dtype and np.array_equal(target[key], value)


def test_named_objects_metadata_and_bitwise_resume(tmp_path):
    model, path = TinyModel(0), tmp_path / "ckpt.safetensors"
    opt = AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    train(model, opt, 20)
    config = json.dumps({"in": 4, "out": 3})
    save(path, {"model": model, "optim": opt}, metadata={"config": config})
    train(model, opt, 10)  # the uninterrupted run

    keys = set(read_arrays(path))
    assert {"model.w", "model.b", "model.steps_seen", "optim.step", "optim.hyper.lr",
            "optim.state.0.exp_avg", "optim.state.1.exp_avg_sq"} <= keys
    assert json.loads(read_metadata(path)["config"]) == {"in": 4, "out": 3}

    model2 = TinyModel(1)
    opt2 = AdamW(model2.parameters(), lr=0.05, weight_decay=0.1)
    assert load(path, {"model": model2, "optim": opt2})["config"] == config
    assert int(model2.steps_seen) == 20
    train(model2, opt2, 10)
    assert np.array_equal(model2.w.value, model.w.value)
    assert np.array_equal(model2.b.value, model.b.value)
    for key, value in opt.state_dict().items():
        assert np.array_equal(opt2.state_dict()[key], value), key


def test_sgd_momentum_state_survives_a_file_round_trip(tmp_path):
    model = TinyModel(2)
    opt = SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    train(model, opt, 5)
    save(tmp_path / "o.safetensors", opt)
    opt2 = SGD([Param(np.zeros((3, 4)), dtype="float64"), Param(np.zeros(3), dtype="float64")],
               lr=0.1)  # different hyper-parameters and no momentum: key sets differ
    with pytest.raises(CheckpointError,
                       match="unexpected keys: state.0.momentum_buffer, state.1.momentum_buffer"):
        load(tmp_path / "o.safetensors", opt2)
    opt3 = SGD([Param(np.zeros((3, 4)), dtype="float64"), Param(np.zeros(3), dtype="float64")],
               lr=0.1, momentum=0.1)
    load(tmp_path / "o.safetensors", opt3)
    assert opt3.hyper == opt.hyper
    assert np.array_equal(opt3.state[0]["momentum_buffer"], opt.state[0]["momentum_buffer"])


def test_non_contiguous_arrays_are_saved_correctly(tmp_path):
    base = np.arange(24.0).reshape(4, 6)
    arrays = {"transposed": base.T, "strided": base[:, ::2], "reversed": base[::-1],
              "fortran": np.asfortranarray(base)}
    assert not any(a.flags.c_contiguous for a in arrays.values())
    save(tmp_path / "nc.safetensors", arrays)
    loaded = read_arrays(tmp_path / "nc.safetensors")
    for key, value in arrays.items():
        assert loaded[key].shape == value.shape and np.array_equal(loaded[key], value), key


def _only_file(directory):
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("fail_at", ["replace", "fsync", "write"])
def test_crash_during_save_leaves_previous_file(tmp_path, monkeypatch, fail_at):
    path = tmp_path / "model.safetensors"
    save(path, {"w": np.ones(3)})
    original_bytes = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("simulated crash")

    if fail_at == "write":
        real_fdopen = os.fdopen

        class HalfWriter:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, data):
                self.f.write(data[: len(data) // 2])
                raise OSError("simulated disk full")

        monkeypatch.setattr(os, "fdopen", lambda fd, mode: HalfWriter(real_fdopen(fd, mode)))
    else:
        monkeypatch.setattr(os, fail_at, boom)
    with pytest.raises(CheckpointError, match="previous file left intact"):
        save(path, {"w": np.full(3, 2.0), "extra": np.zeros(100)})
    monkeypatch.undo()
    assert _only_file(tmp_path) == ["model.safetensors"]  # no temporary file left behind
    assert path.read_bytes() == original_bytes
    target = {"w": np.zeros(3)}
    load(path, target)
    assert np.array_equal(target["w"], np.ones(3))


def test_interrupt_during_save_cleans_up_and_propagates(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"

    def interrupt(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        save(path, {"w": np.ones(2)})
    assert _only_file(tmp_path) == []


def test_saved_file_gets_normal_permissions(tmp_path):
    if os.name != "posix":
        pytest.skip("POSIX permissions")
    umask = os.umask(0o022)
    try:
        save(tmp_path / "p.safetensors", {"w": np.ones(2)})
    finally:
        os.umask(umask)
    assert (tmp_path / "p.safetensors").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("cut", [0, 4, 8, 20, -1, -8])
def test_truncated_files_raise(tmp_path, cut):
    good = tmp_path / "good.safetensors"
    save(good, {"w": np.arange(16.0), "b": np.ones(3)}, metadata={"k": "v"})
    data = good.read_bytes()
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    target = {"w": np.zeros(16), "b": np.zeros(3)}
    with pytest.raises(CheckpointError, match="bad.safetensors"):
        load(bad, target)
    assert not target["w"].any() and not target["b"].any()
    with pytest.raises(CheckpointError, match="bad.safetensors"):
        read_metadata(bad)


def test_garbage_and_missing_files_raise(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(np.random.default_rng(0).bytes(1000))
    with pytest.raises(CheckpointError, match="garbage.bin"):
        load(garbage, {"w": np.zeros(2)})
    # A plausible header length followed by invalid JSON.
    header = b"{not json"
    (tmp_path / "json.bin").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(CheckpointError, match="json.bin"):
        read_arrays(tmp_path / "json.bin")
    with pytest.raises(CheckpointError, match="no such file"):
        load(tmp_path / "absent.safetensors", {"w": np.zeros(2)})


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = ""


def test_loading_never_executes_code(tmp_path):
    global MARKER
    MARKER = str(tmp_path / "pwned")
    pickled = tmp_path / "evil.safetensors"
    pickled.write_bytes(pickle.dumps({"w": _Payload()}))
    with pytest.raises(CheckpointError):
        load(pickled, {"w": np.zeros(2)})
    import torch

    torch_file = tmp_path / "torch.pt"
    torch.save({"w": torch.zeros(2), "evil": _Payload()}, torch_file)
    assert not os.path.exists(MARKER)  # saving did not run the payload either
    with pytest.raises(CheckpointError):
        load(torch_file, {"w": np.zeros(2)})
    assert not os.path.exists(MARKER)


def test_mismatches_are_all_reported_and_nothing_changes(tmp_path):
    path = tmp_path / "m.safetensors"
    save(path, {"model": {"w": np.ones((2, 3)), "b": np.ones(3, dtype=np.float32),
                          "extra": np.ones(1)}})
    model = TinyModel(0)
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load(path, {"model": model})
    msg = str(info.value)
    assert "m.safetensors" in msg
    assert "missing keys: model.steps_seen" in msg
    assert "unexpected keys: model.extra" in msg
    assert "model.w: shape mismatch: expected (3, 4), found (2, 3)" in msg
    assert "model.b: dtype mismatch: expected float64, found float32" in msg
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_failed_load_state_dict_rolls_back_earlier_targets(tmp_path):
    class Picky(TinyModel):
        def load_state_dict(self, state):
            self.w.assign(state["w"])  # changes something, then fails
            raise RuntimeError("refusing")

    good, picky = TinyModel(0), Picky(1)
    path = tmp_path / "two.safetensors"
    save(path, {"a": TinyModel(5), "b": TinyModel(6)})
    before = [np.array(m.w.value) for m in (good, picky)]
    with pytest.raises(CheckpointError, match="target restored"):
        load(path, {"a": good, "b": picky})
    assert np.array_equal(good.w.value, before[0])
    assert np.array_equal(picky.w.value, before[1])


def test_bad_inputs_to_save(tmp_path):
    with pytest.raises(CheckpointError, match="metadata must be a dict of str to str"):
        save(tmp_path / "x.safetensors", {"w": np.ones(1)}, metadata={"n": 3})
    with pytest.raises(CheckpointError, match="two entries flatten to the key 'a.b'"):
        save(tmp_path / "x.safetensors", {"a.b": np.ones(1), "a": {"b": np.ones(1)}})
    save(tmp_path / "bare.safetensors", Param(np.ones(2)))  # torch.save(tensor): one array
    with pytest.raises(CheckpointError, match="has no name"):  # ... but no name to load into
        load(tmp_path / "bare.safetensors", Param(np.ones(2)))
    (tmp_path / "bare.safetensors").unlink()
    with pytest.raises(CheckpointError, match="cannot save or load a set"):
        save(tmp_path / "x.safetensors", {"w": {"text"}})
    nested: list[object] = []
    nested.append(nested)
    with pytest.raises(CheckpointError, match="nested more than"):
        save(tmp_path / "x.safetensors", {"w": nested})
    with pytest.raises(CheckpointError, match="cannot create a file"):
        save(tmp_path / "no_dir" / "x.safetensors", {"w": np.ones(1)})
    assert _only_file(tmp_path) == []
    save(tmp_path / "t.safetensors", (np.ones(2),))
    with pytest.raises(CheckpointError, match="tuple"):
        load(tmp_path / "t.safetensors", (np.zeros(2),))


def test_missing_safetensors_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(CheckpointError, match="pip install safetensors"):
        save(tmp_path / "x.safetensors", {"w": np.ones(1)})
    with pytest.raises(CheckpointError, match="pip install safetensors"):
        read_metadata(tmp_path / "x.safetensors")


def test_importing_checkpoint_does_not_import_safetensors():
    code = ("import sys, torchlean.checkpoint, torchlean.optim; "
            "sys.exit('safetensors' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    assert checkpoint.describe_mismatches({"a": np.ones(2)}, {"a": np.ones(2)}) == []
