"""``eval``, ``certify`` and ``verify`` with ``--onnx`` (or a ``tl.save``d zoo module given as
``--checkpoint``) and the user's own ``--data file.npz``.

A classifier's accuracy on user labels matches a direct count; a regression model gets its mean
squared error from ``eval`` and certified output intervals from ``certify`` (which must hold the
model's clean outputs); bad data files are one named error each, never a traceback.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn, onnx
from torchlean.cli import main
from torchlean.zoo import models

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("userdata")
    tl.manual_seed(0)
    classifier = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    regressor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    onnx.export(classifier, str(root / "cls.onnx"), [(8, 4)])
    onnx.export(regressor, str(root / "reg.onnx"), [(8, 4)])
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (20, 4)).astype(np.float32)
    np.savez(root / "cls.npz", x=x, y=rng.integers(0, 3, 20))
    np.savez(root / "reg.npz", x=x, y=rng.normal(size=(20, 2)))
    np.savez(root / "nolabels.npz", x=x)
    np.savez(root / "wide.npz", x=np.zeros((3, 5), np.float32), y=np.zeros(3, np.int64))
    np.save(root / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (root / "text.npz").write_text("not an archive")
    return root, classifier, regressor, x


def test_eval_reports_accuracy_and_mse_on_user_data(files, capsys):
    root, classifier, regressor, x = files
    out = root / "eval.json"
    assert main(["eval", "--onnx", str(root / "cls.onnx"), "--data", str(root / "cls.npz"),
                 "--json", str(out)]) == 0
    labels = np.load(root / "cls.npz")["y"]
    logits = np.concatenate([np.asarray(tl.compile(lambda v: classifier(v), (10, 4)).forward(
        x[k:k + 10])) for k in (0, 10)])
    assert json.loads(out.read_text())["accuracy"] == pytest.approx(
        float(np.mean(np.argmax(logits, 1) == labels)))
    assert main(["eval", "--onnx", str(root / "reg.onnx"), "--data", str(root / "reg.npz"),
                 "--json", str(out)]) == 0
    targets = np.load(root / "reg.npz")["y"]
    pred = np.asarray(tl.compile(lambda v: regressor(v), (20, 4)).forward(x), np.float64)
    assert json.loads(out.read_text())["mse"] == pytest.approx(
        float(np.mean((pred - targets) ** 2)), rel=1e-5)
    capsys.readouterr()


def test_certify_reports_intervals_for_a_model_without_labels(files, capsys):
    root, _, regressor, x = files
    out = root / "intervals.json"
    assert main(["certify", "--onnx", str(root / "reg.onnx"), "--data",
                 str(root / "nolabels.npz"), "--eps", "0.02", "--method", "ibp,crown",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "certified output intervals" in printed and "| 0.02 | crown |" in printed
    found = json.loads(out.read_text())["intervals"]
    clean = np.asarray(tl.compile(lambda v: regressor(v), (20, 4)).forward(x), np.float64)
    for entry in found:
        lower, upper = np.array(entry["lower"]), np.array(entry["upper"])
        assert np.all(lower <= clean) and np.all(clean <= upper), entry["method"]
    ibp, crown = found
    assert crown["mean_width"] <= ibp["mean_width"]


@pytest.mark.parametrize("name,message", [
    ("objects.npy", "not a readable .npz of plain arrays"),
    ("text.npz", "not a readable .npz"),
    ("nolabels.npz", "has no targets 'y'"),
    ("wide.npz", "holds examples of shape (5,)"),
    ("missing.npz", "cannot read"),
])
def test_bad_data_files_are_named_errors(files, capsys, name, message):
    root = files[0]
    assert main(["eval", "--onnx", str(root / "cls.onnx"), "--data", str(root / name)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_data_needs_a_model_and_no_dataset(files, capsys):
    root = files[0]
    assert main(["eval", "--data", str(root / "cls.npz")]) == 2
    assert "give --checkpoint" in capsys.readouterr().err
    assert main(["certify", "--onnx", str(root / "cls.onnx"), "--data", str(root / "cls.npz"),
                 "--dataset", "digits"]) == 2
    assert "either --dataset or --data" in capsys.readouterr().err


@pytest.fixture(scope="module")
def saved(files):
    """A zoo MLP written by ``tl.save(model, path)`` (its config in the metadata), and a plain
    module saved the same way (state only: nothing says how to rebuild it)."""
    root = files[0]
    model = models.build({"model": "mlp", "in_features": 4, "hidden": [16], "num_classes": 3,
                          "seed": 0})
    tl.save(model, str(root / "zoo.safetensors"))
    tl.save(nn.Sequential(nn.Linear(4, 3)), str(root / "plain.safetensors"))
    return root, model


def test_a_tl_saved_module_is_evaluated_certified_and_verified_on_user_data(files, saved,
                                                                            capsys):
    root, model = saved
    x = files[3]
    labels = np.load(root / "cls.npz")["y"]
    out = root / "saved.json"
    assert main(["eval", "--checkpoint", str(root / "zoo.safetensors"), "--data",
                 str(root / "cls.npz"), "--json", str(out)]) == 0
    model.eval()
    logits = np.asarray(tl.compile(lambda v: model(v), (20, 4)).forward(x))
    assert json.loads(out.read_text())["accuracy"] == pytest.approx(
        float(np.mean(np.argmax(logits, 1) == labels)))
    assert main(["certify", "--checkpoint", str(root / "zoo.safetensors"), "--data",
                 str(root / "cls.npz"), "--eps", "0.01", "--method", "ibp,crown",
                 "--json", str(out)]) == 0
    row = json.loads(out.read_text())["results"][0]
    assert "cls.npz" in capsys.readouterr().out
    clean = float(np.mean(np.argmax(logits, 1) == labels))
    assert row["examples"] == 20 and row["clean_accuracy"] == pytest.approx(clean)
    assert row["contradictions"] == 0
    assert row["certified_accuracy"]["ibp"] <= row["certified_accuracy"]["crown"] <= clean
    assert main(["verify", "--checkpoint", str(root / "zoo.safetensors"), "--data",
                 str(root / "cls.npz"), "--quick", "--batch-size", "4"]) == 0
    assert "cls.npz" in capsys.readouterr().out


@pytest.mark.parametrize("checkpoint,data,message", [
    ("plain.safetensors", "cls.npz", "no model config in its metadata"),
    ("zoo.safetensors", "wide.npz", "takes examples of shape (4,)"),
    ("zoo.safetensors", "reg.npz", "must hold one class index"),
    ("zoo.safetensors", "nolabels.npz", "has no targets 'y'"),
])
def test_a_saved_module_with_data_that_does_not_fit_is_a_named_error(saved, capsys, checkpoint,
                                                                     data, message):
    root = saved[0]
    for command in ("eval", "certify"):
        assert main([command, "--checkpoint", str(root / checkpoint), "--data",
                     str(root / data)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (command, err)
