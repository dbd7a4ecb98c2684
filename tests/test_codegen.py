"""Generated plans (engine/codegen.py) against the interpreted plan: bitwise equal, and a fallback
to the interpreter wherever a plan cannot be emitted or cannot run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.bench import harness as H
from torchlean.core.registry import REGISTRY, fast_kernels
from torchlean.engine import codegen, transforms
from torchlean.engine.graph import Graph, GraphBuilder
from torchlean.ops.fast import pool as fast_pool


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return bool(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())


def _interpreted(c: Any, run: Any) -> Any:
    c.codegen = False
    try:
        return run()
    finally:
        c.codegen = True


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("workload", ["W1", "W2", "W3", "W5"])
def test_training_step_bitwise_equal_to_interpreter(workload: str, fast: bool) -> None:
    """With either kernel set: W5's attention and layer norm (fast kernels with explicit
    residuals, kept in the generated function's locals) and W3's convolution and pooling (fast
    kernels through the residual store) are generated code too, bitwise equal to the interpreted
    plan running the same kernel set."""
    data = H.make_data(workload)
    loss, inputs = H._tl_loss(workload, data), H._tl_inputs(workload, data)
    params = [p.copy() for p in data["params"]]
    c = tl.compile(loss, *[p.shape for p in params], *[x.shape for x in inputs],
                   wrt=tuple(range(len(params))))
    with fast_kernels(fast):
        ref_value, ref_grads = _interpreted(c, lambda: c.value_and_backward(*params, *inputs))
        for _ in range(3):  # interpreted, then traced and emitted, then the generated function
            value, grads = c.value_and_backward(*params, *inputs)
            assert _same(value, ref_value)
            assert len(grads) == len(ref_grads)
            assert all(_same(g, r) for g, r in zip(grads, ref_grads, strict=True))
        plans = list(c._generated.values())
        assert len(plans) == 1 and plans[0] is not None  # it really ran generated code
        uses_fast = fast and any(n.op is not None and n.op.fast_vjp is not None
                                 for n in c.graph.nodes)
        if uses_fast and workload == "W5":  # the explicit halves, not the store
            assert "forward_saving" in repr(plans[0].fn.__globals__.values())
            # The first layer norm's input is data: its cotangent is not computed.
            assert "needed=" in plans[0].source
        if uses_fast and workload == "W3":  # relu -> max pool's reverse steps fused
            fused = {id(f) for f in fast_pool.RELU_FUSED.values()}
            assert any(id(v) in fused for v in plans[0].fn.__globals__.values())
        # forward too
        ref_out = _interpreted(c, lambda: c.forward(*params, *inputs))
        for _ in range(3):
            assert _same(c.forward(*params, *inputs), ref_out)
    # A plan traced with one kernel set never runs under the other.
    with fast_kernels(not fast):
        other = _interpreted(c, lambda: c.value_and_backward(*params, *inputs))
        got = c.value_and_backward(*params, *inputs)
        assert all(_same(g, r) for g, r in zip(got[1], other[1], strict=True))


def _w4_hvp() -> tuple[Any, Any]:
    """W4's loss compiled with respect to its parameters, and a call of its hvp at W4's point
    and direction."""
    data = H.make_data("W4")
    loss, (x, y) = H._tl_loss("W4", data), H._tl_inputs("W4", data)
    params, vs = data["params"], data["v"]
    c = tl.compile(loss, *[p.shape for p in params], x.shape, y.shape,
                   wrt=tuple(range(len(params))))
    return c, lambda: c.hvp([*params, x, y], [*vs, None, None])


def test_hvp_bitwise_equal_to_interpreter() -> None:
    c, hvp = _w4_hvp()
    ref = _interpreted(c, hvp)
    for _ in range(3):
        got = hvp()
        assert all(_same(g, r) for g, r in zip(got, ref, strict=True))
    assert all(p is not None for p in c._generated.values())


def test_outputs_are_fresh_and_buffers_reused_safely() -> None:
    """Outputs of one call survive the next; a view of an intermediate (reshape) returned as a
    gradient never lives in a reused buffer."""

    def f(x: Any, w: Any) -> Any:
        h = F.tanh(F.mul(x, w))
        h = F.reshape(F.relu(F.add(h, x)), shape=(12,))
        return F.sum(F.square(h))

    rng = np.random.default_rng(0)
    c = tl.compile(f, (3, 4), (3, 4), dtype="float64")
    x1, w1, x2, w2 = (rng.standard_normal((3, 4)) for _ in range(4))
    c.value_and_backward(x2, w2)  # the first call interprets; the plan runs from the second
    first = c.value_and_backward(x1, w1)
    kept = [np.array(first[0]), *[g.copy() for g in first[1]]]
    second = c.value_and_backward(x2, w2)
    assert _same(first[0], kept[0]) and all(_same(g, k) for g, k in zip(first[1], kept[1:],
                                                                           strict=True))
    ref = _interpreted(c, lambda: c.value_and_backward(x2, w2))
    assert _same(second[0], ref[0]) and all(_same(a, b) for a, b in zip(second[1], ref[1],
                                                                          strict=True))
    plan = next(iter(c._generated.values()))
    assert plan is not None and plan.n_buffers >= 1


def test_every_primitive_sample_bitwise() -> None:
    """Each differentiable primitive, on its first sample: value and input cotangents of
    sum(op(x) * w) from a generated plan equal the interpreted graph's, bit for bit (or no plan
    was emitted, and the interpreter is what runs)."""
    rng = np.random.default_rng(0)
    emitted = 0
    for name, prim in sorted(REGISTRY.items()):
        if prim.nondiff or prim.index_inputs:
            continue
        samples = prim.samples(rng)
        if not samples:
            continue
        sample = samples[0]
        dtype = np.float64
        g = Graph(dtype)
        b = GraphBuilder(g)
        leaves = [b.input(np.shape(x)) for x in sample.inputs]
        try:
            out = b.record(prim, leaves, dict(sample.attrs))
        except Exception:  # noqa: BLE001  (samples with attrs the graph builder refuses)
            continue
        weight = b.const(rng.standard_normal(out.shape))
        total = b.record(REGISTRY["sum"], [b.record(REGISTRY["mul"], [out, weight], {})], {})
        g.outputs = [total.id]
        arrays = [np.asarray(x, dtype=dtype) for x in sample.inputs]
        plan = codegen.emit_value_and_backward(g, arrays)
        if plan is None:
            continue
        emitted += 1
        values = g.evaluate(arrays)
        grads = g.backprop(values, g.output, np.ones((), dtype))
        got = plan.run(arrays)
        assert got is not None
        assert _same(got[0], values[g.output]), name
        for k, i in enumerate(g.inputs):
            ref = np.zeros_like(values[i]) if grads[i] is None else grads[i]
            assert _same(got[1 + k], ref), name
    assert emitted >= 40  # most primitives do emit


def test_fallback_when_emission_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("cannot emit")

    monkeypatch.setattr(codegen, "_generate", broken)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5,))
    c = tl.compile(lambda v: F.sum(F.tanh(v)), (5,), dtype="float64")
    c.value_and_backward(x)
    value, (g,) = c.value_and_backward(x)
    assert list(c._generated.values()) == [None]  # no plan: the interpreter ran
    np.testing.assert_allclose(g, 1 - np.tanh(x) ** 2, rtol=1e-12)
    assert np.isclose(value, np.tanh(x).sum())


def test_busy_plan_falls_back_to_interpreter() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5,))
    c = tl.compile(lambda v: F.sum(F.exp(v)), (5,), dtype="float64")
    c.value_and_backward(x)
    c.value_and_backward(x)
    plan = next(iter(c._generated.values()))
    assert plan is not None
    assert plan._lock.acquire(blocking=False)
    try:  # as if another thread were running the plan: this call interprets
        assert plan.run([x]) is None
        _, (g,) = c.value_and_backward(x)
        assert _same(g, np.exp(x))
    finally:
        plan._lock.release()


def test_a_one_off_transform_emits_nothing() -> None:
    """``tl.grad`` compiles per call: its single call interprets, so it never pays for tracing
    and emitting a plan it would use once."""
    x = np.linspace(-1.0, 1.0, 5)
    c = tl.compile(lambda v: F.sum(F.tanh(v)), (5,), dtype="float64")
    c.value_and_backward(x)
    assert list(c._generated.values()) == [transforms._SEEN_ONCE]
    np.testing.assert_allclose(tl.grad(lambda v: F.sum(F.tanh(v)))(x), 1 - np.tanh(x) ** 2,
                               rtol=1e-12)


def test_ufunc_table_matches_kernels() -> None:
    """The ops emitted as direct ufunc calls give their kernel's bits on every sample (the
    trace also checks each call; this keeps the table honest)."""
    rng = np.random.default_rng(3)
    for name, (ufunc, how) in codegen._UFUNCS.items():
        prim = REGISTRY[name]
        for sample in prim.samples(rng):
            for dtype in (np.float32, np.float64):
                xs = [np.asarray(x, dtype=dtype) for x in sample.inputs]
                args = how(xs, dict(sample.attrs))
                assert args is not None, name
                assert _same(ufunc(*args), prim.forward(*xs, **sample.attrs)), name


def _kernel_calls(plan: Any, kernel: Any) -> int:
    """How many statements of a generated plan call ``kernel`` (by its bound global name)."""
    names = [n for n, v in plan.fn.__globals__.items() if v is kernel]
    return sum(line.count(f"{n}(") for n in names for line in plan.source.splitlines())


def _w4_hvp_plan() -> tuple[Any, tuple[Any, ...], tuple[Any, ...], Any]:
    c, hvp = _w4_hvp()
    ref = _interpreted(c, hvp)
    got = hvp()
    got = hvp()  # the generated plan
    (plan,) = c._generated.values()
    assert plan is not None
    return plan, got, ref, hvp


def test_common_calls_are_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forward-over-reverse computes relu's mask twice per layer (its VJP, then its tangent
    rule): the generated hvp computes it once, with the interpreter's bits; without the pass
    both calls stay."""
    mask = REGISTRY["positive_mask"].forward
    plan, got, ref, _ = _w4_hvp_plan()
    assert _kernel_calls(plan, mask) == 2  # two relu layers
    assert all(_same(g, r) for g, r in zip(got, ref, strict=True))
    monkeypatch.setattr(codegen, "_share_common_calls", lambda *_: 0)
    unshared, got2, _, _ = _w4_hvp_plan()
    assert _kernel_calls(unshared, mask) == 4
    assert all(_same(g, r) for g, r in zip(got2, ref, strict=True))


