"""``torchlean.nn.functional`` and the loss modules against ``torch.nn.functional`` (float64).

Each case runs the same call with PyTorch's argument order on torchlean and on torch, and
compares the value and the gradients of every differentiable input (for a random output
cotangent), on the eager session, through ``tl.compile``, on ``tl.Tensor`` and, for the value,
on plain arrays. Then the refusals: every unsupported argument or bad input raises a
``TorchLeanError`` naming the function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TTF
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean import Options, Session, nn
from torchlean.core.errors import IndexRangeError, ShapeError, TorchLeanError, TraceError
from torchlean.nn.functional import UnsupportedArgumentError

RTOL, ATOL = 1e-9, 1e-11
HAS_TENSOR = hasattr(tl, "tensor")
PATHS = ["eager", "compile", "array",
         pytest.param("tensor", marks=pytest.mark.skipif(not HAS_TENSOR,
                                                         reason="tl.tensor not exported yet"))]


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def run_ours(fn: Callable[..., Any], xs: list[np.ndarray], path: str, cot_seed: int = 99
             ) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """(value, gradients of ``xs``) of ``fn(*xs)`` for a random output cotangent."""
    if path == "array":
        return np.asarray(fn(*xs)), None
    if path == "compile":
        c = tl.compile(fn, *[x.shape for x in xs], dtype="float64")
        out = np.asarray(c.forward(*xs))
        cot = rng(cot_seed).normal(size=out.shape)
        return out, list(c.vjp(tuple(xs), cot)[:len(xs)])
    if path == "tensor":
        ts = [tl.tensor(x, dtype="float64", requires_grad=True) for x in xs]
        out_t = fn(*ts)
        out = out_t.detach().numpy()
        cot = rng(cot_seed).normal(size=out.shape)
        out_t.backward(tl.tensor(cot, dtype="float64"))
        return out, [t.grad.numpy() for t in ts]
    s = Session(Options(dtype="float64"))
    refs = [s.input(x, requires_grad=True) for x in xs]
    out_ref = fn(*refs)
    out = np.asarray(s.value(out_ref))
    cot = rng(cot_seed).normal(size=out.shape)
    grads = s.backward(out_ref, cot)
    return out, [np.asarray(s.grad(grads, r)) for r in refs]


def run_torch(fn: Callable[..., Any], xs: list[np.ndarray], cot_seed: int = 99
              ) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    out = fn(*ts)
    cot = rng(cot_seed).normal(size=tuple(out.shape))
    out.backward(torch.tensor(cot))
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else np.zeros_like(x)
                                  for t, x in zip(ts, xs, strict=True)]


def check(ours: Callable[..., Any], theirs: Callable[..., Any], xs: list[np.ndarray],
          path: str) -> None:
    value, grads = run_ours(ours, xs, path)
    want_value, want_grads = run_torch(theirs, xs)
    np.testing.assert_allclose(value, want_value, rtol=RTOL, atol=ATOL)
    if grads is not None:
        for g, w in zip(grads, want_grads, strict=True):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def normal(seed: int, *shape: int) -> np.ndarray:
    return rng(seed).normal(size=shape)


LABELS = np.array([0, 2, 1, 4, 2, 3])
LABELS_2D = np.array([[0, 2, 1], [4, 4, 3]])
SOFT = rng(5).dirichlet(np.ones(5), size=6)
WEIGHT = np.array([0.5, 1.0, 2.0, 1.5, 0.25])
IGNORED = np.array([0, -100, 1, 4, -100, 3])
T = torch.tensor

# name -> (ours, theirs, inputs); the inputs are the differentiated arguments, the rest are
# constants closed over (class targets, strides, ...).
CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[np.ndarray]]] = {
    "linear": (lambda x, w, b: TF.linear(x, w, b), lambda x, w, b: TTF.linear(x, w, b),
               [normal(0, 4, 3), normal(1, 5, 3), normal(2, 5)]),
    "linear-nobias-3d": (lambda x, w: TF.linear(x, w), lambda x, w: TTF.linear(x, w),
                         [normal(0, 2, 4, 3), normal(1, 5, 3)]),
    "conv2d": (lambda x, w, b: TF.conv2d(x, w, b, stride=2, padding=1),
               lambda x, w, b: TTF.conv2d(x, w, b, stride=2, padding=1),
               [normal(0, 2, 3, 6, 5), normal(1, 4, 3, 3, 3), normal(2, 4)]),
    "conv2d-same-nobias-unbatched": (
        lambda x, w: TF.conv2d(x, w, padding="same"), lambda x, w: TTF.conv2d(x, w, padding="same"),
        [normal(0, 3, 5, 5), normal(1, 2, 3, 3, 3)]),
    "conv_transpose2d": (
        lambda x, w, b: TF.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        lambda x, w, b: TTF.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        [normal(0, 2, 3, 4, 4), normal(1, 3, 2, 3, 3), normal(2, 2)]),
    "max_pool2d": (lambda x: TF.max_pool2d(x, 2), lambda x: TTF.max_pool2d(x, 2),
                   [normal(0, 2, 3, 6, 4)]),
    "max_pool2d-pad": (lambda x: TF.max_pool2d(x, 3, stride=2, padding=1),
                       lambda x: TTF.max_pool2d(x, 3, stride=2, padding=1),
                       [normal(0, 2, 2, 5, 6)]),
    "avg_pool2d-pad": (lambda x: TF.avg_pool2d(x, 2, stride=1, padding=1),
                       lambda x: TTF.avg_pool2d(x, 2, stride=1, padding=1),
                       [normal(0, 1, 2, 4, 4)]),
    "conv1d": (lambda x, w, b: TF.conv1d(x, w, b, stride=2, padding=1),
               lambda x, w, b: TTF.conv1d(x, w, b, stride=2, padding=1),
               [normal(0, 2, 3, 9), normal(1, 4, 3, 3), normal(2, 4)]),
    "conv3d": (lambda x, w: TF.conv3d(x, w, padding=(1, 0, 1)),
               lambda x, w: TTF.conv3d(x, w, padding=(1, 0, 1)),
               [normal(0, 1, 2, 4, 3, 4), normal(1, 3, 2, 2, 2, 3)]),
    "max_pool1d": (lambda x: TF.max_pool1d(x, 3, stride=2, padding=1),
                   lambda x: TTF.max_pool1d(x, 3, stride=2, padding=1), [normal(0, 2, 3, 7)]),
    "max_pool3d": (lambda x: TF.max_pool3d(x, 2), lambda x: TTF.max_pool3d(x, 2),
                   [normal(0, 1, 2, 4, 4, 2)]),
    "avg_pool1d": (lambda x: TF.avg_pool1d(x, 2, padding=1),
                   lambda x: TTF.avg_pool1d(x, 2, padding=1), [normal(0, 2, 3, 5)]),
    "avg_pool3d": (lambda x: TF.avg_pool3d(x, (2, 1, 2)), lambda x: TTF.avg_pool3d(x, (2, 1, 2)),
                   [normal(0, 1, 2, 4, 3, 4)]),
    "adaptive_avg_pool2d-1": (lambda x: TF.adaptive_avg_pool2d(x, 1),
                              lambda x: TTF.adaptive_avg_pool2d(x, 1), [normal(0, 2, 3, 4, 6)]),
    "adaptive_avg_pool2d-2x3": (lambda x: TF.adaptive_avg_pool2d(x, (2, None)),
                                lambda x: TTF.adaptive_avg_pool2d(x, (2, None)),
                                [normal(0, 3, 4, 6)]),
    "hardtanh": (lambda x: TF.hardtanh(x, -0.5, 0.7), lambda x: TTF.hardtanh(x, -0.5, 0.7),
                 [normal(0, 3, 4)]),
    "relu6": (TF.relu6, TTF.relu6, [4.0 * normal(0, 3, 4) + 3.0]),
    "elu": (lambda x: TF.elu(x, alpha=0.7), lambda x: TTF.elu(x, alpha=0.7), [normal(0, 3, 4)]),
    "logsigmoid": (TF.logsigmoid, TTF.logsigmoid, [10.0 * normal(0, 3, 4)]),
    "huber_loss": (lambda a, b: TF.huber_loss(a, b, delta=0.5),
                   lambda a, b: TTF.huber_loss(a, b, delta=0.5),
                   [normal(0, 3, 4), normal(1, 3, 4)]),
    "smooth_l1_loss-sum": (lambda a, b: TF.smooth_l1_loss(a, b, reduction="sum", beta=0.7),
                           lambda a, b: TTF.smooth_l1_loss(a, b, reduction="sum", beta=0.7),
                           [normal(0, 3, 4), normal(1, 3, 4)]),
    "relu": (TF.relu, TTF.relu, [normal(0, 3, 4)]),
    "leaky_relu": (lambda x: TF.leaky_relu(x, 0.2), lambda x: TTF.leaky_relu(x, 0.2),
                   [normal(0, 3, 4)]),
    "gelu": (TF.gelu, TTF.gelu, [normal(0, 3, 4)]),
    "gelu-tanh": (lambda x: TF.gelu(x, approximate="tanh"),
                  lambda x: TTF.gelu(x, approximate="tanh"), [normal(0, 3, 4)]),
    "silu": (TF.silu, TTF.silu, [normal(0, 3, 4)]),
    "tanh": (TF.tanh, torch.tanh, [normal(0, 3, 4)]),
    "sigmoid": (TF.sigmoid, torch.sigmoid, [normal(0, 3, 4)]),
    "softplus-beta": (lambda x: TF.softplus(x, beta=2.0), lambda x: TTF.softplus(x, beta=2.0),
                      [normal(0, 3, 4)]),
    "softmax-dim0": (lambda x: TF.softmax(x, dim=0), lambda x: TTF.softmax(x, dim=0),
                     [normal(0, 3, 4, 2)]),
    "softmax-dim1": (lambda x: TF.softmax(x, 1), lambda x: TTF.softmax(x, 1),
                     [normal(0, 3, 4, 2)]),
    "softmax-last": (lambda x: TF.softmax(x, dim=-1), lambda x: TTF.softmax(x, dim=-1),
                     [normal(0, 3, 4)]),
    "log_softmax-dim1": (lambda x: TF.log_softmax(x, dim=1), lambda x: TTF.log_softmax(x, dim=1),
                         [normal(0, 2, 5, 3)]),
    "cross_entropy": (lambda x: TF.cross_entropy(x, LABELS),
                      lambda x: TTF.cross_entropy(x, T(LABELS)), [normal(0, 6, 5)]),
    "cross_entropy-sum-smooth": (
        lambda x: TF.cross_entropy(x, LABELS, reduction="sum", label_smoothing=0.2),
        lambda x: TTF.cross_entropy(x, T(LABELS), reduction="sum", label_smoothing=0.2),
        [normal(0, 6, 5)]),
    "cross_entropy-none-weight": (
        lambda x: TF.cross_entropy(x, LABELS, weight=WEIGHT, reduction="none"),
        lambda x: TTF.cross_entropy(x, T(LABELS), weight=T(WEIGHT), reduction="none"),
        [normal(0, 6, 5)]),
    "cross_entropy-weight-smooth-ignore": (
        lambda x: TF.cross_entropy(x, IGNORED, weight=WEIGHT, label_smoothing=0.1),
        lambda x: TTF.cross_entropy(x, T(IGNORED), weight=T(WEIGHT), label_smoothing=0.1),
        [normal(0, 6, 5)]),
    "cross_entropy-spatial": (lambda x: TF.cross_entropy(x, LABELS_2D),
                              lambda x: TTF.cross_entropy(x, T(LABELS_2D)),
                              [normal(0, 2, 5, 3)]),
    "cross_entropy-unbatched": (lambda x: TF.cross_entropy(x, np.array(3)),
                                lambda x: TTF.cross_entropy(x, T(3)), [normal(0, 5)]),
    "cross_entropy-probabilities": (
        lambda x, p: TF.cross_entropy(x, p, label_smoothing=0.1),
        lambda x, p: TTF.cross_entropy(x, p, label_smoothing=0.1), [normal(0, 6, 5), SOFT]),
    "nll_loss-weight": (lambda x: TF.nll_loss(TF.log_softmax(x, dim=1), LABELS, weight=WEIGHT),
                        lambda x: TTF.nll_loss(TTF.log_softmax(x, dim=1), T(LABELS),
                                               weight=T(WEIGHT)), [normal(0, 6, 5)]),
    "nll_loss-ignore-none": (lambda x: TF.nll_loss(x, IGNORED, reduction="none"),
                             lambda x: TTF.nll_loss(x, T(IGNORED), reduction="none"),
                             [normal(0, 6, 5)]),
    "mse_loss": (TF.mse_loss, TTF.mse_loss, [normal(0, 3, 4), normal(1, 3, 4)]),
    "mse_loss-none": (lambda a, b: TF.mse_loss(a, b, reduction="none"),
                      lambda a, b: TTF.mse_loss(a, b, reduction="none"),
                      [normal(0, 3, 4), normal(1, 3, 4)]),
    "l1_loss-sum": (lambda a, b: TF.l1_loss(a, b, reduction="sum"),
                    lambda a, b: TTF.l1_loss(a, b, reduction="sum"),
                    [normal(0, 3, 4), normal(1, 3, 4)]),
    "bce_with_logits": (TF.binary_cross_entropy_with_logits,
                        TTF.binary_cross_entropy_with_logits,
                        [normal(0, 3, 4), rng(1).uniform(size=(3, 4))]),
    "layer_norm": (lambda x, w, b: TF.layer_norm(x, (4,), w, b),
                   lambda x, w, b: TTF.layer_norm(x, (4,), w, b),
                   [normal(0, 3, 4), normal(1, 4), normal(2, 4)]),
    "layer_norm-2axes": (lambda x, w, b: TF.layer_norm(x, (3, 4), w, b, eps=1e-3),
                         lambda x, w, b: TTF.layer_norm(x, (3, 4), w, b, eps=1e-3),
                         [normal(0, 2, 3, 4), normal(1, 3, 4), normal(2, 3, 4)]),
    "layer_norm-noaffine": (lambda x: TF.layer_norm(x, 4), lambda x: TTF.layer_norm(x, (4,)),
                            [normal(0, 3, 4)]),
    "batch_norm-train-4d": (
        lambda x, w, b: TF.batch_norm(x, None, None, w, b, training=True),
        lambda x, w, b: TTF.batch_norm(x, None, None, w, b, training=True),
        [normal(0, 3, 2, 2, 3), normal(1, 2), normal(2, 2)]),
    "batch_norm-train-2d": (lambda x: TF.batch_norm(x, None, None, training=True),
                            lambda x: TTF.batch_norm(x, None, None, training=True),
                            [normal(0, 5, 3)]),
    "batch_norm-eval-3d": (
        lambda x, w, b: TF.batch_norm(x, np.array([0.1, -0.2]), np.array([1.5, 0.5]), w, b),
        lambda x, w, b: TTF.batch_norm(x, T(np.array([0.1, -0.2])), T(np.array([1.5, 0.5])),
                                       w, b),
        [normal(0, 3, 2, 4), normal(1, 2), normal(2, 2)]),
    "embedding": (lambda w: TF.embedding(np.array([[1, 0, 3], [3, 3, 2]]), w),
                  lambda w: TTF.embedding(T([[1, 0, 3], [3, 3, 2]]), w), [normal(0, 4, 3)]),
    "embedding-padding_idx": (lambda w: TF.embedding(np.array([1, 0, 3, 3]), w, padding_idx=3),
                              lambda w: TTF.embedding(T([1, 0, 3, 3]), w, padding_idx=3),
                              [normal(0, 4, 3)]),
    "pad": (lambda x: TF.pad(x, (1, 2, 0, 1), value=0.5),
            lambda x: TTF.pad(x, (1, 2, 0, 1), value=0.5), [normal(0, 2, 3, 4)]),
    "pad-last": (lambda x: TF.pad(x, (2, 0)), lambda x: TTF.pad(x, (2, 0)), [normal(0, 3, 4)]),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch(case: str, path: str) -> None:
    ours, theirs, xs = CASES[case]
    check(ours, theirs, xs, path)


# ---------------------------------------------------------------------------------------------
# Stateful and random functions


def test_batch_norm_updates_running_statistics_as_torch() -> None:
    x = normal(0, 4, 3, 2, 2)
    mean, var = np.zeros(3), np.ones(3)
    tmean, tvar = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    s = Session(Options(dtype="float64"))
    for _ in range(2):
        TF.batch_norm(s.input(x), mean, var, training=True, momentum=0.3)
        TTF.batch_norm(T(x), tmean, tvar, training=True, momentum=0.3)
    np.testing.assert_allclose(mean, tmean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(var, tvar.numpy(), rtol=1e-12)
    # In a traced graph the batch's values are unknown: the update is refused, not skipped.
    with pytest.raises(TraceError, match="batch_norm"):
        tl.compile(lambda v: TF.batch_norm(v, mean, var, training=True), x.shape,
                   dtype="float64")


def test_dropout_masks_and_scales_in_training_only() -> None:
    x = np.ones((50, 40))
    s = Session(Options(dtype="float64", seed=3))
    out = np.asarray(s.value(TF.dropout(s.input(x), p=0.25)))
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75)
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_array_equal(s.value(TF.dropout(s.input(x), 0.25, training=False)), x)
    np.testing.assert_array_equal(TF.dropout(x, 0.5, training=False), x)
    with pytest.raises(TorchLeanError, match="dropout"):
        TF.dropout(x, 0.5)
    with pytest.raises(TorchLeanError, match="dropout: p"):
        TF.dropout(s.input(x), p=1.0)
    # On a tl.Tensor: the gradient is the same mask, scaled.
    t = tl.tensor(x, dtype="float64", requires_grad=True)
    dropped = TF.dropout(t, p=0.25)
    dropped.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), dropped.detach().numpy())
    assert 0.65 < (dropped.detach().numpy() != 0).mean() < 0.85
    assert TF.dropout(t, 0.25, training=False) is t


def test_one_hot_matches_torch() -> None:
    labels = np.array([[0, 3], [2, 1]])
    got = TF.one_hot(labels)
    np.testing.assert_array_equal(got, TTF.one_hot(T(labels)).numpy())
    assert got.dtype == np.int64
    s = Session(Options(dtype="float64"))
    np.testing.assert_array_equal(s.value(TF.one_hot(s.input(labels), num_classes=5)),
                                  TTF.one_hot(T(labels), num_classes=5).numpy())


def test_cross_entropy_traced_with_float_class_indices() -> None:
    """In a compiled graph the labels are an input (values unknown): one_hot of the indices."""
    x = normal(0, 6, 5)
    c = tl.compile(lambda v, y: TF.cross_entropy(v, y, label_smoothing=0.1), x.shape, (6,),
                   dtype="float64")
    want = TTF.cross_entropy(T(x), T(LABELS), label_smoothing=0.1).item()
    np.testing.assert_allclose(c.forward(x, LABELS.astype(np.float64)), want, rtol=1e-12)
    with pytest.raises(UnsupportedArgumentError, match="cross_entropy: class weights"):
        tl.compile(lambda v, y: TF.cross_entropy(v, y, weight=WEIGHT), x.shape, (6,),
                   dtype="float64")


# ---------------------------------------------------------------------------------------------
# Modules


MODULES: dict[str, tuple[nn.Module, torch.nn.Module, list[np.ndarray]]] = {
    "CrossEntropyLoss": (nn.CrossEntropyLoss(label_smoothing=0.05),
                         torch.nn.CrossEntropyLoss(label_smoothing=0.05),
                         [normal(0, 6, 5)]),
    "CrossEntropyLoss-weight-sum": (
        nn.CrossEntropyLoss(weight=WEIGHT, reduction="sum"),
        torch.nn.CrossEntropyLoss(weight=T(WEIGHT), reduction="sum"), [normal(0, 6, 5)]),
    "NLLLoss": (nn.NLLLoss(ignore_index=2), torch.nn.NLLLoss(ignore_index=2), [normal(0, 6, 5)]),
    "MSELoss": (nn.MSELoss(reduction="sum"), torch.nn.MSELoss(reduction="sum"),
                [normal(0, 6, 5), normal(1, 6, 5)]),
    "L1Loss": (nn.L1Loss(), torch.nn.L1Loss(), [normal(0, 6, 5), normal(1, 6, 5)]),
    "BCEWithLogitsLoss": (nn.BCEWithLogitsLoss(), torch.nn.BCEWithLogitsLoss(),
                          [normal(0, 6, 5), rng(1).uniform(size=(6, 5))]),
    "BCEWithLogitsLoss-weight": (
        nn.BCEWithLogitsLoss(weight=np.linspace(0.5, 2.0, 5), reduction="sum"),
        torch.nn.BCEWithLogitsLoss(weight=T(np.linspace(0.5, 2.0, 5)), reduction="sum"),
        [normal(0, 6, 5), rng(1).uniform(size=(6, 5))]),
    "HuberLoss": (nn.HuberLoss(delta=0.5), torch.nn.HuberLoss(delta=0.5),
                  [normal(0, 6, 5), normal(1, 6, 5)]),
    "SmoothL1Loss": (nn.SmoothL1Loss(reduction="sum", beta=2.0),
                     torch.nn.SmoothL1Loss(reduction="sum", beta=2.0),
                     [normal(0, 6, 5), normal(1, 6, 5)]),
    "LeakyReLU": (nn.LeakyReLU(0.1), torch.nn.LeakyReLU(0.1), [normal(0, 3, 4)]),
    "ELU": (nn.ELU(0.5), torch.nn.ELU(0.5), [normal(0, 3, 4)]),
    "Hardtanh": (nn.Hardtanh(-0.3, 0.4), torch.nn.Hardtanh(-0.3, 0.4), [normal(0, 3, 4)]),
    "ReLU6": (nn.ReLU6(), torch.nn.ReLU6(), [4.0 * normal(0, 3, 4) + 3.0]),
    "LogSigmoid": (nn.LogSigmoid(), torch.nn.LogSigmoid(), [normal(0, 3, 4)]),
    "Softplus": (nn.Softplus(beta=0.5), torch.nn.Softplus(beta=0.5), [normal(0, 3, 4)]),
    "AdaptiveAvgPool2d": (nn.AdaptiveAvgPool2d((1, 2)), torch.nn.AdaptiveAvgPool2d((1, 2)),
                          [normal(0, 2, 3, 4, 4)]),
    "Softmax": (nn.Softmax(dim=1), torch.nn.Softmax(dim=1), [normal(0, 3, 4, 2)]),
    "LogSoftmax": (nn.LogSoftmax(dim=0), torch.nn.LogSoftmax(dim=0), [normal(0, 3, 4)]),
    "Identity": (nn.Identity(7, k=3), torch.nn.Identity(7, k=3), [normal(0, 3, 4)]),
    "GELU-exact": (nn.GELU(approximate="none"), torch.nn.GELU(), [normal(0, 3, 4)]),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_match_torch(name: str, path: str) -> None:
    ours, theirs, xs = MODULES[name]
    if "Loss" in name and len(xs) == 1:  # class-index targets are constants
        check(lambda x: ours(x, LABELS), lambda x: theirs(x, T(LABELS)), xs, path)
    else:
        check(ours, theirs, xs, path)


def test_loss_module_weight_is_a_buffer_and_repr() -> None:
    loss = nn.CrossEntropyLoss(weight=WEIGHT)
    np.testing.assert_array_equal(loss.state_dict()["weight"], WEIGHT)
    assert repr(loss) == "CrossEntropyLoss()"  # torch prints losses without arguments
    assert nn.MSELoss().state_dict() == {}


# ---------------------------------------------------------------------------------------------
# Refusals: each names the function and what it found


S = Session(Options(dtype="float64"))
X4 = S.input(normal(0, 2, 3, 4, 4))
W4 = normal(1, 2, 3, 3, 3)

ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (lambda: TF.linear(normal(0, 5, 2), normal(1, 4, 3)), ShapeError,
     "linear: input's last axis.*linear\\(input, weight, bias\\)"),
    (lambda: TF.linear(normal(0, 4, 3), normal(1, 3)), ShapeError, "linear: weight must be 2-D"),
    (lambda: TF.linear(normal(0, 4, 3), normal(1, 5, 3), np.zeros(4)), ShapeError,
     "linear: bias must have shape \\(5,\\)"),
    (lambda: TF.linear("x", normal(1, 5, 3)), ShapeError, "linear: input must be a tensor"),
    (lambda: TF.conv2d(X4, W4, dilation=0), TorchLeanError, "conv2d: dilation must be >= 1"),
    (lambda: TF.conv2d(X4, W4, groups=3), ShapeError, "conv2d: in_channels .* divisible"),
    (lambda: TF.conv2d(W4, X4), ShapeError, "conv2d"),
    (lambda: TF.conv2d(X4, normal(1, 2, 3, 2, 2), padding="same", stride=2), TorchLeanError,
     "conv2d: padding='same' is not supported for strided"),
    (lambda: TF.conv2d(X4, W4, stride=0), TorchLeanError, "conv2d: stride must be >= 1"),
    (lambda: TF.conv_transpose2d(X4, normal(0, 3, 2, 3, 3), groups=2),
     ShapeError, "conv_transpose2d: weight .* groups=2"),
    (lambda: TF.max_pool2d(X4, 2, ceil_mode="yes"), TorchLeanError,
     "max_pool2d: ceil_mode must be a bool"),
    (lambda: TF.max_pool2d(X4, 2, dilation=0), TorchLeanError,
     "max_pool2d: dilation must be >= 1"),
    (lambda: TF.max_pool2d(X4, 2, padding=2, dilation=2), ShapeError,
     "max_pool2d: padding .* half the kernel size"),
    (lambda: TF.max_pool2d(X4, 2, padding=2), ShapeError, "max_pool2d: padding"),
    (lambda: TF.avg_pool2d(X4, 2, divisor_override=0), TorchLeanError,
     "avg_pool2d: divisor_override must be >= 1"),
    (lambda: TF.max_pool2d(normal(0, 4, 4), 2), ShapeError, "max_pool2d: input must be"),
    (lambda: TF.conv1d(normal(0, 2, 3, 5), W4), ShapeError, "conv1d: weight must be 3-D"),
    (lambda: TF.conv3d(normal(0, 3, 4, 4), normal(0, 2, 3, 1, 1, 1)), ShapeError,
     "conv3d: input must be"),
    (lambda: TF.max_pool1d(normal(0, 2, 3, 5), (2, 2)), TorchLeanError,
     "max_pool1d: kernel_size must be an int or 1 ints"),
    (lambda: TF.adaptive_avg_pool2d(X4, 3), UnsupportedArgumentError,
     "adaptive_avg_pool2d: output_size \\(3, 3\\) that does not divide .* tensor"),
    (lambda: TF.hardtanh(X4, 1.0, -1.0), TorchLeanError, "hardtanh: min_val 1.0 must be <="),
    (lambda: TF.elu(X4, alpha="1"), TorchLeanError, "elu: alpha must be a number"),
    (lambda: TF.huber_loss(normal(0, 3), normal(0, 3), delta=0), TorchLeanError,
     "huber_loss: delta must be positive"),
    (lambda: TF.smooth_l1_loss(normal(0, 3), normal(0, 3), beta=-1.0), TorchLeanError,
     "smooth_l1_loss: beta must be >= 0"),
    (lambda: TF.relu(X4, inplace=True), UnsupportedArgumentError, "relu: inplace"),
    (lambda: TF.gelu(X4, approximate="erf"), TorchLeanError, "gelu: approximate"),
    (lambda: TF.softmax(X4), TorchLeanError, "softmax: give dim"),
    (lambda: TF.log_softmax(X4, dim=4), ShapeError, "log_softmax: dim 4 out of range"),
    (lambda: TF.softmax(normal(0, 2, 3), dim=1, dtype="float32"), UnsupportedArgumentError,
     "softmax: dtype"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS, reduction="avg"), TorchLeanError,
     "cross_entropy: reduction must be one of"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS + 1), IndexRangeError,
     "cross_entropy: target class indices must lie in \\[0, 5\\)"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS[:4]), ShapeError,
     "cross_entropy: target must be class indices of shape \\(6,\\)"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS + 0.5), TorchLeanError,
     "cross_entropy: target must hold integer class indices"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS, size_average=1),
     TorchLeanError, "cross_entropy: size_average must be a bool"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS, label_smoothing=1.5), TorchLeanError,
     "cross_entropy: label_smoothing"),
    (lambda: TF.cross_entropy(normal(0, 6, 5), LABELS, weight=np.ones(4)), ShapeError,
     "cross_entropy: weight must have shape \\(5,\\)"),
    (lambda: TF.nll_loss(normal(0, 6, 5), SOFT), ShapeError, "nll_loss: target must be class"),
    (lambda: TF.mse_loss(normal(0, 3, 1), normal(1, 3)), ShapeError,
     "mse_loss: input and target must have the same shape"),
    (lambda: TF.layer_norm(normal(0, 3, 4), (3,)), ShapeError,
     "layer_norm: normalized_shape \\(3,\\) must be the trailing axes"),
    (lambda: TF.layer_norm(normal(0, 3, 4), 4, weight=np.ones(3)), ShapeError,
     "layer_norm: weight must have shape"),
    (lambda: TF.layer_norm(normal(0, 3, 4), 4, eps=0), TorchLeanError, "layer_norm: eps"),
    (lambda: TF.batch_norm(normal(0, 3, 2, 2), None, None), TorchLeanError,
     "batch_norm: training=False needs running_mean"),
    (lambda: TF.batch_norm(normal(0, 3, 2, 2), np.zeros(3), np.ones(2)), ShapeError,
     "batch_norm: running_mean must be"),
    (lambda: TF.batch_norm(normal(0, 1, 2), None, None, training=True), ShapeError,
     "batch_norm: training needs more than one value"),
    (lambda: TF.batch_norm(normal(0, 3, 2), np.zeros(2), np.ones(2), momentum=None),
     UnsupportedArgumentError, "batch_norm: momentum"),
    (lambda: TF.embedding(np.array([0, 4]), normal(0, 4, 3)), IndexRangeError,
     "embedding: indices must lie in \\[0, 4\\)"),
    (lambda: TF.embedding(normal(0, 4, 3), np.array([0, 1])), ShapeError,
     "embedding: weight must be 2-D"),
    (lambda: TF.embedding(np.array([0]), normal(0, 4, 3), max_norm=1.0),
     UnsupportedArgumentError, "embedding: max_norm"),
    (lambda: TF.one_hot(np.array([0, 3]), num_classes=3), IndexRangeError, "one_hot"),
    (lambda: TF.one_hot(np.array([0.5])), TorchLeanError, "one_hot: tensor must hold integer"),
    (lambda: TF.pad(normal(0, 3, 4), (1,)), TorchLeanError, "pad: pad must be an even-length"),
    (lambda: TF.pad(normal(0, 3, 4), (1, -1), mode="reflect"), UnsupportedArgumentError,
     "pad: negative"),
    (lambda: TF.pad(normal(0, 3, 4), (1, 1), mode="mirror"), UnsupportedArgumentError,
     "pad: mode must be one of"),
    (lambda: TF.pad(normal(0, 3, 4), (4, 1), mode="reflect"), ShapeError,
     "pad: reflect padding \\(4, 1\\) must be at most 3"),
    (lambda: nn.CrossEntropyLoss(reduction="batchmean"), TorchLeanError,
     "cross_entropy: reduction|CrossEntropyLoss: reduction"),
    (lambda: nn.NLLLoss(weight=np.ones((2, 2))), TorchLeanError,
     "NLLLoss: weight must be a 1-D array"),
    (lambda: nn.MSELoss(reduce="no"), TorchLeanError, "MSELoss: reduce must be a bool"),
    (lambda: nn.Softmax()(X4), TorchLeanError, "softmax: give dim"),
]


@pytest.mark.parametrize("index", range(len(ERRORS)))
def test_bad_arguments_raise_named_errors(index: int) -> None:
    call, error, pattern = ERRORS[index]
    with pytest.raises(error, match=pattern):
        call()


def test_failed_call_records_nothing() -> None:
    """A refused call leaves the session's tape as it was."""
    s = Session(Options(dtype="float64"))
    x = s.input(normal(0, 6, 5))
    before = len(s.tape.nodes)
    with pytest.raises(IndexRangeError):
        TF.cross_entropy(x, LABELS + 1)
    with pytest.raises(ShapeError):
        TF.linear(x, normal(1, 4, 3))
    with pytest.raises(ShapeError):
        TF.layer_norm(x, 5, weight=np.ones(4))
    assert len(s.tape.nodes) == before


