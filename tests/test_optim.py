"""torchlean.optim against torch.optim: same problem, same gradients, same trajectories."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchlean.core.errors import ShapeError, TorchLeanError
from torchlean.engine.params import Param
from torchlean.optim import SGD, Adam, AdamW, OptimizerError

STEPS = 50


class LeastSquares:
    """0.5 * mean ||X W^T + b - Y||^2 with float64 data; gradients in NumPy for both sides."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(16, 4))
        self.y = rng.normal(size=(16, 3))
        self.w0 = rng.normal(size=(3, 4))
        self.b0 = rng.normal(size=(3,))

    def grads(self, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        residual = self.x @ w.T + b - self.y
        n = self.x.shape[0]
        return residual.T @ self.x / n, residual.sum(axis=0) / n


def run_pair(make_ours, make_torch, steps: int = STEPS, skip_bias_at: tuple[int, ...] = ()):
    """Step both optimisers ``steps`` times; returns the per-step max |difference|."""
    prob = LeastSquares()
    w, b = Param(prob.w0, "w", dtype="float64"), Param(prob.b0, "b", dtype="float64")
    tw = torch.tensor(prob.w0, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(prob.b0, dtype=torch.float64, requires_grad=True)
    ours, theirs = make_ours([w, b]), make_torch([tw, tb])
    diffs = []
    for t in range(steps):
        gw, gb = prob.grads(w.value, b.value)
        tgw, tgb = prob.grads(tw.detach().numpy(), tb.detach().numpy())
        w.grad, b.grad = gw, (None if t in skip_bias_at else gb)
        tw.grad = torch.from_numpy(tgw)
        tb.grad = None if t in skip_bias_at else torch.from_numpy(tgb)
        ours.step()
        theirs.step()
        diffs.append(max(np.abs(w.value - tw.detach().numpy()).max(),
                         np.abs(b.value - tb.detach().numpy()).max()))
    moved = np.abs(w.value - prob.w0).max()
    return np.array(diffs), moved


CASES = {
    "sgd": (lambda p: SGD(p, lr=0.1),
            lambda p: torch.optim.SGD(p, lr=0.1, foreach=False)),
    "sgd_momentum": (lambda p: SGD(p, lr=0.05, momentum=0.9),
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=False)),
    "sgd_dampening_wd": (
        lambda p: SGD(p, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.05),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.05,
                                  foreach=False)),
    "sgd_nesterov": (lambda p: SGD(p, lr=0.05, momentum=0.9, nesterov=True),
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                               foreach=False)),
    "sgd_nesterov_wd": (
        lambda p: SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1,
                                  foreach=False)),
    "sgd_weight_decay": (lambda p: SGD(p, lr=0.1, weight_decay=0.2),
                         lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.2, foreach=False)),
    "adam": (lambda p: Adam(p, lr=0.01),
             lambda p: torch.optim.Adam(p, lr=0.01, foreach=False)),
    "adam_wd": (lambda p: Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
                lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                           weight_decay=0.1, foreach=False)),
    # beta1 < 0.5 takes the other branch of torch's lerp.
    "adam_small_beta1": (lambda p: Adam(p, lr=0.02, betas=(0.3, 0.9)),
                         lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.3, 0.9),
                                                    foreach=False)),
    "adamw": (lambda p: AdamW(p, lr=0.01),
              lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False)),
    "adamw_strong_decay": (lambda p: AdamW(p, lr=0.01, weight_decay=0.5),
                           lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.5,
                                                       foreach=False)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trajectory_matches_torch(case):
    diffs, moved = run_pair(*CASES[case])
    assert moved > 1e-2, "the parameters should actually move"
    assert diffs.max() < 1e-6, f"{case}: worst step differs by {diffs.max():.3g}"
    # Same formulas in the same order: agreement far beyond the required 1e-6.
    assert diffs.max() < 1e-12, f"{case}: worst step differs by {diffs.max():.3g}"


