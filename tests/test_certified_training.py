"""Certified training: the differentiable bounds (values against the numeric rules and an
independent CROWN-IBP, gradients against finite differences, eager against compiled), the
schedules, the settings' checks, the fit hook and the command line; and a short certified run
that certifies far more than natural training with the same steps."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from torchlean import checkpoint, cli, nn, optim, tensor
from torchlean.bounds import _graph_and_consts, box, compute_bounds, engine, margin_spec
from torchlean.bounds import differentiable as D
from torchlean.bounds.certified_training import (
    CertifiedConfig,
    CertifiedTraining,
    CertifiedTrainingError,
    Schedule,
    clip_grad_norm,
    l1_penalty,
    smooth_ramp,
    smoothed_targets,
    warmup_regularisers,
)
from torchlean.bounds.engine import Propagation, UnsupportedOpError
from torchlean.cli import certified as cli_certified
from torchlean.cli.common import blas_threads
from torchlean.core.errors import TorchLeanError
from torchlean.data import Dataset
from torchlean.engine import ops_interface as F
from torchlean.engine.params import Param
from torchlean.engine.session import Options
from torchlean.engine.transforms import compile as compile_fn
from torchlean.training.fit import fit
from torchlean.training.stepper import Stepper
from torchlean.zoo import models
from torchlean.zoo.trained import load_data


def _mlp(dtype="float32", sizes=(12, 16, 8, 4), seed=0):
    nn.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(a, b, dtype=dtype), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1], dtype=dtype))


def _cnn():
    return models.build({"model": "cnn", "image_shape": [1, 8, 8], "channels": [3, 4],
                         "num_classes": 5, "seed": 1})


def _sound_ibp(model, x, y, eps, classes):
    lo, hi = box(x, eps)
    c = compile_fn(lambda v: model(v), x.shape, dtype=_dtype_of(model))
    res = compute_bounds(c, lo, hi, method="ibp", spec=margin_spec(y, classes), kernel=False)
    return res.spec[0]


def _dtype_of(model):
    return next(iter(model.parameters())).dtype


def _without_true(lower, y):
    return np.stack([np.delete(row, label) for row, label in zip(lower, y, strict=True)])


@pytest.mark.parametrize("which", ["mlp", "cnn"])
@pytest.mark.parametrize("eps", [0.0, 0.03])
def test_ibp_values_equal_the_numeric_rules_in_float64(which, eps):
    rng = np.random.default_rng(3)
    model, shape, classes = ((_mlp(), (6, 12), 4) if which == "mlp" else
                             (_cnn(), (6, 1, 8, 8), 5))
    x = rng.uniform(0, 1, shape).astype(np.float32)
    y = rng.integers(0, classes, 6)
    mine = D.margin_lower_bounds(model, x, y, eps, dtype=np.float64)
    assert mine.shape == (6, classes)
    assert np.all(mine[np.arange(6), y] == 0)  # the true class's own margin
    sound = _sound_ibp(model, x, y, eps, classes)
    ours = _without_true(mine, y)
    # Same rules, same values up to rounding; the sound ones are rounded outward, so below.
    np.testing.assert_allclose(ours, sound, rtol=1e-10, atol=1e-10)
    assert np.all(ours >= sound)


def _crown_ibp_reference(ws, bs, x, y, eps, beta):
    """CROWN-IBP of a relu MLP, written out with matrices (float64): the independent check."""
    lo, hi = np.clip(x - eps, 0, 1), np.clip(x + eps, 0, 1)
    pre = []
    for w, b in zip(ws[:-1], bs[:-1], strict=True):
        mid, rad = (lo + hi) / 2, (hi - lo) / 2
        lo, hi = mid @ w.T + b - rad @ np.abs(w.T), mid @ w.T + b + rad @ np.abs(w.T)
        pre.append((lo, hi))
        lo, hi = np.maximum(lo, 0), np.maximum(hi, 0)
    n = ws[-1].shape[0]
    out = []
    for k in range(len(x)):
        c = np.eye(n)[y[k]][None, :] - np.eye(n)
        # IBP with the specification folded into the last layer.
        wc, bc = c @ ws[-1], c @ bs[-1]
        ibp = wc.clip(0) @ lo[k] + wc.clip(max=0) @ hi[k] + bc
        a, const = c, np.zeros(n)
        for layer in range(len(ws) - 1, -1, -1):
            const = const + a @ bs[layer]
            a = a @ ws[layer]
            if layer == 0:
                break
            l_, u_ = pre[layer - 1][0][k], pre[layer - 1][1][k]
            up = np.where(u_ <= 0, 0.0, np.where(l_ >= 0, 1.0, u_ / np.maximum(u_ - l_, 1e-300)))
            icpt = -up * np.minimum(l_, 0)
            low = (u_ + l_ > 0).astype(float)
            const = const + a.clip(max=0) @ icpt
            a = a.clip(0) * low + a.clip(max=0) * up
        x_lo, x_hi = np.clip(x[k] - eps, 0, 1), np.clip(x[k] + eps, 0, 1)
        crown = a.clip(0) @ x_lo + a.clip(max=0) @ x_hi + const
        out.append(beta * crown + (1 - beta) * ibp)
    return np.array(out)


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_crown_ibp_equals_an_independent_implementation_and_is_a_bound(beta):
    rng = np.random.default_rng(4)
    model = _mlp(sizes=(12, 20, 16, 4))
    x = rng.uniform(0, 1, (8, 12))
    y = rng.integers(0, 4, 8)
    eps = 0.08
    mine = D.margin_lower_bounds(model, x, y, eps, crown=True, beta=beta, dtype=np.float64)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)] if hasattr(
        model, "modules") else [model[i] for i in (0, 2, 4)]
    ws = [np.asarray(m.weight.value, np.float64) for m in linears]
    bs = [np.asarray(m.bias.value, np.float64) for m in linears]
    np.testing.assert_allclose(mine, _crown_ibp_reference(ws, bs, x, y, eps, beta), atol=1e-10)
    # A lower bound of the true margins at points of the clipped ball (float64 forward).
    ibp = D.margin_lower_bounds(model, x, y, eps, dtype=np.float64)
    for _ in range(20):
        z = np.clip(x + rng.uniform(-eps, eps, x.shape), 0, 1)
        h = z
        for w, b in zip(ws[:-1], bs[:-1], strict=True):
            h = np.maximum(h @ w.T + b, 0)
        logits = h @ ws[-1].T + bs[-1]
        margins = logits[np.arange(8), y][:, None] - logits
        assert np.all(mine <= margins + 1e-12) and np.all(ibp <= margins + 1e-12)
    if beta == 1.0:  # on this net CROWN is the tighter of the two on most margins
        assert np.mean(mine >= ibp - 1e-12) > 0.5


def _crown_with_ibp_intermediates(model, x, y, eps, classes, chord=False):
    """The numeric engine's CROWN pass (not rounded for the kernels) over IBP intermediate
    bounds: CROWN-IBP at beta = 1, by the certifier's own rules; ``chord``: max pooling's upper
    side by the chord or the constant max u (default: the training bounds' default rule)."""
    c = compile_fn(lambda v: model(v), x.shape, dtype=_dtype_of(model))
    graph, consts, n_data = _graph_and_consts(c)
    prop = Propagation(graph, consts, *box(x, eps), kernel=False, n_data=n_data)
    for i, node in enumerate(graph.nodes):
        if node.kind == "op":
            prop.interval(i)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "POOL_CHORD", chord)
        return prop.lower(graph.output, margin_spec(y, classes))


