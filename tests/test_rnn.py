"""nn.RNN / nn.LSTM / nn.GRU and their cells against torch.nn with copied weights.

Forward values and the gradients of the input, the initial states and every parameter are
compared in float64 (to rounding) over the options torch has (layers, directions, batch_first,
unbatched input, given or default states, no bias). The layers are compositions of primitives, so
they also run traced by ``tl.compile`` and export to ONNX; both are checked against eager.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean import onnx as tl_onnx
from torchlean.core.errors import ShapeError, TorchLeanError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _pair(kind: str, *args, **kwargs):
    """A torch layer (float64, seeded) and ours with its weights."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(*args, **kwargs).double()
    ours = getattr(nn, kind)(*args, dtype="float64", **kwargs)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    return theirs, ours


def _flat(out):
    """Every tensor of a layer's output (output, h_n[, c_n]) in order."""
    if isinstance(out, tuple | list):
        return [t for item in out for t in _flat(item)]
    return [out]


def _check(theirs, ours, inputs, states=None):
    t_in = [torch.tensor(a, requires_grad=True) for a in inputs]
    o_in = [tl.tensor(a, requires_grad=True) for a in inputs]
    t_args, o_args = [t_in[0]], [o_in[0]]
    if states is not None:
        pack_t, pack_o = (tuple(t_in[1:]), tuple(o_in[1:])) if len(t_in) > 2 else (t_in[1],
                                                                                   o_in[1])
        t_args.append(pack_t)
        o_args.append(pack_o)
    t_out, o_out = _flat(theirs(*t_args)), _flat(ours(*o_args))
    assert len(t_out) == len(o_out)
    weights = [RNG.standard_normal(tuple(t.shape)) for t in t_out]
    for t, o in zip(t_out, o_out, strict=True):
        assert tuple(o.shape) == tuple(t.shape)
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)
    sum(torch.sum(t * torch.tensor(w)) for t, w in zip(t_out, weights, strict=True)).backward()
    sum((o * tl.tensor(w)).sum() for o, w in zip(o_out, weights, strict=True)).backward()
    for t, o in zip(t_in, o_in, strict=True):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)
    ours_params = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(np.asarray(ours_params[name].grad), p.grad.numpy(),
                                   rtol=1e-9, atol=1e-12, err_msg=name)


LAYER_CASES = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
    ("RNN", {"bias": False, "batch_first": True}),
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"batch_first": True, "bias": False}),
    ("GRU", {}),
    ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
]


@pytest.mark.parametrize(("kind", "options"), LAYER_CASES,
                         ids=[f"{k}-{'-'.join(o) or 'default'}" for k, o in LAYER_CASES])
def test_layer_matches_torch(kind, options):
    theirs, ours = _pair(kind, 3, 4, **options)
    x = RNG.standard_normal((2, 5, 3) if options.get("batch_first") else (5, 2, 3))
    _check(theirs, ours, [x])


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_layer_with_initial_states_and_unbatched_input(kind):
    theirs, ours = _pair(kind, 3, 4, num_layers=2, bidirectional=True)
    layers = 4
    states = [RNG.standard_normal((layers, 2, 4))] * (2 if kind == "LSTM" else 1)
    _check(theirs, ours, [RNG.standard_normal((5, 2, 3))] + states, states=True)
    unbatched = [RNG.standard_normal((layers, 4))] * (2 if kind == "LSTM" else 1)
    theirs.zero_grad()
    ours.zero_grad()
    _check(theirs, ours, [RNG.standard_normal((6, 3))] + unbatched, states=True)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("batched", [True, False])
def test_cell_matches_torch(kind, batched):
    theirs, ours = _pair(kind, 3, 4)
    lead = (2,) if batched else ()
    x = RNG.standard_normal(lead + (3,))
    _check(theirs, ours, [x])
    theirs.zero_grad()
    ours.zero_grad()
    states = [RNG.standard_normal(lead + (4,))] * (2 if kind == "LSTMCell" else 1)
    _check(theirs, ours, [x] + states, states=True)


def test_default_initialisation_has_torchs_bound_and_names():
    nn.manual_seed(3)
    lstm = nn.LSTM(5, 8, num_layers=2, bidirectional=True)
    torch_names = [n for n, _ in torch.nn.LSTM(5, 8, num_layers=2, bidirectional=True)
                   .named_parameters()]
    assert [n for n, _ in lstm.named_parameters()] == torch_names
    bound = 1 / np.sqrt(8)
    values = np.concatenate([np.ravel(p.value) for p in lstm.parameters()])
    assert values.min() >= -bound and values.max() <= bound
    assert values.max() - values.min() > 1.8 * bound  # spread over the whole interval
    assert lstm.weight_ih_l1.shape == (32, 16)  # the second layer reads both directions


def test_errors_name_the_layer():
    lstm = nn.LSTM(3, 4)
    with pytest.raises(ShapeError, match="input_size"):
        lstm(tl.zeros(5, 2, 7))
    with pytest.raises(ShapeError, match="h_0"):
        lstm(tl.zeros(5, 2, 3), (tl.zeros(2, 2, 4), tl.zeros(1, 2, 4)))
    with pytest.raises(TorchLeanError, match="tuple"):
        lstm(tl.zeros(5, 2, 3), tl.zeros(1, 2, 4))
    with pytest.raises(TorchLeanError, match="float"):
        lstm(tl.zeros(5, 2, 3, dtype=tl.int64))
    with pytest.raises(TorchLeanError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(TorchLeanError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)  # supported, but must be below hidden_size
    with pytest.raises(TorchLeanError, match="dropout"):
        nn.GRU(3, 4, dropout=1.5)


def test_dropout_between_layers_only_in_training():
    gru = nn.GRU(3, 4, num_layers=2, dropout=0.5, dtype="float64")
    x = tl.tensor(RNG.standard_normal((4, 2, 3)))
    gru.eval()
    a, _ = gru(x)
    b, _ = gru(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    gru.train()
    c, _ = gru(x)
    assert not np.allclose(c.detach().numpy(), a.detach().numpy())


class _Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 5, batch_first=True, dtype="float64")
        self.head = nn.Linear(5, 2, dtype="float64")

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def test_compiled_and_exported_lstm_equal_eager(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    nn.manual_seed(1)
    model = _Tagger()
    x = RNG.standard_normal((2, 4, 3))
    eager = model(tl.tensor(x)).detach().numpy()
    compiled = tl.compile(model, x.shape, dtype="float64")
    np.testing.assert_allclose(np.asarray(compiled(x)), eager, rtol=1e-12, atol=1e-14)
    path = tmp_path / "tagger.onnx"
    tl_onnx.export(model, str(path), x.shape, dtype="float64")
    onnx.checker.check_model(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(out, eager, rtol=1e-10, atol=1e-12)
