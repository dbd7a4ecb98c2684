"""The example scripts run end to end with the public API and learn their tasks.

Each example runs as a shorter but complete run (``--epochs N``: the learning-rate schedule spans
the N epochs) with one BLAS thread (``--threads 1``), and must reach a target in proportion to
that budget. The budget is a number of epochs, never seconds: on a loaded machine the run is
slower, not different, so the outcome does not depend on machine speed or load. The subprocess
timeout only guards against a hang; it is many times any run's length.

Measured (seeded, so repeatable up to BLAS summation order): MLP 8 epochs 0.986 test accuracy
(30 epochs, the default: >= 0.97); CNN 8 epochs 0.969 (30: >= 0.98); adder transformer 3 epochs
0.982 exact match (12: >= 0.95). About 45 s of CPU in all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HANG_GUARD_S = 3600  # not a budget: a run that takes this long is stuck


@pytest.mark.parametrize("script,epochs,target", [
    ("train_mlp_digits.py", 8, 0.95),
    ("train_cnn_digits.py", 8, 0.94),
    ("train_adder_transformer.py", 3, 0.90),
])
def test_example_learns_within_its_epoch_budget(script: str, epochs: int, target: float,
                                                 tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--epochs", str(epochs), "--threads", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert sum(line.startswith("epoch") for line in lines) == epochs, result.stdout[-2000:]
    last = lines[-1]
    assert last.startswith("final test")
    assert float(last.split()[-1]) >= target, last

