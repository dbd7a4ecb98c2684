"""tl.nn against torch.nn: forward and backward in float64 on every path, plus module mechanics.

Each layer is compared with its torch.nn counterpart after copying torch's weights across with
``load_state_dict`` (so the parameter names and layouts are checked too). "Every path" means the
eager session, the session's compiled backend, and ``tl.compile`` (parameters as graph inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean import nn
from torchlean.core.errors import CheckpointError, ShapeError, TorchLeanError, TraceError
from torchlean.engine.params import Param
from torchlean.engine.session import Options
from torchlean.ops.random import splitmix64_int
from torchlean.optim import SGD
from torchlean.training.trainers import Session

PATHS = ("eager", "session-compiled", "compile")
RTOL, ATOL = 1e-9, 1e-11


def from_torch(module: nn.Module, torch_module: torch.nn.Module) -> None:
    module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})


def randomise(torch_module: torch.nn.Module, seed: int) -> None:
    """Non-trivial values for every torch parameter (e.g. LayerNorm's ones and zeros)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in torch_module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))


def run_ours(module: nn.Module, x: np.ndarray, cotangent: np.ndarray, path: str,
             call: Callable[[Any], Any] | None = None
             ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(output, input gradient, {parameter name: gradient}) for output cotangent ``cotangent``."""
    fn = call or module
    names = {id(p): n for n, p in module.named_parameters()}
    module.zero_grad()
    if path == "compile":
        c = tl.compile(fn, x.shape, dtype="float64")
        out = c.forward(x)
        cotangents = c.vjp((x,), cotangent)
        grads = {names[id(p)]: g for p, g in zip(c.params, cotangents[1:], strict=True)}
        return out, cotangents[0], grads
    backend = "eager" if path == "eager" else "compiled"
    s = Session(Options(backend=backend, dtype="float64"))
    x_ref = s.input(x, requires_grad=True)
    out_ref = fn(x_ref)
    out = s.value(out_ref)
    grads = s.backward(out_ref, cotangent)
    return out, s.grad(grads, x_ref), {n: p.grad for n, p in module.named_parameters()
                                       if p.grad is not None}


def run_torch(torch_module: torch.nn.Module, x: np.ndarray, cotangent: np.ndarray,
              call: Callable[[Any], Any] | None = None
              ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    torch_module.zero_grad()
    xt = torch.tensor(x, requires_grad=True)
    out = (call or torch_module)(xt)
    out.backward(torch.tensor(cotangent))
    return (out.detach().numpy(), xt.grad.numpy(),
            {n: p.grad.numpy() for n, p in torch_module.named_parameters()})


def assert_matches_torch(make: Callable[[], tuple[nn.Module, torch.nn.Module]],
                         x_shape: tuple[int, ...], path: str, seed: int = 0,
                         ours_call: Callable[[nn.Module], Callable[[Any], Any]] | None = None,
                         torch_call: Callable[[torch.nn.Module], Callable[[Any], Any]] | None
                         = None, positive: bool = False) -> None:
    ours, theirs = make()
    randomise(theirs, seed)
    from_torch(ours, theirs)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=x_shape)
    if positive:
        x = np.abs(x) + 0.1
    # The cotangent needs the output shape: run torch's forward first.
    with torch.no_grad():
        out_shape = (torch_call(theirs) if torch_call else theirs)(torch.tensor(x)).shape
    cotangent = rng.normal(size=tuple(out_shape))
    out_t, dx_t, grads_t = run_torch(theirs, x, cotangent, torch_call and torch_call(theirs))
    out, dx, grads = run_ours(ours, x, cotangent, path, ours_call and ours_call(ours))
    np.testing.assert_allclose(out, out_t, rtol=RTOL, atol=ATOL, err_msg="forward")
    np.testing.assert_allclose(dx, dx_t, rtol=RTOL, atol=ATOL, err_msg="input gradient")
    assert set(grads) == set(grads_t)
    for name, g in grads_t.items():
        np.testing.assert_allclose(grads[name], g, rtol=RTOL, atol=ATOL, err_msg=name)


# ---------------------------------------------------------------------------------------------
# Layers against torch.nn

D = dict(dtype="float64")
T = torch.float64

LAYERS: dict[str, tuple[Callable[[], tuple[nn.Module, torch.nn.Module]], tuple[int, ...]]] = {
    "linear": (lambda: (nn.Linear(5, 4, **D), torch.nn.Linear(5, 4, dtype=T)), (3, 5)),
    "linear-1d": (lambda: (nn.Linear(5, 4, **D), torch.nn.Linear(5, 4, dtype=T)), (5,)),
    "linear-batched-nobias": (lambda: (nn.Linear(5, 4, bias=False, **D),
                                       torch.nn.Linear(5, 4, bias=False, dtype=T)), (2, 3, 5)),
    "conv2d": (lambda: (nn.Conv2d(3, 4, 3, stride=2, padding=1, **D),
                        torch.nn.Conv2d(3, 4, 3, stride=2, padding=1, dtype=T)), (2, 3, 7, 7)),
    "conv2d-rect-nobias": (lambda: (nn.Conv2d(2, 3, (2, 3), stride=(1, 2), padding=(0, 1),
                                              bias=False, **D),
                                    torch.nn.Conv2d(2, 3, (2, 3), stride=(1, 2), padding=(0, 1),
                                                    bias=False, dtype=T)), (2, 2, 5, 6)),
    "conv2d-unbatched": (lambda: (nn.Conv2d(3, 2, 3, **D), torch.nn.Conv2d(3, 2, 3, dtype=T)),
                         (3, 5, 5)),
    "conv-transpose2d": (lambda: (nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1,
                                                     output_padding=1, **D),
                                  torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1,
                                                           output_padding=1, dtype=T)),
                         (2, 3, 4, 4)),
    "conv-transpose2d-nobias": (lambda: (nn.ConvTranspose2d(2, 3, 2, bias=False, **D),
                                         torch.nn.ConvTranspose2d(2, 3, 2, bias=False, dtype=T)),
                                (1, 2, 3, 3)),
    "maxpool": (lambda: (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)), (2, 3, 6, 6)),
    "maxpool-pad": (lambda: (nn.MaxPool2d(3, stride=2, padding=1),
                             torch.nn.MaxPool2d(3, stride=2, padding=1)), (2, 2, 7, 7)),
    "avgpool": (lambda: (nn.AvgPool2d(2), torch.nn.AvgPool2d(2)), (2, 3, 6, 6)),
    "avgpool-pad": (lambda: (nn.AvgPool2d(3, stride=2, padding=1),
                             torch.nn.AvgPool2d(3, stride=2, padding=1)), (2, 2, 7, 7)),
    "layernorm": (lambda: (nn.LayerNorm(6, **D), torch.nn.LayerNorm(6, dtype=T)), (2, 3, 6)),
    "layernorm-eps": (lambda: (nn.LayerNorm(4, eps=0.5, **D),
                               torch.nn.LayerNorm(4, eps=0.5, dtype=T)), (3, 4)),
    "batchnorm-eval": (lambda: (nn.BatchNorm2d(3, **D).eval(),
                                _bn_with_stats(torch.nn.BatchNorm2d(3, dtype=T)).eval()),
                       (2, 3, 4, 4)),
    "flatten": (lambda: (nn.Flatten(), torch.nn.Flatten()), (2, 3, 4)),
    "flatten-range": (lambda: (nn.Flatten(0, 1), torch.nn.Flatten(0, 1)), (2, 3, 4)),
    "relu": (lambda: (nn.ReLU(), torch.nn.ReLU()), (4, 5)),
    "gelu": (lambda: (nn.GELU(), torch.nn.GELU()), (4, 5)),
    "silu": (lambda: (nn.SiLU(), torch.nn.SiLU()), (4, 5)),
    "tanh": (lambda: (nn.Tanh(), torch.nn.Tanh()), (4, 5)),
    "sigmoid": (lambda: (nn.Sigmoid(), torch.nn.Sigmoid()), (4, 5)),
    "dropout-eval": (lambda: (nn.Dropout(0.5).eval(), torch.nn.Dropout(0.5).eval()), (4, 5)),
}


def _bn_with_stats(bn: torch.nn.BatchNorm2d) -> torch.nn.BatchNorm2d:
    """Non-trivial running statistics to be copied across with the state dict."""
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0], dtype=bn.running_mean.dtype))
        bn.running_var.copy_(torch.tensor([0.25, 2.0, 1.5], dtype=bn.running_var.dtype))
        bn.num_batches_tracked.fill_(7)
    return bn


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_torch(name: str, path: str) -> None:
    make, x_shape = LAYERS[name]
    assert_matches_torch(make, x_shape, path, seed=sum(map(ord, name)))


def _mha_pair(d: int, heads: int, causal: bool = False) -> tuple[nn.Module, torch.nn.Module]:
    return (nn.MultiheadAttention(d, heads, causal=causal, **D),
            torch.nn.MultiheadAttention(d, heads, bias=False, batch_first=True, dtype=T))


def _torch_attention(mask: np.ndarray | None) -> Callable[[torch.nn.Module],
                                                          Callable[[Any], Any]]:
    # torch's boolean attn_mask marks forbidden pairs; ours marks allowed ones.
    attn_mask = None if mask is None else torch.tensor(~mask)
    return lambda m: (lambda x: m(x, x, x, attn_mask=attn_mask, need_weights=False)[0])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("x_shape", [(5, 8), (2, 5, 8)])
def test_multihead_attention_matches_torch(x_shape: tuple[int, ...], path: str) -> None:
    assert_matches_torch(lambda: _mha_pair(8, 2), x_shape, path, seed=3,
                         torch_call=_torch_attention(None))


@pytest.mark.parametrize("path", PATHS)
def test_multihead_attention_causal_and_mask_match_torch(path: str) -> None:
    n = 5
    causal = np.tril(np.ones((n, n), dtype=bool))
    assert_matches_torch(lambda: _mha_pair(8, 4, causal=True), (2, n, 8), path, seed=4,
                         torch_call=_torch_attention(causal))
    mask = np.ones((n, n), dtype=bool)
    mask[:, 1] = False
    mask[3, 3] = False
    assert_matches_torch(lambda: _mha_pair(6, 3), (n, 6), path, seed=5,
                         ours_call=lambda m: (lambda x: m(x, mask=mask)),
                         torch_call=_torch_attention(mask))
    # causal=True intersects a given mask with the lower triangle.
    assert_matches_torch(lambda: _mha_pair(6, 3, causal=True), (n, 6), path, seed=6,
                         ours_call=lambda m: (lambda x: m(x, mask=mask)),
                         torch_call=_torch_attention(mask & causal))


def test_multihead_attention_rejects_bad_masks_and_sizes() -> None:
    with pytest.raises(TorchLeanError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    m = nn.MultiheadAttention(4, 2, bias=False, **D)
    s = Session(Options(dtype="float64"))
    x = s.input(np.zeros((3, 4)))
    with pytest.raises(ShapeError, match="boolean"):
        m(x, mask=np.ones((3, 3)))
    with pytest.raises(ShapeError, match="boolean"):
        m(x, mask=np.ones((2, 2), dtype=bool))
    with pytest.raises(ShapeError, match="MultiheadAttention"):
        m(s.input(np.zeros((3, 5))))


@pytest.mark.parametrize("path", PATHS)
def test_embedding_matches_torch(path: str) -> None:
    ours, theirs = nn.Embedding(10, 4, **D), torch.nn.Embedding(10, 4, dtype=T)
    randomise(theirs, 0)
    from_torch(ours, theirs)
    ids = np.array([[1, 7, 7], [0, 9, 3]])
    rng = np.random.default_rng(0)
    cotangent = rng.normal(size=(2, 3, 4))
    out_t = theirs(torch.tensor(ids))
    out_t.backward(torch.tensor(cotangent))
    ours.zero_grad()
    if path == "compile":
        c = tl.compile(ours, ids.shape, dtype="float64")
        out = c.forward(ids.astype(np.float64))
        grad = c.vjp((ids.astype(np.float64),), cotangent)[1]
    else:
        s = Session(Options(backend="eager" if path == "eager" else "compiled", dtype="float64"))
        out_ref = ours(s.input(ids))  # integer ids become a float leaf without gradient
        out = s.value(out_ref)
        s.backward(out_ref, cotangent)
        grad = ours.weight.grad
    np.testing.assert_array_equal(out, out_t.detach().numpy())
    np.testing.assert_allclose(grad, theirs.weight.grad.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("ids", [[0, 5], [-1], [0.7], [3]])
def test_embedding_refuses_ids_torch_refuses(ids: list) -> None:
    # Issue 25: these used to give zero rows in silence (F.embedding already raised).
    emb = nn.Embedding(3, 2, **D)
    with pytest.raises(TorchLeanError, match="embedding: ") as info:
        emb(np.array(ids))
    with pytest.raises(type(info.value)):
        emb(tl.tensor(ids))
    with pytest.raises((IndexError, RuntimeError)):  # torch refuses them too
        torch.nn.Embedding(3, 2)(torch.tensor(ids))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_embedding_non_finite_row_reaches_only_its_lookups(bad: float) -> None:
    emb = nn.Embedding(4, 3, **D)
    w = emb.weight.value.copy()
    w[3, 1] = bad
    emb.weight.assign(w)
    out = emb(np.array([[0, 1], [2, 3]]))
    np.testing.assert_array_equal(out[:, :1].reshape(-1, 3)[:2], w[[0, 2]])
    np.testing.assert_array_equal(out[0], w[[0, 1]])
    assert np.isfinite(out[1, 0]).all() and not np.isfinite(out[1, 1, 1])
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(w))(torch.tensor([[0, 1], [2, 3]]))
    np.testing.assert_array_equal(out, theirs.numpy())


def test_embedding_gradient_is_a_scatter_add_of_rows() -> None:
    emb = nn.Embedding(4, 2, **D)
    ids = np.array([1, 3, 1])
    x = tl.tensor(ids)
    out = emb(x)
    out.sum().backward()
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(emb.weight.value), freeze=False)
    theirs(torch.tensor(ids)).sum().backward()
    np.testing.assert_array_equal(np.asarray(emb.weight.grad), theirs.weight.grad.numpy())


def _small_cnn(channels: int = 3) -> tuple[nn.Module, torch.nn.Module]:
    ours = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1, **D), nn.BatchNorm2d(4, **D),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 5, **D),
                         nn.Dropout(0.3))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(channels, 4, 3, padding=1, dtype=T),
                                 torch.nn.BatchNorm2d(4, dtype=T), torch.nn.ReLU(),
                                 torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                 torch.nn.Linear(36, 5, dtype=T), torch.nn.Dropout(0.3))
    return ours, theirs


@pytest.mark.parametrize("path", PATHS)
def test_sequential_cnn_eval_matches_torch(path: str) -> None:
    def make() -> tuple[nn.Module, torch.nn.Module]:
        ours, theirs = _small_cnn()
        _bn_with_stats_4(theirs[1])
        return ours.eval(), theirs.eval()

    assert_matches_torch(make, (2, 3, 6, 6), path, seed=11)


def _bn_with_stats_4(bn: torch.nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.running_mean.copy_(torch.linspace(-1, 1, 4, dtype=T))
        bn.running_var.copy_(torch.linspace(0.5, 2, 4, dtype=T))


# ---------------------------------------------------------------------------------------------
# BatchNorm: training, running statistics, eval mode


@pytest.mark.parametrize("path", ["eager", "session-compiled"])
def test_batchnorm_training_matches_torch_including_running_stats(path: str) -> None:
    ours, theirs = nn.BatchNorm2d(3, momentum=0.2, **D), torch.nn.BatchNorm2d(3, momentum=0.2,
                                                                              dtype=T)
    randomise(theirs, 1)
    from_torch(ours, theirs)
    rng = np.random.default_rng(1)
    for step in range(3):
        x = rng.normal(loc=step, scale=1 + step, size=(4, 3, 3, 5))
        cotangent = rng.normal(size=x.shape)
        out_t, dx_t, grads_t = run_torch(theirs, x, cotangent)
        out, dx, grads = run_ours(ours, x, cotangent, path)
        np.testing.assert_allclose(out, out_t, rtol=RTOL, atol=1e-10)
        np.testing.assert_allclose(dx, dx_t, rtol=RTOL, atol=1e-10)
        for name in ("weight", "bias"):
            np.testing.assert_allclose(grads[name], grads_t[name], rtol=RTOL, atol=1e-10)
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key], value.numpy(), rtol=1e-12,
                                   err_msg=key)
    assert int(ours.num_batches_tracked) == 3
    # Then eval mode uses the accumulated statistics, exactly as torch does.
    ours.eval()
    theirs.eval()
    x = rng.normal(size=(2, 3, 3, 5))
    cotangent = rng.normal(size=x.shape)
    out_t, dx_t, grads_t = run_torch(theirs, x, cotangent)
    out, dx, grads = run_ours(ours, x, cotangent, path)
    np.testing.assert_allclose(out, out_t, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose(dx, dx_t, rtol=RTOL, atol=1e-10)
    for name in ("weight", "bias"):
        np.testing.assert_allclose(grads[name], grads_t[name], rtol=RTOL, atol=1e-10)


def test_batchnorm_unbatched_input_uses_spatial_statistics() -> None:
    bn = nn.BatchNorm2d(2, momentum=1.0, **D)
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    s = Session(Options(dtype="float64"))
    out = s.value(bn(s.input(x)))
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.running_var, x.var(axis=(1, 2), ddof=1), rtol=1e-12)


def test_batchnorm_training_cannot_be_traced_but_eval_can() -> None:
    bn = nn.BatchNorm2d(3, **D)
    before = bn.state_dict()
    with pytest.raises(TraceError, match="model.eval"):
        tl.compile(bn, (2, 3, 4, 4), dtype="float64")
    for key, value in bn.state_dict().items():  # the failed trace changed nothing
        np.testing.assert_array_equal(value, before[key])
    bn.eval()
    c = tl.compile(bn, (2, 3, 4, 4), dtype="float64")
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 4))
    np.testing.assert_allclose(c.forward(x), x / np.sqrt(1 + 1e-5), rtol=1e-12)


def test_batchnorm_rejects_bad_input() -> None:
    bn = nn.BatchNorm2d(3, **D)
    s = Session(Options(dtype="float64"))
    with pytest.raises(ShapeError, match="BatchNorm2d"):
        bn(s.input(np.zeros((2, 4, 3, 3))))
    with pytest.raises(ShapeError, match="more than one value"):
        bn(s.input(np.zeros((1, 3, 1, 1))))
    assert int(bn.num_batches_tracked) == 0


# ---------------------------------------------------------------------------------------------
# Dropout


def _dropout_run(seed: int, training: bool = True) -> tuple[np.ndarray, np.ndarray]:
    drop = nn.Dropout(0.25)
    drop.train(training)
    s = Session(Options(dtype="float64", seed=seed))
    x = np.arange(1.0, 401.0).reshape(20, 20)
    x_ref = s.input(x, requires_grad=True)
    out = drop(x_ref)
    grads = s.backward(F.sum(out))
    return s.value(out), s.grad(grads, x_ref)


def test_dropout_is_seeded_inverted_and_identity_in_eval() -> None:
    x = np.arange(1.0, 401.0).reshape(20, 20)
    out, grad = _dropout_run(seed=5)
    again, _ = _dropout_run(seed=5)
    other, _ = _dropout_run(seed=6)
    np.testing.assert_array_equal(out, again)
    assert not np.array_equal(out, other)
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / 0.75, rtol=1e-15)
    np.testing.assert_array_equal(grad, kept / 0.75)
    assert 0.6 < kept.mean() < 0.9  # 400 draws with keep probability 0.75
    out_eval, grad_eval = _dropout_run(seed=5, training=False)
    np.testing.assert_array_equal(out_eval, x)
    np.testing.assert_array_equal(grad_eval, np.ones_like(x))


def test_dropout_same_mask_on_both_session_backends() -> None:
    drop = nn.Dropout(0.5)
    values = []
    for backend in ("eager", "compiled"):
        s = Session(Options(backend=backend, dtype="float64", seed=9))
        values.append(s.value(drop(s.input(np.ones((6, 7))))))
    np.testing.assert_array_equal(values[0], values[1])
    dropped = values[0] == 0
    assert 0 < dropped.sum() < dropped.size  # a real mask: some entries dropped, some kept
    np.testing.assert_array_equal(values[0][~dropped], 2.0)


def test_dropout_training_refuses_tracing_and_plain_arrays() -> None:
    drop = nn.Dropout(0.5)
    with pytest.raises(TraceError, match="dropout"):
        tl.compile(drop, (3, 3), dtype="float64")
    with pytest.raises(TorchLeanError, match="session"):
        drop(np.ones(3))
    drop.eval()
    np.testing.assert_array_equal(tl.compile(drop, (3,), dtype="float64").forward(np.ones(3)),
                                  np.ones(3))
    with pytest.raises(TorchLeanError, match=r"\[0, 1\)"):
        nn.Dropout(1.0)


# ---------------------------------------------------------------------------------------------
# Initialisation


def _uniform_reference(shape: tuple[int, ...], seed: int, counter: int) -> np.ndarray:
    """The init generator's draws, recomputed from the scalar SplitMix64 definition."""
    key = splitmix64_int(seed + counter)
    n = int(np.prod(shape))
    u = [(splitmix64_int(key + i) & 0xFFFFFFFF) / 2.0**32 for i in range(n)]
    return np.array(u).reshape(shape)


def test_init_is_kaiming_uniform_from_the_seeded_counter_stream() -> None:
    nn.manual_seed(3)
    lin = nn.Linear(4, 2, **D)
    bound = 1 / math.sqrt(4)
    np.testing.assert_array_equal(lin.weight.value,
                                  (2 * _uniform_reference((2, 4), 3, 0) - 1) * bound)
    np.testing.assert_array_equal(lin.bias.value, (2 * _uniform_reference((2,), 3, 1) - 1) * bound)
    assert nn.initial_seed() == 3


@pytest.mark.parametrize("make, fan_in", [
    (lambda: nn.Linear(50, 40, **D), 50),
    (lambda: nn.Conv2d(4, 8, 3, **D), 36),
    (lambda: nn.ConvTranspose2d(8, 4, 3, **D), 36),  # torch's fan-in: out_channels * kH * kW
])
def test_init_bound_and_spread(make: Callable[[], nn.Module], fan_in: int) -> None:
    nn.manual_seed(0)
    layer = make()
    bound = 1 / math.sqrt(fan_in)
    for p in layer.parameters():
        values = p.value
        assert np.abs(values).max() <= bound
        if values.size > 100:
            assert np.abs(values).max() > 0.95 * bound
            assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3)
            assert abs(values.mean()) < 0.1 * bound


def test_init_matches_torch_bounds() -> None:
    """Our init and the torch layer's own init fill the same interval (same distribution
    family, same fan-in convention)."""
    torch.manual_seed(0)
    nn.manual_seed(0)
    for ours, theirs, fan_in in (
            (nn.Linear(30, 20), torch.nn.Linear(30, 20), 30),
            (nn.Conv2d(3, 6, 5), torch.nn.Conv2d(3, 6, 5), 75),
            (nn.ConvTranspose2d(6, 3, 5), torch.nn.ConvTranspose2d(6, 3, 5), 75)):
        assert ours.weight.value.shape == tuple(theirs.weight.shape)
        bound = 1 / math.sqrt(fan_in)
        for weight in (np.abs(ours.weight.value), theirs.weight.detach().abs().numpy()):
            assert weight.max() <= bound
            assert weight.max() > 0.9 * bound


def test_init_depends_only_on_the_seed() -> None:
    def build() -> nn.Module:
        return nn.Sequential(nn.Conv2d(1, 2, 3), nn.LayerNorm(4), nn.Linear(3, 4),
                             nn.MultiheadAttention(4, 2), nn.Embedding(5, 4))

    nn.manual_seed(42)
    first = build().state_dict()
    nn.Linear(3, 3)  # more draws in between do not matter after re-seeding
    nn.manual_seed(42)
    second = build().state_dict()
    nn.manual_seed(43)
    third = build().state_dict()
    assert list(first) == list(second)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    assert not np.array_equal(first["0.weight"], third["0.weight"])
    # Draws go to layers in construction order: built first, a Linear gets the conv's draws
    # (counter 0), scaled by its own bound 1/sqrt(3) instead of the conv's 1/sqrt(9).
    nn.manual_seed(42)
    first_built = nn.Linear(3, 4)
    np.testing.assert_allclose(first_built.weight.value.ravel() * math.sqrt(3),
                               first["0.weight"].ravel()[:12] * 3, rtol=1e-6)


def test_float32_init_is_the_rounded_float64_init() -> None:
    nn.manual_seed(1)
    wide = nn.Linear(6, 5, dtype="float64")
    nn.manual_seed(1)
    narrow = nn.Linear(6, 5)
    assert narrow.weight.dtype == np.float32
    np.testing.assert_array_equal(narrow.weight.value, wide.weight.value.astype(np.float32))


def test_embedding_and_norm_init() -> None:
    nn.manual_seed(0)
    emb = nn.Embedding(100, 50, **D)
    w = emb.weight.value
    assert abs(w.mean()) < 0.05 and abs(w.std() - 1) < 0.05  # 5000 Box-Muller normals
    assert np.isfinite(w).all()
    ln, bn = nn.LayerNorm(3), nn.BatchNorm2d(2)
    np.testing.assert_array_equal(ln.weight.value, np.ones(3))
    np.testing.assert_array_equal(ln.bias.value, np.zeros(3))
    np.testing.assert_array_equal(bn.running_var, np.ones(2))


def test_manual_seed_rejects_bad_seeds() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(TorchLeanError, match="manual_seed"):
            nn.manual_seed(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Module mechanics and state dicts


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.scale = Param(np.ones(4), requires_grad=True)
        self.norm = nn.BatchNorm2d(2)
        self.note = "not registered"

    def forward(self, x: Any) -> Any:
        return self.proj(x) * x._owner.use(self.scale)


def test_registration_order_names_and_torch_keys() -> None:
    block = Block()
    assert [n for n, _ in block.named_parameters()] == [
        "scale", "proj.weight", "proj.bias", "norm.weight", "norm.bias"]
    assert [n for n, _ in block.named_buffers()] == [
        "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"]
    assert block.scale.name == "scale"
    assert block.note == "not registered" and "note" not in block.state_dict()
    # Reassigning a name replaces the registration; deleting removes it.
    block.scale = Param(np.zeros(4))
    assert len(block.parameters()) == 5
    del block.scale
    assert "scale" not in dict(block.named_parameters())
    with pytest.raises(AttributeError):
        block.scale  # noqa: B018


def test_state_dict_keys_match_torch() -> None:
    torch.manual_seed(0)
    ours = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 4),
                         nn.LayerNorm(4), nn.MultiheadAttention(4, 2), nn.Embedding(3, 4),
                         nn.ConvTranspose2d(2, 1, 2, bias=False))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                                 torch.nn.Flatten(), torch.nn.Linear(8, 4), torch.nn.LayerNorm(4),
                                 torch.nn.MultiheadAttention(4, 2),
                                 torch.nn.Embedding(3, 4),
                                 torch.nn.ConvTranspose2d(2, 1, 2, bias=False))
    ours_state, theirs_state = ours.state_dict(), theirs.state_dict()
    assert list(ours_state) == list(theirs_state)
    for key, value in theirs_state.items():
        assert ours_state[key].shape == tuple(value.shape), key
    ours.load_state_dict({k: v.numpy() for k, v in theirs_state.items()})
    assert ours.state_dict()["1.num_batches_tracked"].dtype == np.int64


