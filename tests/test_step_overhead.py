"""The per-step shortcuts of the training path (session 13, issue 26): each gives the bits of
the long way, and anything it does not prove falls back to the long way.

- ``Optimizer.step``'s loop and ``SGD._apply_all`` (plain SGD on host arrays without a call per
  parameter; momentum or weight decay run ``apply_single``);
- the step counter counted through ``fill`` (``optimizers._count_step``);
- ``trainers.optimizer_for`` skipping the hyper-parameter re-check when every value is a float
  its groups already hold (a changed or non-float value is checked and set as before);
- ``EagerBackend.use``'s host-parameter path (another dtype or a device goes the long way);
- ``registry.fast_kernels`` as a class (nesting and exceptions restore the previous set).
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import ShapeError
from torchlean.engine import ops_interface as F
from torchlean.engine.params import Param
from torchlean.engine.session import Options, Session, StaleSessionError, _Backend
from torchlean.optim.optimizers import OptimizerError
from torchlean.training.trainers import ScalarTrainer, optimizer_for


def _mlp_data(seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = [12, 9, 7, 5]
    params: list[np.ndarray] = []
    for a, b in zip(dims[:-1], dims[1:], strict=True):
        params += [(rng.standard_normal((b, a)) * 0.3).astype(np.float32),
                   (rng.standard_normal(b) * 0.1).astype(np.float32)]
    x = rng.standard_normal((6, 12)).astype(np.float32)
    y = rng.integers(0, 5, 6).astype(np.float32)
    return params, x, y


def _mlp(w1, b1, w2, b2, w3, b3, x, y):  # type: ignore[no-untyped-def]
    h = F.relu(F.linear(w1, b1, x))
    h = F.relu(F.linear(w2, b2, h))
    return F.cross_entropy(F.linear(w3, b3, h), y)


def _reference_sgd(params: list[np.ndarray], grads: list[np.ndarray], lr: float) -> None:
    for p, g in zip(params, grads, strict=True):
        p += (-lr) * g


@pytest.mark.parametrize("fast", [False, True])
def test_trainer_steps_equal_the_long_way(fast: bool) -> None:
    """Steps through ``ScalarTrainer`` (eager; the cached hyper-parameters and SGD's loop) give
    the bits of value_and_grads then the reference update (no fast kernels: bitwise)."""
    params, x, y = _mlp_data()
    trainer = ScalarTrainer([p.copy() for p in params], _mlp,
                            Options(backend="eager", fast_kernels=fast))
    mirror = ScalarTrainer([p.copy() for p in params], _mlp,
                           Options(backend="eager", fast_kernels=fast))
    for k in range(4):
        lr = 0.05 if k < 2 else 0.02  # a changed rate is set, not skipped
        loss = trainer.step(lr, x, y)
        ref_loss, grads = mirror.value_and_grads(x, y)
        values = mirror.params()
        _reference_sgd(values, grads, lr)
        for p in mirror.param_list:
            p.mark_updated()
        assert loss == ref_loss
        for got, want in zip(trainer.params(), values, strict=True):
            if fast:  # (the BLAS axpy may round once differently on large arrays; these are small)
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
            else:
                assert got.tobytes() == want.tobytes()
    opt = next(iter(trainer._optimizers.values()))
    assert opt.lr == 0.02
    assert int(opt.state[0]["step"]) == 4 and opt.state[0]["step"].dtype == np.int64
    assert opt.step_count == 4


def test_optimizer_for_rechecks_changed_or_non_float_hyper() -> None:
    p = Param(np.ones(3, np.float32))
    cache: dict = {}
    opt = optimizer_for(cache, "SGD", [p], lr=0.1)
    assert optimizer_for(cache, "SGD", [p], lr=0.1) is opt
    # An int equal to the held float still goes through the check (and is stored as a float).
    optimizer_for(cache, "SGD", [p], lr=1)
    assert opt.lr == 1.0 and type(opt.param_groups[0]["lr"]) is float
    # Bad values raise and change nothing, whether or not they compare equal to the held one.
    with pytest.raises(OptimizerError):
        optimizer_for(cache, "SGD", [p], lr=True)
    with pytest.raises(OptimizerError):
        optimizer_for(cache, "SGD", [p], lr=float("nan"))
    with pytest.raises(OptimizerError):
        optimizer_for(cache, "SGD", [p], lr=-1.0)
    assert opt.lr == 1.0
    # Adam's betas, flattened, compared as floats too.
    q = Param(np.ones(3, np.float32))
    adam = optimizer_for(cache, "Adam", [q], lr=0.1, betas=(0.9, 0.99), eps=1e-8)
    optimizer_for(cache, "Adam", [q], lr=0.1, betas=(0.8, 0.99), eps=1e-8)
    assert adam.param_groups[0]["betas"] == (0.8, 0.99)


@pytest.mark.parametrize("hyper", [{}, {"momentum": 0.9}, {"weight_decay": 0.01},
                                   {"momentum": 0.5, "nesterov": True}])
def test_sgd_loop_equals_apply_single(hyper: dict) -> None:
    """``SGD._apply_all`` against the generic loop (``Optimizer._apply_all``), bit for bit,
    over several steps, two groups and a frozen parameter."""
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3,), (5,))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in arrays]
             for _ in range(3)]

    def run(generic: bool) -> list[np.ndarray]:
        ps = [Param(a.copy()) for a in arrays]
        ps[2].requires_grad = False
        opt = tl.optim.SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.3}], lr=0.1,
                           **hyper)
        if generic:
            opt._apply_all = lambda work: tl.optim.Optimizer._apply_all(opt, work)
        for gs in grads:
            opt.step(gs)
        return [p.array.copy() for p in ps]

    for got, want in zip(run(False), run(True), strict=True):
        assert got.tobytes() == want.tobytes()


def test_step_counter_and_bad_gradients() -> None:
    p = Param(np.ones(3, np.float32))
    opt = tl.optim.SGD([p], lr=0.1)
    before = p.array.copy()
    with pytest.raises(ShapeError):
        opt.step([np.ones(4, np.float32)])
    with pytest.raises(ShapeError, match="float dtype"):
        opt.step([np.ones(3, np.int64)])
    assert p.array.tobytes() == before.tobytes() and int(opt.state[0]["step"]) == 0
    opt.step([np.ones(3, np.float64)])  # converted to the parameter's dtype, as before
    assert p.array.dtype == np.float32 and int(opt.state[0]["step"]) == 1
    # A counter someone replaced with a Python int still counts.
    opt.state[0]["step"] = 5
    opt.step([np.ones(3, np.float32)])
    assert int(opt.state[0]["step"]) == 6


def test_eager_use_fast_path_and_fallbacks() -> None:
    """A float32 host parameter is used without a copy; a float64 one in a float32 session is
    converted (the long way); the refs and gradients equal the generic ``_Backend.use``."""
    p32 = Param(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    p64 = Param(np.arange(2, dtype=np.float64), name="b")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

    def grads(generic: bool) -> tuple[dict, Session]:
        s = Session(Options(backend="eager"))
        if generic:
            backend = s._backend
            backend.use = lambda p: _Backend.use(backend, p)  # type: ignore[method-assign]
        w, b = s.use(p32), s.use(p64)
        assert s.use(p32).id == w.id  # the same ref when used twice
        assert w.dtype == np.float32 and b.dtype == np.float32 and b.shape == (2,)
        out = F.sum(F.relu(F.linear(w, b, s.input(x))))
        return s.backward(out), s

    fast, s1 = grads(False)
    slow, _ = grads(True)
    assert sorted(fast) == sorted(slow)
    for k in fast:
        assert fast[k].tobytes() == slow[k].tobytes()
    assert s1.tape is not None and s1.tape.value(0) is p32.array  # no copy of the parameter
    # A stale parameter is still refused.
    s = Session(Options(backend="eager"))
    w = s.use(p32)
    p32.assign(np.zeros((2, 3), np.float32))
    with pytest.raises(StaleSessionError):
        s.value(w)
