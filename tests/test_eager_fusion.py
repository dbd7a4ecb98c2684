"""The eager tape's fused relu -> max pool reverse step (``Tape._reverse(fuse=True)``).

Training reads only the leaves' cotangents, so ``backward_scalar(leaves_only=True)`` may run a
relu whose only consumer is a max pooling and that pooling as one reverse step
(``ops.fast.pool.relu_vjp``). These check that the leaves' cotangents are bitwise those of the
two steps, that the fusion is taken exactly where it applies (and not where the relu output has
another consumer, or the caller asked for every node's cotangent), and that a wrong fused rule
would be caught by the comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from torchlean.core.registry import fast_kernels
from torchlean.engine import tape as tape_mod
from torchlean.engine.tape import Tape


def _cnn(t: Tape, rng: np.random.Generator, dtype: str, reuse: bool) -> tuple[int, list[int]]:
    """conv -> relu -> pool twice, linear, sum of squares; ``reuse``: the first relu's output
    also feeds the loss directly (two consumers: not fusable)."""
    x = t.leaf(rng.standard_normal((4, 2, 8, 8)).astype(dtype), requires_grad=False)
    w1 = t.leaf(rng.standard_normal((3, 2, 3, 3)).astype(dtype))
    b1 = t.leaf(rng.standard_normal(3).astype(dtype))
    w2 = t.leaf(rng.standard_normal((5, 3, 3, 3)).astype(dtype))
    b2 = t.leaf(rng.standard_normal(5).astype(dtype))
    w3 = t.leaf(rng.standard_normal((2, 5 * 2 * 2)).astype(dtype))
    b3 = t.leaf(rng.standard_normal(2).astype(dtype))
    r1 = t.relu(t.conv2d(w1, b1, x, padding=1))
    h = t.max_pool2d(r1, kernel_size=2)
    h = t.max_pool2d(t.relu(t.conv2d(w2, b2, h, padding=1)), kernel_size=2)
    y = t.linear(w3, b3, t.reshape(h, shape=(4, 20)))
    loss = t.sum(t.mul(y, y))
    if reuse:
        loss = t.add(loss, t.sum(r1))
    return loss, [w1, b1, w2, b2, w3, b3]


def _grads(dtype: str, reuse: bool, leaves_only: bool) -> tuple[dict[int, Any], list[int]]:
    t = Tape(dtype)
    loss, leaves = _cnn(t, np.random.default_rng(5), dtype, reuse)
    with fast_kernels(True):
        return t.backward_scalar(loss, leaves_only=leaves_only), leaves


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reverse steps the fusion replaced, per pass."""
    replaced: list[int] = []
    real = tape_mod._fused_relu_pooling

    def spy(entries: Any, plan: Any, pools: Any, out: int) -> Any:
        run = real(entries, plan, pools, out)
        replaced.append(sum(a is not b for a, b in zip(run, plan, strict=True)))
        return run

    monkeypatch.setattr(tape_mod, "_fused_relu_pooling", spy)
    return replaced


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reuse", [False, True])
def test_fused_reverse_gives_the_leaves_bitwise(monkeypatch: pytest.MonkeyPatch, dtype: str,
                                                reuse: bool) -> None:
    want, leaves = _grads(dtype, reuse, leaves_only=False)
    replaced = _spy(monkeypatch)
    got, _ = _grads(dtype, reuse, leaves_only=True)
    # Both poolings fused, or only the second when the first relu output is also summed.
    assert replaced == [1 if reuse else 2]
    for i in leaves:
        assert got[i].dtype == want[i].dtype
        assert got[i].tobytes() == want[i].tobytes(), f"leaf {i}"


def test_every_node_cotangent_unless_leaves_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default pass forms every reached node's cotangent (relu outputs included); the
    leaves-only pass skips the fused relus' outputs."""
    replaced = _spy(monkeypatch)
    full, _ = _grads("float32", False, leaves_only=False)
    assert replaced == []  # the default never calls the fusion
    fused, _ = _grads("float32", False, leaves_only=True)
    assert set(fused) < set(full)
    assert len(set(full) - set(fused)) == 2  # the two relu outputs


def test_a_wrong_fused_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fused rule that forgets relu's mask (routes g into windows whose maximum is 0)
    changes the leaves' cotangents, so the bitwise comparison above would fail."""
    want, leaves = _grads("float32", False, leaves_only=False)

    def unmasked(fused: Any) -> Any:
        return lambda g, x, out, **a: fused(g, x + 1, out, **a)

    wrong = {prim: unmasked(fused) for prim, fused in tape_mod.RELU_POOLS.items()}
    monkeypatch.setattr(tape_mod, "RELU_POOLS", wrong)
    got, _ = _grads("float32", False, leaves_only=True)
    assert any(got[i].tobytes() != want[i].tobytes() for i in leaves)


def test_reference_kernels_are_not_fused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the fast kernel set the tape runs the recorded steps as they are."""
    replaced = _spy(monkeypatch)
    t = Tape("float32")
    loss, _ = _cnn(t, np.random.default_rng(5), "float32", False)
    with fast_kernels(False):
        t.backward_scalar(loss, leaves_only=True)
    assert replaced == []