@pytest.mark.parametrize("chord", [True, False])
@pytest.mark.parametrize("eps", [0.01, 0.05])
def test_cnn_crown_ibp_equals_the_engines_crown_over_ibp_bounds_and_is_a_bound(eps, chord):
    """Convolutions and max pooling have backward rules: the CNN's CROWN-IBP bound is the
    engine's CROWN over IBP intermediate bounds with the same max-pool rule (same values in
    float64), tighter than IBP on most margins, and below the margins at points of the
    ball."""
    rng = np.random.default_rng(6)
    model = _cnn()
    x = rng.uniform(0, 1, (6, 1, 8, 8))
    y = rng.integers(0, 5, 6)
    mine = D.margin_lower_bounds(model, x, y, eps, crown=True, beta=1.0, dtype=np.float64,
                                 pool_chord=chord)
    ours = _without_true(mine, y)
    ref = _crown_with_ibp_intermediates(model, x, y, eps, 5, chord)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-10)
    assert np.all(ours >= ref)  # the engine's is rounded outward
    if chord:  # the chord is never looser than the constant max u, and tighter on some margins
        flat = _without_true(D.margin_lower_bounds(model, x, y, eps, crown=True, beta=1.0,
                                                   dtype=np.float64, pool_chord=False), y)
        assert np.all(ours >= flat - 1e-12) and np.mean(ours > flat + 1e-6) >= 0.3
    ibp = _without_true(D.margin_lower_bounds(model, x, y, eps, dtype=np.float64), y)
    assert np.mean(ours > ibp + 1e-9) > 0.5
    c = compile_fn(lambda v: model(v), x.shape)
    for _ in range(20):
        z = np.clip(x + rng.uniform(-eps, eps, x.shape), 0, 1).astype(np.float32)
        logits = np.asarray(c.forward(z), np.float64)
        margins = _without_true(logits[np.arange(6), y][:, None] - logits, y)
        assert np.all(ours <= margins + 1e-5)  # the float32 network's rounding


@pytest.mark.parametrize("chord", [True, False])
def test_crown_ibp_unfused_pooling_and_strided_convolution_equal_the_engine(chord):
    """The backward rules' other paths: a max pool whose input is not a relu (no fused relu
    step: the relu after it is passed on its own) and a stride-2 convolution (the transposed
    convolution with output padding) give the engine's CROWN over IBP bounds too."""
    nn.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1, dtype="float64"), nn.MaxPool2d(2),
                          nn.ReLU(), nn.Conv2d(3, 4, 3, stride=2, padding=1, dtype="float64"),
                          nn.ReLU(), nn.Flatten(), nn.Linear(4 * 2 * 2, 5, dtype="float64"))
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 1, (5, 1, 8, 8))
    y = rng.integers(0, 5, 5)
    for eps in (0.02, 0.1):
        mine = D.margin_lower_bounds(model, x, y, eps, crown=True, beta=1.0, dtype=np.float64,
                                     pool_chord=chord)
        ref = _crown_with_ibp_intermediates(model, x, y, eps, 5, chord)
        np.testing.assert_allclose(_without_true(mine, y), ref, rtol=1e-9, atol=1e-10)


def _tiny_cnn(dtype="float64", seed=3):
    nn.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, dtype=dtype), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 3, dtype=dtype))


def _loss_fn(model, crown, beta, chord=False):
    def loss(owner, x, y, eps):
        lower = D.margin_lower_bounds(model, x, y, eps, crown=crown, beta=beta, pool_chord=chord)
        return D.robust_cross_entropy(lower, y)
    return loss


def _numeric_loss(model, x, y, eps, crown, beta, chord=False):
    lower = D.margin_lower_bounds(model, x, y, eps, crown=crown, beta=beta, dtype=np.float64,
                                  pool_chord=chord)
    z = -lower - (-lower).max(axis=1, keepdims=True)
    return float(-(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))[np.arange(len(y)),
                                                                       y].mean())


@pytest.mark.parametrize("crown, which", [(False, "mlp"), (True, "mlp"), (True, "cnn"),
                                          (True, "cnn-chord"), (True, "cnn-constant"),
                                          (True, "batch-norm")])
