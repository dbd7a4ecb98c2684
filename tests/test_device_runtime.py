"""The runtime on the device, on the strict stand-in (``strict_device``): tapes, sessions (both
backends), ``Stepper``, compiled graphs, transforms, ``F`` on plain arrays and ``tl.Tensor``.

The stand-in runs NumPy underneath, so every number must equal the CPU run's exactly; what the
tests add is the other half: nothing reads device data implicitly (the stand-in raises), results
stay on the device, transfers happen where they should and only as often as they should (the
stand-in counts uploads and downloads), data of another device is a ``DeviceError``, and a
finished step leaves no device arrays alive.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from strict_device import StrictArray, strict_cuda

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.backend import to_device
from torchlean.core.errors import DeviceError
from torchlean.core.registry import Primitive, Sample
from torchlean.engine import transforms
from torchlean.engine.anomaly import NonFiniteError, all_finite
from torchlean.engine.params import Param
from torchlean.engine.session import Options
from torchlean.engine.tape import Tape
from torchlean.training.stepper import Stepper
from torchlean.training.trainers import ScalarTrainer, Session

BACKENDS = ("eager", "compiled")


def _host(x: Any) -> np.ndarray:
    """A device result's contents (asserting it is one), peeked at without a counted transfer,
    so the transfer counts are the library's alone. A tensor (a parameter's ``.grad``) is read
    through its array."""
    if isinstance(x, tl.Tensor):
        x = x.array
    assert isinstance(x, StrictArray), f"expected a device array, found {type(x).__name__}"
    return np.array(x._a, copy=True)


def _same(device: Any, host: Any) -> None:
    got = _host(device)
    want = np.asarray(host)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _mlp_data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.standard_normal((8, 4)).astype(np.float32) * 0.5,
        "b1": rng.standard_normal(8).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((3, 8)).astype(np.float32) * 0.5,
        "b2": rng.standard_normal(3).astype(np.float32) * 0.1,
        "x": rng.standard_normal((6, 4)).astype(np.float32),
        "y": rng.standard_normal((6, 3)).astype(np.float32),
    }


def _params(d: dict[str, np.ndarray]) -> list[Param]:
    return [Param(d[k], k) for k in ("w1", "b1", "w2", "b2")]


def _mlp_loss(params: list[Param]) -> Callable[..., Any]:
    """A small MLP with a mean-squared-error loss: ``fn(owner, x, y)`` as Stepper takes it."""
    w1, b1, w2, b2 = params

    def fn(owner: Any, x: Any, y: Any) -> Any:
        h = F.relu(F.linear(owner.use(w1), owner.use(b1), x))
        out = F.linear(owner.use(w2), owner.use(b2), h)
        return F.mean(F.square(out - y))

    return fn


# --- the tape ----------------------------------------------------------------------------------


def _tape_step(tape: Tape, d: dict[str, np.ndarray]) -> tuple[int, list[int]]:
    ids = [tape.leaf(d[k], name=k) for k in ("w1", "b1", "w2", "b2")]
    x = tape.leaf(d["x"], requires_grad=False)
    y = tape.leaf(d["y"], requires_grad=False)
    h = tape.relu(tape.linear(ids[0], ids[1], x))
    out = tape.linear(ids[2], ids[3], h)
    loss = tape.scale(tape.sum(tape.square(tape.sub(out, y))), 1.0 / 18)
    return loss, ids


def test_device_tape_uploads_host_leaves_once_and_matches_the_cpu() -> None:
    d = _mlp_data()
    cpu = Tape()
    loss_c, ids_c = _tape_step(cpu, d)
    grads_c = cpu.backward_scalar(loss_c)
    with strict_cuda() as xp:
        tape = Tape(device="cuda")
        assert tape.xp is xp
        loss, ids = _tape_step(tape, d)
        assert xp.transfers.uploads == 6  # one per host leaf, none per op
        grads = tape.backward_scalar(loss)
        assert xp.transfers.uploads == 6 and xp.transfers.downloads == 0
        _same(tape.value(loss), cpu.value(loss_c))
        for i, j in zip(ids, ids_c, strict=True):
            _same(grads[i], grads_c[j])
        dense = tape.backward_dense_all(loss, 1.0)  # a host seed: one explicit upload
        assert xp.transfers.uploads == 7
        for g in dense:
            assert isinstance(g, StrictArray)
        t = tape.jvp(loss, {ids[0]: np.ones((8, 4), np.float32)})
        _same(t, cpu.jvp(loss_c, {ids_c[0]: np.ones((8, 4), np.float32)}))
        # A device array given to a device tape is taken as it is (the leaf copies it there).
        before = xp.transfers.uploads
        tape.leaf(to_device(d["x"], xp))
        assert xp.transfers.uploads == before + 1  # the to_device above, nothing more
        assert xp.transfers.downloads == 0


def test_device_array_on_a_cpu_tape_is_a_device_error_naming_op_and_devices() -> None:
    with strict_cuda() as xp:
        dev = to_device(np.ones(3, np.float32), xp)
        tape = Tape()
        with pytest.raises(DeviceError, match=r"leaf.*'cpu'.*'cuda'"):
            tape.leaf(dev)
        i = tape.leaf(np.ones(3, np.float32))
        out = tape.sum(i)
        with pytest.raises(DeviceError, match="seed"):
            tape.backward(i, dev)
        with pytest.raises(DeviceError, match="jvp tangent"):
            tape.jvp(out, {i: dev})
        assert tape.size == 2  # nothing recorded by a refused call


def test_device_tape_refuses_an_op_without_a_device_kernel() -> None:
    prim = Primitive("host_only_double", ("x",), lambda s: s, lambda x: x * 2,
                     semantics="test only", samples=lambda rng: [Sample((np.ones(2),))],
                     nondiff=True, device_kernel=False)
    with strict_cuda():
        tape = Tape(device="cuda")
        i = tape.leaf(np.ones(2, np.float32))
        with pytest.raises(DeviceError, match="host_only_double"):
            tape.record(prim, [i], {})
        assert tape.size == 1
    cpu = Tape()
    np.testing.assert_array_equal(cpu.value(cpu.record(prim, [cpu.leaf(np.ones(2))], {})), 2.0)


def test_nullary_op_draws_on_the_device_with_no_upload() -> None:
    cpu = Tape()
    want = cpu.value(cpu.rand_uniform(shape=(4, 5), seed=3, counter=2))
    with strict_cuda() as xp:
        tape = Tape(device="cuda")
        i = tape.rand_uniform(shape=(4, 5), seed=3, counter=2)
        _same(tape.value(i), want)
        assert xp.transfers.uploads == 0 and xp.transfers.downloads == 0


def test_check_finite_on_the_device_reads_back_one_flag_per_value() -> None:
    with strict_cuda() as xp:
        tape = Tape(device="cuda", check_finite=True)
        a = tape.leaf(np.array([1.0, 2.0], np.float32))
        b = tape.exp(a)
        tape.sum(b)
        assert xp.transfers.downloads == 3  # one 0-d flag per node, never the arrays
        c = tape.leaf(np.array([1.0, 0.0], np.float32))
        with pytest.raises(NonFiniteError, match=r"inv: 1 of 2 entries .*node 4"):
            tape.inv(c)
        assert tape.size == 4  # the inv node was refused
        assert all_finite(to_device(np.ones(2), xp))
        assert not all_finite(to_device(np.array([np.inf]), xp))


# --- sessions ----------------------------------------------------------------------------------


def _session_pass(s: Session, params: list[Param], d: dict[str, np.ndarray]
                  ) -> tuple[Any, dict[int, Any], list[Any]]:
    fn = _mlp_loss(params)
    loss = fn(s._backend, s.input(d["x"], requires_grad=False),
              s.input(d["y"], requires_grad=False))
    grads = s.backward(loss)
    refs = [s.use(p) for p in params]
    return s.value(loss), grads, [s.grad(grads, r) for r in refs]


@pytest.mark.parametrize("backend", BACKENDS)
def test_session_on_the_device_matches_the_cpu_and_uploads_parameters_once(backend: str) -> None:
    d = _mlp_data(1)
    cpu_params = _params(d)
    cpu = Session(Options(backend=backend))
    with strict_cuda() as xp:
        params = _params(d)
        s = Session(Options(backend=backend, device="cuda"))
        for k in range(2):
            s.reset()
            cpu.reset()
            want = _session_pass(cpu, cpu_params, d)
            value, grads, param_grads = _session_pass(s, params, d)
            # each parameter once ever, the two host inputs once per use (pass)
            assert xp.transfers.uploads == 4 + 2 * (k + 1), xp.transfers
            assert xp.transfers.downloads == 0
            _same(value, want[0])
            for g, h in zip(param_grads, want[2], strict=True):
                _same(g, h)
            for p, q in zip(params, cpu_params, strict=True):
                _same(p.grad, q.grad)  # accumulated on the device, as on the host
        for p in params:
            assert p.device == "cuda" and isinstance(p.array, StrictArray)
        # jvp of the same pass, and a device input used without an upload
        s.reset()
        x = to_device(d["x"], xp)
        before = xp.transfers.uploads
        out = F.sum(F.linear(s.use(params[0]), s.use(params[1]), s.input(x, False)))
        t = s.jvp(out, {s.use(params[0]): np.ones((8, 4), np.float32)})
        assert xp.transfers.uploads == before + 1  # the host tangent, uploaded explicitly
        cpu.reset()
        out_c = F.sum(F.linear(cpu.use(cpu_params[0]), cpu.use(cpu_params[1]),
                               cpu.input(d["x"], False)))
        _same(t, cpu.jvp(out_c, {cpu.use(cpu_params[0]): np.ones((8, 4), np.float32)}))


@pytest.mark.parametrize("backend", BACKENDS)
def test_session_random_draws_on_the_device(backend: str) -> None:
    cpu = Session(Options(backend=backend, seed=5))
    want = cpu.value(cpu.rand_uniform((3, 4)))
    with strict_cuda() as xp:
        s = Session(Options(backend=backend, device="cuda", seed=5))
        _same(s.value(s.rand_uniform((3, 4))), want)
        assert xp.transfers.uploads == 0 and xp.transfers.downloads == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_session_refuses_a_parameter_on_the_device(backend: str) -> None:
    with strict_cuda() as xp:
        p = Param(np.ones(3, np.float32), "p")
        p.on(xp)
        s = Session(Options(backend=backend))
        with pytest.raises(DeviceError, match=r"use: parameter p.*'cpu'"):
            s.use(p)
        with pytest.raises(DeviceError):
            s.input(to_device(np.ones(3), xp))


# --- Stepper: the training path ----------------------------------------------------------------


def _train(device: str, backend: str, d: dict[str, np.ndarray], steps: int, lr: float = 0.1,
           device_inputs: bool = False, xp: Any = None) -> tuple[list[Any], list[Param]]:
    params = _params(d)
    stepper = Stepper(_mlp_loss(params), Options(backend=backend, device=device))
    x, y = d["x"], d["y"]
    if device_inputs:
        x, y = to_device(x, xp), to_device(y, xp)
    losses = []
    for _ in range(steps):
        loss, pairs = stepper.value_and_grads([x, y])
        for p, g in pairs:  # SGD by hand, in place where the parameter lives
            p.array[...] -= np.float32(lr) * g
            p.mark_updated()
        losses.append(loss)
    return losses, params


@pytest.mark.parametrize("backend", BACKENDS)
def test_stepper_trains_on_the_device_as_on_the_cpu(backend: str) -> None:
    d = _mlp_data(2)
    want_losses, want_params = _train("cpu", backend, d, 5)
    with strict_cuda() as xp:
        losses, params = _train("cuda", backend, d, 5)
        # the two inputs once per step, each parameter once ever
        assert xp.transfers.uploads == 2 * 5 + 4, xp.transfers
        assert xp.transfers.downloads == 0
        for got, want in zip(losses, want_losses, strict=True):
            _same(got, want)
        for p, q in zip(params, want_params, strict=True):
            _same(p.array, q.array)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stepper_takes_device_inputs_without_a_copy(backend: str) -> None:
    d = _mlp_data(3)
    want_losses, _ = _train("cpu", backend, d, 3)
    with strict_cuda() as xp:
        losses, _ = _train("cuda", backend, d, 3, device_inputs=True, xp=xp)
        assert xp.transfers.uploads == 2 + 4  # the test's own two uploads, then the parameters once
        for got, want in zip(losses, want_losses, strict=True):
            _same(got, want)
        stepper = Stepper(lambda owner, x: F.sum(x), Options(backend=backend, device="cuda"))
        x = to_device(np.ones(3, np.float32), xp)
        assert stepper._arrays([x])[0] is x


def test_stepper_on_the_cpu_refuses_device_inputs() -> None:
    with strict_cuda() as xp:
        stepper = Stepper(lambda owner, x: F.sum(x), Options())
        with pytest.raises(DeviceError, match="input"):
            stepper.value_and_grads([to_device(np.ones(3), xp)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_trainer_on_the_device(backend: str) -> None:
    d = _mlp_data(4)

    def loss_fn(w: Any, b: Any, x: Any, y: Any) -> Any:
        return F.mean(F.square(F.linear(w, b, x) - y))

    results = []
    for device in ("cpu", "cuda"):
        with strict_cuda():
            trainer = ScalarTrainer([d["w2"][:, :4], d["b2"]], loss_fn,
                                    Options(backend=backend, device=device))
            losses = [trainer.step(0.1, d["x"], d["y"]) for _ in range(3)]
            results.append((losses, [np.array(v) for v in trainer.params()]))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_array_equal(a, b)


# --- compiled graphs and transforms ------------------------------------------------------------


def test_compiled_replay_uploads_constants_once_and_parameters_once() -> None:
    d = _mlp_data(5)
    scale = np.linspace(0.5, 1.5, 3).astype(np.float32)

    def build() -> tuple[transforms.Compiled, list[Param]]:
        params = _params(d)
        fn = _mlp_loss(params)

        def with_const(owner: Any, x: Any, y: Any) -> Any:
            return fn(owner, x, y * scale)  # ``scale`` becomes a graph constant

        return transforms.Compiled(with_const, [(6, 4), (6, 3)], wrt=(), owner_arg=True), params

    c_cpu, _ = build()
    want = c_cpu.value_and_backward(d["x"], d["y"])
    with strict_cuda() as xp:
        c, params = build()
        x, y = to_device(d["x"], xp), to_device(d["y"], xp)
        for p in params:
            p.on(xp)
        base = xp.transfers.uploads
        assert base == 2 + 4
        for _ in range(20):
            value, grads = c.value_and_backward(x, y)
        assert xp.transfers.uploads == base + 1  # the constant, once for 20 replays
        assert xp.transfers.downloads == 0
        _same(value, want[0])
        for g, h in zip(grads, want[1], strict=True):
            _same(g, h)
        # host inputs: uploaded explicitly on each run, the constant still once
        for _ in range(3):
            c.forward(d["x"], d["y"])
        assert xp.transfers.uploads == base + 1 + 2 * 3


def test_compiled_run_reads_parameters_in_place() -> None:
    d = _mlp_data(6)
    with strict_cuda() as xp:
        params = _params(d)
        c = transforms.Compiled(_mlp_loss(params), [(6, 4), (6, 3)], wrt=(), owner_arg=True,
                                device="cuda")
        c.forward(d["x"], d["y"])
        arrays = [p.array for p in params]
        uploads = xp.transfers.uploads
        params[0].array[...] = 0  # an in-place update, as an optimiser makes
        params[0].mark_updated()
        value = c.forward(d["x"], d["y"])
        assert all(p.array is a for p, a in zip(params, arrays, strict=True))
        assert xp.transfers.uploads == uploads + 2  # the inputs only
    cpu = _params(d)
    cpu[0].assign(np.zeros((8, 4), np.float32))
    want = transforms.Compiled(_mlp_loss(cpu), [(6, 4), (6, 3)], wrt=(), owner_arg=True
                               ).forward(d["x"], d["y"])
    _same(value, want)


def test_compiled_refuses_to_mix_devices() -> None:
    d = _mlp_data(7)
    with strict_cuda() as xp:
        params = _params(d)
        c = transforms.Compiled(_mlp_loss(params), [(6, 4), (6, 3)], wrt=(), owner_arg=True,
                                device="cpu")
        with pytest.raises(DeviceError, match="input 0"):
            c.forward(to_device(d["x"], xp), d["y"])
        params[0].on(xp)
        with pytest.raises(DeviceError, match="parameter w1"):
            c.forward(d["x"], d["y"])


def _f(x: Any, w: Any) -> Any:
    return F.sum(F.square(F.tanh(x * w)))


def test_transforms_on_device_arrays_match_the_cpu() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 2))
    w = rng.standard_normal((3, 2))
    v = rng.standard_normal((3, 2))
    want_grad = transforms.grad(_f, argnums=(0, 1))(x, w)
    want_vjp = transforms.vjp(_f, x, w)
    want_jvp = transforms.jvp(_f, (x, w), (v, v))
    want_hvp = transforms.hvp(_f, (x, w), (v, None))
    want_hess = transforms.hessian(_f)(x, w)
    with strict_cuda() as xp:
        dx, dw, dv = (to_device(a, xp) for a in (x, w, v))
        for got, want in zip(transforms.grad(_f, argnums=(0, 1))(dx, dw), want_grad, strict=True):
            _same(got, want)
        out, vjp_fn = transforms.vjp(_f, dx, dw)
        _same(out, want_vjp[0])
        for got, want in zip(vjp_fn(1.0), want_vjp[1](1.0), strict=True):
            _same(got, want)
        for got, want in zip(transforms.jvp(_f, (dx, dw), (dv, dv)), want_jvp, strict=True):
            _same(got, want)
        for got, want in zip(transforms.hvp(_f, (dx, dw), (dv, None)), want_hvp, strict=True):
            _same(got, want)
        _same(transforms.hessian(_f)(dx, dw), want_hess)
        assert xp.transfers.downloads == 0


def test_compiled_to_tape_on_the_device_matches_backprop_all() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with strict_cuda() as xp:
        c = transforms.compile(lambda a: F.sum(F.relu(a) * a), (2, 3))
        dx = to_device(x, xp)
        tape, leaves, out = c.to_tape(dx)
        assert tape.xp is xp
        dense = tape.backward_dense_all(out, 1.0)
        for got, want in zip(dense, c.backprop_all([dx], 1.0), strict=True):
            np.testing.assert_array_equal(_host(got), _host(want))


# --- F on plain arrays -------------------------------------------------------------------------


def test_functional_on_plain_device_arrays() -> None:
    rng = np.random.default_rng(10)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    with strict_cuda() as xp:
        da, db = to_device(a, xp), to_device(b, xp)
        _same(F.relu(da), F.relu(a))
        _same(F.add(da, db), F.add(a, b))
        _same(F.mean(da), F.mean(a))
        _same(F.reshape(da, (-1,)), a.reshape(-1))
        _same(da @ to_device(b.T, xp), a @ b.T)
        assert xp.transfers.downloads == 0
        with pytest.raises(DeviceError, match=r"add: .*NumPy array on 'cpu'"):
            F.add(da, b)
        labels = to_device(np.array([0, 2, 1]), xp)
        _same(F.one_hot_array(labels, 3), F.one_hot_array(np.array([0, 2, 1]), 3))


# --- tensors -----------------------------------------------------------------------------------


def test_tensors_on_the_device_train_as_on_the_cpu() -> None:
    d = _mlp_data(11)

    def run(device: str) -> tuple[Any, list[Any]]:
        w1 = tl.tensor(d["w1"], requires_grad=True, device=device)
        b1 = tl.tensor(d["b1"], requires_grad=True, device=device)
        x = tl.tensor(d["x"], device=device)
        y = tl.tensor(d["y"], device=device)
        out = F.linear(w1, b1, x).relu()
        loss = ((out[:, :3] - y) ** 2).mean()
        loss.backward()
        return loss, [w1.grad, b1.grad]

    want_loss, want_grads = run("cpu")
    with strict_cuda() as xp:
        loss, grads = run("cuda")
        assert loss.device == "cuda" and not loss.is_leaf
        assert xp.transfers.uploads == 4
        _same(loss._value, want_loss.detach().numpy())
        for g, h in zip(grads, want_grads, strict=True):
            assert g.device == "cuda"
            _same(g._value, h.numpy())
        assert loss.item() == want_loss.item()  # an explicit readback
        assert "device='cuda'" in repr(loss.detach())


def test_tensor_device_moves_and_errors() -> None:
    with strict_cuda() as xp:
        t = tl.tensor([1.0, 2.0, 3.0], device="cuda")
        assert t.device == "cuda" and t.is_cuda
        with pytest.raises(DeviceError, match=r"\.cpu\(\)"):
            t.numpy()
        with pytest.raises(DeviceError, match=r"\.cpu\(\)"):
            np.asarray(t)
        host = t.cpu()
        assert host.device == "cpu"
        np.testing.assert_array_equal(host.numpy(), [1.0, 2.0, 3.0])
        assert t.cuda() is t and t.to("cuda") is t and host.to("cpu") is host
        back = host.cuda()
        assert back.device == "cuda"
        _same(back._value, np.array([1.0, 2.0, 3.0], np.float32))
        with pytest.raises(DeviceError, match=r"add: expected all tensors on the same device"):
            _ = t + host
        with pytest.raises(DeviceError):
            _ = t < host
        _same((t > 1.5)._value, np.array([False, True, True]))
        _same(t.argmax()._value, np.array(2, np.int64))
        moved = t.to("cpu", tl.float64)
        assert moved.device == "cpu" and moved.dtype == np.float64
        downloads = xp.transfers.downloads
        assert bool(t.sum() > 5) and float(t.sum()) == 6.0
        assert xp.transfers.downloads == downloads + 2  # bool and float each read back once


def test_tensor_moved_with_a_history_passes_the_gradient_back() -> None:
    with strict_cuda():
        w = tl.tensor([1.0, -2.0, 3.0], requires_grad=True)  # a host leaf
        dw = w.cuda()
        assert not dw.is_leaf and dw.device == "cuda"
        (dw * dw).sum().backward()
        assert w.grad is not None and w.grad.device == "cpu"
        np.testing.assert_array_equal(w.grad.numpy(), [2.0, -4.0, 6.0])


def test_tensor_factories_on_the_device() -> None:
    tl.manual_seed(4)
    want_rand = tl.rand(2, 3).numpy()
    want_randn = tl.randn(2, 3, dtype=tl.float64).numpy()
    with strict_cuda() as xp:
        tl.manual_seed(4)
        _same(tl.rand(2, 3, device="cuda")._value, want_rand)
        _same(tl.randn(2, 3, dtype=tl.float64, device="cuda")._value, want_randn)
        _same(tl.zeros(2, 3, device="cuda")._value, np.zeros((2, 3), np.float32))
        _same(tl.ones(2, device="cuda")._value, np.ones(2, np.float32))
        _same(tl.full((2,), 7.0, device="cuda")._value, np.full(2, 7.0, np.float32))
        _same(tl.arange(4, device="cuda")._value, np.arange(4, dtype=np.int64))
        z = tl.zeros_like(tl.ones(3, device="cuda"))
        assert z.device == "cuda"
        assert xp.transfers.uploads == 0 and xp.transfers.downloads == 0  # all made on the device


# --- memory ------------------------------------------------------------------------------------


def _live_device_arrays() -> int:
    gc.collect()
    return sum(isinstance(o, StrictArray) for o in gc.get_objects())


@pytest.mark.parametrize("backend, graph", [("eager", None), ("compiled", False),
                                            ("compiled", None)])
def test_device_arrays_of_a_finished_step_are_released(backend: str, graph: bool | None
                                                       ) -> None:
    d = _mlp_data(12)
    before = _live_device_arrays()  # other tests' arrays may still be alive (module caches)
    with strict_cuda() as xp:
        params = _params(d)
        stepper = Stepper(_mlp_loss(params), Options(backend=backend, device="cuda",
                                                     cuda_graph=graph))
        x, y = to_device(d["x"], xp), to_device(d["y"], xp)
        lr = np.float32(0.05)

        def step() -> None:
            _, pairs = stepper.value_and_grads([x, y])
            for p, g in pairs:
                p.array[...] -= lr * g
                p.mark_updated()

        for _ in range(3):  # warm-up: parameters moved, graph traced, constants uploaded
            step()
        baseline = _live_device_arrays()
        for _ in range(50):
            step()
        assert _live_device_arrays() <= baseline
        # the parameters and the two inputs: nothing of the warm-up steps; a compiled step
        # replayed from a CUDA graph (the default on a device) also keeps its static buffers:
        # the two inputs, the loss and one gradient per input and parameter
        graphed = 2 + 1 + 2 + 4 if Options(backend=backend, device="cuda",
                                          cuda_graph=graph).graphs_steps else 0
        assert baseline - before <= 4 + 2 + graphed


# --- classification losses and dropout ---------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_with_integer_labels_on_the_device(backend: str) -> None:
    d = _mlp_data(13)
    labels = np.array([0, 2, 1, 1, 0, 2])

    def run(s: Session, params: list[Param]) -> tuple[Any, list[Any]]:
        w1, b1, w2, b2 = params
        h = F.relu(F.linear(s.use(w1), s.use(b1), s.input(d["x"], requires_grad=False)))
        loss = F.cross_entropy(F.linear(s.use(w2), s.use(b2), h), s.input(labels))
        grads = s.backward(loss)
        return s.value(loss), [s.grad(grads, s.use(p)) for p in params]

    want = run(Session(Options(backend=backend)), _params(d))
    with strict_cuda() as xp:
        got = run(Session(Options(backend=backend, device="cuda")), _params(d))
        assert xp.transfers.downloads == 0
    _same(got[0], want[0])
    for g, h in zip(got[1], want[1], strict=True):
        _same(g, h)


def test_dropout_draws_its_mask_on_the_device() -> None:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    cpu = Session(Options(seed=9))
    want = cpu.value(cpu.dropout(cpu.input(x), 0.5))
    tl.manual_seed(2)
    want_t = tl.nn.functional.dropout(tl.tensor(x), 0.5)
    assert 0 < int((want_t.numpy() == 0).sum()) < 12
    with strict_cuda() as xp:
        s = Session(Options(seed=9, device="cuda"))
        _same(s.value(s.dropout(s.input(x), 0.5)), want)
        assert xp.transfers.uploads == 2  # the input and the keep probability, no mask
        tl.manual_seed(2)
        got_t = tl.nn.functional.dropout(tl.tensor(x, device="cuda"), 0.5)
        assert xp.transfers.uploads == 3  # the tensor; its mask is drawn on the device
        _same(got_t._value, want_t.numpy())
        assert xp.transfers.downloads == 0


# --- modules on tensors, indexing --------------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True])
def test_module_on_device_tensors_matches_the_cpu(compiled: bool) -> None:
    x = np.random.default_rng(14).standard_normal((5, 4)).astype(np.float32)

    def run(device: str) -> tuple[Any, list[Any]]:
        tl.manual_seed(0)
        model = tl.nn.Sequential(tl.nn.Linear(4, 6), tl.nn.ReLU(), tl.nn.Linear(6, 2)).to(device)
        net = model.compile() if compiled else model
        loss = (net(tl.tensor(x, device=device)) ** 2).mean()
        loss.backward()
        return loss, [p.grad for p in model.parameters()]

    want_loss, want_grads = run("cpu")
    with strict_cuda() as xp:
        loss, grads = run("cuda")
        assert xp.transfers.uploads == 4 + 1  # the parameters once, the input
        assert xp.transfers.downloads == 0
        _same(loss._value, want_loss.detach().numpy())
        for g, h in zip(grads, want_grads, strict=True):
            _same(g, h)
        tl.manual_seed(0)
        host_model = tl.nn.Linear(4, 2)
        net = host_model.compile() if compiled else host_model
        with pytest.raises(DeviceError):  # a host module on a device tensor
            net(tl.tensor(x, device="cuda"))


def test_indexing_device_tensors() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    labels = np.array([3, 1, 2, 0])
    with strict_cuda() as xp:
        t = tl.tensor(data, device="cuda")
        _same(t[1]._value, data[1])
        _same(t[:, 1:3]._value, data[:, 1:3])
        rows = tl.tensor(np.array([2, 0]), device="cuda")
        _same(t[rows]._value, data[[2, 0]])  # an index read back explicitly (a static attribute)
        ints = tl.tensor(labels, device="cuda")
        _same(ints[1:3]._value, labels[1:3])
        _same(ints[[0, 2]]._value, labels[[0, 2]])  # a host index list uploaded explicitly
        _same(ints[tl.tensor(np.array([1, 1]), device="cuda")]._value, labels[[1, 1]])
        # every tensor index is read back once: its range is checked before indexing (an
        # out-of-range index is an IndexRangeError naming the axis, never a wrong row)
        assert xp.transfers.downloads == 2
