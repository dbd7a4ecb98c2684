"""Seeded differential fuzz of views and in-place ops on ``tl.Tensor`` against PyTorch.

Each case is a small random program over one leaf: views (reshape, view, transpose, permute,
t, basic slices), in-place ops on any tensor (with or without grad mode), out-of-place ops,
then a loss over some of the tensors and ``backward()``. Run with torch and with torchlean:

- where both succeed, every tensor's value and the leaf's gradient agree;
- where torch raises in the forward, torchlean raises too (except ``TORCH_GAPS``);
- where torch raises in the backward (it saves values by reference: an output changed in place
  by a recorded op), torchlean may answer from its in-place snapshot, and its gradient must then
  be the program's derivative by central differences in float64 (unless a no_grad write, which
  autograd ignores by definition, is in the program);
- where torchlean refuses and torch answers, the refusal is one of ``CONSERVATIVE`` (a history
  torch rewrites and torchlean does not): a refusal, never a different gradient.

Bounded by a case count, never by time. Run as a script to print the counts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import TorchLeanError

torch = pytest.importorskip("torch")

SEED = 31
COUNT = 300
SHAPES = [(24,), (6, 4), (2, 12), (2, 3, 4), (4, 3, 2)]

# torchlean's refusals where torch answers: what torchlean does not do, and why it refuses.
CONSERVATIVE = {
    "view of the same storage": "torch rewrites a view's base history after an in-place op "
                                "on the view (CopySlices); torchlean refuses the base's later "
                                "uses instead",
    "modified by an inplace operation": "a value whose own node an in-place op replaced, used "
                                        "before by an op that does not read it: torch keeps "
                                        "the old node for that use, torchlean refuses",
}

# torch's refusals in the forward that torchlean answers: torch's message, and why.
TORCH_GAPS = {
    "view size is not compatible": "view() of a layout no view can express: torchlean copies, "
                                   "as reshape does (a program torch runs never gets here)",
}

Step = Callable[[Any, list[Any]], None]


def _program(rng: np.random.Generator
             ) -> tuple[list[Step], list[str], list[int], list[np.ndarray]]:
    """The steps (each run against a module ``m`` and the tensor pool), a note per step, the
    pool indices the loss reads, and their weights (drawn once the shapes are known)."""
    steps: list[Step] = []
    notes: list[str] = []
    shapes: list[tuple[int, ...]] = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    for _ in range(int(rng.integers(3, 9))):
        kind = rng.choice(["view", "view", "inplace", "inplace", "op"])
        # In-place ops mostly on non-leaves (on the leaf, torch and torchlean both refuse).
        i = int(rng.integers(1 if kind == "inplace" and rng.random() < 0.8 else 0, len(shapes)))
        s = shapes[i]
        before = len(steps)
        how, grad_mode = "", True
        if kind == "view":
            how = rng.choice(["reshape", "view", "transpose", "permute", "t", "slice"])
            if how in ("reshape", "view"):
                target = SHAPES[int(rng.integers(len(SHAPES)))]
                steps.append(lambda m, p, i=i, t=target, h=how: p.append(getattr(p[i], h)(*t)))
                shapes.append(target)
            elif how == "transpose" and len(s) >= 2:
                a, b = (int(v) for v in rng.choice(len(s), 2, replace=False))
                steps.append(lambda m, p, i=i, a=a, b=b: p.append(p[i].transpose(a, b)))
                shapes.append(tuple(s[b] if k == a else s[a] if k == b else n
                                    for k, n in enumerate(s)))
            elif how == "permute":
                perm = tuple(int(v) for v in rng.permutation(len(s)))
                steps.append(lambda m, p, i=i, q=perm: p.append(p[i].permute(*q)))
                shapes.append(tuple(s[k] for k in perm))
            elif how == "t" and len(s) == 2:
                steps.append(lambda m, p, i=i: p.append(p[i].t()))
                shapes.append((s[1], s[0]))
            else:  # a basic slice on the first axis: a view in both
                steps.append(lambda m, p, i=i: p.append(p[i][1:]))
                shapes.append((s[0] - 1, *s[1:]))
        elif kind == "inplace":
            how = rng.choice(["add_", "mul_", "relu_", "clamp_", "mul_t"])
            c = float(rng.uniform(0.5, 1.5))
            grad_mode = bool(rng.random() < 0.75)

            def inplace(m: Any, p: list[Any], i: int = i, how: str = how, c: float = c,
                        grad_mode: bool = grad_mode) -> None:
                t = p[i]
                with m.enable_grad() if grad_mode else m.no_grad():
                    if how == "relu_":
                        t.relu_()
                    elif how == "clamp_":
                        t.clamp_(-c, c)
                    elif how == "mul_t":  # by a constant tensor of its shape
                        t.mul_(m.tensor(np.linspace(0.5, 1.5, t.numel(), dtype=np.float32)
                                        .reshape(t.shape)))
                    else:
                        getattr(t, how)(c)
            steps.append(inplace)
        else:
            how = rng.choice(["square", "exp_small", "sigmoid", "mul_other"])

            def op(m: Any, p: list[Any], i: int = i, how: str = how) -> None:
                t = p[i]
                if how == "square":
                    p.append(t * t)
                elif how == "exp_small":
                    p.append((t * 0.1).exp())
                elif how == "sigmoid":
                    p.append(t.sigmoid())
                else:
                    p.append(t * p[2].reshape(-1)[: t.numel()].reshape(t.shape))
            steps.append(op)
            shapes.append(s)
        if len(steps) > before:
            notes.append(f"{kind} {how} of {i}"
                         + (f" (grad {grad_mode})" if kind == "inplace" else ""))
    chosen = sorted({int(v) for v in rng.integers(1, len(shapes), size=3)})
    weights = [rng.standard_normal(shapes[k]).astype(np.float32) for k in chosen]
    return steps, notes, chosen, weights


def _run(m: Any, x0: np.ndarray, steps: list[Step], chosen: list[int],
         weights: list[np.ndarray]) -> tuple[str, Any]:
    """('ok', (values, grad)) or ('error', (step index, message))."""
    x = m.tensor(x0, requires_grad=True)
    pool = [x, x * 1.5, (x * 0.2).exp()]
    for k, step in enumerate(steps):
        try:
            step(m, pool)
        except (RuntimeError, TorchLeanError) as exc:
            return "error", (k, str(exc))
    try:
        loss = sum((pool[k] * m.tensor(w)).sum() for k, w in zip(chosen, weights, strict=True))
        loss.backward()
    except (RuntimeError, TorchLeanError) as exc:
        return "error", (len(steps), str(exc))
    values = [np.asarray(t.detach().numpy(), dtype=np.float64) for t in pool]
    grad = None if x.grad is None else np.asarray(x.grad.numpy(), dtype=np.float64)
    return "ok", (values, grad)


def _numeric_grad(x0: np.ndarray, steps: list[Step], chosen: list[int],
                  weights: list[np.ndarray], h: float = 1e-6) -> np.ndarray:
    """The loss's gradient by central differences of the program run in float64 without
    history (the forward's meaning, views and in-place ops included): the oracle where torch
    refuses a backward that torchlean answers."""
    def loss_at(x: np.ndarray) -> float:
        t = torch.tensor(x)
        pool = [t, t * 1.5, (t * 0.2).exp()]
        for step in steps:
            step(torch, pool)
        return float(sum((pool[k] * torch.tensor(w, dtype=torch.float64)).sum()
                         for k, w in zip(chosen, weights, strict=True)))

    base = x0.astype(np.float64)
    grad = np.zeros_like(base)
    for k in range(base.size):
        up, down = base.copy(), base.copy()
        up.flat[k] += h
        down.flat[k] -= h
        grad.flat[k] = (loss_at(up) - loss_at(down)) / (2 * h)
    return grad


def _case(seed: int) -> str:
    """One program in both libraries: 'agree', 'both raise', 'refused' (a CONSERVATIVE
    refusal), 'torch refused, derivative checked'; an AssertionError for anything else."""
    rng = np.random.default_rng(seed)
    steps, notes, chosen, weights = _program(rng)
    x0 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    theirs = _run(torch, x0, steps, chosen, weights)
    ours = _run(tl, x0, steps, chosen, weights)
    if theirs[0] == "error":
        if ours[0] == "error":
            return "both raise"
        # torch refused: in the forward, torchlean must refuse too; in the backward (a saved
        # value torch keeps by reference, torchlean's in-place snapshot by copy), torchlean's
        # gradient must be the forward program's derivative.
        if any(k in theirs[1][1] for k in TORCH_GAPS):
            return "torch gap"
        if any("grad False" in n for n in notes):
            # A write under no_grad is outside autograd by definition (torch and torchlean
            # ignore it in the gradient), so the program's derivative is no oracle here.
            return "torch refused, no oracle"
        assert theirs[1][0] == len(steps), (
            f"case {seed}: torch raised {theirs[1]!r}, torchlean answered; program {notes}")
        np.testing.assert_allclose(ours[1][1], _numeric_grad(x0, steps, chosen, weights),
                                   rtol=2e-3, atol=2e-3,
                                   err_msg=f"case {seed}: gradient differs from the "
                                           f"program's derivative")
        return "torch refused, derivative checked"
    if ours[0] == "error":
        reason = [k for k in CONSERVATIVE if k in ours[1][1]]
        assert reason, (f"case {seed}: torchlean raised {ours[1]!r} where torch answered; "
                        f"program {notes}")
        return "refused"
    (ov, og), (tv, tg) = ours[1], theirs[1]
    for k, (a, b) in enumerate(zip(ov, tv, strict=True)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                   err_msg=f"case {seed}: tensor {k} differs")
    assert (og is None) == (tg is None), f"case {seed}: gradient present in one only"
    if og is not None:
        np.testing.assert_allclose(og, tg, rtol=1e-4, atol=1e-5,
                                   err_msg=f"case {seed}: gradient differs")
    return "agree"


@pytest.mark.parametrize("block", range(4))
def test_views_and_in_place_ops_agree_with_torch_or_refuse(block: int) -> None:
    counts: dict[str, int] = {}
    per = COUNT // 4
    for seed in range(SEED + block * per, SEED + (block + 1) * per):
        outcome = _case(seed)
        counts[outcome] = counts.get(outcome, 0) + 1
    # The programs exercise the outcomes, a good part of them agreeing with torch.
    assert counts.get("agree", 0) > per // 8, counts
    assert counts.get("both raise", 0) > 0, counts


if __name__ == "__main__":
    totals: dict[str, int] = {}
    for s in range(SEED, SEED + (int(sys.argv[1]) if len(sys.argv) > 1 else COUNT)):
        o = _case(s)
        totals[o] = totals.get(o, 0) + 1
    print(totals)
