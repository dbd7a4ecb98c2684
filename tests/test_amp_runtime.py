"""``torch.amp``'s GradScaler and autocast, ``torch.utils.checkpoint``, ``torch.jit``'s pass-through
forms and the runtime switches (threads, matmul precision, determinism), against torch where
torch runs the same thing on a CPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from differential import agree

import torchlean as tl

torch = pytest.importorskip("torch")

X = np.cos(np.arange(12, dtype=np.float32)).reshape(3, 4)


def _model(m: Any) -> Any:
    lin = m.nn.Linear(4, 2)
    with m.no_grad():
        lin.weight.copy_(m.tensor(np.sin(np.arange(8, dtype=np.float32)).reshape(2, 4)))
        lin.bias.zero_()
    return lin


def test_cpu_grad_scaler_steps_skips_and_rescales_as_torch() -> None:
    def program(m: Any) -> Any:
        lin = _model(m)
        opt = m.optim.SGD(lin.parameters(), lr=0.1)
        scaler = m.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
        scales, weights = [], []
        for step in range(5):
            opt.zero_grad()
            with m.autocast(device_type="cpu", dtype=m.bfloat16, enabled=False):
                loss = lin(m.tensor(X)).pow(2).sum()
            if step == 2:  # an overflowing step: skipped, scale backs off
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            weights.append(lin.weight.detach().clone())
        return [scales, weights, scaler.state_dict()["_growth_tracker"]]
    agree(program, 1e-6, 1e-6)


def test_cuda_scaler_without_a_gpu_disables_itself() -> None:
    if tl.cuda.is_available():
        pytest.skip("a GPU is usable here: the scaler stays enabled")
    scaler = tl.cuda.amp.GradScaler()
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    loss = tl.tensor(2.0, requires_grad=True)
    assert scaler.scale(loss) is loss


def test_scaler_and_autocast_refusals() -> None:
    with pytest.raises(tl.TorchLeanError, match="growth_factor"):
        tl.amp.GradScaler("cpu", growth_factor=0.5)
    with pytest.raises(tl.TorchLeanError, match="device_type"):
        tl.autocast(device_type="tpu")
    lin = _model(tl)
    opt = tl.optim.SGD(lin.parameters(), lr=0.1)
    scaler = tl.amp.GradScaler("cpu")
    scaler.scale(lin(tl.tensor(X)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(tl.TorchLeanError, match="already called"):
        scaler.unscale_(opt)


def test_checkpoint_gives_the_plain_values_and_gradients() -> None:
    def program(m: Any) -> Any:
        from_ckpt = __import__(f"{m.__name__}.utils.checkpoint", fromlist=["checkpoint"])
        lin = _model(m)
        x = m.tensor(X, requires_grad=True)
        y = from_ckpt.checkpoint(lin, x, use_reentrant=False)
        seq = m.nn.Sequential(lin, m.nn.Tanh(), m.nn.Linear(2, 1))
        with m.no_grad():
            seq[2].weight.fill_(0.5)
            seq[2].bias.fill_(0.1)
        z = from_ckpt.checkpoint_sequential(seq, 2, x, use_reentrant=False)
        (y.sum() + z.sum()).backward()
        return [y, z, x.grad, lin.weight.grad]
    agree(program, 1e-6, 1e-6)


def test_jit_passes_through_and_refuses_archives() -> None:
    lin = _model(tl)
    assert tl.jit.script(lin) is lin
    assert tl.jit.trace(lin, tl.tensor(X)) is lin

    @tl.jit.ignore
    def helper(a: Any) -> Any:
        return a

    assert helper(3) == 3 and not tl.jit.is_scripting()
    with pytest.raises(tl.TorchLeanError, match="TorchScript"):
        tl.jit.save(lin, "m.pt")
    with pytest.raises(tl.TorchLeanError):
        tl.jit.trace(lin, tl.ones(3, 5))  # the example must run


def test_runtime_switches() -> None:
    tl.set_float32_matmul_precision("high")
    assert tl.get_float32_matmul_precision() == "high"
    tl.set_float32_matmul_precision("highest")
    tl.use_deterministic_algorithms(True)
    assert tl.are_deterministic_algorithms_enabled()
    tl.use_deterministic_algorithms(False)
    before = tl.get_num_threads()
    tl.set_num_threads(1)
    assert tl.get_num_threads() == 1
    tl.set_num_threads(max(before, 1))
    with pytest.raises(tl.TorchLeanError, match="positive int"):
        tl.set_num_threads(0)
    with pytest.raises(tl.TorchLeanError, match="'highest'"):
        tl.set_float32_matmul_precision("low")


def test_torch_compile_forms_return_the_model() -> None:
    lin = _model(tl)
    assert tl.compile(lin) is lin
    assert tl.compile(lin, mode="max-autotune", fullgraph=False) is lin

    @tl.compile
    def f(a: Any) -> Any:
        return a * 2

    @tl.compile(dynamic=True)
    def g(a: Any) -> Any:
        return a + 1

    assert f(3) == 6 and g(3) == 4
    traced = tl.compile(lambda x: lin(x), (3, 4))  # torchlean's traced form is unchanged
    np.testing.assert_allclose(np.asarray(traced(X)), lin(tl.tensor(X)).detach().numpy(),
                               rtol=1e-6)
    with pytest.raises(tl.SignatureError, match="unexpected keyword"):
        tl.compile(lin, turbo=True)
    with pytest.raises(tl.SignatureError, match="shapeless form"):
        tl.compile(lambda x: x, (3,), mode="default")