def test_common_calls_leave_other_plans_alone_and_outputs_distinct() -> None:
    """A plan without repeated calls is emitted as before; two returned gradients made by the
    same call on the same values stay two fresh arrays."""

    def distinct(x: Any, w: Any) -> Any:
        return F.sum(F.mul(F.tanh(x), w))

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    tracer = codegen._Tracer()
    c = tl.compile(distinct, (3, 4), (3, 4), dtype="float64")
    values, _ = codegen._trace_forward(tracer, c.graph, [x, w])
    assert codegen._share_common_calls(tracer, [values[c.graph.output]]) == 0

    def twice(x: Any, y: Any, w: Any) -> Any:  # d/dx = d/dy = w: one call, returned twice
        return F.add(F.sum(F.mul(x, w)), F.sum(F.mul(y, w)))

    c2 = tl.compile(twice, (3, 4), (3, 4), (3, 4), dtype="float64")
    for _ in range(3):
        _, (gx, gy, _gw) = c2.value_and_backward(x, x, w)
    assert c2._generated and all(p is not None for p in c2._generated.values())
    assert _same(gx, w) and _same(gy, w) and not np.shares_memory(gx, gy)
    gx[...] = 0  # a caller writing one gradient leaves the other alone
    assert _same(gy, w)


def test_untouched_outputs_are_zeros_from_the_shape() -> None:
    """The hvp's entries for the data (zero directions, zero gradients) are ``zeros`` of the
    shape: no ``zeros_like`` of a zero gradient computed just to be read (nor a zero bias for
    linear's tangent-input product), and fresh arrays on every call."""
    plan, got, ref, again = _w4_hvp_plan()
    assert _kernel_calls(plan, np.zeros) == 2  # x's and y's entries
    assert _kernel_calls(plan, np.zeros_like) == 0
    assert _kernel_calls(plan, REGISTRY["zeros_like"].forward) == 0
    assert all(_same(g, r) for g, r in zip(got, ref, strict=True))
    assert not np.any(got[6]) and not np.any(got[7])
    second = again()
    assert second[6] is not got[6] and not np.shares_memory(second[6], got[6])


