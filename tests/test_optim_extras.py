"""RMSprop, Adagrad, Adadelta, LBFGS, parameter groups and the lr schedulers against torch.optim.

Same problem and gradients on both sides (float64); trajectories must agree to rounding, and
every scheduler's sequence of rates (and OneCycleLR's momenta) equals torch's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import TorchLeanError
from torchlean.engine.params import Param
from torchlean.optim import (
    LBFGS,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    OptimizerError,
    RMSprop,
)
from torchlean.optim import lr_scheduler as ls
from torchlean.optim.optimizers import _adam_host

torch = pytest.importorskip("torch")
tls = torch.optim.lr_scheduler
STEPS = 40


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(16, 4)), rng.normal(size=(16, 3))
    return x, y, rng.normal(size=(3, 4)), rng.normal(size=(3,))


def _grads(x, y, w, b):
    residual = x @ w.T + b - y
    return residual.T @ x / len(x), residual.sum(axis=0) / len(x)


def _trajectories(make_ours, make_theirs, steps: int = STEPS):
    x, y, w0, b0 = _problem()
    w, b = Param(w0, "w", dtype="float64"), Param(b0, "b", dtype="float64")
    tw = torch.tensor(w0, requires_grad=True)
    tb = torch.tensor(b0, requires_grad=True)
    ours, theirs = make_ours([w, b]), make_theirs([tw, tb])
    worst = 0.0
    for _ in range(steps):
        w.grad, b.grad = _grads(x, y, w.value, b.value)
        tgw, tgb = _grads(x, y, tw.detach().numpy(), tb.detach().numpy())
        tw.grad, tb.grad = torch.from_numpy(tgw), torch.from_numpy(tgb)
        ours.step()
        theirs.step()
        worst = max(worst, np.abs(w.value - tw.detach().numpy()).max(),
                    np.abs(b.value - tb.detach().numpy()).max())
    return worst, np.abs(w.value - w0).max()


CASES = {
    "rmsprop": (lambda p: RMSprop(p, lr=0.01),
                lambda p: torch.optim.RMSprop(p, lr=0.01, foreach=False)),
    "rmsprop_centered_momentum_wd": (
        lambda p: RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1),
        lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5, centered=True,
                                      weight_decay=0.1, foreach=False)),
    "adagrad": (lambda p: Adagrad(p, lr=0.1),
                lambda p: torch.optim.Adagrad(p, lr=0.1, foreach=False)),
    "adagrad_decay_init": (
        lambda p: Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.05,
                          initial_accumulator_value=0.2),
        lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.05,
                                      initial_accumulator_value=0.2, foreach=False)),
    "adadelta": (lambda p: Adadelta(p), lambda p: torch.optim.Adadelta(p, foreach=False)),
    "adadelta_options": (lambda p: Adadelta(p, lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1),
                         lambda p: torch.optim.Adadelta(p, lr=0.5, rho=0.8, eps=1e-5,
                                                        weight_decay=0.1, foreach=False)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trajectory_matches_torch(case):
    worst, moved = _trajectories(*CASES[case])
    assert moved > 1e-3, "the parameters should move"
    assert worst < 1e-9, f"{case}: differs by {worst:.3g}"


def test_param_groups_have_their_own_rates():
    def ours(p):
        return SGD([{"params": [p[0]]}, {"params": [p[1]], "lr": 0.01, "momentum": 0.5}],
                   lr=0.1)

    def theirs(p):
        return torch.optim.SGD([{"params": [p[0]]}, {"params": [p[1]], "lr": 0.01,
                                                      "momentum": 0.5}], lr=0.1, foreach=False)

    worst, _ = _trajectories(ours, theirs)
    assert worst < 1e-12
    opt = ours([Param(np.zeros(2)), Param(np.zeros(3))])
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert opt.param_groups[1]["momentum"] == 0.5 and opt.defaults["momentum"] == 0.0
    opt.param_groups[0]["lr"] = 0.3
    assert opt.param_groups[0]["lr"] == 0.3 and opt.param_groups[1]["lr"] == 0.01
    with pytest.raises(OptimizerError, match="lr"):
        opt.param_groups[0]["lr"] = -1.0
    assert opt.param_groups[0]["lr"] == 0.3  # a refused value changes nothing
    state = opt.state_dict()
    assert float(state["group.1.lr"]) == 0.01
    again = ours([Param(np.zeros(2)), Param(np.zeros(3))])
    again.load_state_dict(state)
    assert again.param_groups[0]["lr"] == 0.3
    with pytest.raises(OptimizerError, match="more than one"):
        p = Param(np.zeros(2))
        SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    adam = Adam([Param(np.zeros(2))], betas=(0.8, 0.9))
    assert adam.param_groups[0]["betas"] == (0.8, 0.9)
    adam.param_groups[0]["betas"] = (0.7, 0.95)
    assert adam.betas == (0.7, 0.95)


def test_zero_grad_keeps_or_drops_gradients():
    p = Param(np.ones(3))
    opt = SGD([p], lr=0.1)
    p.grad = np.ones(3)
    buffer = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is buffer and not buffer.any()
    opt.zero_grad()
    assert p.grad is None


def test_step_with_a_closure_returns_its_loss():
    p = Param(np.array([2.0]), dtype="float64")
    opt = SGD([p], lr=0.25)

    def closure():
        p.grad = 2 * p.value
        return float((p.value ** 2).sum())

    assert opt.step(closure) == 4.0
    np.testing.assert_allclose(p.value, [1.0])


def test_lbfgs_matches_torch_on_a_model():
    """LBFGS (no line search) on a small tanh regression: losses and weights equal torch's."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(20, 3)), rng.normal(size=(20, 1))
    w1, w2 = rng.normal(size=(5, 3)) * 0.5, rng.normal(size=(1, 5)) * 0.5
    torch_x, torch_y = torch.tensor(x), torch.tensor(y)
    tw1, tw2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    theirs = torch.optim.LBFGS([tw1, tw2], lr=0.8, max_iter=7, history_size=4)
    pw1, pw2 = Param(w1, "w1", dtype="float64"), Param(w2, "w2", dtype="float64")
    ours = LBFGS([pw1, pw2], lr=0.8, max_iter=7, history_size=4)
    tl_x, tl_y = tl.tensor(x), tl.tensor(y)
    tensors = tl.nn.Linear(3, 5, bias=False, dtype="float64"), tl.nn.Linear(5, 1, bias=False,
                                                                               dtype="float64")
    tensors[0].weight, tensors[1].weight = pw1, pw2

    def torch_closure():
        theirs.zero_grad()
        loss = ((torch.tanh(torch_x @ tw1.T) @ tw2.T - torch_y) ** 2).mean()
        loss.backward()
        return loss

    def our_closure():
        ours.zero_grad()
        loss = ((tensors[1](tensors[0](tl_x).tanh()) - tl_y) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(3):
        a, b = theirs.step(torch_closure).item(), float(ours.step(our_closure))
        assert math.isclose(a, b, rel_tol=1e-9)
    np.testing.assert_allclose(pw1.value, tw1.detach().numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(pw2.value, tw2.detach().numpy(), rtol=1e-7, atol=1e-9)
    assert b < 0.5 * float(((np.tanh(x @ w1.T) @ w2.T - y) ** 2).mean())
    with pytest.raises(OptimizerError, match="closure"):
        ours.step()
    with pytest.raises(OptimizerError, match="line_search_fn"):
        LBFGS([pw1], line_search_fn="armijo")  # strong_wolfe is supported


SCHEDULES = {
    "step": (lambda o: ls.StepLR(o, 3, gamma=0.5), lambda o: tls.StepLR(o, 3, gamma=0.5)),
    "multistep": (lambda o: ls.MultiStepLR(o, [2, 5, 5, 9], 0.3),
                  lambda o: tls.MultiStepLR(o, [2, 5, 5, 9], 0.3)),
    "exponential": (lambda o: ls.ExponentialLR(o, 0.9), lambda o: tls.ExponentialLR(o, 0.9)),
    "cosine": (lambda o: ls.CosineAnnealingLR(o, 6, eta_min=0.001),
               lambda o: tls.CosineAnnealingLR(o, 6, eta_min=0.001)),
    "lambda": (lambda o: ls.LambdaLR(o, lambda e: 1 / (1 + e)),
               lambda o: tls.LambdaLR(o, lambda e: 1 / (1 + e))),
    "onecycle_sgd": (lambda o: ls.OneCycleLR(o, max_lr=1.0, total_steps=25),
                     lambda o: tls.OneCycleLR(o, max_lr=1.0, total_steps=25)),
    "onecycle_adam_three_phase_linear": (
        lambda o: ls.OneCycleLR(o, max_lr=0.5, epochs=5, steps_per_epoch=5, three_phase=True,
                                anneal_strategy="linear", pct_start=0.4),
        lambda o: tls.OneCycleLR(o, max_lr=0.5, epochs=5, steps_per_epoch=5, three_phase=True,
                                 anneal_strategy="linear", pct_start=0.4)),
}


@pytest.mark.parametrize("case", sorted(SCHEDULES))
def test_schedule_matches_torch(case):
    make_ours, make_theirs = SCHEDULES[case]
    adam = case.endswith("linear")
    p, tp = Param(np.zeros(2)), torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = (Adam([p], lr=0.1) if adam else SGD([p], lr=0.1, momentum=0.9))
    topt = (torch.optim.Adam([tp], lr=0.1) if adam else
            torch.optim.SGD([tp], lr=0.1, momentum=0.9))
    ours, theirs = make_ours(opt), make_theirs(topt)
    key = "betas" if adam else "momentum"
    rates, momenta = [], []
    for _ in range(24):
        rates.append((opt.param_groups[0]["lr"], topt.param_groups[0]["lr"]))
        momenta.append((opt.param_groups[0][key], topt.param_groups[0][key]))
        p.grad, tp.grad = np.ones(2), torch.ones(2, dtype=torch.float64)
        opt.step()
        topt.step()
        ours.step()
        theirs.step()
        assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12, abs=0)
    ours_lr, theirs_lr = zip(*rates, strict=True)
    assert np.allclose(ours_lr, theirs_lr, rtol=1e-12, atol=0)
    assert len(set(theirs_lr)) > 2, "the schedule should change the rate"
    for a, b in momenta:
        assert a == pytest.approx(b, rel=1e-12)
    np.testing.assert_allclose(p.value, tp.detach().numpy(), rtol=1e-10)


def test_reduce_on_plateau_matches_torch():
    metrics = [5, 4, 4, 4, 4, 4, 3.9999, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2]
    for mode_kwargs in ({}, {"mode": "max", "threshold_mode": "abs", "threshold": 0.5},
                        {"patience": 1, "cooldown": 2, "factor": 0.5, "min_lr": 0.02}):
        opt = SGD([Param(np.zeros(1))], lr=0.1)
        topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        kwargs = {"patience": 2, **mode_kwargs}
        ours, theirs = ls.ReduceLROnPlateau(opt, **kwargs), tls.ReduceLROnPlateau(topt, **kwargs)
        seen = []
        for m in metrics:
            ours.step(m)
            theirs.step(m)
            seen.append(topt.param_groups[0]["lr"])
            assert opt.param_groups[0]["lr"] == pytest.approx(seen[-1], rel=1e-12)
        assert len(set(seen)) > 1 or mode_kwargs.get("mode") == "max"


def test_scheduler_state_and_checks():
    opt = SGD([Param(np.zeros(1))], lr=0.1)
    sched = ls.StepLR(opt, 2)
    for _ in range(3):
        opt.step()
        sched.step()
    state = sched.state_dict()
    assert state["last_epoch"] == 3 and "optimizer" not in state
    assert opt.param_groups[0]["initial_lr"] == 0.1
    fresh = ls.StepLR(SGD([Param(np.zeros(1))], lr=0.1), 2)
    fresh.load_state_dict(state)
    assert fresh.last_epoch == 3 and fresh.get_last_lr() == sched.get_last_lr()
    with pytest.raises(OptimizerError, match="step_size"):
        ls.StepLR(opt, 0)
    with pytest.raises(OptimizerError, match="optimiser"):
        ls.ExponentialLR(object(), 0.9)
    with pytest.raises(OptimizerError, match="total_steps"):
        ls.OneCycleLR(opt, 1.0)
    with pytest.raises(OptimizerError, match="initial_lr"):
        ls.StepLR(SGD([Param(np.zeros(1))], lr=0.1), 2, last_epoch=4)
    with pytest.raises(OptimizerError, match="tried to step"):
        one = ls.OneCycleLR(SGD([Param(np.zeros(1))], lr=0.1, momentum=0.9), 1.0, total_steps=2)
        for _ in range(3):
            one.step()
    with pytest.raises(TorchLeanError, match="metric"):
        ls.ReduceLROnPlateau(opt).step()


def test_adam_in_place_host_update_has_the_formula_bits() -> None:
    """Adam's host update writes into one scratch array and the state (``out=``): the same
    operations on the same operands as the namespace formula, so the same bits, on both lerp
    branches, float32 and float64."""
    def formula(p: Any, grad: Any, m: Any, v: Any, lr: float, beta1: float, beta2: float,
                eps: float, step: float) -> None:
        weight = 1.0 - beta1
        if weight < 0.5:
            m += weight * (grad - m)
        else:
            m[...] = grad - (grad - m) * (1.0 - weight)
        v *= beta2
        v += (1.0 - beta2) * grad * grad
        denom = np.sqrt(v) / (1.0 - beta2 ** step) ** 0.5
        denom += eps
        p += (-(lr / (1.0 - beta1 ** step))) * (m / denom)

    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for beta1 in (0.9, 0.3):
            a = [rng.standard_normal((5, 7)).astype(dtype) for _ in range(3)]
            a[2] = np.abs(a[2])
            b = [x.copy() for x in a]
            for step in range(1, 5):
                g = rng.standard_normal((5, 7)).astype(dtype)
                formula(*a[:1], g, *a[1:], 0.01, beta1, 0.999, 1e-8, float(step))
                _adam_host(b[0], g, b[1], b[2], 0.01, beta1, 0.999, 1e-8, float(step))
            assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