def test_bound_gradients_match_finite_differences_eager_and_compiled(crown, which):
    """(batch-norm: the gradients go through the clean batch's statistics too, as the
    reference's; the finite differences move them with the weights. cnn-chord / -constant:
    max pooling's upper side by the chord / the constant max u (``pool_chord``; "cnn": the
    default); the chord is active on this net: it moves the bounds.)"""
    rng = np.random.default_rng(5)
    if which == "mlp":
        model, shape = _mlp("float64", sizes=(6, 10, 8, 3), seed=2), (5, 6)
    elif which.startswith("cnn"):
        model, shape = _tiny_cnn(), (5, 1, 4, 4)
    else:
        model, shape = _bn_net(image=4), (5, 1, 4, 4)
        model.train()
    x = rng.uniform(0.1, 0.9, shape)
    y = rng.integers(0, 3, 5)
    eps = 0.05
    chord = which == "cnn-chord"
    if chord:
        assert (_numeric_loss(model, x, y, eps, crown, 0.5, chord=False)
                > _numeric_loss(model, x, y, eps, crown, 0.5, chord=True) + 1e-4)
    grads = {}
    for backend in ("eager", "compiled"):
        step = Stepper(_loss_fn(model, crown, 0.5, chord),
                       Options(backend=backend, dtype="float64"))
        value, pairs = step.value_and_grads([x, y.astype(np.float64), np.float64(eps)])
        # The recorded bounds compute what the rules compute on arrays.
        assert float(value) == pytest.approx(_numeric_loss(model, x, y, eps, crown, 0.5, chord),
                                             rel=1e-12)
        grads[backend] = {id(p): np.asarray(g) for p, g in pairs}
    params = list(model.parameters())
    for p in params:
        np.testing.assert_allclose(grads["eager"][id(p)], grads["compiled"][id(p)], rtol=1e-10,
                                   atol=1e-14)
    h = 1e-6
    checked = 0
    for p in params:
        flat = p.value.reshape(-1)
        for j in rng.choice(flat.size, size=min(8, flat.size), replace=False):
            old = flat[j]
            flat[j] = old + h
            up = _numeric_loss(model, x, y, eps, crown, 0.5, chord)
            flat[j] = old - h
            down = _numeric_loss(model, x, y, eps, crown, 0.5, chord)
            flat[j] = old
            fd = (up - down) / (2 * h)
            assert grads["eager"][id(p)].reshape(-1)[j] == pytest.approx(fd, rel=1e-5,
                                                                         abs=1e-7)
            checked += 1
    assert checked >= 20


def _bn_net(dtype="float64", seed=0, image=8):
    """conv - batch norm - relu - pool - linear - batch norm (1-D) - relu - linear."""
    nn.manual_seed(seed)
    half = image // 2
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1, dtype=dtype), nn.BatchNorm2d(3, dtype=dtype),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3 * half * half, 6, dtype=dtype),
                         nn.BatchNorm1d(6, dtype=dtype), nn.ReLU(), nn.Linear(6, 4, dtype=dtype))


def _eval_twin(model, x):
    """``model`` in eval mode with running statistics equal to the clean batch ``x``'s (mean and
    biased variance at each batch-norm layer's input): the affine map the training bounds use."""
    h = np.asarray(x, np.float64)
    for layer in model:
        if isinstance(layer, nn.BatchNorm2d):
            four = h.reshape(*h.shape, 1, 1) if h.ndim == 2 else h
            layer.running_mean.copy_(tensor(four.mean(axis=(0, 2, 3))))
            layer.running_var.copy_(tensor(four.var(axis=(0, 2, 3))))
            layer.eval()
        h = np.asarray(layer(h), np.float64)
    model.eval()
    return model


@pytest.mark.parametrize("eps", [0.0, 0.03])
def test_batch_norm_bounds_use_the_clean_batch_statistics(eps):
    """In training mode a batch-norm layer is bounded as the affine map of the clean batch's
    statistics (auto_LiRPA's treatment): IBP and CROWN-IBP equal the sound certifier's IBP and
    CROWN-over-IBP on the eval-mode twin whose running statistics are those statistics, and the
    trace leaves the running statistics alone."""
    rng = np.random.default_rng(8)
    model = _bn_net()
    model.train()
    x = rng.uniform(0, 1, (6, 1, 8, 8))
    y = rng.integers(0, 4, 6)
    ibp = _without_true(D.margin_lower_bounds(model, x, y, eps, dtype=np.float64), y)
    crown = _without_true(D.margin_lower_bounds(model, x, y, eps, crown=True, beta=1.0,
                                                dtype=np.float64), y)
    assert float(model[1].num_batches_tracked.numpy()) == 0
    np.testing.assert_array_equal(model[1].running_mean.numpy(), np.zeros(3))
    twin = _eval_twin(model, x)
    sound_ibp = _sound_ibp(twin, x, y, eps, 4)
    np.testing.assert_allclose(ibp, sound_ibp, rtol=1e-9, atol=1e-10)
    assert np.all(ibp >= sound_ibp)
    sound_crown = _crown_with_ibp_intermediates(twin, x, y, eps, 4)
    np.testing.assert_allclose(crown, sound_crown, rtol=1e-9, atol=1e-10)
    # eval mode: the same numbers from the running statistics
    np.testing.assert_allclose(_without_true(D.margin_lower_bounds(
        twin, x, y, eps, crown=True, beta=1.0, dtype=np.float64), y), crown, rtol=1e-9)
    if eps == 0.0:  # a point: the bounds are the margins of the batch-normalised forward pass
        logits = np.asarray(compile_fn(lambda v: twin(v), x.shape, dtype="float64").forward(x))
        margins = _without_true(logits[np.arange(6), y][:, None] - logits, y)
        np.testing.assert_allclose(ibp, margins, rtol=1e-9, atol=1e-10)


def test_standardize_outside_batch_norm_is_refused_with_a_clear_error():
    class Standardise(nn.Module):
        def forward(self, x):
            return F.apply("standardize", x, axes=(1,), eps=1e-5)

    with pytest.raises(UnsupportedOpError, match="standardize"):
        D.margin_lower_bounds(Standardise(), np.zeros((2, 3)), np.array([0, 1]), 0.1)


def test_unsupported_op_names_it():
    class Soft(nn.Module):
        def forward(self, x):
            return F.softmax(x)

    with pytest.raises(UnsupportedOpError, match="softmax"):
        D.margin_lower_bounds(Soft(), np.full((2, 3), 0.5), np.array([0, 1]), 0.1)