def test_constant_chains_are_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reverse pass's seed chain (``ones(())``, scaled, broadcast over the batch by
    cross-entropy's sum) depends on no input: the generated plan computes it once, while
    tracing, and gives the interpreter's bits; without the pass it is recomputed per call."""
    data = H.make_data("W2")
    loss, inputs = H._tl_loss("W2", data), H._tl_inputs("W2", data)
    params = [p.copy() for p in data["params"]]
    broadcast = REGISTRY["broadcast_to"].forward

    def plan_and_grads() -> tuple[Any, Any, Any]:
        c = tl.compile(loss, *[p.shape for p in params], *[x.shape for x in inputs],
                       wrt=tuple(range(len(params))))
        ref = _interpreted(c, lambda: c.value_and_backward(*params, *inputs))
        for _ in range(2):
            got = c.value_and_backward(*params, *inputs)
        (plan,) = c._generated.values()
        assert plan is not None
        return plan, got, ref

    plan, got, ref = plan_and_grads()
    assert _kernel_calls(plan, np.ones) == 0 and _kernel_calls(plan, broadcast) == 0
    assert _same(got[0], ref[0]) and all(_same(g, r) for g, r in zip(got[1], ref[1],
                                                                      strict=True))
    monkeypatch.setattr(codegen, "_fold_constants", lambda *_: 0)
    unfolded, got2, _ = plan_and_grads()
    assert _kernel_calls(unfolded, np.ones) == 1 and _kernel_calls(unfolded, broadcast) == 1
    assert all(_same(g, r) for g, r in zip(got2[1], ref[1], strict=True))


