"""Adamax, NAdam, RAdam, Rprop, ASGD, Adafactor and the lr schedulers LinearLR, ConstantLR,
PolynomialLR, MultiplicativeLR, CosineAnnealingWarmRestarts, CyclicLR, SequentialLR and
ChainedScheduler against torch.optim.

Optimisers: the same parameters and gradient function on both sides, several parameter groups
(the second with its own options), a group's rate changed before the first step (Rprop and ASGD
make their per-parameter state from it then) and gradients missing at some steps (per-parameter
step counts); trajectories agree to rounding in float64 and to float32 rounding in float32.
Schedulers: the rates (and cycled momenta) of every step equal torch's; state dicts taken mid-run
continue identically.
"""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from strict_device import StrictArray, strict_cuda

import torchlean as tl
from torchlean.core.backend import to_device
from torchlean.core.errors import UnsupportedArgumentError, UnsupportedKeywordError
from torchlean.engine.params import Param
from torchlean.optim import (
    ASGD,
    SGD,
    Adafactor,
    Adagrad,
    Adam,
    Adamax,
    NAdam,
    OptimizerError,
    RAdam,
    Rprop,
    SparseAdam,
)
from torchlean.optim import lr_scheduler as ls

torch = pytest.importorskip("torch")
tls = torch.optim.lr_scheduler
STEPS = 40
SHAPES = [(3, 4), (3,), (2, 3, 5)]  # a matrix, a vector, a batch of matrices (Adafactor)
SKIP = {1: (0, 1, 2, 9), 2: (5, 6)}  # parameter -> steps at which it has no gradient


def _grad(p: np.ndarray, target: np.ndarray) -> np.ndarray:
    """A nonlinear gradient of a convex loss (its sign flips when a step overshoots)."""
    return 1.5 * (p - target) + 0.3 * np.sin(3.0 * p)


def _groups(params: list[Any], second: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"params": params[:1]}, {"params": params[1:], **second}]


def _run(make: Any, name: str, kwargs: dict[str, Any], second: dict[str, Any], dtype: str,
         steps: int = STEPS) -> tuple[float, float]:
    """Step torchlean's and torch's ``name`` side by side; the worst difference (relative to
    1 + |value|) and the largest move of a parameter."""
    rng = np.random.default_rng(0)
    inits = [rng.normal(size=s) for s in SHAPES]
    # The targets lie beyond reach: near a minimum the Adam family's steps (about
    # lr * sign(m)) turn on the rounding of tiny moments, so two correct runs one rounding
    # apart part by up to lr there (float32, seen: 1e-7 -> 4e-2 within 40 steps; float64:
    # 1e-16 -> 3e-12) and a comparison would test that chaos, not the formulas.
    targets = [rng.normal(size=s) + 5.0 for s in SHAPES]
    ours_p = [Param(v, f"p{i}", dtype=dtype) for i, v in enumerate(inits)]
    tdtype = getattr(torch, dtype)
    theirs_p = [torch.tensor(v, dtype=tdtype, requires_grad=True) for v in inits]
    extra = {} if name == "Adafactor" else {"foreach": False}
    ours = make(_groups(ours_p, second), **kwargs)
    theirs = getattr(torch.optim, name)(_groups(theirs_p, second), **kwargs, **extra)
    # a rate changed before the first step: Rprop's step sizes and ASGD's eta start from it
    ours.param_groups[0]["lr"] *= 0.5
    theirs.param_groups[0]["lr"] *= 0.5
    worst = 0.0
    for t in range(steps):
        for i, (p, tp, target) in enumerate(zip(ours_p, theirs_p, targets, strict=True)):
            skip = t in SKIP.get(i, ())
            g = _grad(p.value, target.astype(dtype))
            p.grad = None if skip else g
            tp.grad = None if skip else torch.from_numpy(
                _grad(tp.detach().numpy(), target.astype(dtype)))
        ours.step()
        theirs.step()
        # relative to the values (maximize ascends a convex loss: they grow)
        worst = max(worst, *(float((np.abs(p.value - tp.detach().numpy())
                                    / (1.0 + np.abs(tp.detach().numpy()))).max())
                             for p, tp in zip(ours_p, theirs_p, strict=True)))
    moved = max(float(np.abs(p.value - v).max()) for p, v in zip(ours_p, inits, strict=True))
    return worst, moved


