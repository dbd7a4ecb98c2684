"""``tl.hvp`` remembers its last traced graph: a repeat runs that graph's reverse pass and
generated plan, with the bits of a fresh trace; any difference in the trace falls back."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.engine import codegen
from torchlean.engine import transforms as T


def _mlp(seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((16, 12)).astype(np.float32) * 0.3,
              rng.standard_normal(16).astype(np.float32) * 0.1,
              rng.standard_normal((5, 16)).astype(np.float32) * 0.3,
              rng.standard_normal(5).astype(np.float32) * 0.1]
    vs = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
    x = rng.standard_normal((8, 12)).astype(np.float32)
    labels = rng.integers(0, 5, size=8)
    return params, vs, x, labels


def _bits(arrays: object) -> list[bytes]:
    return [np.asarray(a).tobytes() for a in arrays]  # type: ignore[union-attr]


def _fresh(fn: object, params: list[np.ndarray], vs: list[np.ndarray]) -> list[bytes]:
    T._HVP_MEMO.clear()
    got = _bits(tl.hvp(fn, params, vs))  # type: ignore[arg-type]
    T._HVP_MEMO.clear()
    return got


def test_repeated_hvp_has_the_bits_of_a_fresh_trace_and_fresh_results() -> None:
    params, vs, x, labels = _mlp()

    def f(w1: object, b1: object, w2: object, b2: object) -> object:
        return F.cross_entropy(F.linear(w2, b2, F.relu(F.linear(w1, b1, x))), labels)

    want = _fresh(f, params, vs)
    held = [tl.hvp(f, params, vs) for _ in range(4)]  # miss, hit (interpreted), hit (plan) x2
    held_bits = [_bits(h) for h in held]
    assert all(b == want for b in held_bits)
    # The repeats ran the remembered graph, the last ones through its generated plan.
    assert T._HVP_MEMO._last is not None
    remembered = T._HVP_MEMO._last[1]
    assert any(isinstance(p, codegen.Plan) for p in remembered._generated.values())
    # Results are fresh arrays: holding earlier calls' results, they stay as they were.
    assert all(a is not b for a, b in zip(held[2], held[3], strict=True))
    more = tl.hvp(f, params, [2 * v for v in vs])
    assert [_bits(h) for h in held] == held_bits
    assert _bits(more) == _fresh(f, params, [2 * v for v in vs])


def test_the_memo_reuses_one_compiled_graph_only_for_the_same_trace() -> None:
    params, vs, x, labels = _mlp(1)
    seen: list[object] = []
    real = T._HvpMemo.recall

    def f(w1: object, b1: object, w2: object, b2: object) -> object:
        return F.cross_entropy(F.linear(w2, b2, F.tanh(F.linear(w1, b1, x))), labels)

    T._HVP_MEMO.clear()
    try:
        T._HvpMemo.recall = lambda self, c: seen.append(real(self, c)) or seen[-1]  # type: ignore
        tl.hvp(f, params, vs)
        tl.hvp(f, params, vs)
        assert seen[0] is seen[1]
        # The data the function closes over changed in place: a constant of the trace differs,
        # so the remembered graph is not used, and the answer follows the new data.
        x[0, 0] += 1.0
        got = _bits(tl.hvp(f, params, vs))
        assert seen[2] is not seen[1]
        T._HvpMemo.recall = real  # type: ignore[method-assign]
        assert got == _fresh(f, params, vs)
    finally:
        T._HvpMemo.recall = real  # type: ignore[method-assign]
        T._HVP_MEMO.clear()


@pytest.mark.parametrize("change", ["op", "attr", "shape", "sign_of_zero"])
def test_a_changed_trace_is_a_miss_with_the_right_answer(change: str) -> None:
    params, vs, x, labels = _mlp(2)
    x[0, 0] = 0.0
    x2 = x.copy()
    x2[0, 0] = -0.0

    def f(w1: object, b1: object, w2: object, b2: object) -> object:
        return F.cross_entropy(F.linear(w2, b2, F.relu(F.linear(w1, b1, x))), labels)

    def g(w1: object, b1: object, w2: object, b2: object) -> object:
        data = x2 if change == "sign_of_zero" else x[:4] if change == "shape" else x
        h = F.linear(w1, b1, data)
        h = (F.tanh(h) if change == "op" else F.relu(F.scale(h, c=0.25)) if change == "attr"
             else F.relu(h))
        return F.cross_entropy(F.linear(w2, b2, h), labels[:4] if change == "shape" else labels)

    if change == "attr":
        def f(w1: object, b1: object, w2: object, b2: object) -> object:  # noqa: F811
            h = F.relu(F.scale(F.linear(w1, b1, x), c=0.5))
            return F.cross_entropy(F.linear(w2, b2, h), labels)

    T._HVP_MEMO.clear()
    for _ in range(3):
        tl.hvp(f, params, vs)  # f's plan is emitted and remembered
    remembered = T._HVP_MEMO._last
    got = _bits(tl.hvp(g, params, vs))
    assert T._HVP_MEMO._last is not remembered
    assert got == _fresh(g, params, vs)


def test_same_bits_tells_signed_zeros_and_dtypes_apart() -> None:
    a = np.zeros(3, np.float32)
    assert codegen.same_bits(a, a.copy())
    assert not codegen.same_bits(a, -a)
    assert not codegen.same_bits(a, a.astype(np.float64))
    assert not codegen.same_bits(a, a[:2])
    nan = np.full(2, np.nan)
    assert codegen.same_bits(nan, nan.copy())
    assert codegen.same_bits(np.arange(6.0).reshape(2, 3).T, np.arange(6.0).reshape(2, 3).T.copy())