def test_smooth_ramp_and_the_schedules():
    assert smooth_ramp(0.0) == 0.0 and smooth_ramp(1.0) == pytest.approx(1.0)
    ts = np.linspace(0, 1, 401)
    values = np.array([smooth_ramp(t) for t in ts])
    assert np.all(np.diff(values) > 0)  # strictly increasing after 0
    m, dt = 0.25, 1e-7  # value and slope continuous where the polynomial meets the line
    assert smooth_ramp(m - dt) == pytest.approx(smooth_ramp(m + dt), abs=1e-6)
    slope_left = (smooth_ramp(m - dt) - smooth_ramp(m - 2 * dt)) / dt
    slope_right = (smooth_ramp(m + 2 * dt) - smooth_ramp(m + dt)) / dt
    assert slope_left == pytest.approx(slope_right, rel=1e-4)
    assert smooth_ramp(0.1) == pytest.approx(smooth_ramp(0.25) * (0.1 / 0.25) ** 4)

    config = CertifiedConfig("crown-ibp", 0.1, warmup_epochs=2, ramp_epochs=4,
                             kappa=(1.0, 0.2))
    s = Schedule(config, steps_per_epoch=10)
    # the reference's SmoothedScheduler: 0 up to and including the ramp's first step
    assert [s.eps(k) for k in (0, 19, 20)] == [0.0, 0.0, 0.0]
    assert s.eps(21) == pytest.approx(0.1 * smooth_ramp(1 / 40))
    assert s.eps(59) == pytest.approx(0.1 * smooth_ramp(39 / 40)) and s.eps(59) < 0.1
    assert s.eps(60) == pytest.approx(0.1) and s.eps(500) == pytest.approx(0.1)
    assert s.eps(39) == pytest.approx(0.1 * smooth_ramp(19 / 40))
    assert s.beta(0) == 1.0 and s.beta(60) == pytest.approx(0.0, abs=1e-12)
    assert s.beta(39) == pytest.approx(1 - smooth_ramp(19 / 40))
    assert s.kappa(10) == 1.0 and s.kappa(40) == pytest.approx(1.0 - 0.8 * 0.5)
    assert s.kappa(80) == pytest.approx(0.2)
    # the learning rate: halved for epochs 16, 26, ... once the target is reached in epoch 6
    # (auto_LiRPA's StepLR stepped at the start of epochs 7, 8, ...)
    assert [cli_certified.lr_after(config, 1.0, e) for e in (1, 6, 14, 15, 25)] == [
        1.0, 1.0, 1.0, 0.5, 0.25]


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "pgd", "eps": 0.1}, "method"),
    ({"method": "ibp", "eps": 0.0}, "eps"),
    ({"method": "ibp", "eps": float("nan")}, "eps"),
    ({"method": "ibp", "eps": 0.1, "warmup_epochs": -1}, "warmup"),
    ({"method": "ibp", "eps": 0.1, "kappa": (0.5, 2.0)}, "kappa"),
    ({"method": "ibp", "eps": 0.1, "grad_clip": 0}, "grad_clip"),
    ({"method": "ibp", "eps": 0.1, "clip": (1.0, 0.0)}, "clip"),
    ({"method": "ibp", "eps": 0.1, "init": "xavier"}, "init"),
    ({"method": "ibp", "eps": 0.1, "seed": -1}, "seed"),
    ({"method": "ibp", "eps": 0.1, "reg": -0.5}, "reg"),
    ({"method": "ibp", "eps": 0.1, "reg": 0.5, "reg_tol": 0.0}, "reg_tol"),
    ({"method": "ibp", "eps": 0.1, "l1": -1e-4}, "l1"),
    ({"method": "ibp", "eps": 0.1, "l1": float("inf")}, "l1"),
    ({"method": "ibp", "eps": 0.1, "smoothing": 1.0}, "smoothing"),
    ({"method": "ibp", "eps": 0.1, "smoothing": -0.1}, "smoothing"),
    ({"method": "crown-ibp", "eps": 0.1, "pool_chord": 1}, "pool_chord"),
    ({"method": "crown-ibp", "eps": 0.1, "pool_chord": "on"}, "pool_chord"),
    ({"method": "ibp", "eps": 0.1, "pool_chord": True}, "crown-ibp"),
])
def test_config_checks_its_settings(kwargs, message):
    with pytest.raises(CertifiedTrainingError, match=message):
        CertifiedConfig(**kwargs)


def test_clip_grad_norm():
    a, b = Param(np.zeros(3)), Param(np.zeros(2))
    a.grad, b.grad = np.array([3.0, 0.0, 0.0]), np.array([0.0, 4.0])
    assert clip_grad_norm([a, b], 10.0) == pytest.approx(5.0)
    assert a.grad[0] == 3.0  # under the limit: untouched
    assert clip_grad_norm([a, b], 1.0) == pytest.approx(5.0)
    norm = np.sqrt(np.sum(a.grad.numpy() ** 2) + np.sum(b.grad.numpy() ** 2))
    assert norm == pytest.approx(1.0, rel=1e-5)