def test_state_dict_round_trip_and_copies() -> None:
    nn.manual_seed(0)
    a = nn.Sequential(nn.Linear(3, 4, **D), nn.ReLU(), nn.Linear(4, 2, **D))
    nn.manual_seed(1)
    b = nn.Sequential(nn.Linear(3, 4, **D), nn.ReLU(), nn.Linear(4, 2, **D))
    x = np.random.default_rng(0).normal(size=(5, 3))
    assert not np.allclose(a(x), b(x))
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a(x), b(x))
    b[0].weight.assign(np.zeros((4, 3)))  # loading copied: b's parameters are its own
    assert np.abs(a[0].weight.value).sum() > 0
    state = a.state_dict()
    state["0.bias"][:] = 0  # as torch's: the entries share the parameters' storage
    np.testing.assert_array_equal(a[0].bias.value, np.zeros(4))
    snapshot = {k: v.clone() for k, v in a.state_dict().items()}  # a copy keeps the values
    a[0].weight.data.fill_(1.0)  # an in-place update (as an optimiser step)
    np.testing.assert_array_equal(state["0.weight"].numpy(), np.ones((4, 3)))
    assert np.abs(snapshot["0.weight"].numpy() - 1).sum() > 0


def test_load_state_dict_reports_every_problem_and_changes_nothing() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm2d(4))
    before = model.state_dict()
    state = dict(before)
    del state["0.bias"]
    state["extra.weight"] = np.zeros(2)
    state["0.weight"] = np.zeros((3, 4))
    state["1.running_mean"] = np.full(4, 5.0)  # fits: must still not be written
    with pytest.raises(CheckpointError) as info:
        model.load_state_dict(state)
    message = str(info.value)
    assert "'0.bias'" in message and "'extra.weight'" in message
    assert "'0.weight': shape (3, 4), expected (4, 3)" in message
    assert "3 problem(s)" in message
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