# ---------------------------------------------------------------------------------------------
# Drawn shapes: any axis for softmax / log_softmax, any spatial extent for cross_entropy


@st.composite
def shape_and_dim(draw: st.DrawFn) -> tuple[tuple[int, ...], int]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    return shape, draw(st.integers(-len(shape), len(shape) - 1))


@settings(max_examples=25)
@given(shape_and_dim(), st.sampled_from(["softmax", "log_softmax"]),
       st.sampled_from(["eager", "tensor"]))
def test_softmax_any_dim_matches_torch(case: tuple[tuple[int, ...], int], name: str,
                                       path: str) -> None:
    shape, dim = case
    x = normal(sum(shape) + dim, *shape)
    check(lambda v: getattr(TF, name)(v, dim=dim), lambda v: getattr(TTF, name)(v, dim=dim),
          [x], path)


@settings(max_examples=20)
@given(st.integers(1, 4), st.integers(2, 5), st.lists(st.integers(1, 3), max_size=2),
       st.sampled_from(["mean", "sum", "none"]), st.sampled_from([0.0, 0.3]))
def test_cross_entropy_drawn_shapes_match_torch(n: int, c: int, spatial: list[int],
                                                reduction: str, smoothing: float) -> None:
    x = normal(n * c, n, c, *spatial)
    labels = rng(n + c).integers(0, c, size=(n, *spatial))
    check(lambda v: TF.cross_entropy(v, labels, reduction=reduction, label_smoothing=smoothing),
          lambda v: TTF.cross_entropy(v, T(labels), reduction=reduction,
                                      label_smoothing=smoothing), [x], "eager")


def test_legacy_size_average_and_reduce_map_to_reduction_as_torch() -> None:
    x, y = normal(0, 4, 3), normal(1, 4, 3)
    for kwargs, reduction in (({"size_average": False}, "sum"), ({"reduce": False}, "none"),
                              ({"size_average": True}, "mean"),
                              ({"size_average": False, "reduce": True}, "sum")):
        np.testing.assert_allclose(TF.mse_loss(x, y, **kwargs),
                                   TF.mse_loss(x, y, reduction=reduction))
        assert nn.MSELoss(**kwargs).reduction == reduction