def test_cnn_crown_ibp_steps_agree_eager_and_compiled_and_report_their_own_bounds():
    """The fit hook on a tiny CNN in the CROWN-IBP phase: eager and compiled steps give the
    same losses and gradients; the batch statistics come from the bounds the loss used (the
    compiled graph's own node), equal to the rules run on arrays."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 1, (6, 1, 4, 4)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    runs = {}
    for backend in ("eager", "compiled"):
        model = _tiny_cnn("float32")
        hook = CertifiedTraining(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=0,
                                                 ramp_epochs=2))
        hook.bind(model, steps_per_epoch=2, backend=backend, dtype=np.float32)
        hook.step_count = 1  # mid-ramp: 0 < beta < 1
        loss = hook.step(x, y)
        stats = hook.epoch_stats()
        grads = [np.asarray(p.grad.numpy()) for p in model.parameters()]
        runs[backend] = (loss, stats, grads)
        beta = hook.schedule.beta(1)
        assert 0 < beta < 1
        lower = D.margin_lower_bounds(model, x, y, stats["eps"], beta=beta, crown=True)
        assert stats["robust_loss"] == pytest.approx(loss, rel=1e-5)
        others = _without_true(lower, y)
        assert stats["verified_error"] == pytest.approx(np.mean(others.min(axis=1) <= 0))
    (le, se, ge), (lc, sc, gc) = runs["eager"], runs["compiled"]
    assert le == pytest.approx(lc, rel=1e-5) and se == pytest.approx(sc, rel=1e-5)
    for a, b in zip(ge, gc, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_pool_chord_setting_is_the_bound_the_training_step_uses(backend):
    """``CertifiedConfig.pool_chord`` reaches the CROWN-IBP step's bounds: each setting's loss is
    the robust loss of ``margin_lower_bounds`` with that max-pool rule (on the step's weights),
    and the chord's is lower (a tighter bound) on this net, where it is active."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0.1, 0.9, (5, 1, 4, 4)).astype(np.float32)
    y = rng.integers(0, 3, 5)
    losses = {}
    for chord in (False, True):
        model = _tiny_cnn("float32")
        config = CertifiedConfig("crown-ibp", 0.2, warmup_epochs=0, ramp_epochs=1,
                                 pool_chord=chord)
        hook = CertifiedTraining(config)
        hook.bind(model, steps_per_epoch=2, backend=backend, dtype=np.float32)
        hook.step_count = 1  # mid-ramp: 0 < beta < 1
        eps, beta = hook.schedule.eps(1), hook.schedule.beta(1)
        assert 0 < beta < 1
        lower = D.margin_lower_bounds(model, x, y, eps, beta=beta, crown=True,
                                      pool_chord=chord)
        expected = D.robust_cross_entropy(lower, y)
        losses[chord] = hook.step(x, y)
        assert losses[chord] == pytest.approx(float(expected), rel=1e-5)
    assert losses[True] < losses[False] - 1e-4


def test_batch_norm_steps_agree_eager_and_compiled_and_update_the_running_statistics():
    """A certified-training step of a batch-norm net, in the warm-up (natural loss through the
    traced batch_norm) and the CROWN-IBP phase: eager and compiled give the same loss and
    gradients, and each step updates the running statistics once, as the layer's own training
    forward on the clean batch does."""
    rng = np.random.default_rng(9)
    x = rng.uniform(0, 1, (6, 1, 4, 4)).astype(np.float32)
    y = rng.integers(0, 4, 6)
    runs = {}
    for backend in ("eager", "compiled"):
        model, own = _bn_net("float32", image=4), _bn_net("float32", image=4)
        model.train()
        own.train()
        hook = CertifiedTraining(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1,
                                                 ramp_epochs=2))
        hook.bind(model, steps_per_epoch=2, backend=backend, dtype=np.float32)
        losses = []
        for step in (0, 3):  # eps 0, then mid-ramp
            hook.step_count = step
            losses.append(hook.step(x, y))
            # the progress statistics: at eps 0 from the logits (the margins' cross-entropy is
            # the natural loss), mid-ramp from the bounds the loss used
            assert hook.epoch_stats()["robust_loss"] == pytest.approx(losses[-1], rel=1e-5)
            own(x)
            for a, b in ((model[1], own[1]), (model[6], own[6])):
                np.testing.assert_allclose(a.running_mean.numpy(), b.running_mean.numpy(),
                                           rtol=1e-6, atol=1e-7)
                np.testing.assert_allclose(a.running_var.numpy(), b.running_var.numpy(),
                                           rtol=1e-6)
                assert int(a.num_batches_tracked.numpy()) == int(b.num_batches_tracked.numpy())
        assert int(model[1].num_batches_tracked.numpy()) == 2
        assert 0 < hook.schedule.beta(3) < 1
        runs[backend] = (losses, [np.asarray(p.grad.numpy()) for p in model.parameters()])
    (le, ge), (lc, gc) = runs["eager"], runs["compiled"]
    assert le == pytest.approx(lc, rel=1e-5)
    for a, b in zip(ge, gc, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_ibp_init_scales_every_weight_but_the_last():
    model = _mlp(sizes=(40, 80, 60, 4))
    last = np.array(model[4].weight.value)
    CertifiedTraining(CertifiedConfig("ibp", 0.1, init="ibp", seed=3)).bind(
        model, steps_per_epoch=1, backend="eager", dtype=np.float32)
    for layer, fan_in in ((model[0], 40), (model[2], 80)):
        w = np.asarray(layer.weight.value, np.float64)
        assert w.std() == pytest.approx(np.sqrt(2 * np.pi) / fan_in, rel=0.1)
    np.testing.assert_array_equal(model[4].weight.value, last)


def _shi_regularisers(boxes, lo, hi, tol):
    """Shi et al. 2021's relu and tightness terms written out in NumPy, as their paper states
    them, for one set of boxes (float64)."""
    r0 = ((hi - lo) / 2).mean()
    total = 0.0
    for b_lo, b_hi in boxes:
        centre, radius = (b_hi + b_lo) / 2, (b_hi - b_lo) / 2
        total += max(0.0, tol - r0 / radius.mean()) / tol
        on, off = b_lo > 0, b_hi < 0
        spread = (centre - centre.mean()) ** 2
        for a, b in (((centre * on).mean(), -(centre * off).mean()),
                     ((spread * on).sum(), (spread * off).sum())):
            ratio = min(a / b, b / a)
            total += max(0.0, tol - ratio) / tol
    return total / len(boxes)


def test_warmup_regularisers_values_and_gradients():
    """The recorded regularisers equal the terms written out in NumPy, and their gradients
    (through the IBP boxes, eager and compiled alike) match finite differences."""
    rng = np.random.default_rng(11)
    model = _mlp("float64", sizes=(6, 12, 10, 3), seed=4)
    x, y, eps = rng.uniform(0.05, 0.95, (7, 6)), rng.integers(0, 3, 7), 0.08

    def numeric():
        boxes = []
        D.margin_lower_bounds(model, x, y, eps, dtype=np.float64, relu_inputs=boxes)
        assert len(boxes) == 2 and boxes[0].lo.shape == (7, 12)
        lo, hi = D.input_box(x, eps, (0.0, 1.0))
        ours = float(warmup_regularisers(boxes, lo, hi, 0.5))
        theirs = _shi_regularisers([(b.lo, b.hi) for b in boxes], lo, hi, 0.5)
        return ours, theirs, boxes

    ours, theirs, boxes = numeric()
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert all((b.lo > 0).any() and (b.hi < 0).any() for b in boxes)  # every term is live
    assert ours > 0.1  # and not at its floor of 0

    def reg_loss(owner, xs, ys, e):
        boxes = []
        D.margin_lower_bounds(model, xs, ys, e, relu_inputs=boxes)
        lo, hi = D.input_box(xs, e, (0.0, 1.0))
        return warmup_regularisers(boxes, lo, hi, 0.5)

    grads = {}
    for backend in ("eager", "compiled"):
        step = Stepper(reg_loss, Options(backend=backend, dtype="float64"))
        value, pairs = step.value_and_grads([x, y.astype(np.float64), np.float64(eps)])
        assert float(value) == pytest.approx(ours, rel=1e-12)
        # (the last layer is after every relu: no gradient, and finite differences of 0)
        grads[backend] = {id(p): np.zeros(p.shape) if g is None else np.asarray(g)
                          for p, g in pairs}
    h, checked = 1e-6, 0
    for p in model.parameters():
        np.testing.assert_allclose(grads["eager"][id(p)], grads["compiled"][id(p)], rtol=1e-10,
                                   atol=1e-14)
        flat = p.value.reshape(-1)
        for j in rng.choice(flat.size, size=min(6, flat.size), replace=False):
            old = flat[j]
            flat[j] = old + h
            up = numeric()[0]
            flat[j] = old - h
            down = numeric()[0]
            flat[j] = old
            assert grads["eager"][id(p)].reshape(-1)[j] == pytest.approx(
                (up - down) / (2 * h), rel=1e-5, abs=1e-7)
            checked += 1
    assert checked >= 20


def test_regularised_steps_weight_them_by_the_ramp():
    """``reg``: the warm-up regularisers join the robust loss on the ramp with weight
    ``reg * (1 - eps_t / eps)`` and leave it at eps 0 and at the target."""
    config = CertifiedConfig("ibp", 0.1, warmup_epochs=1, ramp_epochs=2, reg=0.5)
    s = Schedule(config, steps_per_epoch=4)
    assert s.reg_weight(0) == 0.0 and s.reg_weight(12) == 0.0
    assert s.reg_weight(7) == pytest.approx(0.5 * (1 - s.eps(7) / 0.1)) and s.reg_weight(7) > 0
    assert Schedule(CertifiedConfig("ibp", 0.1, warmup_epochs=1, ramp_epochs=2),
                    4).reg_weight(7) == 0.0
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (8, 12)).astype(np.float32)
    y = rng.integers(0, 4, 8)
    losses = {}
    for reg in (0.0, 0.5):
        model = _mlp()
        hook = CertifiedTraining(CertifiedConfig("ibp", 0.1, warmup_epochs=1, ramp_epochs=2,
                                                 reg=reg))
        hook.bind(model, steps_per_epoch=4, backend="compiled", dtype=np.float32)
        for step in (7, 12):  # mid-ramp, then at the target
            hook.step_count = step
            losses[reg, step] = hook.step(x, y)
    boxes = []
    D.margin_lower_bounds(_mlp(), x, y, s.eps(7), relu_inputs=boxes)
    lo, hi = D.input_box(x, s.eps(7), (0.0, 1.0))
    extra = s.reg_weight(7) * float(warmup_regularisers(boxes, lo, hi, 0.5))
    assert extra > 0
    assert losses[0.5, 7] == pytest.approx(losses[0.0, 7] + extra, rel=1e-5)
    assert losses[0.5, 12] == losses[0.0, 12]  # at the target: the robust loss alone


