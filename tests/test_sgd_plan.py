"""A compiled SGD step as one generated plan (``Compiled.sgd_step``, ``ops.fast.sgd``): the
parameters it leaves equal the general path's (value and gradients, then the optimiser) within
the fast kernels' tolerance, the optimiser's counters and the parameters' versions move the same
way, frozen parameters stay, and it steps aside where it does not apply."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.registry import FAST_RTOL
from torchlean.engine import ops_interface as F
from torchlean.ops.fast import sgd as fast_sgd

pytest.importorskip("scipy.linalg")
threadpoolctl = pytest.importorskip("threadpoolctl")

RNG = np.random.default_rng(11)
X = RNG.standard_normal((24, 40)).astype(np.float32)
Y = (np.arange(24) % 10).astype(np.float32)


def _params() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [(rng.standard_normal(s) * 0.3).astype(np.float32)
            for s in ((32, 40), (32,), (10, 32), (10,))]


def _mlp(w1: Any, b1: Any, w2: Any, b2: Any, x: Any, y: Any) -> Any:
    return F.cross_entropy(F.linear(w2, b2, F.relu(F.linear(w1, b1, x))), y)


def _tied(w1: Any, b1: Any, w2: Any, b2: Any, x: Any, y: Any) -> Any:
    # Every weight read twice: its gradient is a sum of two products, not one GEMM.
    h = F.relu(F.linear(w1, b1, x))
    return F.add(_mlp(w1, b1, w2, b2, x, y), F.cross_entropy(F.linear(w2, b2, h), y))


def _trainer(loss: Any, fused: bool, frozen: int | None = None) -> tl.ScalarTrainer:
    arrays = _params()
    flags = [k != frozen for k in range(len(arrays))]
    t = tl.ScalarTrainer(tl.ParamList(arrays, requires_grad=flags), loss,
                         tl.Options(backend="compiled"))
    if not fused:
        t._stepper.sgd_step = lambda *a, **k: None  # type: ignore[method-assign]
    return t


def _sgd_plans(t: tl.ScalarTrainer) -> list[Any]:
    return [plan for c in t._stepper._compiled.values()
            for key, plan in c._generated.items() if key[0] == "sgd" and hasattr(plan, "fn")]


def _run(loss: Any, fused: bool, frozen: int | None = None, lrs: tuple[float, ...] = (
        0.5, 0.5, 0.25, 0.25, 0.5)) -> tuple[tl.ScalarTrainer, list[float]]:
    t = _trainer(loss, fused, frozen)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        losses = [t.step(lr, X, Y) for lr in lrs]
    return t, losses


def _worst(a: tl.ScalarTrainer, b: tl.ScalarTrainer) -> float:
    return max(float(np.max(np.abs(np.asarray(p) - np.asarray(q)))
                     / max(float(np.max(np.abs(np.asarray(q)))), 1e-30))
               for p, q in zip(a.params(), b.params(), strict=True))


@pytest.mark.parametrize(("loss", "gemm"), [(_mlp, True), (_tied, False)])
def test_plan_steps_equal_the_general_path(loss: Any, gemm: bool) -> None:
    fused, losses = _run(loss, fused=True)
    general, want = _run(loss, fused=False)
    plans = _sgd_plans(fused)
    assert len(plans) == 1 and not _sgd_plans(general)
    kernels = set(map(id, plans[0].fn.__globals__.values()))
    # The MLP's two weights take the GEMM (its biases the update); summed gradients cannot.
    assert (id(fast_sgd.gemm_step) in kernels) is gemm
    assert id(fast_sgd.update_step) in kernels
    assert _worst(fused, general) <= FAST_RTOL["float32"]
    np.testing.assert_allclose(losses, want, rtol=FAST_RTOL["float32"])
    assert not np.array_equal(np.asarray(fused.params()[0]), _params()[0])
    opt_f, opt_g = (list(t._optimizers.values())[0] for t in (fused, general))
    assert opt_f.step_count == opt_g.step_count == 5
    assert [int(s["step"]) for s in opt_f.state] == [int(s["step"]) for s in opt_g.state]
    assert ([p.version for p in fused.param_list] == [p.version for p in general.param_list]
            != [0] * 4)


def test_a_wrong_gemm_update_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(p: Any, g: Any, h: Any, lr: float) -> None:
        fast_sgd.update_step(p, g.T @ h, -lr)  # the sign of the step flipped

    monkeypatch.setattr(fast_sgd, "gemm_step", wrong)
    fused, _ = _run(_mlp, fused=True)
    general, _ = _run(_mlp, fused=False)
    assert _sgd_plans(fused)
    assert _worst(fused, general) > 100 * FAST_RTOL["float32"]


def test_frozen_parameters_stay_and_are_not_counted() -> None:
    fused, _ = _run(_mlp, fused=True, frozen=2)
    general, _ = _run(_mlp, fused=False, frozen=2)
    assert _sgd_plans(fused)
    assert np.array_equal(np.asarray(fused.params()[2]), _params()[2])
    assert _worst(fused, general) <= FAST_RTOL["float32"]
    assert fused.param_list[2].version == 0
    assert [p.version for p in fused.param_list] == [p.version for p in general.param_list]


def test_no_plan_above_one_blas_thread_or_with_momentum() -> None:
    # NumPy's threaded GEMM beats the one-thread GEMM such a plan would call: general path.
    t = _trainer(_mlp, fused=True)
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        if threadpoolctl.threadpool_info()[0]["num_threads"] < 2:
            pytest.skip("the BLAS here would not run two threads")
        for _ in range(3):
            t.step(0.5, X, Y)
    assert not _sgd_plans(t)
    # Momentum is not a plain step: the optimiser runs.
    t = _trainer(_mlp, fused=True)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        for _ in range(3):
            t._step("SGD", (X, Y), lr=0.5, momentum=0.9)
    assert not _sgd_plans(t)