@pytest.mark.parametrize("case", ["sgd_momentum", "adam", "adamw"])
def test_skipped_gradients_match_torch(case):
    """Params whose grad is None are skipped, and their per-parameter step count lags, as in
    torch (bias correction uses each parameter's own count)."""
    diffs, _ = run_pair(*CASES[case], skip_bias_at=(0, 3, 4, 20))
    assert diffs.max() < 1e-12


@settings(max_examples=15, deadline=None)
@given(lr=st.floats(1e-4, 0.2), momentum=st.floats(0.0, 0.95), dampening=st.floats(0.0, 0.9),
       wd=st.floats(0.0, 0.3), nesterov=st.booleans())
def test_sgd_hyperparameters_match_torch(lr, momentum, dampening, wd, nesterov):
    if nesterov:
        momentum, dampening = max(momentum, 0.1), 0.0
    kw = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov)
    diffs, _ = run_pair(lambda p: SGD(p, **kw),
                        lambda p: torch.optim.SGD(p, foreach=False, **kw), steps=10)
    assert diffs.max() < 1e-10


@settings(max_examples=15, deadline=None)
@given(lr=st.floats(1e-4, 0.1), beta1=st.floats(0.0, 0.99), beta2=st.floats(0.0, 0.999),
       eps=st.floats(1e-10, 1e-2), wd=st.floats(0.0, 0.3), decoupled=st.booleans())
def test_adam_hyperparameters_match_torch(lr, beta1, beta2, eps, wd, decoupled):
    ours, theirs = (AdamW, torch.optim.AdamW) if decoupled else (Adam, torch.optim.Adam)
    kw = dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd)
    diffs, _ = run_pair(lambda p: ours(p, **kw), lambda p: theirs(p, foreach=False, **kw),
                        steps=10)
    # With beta2 = 0 and eps ~ 1e-10 the step is ~ lr * sign(grad), whose rounding torch and
    # NumPy may resolve one ulp apart, and the gap grows over the steps (7.9e-10 seen). The
    # issue asks for 1e-6; this is still a hundred times tighter.
    assert diffs.max() < 1e-8


def _train(opt, params, prob, steps):
    for _ in range(steps):
        params[0].grad, params[1].grad = prob.grads(params[0].value, params[1].value)
        opt.step()


@pytest.mark.parametrize("case", ["sgd_nesterov", "adam_wd", "adamw"])
def test_state_dict_resume_is_bit_identical(case):
    make, _ = CASES[case]
    prob = LeastSquares(1)
    params = [Param(prob.w0, "w", dtype="float64"), Param(prob.b0, "b", dtype="float64")]
    opt = make(params)
    _train(opt, params, prob, 20)
    saved_values = [p.value.copy() for p in params]
    saved_state = copy.deepcopy(opt.state_dict())  # (state_dict refers to the live state)
    _train(opt, params, prob, 10)  # uninterrupted run

    resumed = [Param(v, n, dtype="float64") for v, n in zip(saved_values, "wb", strict=True)]
    opt2 = make(resumed)
    opt2.load_state_dict(saved_state)
    _train(opt2, resumed, prob, 10)
    for a, b in zip(params, resumed, strict=True):
        assert np.array_equal(a.value, b.value)
    for key, value in opt.state_dict().items():
        assert np.array_equal(value, opt2.state_dict()[key]), key


