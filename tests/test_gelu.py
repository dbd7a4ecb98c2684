"""The ``gelu`` primitive: reference and fast kernels against PyTorch (forward, backward, second
order), the reference equal bit for bit to the composite it replaced, the fast kernel against
the reference on special values, its residual, generated code, the interval rule (sound, and
tighter than the composite's), CROWN's interval fallback, and ONNX export / import; and the other
W5 kernel change: linear on a stacked input as one GEMM."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

import torchlean as tl
import torchlean.engine.ops_interface as F
import torchlean.onnx as tlo
from torchlean.bounds import compute_bounds, ibp
from torchlean.core.registry import ARRAY_OPS, FAST_RTOL, REGISTRY, fast_kernels
from torchlean.engine.tape import Tape
from torchlean.ops.fast import residuals

FORMS = ("tanh", "none")
GELU = REGISTRY["gelu"]
# PyTorch computes in another order (its own vectorised tanh / erf): a few float32 ulps.
TORCH_TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-14)}


def _torch(x: np.ndarray, g: np.ndarray, approximate: str) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.gelu(xt, approximate=approximate)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), xt.grad.numpy()


def _ours(x: np.ndarray, g: np.ndarray, approximate: str, fast: bool
          ) -> tuple[np.ndarray, np.ndarray]:
    with fast_kernels(fast):
        tape = Tape(dtype=x.dtype.name)
        i = tape.leaf(x)
        out = tape.apply("gelu", i, approximate=approximate)
        grads = tape.backward_dense_all(out, g)
        return np.asarray(tape.value(out)), np.asarray(grads[i])


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("approximate", FORMS)
def test_gelu_matches_torch_forward_and_backward(approximate: str, dtype: str,
                                                 fast: bool) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(300) * 3, [0.0, -0.0, 1e-30, -0.75, 8.0, -8.0,
                                                       30.0, -30.0]]).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    y, gx = _ours(x, g, approximate, fast)
    ty, tgx = _torch(x, g, approximate)
    assert y.dtype == gx.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, ty, **TORCH_TOL[dtype])
    np.testing.assert_allclose(gx, tgx, **TORCH_TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reference_kernel_is_the_old_composite_bit_for_bit(dtype: str) -> None:
    """The nine (tanh form) and five (exact form) ops GELU was recorded as, in their order."""
    x = np.random.default_rng(1).standard_normal(500).astype(dtype) * 4
    cube = F.mul(F.square(x), x)
    inner = F.scale(F.add(x, F.scale(cube, c=0.044715)), c=math.sqrt(2.0 / math.pi))
    tanh_form = F.scale(F.mul(x, F.add_scalar(F.tanh(inner), c=1.0)), c=0.5)
    erf = F.erf(F.scale(x, c=1.0 / math.sqrt(2.0)))
    exact_form = F.scale(F.mul(x, F.add_scalar(erf, c=1.0)), c=0.5)
    np.testing.assert_array_equal(GELU.reference_forward(x, approximate="tanh"), tanh_form)
    np.testing.assert_array_equal(GELU.reference_forward(x, approximate="none"), exact_form)


@pytest.mark.parametrize("approximate", FORMS)
def test_fast_kernel_within_tolerance_on_special_values(approximate: str) -> None:
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-38, -1e-38, 5e-324, 90.0, -90.0, 1e4,
                -1e4, -0.7518, -0.8, -0.7]
    for dtype in ("float32", "float64"):
        x = np.concatenate([specials, np.linspace(-12, 12, 401)]).astype(dtype)
        g = np.random.default_rng(2).standard_normal(x.shape).astype(dtype)
        with np.errstate(all="ignore"):
            want = _ours(x, g, approximate, False)
            got = _ours(x, g, approximate, True)
        rtol = FAST_RTOL[dtype]
        for a, e in zip(got, want, strict=True):
            assert a.dtype == e.dtype
            # NaN where the reference has NaN (gelu(-inf) = -inf * 0), finite where it is
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
            finite = np.isfinite(e)
            np.testing.assert_array_equal(a[~finite], e[~finite])
            scale = max(1.0, float(np.max(np.abs(e[finite]))))
            np.testing.assert_allclose(a[finite], e[finite], rtol=rtol, atol=rtol * scale)


def test_fast_residual_is_read_only_and_a_miss_gives_the_same_bits() -> None:
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    g = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    with fast_kernels(True):
        y = GELU.forward(x, approximate="tanh")
        assert residuals.load(y, "gelu", (x.shape, x.dtype.str, "tanh")) is not None
        first = GELU.vjp(ARRAY_OPS, g, [x], y, approximate="tanh")[0]
        again = GELU.vjp(ARRAY_OPS, g, [x], y, approximate="tanh")[0]
        missed = GELU.vjp(ARRAY_OPS, g, [x], y.copy(), approximate="tanh")[0]  # no residual
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, missed)


@pytest.mark.parametrize("approximate", FORMS)
def test_second_order_through_gelu_matches_torch(approximate: str) -> None:
    """The reference VJP is written with primitives, so the hvp (forward over reverse)
    differentiates it again."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 5))
    x = rng.standard_normal((3, 6))
    v = rng.standard_normal((6, 5))

    def loss(w: Any, x: Any) -> Any:
        return F.sum(F.gelu(F.matmul(x, w), approximate=approximate))

    c = tl.compile(loss, (6, 5), (3, 6), dtype="float64", wrt=(0,))
    ours = c.hvp([w, x], [v, None])[0]
    tw, tx = torch.tensor(w), torch.tensor(x)

    def tloss(w: Any) -> Any:
        return torch.nn.functional.gelu(tx @ w, approximate=approximate).sum()

    _, want = torch.func.jvp(torch.func.grad(tloss), (tw,), (torch.tensor(v),))
    np.testing.assert_allclose(ours, want.numpy(), rtol=1e-10, atol=1e-12)