def test_load_state_dict_non_strict_returns_skipped_keys() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    result = model.load_state_dict({"1.weight": np.full(2, 3.0), "other": np.zeros(1)},
                                   strict=False)
    assert result.missing_keys == ["0.weight", "0.bias", "1.bias"]
    assert result.unexpected_keys == ["other"]
    np.testing.assert_array_equal(model[1].weight.value, np.full(2, 3.0, dtype=np.float32))
    with pytest.raises(CheckpointError, match="shape"):
        model.load_state_dict({"1.weight": np.zeros(3)}, strict=False)


def test_checkpoint_save_and_load_a_module(tmp_path: Any) -> None:
    from torchlean.checkpoint import load, save

    nn.manual_seed(0)
    a = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    a[1].running_mean = np.array([0.5, 1.5], dtype=np.float32)
    nn.manual_seed(1)
    b = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    save(tmp_path / "model.safetensors", a)
    load(tmp_path / "model.safetensors", b)
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(b.state_dict()[key], value)


def test_train_eval_zero_grad_and_freezing() -> None:
    model = nn.Sequential(nn.Linear(2, 2, **D), nn.Sequential(nn.Dropout(0.1), nn.ReLU()))
    assert all(m.training for m in model.modules())
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert model[1][0].training
    s = Session(Options(dtype="float64"))
    s.backward(F.sum(model[0](s.input(np.ones((1, 2))))))
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    model.requires_grad_(False)
    s = Session(Options(dtype="float64"))
    s.backward(F.sum(model[0](s.input(np.ones((1, 2)), requires_grad=True))))
    assert all(p.grad is None for p in model.parameters())


