"""What the switch-on PGD (``attack.switch_on_starts``, ``vnn.instance``'s ``switched`` stage)
finds and costs on the VNN-COMP 2021 MNIST-FC instances.

A benchmark, not a test (nothing here gates on the clock). For every ``--every``-th row of
``mnistfc_instances.csv`` it runs ``verify_instance`` as ``torchlean vnn --method METHOD`` does
(the bound pass, then the attacks) and reports per instance: the answer and the published one,
which stage found a counterexample, the instance's CPU seconds, and the CPU seconds of the
attack's signed PGD and of the switch-on stage (its starts and its PGD), both measured inside
the same call. At the end: the counts, every answer checked against ``PUBLISHED.csv`` (a sat
where it says unsat, or the reverse, is counted as wrong), and the switch-on stage's share of
the CPU time on the instances where it ran to the end (those left unknown: it runs on every
instance the bound pass and the signed PGD leave open).

Times are CPU seconds (``time.process_time``) with one BLAS/OpenMP thread, so the share holds
on a shared machine.

    PYTHONPATH=src python benchmarks/bench_switch_on.py [--every 1] [--method crown]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy loads its thread pool

import argparse  # noqa: E402
import csv  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from torchlean.vnn import instance  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "vnncomp2021")


class Timed:
    """Wraps ``instance.attack``'s PGD and starts, adding CPU seconds per stage."""

    def __init__(self) -> None:
        self.cpu = {"signed": 0.0, "switch": 0.0}
        self._pgd, self._starts = instance.attack.pgd_box, instance.attack.switch_on_starts

    def __enter__(self) -> Timed:
        def pgd(*args: Any, **options: Any) -> Any:
            start = time.process_time()
            try:
                return self._pgd(*args, **options)
            finally:  # the switch-on PGD is the untargeted signed one
                stage = "switch" if options.get("untargeted") and options.get(
                    "rule") == "sign" else "signed"
                self.cpu[stage] += time.process_time() - start

        def starts(*args: Any, **options: Any) -> Any:
            start = time.process_time()
            try:
                return self._starts(*args, **options)
            finally:
                self.cpu["switch"] += time.process_time() - start

        instance.attack.pgd_box, instance.attack.switch_on_starts = pgd, starts
        return self

    def __exit__(self, *exc: Any) -> None:
        instance.attack.pgd_box, instance.attack.switch_on_starts = self._pgd, self._starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=ROOT, help="the vnncomp2021 folder")
    parser.add_argument("--every", type=int, default=1, help="every k-th instance")
    parser.add_argument("--method", default="crown", choices=["crown", "alpha-crown"])
    args = parser.parse_args()
    folder = os.path.join(args.root, "mnistfc")
    with open(os.path.join(folder, "mnistfc_instances.csv")) as handle:
        rows = [r for r in csv.reader(handle) if r]
    published = {}
    with open(os.path.join(args.root, "PUBLISHED.csv")) as handle:
        for r in csv.reader(handle):
            if r and r[0] == "mnistfc":
                published[(os.path.basename(r[1]), os.path.basename(r[2]))] = r[3]
    nets: dict[str, Any] = {}
    counts: dict[str, int] = {}
    wrong, added, totals = 0, [], []
    for k, (onnx_name, prop_name, timeout) in enumerate(rows):
        if k % args.every:
            continue
        net = nets.get(onnx_name) or nets.setdefault(
            onnx_name, instance.Network(os.path.join(folder, onnx_name)))
        with Timed() as timed:
            start = time.process_time()
            result = instance.verify_instance(net, os.path.join(folder, prop_name),
                                              float(timeout) * 10, args.method)
            cpu = time.process_time() - start
        truth = published.get((onnx_name, prop_name), "?")
        counts[result.status] = counts.get(result.status, 0) + 1
        wrong += {result.status, truth} == {"sat", "unsat"}
        if result.status == "unknown":
            added.append(timed.cpu["switch"])
            totals.append(cpu)
        print(f"{onnx_name[10:15]} {prop_name:20s} {result.status:7s} (published {truth[:7]:7s}) "
              f"cpu {cpu:6.2f} signed {timed.cpu['signed']:5.2f} switch-on "
              f"{timed.cpu['switch']:5.2f} | {result.message[:60]}", flush=True)
    print(f"{args.method}: " + ", ".join(f"{v} {s}" for s, v in sorted(counts.items()))
          + f"; {wrong} contradicting PUBLISHED.csv")
    if added:
        print(f"switch-on stage on the {len(added)} unknown instances: median "
              f"{statistics.median(added):.3f} CPU-s, total {sum(added):.2f} of "
              f"{sum(totals):.2f} CPU-s ({100 * sum(added) / sum(totals):.1f}%)")


if __name__ == "__main__":
    main()