def test_eager_gelu_is_one_node_and_generated_code_equals_the_interpreter() -> None:
    rng = np.random.default_rng(6)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    x = rng.standard_normal((5, 8)).astype(np.float32)

    def loss(w: Any, x: Any) -> Any:
        return F.sum(F.square(F.gelu(F.matmul(x, w))))

    tape = Tape()
    out = tape.apply("gelu", tape.leaf(x))
    assert [n.op.name for n in tape.nodes if n.op is not None] == ["gelu"] and out == 1
    for fast in (False, True):
        c = tl.compile(loss, (8, 16), (5, 8), wrt=(0,))
        with fast_kernels(fast):
            c.codegen = False
            interpreted = c.value_and_backward(w, x)
            c.codegen = True
            for _ in range(3):  # interpreted, then traced and emitted, then generated
                generated = c.value_and_backward(w, x)
                for got, want in ((generated[0], interpreted[0]),
                                  (generated[1][0], interpreted[1][0])):
                    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
        (plan,) = c._generated.values()
        assert plan is not None
        # With the fast set the explicit halves run, their residual a local of the plan.
        assert ("gelu_forward_saving" in repr(plan.fn.__globals__.values())) == fast


def test_interval_rule_encloses_the_float32_kernel_and_is_tighter_than_the_composite() -> None:
    rng = np.random.default_rng(7)
    ctx = ibp.Context.for_dtype("float32")
    centre = rng.uniform(-6, 6, 4000)
    radius = rng.uniform(0, 2, 4000) ** 2
    lo, hi = centre - radius, centre + radius
    lo[:4] = [-0.8, -0.7, -0.76, -3.0]  # ends on the pieces' edges and around the minimum
    hi[:4] = [-0.7, -0.7, -0.74, -0.8]
    for approximate in FORMS:
        iv = ibp.RULES["gelu"]([ibp.Interval(lo, hi)], {"approximate": approximate}, ctx)
        chain = ibp._gelu_chain(ibp.Interval(lo, hi), approximate, ctx, False)
        assert np.all(iv.lo >= chain.lo) and np.all(iv.hi <= chain.hi)
        assert np.mean(iv.hi - iv.lo) < 0.8 * np.mean(chain.hi - chain.lo)
        for _ in range(20):
            p64 = lo + (hi - lo) * rng.uniform(0, 1, lo.shape)
            p64[:4] = np.where(rng.uniform(size=4) < 0.5, lo[:4], hi[:4])
            real = GELU.reference_forward(p64, approximate=approximate)
            assert np.all(real >= iv.lo) and np.all(real <= iv.hi)
            p32 = p64.astype(np.float32)
            inside = (p32 >= lo) & (p32 <= hi)
            y32 = GELU.reference_forward(p32, approximate=approximate).astype(np.float64)
            assert np.all((y32 >= iv.lo - iv.eps) | ~inside)
            assert np.all((y32 <= iv.hi + iv.eps) | ~inside)
        # The minimum of GELU (near -0.752, about -0.17) is inside a box that holds it.
        at_min = ibp.RULES["gelu"]([ibp.Interval(np.array([-1.0]), np.array([0.0]))],
                                   {"approximate": approximate}, ctx)
        assert -0.171 < at_min.lo[0] < -0.169 and 0.0 <= at_min.hi[0] < 1e-6


