"""W2 (or W3, W5) with and without SGD's in-place BLAS axpy update (issue 26, optim.fast_update).

Times the harness's training step (one SGD step) in one process, the sides interleaved in
shuffled order: torchlean eager and compiled, each with the fast update and with the reference
update (``fast_update.sgd_update`` switched off, so ``p += (-lr) * g`` runs), PyTorch eager and
the hand-written NumPy floor. CPU time (``time.process_time``) at one thread, so a shared
machine's load does not swell one side more than another; medians over rounds and ratios to
PyTorch. Run: ``python benchmarks/bench_fast_update.py [--workload W2] [--rounds N]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torchlean.bench import harness
from torchlean.core import alloc
from torchlean.optim import fast_update


def _reference(step: Callable[[], Any]) -> Callable[[], Any]:
    """``step`` with the fast update off (the reference product and add runs)."""
    real = fast_update.sgd_update

    def run() -> Any:
        fast_update.sgd_update = lambda p, grad, lr: False
        try:
            return step()
        finally:
            fast_update.sgd_update = real

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W2", choices=("W2", "W3", "W5"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=int, default=5, help="steps per timed block")
    args = ap.parse_args()
    alloc.pin_thresholds()  # as the torchlean command does
    limiter = harness.pin_threads(1)
    w = args.workload
    data = harness.make_data(w)
    steps: dict[str, Callable[[], Any]] = {}
    for backend in ("eager", "compiled"):
        steps[f"{backend} fast"] = harness.build_torchlean(w, data, backend).step
        steps[f"{backend} reference"] = _reference(harness.build_torchlean(w, data, backend).step)
    for peer in ("torch", "numpy"):
        impl = harness.build(w, peer, data)
        if not isinstance(impl, str):
            steps[peer] = impl.step
    times = harness.time_interleaved(steps, args.block, args.rounds, warmup=3, clock="cpu")
    title = f"{w} step, CPU ms (one thread, {args.rounds} rounds of {args.block} steps)"
    print(harness.step_table(title, times))
    del limiter


if __name__ == "__main__":
    main()
