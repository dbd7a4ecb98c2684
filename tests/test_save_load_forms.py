"""``tl.save`` / ``tl.load`` in PyTorch's order next to torchlean's, and ``torchlean eval`` of a
model saved with ``tl.save(model, path)``; ``torchlean --version``.

The seed forms (``save(path, obj)``, ``load(path, into)``) are covered by ``test_checkpoint.py``;
here: which argument is the path decides the order, ambiguous or wrong calls are refused by
name, a module records its class and config, and the CLI reads such a file.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import safetensors  # noqa: F401  (a test dependency: missing means failing, not skipping)

import torchlean as tl
from torchlean import checkpoint, cli, nn
from torchlean.core.errors import CheckpointError
from torchlean.zoo import models
from torchlean.zoo.trained import TRAIN_FORMAT, load_data


def small_model(seed: int = 0) -> nn.Module:
    nn.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))


def test_torch_order_round_trips_a_state_dict(tmp_path: Path) -> None:
    model, other = small_model(0), small_model(1)
    path = tmp_path / "m.safetensors"  # a PathLike
    tl.save(model.state_dict(), path)
    state = tl.load(path)
    assert isinstance(state, dict) and sorted(state) == sorted(model.state_dict())
    assert not np.array_equal(other.state_dict()["0.weight"], state["0.weight"])
    other.load_state_dict(state)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[key], value)
        assert other.state_dict()[key].dtype == value.dtype


def test_both_orders_write_the_same_file(tmp_path: Path) -> None:
    model = small_model(2)
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    tl.save(model, a)
    tl.save(b, model)
    # (not byte equality: safetensors may write the metadata keys in any order)
    assert tl.read_metadata(a) == tl.read_metadata(b)
    got_a, got_b = tl.load(a), tl.load(b)
    assert sorted(got_a) == sorted(got_b) == sorted(model.state_dict())
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(got_a[key], value)
        np.testing.assert_array_equal(got_b[key], value)
    # ... and either loads back either way
    target = small_model(3)
    assert tl.load(a, target)["format"] == checkpoint.SAVE_FORMAT
    np.testing.assert_array_equal(target.state_dict()["2.bias"], model.state_dict()["2.bias"])


def test_module_metadata_records_class_and_config(tmp_path: Path) -> None:
    plain = str(tmp_path / "plain.safetensors")
    tl.save(small_model(), plain, metadata={"note": "hi"})
    meta = tl.read_metadata(plain)
    assert meta == {"format": checkpoint.SAVE_FORMAT, "class": "Sequential", "note": "hi"}
    config = {"model": "mlp", "dataset": "iris", "seed": 4, "in_features": 4, "hidden": [6],
              "num_classes": 3}
    model = models.build(config)
    assert model.model_config == config
    path = str(tmp_path / "mlp.safetensors")
    tl.save(model, path, metadata={"class": "mine"})  # the caller's keys win
    meta = tl.read_metadata(path)
    assert json.loads(meta["config"]) == config and meta["class"] == "mine"
    # A state dict (not a module) records nothing of its own.
    tl.save({"w": np.ones(2)}, plain)
    assert tl.read_metadata(plain) == {}


def test_tensors_are_saved_and_loaded_as_values(tmp_path: Path) -> None:
    if not hasattr(tl, "tensor"):
        pytest.fail("tl.tensor is missing")
    w = tl.tensor(np.arange(6.0).reshape(2, 3), dtype="float64", requires_grad=True)
    path = str(tmp_path / "t.safetensors")
    tl.save({"w": w * 2}, path)
    np.testing.assert_array_equal(tl.load(path)["w"], np.arange(6.0).reshape(2, 3) * 2)
    holder = {"w": tl.tensor(np.zeros((2, 3)), dtype="float64", requires_grad=True)}
    tl.load(path, holder)
    np.testing.assert_array_equal(holder["w"].detach().numpy(), np.arange(6.0).reshape(2, 3) * 2)
    assert holder["w"].requires_grad


def test_general_checkpoint_comes_back_nested(tmp_path: Path) -> None:
    """PyTorch's 'saving a general checkpoint' recipe: a dict of state dicts and numbers."""
    model = small_model(4)
    opt = tl.optim.Adam(model.parameters(), lr=1e-2)
    for p in model.parameters():
        p.grad = np.ones_like(p.value)
    opt.step()
    path = str(tmp_path / "ckpt.safetensors")
    tl.save({"epoch": 7, "model_state_dict": model.state_dict(),
             "optimizer_state_dict": opt.state_dict(), "extra": {"a.b": {"c": np.ones(2)}}},
            path)
    ckpt = tl.load(path)
    assert sorted(ckpt) == ["epoch", "extra", "model_state_dict", "optimizer_state_dict"]
    assert int(ckpt["epoch"]) == 7
    np.testing.assert_array_equal(ckpt["extra"]["a.b"]["c"], np.ones(2))
    restored = small_model(5)
    restored.load_state_dict(ckpt["model_state_dict"])
    restored_opt = tl.optim.Adam(restored.parameters(), lr=1e-2)
    restored_opt.load_state_dict(ckpt["optimizer_state_dict"])
    for key, value in opt.state_dict().items():
        np.testing.assert_array_equal(restored_opt.state_dict()[key], value)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(restored.state_dict()[key], value)
    # The seed form's named objects nest the same way.
    tl.save(path, {"model": model, "optim": opt})
    assert sorted(tl.load(path)) == ["model", "optim"]