def test_state_dict_layout_and_references():
    prob = LeastSquares()
    w, b = Param(prob.w0, "w", dtype="float64"), Param(prob.b0, "b", dtype="float64")
    opt = Adam([w, b], lr=0.01)
    sd = opt.state_dict()
    assert set(sd) == {"step", "hyper.lr", "hyper.beta1", "hyper.beta2", "hyper.eps",
                       "hyper.weight_decay", "hyper.amsgrad", "hyper.maximize",
                       "state.0.step", "state.0.exp_avg",
                       "state.0.exp_avg_sq", "state.1.step", "state.1.exp_avg",
                       "state.1.exp_avg_sq"}
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    assert sd["step"].shape == () and sd["step"].dtype == np.int64
    assert sd["hyper.lr"].dtype == np.float64 and float(sd["hyper.lr"]) == 0.01
    assert sd["state.0.exp_avg"].shape == (3, 4)
    sd["state.0.exp_avg"][...] = 5.0  # the live state, as torch's: the optimiser sees it
    assert (opt.state[0]["exp_avg"] == 5.0).all()
    snapshot = copy.deepcopy(sd)
    snapshot["state.0.exp_avg"][...] = 6.0  # a deep copy is independent
    assert (opt.state[0]["exp_avg"] == 5.0).all()
    sgd = SGD([w], lr=0.1, nesterov=True, momentum=0.5)
    assert sgd.state_dict()["hyper.nesterov"].dtype == np.bool_
    assert "state.0.momentum_buffer" in sgd.state_dict()
    assert "state.0.momentum_buffer" not in SGD([w], lr=0.1).state_dict()


def test_state_dicts_without_the_later_flags_still_load():
    """A state dict written before ``maximize``/``amsgrad`` existed loads with torch's
    defaults for them."""
    w = Param(np.ones(3), "w", dtype="float64")
    opt = Adam([w], lr=0.5, maximize=True)
    old = {k: v for k, v in opt.state_dict().items()
           if k not in ("hyper.maximize", "hyper.amsgrad")}
    opt.load_state_dict(old)
    assert opt.param_groups[0]["maximize"] is False and opt.param_groups[0]["amsgrad"] is False