CASES: dict[str, tuple[Any, str, dict[str, Any], dict[str, Any]]] = {
    "adamax": (Adamax, "Adamax", {"lr": 0.05}, {"lr": 0.02}),
    "adamax_options": (Adamax, "Adamax", {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-6,
                                          "weight_decay": 0.1, "maximize": True},
                       {"betas": (0.5, 0.9), "weight_decay": 0.0}),
    "nadam": (NAdam, "NAdam", {"lr": 0.05}, {"lr": 0.02}),
    "nadam_l2": (NAdam, "NAdam", {"lr": 0.05, "weight_decay": 0.1, "momentum_decay": 0.01},
                 {"betas": (0.8, 0.95)}),
    "nadamw_maximize": (NAdam, "NAdam", {"lr": 0.05, "weight_decay": 0.1,
                                         "decoupled_weight_decay": True, "maximize": True},
                        {"momentum_decay": 0.02, "lr": 0.01}),
    "radam": (RAdam, "RAdam", {"lr": 0.05}, {"lr": 0.02}),
    "radam_options": (RAdam, "RAdam", {"lr": 0.05, "betas": (0.7, 0.9), "weight_decay": 0.1},
                      {"betas": (0.9, 0.999), "eps": 1e-4}),
    "radamw_maximize": (RAdam, "RAdam", {"lr": 0.05, "weight_decay": 0.1,
                                         "decoupled_weight_decay": True, "maximize": True},
                        {"weight_decay": 0.3}),
    "rprop": (Rprop, "Rprop", {"lr": 0.05}, {"lr": 0.02}),
    "rprop_options": (Rprop, "Rprop", {"lr": 0.05, "etas": (0.3, 1.5),
                                       "step_sizes": (1e-3, 0.2), "maximize": True},
                      {"etas": (0.6, 1.1), "step_sizes": (1e-4, 0.05)}),
    "asgd": (ASGD, "ASGD", {"lr": 0.05}, {"lr": 0.02}),
    "asgd_averaging": (ASGD, "ASGD", {"lr": 0.05, "lambd": 0.01, "alpha": 0.6, "t0": 5,
                                      "weight_decay": 0.1},
                       {"t0": 12, "maximize": True, "alpha": 0.9}),
    "adafactor": (Adafactor, "Adafactor", {"lr": 0.05}, {"lr": 0.02}),
    "adafactor_options": (Adafactor, "Adafactor",
                          {"lr": 0.05, "beta2_decay": -0.5, "eps": (1e-4, 1e-2), "d": 2.0,
                           "weight_decay": 0.1},
                          {"maximize": True, "eps": (None, 1e-3), "d": 1.0}),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_trajectory_matches_torch(case: str, dtype: str) -> None:
    worst, moved = _run(*CASES[case], dtype=dtype)
    assert moved > 0.1, "the parameters should move"
    # float64: the same operations in the same order (a few ulps); float32: its rounding
    bound = 1e-12 if dtype == "float64" else 2e-6
    assert worst < bound, f"{case} ({dtype}): differs from torch by {worst:.3g}"


def test_rprop_and_asgd_states_follow_torch() -> None:
    """Sign flips shrink Rprop's step sizes (and zero the stored gradient); ASGD's average
    starts once t0 steps have passed. Read through the state as torch's is read."""
    p = Param(np.array([1.0, -2.0]), dtype="float64")
    opt = Rprop([p], lr=0.1, etas=(0.5, 2.0), step_sizes=(0.01, 1.0))
    for g in ([1.0, 1.0], [1.0, -1.0], [1.0, 1.0]):
        p.grad = np.array(g)
        opt.step()
    state = opt.state_dict()["state"][0]
    # entry 0 kept its sign: 0.1 (no previous gradient) -> 0.2 -> 0.4; entry 1 flipped at
    # step 2 (0.1 -> 0.05, no move, stored gradient zeroed), so step 3 is no flip (factor 1)
    np.testing.assert_allclose(state["step_size"].numpy(), [0.4, 0.05])
    np.testing.assert_array_equal(state["prev"].numpy(), [1.0, 1.0])
    np.testing.assert_allclose(p.value, [1.0 - 0.1 - 0.2 - 0.4, -2.0 - 0.1 + 0.0 - 0.05])
    q = Param(np.zeros(1), dtype="float64")
    asgd = ASGD([q], lr=0.1, t0=2)
    for _ in range(5):
        q.grad = np.ones(1)
        asgd.step()
    st = asgd.state[0]
    assert float(st["mu"]) == pytest.approx(1 / 3) and st["mu"].dtype == np.float32
    assert st["ax"][0] != q.value[0], "the average lags the parameter"


def test_keywords_and_bad_arguments_are_refused_by_name() -> None:
    params = [Param(np.zeros(2))]
    for cls in (Adamax, NAdam, RAdam, Rprop, ASGD, Adafactor):
        cls(params, foreach=True)  # torch's kernel switch: any value, the same update
        with pytest.raises(UnsupportedKeywordError, match=f"{cls.__name__}.*'fused'"):
            cls(params, fused=True)
    for cls in (Adamax, NAdam, RAdam, Rprop, ASGD):
        with pytest.raises(UnsupportedArgumentError, match="capturable"):
            cls(params, capturable=True)
        with pytest.raises(UnsupportedArgumentError, match="differentiable"):
            cls(params, differentiable=True)
    bad = [
        (Adamax, {"lr": -1.0}, "Adamax: lr must be finite and >= 0, found -1.0"),
        (Adamax, {"betas": (1.0, 0.9)}, r"Adamax: beta1 \(betas\[0\]\) must be in \[0, 1\)"),
        (Adamax, {"betas": 0.9}, "Adamax: betas must be a pair of numbers"),
        (NAdam, {"momentum_decay": -0.1}, "NAdam: momentum_decay must be finite and >= 0"),
        (NAdam, {"decoupled_weight_decay": "yes"}, "NAdam: decoupled_weight_decay must be a "
                                                   "bool"),
        (RAdam, {"betas": (0.9, 1.5)}, r"RAdam: beta2 \(betas\[1\]\) must be in \[0, 1\), "
                                       "found 1.5"),
        (RAdam, {"eps": -1e-8}, "RAdam: eps must be finite and >= 0"),
        (Rprop, {"etas": (1.2, 0.5)}, r"Rprop: etas must satisfy 0 < etaminus < 1 < etaplus, "
                                      r"found \(1.2, 0.5\)"),
        (Rprop, {"step_sizes": (1.0, 0.1)}, "Rprop: step_sizes must be .* min <= max"),
        (Rprop, {"etas": (0.5,)}, "Rprop: etas must be a pair of numbers, found"),
        (ASGD, {"weight_decay": -0.1}, "ASGD: weight_decay must be finite and >= 0"),
        (ASGD, {"t0": math.inf}, "ASGD: t0 must be finite"),
        (ASGD, {"lambd": "x"}, "ASGD: lambd must be a real number"),
        (Adafactor, {"beta2_decay": 0.5}, "Adafactor: beta2_decay must be finite and <= 0, "
                                          "found 0.5"),
        (Adafactor, {"d": 0.5}, "Adafactor: d .* must be finite and >= 1, found 0.5"),
        (Adafactor, {"eps": (-1.0, 1e-3)}, "Adafactor: eps1 must be finite and >= 0"),
        (Adafactor, {"maximize": 1}, "Adafactor: maximize must be a bool"),
    ]
    for cls, kwargs, message in bad:
        with pytest.raises(OptimizerError, match=message):
            cls(params, **kwargs)
    with pytest.raises(UnsupportedArgumentError, match="SparseAdam: torchlean has no sparse"):
        SparseAdam(params)
    with pytest.raises(UnsupportedArgumentError, match="Muon: .*bfloat16"):
        tl.optim.Muon(params)
    opt = Rprop(params)
    with pytest.raises(OptimizerError, match="etas"):
        opt.param_groups[0]["etas"] = (0.5, 0.9)
    assert opt.param_groups[0]["etas"] == (0.5, 1.2), "a refused value changes nothing"


def test_pairs_read_and_write_as_torch_tuples() -> None:
    params = [Param(np.zeros(2))]
    opt = Rprop(params, etas=(0.4, 1.3))
    group = opt.param_groups[0]
    assert group["etas"] == (0.4, 1.3) and group["step_sizes"] == (1e-6, 50.0)
    assert "etas" in group and "betas" not in group
    group["step_sizes"] = (1e-3, 2.0)
    assert group["step_size_min"] == 1e-3 and group["step_size_max"] == 2.0
    ada = Adafactor([{"params": params}, {"params": [Param(np.zeros(3))], "eps": (1e-5, 0.1)}])
    assert ada.param_groups[0]["eps"] == (None, 1e-3)
    assert ada.param_groups[1]["eps"] == (1e-5, 0.1)
    ada.param_groups[1]["eps"] = (None, 0.2)
    assert ada.param_groups[1]["eps"] == (None, 0.2)
    nadam = NAdam(params, betas=(0.8, 0.9))
    assert nadam.param_groups[0]["betas"] == (0.8, 0.9)
    assert nadam.param_groups[0]["decoupled_weight_decay"] is False


@pytest.mark.parametrize("case", ["adamax_options", "nadamw_maximize", "radam_options",
                                  "rprop_options", "asgd_averaging", "adafactor_options"])
def test_state_dict_resume_is_bit_identical(case: str, tmp_path: Path) -> None:
    """A copy of the state dict taken mid-run, and a checkpoint file, resume exactly."""
    make, _, kwargs, second = CASES[case]
    rng = np.random.default_rng(1)
    inits = [rng.normal(size=s) for s in SHAPES]
    targets = [rng.normal(size=s) for s in SHAPES]

    def train(opt: Any, params: list[Param], steps: int) -> None:
        for _ in range(steps):
            for p, target in zip(params, targets, strict=True):
                p.grad = _grad(p.value, target)
            opt.step()

    params = [Param(v, f"p{i}", dtype="float64") for i, v in enumerate(inits)]
    opt = make(_groups(params, second), **kwargs)
    train(opt, params, 15)
    values = [p.value.copy() for p in params]
    saved = copy.deepcopy(opt.state_dict())
    path = tmp_path / "opt.safetensors"
    tl.save(path, {"optim": opt})
    train(opt, params, 10)
    for source in ("dict", "file"):
        resumed = [Param(v, f"p{i}", dtype="float64") for i, v in enumerate(values)]
        opt2 = make(_groups(resumed, {}), lr=0.5)  # other hyper-parameters: restored by load
        if source == "dict":
            opt2.load_state_dict(saved)
        else:
            tl.load(path, {"optim": opt2})
        assert [g.hyper() for g in opt2.param_groups] == [g.hyper() for g in
                                                          opt.param_groups] or case.startswith(
            "adafactor")  # (NaN, eps1=None, is not equal to itself)
        train(opt2, resumed, 10)
        for a, b in zip(params, resumed, strict=True):
            assert np.array_equal(a.value, b.value), (case, source)
        for key, value in opt.state_dict().items():
            assert np.array_equal(value, opt2.state_dict()[key], equal_nan=True), (key, source)


@pytest.mark.parametrize("case", ["adamax_options", "nadamw_maximize", "radam_options",
                                  "rprop_options", "asgd_averaging", "adafactor_options"])
def test_updates_on_the_device_equal_the_host_and_stay_there(case: str) -> None:
    """On the strict stand-in device (NumPy underneath, refusing implicit transfers) each
    update runs through the array namespace, in place, with the state on the device (its
    scalars on the host) and no upload per step: the values equal the host run's exactly.
    Adafactor reads each parameter's and update's norm back (torch's ``.item()``), explicitly."""
    make, _, kwargs, second = CASES[case]
    rng = np.random.default_rng(3)
    values = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    grads = [[rng.normal(size=s).astype(np.float32) for s in SHAPES] for _ in range(5)]
    host = [Param(v, f"p{i}") for i, v in enumerate(values)]
    host_opt = make(_groups(host, second), **kwargs)
    for g in grads:
        host_opt.step(g)
    with strict_cuda() as xp:
        dev = [Param(v, f"p{i}") for i, v in enumerate(values)]
        opt = make(_groups(dev, second), **kwargs)
        for p in dev:
            p.on(xp)
        device_grads = [[to_device(g, xp) for g in step] for step in grads]
        buffers = [p.array for p in dev]
        uploads = xp.transfers.uploads
        for g in device_grads:
            opt.step(g)
        assert xp.transfers.uploads == uploads, "no upload during the steps"
        assert all(p.array is b for p, b in zip(dev, buffers, strict=True))
        for state in opt.state:
            for key, value in state.items():
                on_host = key in type(opt).HOST_STATE
                assert (type(value) is np.ndarray) if on_host else (type(value) is StrictArray)
        for p, q in zip(dev, host, strict=True):
            assert np.array_equal(p.value, q.value), case
        sd, host_sd = opt.state_dict(), host_opt.state_dict()
        assert all(np.array_equal(v, host_sd[k], equal_nan=True) for k, v in sd.items())


# -- schedulers -----------------------------------------------------------------------------------

SCHEDULES: dict[str, Any] = {
    "linear": lambda m, o: m.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=7),
    "linear_default": lambda m, o: m.LinearLR(o),
    "constant": lambda m, o: m.ConstantLR(o, factor=0.4, total_iters=6),
    "polynomial": lambda m, o: m.PolynomialLR(o, total_iters=20, power=2.5),
    "multiplicative": lambda m, o: m.MultiplicativeLR(
        o, [lambda e: 0.95 if e % 2 else 0.99, lambda e: 0.9]),
    "warm_restarts_tmult": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2,
                                                                      eta_min=0.001),
    "warm_restarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=5),
    "cyclic": lambda m, o: m.CyclicLR(o, 0.01, [0.2, 0.1], step_size_up=4, step_size_down=6),
    "cyclic_triangular2": lambda m, o: m.CyclicLR(o, 0.01, 0.2, step_size_up=3,
                                                  mode="triangular2", base_momentum=0.7,
                                                  max_momentum=[0.95, 0.9]),
    "cyclic_exp_range": lambda m, o: m.CyclicLR(o, 0.01, 0.2, step_size_up=3, mode="exp_range",
                                                gamma=0.97),
    "cyclic_scale_fn": lambda m, o: m.CyclicLR(o, 0.01, 0.2, step_size_up=5,
                                               scale_fn=lambda x: 1 / (1 + 0.1 * x),
                                               scale_mode="iterations", cycle_momentum=False),
    "sequential": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, 0.1, total_iters=5), m.ExponentialLR(o, 0.9),
            m.CosineAnnealingLR(o, 8)], milestones=[5, 15]),
    "sequential_constant_step": lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, 0.5, total_iters=3), m.StepLR(o, 4, 0.5)], milestones=[6]),
    "chained": lambda m, o: m.ChainedScheduler([m.ConstantLR(o, 0.5, total_iters=4),
                                                m.ExponentialLR(o, 0.93)]),
    # (a ChainedScheduler after a milestone fails in torch too: it has no rate of its own)
    "chained_in_sequential": lambda m, o: m.SequentialLR(
        o, [m.ChainedScheduler([m.PolynomialLR(o, 30, 1.5), m.MultiStepLR(o, [5, 9], 0.5)]),
            m.LinearLR(o, 0.2, total_iters=4)],
        milestones=[12]),
}


