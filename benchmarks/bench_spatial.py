"""Forward + backward time of the spatial and sequence ops: torchlean tape vs PyTorch eager.

Run: ``python benchmarks/bench_spatial.py [--repeat N]``. Each case records the op on a fresh
float32 tape, sums the output with a fixed random seed cotangent, and runs the reverse pass; the
PyTorch column does the same with autograd in the same process. Times are medians in
milliseconds; ratio = torchlean / PyTorch (target: <= 1.5).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import torchlean as tl


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def _cases(rng: np.random.Generator) -> list[tuple[str, list[np.ndarray], str, dict[str, Any],
                                                    Callable[..., Any]]]:
    def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def torch_conv(torch: Any, w: Any, b: Any, x: Any) -> Any:
        return torch.nn.functional.conv2d(x, w, b, padding=1)

    def torch_pool(torch: Any, x: Any) -> Any:
        return torch.nn.functional.max_pool2d(x, 2)

    def torch_ln(torch: Any, x: Any, g: Any, b: Any) -> Any:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps=1e-6)

    def torch_mha(torch: Any, wq: Any, wk: Any, wv: Any, wo: Any, x: Any) -> Any:
        b, n, dm = x.shape
        h = 4
        d = wq.shape[1] // h

        def heads(m: Any) -> Any:
            return m.reshape(b, n, h, d).transpose(1, 2)

        q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
        p = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
        return ((p @ v).transpose(1, 2).reshape(b, n, h * d)) @ wo

    return [
        ("conv2d (32,16,28,28) 32x3x3 pad 1",
         [f32(32, 16, 3, 3, scale=0.1), f32(32), f32(32, 16, 28, 28)],
         "conv2d", {"stride": 1, "padding": 1}, torch_conv),
        ("max_pool2d 2x2 (32,32,28,28)", [f32(32, 32, 28, 28)], "max_pool2d",
         {"kernel_size": 2}, torch_pool),
        ("layer_norm (8,32,64)", [f32(8, 32, 64), f32(64), f32(64)], "layer_norm",
         {"eps": 1e-6}, torch_ln),
        ("attention 4 heads n=32 d=64 B=8",
         [f32(64, 64, scale=0.125), f32(64, 64, scale=0.125), f32(64, 64, scale=0.125),
          f32(64, 64, scale=0.125), f32(8, 32, 64)],
         "multi_head_attention", {"num_heads": 4}, torch_mha),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch not installed: showing torchlean times only")

    rows = []
    for label, inputs, op, attrs, torch_fn in _cases(rng):
        probe = tl.Tape(dtype="float32")
        ids = [probe.leaf(a) for a in inputs]
        seed = rng.standard_normal(probe.value(probe.apply(op, *ids, **attrs)).shape)
        seed = seed.astype(np.float32)

        def run_tl(inputs: list[np.ndarray] = inputs, op: str = op,
                   attrs: dict[str, Any] = attrs, seed: np.ndarray = seed) -> None:
            tape = tl.Tape(dtype="float32")
            leaf_ids = [tape.leaf(a) for a in inputs]
            out = tape.apply(op, *leaf_ids, **attrs)
            tape.backward_dense(out, seed)

        t_tl = _median_ms(run_tl, args.repeat)
        t_torch = float("nan")
        if torch is not None:
            tensors = [torch.tensor(a, requires_grad=True) for a in inputs]
            tseed = torch.tensor(seed)

            def run_torch(tensors: list[Any] = tensors, fn: Any = torch_fn,
                          tseed: Any = tseed) -> None:
                for t in tensors:
                    t.grad = None
                fn(torch, *tensors).backward(tseed)

            t_torch = _median_ms(run_torch, args.repeat)
        rows.append((label, t_tl, t_torch))

    width = max(len(r[0]) for r in rows)
    threads = torch.get_num_threads() if torch is not None else "-"
    print(f"forward + backward, float32, median of {args.repeat} (torch threads: {threads})")
    print(f"{'case':<{width}}  {'torchlean ms':>12}  {'pytorch ms':>10}  {'ratio':>6}")
    for label, a, b in rows:
        print(f"{label:<{width}}  {a:>12.3f}  {b:>10.3f}  {a / b:>6.2f}")


if __name__ == "__main__":
    main()