def test_load_state_dict_restores_hyperparameters():
    w = Param(np.ones(3), "w", dtype="float64")
    opt = Adam([w], lr=0.5, betas=(0.5, 0.6))
    opt2 = Adam([Param(np.ones(3), dtype="float64")], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    assert opt2.lr == 0.5 and opt2.betas == (0.5, 0.6)


def test_load_state_dict_reports_every_mismatch_and_changes_nothing():
    w = Param(np.ones((2, 3)), "w", dtype="float64")
    opt = Adam([w], lr=0.1)
    w.grad = np.ones((2, 3))
    opt.step()
    before = opt.state_dict()
    bad = dict(before)
    del bad["state.0.exp_avg"]
    bad["state.0.exp_avg_sq"] = np.zeros((3, 2))
    bad["state.0.step"] = np.asarray(4.0)
    bad["extra"] = np.zeros(1)
    with pytest.raises(OptimizerError) as info:
        opt.load_state_dict(bad)
    msg = str(info.value)
    assert "missing keys: state.0.exp_avg" in msg
    assert "unexpected keys: extra" in msg
    assert "state.0.exp_avg_sq: shape mismatch: expected (2, 3), found (3, 2)" in msg
    assert "state.0.step: dtype mismatch: expected int64, found float64" in msg
    after = opt.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    bad_hyper = dict(before, **{"hyper.beta1": np.asarray(1.5)})
    with pytest.raises(OptimizerError, match="beta1"):
        opt.load_state_dict(bad_hyper)
    assert opt.betas == (0.9, 0.999)


def test_updates_in_place_and_keep_dtype():
    w = Param(np.linspace(-1, 1, 6).reshape(2, 3), "w", dtype="float32")
    data = w.array
    for opt in (SGD([w], lr=0.1, momentum=0.9, weight_decay=0.1), Adam([w]), AdamW([w])):
        w.grad = np.full((2, 3), 0.5, dtype=np.float64)  # cast to the parameter's dtype
        opt.step()
        assert w.array is data and w.array.dtype == np.float32
        assert all(v.dtype == np.float32 for k, v in opt.state[0].items() if k != "step")
    assert not np.array_equal(w.value, np.linspace(-1, 1, 6).reshape(2, 3))


def test_does_not_modify_gradients():
    w = Param(np.ones(4), dtype="float64")
    g = np.arange(4.0)
    for opt in (SGD([w], lr=0.1, momentum=0.9, weight_decay=0.5, nesterov=True),
                Adam([w], weight_decay=0.3), AdamW([w])):
        w.grad = g
        opt.step()
        opt.step()
        assert np.array_equal(g, np.arange(4.0))


def test_frozen_and_gradless_params_are_skipped():
    w = Param(np.ones(3), "w", dtype="float64")
    frozen = Param(np.ones(3), "frozen", requires_grad=False, dtype="float64")
    opt = SGD([w, frozen], lr=0.1)
    w.grad, frozen.grad = np.ones(3), np.ones(3)
    opt.step()
    assert np.allclose(w.value, 0.9) and np.array_equal(frozen.value, np.ones(3))
    w.grad = None
    opt.step()
    assert np.allclose(w.value, 0.9)
    assert opt.step_count == 2 and int(opt.state[0]["step"]) == 1


def test_explicit_gradients_and_zero_grad():
    w, b = Param(np.ones(3), dtype="float64"), Param(np.ones(2), dtype="float64")
    opt = SGD([w, b], lr=0.5)
    w.grad = np.full(3, 100.0)  # ignored when grads are given
    opt.step([np.ones(3), None])
    assert np.allclose(w.value, 0.5) and np.array_equal(b.value, np.ones(2))
    opt.zero_grad()
    assert w.grad is None and b.grad is None


def test_bad_gradients_raise_before_any_update():
    w, b = Param(np.ones(3), "w", dtype="float64"), Param(np.ones(2), "b", dtype="float64")
    opt = Adam([w, b])
    with pytest.raises(ShapeError, match=r"gradient of parameter 'b' has shape \(3,\), the "
                                         r"parameter has shape \(2,\)"):
        opt.step([np.ones(3), np.ones(3)])
    with pytest.raises(ShapeError, match="2 parameters"):
        opt.step([np.ones(3)])
    assert np.array_equal(w.value, np.ones(3))
    assert int(opt.state[0]["step"]) == 0 and opt.step_count == 0


@pytest.mark.parametrize("make, match", [
    (lambda p: SGD(p, lr=-0.1), "lr must be finite and >= 0"),
    (lambda p: SGD(p, lr=float("nan")), "lr"),
    (lambda p: SGD(p, lr=0.1, momentum=-1), "momentum"),
    (lambda p: SGD(p, lr=0.1, nesterov=True), "nesterov"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "dampening 0"),
    (lambda p: SGD(p, lr="0.1"), "real number"),
    (lambda p: Adam(p, lr=-1e-3), "lr"),
    (lambda p: Adam(p, betas=(1.0, 0.999)), r"beta1 must be in \[0, 1\)"),
    (lambda p: Adam(p, betas=(0.9, -0.1)), "beta2"),
    (lambda p: Adam(p, betas=0.9), "pair"),
    (lambda p: Adam(p, eps=0.0), "eps must be finite and > 0"),
    (lambda p: AdamW(p, weight_decay=-0.01), "weight_decay"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(OptimizerError, match=match):
        make([Param(np.ones(2))])


def test_bad_parameter_lists():
    w = Param(np.ones(2))
    with pytest.raises(OptimizerError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(OptimizerError, match="single Param"):
        SGD(w, lr=0.1)
    with pytest.raises(OptimizerError, match="more than once"):
        Adam([w, w])
    with pytest.raises(OptimizerError, match="expected a Param"):
        Adam([np.ones(2)])
    assert issubclass(OptimizerError, TorchLeanError)


def test_lr_setter_validates_and_accepts_module_like():
    class Holder:
        def __init__(self):
            self.w = Param(np.ones(2), "w", dtype="float64")

        def parameters(self):
            return [self.w]

    holder = Holder()
    opt = SGD(holder, lr=0.1)
    assert opt.params == [holder.w]
    opt.lr = 0.5
    holder.w.grad = np.ones(2)
    opt.step()
    assert np.allclose(holder.w.value, 0.5)
    with pytest.raises(OptimizerError):
        opt.lr = -1.0
    assert opt.lr == 0.5
