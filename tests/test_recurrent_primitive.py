"""The fused recurrent scans (``lstm_scan``, ``rnn_scan``) and the layers built on them.

The primitives against torch's step formulas and against finite differences (VJP and JVP, the
reference rules and the fast NumPy VJP); the layers (RNN tanh/relu, LSTM, GRU: layers,
directions, batch_first, unbatched, given states, no bias) against torch.nn in float32 and
float64, values and every gradient; hvp through an LSTM against finite differences of its
gradient; eager tape vs compiled graph; ONNX export of each mode against onnxruntime; a planted
wrong VJP caught by the same comparison; the bound engine refusing the scans by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean import onnx as tl_onnx
from torchlean.core.errors import ShapeError, TorchLeanError
from torchlean.core.registry import ARRAY_OPS, REGISTRY, fast_kernels
from torchlean.engine import ops_interface as F

torch = pytest.importorskip("torch")

SCANS = ["lstm_scan", "rnn_scan"]


def _cases(name: str) -> list:
    prim = REGISTRY[name]
    return [s for seed in (0, 1) for s in prim.samples(np.random.default_rng(seed))]


def _numerical_vjp(prim, inputs, attrs, g, eps=1e-6):
    grads = []
    for k, x in enumerate(inputs):
        grad = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus = [a.copy() for a in inputs]
            minus = [a.copy() for a in inputs]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            grad[idx] = np.sum((prim.forward(*plus, **attrs) - prim.forward(*minus, **attrs))
                               * g) / (2 * eps)
        grads.append(grad)
    return grads


@pytest.mark.parametrize("name", SCANS)
def test_scan_forward_matches_torch_step_formulas(name):
    prim = REGISTRY[name]
    for s in _cases(name):
        ours = prim.forward(*s.inputs, **s.attrs)
        theirs = prim.torch_ref(torch, *[torch.tensor(x) for x in s.inputs], **s.attrs)
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=s.note)


@pytest.mark.parametrize("name", SCANS)
@pytest.mark.parametrize("kernel", ["reference", "fast"])
def test_scan_vjp_matches_finite_differences(name, kernel):
    prim = REGISTRY[name]
    rule = prim.reference_vjp if kernel == "reference" else prim.fast_vjp
    for s in _cases(name):
        out = prim.forward(*s.inputs, **s.attrs)
        g = np.random.default_rng(5).standard_normal(out.shape)
        got = rule(ARRAY_OPS, g, s.inputs, out, **s.attrs)
        want = _numerical_vjp(prim, s.inputs, s.attrs, g)
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8,
                                       err_msg=f"{s.note} {s.attrs} input {prim.inputs[k]}")


@pytest.mark.parametrize("name", SCANS)
def test_scan_jvp_matches_finite_differences(name):
    prim = REGISTRY[name]
    rng = np.random.default_rng(7)
    for s in _cases(name):
        out = prim.forward(*s.inputs, **s.attrs)
        ts = [rng.standard_normal(x.shape) for x in s.inputs]
        got = prim.apply_jvp(ARRAY_OPS, ts, s.inputs, out, s.attrs)
        eps = 1e-6
        plus = prim.forward(*[x + eps * t for x, t in zip(s.inputs, ts, strict=True)], **s.attrs)
        minus = prim.forward(*[x - eps * t for x, t in zip(s.inputs, ts, strict=True)],
                             **s.attrs)
        np.testing.assert_allclose(got, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-8)
        # one tangent at a time (the others zero) exercises the rule's None handling
        for k in range(len(ts)):
            only = [t if j == k else None for j, t in enumerate(ts)]
            part = prim.apply_jvp(ARRAY_OPS, only, s.inputs, out, s.attrs)
            moved = [x + eps * t if j == k else x for j, (x, t) in enumerate(
                zip(s.inputs, ts, strict=True))]
            back = [x - eps * t if j == k else x for j, (x, t) in enumerate(
                zip(s.inputs, ts, strict=True))]
            fd = (prim.forward(*moved, **s.attrs) - prim.forward(*back, **s.attrs)) / (2 * eps)
            np.testing.assert_allclose(part, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", SCANS)
def test_fast_vjp_agrees_with_reference_and_keeps_dtype(name, dtype):
    prim = REGISTRY[name]
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for s in _cases(name):
        xs = [x.astype(dtype) for x in s.inputs]
        out = prim.forward(*xs, **s.attrs)
        g = np.random.default_rng(2).standard_normal(out.shape).astype(dtype)
        ref = prim.reference_vjp(ARRAY_OPS, g, xs, out, **s.attrs)
        fast = prim.fast_vjp(ARRAY_OPS, g, xs, out, **s.attrs)
        for a, b in zip(ref, fast, strict=True):
            assert b.dtype == dtype
            np.testing.assert_allclose(b, a, rtol=tol, atol=tol)


def test_planted_wrong_vjp_is_caught():
    """The finite-difference comparison above fails for a VJP that forgets the recurrence
    (the cotangent carried through ``W_hh`` to the previous step)."""
    prim = REGISTRY["lstm_scan"]
    s = _cases("lstm_scan")[0]
    out = prim.forward(*s.inputs, **s.attrs)
    g = np.random.default_rng(5).standard_normal(out.shape)

    def no_carry(w_scale: float):
        xs = list(s.inputs)
        xs[3] = xs[3] * w_scale  # W_hh scaled to 0 inside the rule only
        return prim.fast_vjp(ARRAY_OPS, g, xs, out, **s.attrs)

    wrong = no_carry(0.0)
    want = _numerical_vjp(prim, s.inputs, s.attrs, g)
    assert not np.allclose(wrong[0], want[0], rtol=1e-6, atol=1e-8)
    right = no_carry(1.0)
    np.testing.assert_allclose(right[0], want[0], rtol=1e-6, atol=1e-8)


def test_shape_errors_name_the_scan():
    x = np.zeros((3, 2, 8))
    with pytest.raises(ShapeError, match=r"lstm_scan: xw's last axis must be 4\*H = 12"):
        F.lstm_scan(x, np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((12, 3)), np.zeros(12))
    with pytest.raises(ShapeError, match="rnn_scan: mode must be"):
        F.rnn_scan(x, np.zeros((2, 8)), np.zeros((8, 8)), np.zeros(8), mode="lstm")


# --- layers against torch.nn ------------------------------------------------------------------

LAYERS = [
    ("RNN", {}), ("RNN", {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True}),
    ("RNN", {"bias": False, "batch_first": True}),
    ("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"batch_first": True, "bias": False, "bidirectional": True}),
    ("LSTM", {"proj_size": 2, "num_layers": 2}),  # the unrolled path (projection)
    ("GRU", {}), ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {"bias": False}),
]


def _pair(kind, dtype, *args, **kwargs):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(*args, **kwargs).to(getattr(torch, dtype))
    ours = getattr(nn, kind)(*args, dtype=dtype, **kwargs)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


def _flat(out):
    if isinstance(out, tuple | list):
        return [t for item in out for t in _flat(item)]
    return [out]


def _compare(theirs, ours, x, states, dtype):
    rtol, atol = (1e-10, 1e-12) if dtype == "float64" else (2e-5, 2e-6)
    t_in = [torch.tensor(a, requires_grad=True) for a in [x, *states]]
    o_in = [tl.tensor(a, requires_grad=True) for a in [x, *states]]
    t_args, o_args = [t_in[0]], [o_in[0]]
    if states:
        t_args.append(tuple(t_in[1:]) if len(states) == 2 else t_in[1])
        o_args.append(tuple(o_in[1:]) if len(states) == 2 else o_in[1])
    t_out, o_out = _flat(theirs(*t_args)), _flat(ours(*o_args))
    assert len(t_out) == len(o_out)
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(tuple(t.shape)).astype(dtype) for t in t_out]
    for t, o in zip(t_out, o_out, strict=True):
        assert tuple(o.shape) == tuple(t.shape)
        assert o.detach().numpy().dtype == np.dtype(dtype)
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
    sum(torch.sum(t * torch.tensor(w)) for t, w in zip(t_out, weights, strict=True)).backward()
    sum((o * tl.tensor(w)).sum() for o, w in zip(o_out, weights, strict=True)).backward()
    for t, o in zip(t_in, o_in, strict=True):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=rtol * 10, atol=atol * 10)
    ours_params = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(np.asarray(ours_params[name].grad), p.grad.numpy(),
                                   rtol=rtol * 10, atol=atol * 10, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("kind", "options"), LAYERS,
                         ids=[f"{k}-{'-'.join(o) or 'default'}" for k, o in LAYERS])
def test_layer_matches_torch(kind, options, dtype):
    theirs, ours = _pair(kind, dtype, 3, 4, **options)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 3) if options.get("batch_first") else (6, 2, 3)).astype(dtype)
    _compare(theirs, ours, x, [], dtype)
    # given initial states, unbatched
    theirs.zero_grad()
    ours.zero_grad()
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    h = options.get("proj_size") or 4
    states = [rng.standard_normal((layers, h)).astype(dtype)]
    if kind == "LSTM":
        states.append(rng.standard_normal((layers, 4)).astype(dtype))
    _compare(theirs, ours, rng.standard_normal((5, 3)).astype(dtype), states, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cell_matches_torch(kind, dtype):
    theirs, ours = _pair(kind, dtype, 3, 4)
    rng = np.random.default_rng(2)
    states = [rng.standard_normal((2, 4)).astype(dtype)] * (2 if kind == "LSTMCell" else 1)
    _compare(theirs, ours, rng.standard_normal((2, 3)).astype(dtype), states, dtype)


def test_layer_records_one_scan_per_direction():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype="float64")
    out, _ = lstm(tl.tensor(np.random.default_rng(0).standard_normal((7, 2, 3))))
    seen, stack = set(), [out]
    names = []
    while stack:
        t = stack.pop()
        if id(t) in seen or getattr(t, "_op", None) is None:
            continue
        seen.add(id(t))
        names.append(t._op.name)
        stack.extend(getattr(t, "_parents", ()))
    # the parameters require grad, so the output has a history to walk
    assert names.count("lstm_scan") == 4
    assert len(names) < 60  # the unrolled layer recorded about 20 ops per step


# --- hvp, compiled graphs, ONNX, bounds ----------------------------------------------------------


def test_hvp_through_lstm_matches_finite_differences_of_the_gradient():
    nn.manual_seed(0)
    lstm = nn.LSTM(2, 3, dtype="float64")
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal((4, 1, 2)), rng.standard_normal((4, 1, 2))

    def loss(inp):
        out, (h, c) = lstm(inp)
        return (out * out).sum() + (c * h).sum()

    (hv,) = tl.hvp(loss, (x,), (v,))
    grad = tl.grad(loss)
    eps = 1e-5
    fd = (np.asarray(grad(x + eps * v)) - np.asarray(grad(x - eps * v))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(hv), fd, rtol=1e-6, atol=1e-8)


def test_hvp_through_gru_matches_torch_func():
    theirs, ours = _pair("GRU", "float64", 2, 3)
    rng = np.random.default_rng(4)
    x, v = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))

    def t_loss(inp):
        out, h = theirs(inp)
        return (out ** 2).sum() + h.sum()

    def o_loss(inp):
        out, h = ours(inp)
        return (out * out).sum() + h.sum()

    want = torch.func.jvp(torch.func.grad(t_loss), (torch.tensor(x),), (torch.tensor(v),))[1]
    (got,) = tl.hvp(o_loss, (x,), (v,))
    np.testing.assert_allclose(np.asarray(got), want.detach().numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_compiled_gradients_equal_eager_tape(kind):
    theirs, ours = _pair(kind, "float64", 3, 4, num_layers=2, bidirectional=True)
    x = np.random.default_rng(6).standard_normal((5, 2, 3))

    def loss(inp):
        out = ours(inp)[0]
        return (out * out).sum()

    eager_in = tl.tensor(x, requires_grad=True)
    loss(eager_in).backward()
    compiled = tl.grad(loss)(x)
    np.testing.assert_allclose(np.asarray(compiled), eager_in.grad.numpy(), rtol=1e-12,
                               atol=1e-14)


class _Model(nn.Module):
    def __init__(self, kind: str, **options) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(3, 4, dtype="float64", **options)

    def forward(self, x):
        out, state = self.rnn(x)
        last = state[1] if isinstance(state, tuple) else state
        return out.sum(dim=-1) + last.sum()


@pytest.mark.parametrize(("kind", "options"), [
    ("RNN", {"nonlinearity": "relu"}), ("RNN", {"bidirectional": True}),
    ("GRU", {"num_layers": 2}), ("LSTM", {"bidirectional": True})])
def test_compiled_and_exported_scans_equal_eager(tmp_path, kind, options):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    nn.manual_seed(2)
    model = _Model(kind, **options)
    x = np.random.default_rng(8).standard_normal((5, 2, 3))
    eager = model(tl.tensor(x)).detach().numpy()
    compiled = tl.compile(model, x.shape, dtype="float64")
    np.testing.assert_allclose(np.asarray(compiled(x)), eager, rtol=1e-12, atol=1e-14)
    path = tmp_path / "model.onnx"
    tl_onnx.export(model, str(path), x.shape, dtype="float64")
    onnx.checker.check_model(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(out, eager, rtol=1e-10, atol=1e-12)


def test_bound_engine_refuses_the_scan_by_name():
    from torchlean.bounds import ibp

    assert "lstm_scan" not in ibp.RULES and "rnn_scan" not in ibp.RULES
    nn.manual_seed(0)
    model = _Model("LSTM")
    compiled = tl.compile(model, (3, 1, 3), dtype="float64")
    from torchlean.bounds import compute_bounds

    x = np.zeros((3, 1, 3))
    with pytest.raises(TorchLeanError, match="lstm_scan"):
        compute_bounds(compiled, x - 0.1, x + 0.1, method="ibp")


def test_fast_and_reference_layer_gradients_agree():
    nn.manual_seed(4)
    gru = nn.GRU(3, 4, num_layers=2, dtype="float64")
    x = np.random.default_rng(9).standard_normal((6, 2, 3))
    grads = []
    for fast in (True, False):
        gru.zero_grad()
        with fast_kernels(fast):
            out, _ = gru(tl.tensor(x))
            (out * out).sum().backward()
        grads.append([np.array(p.grad) for p in gru.parameters()])
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