def test_sequential_and_flatten() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    assert len(model) == 2 and isinstance(model[0], nn.Flatten) and model[-1] is model[1]
    assert [type(m).__name__ for m in model] == ["Flatten", "Linear"]
    assert "(1): Linear(in_features=12, out_features=3, bias=True)" in repr(model)
    s = Session(Options(dtype="float64"))
    assert model(s.input(np.zeros((2, 3, 4)))).shape == (2, 3)
    assert nn.Flatten(1, 2)(np.zeros((2, 3, 4, 5))).shape == (2, 12, 5)
    assert nn.Flatten(-2)(np.zeros((2, 3, 4))).shape == (2, 12)
    with pytest.raises(ShapeError, match="Flatten"):
        nn.Flatten(2)(np.zeros((2, 3)))
    with pytest.raises(TorchLeanError, match="Module"):
        nn.Sequential(nn.ReLU(), "relu")  # type: ignore[arg-type]


def test_plain_arrays_run_without_autodiff_and_agree_with_a_session() -> None:
    nn.manual_seed(0)
    model, _ = _small_cnn()
    model.eval()
    x = np.random.default_rng(0).normal(size=(2, 3, 6, 6))
    s = Session(Options(dtype="float64"))
    np.testing.assert_allclose(model(x), s.value(model(s.input(x))), rtol=1e-12)


