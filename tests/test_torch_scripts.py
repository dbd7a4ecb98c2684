"""Issue 24's acceptance suite: public PyTorch programs run unchanged on torchlean.

Each script in ``tests/torch_scripts/`` is an equivalent of a public PyTorch program (the
beginner tutorials, two pytorch/examples scripts, Karpathy's bigram/GPT lecture), written with
``import torch``. A test runs it twice, each in a fresh interpreter with a hang guard: with only
its import lines rewritten to torchlean (``import torchlean as torch``, ``torchlean.nn``,
``torchlean.optim``, ...), and, when that run succeeds, as written under PyTorch (the oracle;
scripts that stop on torchlean cost no PyTorch run). Both runs print
``CHECK <key> <values...>`` lines; the test requires the same keys and compares the values as the
script's entry in ``SCRIPTS`` says:

- ``close``: to rounding (``|a - b| <= atol + rtol |b|``): quantities the script makes
  deterministic (weights set from a NumPy seed, data from NumPy, no shuffling or dropout);
- ``near``: within ``atol``: quantities that depend on a framework's own random stream (default
  initialisation, shuffling, dropout, sampling), which cannot give the same numbers across
  frameworks; the bound is wide enough for seed-to-seed spread under PyTorch and narrow enough
  that a model that does not learn fails it;
- ``exact``: the same text (shapes, dtypes, names, counts).

A non-numeric token is always compared exactly. A script that does not run on torchlean yet is
an ``xfail(strict=True)`` whose reason names what stops it, so it flips to a failure (to be
unmarked) the day it runs; never a skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torchlean

pytest.importorskip("torch")

SCRIPTS_DIR = Path(__file__).parent / "torch_scripts"
HANG_GUARD_S = 300

CLOSE = ("close", 1e-4, 1e-6)
CLOSE_F32 = ("close", 2e-3, 1e-4)  # float32 trajectories over thousands of steps
EXACT = ("exact",)


def near(atol: float) -> tuple[str, float]:
    return ("near", atol)


# script -> (default comparison, {key: comparison}).
SCRIPTS: dict[str, tuple[tuple, dict[str, tuple]]] = {
    "polynomial_tensor": (CLOSE_F32, {}),
    "polynomial_autograd": (CLOSE_F32, {}),
    "polynomial_custom_function": (("close", 2e-3, 1e-6), {}),
    "polynomial_nn": (CLOSE_F32, {}),
    # RMSprop on gradients that are zero in exact arithmetic (the bias and x^2 terms of an odd
    # target on a symmetric grid) amplifies float32 rounding: torch's own float64 run ends at
    # bias 5e-4 and w2 -0.09237 where its float32 run prints -6e-9 and -0.09345. The bound is
    # that float32/float64 spread, measured under PyTorch.
    "polynomial_optim": (near(2e-3), {"loss": near(0.05)}),
    "blitz_tensors": (EXACT, {"t1_sum": CLOSE, "mm_sum": CLOSE, "shared_numpy": CLOSE,
                              "x_np_sum": CLOSE}),
    "blitz_autograd": (EXACT, {"a_grad": CLOSE, "b_grad": CLOSE}),
    "blitz_neural_networks": (CLOSE, {"nparams": EXACT, "loss": ("close", 1e-3, 1e-6)}),
    "blitz_cifar10": (EXACT, {"accuracy": near(0.15), "last_running_loss": near(0.6)}),
    "basics_quickstart": (("close", 1e-3, 1e-5), {"predicted": EXACT}),
    "basics_tensors": (EXACT, {"agg": CLOSE, "after_add": CLOSE, "shared": CLOSE}),
    "basics_data": (EXACT, {}),
    "basics_buildmodel": (EXACT, {"prob_sum": CLOSE}),
    "basics_autograd": (CLOSE, {"z_det": EXACT}),
    "basics_optimization": (("close", 1e-3, 1e-5), {}),
    "nlp_pytorch_intro": (CLOSE, {}),
    "nlp_bow_classifier": (("close", 1e-3, 1e-5), {}),
    "nlp_word_embeddings": (("close", 1e-3, 1e-5), {}),
    "nlp_lstm_tagger": (("close", 1e-3, 1e-5), {"out_shape": EXACT, "tags": EXACT}),
    "char_rnn_classification": (EXACT, {"first_loss": near(0.2), "last_loss": near(0.3),
                                        "mean_diag": near(0.45)}),
    "examples_mnist": (EXACT, {"lrs": CLOSE, "test_loss": near(0.3), "accuracy": near(0.25)}),
    "examples_time_sequence": (("close", 1e-6, 1e-9), {}),
    "karpathy_bigram": (EXACT, {"train_loss": near(0.3), "val_loss": near(0.3)}),
    "karpathy_gpt": (EXACT, {"train_loss": near(0.35), "val_loss": near(0.35)}),
}

# The held-out set: equivalents of further public scripts of the same kinds (tutorials and
# pytorch/examples), written after the 24 above passed, to measure how far the API reaches
# beyond the scripts it was fixed against.
HELD_OUT: dict[str, tuple[tuple, dict[str, tuple]]] = {
    "recipes_saving_loading": (EXACT, {"out_sum": CLOSE, "loss": CLOSE,
                                       "resumed_fc3": ("close", 1e-5, 1e-6)}),
    "nlp_bilstm_crf": (EXACT, {"first_nll": near(4.0), "last_nll": near(3.0)}),
    "basics_data_loading": (EXACT, {f"sample_sum{i}": CLOSE for i in range(4)}),
    "nlp_nn_tutorial": (EXACT, {"scratch_loss0": CLOSE, "scratch_loss": near(5e-4),
                                "scratch_acc": CLOSE, "val_logistic": near(0.01),
                                "val_cnn": near(0.15)}),
    "advanced_fgsm": (EXACT, {"clean_acc": near(0.1), "acc_eps_0.1": near(0.15),
                              "acc_eps_0.3": near(0.15)}),
    "examples_regression": (EXACT, {}),
    "examples_vae": (EXACT, {"train_loss": near(15.0), "test_loss": near(15.0),
                             "sample_mean": near(0.05)}),
    "examples_reinforce": (near(15.0), {}),
    "examples_actor_critic": (near(40.0), {}),
    "nlp_seq2seq_translation": (EXACT, {"first_loss": near(0.3), "last_loss": near(0.15),
                                        "exact_translations": near(0.3)}),
    "examples_word_language_model": (EXACT, {"pe_values": CLOSE, "pe_forward": CLOSE,
                                             "best_val_loss": near(0.4)}),
    "basics_custom_buffers": (EXACT, {"running_mean": CLOSE, "running_var": CLOSE,
                                      "eval_loss": ("close", 1e-4, 1e-6)}),
    "examples_dcgan": (EXACT, {"last_D_x": near(0.25), "last_errD": near(0.7)}),
}
# A second held-out round (session 6): tutorials using the layers added then (nn.Transformer*,
# EmbeddingBag, affine_grid/grid_sample, Dropout2d) and more of the tutorial API. The "near"
# bounds were set from PyTorch's own spread over seeds 0-3 (noted per key), each narrow enough
# that a model that does not learn fails.
HELD_OUT_2: dict[str, tuple[tuple, dict[str, tuple]]] = {
    # seeds 0-3: first 3.10-3.24, last 0.79-0.80, val 0.77-0.82, test 0.81-0.83 (chance: 3.18)
    "tutorial_transformer_lm": (EXACT, {"first_loss": near(0.25), "last_loss": near(0.25),
                                        "best_val_loss": near(0.25), "test_loss": near(0.25),
                                        "lr": CLOSE}),
    # seeds 0-2: 0.96-0.97 (chance 0.25)
    "tutorial_text_classification": (EXACT, {"test_accuracy": near(0.1)}),
    # seeds 0-3: last 1.55-1.98, test 0.90-1.62, accuracy 0.43-0.78 (chance 2.30 / 0.1)
    "tutorial_spatial_transformer": (EXACT, {"identity_stn": ("close", 0.0, 1e-5),
                                             "first_loss": near(0.15), "last_loss": near(0.45),
                                             "test_loss": near(0.8), "accuracy": near(0.35)}),
    # chance 4.08; 300 steps take it to about 2.7
    "tutorial_char_rnn_generation": (EXACT, {"first_plot_loss": near(0.2),
                                             "last_plot_loss": near(0.35)}),
    # part 2's unscaled init makes its losses seed-dependent (chance 3.0, start above 15); the
    # batch-norm parts are stable (torch 2.03-2.25)
    "karpathy_makemore_mlp": (EXACT, {"lrs": CLOSE, "mlp_train_loss": near(0.5),
                                      "mlp_dev_loss": near(1.2), "bn_train_loss": near(0.15),
                                      "bn_val_loss": near(0.15), "layered_final_loss": near(0.15),
                                      "update_ratio": near(0.5)}),
    # every hand-written gradient matches autograd (counted); losses from the framework's stream
    # exercise1_close counts torch.allclose(manual, autograd) over 26 gradients; the closest
    # sits about 7e-9 from a 1e-8 tolerance, and PyTorch's own count came out 25, not 26, in one
    # CI run (its MKL kernels' sums may follow the operands' alignment): one either way.
    "karpathy_backprop_ninja": (EXACT, {"first_loss": near(0.15), "train_loss": near(0.25),
                                        "val_loss": near(0.25), "exercise1_close": near(1)}),
    # packed sequences through a bidirectional GRU; chance 2.94; torch seeds 0-3: first
    # 2.78-2.82, last 1.53-1.64
    "nlp_chatbot": (EXACT, {"attn_general": ("close", 1e-4, 1e-5),
                            "attn_concat": ("close", 1e-4, 1e-5), "first_loss": near(0.2),
                            "last_loss": near(0.45)}),
}
# A third round (session 21): torch.func, hooks, a nanoGPT-style loop and a training recipe,
# written from the public tutorials after a hunt found each API missing.
HELD_OUT_3: dict[str, tuple[tuple, dict[str, tuple]]] = {
    "func_transforms": (CLOSE, {}),
    "hooks_tutorial": (EXACT, {}),
    # booleans: the loss falls from chance (2.4) below 1.0, sampling continues the sequence
    "nanogpt_train": (EXACT, {}),
    "training_recipe": (EXACT, {}),
}
HELD_OUT.update(HELD_OUT_2)
HELD_OUT.update(HELD_OUT_3)
SCRIPTS.update(HELD_OUT)

# What stops each script on torchlean today (the first error it meets). strict: a script that
# starts to run turns the xfail into a failure, so its entry must then be removed.
XFAIL: dict[str, str] = {
}

_IMPORT = re.compile(r"^(\s*)import torch\s*$")
_IMPORT_SUB = re.compile(r"^(\s*)import torch((?:\.\w+)+)\s*$")
_IMPORT_AS = re.compile(r"^(\s*)import torch((?:\.\w+)*) as (\w+)\s*$")
_FROM = re.compile(r"^(\s*)from torch((?:\.\w+)*) import (.+)$")


def to_torchlean(source: str) -> str:
    """The script with only its import lines rewritten to torchlean."""
    lines = []
    for line in source.splitlines():
        if m := _IMPORT.match(line):
            line = f"{m[1]}import torchlean as torch"
        elif m := _IMPORT_SUB.match(line):  # `import torch.utils.data` binds `torch`
            line = f"{m[1]}import torchlean{m[2]}; import torchlean as torch"
        elif m := _IMPORT_AS.match(line):
            line = f"{m[1]}import torchlean{m[2]} as {m[3]}"
        elif m := _FROM.match(line):
            line = f"{m[1]}from torchlean{m[2]} import {m[3]}"
        elif re.match(r"^\s*(import|from)\s+torch\b", line):
            raise ValueError(f"an import form the rewriter does not handle: {line!r}")
        lines.append(line)
    return "\n".join(lines) + "\n"


def _run(source: str, workdir: Path, label: str) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "script.py"
    path.write_text(source)
    src = str(Path(torchlean.__file__).resolve().parents[1])  # the torchlean under test
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([src] + [p for p in [os.environ.get("PYTHONPATH")]
                                                   if p]))
    try:
        return subprocess.run([sys.executable, str(path)], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{label}: still running after {HANG_GUARD_S} s (hang guard)"
                             ) from exc


def checks(output: str) -> dict[str, list[str]]:
    """The ``CHECK key values...`` lines of a run."""
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "CHECK":
            found[parts[1]] = parts[2:]
    return found


def _number(token: str) -> float | None:
    if token in ("True", "False", "nan", "inf", "-inf"):
        return None
    try:
        return float(token)
    except ValueError:
        return None


def compare(key: str, ours: list[str], theirs: list[str], rule: tuple) -> list[str]:
    """Problems found comparing one key's values (torchlean's against torch's)."""
    if len(ours) != len(theirs):
        return [f"{key}: {len(ours)} values, torch printed {len(theirs)}: {ours[:6]} vs "
                f"{theirs[:6]}"]
    problems = []
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        x, y = _number(a), _number(b)
        if rule[0] == "exact" or x is None or y is None:
            if a != b:
                problems.append(f"{key}[{i}]: {a!r}, torch {b!r}")
        elif rule[0] == "close":
            if not abs(x - y) <= rule[2] + rule[1] * abs(y):
                problems.append(f"{key}[{i}]: {x!r}, torch {y!r} (rtol {rule[1]}, atol "
                                f"{rule[2]})")
        elif not abs(x - y) <= rule[1]:
            problems.append(f"{key}[{i}]: {x!r}, torch {y!r} (allowed distance {rule[1]})")
    return problems