def _optimisers(kind: str) -> tuple[Any, Any, list[Param], list[Any]]:
    ps = [Param(np.zeros(2)), Param(np.zeros(3))]
    tp = [torch.zeros(2, dtype=torch.float64, requires_grad=True),
          torch.zeros(3, dtype=torch.float64, requires_grad=True)]
    if kind == "adam":
        return (Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.05}], lr=0.1),
                torch.optim.Adam([{"params": tp[:1]}, {"params": tp[1:], "lr": 0.05}], lr=0.1),
                ps, tp)
    return (SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.05}], lr=0.1, momentum=0.9),
            torch.optim.SGD([{"params": tp[:1]}, {"params": tp[1:], "lr": 0.05}], lr=0.1,
                            momentum=0.9), ps, tp)


def _step_both(opt: Any, topt: Any, ps: list[Param], tp: list[Any]) -> None:
    for p in ps:
        p.grad = np.ones(p.shape)
    for t in tp:
        t.grad = torch.ones(t.shape, dtype=torch.float64)
    opt.step()
    topt.step()


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("case", sorted(SCHEDULES))
def test_schedule_matches_torch(case: str, kind: str) -> None:
    make = SCHEDULES[case]
    opt, topt, ps, tp = _optimisers(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's warnings about its own step order)
        ours, theirs = make(ls, opt), make(tls, topt)
        key = "betas" if kind == "adam" else "momentum"
        seen = []
        for _ in range(50):
            assert [g["lr"] for g in opt.param_groups] == pytest.approx(
                [g["lr"] for g in topt.param_groups], rel=1e-12, abs=0)
            for g, tg in zip(opt.param_groups, topt.param_groups, strict=True):
                assert np.allclose(g[key], tg[key], rtol=1e-12, atol=0)
            seen.append(topt.param_groups[0]["lr"])
            _step_both(opt, topt, ps, tp)
            ours.step()
            theirs.step()
            assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12, abs=0)
    assert len(set(seen)) > 1, "the schedule should change the rate"
    for p, t in zip(ps, tp, strict=True):
        np.testing.assert_allclose(p.value, t.detach().numpy(), rtol=1e-10)


