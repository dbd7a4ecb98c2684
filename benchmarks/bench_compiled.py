"""Compiled graph vs eager tape, and hvp vs torch.func, measured side by side in one run.

Workloads (issue 4):
- a chain of 500 small elementwise ops (length-16 float32; add/mul/tanh/relu), forward + backward;
- one training step of an MLP 784-512-512-10, batch 128, float32 (forward, backward, SGD);
- a Hessian-vector product of that MLP's loss (forward-over-reverse), torchlean vs
  torch.func.jvp(torch.func.grad(...)).

Run: python benchmarks/bench_compiled.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

import torchlean as tl
import torchlean.functional as F


def best_time(fn: Callable[[], object], repeat: int, number: int = 1) -> float:
    """Best-of-``repeat`` seconds per call (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def chain_fn(x: object, y: object) -> object:
    h = x
    for i in range(500 // 4):
        h = F.add(h, y)
        h = F.mul(h, y)
        h = F.tanh(h)
        h = F.relu(h) if i % 2 else F.tanh(h)
    return F.sum(h)


def bench_chain(repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(16).astype(np.float32)
    y = (rng.standard_normal(16) * 0.1).astype(np.float32)

    def eager() -> object:
        tape = tl.Tape()
        xi, yi = tape.leaf(x), tape.leaf(y)
        h = xi
        for i in range(500 // 4):
            h = tape.add(h, yi)
            h = tape.mul(h, yi)
            h = tape.tanh(h)
            h = tape.relu(h) if i % 2 else tape.tanh(h)
        return tape.backward_scalar(tape.sum(h))

    compiled = tl.compile(chain_fn, (16,), (16,))
    out = {"eager": best_time(eager, repeat, 5),
           "compiled": best_time(lambda: compiled.value_and_backward(x, y), repeat, 5)}
    try:
        import torch

        xt = torch.tensor(x, requires_grad=True)
        yt = torch.tensor(y, requires_grad=True)

        def torch_step() -> object:
            h = xt
            for i in range(500 // 4):
                h = torch.tanh((h + yt) * yt)
                h = torch.relu(h) if i % 2 else torch.tanh(h)
            return torch.autograd.grad(h.sum(), (xt, yt))

        out["torch eager"] = best_time(torch_step, repeat, 5)
    except ImportError:
        pass
    return out


def mlp_params(rng: np.random.Generator) -> list[np.ndarray]:
    sizes = [784, 512, 512, 10]
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return params


def mlp_loss(w1: object, b1: object, w2: object, b2: object, w3: object, b3: object,
             x: object, y: object) -> object:
    h = F.relu(F.linear(w1, b1, x))
    h = F.relu(F.linear(w2, b2, h))
    return F.cross_entropy(F.linear(w3, b3, h), y)


def bench_mlp(repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    rng = np.random.default_rng(1)
    params = mlp_params(rng)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    labels = rng.integers(0, 10, size=128)
    y = labels.astype(np.float32)
    eager = tl.ScalarTrainer(params, mlp_loss, tl.Options(backend="eager"))
    compiled = tl.ScalarTrainer(params, mlp_loss, tl.Options(backend="compiled"))
    step = {"eager": best_time(lambda: eager.step(0.01, x, y), repeat),
            "compiled": best_time(lambda: compiled.step(0.01, x, y), repeat)}
    hvp: dict[str, float] = {}
    c = tl.compile(mlp_loss, *[p.shape for p in params], x.shape, y.shape)
    vs = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
    # The data are constants of the Hessian (None = zero direction), as in torch.func below.
    hvp["torchlean hvp"] = best_time(lambda: c.hvp([*params, x, y], [*vs, None, None]), repeat)
    try:
        import torch

        tparams = [torch.tensor(p, requires_grad=True) for p in params]
        xt, yt = torch.tensor(x), torch.tensor(labels)
        opt = torch.optim.SGD(tparams, lr=0.01)

        def torch_loss(*ps: torch.Tensor) -> torch.Tensor:
            w1, b1, w2, b2, w3, b3 = ps
            h = torch.relu(torch.nn.functional.linear(xt, w1, b1))
            h = torch.relu(torch.nn.functional.linear(h, w2, b2))
            return torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, w3, b3), yt)

        def torch_step() -> None:
            opt.zero_grad()
            torch_loss(*tparams).backward()
            opt.step()

        step["torch eager"] = best_time(torch_step, repeat)
        plain = tuple(p.detach() for p in tparams)
        tvs = tuple(torch.tensor(v) for v in vs)
        grad_fn = torch.func.grad(torch_loss, argnums=tuple(range(6)))
        hvp["torch.func jvp(grad)"] = best_time(
            lambda: torch.func.jvp(grad_fn, plain, tvs), repeat)
    except ImportError:
        pass
    return step, hvp


def report(title: str, times: dict[str, float], unit: float, unit_name: str, base: str) -> None:
    print(f"\n{title}")
    for name, seconds in times.items():
        ratio = seconds / times[base] if base in times else float("nan")
        print(f"  {name:<22} {seconds * unit:10.1f} {unit_name}   x{ratio:.2f} of {base}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("OPENBLAS_CORETYPE =", os.environ.get("OPENBLAS_CORETYPE"),
          " OPENBLAS_L2_SIZE =", os.environ.get("OPENBLAS_L2_SIZE"))
    chain = bench_chain(args.repeat)
    report("500-op chain, forward + backward (per step)", chain, 1e3, "ms", "eager")
    print(f"  compiled speed-up over eager: x{chain['eager'] / chain['compiled']:.2f}")
    step, hvp = bench_mlp(args.repeat)
    report("MLP 784-512-512-10, batch 128, one SGD step", step, 1e3, "ms", "eager")
    report("MLP hvp (forward-over-reverse)", hvp, 1e3, "ms", "torchlean hvp")


if __name__ == "__main__":
    main()