def test_crown_bounds_a_gelu_network_by_its_interval_and_says_so() -> None:
    rng = np.random.default_rng(8)
    w1 = (rng.standard_normal((4, 6)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((6, 2)) * 0.5).astype(np.float32)

    def net(x: Any) -> Any:
        return F.matmul(F.gelu(F.matmul(x, w1)), w2)

    c = tl.compile(net, (1, 4))
    x0 = rng.standard_normal((1, 4)).astype(np.float32)
    result = compute_bounds(c, x0 - 0.1, x0 + 0.1, method="crown", kernel=True)
    lo, hi = result.output
    assert any(op == "gelu" for _, op in result.interval_fallbacks)
    for _ in range(200):
        y = c(x0 + rng.uniform(-0.1, 0.1, x0.shape).astype(np.float32))
        assert np.all(y >= lo) and np.all(y <= hi)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("approximate", FORMS)
def test_onnx_export_runs_in_onnxruntime_and_loads_back_as_gelu(approximate: str,
                                                                opset: int) -> None:
    """Opset 20 writes ONNX Gelu, earlier opsets the composite as a torchlean function; both
    load back as the one primitive, bitwise."""
    w = np.random.default_rng(9).standard_normal((5, 7)).astype(np.float32)

    def net(x: Any) -> Any:
        return F.gelu(F.matmul(x, w), approximate=approximate)

    c = tl.compile(net, (3, 5))
    proto = tlo.export(c, opset=opset)
    kinds = {n.op_type for n in proto.graph.node} | {
        n.op_type for f in proto.functions for n in f.node}
    assert ("Gelu" in kinds) == (opset >= 20)
    x = np.random.default_rng(10).standard_normal((3, 5)).astype(np.float32) * 2
    (runtime,) = ort.InferenceSession(proto.SerializeToString()).run(None, {"input": x})
    np.testing.assert_allclose(runtime, c(x), rtol=1e-5, atol=1e-6)
    back = tlo.load(proto)
    assert "gelu" in [n.op.name for n in back.graph.nodes if n.op is not None]
    np.testing.assert_array_equal(back(x), c(x))


def test_onnx_gelu_from_pytorch_imports_as_the_primitive() -> None:
    for approximate in FORMS:
        w = np.random.default_rng(11).standard_normal((5, 7)).astype(np.float32)
        onnx = pytest.importorskip("onnx")
        helper = onnx.helper
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["input", "w"], ["h"]),
             helper.make_node("Gelu", ["h"], ["output"], approximate=approximate)],
            "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [3, 5])],
            [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [3, 7])],
            [onnx.numpy_helper.from_array(w, "w")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        model = tlo.load(proto.SerializeToString())
        assert [n.op.name for n in model.graph.nodes if n.op is not None][-1] == "gelu"
        x = np.random.default_rng(12).standard_normal((3, 5)).astype(np.float32)
        want = torch.nn.functional.gelu(torch.tensor(x) @ torch.tensor(w),
                                        approximate=approximate).numpy()
        np.testing.assert_allclose(model(x), want, rtol=2e-5, atol=2e-6)


def test_functional_and_module_forms_match_torch() -> None:
    data = np.linspace(-3, 3, 13, dtype=np.float32)
    for approximate in FORMS:
        x = tl.tensor(data, requires_grad=True)
        y = tl.nn.functional.gelu(x, approximate=approximate)
        z = tl.nn.GELU(approximate=approximate)(x)
        (y * y).sum().backward()
        xt = torch.tensor(data, requires_grad=True)
        want = torch.nn.functional.gelu(xt, approximate=approximate)
        (want * want).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), rtol=2e-5,
                                   atol=2e-6)
        np.testing.assert_array_equal(y.detach().numpy(), z.detach().numpy())
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=2e-5, atol=2e-6)
    with pytest.raises(tl.TorchLeanError, match="gelu: approximate"):
        tl.nn.functional.gelu(x, approximate="erf")


def test_fast_dispatch_leaves_other_dtypes_to_the_reference() -> None:
    ints = np.arange(-3, 4)
    x32 = np.linspace(-2, 2, 9, dtype=np.float32)
    g64 = np.linspace(1, 2, 9)
    with fast_kernels(True):
        fast_int = GELU.forward(ints, approximate="tanh")
        y = GELU.forward(x32, approximate="tanh")
        mixed = GELU.vjp(ARRAY_OPS, g64, [x32], y, approximate="tanh")[0]
    np.testing.assert_array_equal(fast_int, GELU.reference_forward(ints, approximate="tanh"))
    want = GELU.reference_vjp(ARRAY_OPS, g64, [x32], y, approximate="tanh")[0]
    assert mixed.dtype == want.dtype
    np.testing.assert_array_equal(mixed, want)


def test_linear_on_a_stacked_input_is_one_gemm_over_its_rows() -> None:
    """W5's linears take (B, n, d) inputs: the kernel flattens them into one GEMM (as the VJP
    does), so each output row is the 2-D linear of its input row, and torch agrees."""
    rng = np.random.default_rng(13)
    w, b = rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    linear = REGISTRY["linear"].forward
    y = linear(w, b, x)
    assert y.shape == (3, 4, 7)
    np.testing.assert_array_equal(y, linear(w, b, x.reshape(12, 5)).reshape(3, 4, 7))
    np.testing.assert_array_equal(linear(w, b, x[:, :0]), np.zeros((3, 0, 7), np.float32))
    want = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-5, atol=1e-6)