def test_layer_errors_name_the_layer() -> None:
    with pytest.raises(TorchLeanError, match="Linear: in_features"):
        nn.Linear(0, 3)
    with pytest.raises(TorchLeanError, match="Conv2d kernel_size"):
        nn.Conv2d(1, 1, (1, 2, 3))
    with pytest.raises(TorchLeanError, match="LayerNorm"):
        nn.LayerNorm((2, 0))
    with pytest.raises(TorchLeanError, match="GELU"):
        nn.GELU(approximate="sigmoid")
    s = Session(Options(dtype="float64"))
    with pytest.raises(ShapeError, match="linear"):
        nn.Linear(3, 2, **D)(s.input(np.zeros((2, 4))))


# ---------------------------------------------------------------------------------------------
# Training


def _toy_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 2))
    labels = (x[:, 0] * x[:, 1] > 0).astype(np.int64)  # XOR-like quadrants
    return x, labels


def test_tiny_mlp_sgd_decreases_the_loss_eagerly() -> None:
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16, **D), nn.Tanh(), nn.Linear(16, 2, **D))
    opt = SGD(model.parameters(), lr=0.5)
    x, labels = _toy_data()
    losses = []
    for _ in range(30):
        s = Session(Options(dtype="float64"))
        loss = F.cross_entropy(model(s.input(x, requires_grad=False)), labels)
        model.zero_grad()
        s.backward(loss)
        opt.step()
        losses.append(float(s.value(loss)))
    assert losses[-1] < 0.8 * losses[0]
    assert all(np.isfinite(losses))


