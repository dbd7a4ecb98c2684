"""ONNX import and export against real producers and consumers.

PyTorch (``torch.onnx.export``, TorchScript exporter) writes an MLP, a CNN with batch norm and
pooling, and a pre-LN transformer block; loaded here, their outputs must equal PyTorch's and
onnxruntime's to 1e-5 (float32) and their parameter gradients PyTorch autograd's. torchlean's
three default models are exported and run in onnxruntime, and loading an export back must give the
same outputs and gradients bitwise. Every unsupported case must raise its named error.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import torchlean as tl
import torchlean.onnx as tlo
from torchlean import cli
from torchlean.engine import ops_interface as F
from torchlean.onnx import OnnxError, OnnxMissingError, UnsupportedOnnxError
from torchlean.zoo import models

TOL = {"rtol": 1e-5, "atol": 1e-5}
GRAD_TOL = {"rtol": 1e-4, "atol": 1e-5}


# ---------------------------------------------------------------------------------------------
# PyTorch producers


class TorchMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 8)
        self.fc3 = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.leaky_relu(self.fc2(torch.relu(self.fc1(x))), 0.1)
        return torch.log_softmax(self.fc3(torch.sigmoid(h) * h), dim=-1)


class TorchCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(4, 4, 3)
        self.avg = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(torch.relu(self.bn(self.conv1(x))))
        h = self.avg(torch.tanh(self.conv2(h)))
        return self.fc(torch.flatten(h, 1))


class TorchBlock(torch.nn.Module):
    """A pre-LN transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) with exact GELU."""

    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.GELU(),
                                       torch.nn.Linear(16, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TorchOpZoo(torch.nn.Module):
    """The remaining operators: ConvTranspose, bias-free Conv, GlobalAveragePool, Split, Concat,
    strided Slice, 4-D Transpose, ReduceMean/Sum, Pow, Neg, Exp, Div, Sqrt, Clip, Log, Flatten,
    MatMul, Softmax on a leading axis, Unsqueeze/Squeeze and Gather."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
        self.conv = torch.nn.Conv2d(2, 4, 3, stride=2, padding=1, bias=False)
        self.w = torch.nn.Parameter(torch.randn(4, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(self.up(x))
        pooled = torch.nn.functional.adaptive_avg_pool2d(h, 1)
        a, b = torch.split(h, [1, 3], dim=1)
        c = torch.cat([b, a * 2.0], dim=1)[:, :, 1:, ::2].permute(0, 2, 3, 1)
        m = c.mean(dim=(1, 2))
        e = torch.exp(-m) / (1.0 + torch.sqrt(torch.clamp(m, 0.1, 3.0)))
        logs = torch.log((c**2).sum(dim=-1) + 1.0).flatten(1).unsqueeze(1).squeeze(1)
        picked = torch.index_select(logs, 1, torch.tensor([0, 2, 1]))
        return torch.cat([torch.softmax(e @ self.w, dim=0), picked, pooled.flatten(1) - 0.5], 1)


class TorchActivations(torch.nn.Module):
    """Pad (zero and non-zero value), Elu, Selu, HardSigmoid, HardSwish, PReLU, Softsign,
    torch.where on a computed condition, and causal scaled-dot-product attention (Trilu and
    Where on constants, folded at load time)."""

    def __init__(self) -> None:
        super().__init__()
        self.prelu = torch.nn.PReLU(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.pad(x, (1, 2)) + torch.nn.functional.pad(x, (0, 3), value=0.5)
        act = (torch.nn.functional.elu(y) + torch.nn.functional.selu(y)
               + torch.nn.functional.hardsigmoid(y) + torch.nn.functional.hardswish(y)
               + torch.nn.functional.softsign(y) + torch.where(y > 0.1, y, -0.3 * y))
        att = torch.nn.functional.scaled_dot_product_attention(act, act, act, is_causal=True)
        return self.prelu(att)


TORCH_CASES = {"mlp": (TorchMLP, (5, 6)), "cnn": (TorchCNN, (2, 2, 12, 12)),
               "transformer_block": (TorchBlock, (2, 5, 8)),
               "op_zoo": (TorchOpZoo, (2, 3, 4, 4)),
               "activations": (TorchActivations, (2, 5, 4))}


def torch_export(module: torch.nn.Module, shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # No constant folding: keeps batch norm a node and initialisers named as parameters.
        torch.onnx.export(module, (torch.zeros(shape),), buffer, dynamo=False, opset_version=17,
                          do_constant_folding=False)
    return buffer.getvalue()


@pytest.fixture(scope="module", params=sorted(TORCH_CASES))
def torch_case(request: pytest.FixtureRequest) -> dict[str, Any]:
    cls, shape = TORCH_CASES[request.param]
    torch.manual_seed(0)
    module = cls().eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # distinct random values: no two initialisers may coincide
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
    data = torch_export(module, shape)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    return {"name": request.param, "module": module, "bytes": data, "x": x,
            "model": tlo.load(data)}


def test_pytorch_models_match_pytorch_and_onnxruntime(torch_case: dict[str, Any]) -> None:
    model, x = torch_case["model"], torch_case["x"]
    ours = model(x)
    expected = torch_case["module"](torch.from_numpy(x)).detach().numpy()
    assert ours.dtype == np.float32 and ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, **TOL)
    session = ort.InferenceSession(torch_case["bytes"])
    (runtime,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(ours, runtime, **TOL)


def test_pytorch_models_gradients_match_autograd(torch_case: dict[str, Any]) -> None:
    model, x, module = torch_case["model"], torch_case["x"], torch_case["module"]
    seed = np.random.default_rng(3).standard_normal(model.out_shape).astype(np.float32)
    grads = model.vjp([x], seed)
    xt = torch.from_numpy(x).requires_grad_(True)
    module.zero_grad()
    module(xt).backward(torch.from_numpy(seed))
    np.testing.assert_allclose(grads[0], xt.grad.numpy(), **GRAD_TOL)
    ours = dict(zip(model.param_names, grads[1:], strict=True))
    trained = dict(module.named_parameters())
    # Every PyTorch parameter is a torchlean parameter of the loaded graph, under its own name.
    assert set(trained) <= set(ours), sorted(set(trained) - set(ours))
    for name, p in trained.items():
        np.testing.assert_allclose(ours[name], p.grad.numpy(), **GRAD_TOL, err_msg=name)
    for name in set(ours) - set(trained):  # running statistics: frozen, no gradient
        assert not model.parameters[name].requires_grad and not ours[name].any(), name


def test_loaded_graph_supports_jvp_and_to_tape(torch_case: dict[str, Any]) -> None:
    model, x = torch_case["model"], torch_case["x"]
    rng = np.random.default_rng(4)
    t = rng.standard_normal(x.shape).astype(np.float32)
    v = rng.standard_normal(model.out_shape).astype(np.float32)
    jt = model.jvp([x], [t])
    vj = model.vjp([x], v)[0]
    # <v, J t> = <J^T v, t>: forward and reverse mode describe the same Jacobian.
    lhs, rhs = float(np.vdot(v, jt)), float(np.vdot(vj, t))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)
    tape, _, out = model.to_tape(x)
    np.testing.assert_array_equal(tape.value(out), model(x))


class TorchTinyLM(torch.nn.Module):
    """Token and position embeddings over int64 ids, LayerNorm, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(10, 6)
        self.pos = torch.nn.Embedding(5, 6)
        self.ln = torch.nn.LayerNorm(6)
        self.head = torch.nn.Linear(6, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1]))))


def test_integer_token_ids_feed_embedding_lookups() -> None:
    torch.manual_seed(14)
    module = TorchTinyLM().eval()
    ids = torch.randint(0, 10, (2, 5))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (ids,), buffer, dynamo=False, opset_version=17,
                          do_constant_folding=False)
    model = tlo.load(buffer.getvalue())
    assert model.index_inputs == [0]
    ours = model(ids.numpy())
    expected = module(ids)
    np.testing.assert_allclose(ours, expected.detach().numpy(), **TOL)
    session = ort.InferenceSession(buffer.getvalue())
    (runtime,) = session.run(None, {session.get_inputs()[0].name: ids.numpy()})
    np.testing.assert_allclose(ours, runtime, **TOL)
    seed = np.random.default_rng(15).standard_normal(ours.shape).astype(np.float32)
    grads = model.vjp([ids.numpy()], seed)
    assert not grads[0].any()  # ids are data: no gradient
    expected.backward(torch.from_numpy(seed))
    by_name = dict(zip(model.param_names, grads[1:], strict=True))
    for name, p in module.named_parameters():
        np.testing.assert_allclose(by_name[name], p.grad.numpy(), **GRAD_TOL, err_msg=name)


def test_integer_inputs_used_as_numbers_are_named() -> None:
    nodes = [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["ids", "ids"], ["twice"], name="int_add"),
             helper.make_node("Cast", ["twice"], ["g"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "g"], ["y"])]
    data = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                  [_f("y", [3])])
    with pytest.raises(UnsupportedOnnxError) as info:
        tlo.load(data)
    assert [(n, op) for n, op, _ in info.value.problems] == [("int_add", "Add")]
    assert "run-time integer tensor 'ids'" in str(info.value)


def test_hvp_through_an_onnx_model_matches_torch() -> None:
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))

    class Scalar(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.net(x) ** 2).sum()

    model = tlo.load(torch_export(Scalar(), (3, 4)))
    assert model.out_shape == ()
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    v = rng.standard_normal((3, 4)).astype(np.float32)
    ours = model.hvp([x], [v])[0]
    _, expected = torch.autograd.functional.hvp(lambda t: (net(t) ** 2).sum(),
                                                torch.from_numpy(x), torch.from_numpy(v))
    np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-4, atol=1e-5)


def test_a_loaded_pytorch_model_can_be_certified() -> None:
    """The loaded graph is an ordinary compiled graph: the bound engine certifies it as is."""
    from torchlean import bounds

    torch.manual_seed(10)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model = tlo.load(torch_export(net.eval(), (2, 4)))
    rng = np.random.default_rng(11)
    lo, hi = bounds.box(rng.uniform(0.3, 0.7, (2, 4)), 0.05)
    samples = [model(rng.uniform(lo, hi).astype(np.float32)) for _ in range(20)]
    for method in ("ibp", "crown"):
        out_lo, out_hi = bounds.compute_bounds(model, lo, hi, method=method).output
        for y in samples:
            assert np.all(out_lo <= y) and np.all(y <= out_hi), method


def test_as_module_runs_on_sessions_and_passes_verify_check_model() -> None:
    """``as_module`` replays the loaded graph on any owner: eager-session gradients equal the
    compiled ones, and ``verify.check_model`` (compiled vs eager, float64 twin, FD) passes."""
    from torchlean import verify

    torch.manual_seed(12)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    model = tlo.load(torch_export(net.eval(), (5, 4)))
    module = model.as_module()
    assert [n for n, _ in module.named_parameters()] == model.param_names
    rng = np.random.default_rng(13)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    labels = np.array([0, 1, 2, 1, 0])
    np.testing.assert_array_equal(module(x), model(x))
    session = tl.Session(tl.Options(dtype="float32"))
    out = module(session.input(x))
    seed = rng.standard_normal(out.shape).astype(np.float32)
    grads = session.backward(F.sum(out * seed))
    expected = model.vjp([x], seed)[1:]
    for p, g in zip(model.graph.params, expected, strict=True):
        np.testing.assert_allclose(session.grad(grads, session.use(p)), g, rtol=1e-5, atol=1e-6)
    report = verify.check_model(module, F.cross_entropy, x, labels, quick=True)
    assert report.ok, str(report)
    # Another batch size: the file is loaded again for that shape (nothing in it is batch-bound).
    x3 = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(module(x3), net(torch.from_numpy(x3)).detach().numpy(), **TOL)


def test_exported_reshapes_keep_the_batch_axis_free() -> None:
    """torchlean's CNN export writes its flatten with a copied batch axis, so the loaded module
    runs other batch sizes too (same values as the module itself)."""
    config, shape = DEFAULT_CONFIGS["cnn"]
    cnn = models.build(config).eval()
    module = tlo.load(tlo.export(cnn, None, [shape]).SerializeToString()).as_module()
    x = np.random.default_rng(16).standard_normal((5,) + shape[1:]).astype(np.float32)
    np.testing.assert_array_equal(module(x), tl.compile(cnn, x.shape)(x))


# ---------------------------------------------------------------------------------------------
# torchlean's own models, exported


DEFAULT_CONFIGS = {
    "mlp": (dict(model="mlp", in_features=8, hidden=[16, 8], num_classes=3, seed=0), (5, 8)),
    "cnn": (dict(model="cnn", image_shape=[1, 8, 8], channels=[4, 8], num_classes=3, seed=0),
            (2, 1, 8, 8)),
    "transformer": (dict(model="transformer", vocab_size=7, seq_len=6, d_model=16, num_heads=2,
                         num_layers=2, d_ff=32, seed=0), (3, 6)),
}


@pytest.mark.parametrize("name", sorted(DEFAULT_CONFIGS))
def test_default_models_run_in_onnxruntime_and_round_trip_bitwise(name: str,
                                                                   tmp_path: Path) -> None:
    config, shape = DEFAULT_CONFIGS[name]
    assert set(DEFAULT_CONFIGS) == set(models.NAMES)
    module = models.build(config).eval()
    rng = np.random.default_rng(7)
    x = (rng.integers(0, config.get("vocab_size", 1), shape) if name == "transformer"
         else rng.standard_normal(shape)).astype(np.float32)
    compiled = tl.compile(module, shape)
    path = tmp_path / f"{name}.onnx"
    proto = tlo.export(module, path, [shape])
    assert max(o.version for o in proto.opset_import if o.domain == "") >= 17
    expected = compiled(x)
    session = ort.InferenceSession(str(path))
    (runtime,) = session.run(None, {"input": x})
    np.testing.assert_allclose(runtime, expected, **TOL)
    back = tlo.load(path)
    names = {id(p): n for n, p in module.named_parameters()}
    assert sorted(back.param_names) == sorted(names.values())
    np.testing.assert_array_equal(back(x), expected)
    seed = rng.standard_normal(expected.shape).astype(np.float32)
    loaded = back.vjp([x], seed)
    original = compiled.vjp([x], seed)
    np.testing.assert_array_equal(loaded[0], original[0])
    by_name = dict(zip(back.param_names, loaded[1:], strict=True))
    for p, g in zip(compiled.params, original[1:], strict=True):
        np.testing.assert_array_equal(by_name[names[id(p)]], g, err_msg=names[id(p)])


def test_export_of_a_function_with_two_outputs_and_a_loaded_model(tmp_path: Path) -> None:
    """A traced function (not a module) exports too, and an OnnxModel re-exports unchanged."""

    def fn(a: Any, b: Any) -> Any:
        prod = F.permute(a, perm=(0, 2, 1)) @ b  # bmm after a general permute
        return F.erf(prod), F.reduce_mean(F.sqrt(F.square(b)), axis=1)

    a = np.random.default_rng(8).standard_normal((2, 4, 3)).astype(np.float32)
    b = np.random.default_rng(9).standard_normal((2, 4, 5)).astype(np.float32)
    # Opset 18 moved the axes of ReduceMean / ReduceMax from attributes to inputs.
    proto18 = tlo.export(fn, None, [(2, 4, 3), (2, 4, 5)], opset=18)
    outs18 = ort.InferenceSession(proto18.SerializeToString()).run(
        None, {"input_0": a, "input_1": b})
    proto = tlo.export(fn, tmp_path / "f.onnx", [(2, 4, 3), (2, 4, 5)])
    session = ort.InferenceSession(proto.SerializeToString())
    outs = session.run(None, {"input_0": a, "input_1": b})
    for o, r in zip(outs18, outs, strict=True):
        np.testing.assert_allclose(o, r, **TOL)
    back = tlo.load(tmp_path / "f.onnx")
    ours = back.run(a, b)
    for o, r in zip(ours, outs, strict=True):
        np.testing.assert_allclose(o, r, **TOL)
    again = tlo.load(tlo.export(back).SerializeToString())
    for o, r in zip(again.run(a, b), ours, strict=True):
        np.testing.assert_array_equal(o, r)


def test_masks_and_losses_export_with_their_tie_rules() -> None:
    """Piecewise-constant primitives keep torchlean's conventions in ONNX (ties, open
    intervals, out-of-range gathers refused), and come back as the same primitives."""

    def fn(a: Any, b: Any) -> Any:
        return (F.mse_loss(a, b) + F.sum(F.positive_mask(a))
                + F.sum(F.interval_mask(a, lo=-0.5, hi=0.5)) + F.sum(F.max_weight(a, b))
                + F.sum(F.zeros_like(a)) + F.gather_scalar_nat(F.flatten(a), i=2))

    # Entries exactly at 0, at the interval's ends and at ties between a and b.
    a = np.array([[0.0, 1.0, -0.5], [0.3, 2.0, 0.5]], np.float32)
    b = np.array([[0.0, 0.5, -0.7], [1.0, 2.0, 0.0]], np.float32)
    compiled = tl.compile(fn, (2, 3), (2, 3))
    proto = tlo.export(compiled)
    session = ort.InferenceSession(proto.SerializeToString())
    (runtime,) = session.run(None, {"input_0": a, "input_1": b})
    np.testing.assert_allclose(runtime, compiled(a, b), **TOL)
    np.testing.assert_array_equal(tlo.load(proto)(a, b), compiled(a, b))
    with pytest.raises(UnsupportedOnnxError, match="indices outside"):
        tlo.export(lambda x: F.gather_vec_nat(x, idx=[0, 5]), None, [(3,)])


# ---------------------------------------------------------------------------------------------
# Unsupported and malformed input


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = (),
           opsets: list[Any] | None = None) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=opsets or [helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _f(name: str, shape: Any) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _weight(name: str, shape: tuple[int, ...]) -> Any:
    return onnx.numpy_helper.from_array(np.ones(shape, np.float32), name=name)


def test_every_unsupported_node_is_named_in_one_error() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], name="dilated", dilations=[2, 2]),
        helper.make_node("Conv", ["x", "wg"], ["c2"], name="grouped", group=2),
        helper.make_node("Hardmax", ["x"], ["h"], name="hardmax"),
        helper.make_node("Relu", ["c1"], ["r"], name="after_bad"),  # skipped: depends on c1
        # Also downstream of a bad node, but no input could make it importable: listed too.
        helper.make_node("Cos", ["r"], ["cos"], name="cos_after_bad"),
        helper.make_node("Add", ["r", "c2"], ["y0"], name="sum"),
        helper.make_node("Add", ["y0", "h"], ["y"], name="sum2"),
    ]
    data = _model(nodes, [_f("x", [1, 2, 6, 6])], [_f("y", [1, 2, 4, 4])],
                  [_weight("w", (2, 2, 3, 3)), _weight("wg", (2, 1, 3, 3))])
    with pytest.raises(UnsupportedOnnxError) as info:
        tlo.load(data)
    problems = info.value.problems
    assert [(n, op) for n, op, _ in problems] == [("dilated", "Conv"), ("grouped", "Conv"),
                                                  ("hardmax", "Hardmax"),
                                                  ("cos_after_bad", "Cos")]
    text = str(info.value)
    assert "4 unsupported nodes" in text and "dilations" in text and "group=2" in text
    assert "no importer for this operator" in text


def test_custom_domain_and_unsupported_attribute_are_named() -> None:
    nodes = [helper.make_node("MyOp", ["x"], ["a"], name="custom", domain="com.example"),
             helper.make_node("MaxPool", ["x"], ["b"], name="ceil", kernel_shape=[2, 2],
                              ceil_mode=1),
             helper.make_node("Add", ["a", "b"], ["y"])]
    data = _model(nodes, [_f("x", [1, 1, 4, 4])], [_f("y", [1, 2, 4, 4])],
                  opsets=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOnnxError) as info:
        tlo.load(data)
    assert {(n, op) for n, op, _ in info.value.problems} == {("custom", "MyOp"),
                                                             ("ceil", "MaxPool")}
    assert "com.example" in str(info.value) and "ceil_mode" in str(info.value)


def test_dynamic_input_shape_needs_a_concrete_shape() -> None:
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [_f("x", ["batch", 3])],
                  [_f("y", ["batch", 3])])
    with pytest.raises(UnsupportedOnnxError, match=r"x \(graph input\): dynamic shape"):
        tlo.load(data)
    with pytest.raises(tl.ShapeError, match=r"input_shapes\['x'\]"):
        tlo.load(data, input_shapes={"x": (2, -3)})
    with pytest.raises(OnnxError, match="input_shapes names"):
        tlo.load(data, input_shapes={"y": (2, 3)})
    model = tlo.load(data, input_shapes={"x": (2, 3)})
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], dtype=np.float32)
    np.testing.assert_array_equal(model(x), np.maximum(x, 0))


def test_double_models_load_as_float64_graphs_and_round_trip() -> None:
    rng = np.random.default_rng(17)
    w, b = rng.standard_normal((3, 4)), rng.standard_normal(3)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
             helper.make_node("Tanh", ["h"], ["y"])]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 3])],
                  [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = tlo.load(data)
    x = rng.standard_normal((2, 4))
    assert model.dtype == np.float64 and model(x).dtype == np.float64
    np.testing.assert_allclose(model(x), np.tanh(x @ w.T + b), rtol=1e-13)
    again = tlo.export(model)
    assert again.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    np.testing.assert_array_equal(tlo.load(again)(x), model(x))
    (runtime,) = ort.InferenceSession(again.SerializeToString()).run(None, {"input": x})
    np.testing.assert_allclose(runtime, model(x), rtol=1e-12)


def test_malformed_truncated_and_missing_files_are_clear_errors(tmp_path: Path) -> None:
    data = torch_export(TorchMLP().eval(), (2, 6))
    for bad in (data[: len(data) // 2], b"\x08\x07garbage\xff\xff not protobuf"):
        with pytest.raises(OnnxError, match="onnx load") as info:
            tlo.load(bad)
        assert "DecodeError" not in type(info.value).__name__
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:100])
    with pytest.raises(OnnxError, match="cut.onnx"):
        tlo.load(path)
    with pytest.raises(OnnxError, match="no such file"):
        tlo.load(tmp_path / "absent.onnx")
    with pytest.raises(OnnxError, match="expected a path, bytes or onnx.ModelProto"):
        tlo.load(42)


def test_export_lists_every_inexpressible_primitive() -> None:
    def fn(x: Any) -> Any:
        cols = F.pool_unfold(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))
        return F.sum(cols) + F.sum(F.sqrt_deriv(x))

    with pytest.raises(UnsupportedOnnxError) as info:
        tlo.export(fn, None, [(1, 1, 4, 4)])
    assert sorted(op for _, op, _ in info.value.problems) == ["pool_unfold", "sqrt_deriv"]
    assert "no ONNX form" in str(info.value)
    with pytest.raises(OnnxError, match="example_shapes"):
        tlo.export(fn)
    with pytest.raises(OnnxError, match="opset"):
        tlo.export(fn, None, [(1, 1, 4, 4)], opset=11)


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(OnnxMissingError, match=r"torchlean\[onnx\]"):
        tlo.load(b"")
    with pytest.raises(OnnxMissingError, match=r"torchlean\[onnx\]"):
        tlo.export(lambda x: F.relu(x), None, [(2,)])


# ---------------------------------------------------------------------------------------------
# Command line


def test_cli_export_then_eval_onnx_matches_eval_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save, out = str(tmp_path / "iris.safetensors"), str(tmp_path / "iris.onnx")
    assert cli.main(["train", "--dataset", "iris", "--epochs", "2", "--save", save]) == 0
    assert cli.main(["export", "--checkpoint", save, "--out", out, "--batch-size", "7"]) == 0
    assert "wrote mlp" in capsys.readouterr().out
    session = ort.InferenceSession(out)
    assert session.get_inputs()[0].shape == [7, 4]
    assert cli.main(["eval", "--checkpoint", save]) == 0
    from_checkpoint = capsys.readouterr().out.split("test loss")[1]
    assert cli.main(["eval", "--onnx", out, "--dataset", "iris"]) == 0
    from_onnx = capsys.readouterr().out.split("test loss")[1]
    assert from_onnx == from_checkpoint  # same loss and accuracy, printed to 4 places
    assert cli.main(["eval", "--onnx", out]) == 2
    assert "--dataset (or --data file.npz) is needed" in capsys.readouterr().err
    assert cli.main(["eval", "--onnx", str(tmp_path / "absent.onnx"), "--dataset", "iris"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["verify", "--onnx", out, "--dataset", "iris", "--quick"]) == 0
    report = capsys.readouterr().out
    assert "model report: ONNX model" in report and " 0 failed" in report
    assert cli.main(["certify", "--onnx", out, "--dataset", "iris", "--eps", "0.01",
                     "--method", "ibp,crown", "--limit", "6", "--pgd-steps", "3"]) == 0
    certified = capsys.readouterr().out
    assert "certify ONNX model" in certified and "crown" in certified
