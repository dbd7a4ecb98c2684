"""Seeded fuzz of hostile files (issue 25): mutated ONNX files through the importer, tampered
checkpoint headers through ``torchlean.load``, crafted model configs through ``torchlean eval``.

Each kind runs as one batch of cases in its own subprocess (tests/fuzz_hostile_worker.py, the
batches side by side), so a hang cannot take the test run with it: the generous guard turns a
hang into a failure naming the case that was running. The outcome of every case must be a result
or a ``TorchLeanError``; any other exception is listed with its case number. Bounded by case
counts, never by time. ``TENSOR_CASES`` in the worker is the hook for Tensor-API cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("safetensors")

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fuzz_hostile_worker.py"
SEED = 25
COUNTS = {"onnx": 400, "checkpoint": 300, "eval": 60, "tensor": 200}
HANG_GUARD_S = 300  # generous: only a hang reaches it


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    return env


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every kind's batch, run side by side; kind -> one outcome per case."""
    work = tmp_path_factory.mktemp("fuzz")
    procs = {kind: subprocess.Popen(
        [sys.executable, str(WORKER), kind, str(SEED), str(n), str(work / kind)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=work)
        for kind, n in COUNTS.items()}
    results: dict[str, list[str]] = {}
    for kind, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            started = [json.loads(line)["start"] for line in out.splitlines()
                       if line.startswith('{"start"')]
            pytest.fail(f"{kind} fuzz hung at case {started[-1] if started else None} "
                        f"(seed {SEED})")
        assert proc.returncode == 0, f"{kind} worker failed:\n{err[-3000:]}"
        results[kind] = [json.loads(line)["outcome"] for line in out.splitlines()
                         if line.startswith('{"case"')]
    return results


@pytest.mark.parametrize("kind", ["onnx", "checkpoint", "eval"])
def test_hostile_inputs_raise_only_named_errors(outcomes: dict[str, list[str]],
                                                kind: str) -> None:
    got = outcomes[kind]
    assert len(got) == COUNTS[kind], f"{kind}: {len(got)} of {COUNTS[kind]} cases reported"
    bare = [(i, o) for i, o in enumerate(got) if o.startswith("bare:")]
    assert not bare, f"{kind}: {len(bare)} exceptions that are not TorchLeanError " \
                     f"(case, outcome): {bare[:10]}"
    # The mutations reach the checks that name them, not just one generic refusal.
    named = {o for o in got if o.startswith("named:")}
    assert named, f"{kind}: no case was refused: the mutations reach nothing"


def test_the_fuzz_reaches_the_limits_and_external_data(outcomes: dict[str, list[str]]) -> None:
    onnx = set(outcomes["onnx"])
    assert {"named:OnnxLimitError", "named:OnnxExternalDataError"} <= onnx, onnx
    assert "ok" in onnx  # some mutations still load


def test_tensor_hook_runs_every_case_it_has(outcomes: dict[str, list[str]]) -> None:
    # Empty until the Tensor-API cases are added to TENSOR_CASES; then every one must report.
    sys.path.insert(0, str(HERE))
    try:
        import fuzz_hostile_worker as worker
    finally:
        sys.path.remove(str(HERE))
    expected = COUNTS["tensor"] if worker.TENSOR_CASES else 0
    assert len(outcomes["tensor"]) == expected
    assert not [o for o in outcomes["tensor"] if o.startswith("bare:")]


if __name__ == "__main__":
    print("run with pytest; counts:", COUNTS)