def test_cyclic_momentum_cycles_against_the_rate() -> None:
    opt, topt, ps, tp = _optimisers("adam")
    ours = ls.CyclicLR(opt, 0.01, 0.1, step_size_up=2, base_momentum=0.8, max_momentum=0.9)
    theirs = tls.CyclicLR(topt, 0.01, 0.1, step_size_up=2, base_momentum=0.8, max_momentum=0.9)
    seen = []
    for _ in range(8):
        seen.append((opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]))
        assert opt.param_groups[0]["betas"] == pytest.approx(topt.param_groups[0]["betas"])
        _step_both(opt, topt, ps, tp)
        ours.step()
        theirs.step()
    assert np.allclose(seen[:5], [(0.01, 0.9), (0.055, 0.85), (0.1, 0.8), (0.055, 0.85),
                                  (0.01, 0.9)], rtol=1e-12)
    assert opt.param_groups[0]["betas"][1] == 0.999, "beta2 is left alone"


def test_warm_restarts_take_fractional_epochs() -> None:
    opt, topt, _, _ = _optimisers("sgd")
    ours = ls.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.01)
    theirs = tls.CosineAnnealingWarmRestarts(topt, T_0=3, T_mult=2, eta_min=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(12):
            for i in range(4):
                ours.step(epoch + i / 4)
                theirs.step(epoch + i / 4)
                assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)
                assert (ours.T_cur, ours.T_i, ours.last_epoch) == pytest.approx(
                    (theirs.T_cur, theirs.T_i, theirs.last_epoch))
        ours.step(26)
        theirs.step(26)
        ours.step()  # continues from 26 (epoch 27), as torch's
        theirs.step()
    assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)
    assert ours.last_epoch == 27
    with pytest.raises(OptimizerError, match="epoch must be >= 0.0, found -1"):
        ours.step(-1)


