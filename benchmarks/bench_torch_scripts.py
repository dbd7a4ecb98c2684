"""PyTorch's own programs, side by side: each script of ``tests/torch_scripts`` run under PyTorch
and with only its imports changed to torchlean, CPU time of the whole process (issue 26).

Each script runs in a fresh process (one BLAS / OpenMP thread), under torch and under
torchlean alternately, ``--rounds`` times; the table gives the median CPU seconds (user +
system) of each side, their ratio, and the ratio after subtracting each framework's own import
time (measured the same way: ``python -c "import torch"`` and ``import torchlean``), which is
what a longer run of the same program converges to. A script that fails on either side is
reported as such. Not a test (timings never gate tests); the agreement of the scripts' results is
``tests/test_torch_scripts.py``'s job.

Run: ``python benchmarks/bench_torch_scripts.py [--rounds N] [--scripts a,b,...]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_torch_scripts import SCRIPTS_DIR, to_torchlean  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
           PYTHONPATH=os.pathsep.join([str(ROOT / "src"),
                                       *filter(None, [os.environ.get("PYTHONPATH")])]))


def cpu_seconds(args: list[str], cwd: Path) -> tuple[int, float]:
    """Exit status and CPU seconds (user + system) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done.returncode, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scripts", default="", help="comma-separated names (default: all)")
    args = parser.parse_args()
    names = ([n for n in args.scripts.split(",") if n] or
             sorted(p.stem for p in SCRIPTS_DIR.glob("*.py")))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        imports = {}
        for lib in ("torch", "torchlean"):
            imports[lib] = statistics.median(
                cpu_seconds([sys.executable, "-c", f"import {lib}"], work)[1]
                for _ in range(args.rounds))
        print(f"import (CPU s): torch {imports['torch']:.2f}, torchlean "
              f"{imports['torchlean']:.2f}")
        print(f"{'script':32s} {'torchlean s':>11s} {'torch s':>8s} {'ratio':>6s} "
              f"{'ratio w/o import':>16s}")
        ratios = []
        for name in names:
            source = (SCRIPTS_DIR / f"{name}.py").read_text()
            sides = {"torchlean": to_torchlean(source), "torch": source}
            times: dict[str, list[float]] = {"torchlean": [], "torch": []}
            failed = []
            for _ in range(args.rounds):
                for lib, text in sides.items():
                    d = work / name / lib
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "script.py").write_text(text)
                    rc, sec = cpu_seconds([sys.executable, "script.py"], d)
                    if rc:
                        failed.append(lib)
                    times[lib].append(sec)
            if failed:
                print(f"{name:32s} failed under {', '.join(sorted(set(failed)))}")
                continue
            ours, theirs = (statistics.median(times[k]) for k in ("torchlean", "torch"))
            net = (max(ours - imports["torchlean"], 1e-3) /
                   max(theirs - imports["torch"], 1e-3))
            ratios.append(net)
            print(f"{name:32s} {ours:11.2f} {theirs:8.2f} {ours / theirs:6.2f} {net:16.2f}",
                  flush=True)
        if ratios:
            print(f"median ratio without import time over {len(ratios)} scripts: "
                  f"{statistics.median(ratios):.2f} (max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
