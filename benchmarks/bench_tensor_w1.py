"""W1 written with ``tl.Tensor`` operators vs the same chain with torch tensors (issue 24).

The harness's W1 (a 500-op elementwise chain on length-16 float32 vectors, forward + backward)
written with Tensor dunders and methods, ``.sum().backward()``, timed against PyTorch eager in one
process: rounds interleave the two frameworks and the median of many rounds is reported, so load
spikes hit both sides alike.  Run: ``python benchmarks/bench_tensor_w1.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import torchlean as tl

CHAIN_OPS = 500


def chain(x: Any, y: Any, relu: Any, tanh: Any) -> Any:
    """The harness's W1 chain, written once for any tensor type with operators."""
    h = x
    for i in range(CHAIN_OPS // 4):
        h = tanh((h + y) * y)
        h = relu(h) if i % 2 else tanh(h)
    return h.sum()


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(16).astype(np.float32),
            (rng.standard_normal(16) * 0.1).astype(np.float32))


def tl_step(xa: np.ndarray, ya: np.ndarray) -> Any:
    x = tl.tensor(xa, requires_grad=True)
    y = tl.tensor(ya, requires_grad=True)
    chain(x, y, tl.Tensor.relu, tl.Tensor.tanh).backward()  # h.relu(), h.tanh()
    return x.grad, y.grad


def torch_step(torch: Any, xa: np.ndarray, ya: np.ndarray) -> Any:
    x = torch.tensor(xa, requires_grad=True)
    y = torch.tensor(ya, requires_grad=True)
    chain(x, y, torch.relu, torch.tanh).backward()
    return x.grad, y.grad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--block", type=int, default=5, help="steps per timed block")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's intra-op threads (NumPy's elementwise kernels use one)")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    xa, ya = data()
    g_tl, g_t = tl_step(xa, ya), torch_step(torch, xa, ya)
    for a, b in zip(g_tl, g_t, strict=True):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-4, atol=1e-6)
    sides = {"torchlean-tensor": lambda: tl_step(xa, ya),
             "torch": lambda: torch_step(torch, xa, ya)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(3):
        for f in sides.values():
            f()
    for r in range(args.rounds):
        order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
        for name, f in order:
            t0 = time.perf_counter()
            for _ in range(args.block):
                f()
            times[name].append((time.perf_counter() - t0) / args.block)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:18s} {v * 1e3:8.3f} ms/step (median of {args.rounds})")
    print(f"ratio torchlean-tensor / torch = {med['torchlean-tensor'] / med['torch']:.3f} "
          f"({args.threads} thread{'s' if args.threads > 1 else ''})")


if __name__ == "__main__":
    main()