@pytest.mark.parametrize("case", ["linear", "constant", "polynomial", "multiplicative",
                                  "warm_restarts_tmult", "cyclic_triangular2", "sequential",
                                  "chained", "chained_in_sequential"])
def test_scheduler_state_dict_resumes_identically(case: str) -> None:
    """The scheduler's and the optimiser's state dicts taken mid-run continue the same rates
    (scheduler built first, then both loaded, as torch advises)."""
    make = SCHEDULES[case]
    opt, _, ps, _ = _optimisers("sgd")
    sched = make(ls, opt)
    for _ in range(4):
        sched.step()
    saved_opt = copy.deepcopy(opt.state_dict())
    saved = copy.deepcopy(sched.state_dict())
    assert "optimizer" not in saved
    expected = []
    for _ in range(20):
        sched.step()
        expected.append([g["lr"] for g in opt.param_groups]
                        + [g["momentum"] for g in opt.param_groups])
    opt2 = SGD([{"params": [Param(np.zeros(2))]}, {"params": [Param(np.zeros(3))], "lr": 0.7}],
               lr=0.3, momentum=0.1)
    sched2 = make(ls, opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved)
    got = []
    for _ in range(20):
        sched2.step()
        got.append([g["lr"] for g in opt2.param_groups]
                   + [g["momentum"] for g in opt2.param_groups])
    assert got == expected
    assert len({tuple(r) for r in expected}) > 1 or case == "constant"


