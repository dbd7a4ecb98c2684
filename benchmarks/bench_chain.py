"""Microseconds per op for a chain of small elementwise ops, forward + backward.

A chain of N ops on length-16 float32 vectors cycles add / mul / tanh / relu (add and mul take a
second, constant operand), ends in a sum, and is differentiated back to its input. This measures
per-op overhead (recording, dispatch, the reverse pass), not arithmetic. The torchlean tape runs
side by side with PyTorch eager and HIPS autograd in the same process; a peer that is not
installed is skipped with a note.

    python benchmarks/bench_chain.py [--ops 500] [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np

import torchlean as tl

WIDTH = 16


def torchlean_chain(n_ops: int, x0: np.ndarray, c: np.ndarray) -> Callable[[], None]:
    def run() -> None:
        tape = tl.Tape("float32")
        x = tape.leaf(x0)
        k = tape.leaf(c, requires_grad=False)
        y = x
        for i in range(n_ops):
            r = i % 4
            if r == 0:
                y = tape.add(y, k)
            elif r == 1:
                y = tape.mul(y, k)
            elif r == 2:
                y = tape.tanh(y)
            else:
                y = tape.relu(y)
        out = tape.sum(y)
        tape.backward_scalar(out)

    return run


def torch_chain(n_ops: int, x0: np.ndarray, c: np.ndarray) -> Callable[[], None] | str:
    try:
        import torch
    except ImportError:
        return "PyTorch not installed"
    torch.set_num_threads(1)
    k = torch.tensor(c)

    def run() -> None:
        x = torch.tensor(x0, requires_grad=True)
        y = x
        for i in range(n_ops):
            r = i % 4
            if r == 0:
                y = y + k
            elif r == 1:
                y = y * k
            elif r == 2:
                y = torch.tanh(y)
            else:
                y = torch.relu(y)
        y.sum().backward()

    return run


def autograd_chain(n_ops: int, x0: np.ndarray, c: np.ndarray) -> Callable[[], None] | str:
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        return "HIPS autograd not installed (pip install autograd)"

    def f(x: np.ndarray) -> np.ndarray:
        y = x
        for i in range(n_ops):
            r = i % 4
            if r == 0:
                y = y + c
            elif r == 1:
                y = y * c
            elif r == 2:
                y = anp.tanh(y)
            else:
                y = anp.maximum(y, 0.0)
        return anp.sum(y)

    grad = autograd.grad(f)
    return lambda: grad(x0)


def best_time(run: Callable[[], None], repeats: int) -> float:
    run()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(WIDTH).astype(np.float32)
    c = rng.uniform(0.5, 1.5, WIDTH).astype(np.float32)

    print(f"chain of {args.ops} elementwise ops on float32[{WIDTH}] (add/mul/tanh/relu), "
          f"forward + backward; best of {args.repeats}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}")
    peers: list[tuple[str, Callable[[], None] | str]] = [
        ("torchlean tape", torchlean_chain(args.ops, x0, c)),
        ("pytorch eager", torch_chain(args.ops, x0, c)),
        ("hips autograd", autograd_chain(args.ops, x0, c)),
    ]
    results: dict[str, float] = {}
    for name, run in peers:
        if isinstance(run, str):
            print(f"note: skipping {name}: {run}")
            continue
        results[name] = best_time(run, args.repeats) / args.ops * 1e6
    base = results.get("pytorch eager")
    print(f"\n{'engine':<16} {'us/op':>8} {'vs pytorch':>11}")
    for name, us in results.items():
        ratio = f"{us / base:>10.2f}x" if base else f"{'n/a':>11}"
        print(f"{name:<16} {us:>8.2f} {ratio}")


if __name__ == "__main__":
    main()
