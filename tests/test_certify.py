"""``torchlean certify`` end to end on small checkpoints, and the certify() driver's invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest

from torchlean import checkpoint, cli
from torchlean.bounds import certify as C
from torchlean.zoo import datasets, models
from torchlean.zoo.trained import TRAIN_FORMAT


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def digits_mlp(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ckpt") / "mlp.safetensors")
    assert cli.main(["train", "--epochs", "2", "--save", path]) == 0
    return path


def _save_untrained(path, model_name, dataset):
    data = datasets.load(dataset, seed=0, **models.dataset_options(model_name, dataset))
    config = models.config_for(model_name, data)
    if model_name == "transformer":
        config.update(d_model=8, num_heads=2, num_layers=1, d_ff=8)
    model = models.build(config)
    checkpoint.save(path, {"model": model}, metadata={
        "format": TRAIN_FORMAT, "config": json.dumps(config),
        "settings": json.dumps({"seed": 0})})
    return path


def test_certify_cli_table_json_plot(digits_mlp, tmp_path, capsys):
    capsys.readouterr()
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code, out, err = _run(["certify", "--checkpoint", digits_mlp, "--eps", "0.005,0.02,0.08",
                           "--limit", "40", "--alpha-steps", "5", "--pgd-steps", "10",
                           "--json", str(out_json), "--plot", str(out_png)], capsys)
    assert code == 0, err
    assert "alpha-crown" in out and "pgd" in out and "examples/s" in out
    assert "[####" not in err  # progress bars only on a terminal, never into a log
    result = json.loads(out_json.read_text())
    assert result["examples"] == 40 and result["float32_kernels"] is True
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = result["results"]
    assert [r["eps"] for r in rows] == [0.005, 0.02, 0.08]
    for r in rows:
        cert = r["certified_accuracy"]
        assert r["contradictions"] == 0
        assert cert["ibp"] <= cert["crown"] <= cert["alpha-crown"] <= r["pgd_accuracy"]
        assert r["pgd_accuracy"] <= r["clean_accuracy"]
        assert all(v > 0 for v in r["examples_per_second"].values())
    # larger balls certify no more
    for a, b in zip(rows, rows[1:], strict=False):
        for m in ("ibp", "crown", "alpha-crown"):
            assert b["certified_accuracy"][m] <= a["certified_accuracy"][m]
    assert rows[0]["certified_accuracy"]["crown"] > 0.5  # a trained net certifies at 0.005


def test_certify_real_rounding_is_at_least_as_permissive(digits_mlp, tmp_path, capsys):
    paths = {}
    for rounding in ("float32", "real"):
        paths[rounding] = tmp_path / f"{rounding}.json"
        code, _, err = _run(["certify", "--checkpoint", digits_mlp, "--eps", "0.02",
                             "--limit", "30", "--method", "crown", "--rounding", rounding,
                             "--pgd-steps", "5", "--json", str(paths[rounding])], capsys)
        assert code == 0, err
    f32 = json.loads(paths["float32"].read_text())["results"][0]["certified_accuracy"]["crown"]
    real = json.loads(paths["real"].read_text())["results"][0]["certified_accuracy"]["crown"]
    assert f32 <= real


def test_certify_cnn_and_iris(tmp_path, capsys):
    cnn = _save_untrained(str(tmp_path / "cnn.safetensors"), "cnn", "digits")
    code, out, err = _run(["certify", "--checkpoint", cnn, "--eps", "0.01", "--limit", "4",
                           "--alpha-steps", "2", "--pgd-steps", "3"], capsys)
    assert code == 0, err
    assert "certify cnn" in out and "clipped to [0, 1]" in out
    iris = tmp_path / "iris.safetensors"
    assert cli.main(["train", "--dataset", "iris", "--epochs", "3", "--save", str(iris)]) == 0
    capsys.readouterr()
    code, out, err = _run(["certify", "--checkpoint", str(iris), "--eps", "0.05",
                           "--pgd-steps", "3", "--alpha-steps", "2"], capsys)
    assert code == 0, err
    assert "on iris: 30 test examples, inputs unclipped" in out


@pytest.mark.parametrize("argv, message", [
    (["--eps", "0.01,abc"], "--eps"),
    (["--eps", "-0.1"], "--eps"),
    (["--method", "crown,deeppoly"], "deeppoly"),
])
def test_certify_bad_arguments(digits_mlp, capsys, argv, message):
    code, _, err = _run(["certify", "--checkpoint", digits_mlp, *argv], capsys)
    assert code == cli.EXIT_ERROR
    assert message in err and "Traceback" not in err


def test_certify_rejects_models_it_cannot_bound(tmp_path, capsys):
    path = _save_untrained(str(tmp_path / "tf.safetensors"), "transformer", "adder")
    code, _, err = _run(["certify", "--checkpoint", path], capsys)
    assert code == cli.EXIT_ERROR
    assert "transformer" in err and "mlp, cnn" in err
    code, _, err = _run(["certify", "--checkpoint", str(tmp_path / "missing.safetensors")],
                        capsys)
    assert code == cli.EXIT_ERROR and "missing.safetensors" in err


def test_driver_validates_and_counts():
    with pytest.raises(C.BoundsError, match="labels"):
        C.certify(None, np.zeros((3, 4)), np.zeros(2), [0.1], ["ibp"])
    assert C.parse_eps("0.01, 0.5") == [0.01, 0.5]
    assert C.parse_methods("ibp,alpha-crown") == ["ibp", "alpha-crown"]