def test_beta_schedule_slides_from_start_to_end():
    """``beta=(b0, b1)``: CROWN-IBP's CROWN weight is ``b0 + (b1 - b0) eps_t / eps``; the default
    (1, 0) is the reference's ``1 - eps_t / eps`` to the bit, and (1, 1) keeps the CROWN pass
    (the crown-ibp phase) at the target, where the default drops it."""
    base = CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1, ramp_epochs=2)
    s = Schedule(base, steps_per_epoch=4)
    assert all(s.beta(k) == 1.0 - s.eps(k) / 0.1 for k in range(14))
    half = Schedule(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1, ramp_epochs=2,
                                    beta=(0.8, 0.4)), 4)
    r = s.eps(7) / 0.1
    assert 0 < r < 1 and half.beta(7) == pytest.approx(0.8 - 0.4 * r)
    assert half.beta(0) == 0.8 and half.beta(12) == pytest.approx(0.4)
    # the regularisers keep fading with the ramp whatever beta does
    reg = Schedule(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1, ramp_epochs=2,
                                   beta=(1.0, 1.0), reg=0.5), 4)
    assert reg.beta(12) == 1.0 and reg.reg_weight(7) == pytest.approx(0.5 * (1 - r))
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, (8, 12)).astype(np.float32)
    y = rng.integers(0, 4, 8)
    losses, phases = {}, {}
    for beta in ((1.0, 0.0), (1.0, 1.0)):
        hook = CertifiedTraining(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1,
                                                 ramp_epochs=2, beta=beta))
        hook.bind(_mlp(), steps_per_epoch=4, backend="compiled", dtype=np.float32)
        hook.step_count = 12  # at the target
        phases[beta] = hook._phase(0.1, hook.schedule.beta(12))
        losses[beta] = hook.step(x, y)
    assert phases == {(1.0, 0.0): "ibp", (1.0, 1.0): "crown-ibp"}
    model = _mlp()
    crown = D.margin_lower_bounds(model, x, y, 0.1, crown=True, beta=1.0)
    ibp = D.margin_lower_bounds(model, x, y, 0.1, crown=False)
    assert losses[1.0, 0.0] == pytest.approx(float(D.robust_cross_entropy(ibp, y)), rel=1e-5)
    assert losses[1.0, 1.0] == pytest.approx(float(D.robust_cross_entropy(crown, y)), rel=1e-5)
    assert losses[1.0, 1.0] != pytest.approx(losses[1.0, 0.0], rel=1e-3)
    with pytest.raises(TorchLeanError, match="beta"):
        CertifiedConfig("crown-ibp", 0.1, beta=(1.0, 1.5))


