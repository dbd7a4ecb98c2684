"""W3 eager with and without the tape's fused relu -> max pool reverse step (issue 26).

``Tape._reverse(fuse=True)`` (training passes: ``Stepper`` asks for the leaves' cotangents only)
runs ``relu`` and the max pooling that is its only consumer as one reverse step
(``ops.fast.pool.relu_vjp``). This times the harness's W3 step (the CNN, one SGD step) in one
process, four sides interleaved in shuffled order: torchlean eager with the fusion, the same
with the fusion switched off (the tape's plan run as recorded), torchlean compiled and PyTorch
eager. CPU time (``time.process_time``) at one thread, so a shared machine's load does not
swell one side more than another; the table gives medians over rounds and ratios to PyTorch.
Run: ``python benchmarks/bench_eager_fusion.py [--rounds N] [--block N]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torchlean.bench import harness
from torchlean.core import alloc
from torchlean.engine import tape


def _unfused(step: Callable[[], Any]) -> Callable[[], Any]:
    """``step`` with the fusion off: the tape runs its recorded reverse plan as it is."""
    real = tape._fused_relu_pooling

    def run() -> Any:
        tape._fused_relu_pooling = lambda entries, plan, pools, out: plan
        try:
            return step()
        finally:
            tape._fused_relu_pooling = real

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=int, default=5, help="steps per timed block")
    args = ap.parse_args()
    alloc.pin_thresholds()  # as the torchlean command does
    limiter = harness.pin_threads(1)
    data = harness.make_data("W3")
    steps: dict[str, Callable[[], Any]] = {
        "eager fused": harness.build_torchlean("W3", data, "eager").step,
        "eager unfused": _unfused(harness.build_torchlean("W3", data, "eager").step),
        "compiled": harness.build_torchlean("W3", data, "compiled").step,
    }
    torch_impl = harness.build("W3", "torch", data)
    if not isinstance(torch_impl, str):
        steps["torch"] = torch_impl.step
    times = harness.time_interleaved(steps, args.block, args.rounds, warmup=3, clock="cpu")
    title = f"W3 step, CPU ms (one thread, {args.rounds} rounds of {args.block} steps)"
    print(harness.step_table(title, times))
    del limiter


if __name__ == "__main__":
    main()
