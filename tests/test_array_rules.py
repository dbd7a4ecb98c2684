"""The exact array VJPs (``ops.fast.elementwise``, run by ``autodiff.run_reverse`` on
``ARRAY_OPS``) give the reference rules' bits, dtypes and fallbacks (issue 24). No timing here."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.autodiff import ARRAY_RULES, register_array_rule, run_reverse
from torchlean.core.registry import ARRAY_OPS, REGISTRY
from torchlean.engine import tensor as T
from torchlean.ops.fast.elementwise import EXACT

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-30, -1e30, 3e38, 0.5]


def _values(rng: np.random.Generator, dtype: type, n: int = 64) -> np.ndarray:
    """Random values with every special value among them (NaN, infinities, signed zeros)."""
    v = rng.standard_normal(n) * 3
    v[: len(SPECIAL)] = SPECIAL
    rng.shuffle(v)
    with np.errstate(over="ignore"):
        return v.astype(dtype)


def _same_bits(a: object, b: object) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", sorted(EXACT))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_rule_has_the_reference_bits(name: str, dtype: type) -> None:
    prim = REGISTRY[name]
    exact = ARRAY_RULES[prim.vjp]
    rng = np.random.default_rng(len(name))
    for shape in [(64,), (8, 8), ()]:
        n = int(np.prod(shape))
        xs = [_values(rng, dtype)[:n].reshape(shape) for _ in prim.inputs]
        g = _values(rng, dtype)[:n].reshape(shape)
        with np.errstate(all="ignore"):
            out = prim.forward(*xs)
            want = prim.vjp(ARRAY_OPS, g, xs, out)
            got = exact(ARRAY_OPS, g, xs, out)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert _same_bits(a, b), (name, dtype, shape)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_rule_follows_the_reference_on_mixed_dtypes(name: str) -> None:
    # A float64 cotangent on float32 values (and the reverse): the reference promotes; the
    # exact rule either computes the same promotion or falls back to the reference.
    prim = REGISTRY[name]
    exact = ARRAY_RULES[prim.vjp]
    rng = np.random.default_rng(7)
    for xdt, gdt in [(np.float32, np.float64), (np.float64, np.float32)]:
        xs = [_values(rng, xdt) for _ in prim.inputs]
        g = _values(rng, gdt)
        with np.errstate(all="ignore"):
            out = prim.forward(*xs)
            for a, b in zip(exact(ARRAY_OPS, g, xs, out), prim.vjp(ARRAY_OPS, g, xs, out),
                            strict=True):
                assert _same_bits(a, b), (name, xdt, gdt)


def test_only_the_array_interpreter_runs_the_exact_rules() -> None:
    calls: list[str] = []
    tanh = REGISTRY["tanh"]
    exact = ARRAY_RULES.pop(tanh.vjp)
    try:
        register_array_rule(tanh.vjp, lambda *a: calls.append("exact") or exact(*a))
        x = tl.tensor(np.linspace(-2, 2, 5, dtype=np.float32), requires_grad=True)
        x.tanh().sum().backward()
        assert calls == ["exact"]
        gx = x.grad.numpy().copy()
        x.grad = None
        y = x.tanh().sum()
        (g,) = tl.autograd.grad(y, x, create_graph=True)  # recorded: the reference rule
        assert calls == ["exact"] and g.requires_grad
        assert np.array_equal(g.detach().numpy(), gx)
        with pytest.raises(TypeError, match="already registered"):
            register_array_rule(tanh.vjp, exact)
    finally:
        ARRAY_RULES[tanh.vjp] = exact


def test_driver_gradient_equals_reference_driver_bitwise() -> None:
    # The W1 chain through run_reverse with and without the exact rules: the same bits.
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.standard_normal(16).astype(np.float32), requires_grad=True)
    y = tl.tensor((rng.standard_normal(16) * 0.1).astype(np.float32), requires_grad=True)
    h = x
    for i in range(40):
        h = ((h + y) * y).tanh() - y
        h = h.relu() if i % 2 else h.sigmoid().exp()
    out = h.sum()
    nodes, _ = T._graph_of([out])
    position = {t: k for k, t in enumerate(nodes)}
    plan = T._plan_of(nodes, position)
    values = [t._value for t in nodes]
    seed = np.ones((), np.float32)
    fast = run_reverse(plan, values, len(nodes) - 1, seed, True, ARRAY_OPS)
    saved = dict(ARRAY_RULES)
    ARRAY_RULES.clear()
    try:
        ref = run_reverse(plan, values, len(nodes) - 1, seed, True, ARRAY_OPS)
    finally:
        ARRAY_RULES.update(saved)
    assert sum(g is not None for g in fast) == len(nodes)
    for a, b in zip(fast, ref, strict=True):
        assert _same_bits(a, b)


def test_the_driver_sums_with_the_add_forward_bits() -> None:
    add = REGISTRY["add"].forward
    fast = ARRAY_RULES[add]
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        a, b = _values(rng, dtype), _values(rng, dtype)
        with np.errstate(all="ignore"):
            assert _same_bits(fast(a, b), add(a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_relu_forward_is_maximum_with_zero(dtype: type) -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(-5, 5, 64) if dtype is np.int64 else _values(rng, dtype)
    assert _same_bits(REGISTRY["relu"].forward(x), np.maximum(x, 0))
