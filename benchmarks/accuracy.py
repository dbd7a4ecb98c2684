"""Accuracy and wall time of the default ``torchlean train`` runs (the main job's targets).

    python benchmarks/accuracy.py                 # the four defaults, and digits MLP compiled
    python benchmarks/accuracy.py --all-compiled  # every default on both backends
    python benchmarks/accuracy.py --seeds 0 1 2   # several seeds (each seed has its own split)

Each run is the real command line, ``python -m torchlean train ... --json``, in a subprocess, so
the wall time includes start-up and data loading, as a user would see it. The targets (issue 6):
digits MLP >= 0.97, digits CNN >= 0.98, iris MLP >= 0.95, adder transformer (2-digit operands,
exact match of the whole sum) >= 0.95 in under 5 minutes on 2 cores; ``--backend compiled``
reaches the same accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

RUNS = [  # (label, arguments, target accuracy, time limit in seconds)
    ("mlp digits", ["--model", "mlp", "--dataset", "digits"], 0.97, 60.0),
    ("cnn digits", ["--model", "cnn", "--dataset", "digits"], 0.98, None),
    ("mlp iris", ["--model", "mlp", "--dataset", "iris"], 0.95, None),
    ("transformer adder", ["--model", "transformer", "--dataset", "adder"], 0.95, 300.0),
]


def run(args: list[str], seed: int) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "metrics.json")
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "torchlean", "train", *args,
                               "--seed", str(seed), "--json", path],
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"torchlean train {' '.join(args)} failed:\n{proc.stderr}")
        with open(path) as f:
            return json.load(f), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--all-compiled", action="store_true",
                        help="run every default with --backend compiled too (default: only the "
                             "digits MLP)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    opts = parser.parse_args()

    plan = []
    for label, args, target, limit in RUNS:
        plan.append((label, "eager", args, target, limit))
        if opts.all_compiled or label == "mlp digits":
            plan.append((label, "compiled", [*args, "--backend", "compiled"], target, limit))

    print(f"{'run':<18} {'backend':<9} {'seed':>4} {'epochs':>6} {'accuracy':>9} {'target':>7} "
          f"{'wall s':>7}  result", flush=True)
    results, failures = [], 0
    for seed in opts.seeds:
        for label, backend, args, target, limit in plan:
            report, wall = run(args, seed)
            accuracy = report["final"]["test_accuracy"]
            ok = accuracy >= target and (limit is None or wall <= limit)
            failures += not ok
            verdict = "ok" if ok else "MISSED"
            if limit is not None:
                verdict += f" (limit {limit:.0f}s)"
            print(f"{label:<18} {backend:<9} {seed:>4} {report['settings']['epochs']:>6} "
                  f"{accuracy:>9.4f} {target:>7.2f} {wall:>7.1f}  {verdict}", flush=True)
            results.append({"run": label, "backend": backend, "seed": seed,
                            "accuracy": accuracy, "target": target, "wall_seconds": wall,
                            "train_seconds": report["seconds"], "ok": ok,
                            "settings": report["settings"]})
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=2)
    print(f"{len(results) - failures}/{len(results)} runs met their targets", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