def test_bad_group_metadata_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "x.safetensors")
    tl.save({"w": np.ones(1)}, path, metadata={checkpoint.GROUPS_KEY: "{not json"})
    with pytest.raises(CheckpointError, match="must be a JSON list of key prefixes"):
        tl.load(path)
    tl.save({"w": np.ones(1), "w.x": np.ones(1)}, path,
            metadata={checkpoint.GROUPS_KEY: json.dumps(["w"])})
    with pytest.raises(CheckpointError, match="'w.x' lies under 'w', which is also an array"):
        tl.load(path)
    tl.save({"w.x": np.ones(1), "w": np.ones(1)}, path,  # (the file decides the key order)
            metadata={checkpoint.GROUPS_KEY: json.dumps(["w"])})
    with pytest.raises(CheckpointError, match="lies under 'w'|'w' is an array and also a group"):
        tl.load(path)


def _tree(*pairs: tuple[str, list[object]]) -> str:
    return json.dumps(["dict", [[["str", k], v] for k, v in pairs]])


HOSTILE_TREES = [
    ("{not json", "is not JSON"),
    ("[" * 5000 + "]" * 5000, "nested too deeply|at most 64 levels"),
    ('["list", [' * 80 + '["none"]' + "]]" * 80, "at most 64 levels of nesting"),
    (json.dumps(["pickle", "os.system", "echo hi"]), "expected one of none, str, tensor"),
    (json.dumps(["kind", "builtins.eval", [], None]), "expected one of none, str, tensor"),
    (_tree(("w", ["tensor", "nope"])), "expected the key of an array in the file, found 'nope'"),
    (_tree(("w", ["tensor", "w"]), ("v", ["tensor", "w"])), "named again"),
    (json.dumps(["dict", []]), "names 0 of the file's 1 arrays; not named: 'w'"),
    (_tree(("w", ["int", "w"])), "a 0-d array holding a Python int"),
    (json.dumps(["dict", [[["str", "w"], ["tensor", "w"]], [["str", "w"], ["none"]]]]),
     "each key once"),
    (json.dumps(["dict", [[["set", "w"], ["tensor", "w"]]]]), "a dict key"),
    (json.dumps(["dict", [[["float", "1" * 50], ["tensor", "w"]]]]), "a dict key"),
    (json.dumps(["kind", "optimizer_state", [[["str", "w"], ["tensor", "w"]]], {"params": 1}]),
     "param_groups must be a list of dicts"),
    (json.dumps(["kind", "optimizer_state", [[["str", "w"], ["tensor", "w"]]],
                 [{"params": [0], "lr": {"x": 1}}]]), "group entry 'lr'"),
    (json.dumps(["str", "x", "y"]), "expected one of none"),
    (json.dumps({"dict": []}), "expected a node \\[kind, ...\\]"),
]


