"""PyTorch's own programs, side by side: each script of ``tests/torch_scripts`` run under PyTorch
and with only its imports changed to torchlean, CPU time of the whole process (issue 26).

Each script runs in a fresh process (one BLAS / OpenMP thread), under torch and under
torchlean alternately, ``--rounds`` times; the table gives the median CPU seconds (user +
system) of the whole process on each side and their ratio, and the CPU seconds of the program
itself (the framework imported first, then the clock started and the script run: what a longer
run of the same program converges to) and their ratio. A script that fails on either side is
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


# Runs the script with its framework imported before the clock starts (``sys.argv[1]``).
RUNNER = """
import runpy, sys, time
__import__(sys.argv[1])
start = time.process_time()
runpy.run_path("script.py", run_name="__main__")
print(f"BENCH_PROGRAM_CPU {time.process_time() - start}", file=sys.stderr)
"""


def cpu_seconds(lib: str, cwd: Path) -> tuple[int, float, float]:
    """Exit status, CPU seconds (user + system) of the whole child process, and of the
    program after its framework's import."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", RUNNER, lib], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    program = [float(line.split()[1]) for line in done.stderr.splitlines()
               if line.startswith("BENCH_PROGRAM_CPU ")]
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.returncode, whole, program[-1] if program else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scripts", default="", help="comma-separated names (default: all)")
    args = parser.parse_args()
    names = ([n for n in args.scripts.split(",") if n] or
             sorted(p.stem for p in SCRIPTS_DIR.glob("*.py")))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"{'script':32s} {'torchlean s':>11s} {'torch s':>8s} {'ratio':>6s} "
              f"{'program s':>9s} {'torch':>6s} {'ratio':>6s}")
        ratios = []
        for name in names:
            source = (SCRIPTS_DIR / f"{name}.py").read_text()
            sides = {"torchlean": to_torchlean(source), "torch": source}
            whole: dict[str, list[float]] = {"torchlean": [], "torch": []}
            program: dict[str, list[float]] = {"torchlean": [], "torch": []}
            failed = []
            for _ in range(args.rounds):
                for lib, text in sides.items():
                    d = work / name / lib
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "script.py").write_text(text)
                    rc, sec, own = cpu_seconds(lib, d)
                    if rc:
                        failed.append(lib)
                    whole[lib].append(sec)
                    program[lib].append(own)
            if failed:
                print(f"{name:32s} failed under {', '.join(sorted(set(failed)))}")
                continue
            ours, theirs = (statistics.median(whole[k]) for k in ("torchlean", "torch"))
            own_ours, own_theirs = (statistics.median(program[k]) for k in ("torchlean", "torch"))
            ratio = own_ours / max(own_theirs, 1e-3)
            ratios.append(ratio)
            print(f"{name:32s} {ours:11.2f} {theirs:8.2f} {ours / theirs:6.2f} "
                  f"{own_ours:9.2f} {own_theirs:6.2f} {ratio:6.2f}", flush=True)
        if ratios:
            print(f"programs without their framework's import, over {len(ratios)} scripts: "
                  f"median ratio {statistics.median(ratios):.2f}, max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
