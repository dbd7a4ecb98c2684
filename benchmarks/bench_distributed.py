"""Data-parallel scaling of torchlean.distributed: examples/s on 1 and 2 MPI ranks.

Workloads (float32, synthetic data, SGD with momentum, eager backend):

- W2: MLP 784-512-512-10, global batch 256;
- CNN: ``torchlean.models.cnn`` (two conv/ReLU/max-pool stages, channels 16 and 32) on 1x28x28
  images, global batch 256.

For each, ``python benchmarks/bench_distributed.py`` launches itself under ``mpiexec -n 1``
and ``-n 2`` with one BLAS thread per rank, and reports:

- examples/s (global batch x steps / wall time of the timed steps, rank 0's clock; 1 rank runs
  the plain single-process loop, not the data-parallel one);
- allreduce time per step: a blocking ``Allreduce`` of the same gradient buckets, timed alone;
- exposed communication per step: what the data-parallel step spends packing buffers, waiting
  for its non-blocking allreduces and unpacking (``DataParallel.stats``), and its share of the
  step;
- the fraction of the allreduce hidden by overlap: 1 - wait / blocking allreduce time. The
  buckets start only after the backward pass returns (see torchlean.distributed), so little
  can be hidden; the figure says how little. The wait also holds any time spent waiting for
  the slower rank (load imbalance, or a machine shared with other work), so on a loaded
  machine it overstates the cost of communication itself; pack, wait and unpack are printed
  separately.

Steps are fixed (``--steps``, after ``--warmup``); each configuration runs ``--repeats`` times,
interleaved, and the fastest run is kept. Nothing is timed against a deadline.
``--json PATH`` writes the table as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

GLOBAL_BATCH = 256
WORKLOADS = ("w2", "cnn")


def _build(name: str):  # noqa: ANN202
    from torchlean import nn
    from torchlean.zoo import models

    if name == "w2":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
        shape: tuple[int, ...] = (784,)
    else:
        model = models.cnn({"image_shape": [1, 28, 28], "channels": [16, 32],
                            "num_classes": 10})
        shape = (1, 28, 28)
    return model, shape


def worker(name: str, steps: int, warmup: int, out: str) -> None:
    from threadpoolctl import threadpool_limits

    from torchlean import optim
    from torchlean.engine import ops_interface as F
    from torchlean.training.distributed import DataParallel, communicator
    from torchlean.training.fit import _Stepper

    threadpool_limits(1)
    comm = communicator(True)
    model, shape = _build(name)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    stepper = _Stepper(model, F.cross_entropy, "eager", "float32")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH, *shape)).astype(np.float32)
    y = rng.integers(0, 10, size=GLOBAL_BATCH)
    dp = DataParallel(model.parameters(), opt, comm) if comm.world_size > 1 else None
    if dp is not None:
        dp.start({"workload": name})

    def step() -> None:
        opt.zero_grad()
        if dp is None:
            stepper.loss_and_grads(x, y)
        else:
            dp.loss_and_grads(stepper, x, y)
        opt.step()

    for _ in range(warmup):
        step()
    if dp is not None:
        dp.stats.update(steps=0, pack_s=0.0, wait_s=0.0, unpack_s=0.0)
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    comm.barrier()
    seconds = time.perf_counter() - t0
    result = {"workload": name, "ranks": comm.world_size, "steps": steps,
              "examples_per_s": GLOBAL_BATCH * steps / seconds,
              "step_ms": 1e3 * seconds / steps,
              "params": int(sum(np.prod(p.shape) for p in model.parameters()))}
    if dp is not None:
        s = dp.stats
        exposed = (s["pack_s"] + s["wait_s"] + s["unpack_s"]) / s["steps"]
        # The same buckets, blocking and alone: what communication costs with nothing to hide.
        comm.barrier()
        reps = max(steps, 10)
        t1 = time.perf_counter()
        for _ in range(reps):
            for _, buf in dp._buckets:
                comm.comm.Allreduce(comm._mpi.IN_PLACE, buf, op=comm._mpi.SUM)
        blocking = (time.perf_counter() - t1) / reps
        wait = s["wait_s"] / s["steps"]
        result.update(allreduce_ms=1e3 * blocking, exposed_comm_ms=1e3 * exposed,
                      wait_ms=1e3 * wait, pack_ms=1e3 * s["pack_s"] / s["steps"],
                      unpack_ms=1e3 * s["unpack_s"] / s["steps"],
                      exposed_fraction_of_step=exposed / (seconds / steps),
                      hidden_fraction=max(0.0, 1.0 - wait / blocking) if blocking > 0 else 0.0,
                      buckets=len(dp._buckets))
    if comm.is_main:
        Path(out).write_text(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.steps, args.warmup, args.worker[1])
        return
    mpiexec = Path(sys.executable).parent / "mpiexec"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    best: dict[tuple[str, int], dict] = {}
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load:.1f} at start; 1 BLAS thread per rank; "
          f"best of {args.repeats} interleaved runs of {args.steps} steps")
    # Interleaved repeats, best kept: a shared machine's load drifts, and the best run is the
    # one least disturbed by other work.
    for _ in range(args.repeats):
        for name in WORKLOADS:
            for ranks in (1, 2):
                out = Path(f"/tmp/bench_distributed_{os.getpid()}_{name}_{ranks}.json")
                cmd = [str(mpiexec), "-n", str(ranks), sys.executable, __file__, "--steps",
                       str(args.steps), "--warmup", str(args.warmup), "--worker", name, str(out)]
                subprocess.run(cmd, check=True, env=env)
                row = json.loads(out.read_text())
                out.unlink()
                key = (name, ranks)
                if key not in best or row["examples_per_s"] > best[key]["examples_per_s"]:
                    best[key] = row
    rows = [best[(name, ranks)] for name in WORKLOADS for ranks in (1, 2)]
    base = {r["workload"]: r["examples_per_s"] for r in rows if r["ranks"] == 1}
    header = (f"{'workload':8} {'ranks':>5} {'ex/s':>9} {'speedup':>8} {'step ms':>8} "
              f"{'allreduce ms':>13} {'exposed ms':>11} {'% of step':>10} {'hidden':>7}")
    print(header)
    for r in rows:
        r["speedup"] = r["examples_per_s"] / base[r["workload"]]
        extra = (f"{r['allreduce_ms']:>13.2f} {r['exposed_comm_ms']:>11.2f} "
                 f"{100 * r['exposed_fraction_of_step']:>9.1f}% "
                 f"{100 * r['hidden_fraction']:>6.0f}%" if r["ranks"] > 1 else
                 f"{'-':>13} {'-':>11} {'-':>10} {'-':>7}")
        print(f"{r['workload']:8} {r['ranks']:>5} {r['examples_per_s']:>9.0f} "
              f"{r['speedup']:>7.2f}x {r['step_ms']:>8.1f} {extra}")
    for r in rows:
        if r["ranks"] > 1:
            print(f"{r['workload']}: exposed = pack {r['pack_ms']:.2f} + wait {r['wait_ms']:.2f} "
                  f"+ unpack {r['unpack_ms']:.2f} ms per step over {r['buckets']} bucket(s); "
                  "the wait includes waiting for the slower rank")
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    if args.json:
        Path(args.json).write_text(json.dumps({"load_start": load, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