@pytest.mark.parametrize("index", range(len(HOSTILE_TREES)))
def test_hostile_structure_metadata_is_refused(tmp_path: Path, index: int) -> None:
    """The saved structure is data from the file: every malformed or hostile form is a
    CheckpointError naming the file, the place and what was expected; nothing runs."""
    tree, pattern = HOSTILE_TREES[index]
    path = str(tmp_path / "x.safetensors")
    tl.save({"w": np.ones(2)}, path, metadata={checkpoint.TREE_KEY: tree})  # (the caller's wins)
    with pytest.raises(CheckpointError, match=pattern) as info:
        tl.load(path)
    assert path in str(info.value)
    assert tl.read_metadata(path) == {}  # the structure is not the caller's metadata
    target = {"w": np.zeros(2)}
    tl.load(path, target)  # load(path, into) reads the arrays by key, not the structure
    np.testing.assert_array_equal(target["w"], np.ones(2))


def test_structure_size_is_capped_on_save_and_load(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "x.safetensors")
    value = {"names": [f"entry {i}" for i in range(50)], "w": np.ones(2)}
    tl.save(value, path)
    monkeypatch.setattr(checkpoint, "MAX_TREE_CHARS", 100)
    with pytest.raises(CheckpointError, match="more than the 100"):
        tl.load(path)
    with pytest.raises(CheckpointError, match="more than the 100 a load accepts"):
        tl.save(value, str(tmp_path / "y.safetensors"))
    assert not (tmp_path / "y.safetensors").exists()


BAD_CALLS = [
    (lambda p: tl.save(p, p), "save: both arguments are paths"),
    (lambda p: tl.save(small_model(), io.StringIO()), "StringIO.*binary writing"),
    (lambda p: tl.save({"w": np.ones(1)}, 3), "found \\(dict, int\\)"),
    (lambda p: tl.load(small_model(), p), "load: the first argument must be the path.*torch's "
                                          "order is load\\(path\\)"),
    (lambda p: tl.load(p, p), "load: into must be the object"),
    (lambda p: tl.load(p, None), "load: into must be the object"),
    (lambda p: tl.load(p, map_location="cuda:0"), "load: map_location must be None or 'cpu'"),
    (lambda p: tl.load(p, weights_only="yes"), "load: weights_only must be a bool"),
]


@pytest.mark.parametrize("index", range(len(BAD_CALLS)))
def test_wrong_calls_raise_checkpoint_errors(tmp_path: Path, index: int) -> None:
    path = str(tmp_path / "x.safetensors")
    tl.save({"w": np.ones(1)}, path)
    before = Path(path).read_bytes()
    call, pattern = BAD_CALLS[index]
    with pytest.raises(CheckpointError, match=pattern):
        call(path)
    assert Path(path).read_bytes() == before


def test_load_without_target_accepts_torch_keywords(tmp_path: Path) -> None:
    path = str(tmp_path / "x.safetensors")
    tl.save({"w": np.arange(3.0)}, path)
    for kwargs in ({"map_location": "cpu"}, {"weights_only": False}, {}):
        np.testing.assert_array_equal(tl.load(path, **kwargs)["w"], np.arange(3.0))


# ---------------------------------------------------------------------------------------------
# CLI


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"torchlean {tl.__version__}"


def test_eval_reads_a_model_saved_with_tl_save(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """tl.save(model, path) of a torchlean.models model evaluates exactly as the same weights
    written in 'torchlean train --save''s layout."""
    data = load_data("mlp", "iris", 5)
    model = models.build(models.config_for("mlp", data, seed=5))
    # Move off the initial weights so a wrong (re-initialised) model could not match.
    state = {k: v + np.float32(0.05) * np.sign(v) for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    ours, theirs = str(tmp_path / "ours.safetensors"), str(tmp_path / "train.safetensors")
    tl.save(model, ours)
    checkpoint.save(theirs, {"model": model}, metadata={
        "format": TRAIN_FORMAT, "config": json.dumps(model.model_config),
        "settings": json.dumps({"seed": 5})})
    results = []
    for path in (ours, theirs):
        out_json = str(tmp_path / (Path(path).stem + ".json"))
        code = cli.main(["eval", "--checkpoint", path, "--json", out_json])
        out, err = capsys.readouterr()
        assert code == 0, err
        with open(out_json) as f:
            results.append(json.load(f))
    for key in ("accuracy", "loss", "examples", "seed", "model", "dataset"):
        assert results[0][key] == results[1][key], key
    assert results[0]["examples"] == len(data.test)


def test_eval_refuses_a_module_without_config(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "plain.safetensors")
    tl.save(small_model(), path)
    assert cli.main(["eval", "--checkpoint", path]) == cli.EXIT_ERROR
    assert "no model config in its metadata" in capsys.readouterr().err