def test_scheduler_arguments_are_checked() -> None:
    opt = SGD([Param(np.zeros(1))], lr=0.1, momentum=0.9)
    other = SGD([Param(np.zeros(1))], lr=0.1)
    bad = [
        (lambda: ls.LinearLR(opt, start_factor=0.0), "LinearLR: start_factor must be > 0.0"),
        (lambda: ls.LinearLR(opt, start_factor=1.5), r"LinearLR: start_factor must be in \(0, "
                                                     r"1\], found 1.5"),
        (lambda: ls.LinearLR(opt, end_factor=-0.1), "LinearLR: end_factor must be >= 0.0"),
        (lambda: ls.LinearLR(opt, total_iters=0), "LinearLR: total_iters must be an int >= 1"),
        (lambda: ls.ConstantLR(opt, factor=2.0), r"ConstantLR: factor must be in \(0, 1\]"),
        (lambda: ls.PolynomialLR(opt, power="2"), "PolynomialLR: power must be a number"),
        (lambda: ls.MultiplicativeLR(opt, 0.9), "MultiplicativeLR: expected one function"),
        (lambda: ls.CosineAnnealingWarmRestarts(opt, T_0=0), "T_0 must be an int >= 1"),
        (lambda: ls.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=0),
         "T_mult must be an int >= 1"),
        (lambda: ls.CyclicLR(opt, 0.01, 0.1, mode="triangle"),
         "CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range'"),
        (lambda: ls.CyclicLR(opt, [0.01, 0.02], 0.1), "CyclicLR: expected 1 values for base_lr"),
        (lambda: ls.CyclicLR(opt, 0.01, 0.1, step_size_up=0), "step_size_up must be > 0.0"),
        (lambda: ls.CyclicLR(Adagrad([Param(np.zeros(1))]), 0.01, 0.1),
         "CyclicLR: optimizer must support momentum or beta1.*Adagrad has neither"),
        (lambda: ls.SequentialLR(opt, [ls.StepLR(opt, 2), ls.StepLR(opt, 3)], milestones=[]),
         "SequentialLR: expected 1 milestones"),
        (lambda: ls.SequentialLR(opt, [], milestones=[]), "SequentialLR expects at least one"),
        (lambda: ls.SequentialLR(opt, [ls.StepLR(other, 2)], milestones=[]),
         "SequentialLR expects all schedulers to belong to the same optimizer"),
        (lambda: ls.ChainedScheduler([ls.StepLR(opt, 2), ls.ReduceLROnPlateau(opt)]),
         "ChainedScheduler does not support ReduceLROnPlateau"),
        (lambda: ls.ChainedScheduler([ls.StepLR(opt, 2), object()]),
         "ChainedScheduler: scheduler 1 is a object"),
    ]
    for build, message in bad:
        with pytest.raises(OptimizerError, match=message):
            build()
    # CyclicLR refuses before it changes the optimiser's rates
    assert opt.param_groups[0]["lr"] == 0.1 or opt.param_groups[0]["initial_lr"] == 0.1
    chained = ls.ChainedScheduler([ls.StepLR(opt, 2)])
    with pytest.raises(OptimizerError, match="expected '_schedulers' with 1 states"):
        chained.load_state_dict({"_schedulers": []})


def test_namespace_has_torchs_optimisers_and_schedulers() -> None:
    missing = {"swap_in_optimizer_params_and_state", "swa_utils"}  # (not ported)
    for name in set(torch.optim.__all__) - missing:
        assert hasattr(tl.optim, name), name
        assert name in tl.optim.__all__, name
    for name in tls.__all__:
        assert name in ls.__all__ and hasattr(ls, name), name
