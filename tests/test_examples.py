"""The example scripts run end to end with the public API and reach the accuracy targets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("script,target", [
    ("train_mlp_digits.py", 0.97),
    ("train_cnn_digits.py", 0.98),
    ("train_adder_transformer.py", 0.95),
])
def test_example_reaches_its_target(script: str, target: float, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    result = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("final test")
    assert float(last.split()[-1]) >= target, last