def test_folding_never_returns_shared_memory() -> None:
    """A gradient that is a constant (d sum(x) / dx: the seed broadcast) is returned fresh on
    every call, so a caller writing into it changes nothing for the next call; a reshape to
    the shape its input has is no call at all."""

    def f(x: Any, w: Any) -> Any:
        return F.add(F.sum(x), F.sum(F.reshape(F.mul(x, w), shape=(3, 4))))

    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    c = tl.compile(f, (3, 4), (3, 4), dtype="float64")
    firsts = [c.value_and_backward(x, w)[1] for _ in range(3)]
    (plan,) = c._generated.values()
    assert plan is not None
    assert _kernel_calls(plan, REGISTRY["reshape"].forward) == 0
    gx = firsts[-1][0]
    np.testing.assert_allclose(gx, 1 + w, rtol=1e-15)
    if gx.flags.writeable:
        gx[...] = 7.0
    again = c.value_and_backward(x, w)[1][0]
    assert again is not gx and not np.shares_memory(again, gx)
    np.testing.assert_allclose(again, 1 + w, rtol=1e-15)
    # d sum(x) / dx is the seed broadcast itself: a view of the folded chain, so nothing folds.
    c2 = tl.compile(lambda v: F.sum(v), (3, 4), dtype="float64")
    grads = [c2.value_and_backward(x)[1][0] for _ in range(3)]
    (plan2,) = c2._generated.values()
    assert plan2 is not None and _kernel_calls(plan2, np.ones) == 1
    assert not np.shares_memory(grads[-1], grads[-2])
    assert all(np.array_equal(g, np.ones((3, 4))) for g in grads)
