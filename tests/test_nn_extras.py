"""nn.ModuleList/ModuleDict, nn.init, nn.utils gradient clipping, Module.double()/float(),
Module.apply, Sequential item assignment and functional.masked_fill, against torch where torch
defines the answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.core.errors import IndexRangeError, ShapeError, TorchLeanError
from torchlean.engine.params import Param
from torchlean.nn import functional as TF

torch = pytest.importorskip("torch")


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(2)])
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 1), "b": nn.Linear(3, 2)})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).relu()
        return self.heads["a"](x), self.heads["b"](x)


class TorchBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(2)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 1), "b": torch.nn.Linear(3, 2)})


def test_containers_register_under_torchs_names():
    ours, theirs = Blocks(), TorchBlocks()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    a, b = ours(tl.ones(2, 3))
    assert tuple(a.shape) == (2, 1) and tuple(b.shape) == (2, 2)
    layers = ours.layers
    layers.append(nn.Linear(3, 3))
    layers.insert(0, nn.Tanh())
    assert len(layers) == 4 and isinstance(layers[0], nn.Tanh)
    assert [k for k, _ in layers.named_children()] == ["0", "1", "2", "3"]
    assert isinstance(layers[1:], nn.ModuleList) and len(layers[1:]) == 3
    del layers[0]
    assert len(ours.parameters()) == 3 * 2 + 2 * 2  # three Linear layers, two heads
    with pytest.raises(IndexRangeError):
        layers[7]
    with pytest.raises(TorchLeanError, match="Module"):
        layers.append("relu")
    heads = ours.heads
    assert "a" in heads and list(heads.keys()) == ["a", "b"]
    heads["c"] = nn.Identity()
    assert list(heads) == ["a", "b", "c"]
    with pytest.raises(TorchLeanError, match="keys"):
        heads["x.y"] = nn.Identity()


def test_sequential_item_assignment_and_apply():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    seq[2] = nn.Linear(2, 3)
    assert tuple(seq(tl.ones(1, 2)).shape) == (1, 3)
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    visited = []
    seq.apply(lambda m: visited.append(type(m).__name__))
    assert visited == ["Linear", "ReLU", "Linear", "Sequential"]  # children first, as torch

    def init(m):
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)
            nn.init.ones_(m.bias)

    seq.apply(init)
    np.testing.assert_array_equal(seq(tl.ones(1, 2)).detach().numpy(), [[1, 1, 1]])


def test_double_and_float_convert_parameters_and_buffers():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm2d(2))
    held = model[0].weight
    before = held.value.copy()
    model.double()
    assert all(p.dtype == np.float64 for p in model.parameters())
    assert model[1].running_mean.dtype == np.float64
    # converted in place, as torch's: the object an optimiser holds is the converted one
    assert model[0].weight is held and held.name == "weight"
    np.testing.assert_array_equal(held.value, before.astype(np.float64))
    model.float()
    assert all(p.dtype == np.float32 for p in model.parameters())
    out = model[0](tl.ones(1, 2, dtype=tl.float32))
    assert out.dtype == np.float32


def _param(shape, dtype="float32"):
    return Param(np.zeros(shape), dtype=dtype)


def test_init_formulas_match_torch():
    for name in ("linear", "conv2d", "sigmoid", "tanh", "relu", "selu"):
        assert nn.init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(
        torch.nn.init.calculate_gain("leaky_relu", 0.2))
    shape = (64, 32, 3, 3)
    fan_in, fan_out = 32 * 9, 64 * 9
    nn.manual_seed(0)
    cases = {
        "xavier_uniform_": (nn.init.xavier_uniform_, math.sqrt(6 / (fan_in + fan_out)), None),
        "kaiming_uniform_": (lambda p: nn.init.kaiming_uniform_(p, a=math.sqrt(5)),
                             math.sqrt(6 / ((1 + 5) * fan_in)), None),
        "xavier_normal_": (nn.init.xavier_normal_, None, math.sqrt(2 / (fan_in + fan_out))),
        "kaiming_normal_": (lambda p: nn.init.kaiming_normal_(p, mode="fan_out",
                                                              nonlinearity="relu"),
                            None, math.sqrt(2 / fan_out)),
    }
    for label, (fn, bound, std) in cases.items():
        p = _param(shape)
        assert fn(p) is p
        v = p.value
        if bound is not None:  # uniform on (-bound, bound): its extremes come close
            assert np.abs(v).max() <= bound and np.abs(v).max() > 0.99 * bound, label
            assert v.std() == pytest.approx(bound / math.sqrt(3), rel=0.03), label
        else:
            assert v.std() == pytest.approx(std, rel=0.03) and abs(v.mean()) < 0.05 * std, label
    p = _param((1000,))
    nn.init.uniform_(p, -2.0, 3.0)
    assert p.value.min() >= -2 and p.value.max() < 3 and p.value.mean() == pytest.approx(0.5,
                                                                                         abs=0.1)
    nn.init.normal_(p, mean=1.0, std=0.02)
    assert p.value.mean() == pytest.approx(1.0, abs=0.005)
    assert p.value.std() == pytest.approx(0.02, rel=0.1)
    nn.init.constant_(p, 0.25)
    assert (p.value == 0.25).all()
    q = _param((2, 3))
    nn.init.eye_(q)
    np.testing.assert_array_equal(q.value, np.eye(2, 3))
    with pytest.raises(ShapeError, match="fewer than 2"):
        nn.init.xavier_uniform_(_param((4,)))
    with pytest.raises(TorchLeanError, match="mode"):
        nn.init.kaiming_uniform_(_param((2, 2)), mode="fan")
    with pytest.raises(TorchLeanError, match="parameter or tensor"):
        nn.init.zeros_(np.zeros(3))


def test_init_draws_follow_the_seed():
    a, b = _param((3, 4)), _param((3, 4))
    nn.manual_seed(7)
    nn.init.normal_(a)
    nn.manual_seed(7)
    nn.init.normal_(b)
    np.testing.assert_array_equal(a.value, b.value)
    nn.init.normal_(b, generator=tl.Generator(1))
    assert not np.array_equal(a.value, b.value)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=(3, 4)), rng.normal(size=(5,))]
    ours = [Param(np.zeros_like(g), dtype="float64") for g in grads]
    theirs = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, tp, g in zip(ours, theirs, grads, strict=True):
        p.grad = g.copy()
        tp.grad = torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert float(total) == pytest.approx(float(expected), rel=1e-12)
    for p, tp in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-12)


def test_clip_grad_value_and_model_parameters():
    model = nn.Linear(3, 2)
    (model(tl.ones(4, 3)) * 100).sum().backward()
    nn.utils.clip_grad_value_(model.parameters(), 0.5)
    assert all(np.abs(p.grad).max() <= 0.5 for p in model.parameters())
    total = nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert float(total) > 0.1
    norm = math.sqrt(sum(float((np.asarray(p.grad, dtype=np.float64) ** 2).sum())
                         for p in model.parameters()))
    assert norm == pytest.approx(0.1, rel=1e-4)
    with pytest.raises(TorchLeanError, match="max_norm"):
        nn.utils.clip_grad_norm_(model.parameters(), "big")


def test_masked_fill_matches_torch_forward_and_backward():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 4))
    mask = np.tril(np.ones((4, 4))) == 0
    ours = tl.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out = TF.masked_fill(ours, tl.tensor(mask), float("-inf")).softmax(-1)
    expected = theirs.masked_fill(torch.tensor(mask), float("-inf")).softmax(-1)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12)
    weights = rng.normal(size=x.shape)
    (out * tl.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-14)
    filled = TF.masked_fill(np.ones((2, 3)), np.array([True, False, True]), 7.0)
    np.testing.assert_array_equal(filled, [[7, 1, 7], [7, 1, 7]])
    with pytest.raises(ShapeError, match="broadcast"):
        TF.masked_fill(np.ones((2, 3)), np.array([True, False]), 0.0)
    with pytest.raises(TorchLeanError, match="boolean"):
        TF.masked_fill(np.ones(3), np.array([1, 0, 1]), 0.0)
