"""ReLU-splitting branch and bound (bounds.relu_bab) on MNIST-FC instances, by CPU time.

Usage: python benchmarks/bench_relu_bab.py [--timeout S] [--set KEY=VALUE ...] NET:PROP ...
(``NET`` 2/4/6 for mnist-net_256x{2,4,6}, ``PROP`` e.g. 3_0.03). Each instance runs
``relu_bab.verify_network`` with the process's CPU time as its clock (the machine is shared:
wall clock would be unfair), and prints status, domains, CPU seconds and the reason. ``--set``
passes search options (``branching=fsb``, ``child_steps=5``, ...; ints/floats parsed).
BLAS runs on ``--threads`` threads (default 1, as ``torchlean vnn``): on a loaded machine two
OpenBLAS threads spin-wait, and the search took 3-4x the CPU time of one thread for the same
domains (256x2 ``prop_1_0.03``: about 70 against 315 domains per CPU-second).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from torchlean.bounds import relu_bab
from torchlean.cli import common
from torchlean.vnn import instance, vnnlib

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "vnncomp2021" / "mnistfc"


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("instances", nargs="+")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--every", type=float, default=0.0,
                        help="print progress every this many CPU seconds (0: never)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    args = parser.parse_args()
    with common.blas_threads(args.threads):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    options = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    nets: dict[str, instance.Network] = {}
    for item in args.instances:
        size, prop = item.split(":")
        if size not in nets:
            nets[size] = instance.Network(SHARED / f"mnist-net_256x{size}.onnx")
        start = time.process_time()
        shown = [0.0]

        def progress(info: dict, shown: list = shown, item: str = item) -> None:
            if args.every and info["seconds"] - shown[0] >= args.every:
                shown[0] = info["seconds"]
                print(f"  {item} {info}", flush=True)

        found = relu_bab.verify_network(nets[size], vnnlib.read(SHARED / f"prop_{prop}.vnnlib"),
                                        timeout=args.timeout, clock=time.process_time,
                                        progress=progress, **options)
        cpu = time.process_time() - start
        print(f"256x{size} prop_{prop} {found.status} domains={found.domains} cpu={cpu:.1f} "
              f"{options} {found.reason}", flush=True)


if __name__ == "__main__":
    main()