def _tail(text: str, n: int = 2500) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def test_every_script_is_listed():
    on_disk = {p.stem for p in SCRIPTS_DIR.glob("*.py")}
    assert on_disk == set(SCRIPTS), (sorted(on_disk - set(SCRIPTS)),
                                     sorted(set(SCRIPTS) - on_disk))
    assert set(XFAIL) <= set(SCRIPTS)
    assert len(SCRIPTS) - len(HELD_OUT) == 24


def test_rewriter_changes_only_imports():
    source = ("import torch\nimport torch.nn as nn\nfrom torch import optim\n"
              "from torch.utils.data import DataLoader\nx = torch.zeros(2)  # torch stays\n")
    assert to_torchlean(source) == (
        "import torchlean as torch\nimport torchlean.nn as nn\nfrom torchlean import optim\n"
        "from torchlean.utils.data import DataLoader\nx = torch.zeros(2)  # torch stays\n")
    assert to_torchlean("import torch.utils.data\n") == (
        "import torchlean.utils.data; import torchlean as torch\n")
    with pytest.raises(ValueError, match="import form"):
        to_torchlean("import torch, numpy\n")


def test_compare_catches_differences():
    assert compare("k", ["1.0", "x"], ["1.00001", "x"], CLOSE) == []
    assert compare("k", ["1.1"], ["1.0"], CLOSE)
    assert compare("k", ["1.1"], ["1.0"], near(0.2)) == []
    assert compare("k", ["1.5"], ["1.0"], near(0.2))
    assert compare("k", ["True"], ["False"], CLOSE)
    assert compare("k", ["1", "2"], ["1"], EXACT)


def _params() -> list:
    out = []
    for name in SCRIPTS:
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _params())
def test_script_matches_torch(name, tmp_path):
    source = (SCRIPTS_DIR / f"{name}.py").read_text()
    # torchlean first: a script that stops there fails without spending a PyTorch run.
    ours = _run(to_torchlean(source), tmp_path / "torchlean", f"{name} (torchlean)")
    assert ours.returncode == 0, f"{name} fails on torchlean:\n{_tail(ours.stderr)}"
    theirs = _run(source, tmp_path / "torch", f"{name} (torch)")
    assert theirs.returncode == 0, f"{name} fails under PyTorch:\n{_tail(theirs.stderr)}"
    expected = checks(theirs.stdout)
    assert expected, f"{name}: no CHECK lines under PyTorch"
    found = checks(ours.stdout)
    assert set(found) == set(expected), (f"{name}: CHECK keys {sorted(found)}, torch printed "
                                         f"{sorted(expected)}")
    default, rules = SCRIPTS[name]
    problems = []
    for key, theirs_values in expected.items():
        problems += compare(key, found[key], theirs_values, rules.get(key, default))
    assert not problems, f"{name}: " + "; ".join(problems)