def test_tiny_mlp_compiled_steps_equal_eager_steps() -> None:
    """The same SGD trajectory through tl.compile (params as graph inputs) and eagerly."""
    x, labels = _toy_data()

    def make() -> nn.Module:
        nn.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 8, **D), nn.GELU(), nn.Linear(8, 2, **D))

    eager, compiled = make(), make()
    c = tl.compile(lambda xs, ys: F.cross_entropy(compiled(xs), ys), x.shape, labels.shape,
                   dtype="float64")
    opt_e, opt_c = SGD(eager.parameters(), lr=0.3), SGD(c.params, lr=0.3)
    losses = []
    for _ in range(5):
        s = Session(Options(dtype="float64"))
        loss = F.cross_entropy(eager(s.input(x, requires_grad=False)), labels)
        eager.zero_grad()
        s.backward(loss)
        opt_e.step()
        value, grads = c.value_and_backward(x, labels.astype(np.float64))
        opt_c.step(list(grads[2:]))
        np.testing.assert_allclose(value, s.value(loss), rtol=1e-12)
        losses.append(float(value))
    assert losses[-1] < losses[0]
    for key, value in eager.state_dict().items():
        np.testing.assert_allclose(compiled.state_dict()[key], value, rtol=1e-11, atol=1e-13)