def _target_and_warmup_losses(**settings):
    """The loss of one step at eps 0 (step 0) and one at the target (step 12) of an ``ibp`` run
    (1 warm-up epoch, 2 ramp epochs, 4 steps each) with ``settings``, from the same weights."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 1, (8, 12)).astype(np.float32)
    y = rng.integers(0, 4, 8)
    losses = []
    for step in (0, 12):
        hook = CertifiedTraining(CertifiedConfig("ibp", 0.1, warmup_epochs=1, ramp_epochs=2,
                                                 **settings))
        hook.bind(_mlp(), steps_per_epoch=4, backend="compiled", dtype=np.float32)
        hook.step_count = step
        losses.append(hook.step(x, y))
    return x, y, losses


def test_l1_adds_the_weights_absolute_sum_in_every_phase():
    """``l1=w``: ``w * sum |W|`` over the weight matrices (not the biases) joins the loss, at eps
    0 and at the target alike."""
    model = _mlp()
    weights = [p for p in model.parameters() if len(p.shape) == 2]
    assert len(weights) == 3 and len(list(model.parameters())) == 6
    by_hand = sum(float(np.abs(np.asarray(p.value, np.float64)).sum()) for p in weights)
    stepper = Stepper(lambda owner, v: l1_penalty(owner, model) + F.sum(v) * 0.0,
                      Options(backend="compiled", dtype="float32"))
    value, _ = stepper.value_and_grads([np.zeros(2, np.float32)])
    assert float(value) == pytest.approx(by_hand, rel=1e-6)
    _, _, plain = _target_and_warmup_losses()
    _, _, sparse = _target_and_warmup_losses(l1=1e-3)
    for a, b in zip(plain, sparse, strict=True):
        assert b == pytest.approx(a + 1e-3 * by_hand, rel=1e-5)
    with pytest.raises(CertifiedTrainingError, match="l1"):
        l1_penalty(None, nn.Sequential(nn.ReLU()))


def test_label_smoothing_of_the_robust_loss_by_hand():
    """``smoothing=s``: the robust loss is the cross-entropy of ``-lower`` against
    ``(1 - s) one_hot + s / N`` (computed here from the bounds in float64); the natural loss at
    eps 0 is unchanged."""
    x, y, plain = _target_and_warmup_losses()
    _, _, smooth = _target_and_warmup_losses(smoothing=0.2)
    assert smooth[0] == plain[0]
    lower = np.asarray(D.margin_lower_bounds(_mlp(), x, y, 0.1), np.float64)
    z = -lower - (-lower).max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    target = np.full((8, 4), 0.2 / 4)
    target[np.arange(8), y] += 0.8
    by_hand = float(-(target * log_p).sum(axis=1).mean())
    assert smooth[1] == pytest.approx(by_hand, rel=1e-5)
    assert plain[1] == pytest.approx(float(-log_p[np.arange(8), y].mean()), rel=1e-5)
    assert smooth[1] != pytest.approx(plain[1], rel=1e-3)
    t = np.asarray(smoothed_targets(np.array([2.0, 0.0]), np.zeros((2, 4)), 0.2))
    assert np.allclose(t, [[0.05, 0.05, 0.85, 0.05], [0.85, 0.05, 0.05, 0.05]])


def _certified_fraction(model, x, y, eps):
    c = compile_fn(lambda v: model(v), x.shape)
    lo, hi = box(x, eps)
    res = compute_bounds(c, lo, hi, method="crown", spec=margin_spec(y, 10), output_crown=False)
    correct = np.argmax(c.forward(x), axis=1) == y
    return float(np.mean((res.spec[0].min(axis=1) > 0) & correct))


def test_short_certified_run_certifies_far_more_than_natural_training():
    """Same model, seed, steps (8 epochs of batch 64) and optimiser (Adam 3e-3); CROWN-certified
    accuracy (the sound certifier) on 100 test examples at eps 0.1. Measured: natural 0.11,
    IBP-trained 0.51 (0.08 and 0.54 with the batch orders before session 7)."""
    data = load_data("mlp", "digits", 0)
    x, y = np.asarray(data.test.inputs[:100], np.float32), np.asarray(data.test.targets[:100])
    results = {}
    for kind in ("natural", "ibp"):
        model = models.build(models.config_for("mlp", data, seed=0))
        opt = optim.Adam(model.parameters(), lr=3e-3)
        objective = (None if kind == "natural" else CertifiedTraining(
            CertifiedConfig("ibp", 0.1, warmup_epochs=1, ramp_epochs=3)))
        with blas_threads(1):  # these matrices are small: more threads only contend
            history = fit(model, F.cross_entropy, opt, data.train, 8, 64,
                          backend="compiled", seed=0, progress=False, objective=objective)
        if objective is not None:  # the hook's statistics reach the epoch metrics
            assert history[-1].extra["eps"] == pytest.approx(0.1)
            assert 0 <= history[-1].extra["verified_error"] <= 1
        results[kind] = _certified_fraction(model, x, y, 0.1)
    assert results["ibp"] >= results["natural"] + 0.3, results


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_certified_runs_are_the_same_bits_eager_and_compiled(model_name):
    """``torchlean train --certified`` defaults to the compiled backend because its steps are
    eager's to the bit: a short CROWN-IBP run through every phase (warm-up, ramp with
    0 < beta < 1, target) ends with identical weights on both backends."""
    data = load_data(model_name, "digits", 0)
    train = Dataset(np.asarray(data.train.inputs[:96], np.float32),
                    np.asarray(data.train.targets[:96]))
    weights = {}
    for backend in ("eager", "compiled"):
        model = models.build(models.config_for(model_name, data, seed=3))
        opt = optim.Adam(model.parameters(), lr=1e-3)
        objective = CertifiedTraining(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1,
                                                      ramp_epochs=2))
        with blas_threads(1):
            history = fit(model, F.cross_entropy, opt, train, 4, 32, backend=backend, seed=1,
                          progress=False, objective=objective)
        assert history[-1].extra["eps"] == pytest.approx(0.1)
        weights[backend] = [np.array(p.value) for p in model.parameters()]
    start = models.build(models.config_for(model_name, data, seed=3))
    assert any(not np.array_equal(a, np.asarray(p.value))  # it trained
               for a, p in zip(weights["eager"], start.parameters(), strict=True))
    for a, b in zip(weights["eager"], weights["compiled"], strict=True):
        assert np.array_equal(a, b)


def test_cli_trains_saves_settings_and_certify_uses_the_trained_eps(tmp_path, capsys):
    path = str(tmp_path / "c.safetensors")
    code = cli.main(["train", "--certified", "crown-ibp", "--eps", "0.05", "--epochs", "3",
                     "--eps-schedule", "1,1", "--kappa", "0.5,0", "--batch-norm", "--pool-chord",
                     "on", "--save", path])
    out = capsys.readouterr().out
    assert code == 0
    assert "certified training: crown-ibp at eps 0.05" in out and "verified err" in out
    assert "compiled backend" in out  # certified training's default backend
    _, metadata = checkpoint.read_file(path)
    settings = json.loads(metadata["settings"])
    assert settings["backend"] == "compiled"
    assert settings["certified"]["method"] == "crown-ibp"
    assert settings["certified"]["eps"] == 0.05 and settings["certified"]["kappa"] == [0.5, 0]
    # the mlp's defaults: Shi et al.'s warm-up regularisers at 2, labels smoothed by 0.1, no
    # L1; the reference's beta
    assert settings["certified"]["reg"] == 2.0 and settings["certified"]["beta"] == [1, 0]
    assert settings["certified"]["smoothing"] == 0.1 and settings["certified"]["l1"] == 0.0
    assert settings["certified"]["pool_chord"] is True  # --pool-chord on, recorded
    assert settings["epochs"] == 3 and settings["batch_size"] == 64 and settings["lr"] == 1e-3
    assert json.loads(metadata["config"])["batch_norm"] is True
    code = cli.main(["certify", "--checkpoint", path, "--limit", "20", "--method", "ibp,crown",
                     "--alpha-steps", "1", "--pgd-steps", "5"])
    out = capsys.readouterr().out
    assert code == 0 and "certifying there" in out
    table = [line.split() for line in out.splitlines() if line.strip().startswith("0.05")]
    assert len(table) == 1  # one row, at the trained eps


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("method", ["ibp", "crown-ibp"])
def test_cli_certified_defaults_per_model_and_method(model, method):
    """Without the options the config takes the model's and method's defaults (the table in
    ``cli.certified``); ``--certified-reg``, ``--label-smoothing``, ``--certified-l1``,
    ``--beta`` and (crown-ibp) ``--pool-chord`` override them."""
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--dataset", default=None)
    p.add_argument("--seed", type=int, default=0)
    cli_certified.add_options(p)
    base = ["--certified", method, "--eps", "0.1", "--model", model]
    config = cli_certified.config_from(p.parse_args(base), 60)
    expected = cli_certified.DEFAULTS[model, method]
    assert (config.reg, config.smoothing, config.l1) == (expected["reg"],
                                                        expected["smoothing"], 0.0)
    assert config.beta == (1.0, 0.0)
    assert config.pool_chord is expected["pool_chord"]
    assert not config.pool_chord or method == "crown-ibp"  # the chord is a CROWN-pass rule
    extra = ["--certified-reg", "0.25", "--label-smoothing", "0.15", "--certified-l1", "1e-5"]
    if method == "crown-ibp":
        extra += ["--beta", "1,0.5"]
    config = cli_certified.config_from(p.parse_args(base + extra), 60)
    assert (config.reg, config.smoothing, config.l1) == (0.25, 0.15, 1e-5)
    assert config.beta == ((1.0, 0.5) if method == "crown-ibp" else (1.0, 0.0))
    assert config.pool_chord is expected["pool_chord"]  # the other options leave it alone
    if method == "crown-ibp":
        for flag in ("on", "off"):
            config = cli_certified.config_from(p.parse_args(base + ["--pool-chord", flag]), 60)
            assert config.pool_chord is (flag == "on")
    else:
        config = cli_certified.config_from(p.parse_args(base + ["--pool-chord", "off"]), 60)
        assert config.pool_chord is False


@pytest.mark.parametrize("argv, message", [
    (["--eps", "0.1"], "--certified"),
    (["--batch-norm"], "--certified"),
    (["--certified", "ibp"], "--eps"),
    (["--certified", "ibp", "--eps", "0.1", "--model", "transformer"], "mlp or cnn"),
    (["--certified", "ibp", "--eps", "0.1", "--eps-schedule", "10"], "--eps-schedule"),
    (["--certified", "ibp", "--eps", "0.1", "--eps-schedule", "50,20"], "exceed"),
    (["--certified", "ibp", "--eps", "0.1", "--kappa", "2"], "--kappa"),
    (["--certified", "ibp", "--eps", "0.1", "--certified-init", "xavier"], "--certified-init"),
    (["--certified", "ibp", "--eps", "0.1", "--certified-reg", "-1"], "--certified-reg"),
    (["--certified", "crown-ibp", "--eps", "0.1", "--beta", "1"], "--beta"),
    (["--certified", "crown-ibp", "--eps", "0.1", "--beta", "1,2"], "--beta"),
    (["--certified", "ibp", "--eps", "0.1", "--beta", "1,1"], "--beta"),
    (["--certified", "ibp", "--eps", "0.1", "--label-smoothing", "1"], "--label-smoothing"),
    (["--certified", "ibp", "--eps", "0.1", "--certified-l1", "-1"], "--certified-l1"),
    (["--certified", "ibp", "--eps", "0.1", "--pool-chord", "on"], "--pool-chord"),
    (["--certified", "crown-ibp", "--eps", "0.1", "--pool-chord", "yes"], "--pool-chord"),
])
def test_cli_refuses_bad_certified_options(argv, message, capsys):
    code = cli.main(["train", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_model_configs_with_batch_norm():
    """``batch_norm`` in an mlp/cnn config puts a batch-norm layer before each hidden relu (the
    weights are drawn as without it); anything but a boolean is refused."""
    data = load_data("mlp", "digits", 0)
    config = models.config_for("mlp", data, seed=0)
    plain, normed = models.build(config), models.build({**config, "batch_norm": True})
    kinds = [type(m).__name__ for m in normed]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU", "Linear"]
    np.testing.assert_array_equal(plain[0].weight.value, normed[0].weight.value)
    cnn = models.build({"model": "cnn", "image_shape": [1, 8, 8], "channels": [3, 4],
                        "num_classes": 5, "batch_norm": True})
    assert sum(isinstance(m, nn.BatchNorm2d) for m in cnn) == 2
    with pytest.raises(TorchLeanError, match="batch_norm"):
        models.build({**config, "batch_norm": "yes"})


@pytest.mark.parametrize("step", [0, 1])  # eps 0 (the natural loss), mid-ramp (CROWN-IBP)
def test_compiled_steps_run_the_generated_plan_and_equal_the_interpreted_one(step):
    """From its second call on, a phase's compiled step runs the graph's generated plan with the
    statistics node as an extra output: the same loss, statistics and gradients, bit for bit,
    as the first (interpreted) call on the same weights and batch."""
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, (6, 1, 4, 4)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    model = _tiny_cnn("float32")
    hook = CertifiedTraining(CertifiedConfig("crown-ibp", 0.1, warmup_epochs=1, ramp_epochs=2))
    hook.bind(model, steps_per_epoch=1, backend="compiled", dtype=np.float32)
    at = 2 if step else 0
    s = hook.schedule
    assert hook._phase(s.eps(at), s.beta(at)) == ("crown-ibp" if step else "natural")
    runs = []
    for _ in range(3):
        for p in model.parameters():
            p.grad = None
        hook.step_count = at
        loss = hook.step(x, y)
        runs.append((loss, hook.epoch_stats(), [p.grad.numpy().copy() for p in model.parameters()]))
    plans = list(hook._plans.values())
    assert len(plans) == 1 and plans[0] is not None and hasattr(plans[0], "run")
    for loss, stats, grads in runs[1:]:
        assert loss == runs[0][0] and stats == runs[0][1]
        for a, b in zip(grads, runs[0][2], strict=True):
            np.testing.assert_array_equal(a, b)