def test_float32_model_eager_and_compiled_are_bitwise_equal() -> None:
    """Same kernels on both paths: values and parameter gradients agree bit for bit."""
    nn.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.SiLU(),
                          nn.AvgPool2d(2), nn.Flatten(), nn.Linear(12, 4), nn.LayerNorm(4))
    model.eval()
    x = np.random.default_rng(5).normal(size=(2, 2, 4, 4)).astype(np.float32)
    s = Session(Options(dtype="float32"))
    loss = F.sum(model(s.input(x, requires_grad=False)))
    model.zero_grad()
    s.backward(loss)
    eager_grads = [p.grad for p in model.parameters()]
    c = tl.compile(lambda xs: F.sum(model(xs)), x.shape)
    value, grads = c.value_and_backward(x)
    assert value.dtype == np.float32
    np.testing.assert_array_equal(value, s.value(loss))
    by_param = dict(zip(map(id, c.params), grads[1:], strict=True))
    for p, g in zip(model.parameters(), eager_grads, strict=True):
        np.testing.assert_array_equal(by_param[id(p)], g)


# ---------------------------------------------------------------------------------------------
# Layers on tl.Tensor (define-by-run): the same modules, gradients into Param.grad


def test_layers_on_tensors_match_torch() -> None:
    """Conv / BatchNorm (training: batch statistics and running update) / pool / linear and an
    Embedding fed an int64 index tensor, run on tl.Tensor, against torch.nn."""
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(12, 4)).double()
    randomise(theirs, 7)
    ours = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, **D), nn.BatchNorm2d(3, **D), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(12, 4, **D))
    from_torch(ours, theirs)
    x = np.random.default_rng(3).normal(size=(5, 2, 4, 4))
    labels = np.array([0, 1, 2, 3, 1])
    loss = nn.CrossEntropyLoss()(ours(tl.tensor(x, dtype="float64")), tl.tensor(labels))
    loss.backward()
    want = torch.nn.CrossEntropyLoss()(theirs(torch.tensor(x)), torch.tensor(labels))
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
    grads = {n: p.grad for n, p in ours.named_parameters()}
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=RTOL, atol=ATOL)
    for name, value in theirs.state_dict().items():
        if "running" in name:
            np.testing.assert_allclose(ours.state_dict()[name], value.numpy(), rtol=1e-12)

    emb, temb = nn.Embedding(5, 3, **D), torch.nn.Embedding(5, 3).double()
    from_torch(emb, temb)
    ids = np.array([[0, 4], [1, 1]])
    cot = np.arange(12.0).reshape(2, 2, 3)
    out = emb(tl.tensor(ids))
    (out * tl.tensor(cot)).sum().backward()
    want_out = temb(torch.tensor(ids))
    (want_out * torch.tensor(cot)).sum().backward()
    np.testing.assert_array_equal(out.detach().numpy(), want_out.detach().numpy())
    np.testing.assert_array_equal(emb.weight.grad, temb.weight.grad.numpy())


@pytest.mark.parametrize("state", [None, [("weight", 1.0)], "weight"])
def test_load_state_dict_of_a_non_mapping_is_a_named_error(state: object) -> None:
    layer = nn.Linear(2, 2)
    before = layer.weight.detach().numpy().copy()
    with pytest.raises(tl.CheckpointError, match="expected a mapping"):
        layer.load_state_dict(state)  # type: ignore[arg-type]
    np.testing.assert_array_equal(layer.weight.detach().numpy(), before)
