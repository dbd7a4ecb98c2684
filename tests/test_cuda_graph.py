"""``cuda_graph.GraphedStep`` without a GPU.

On the strict stand-in device the class runs the step directly with the static-buffer
discipline of a CUDA graph (inputs copied into buffers fixed at capture, results written into
buffers fixed at capture and returned), so that logic is tested here: equal results, the same
buffers across calls, a new capture per shape and per replaced parameter, no host transfers.
The real-CuPy path (warm-up, stream capture into a private memory pool, one launch per call) is
checked for its protocol against a recording fake of ``cupy.cuda``; it runs for real only in the
``gpu`` tests (tests/test_gpu.py) on a machine with a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from strict_device import StrictArray, strict_cuda

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.backend import to_device, to_host
from torchlean.core.errors import DeviceError
from torchlean.engine.params import Param
from torchlean.training import cuda_graph
from torchlean.training.cuda_graph import GraphedStep, maybe_graphed


def step_fn(x: Any, y: Any) -> Any:
    """A small step written against the inputs' namespace: nested outputs, a constant, None."""
    xp = x.__array_namespace__() if hasattr(x, "__array_namespace__") else np
    s = xp.sum(xp.tanh(x * y))
    return s, (x * 2.0 + y, None), [xp.exp(-y), 3]


def _host_tree(tree: Any) -> Any:
    if isinstance(tree, tuple | list):
        return type(tree)(_host_tree(e) for e in tree)
    if isinstance(tree, StrictArray):
        return to_host(tree)
    return tree


def _assert_tree_equal(a: Any, b: Any) -> None:
    if isinstance(b, tuple | list):
        assert type(a) is type(b) and len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _assert_tree_equal(u, v)
    elif b is None or isinstance(b, int):
        assert a == b
    else:
        np.testing.assert_array_equal(a, b)


def _data(seed: int, shape: tuple[int, ...] = (3, 4)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(shape).astype(np.float32))


def test_results_equal_calling_the_step_directly_on_the_stand_in() -> None:
    with strict_cuda() as xp:
        step = GraphedStep(step_fn)
        for seed in range(4):
            x, y = (to_device(a, xp) for a in _data(seed))
            _assert_tree_equal(_host_tree(step(x, y)), _host_tree(step_fn(x, y)))
        assert step.captures == 1 and step.calls == 4 and not step.graphed


def test_inputs_are_copied_into_the_same_static_buffers_and_outputs_are_reused() -> None:
    with strict_cuda() as xp:
        step = GraphedStep(step_fn)
        x0, y0 = (to_device(a, xp) for a in _data(0))
        first = step(x0, y0)
        buffers = step.static_inputs(x0, y0)
        assert buffers is not None and buffers[0] is not x0 and buffers[1] is not y0
        loss0 = to_host(first[0])
        x1, y1 = (to_device(a, xp) for a in _data(1))
        second = step(x1, y1)
        again = step.static_inputs(x1, y1)
        assert again is not None and all(a is b for a, b in zip(again, buffers, strict=True))
        np.testing.assert_array_equal(to_host(buffers[0]), to_host(x1))
        np.testing.assert_array_equal(to_host(buffers[1]), to_host(y1))
        # The outputs are the same static arrays, overwritten by the second call.
        assert second[0] is first[0] and second[1][0] is first[1][0]
        assert second[2][0] is first[2][0]
        np.testing.assert_array_equal(to_host(first[0]), to_host(step_fn(x1, y1)[0]))
        assert not np.array_equal(to_host(first[0]), loss0)


def test_a_new_shape_is_a_new_capture_with_new_buffers() -> None:
    with strict_cuda() as xp:
        step = GraphedStep(step_fn)
        small = [to_device(a, xp) for a in _data(0, (3, 4))]
        big = [to_device(a, xp) for a in _data(1, (5, 2))]
        out_small = step(*small)
        buf_small = step.static_inputs(*small)
        out_big = step(*big)
        buf_big = step.static_inputs(*big)
        assert step.captures == 2
        assert buf_small is not None and buf_big is not None
        assert buf_big[0] is not buf_small[0] and buf_big[0].shape == (5, 2)
        assert out_big[1][0] is not out_small[1][0]
        _assert_tree_equal(_host_tree(out_big), _host_tree(step_fn(*big)))
        # Back to the first shape: its capture is reused, its results recomputed.
        _assert_tree_equal(_host_tree(step(*small)), _host_tree(step_fn(*small)))
        assert step.captures == 2 and step.static_inputs(*small)[0] is buf_small[0]
        # A dtype change is another key too.
        step(*[to_device(a.astype(np.float64), xp) for a in _data(0, (3, 4))])
        assert step.captures == 3


def test_no_host_transfers_after_the_inputs_are_on_the_device() -> None:
    with strict_cuda() as xp:
        step = GraphedStep(step_fn)
        batches = [[to_device(a, xp) for a in _data(seed)] for seed in range(5)]
        uploads, downloads = xp.transfers.uploads, xp.transfers.downloads
        for batch in batches:
            step(*batch)
        assert (xp.transfers.uploads, xp.transfers.downloads) == (uploads, downloads)


def test_host_inputs_and_mixed_devices_are_refused() -> None:
    x, y = _data(0)
    with strict_cuda() as xp:
        step = GraphedStep(step_fn)
        with pytest.raises(DeviceError, match="input 1"):
            step(to_device(x, xp), y)
        assert step.captures == 0
        dev = [to_device(a, xp) for a in (x, y)]
        step(*dev)
        with pytest.raises(DeviceError, match="input 1"):
            step(dev[0], y)  # never silently uploaded into the static buffer


def test_a_step_whose_result_structure_changes_is_refused() -> None:
    calls = [0]

    def unstable(x: Any) -> Any:
        calls[0] += 1
        return (x * 2.0,) if calls[0] == 1 else (x * 2.0, x)

    with strict_cuda() as xp:
        step = GraphedStep(unstable)
        x = to_device(np.ones(3, np.float32), xp)
        step(x)
        with pytest.raises(DeviceError, match="different structure"):
            step(x)


def _param_step(w: Param) -> Any:
    def fn(x: Any) -> Any:
        return (x @ w.array).sum(), x @ w.array
    return fn


def test_parameters_updated_in_place_need_no_recapture_and_are_seen() -> None:
    rng = np.random.default_rng(3)
    w = Param(rng.standard_normal((4, 2)).astype(np.float32), name="w")
    x_host = rng.standard_normal((3, 4)).astype(np.float32)
    with strict_cuda() as xp:
        w.on(xp)
        step = GraphedStep(_param_step(w), params=[w])
        x = to_device(x_host, xp)
        step(x)
        w.array[...] = w.array * 0.5  # what an optimiser does: the same array, new values
        w.mark_updated()
        loss, _ = step(x)
        assert step.captures == 1
        np.testing.assert_allclose(to_host(loss), (x_host @ (w.value)).sum(), rtol=1e-6)
        # assign is seen too (it copies into the parameter's array, or replaces it: either way
        # the next call computes with the new value).
        w.assign(np.zeros((4, 2), np.float32))
        loss, _ = step(x)
        assert to_host(loss) == 0.0
        # A replaced array (here: moved to the host and back) means a new capture.
        captures = step.captures
        w.on(np)
        w.on(xp)
        w.assign(np.ones((4, 2), np.float32))
        loss, _ = step(x)
        assert step.captures == captures + 1
        np.testing.assert_allclose(to_host(loss), x_host.sum() * 2, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# maybe_graphed around a Compiled step
# ---------------------------------------------------------------------------------------------

def _mlp(seed: int) -> tuple[list[Param], Any]:
    rng = np.random.default_rng(seed)
    w1 = Param(rng.standard_normal((8, 5)).astype(np.float32) * 0.3, name="w1")
    b1 = Param(np.zeros(8, np.float32), name="b1")
    w2 = Param(rng.standard_normal((3, 8)).astype(np.float32) * 0.3, name="w2")
    b2 = Param(np.zeros(3, np.float32), name="b2")

    def loss(owner: Any, x: Any, y: Any) -> Any:
        h = F.relu(F.linear(owner.use(w1), owner.use(b1), x))
        return F.cross_entropy(F.linear(owner.use(w2), owner.use(b2), h), y)

    return [w1, b1, w2, b2], loss


def _batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + seed)
    return (rng.standard_normal((6, 5)).astype(np.float32),
            rng.integers(0, 3, size=6).astype(np.float32))


def test_maybe_graphed_on_host_inputs_is_the_plain_compiled_step() -> None:
    params, loss = _mlp(0)
    c = tl.Compiled(loss, [(6, 5), (6,)], wrt=(), owner_arg=True)
    xs = _batch(0)
    value, grads = maybe_graphed(c, xs)
    ref_value, ref_grads = c.value_and_backward(*xs)
    assert value == ref_value
    for a, b in zip(grads, ref_grads, strict=True):
        np.testing.assert_array_equal(a, b)
    assert c not in cuda_graph._STEPS  # the CPU path builds no GraphedStep


def test_maybe_graphed_compiled_steps_on_the_stand_in_equal_plain_steps() -> None:
    """Several SGD steps through the graphed path equal the plain compiled path bitwise, with no
    transfer after the parameters and batches are on the device. Needs the compiled graph to run
    on device arrays (graph.check_inputs / evaluate through the namespace)."""
    results = []
    for graphed in (False, True):
        params, loss = _mlp(1)
        with strict_cuda() as xp:
            for p in params:
                p.on(xp)
            c = tl.Compiled(loss, [(6, 5), (6,)], wrt=(), owner_arg=True)
            batches = [[to_device(a, xp) for a in _batch(k)] for k in range(4)]
            uploads, downloads = xp.transfers.uploads, xp.transfers.downloads
            losses = []
            for xs in batches:
                value, grads = maybe_graphed(c, xs, enabled=graphed)
                losses.append(value)
                for p, g in zip(params, grads[2:], strict=True):
                    p.array[...] = p.array - np.float32(0.1) * g
                    p.mark_updated()
            assert (xp.transfers.uploads, xp.transfers.downloads) == (uploads, downloads)
            if graphed:
                assert cuda_graph.graphed_step(c).captures == 1
                assert len({id(v) for v in losses}) == len(losses)  # losses are copies
            results.append(([to_host(v) for v in losses], [to_host(p.array) for p in params]))
    (plain_losses, plain_params), (g_losses, g_params) = results
    for a, b in zip(g_losses + g_params, plain_losses + plain_params, strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# The CuPy path's protocol, against a recording fake of cupy.cuda (no GPU here)
# ---------------------------------------------------------------------------------------------

class _FakeArray:
    """A device array of the fake CuPy: a NumPy array behind the fake's namespace."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)

    def __array_namespace__(self, api_version: Any = None) -> Any:
        return FAKE

    def __mul__(self, other: float) -> _FakeArray:
        return _FakeArray(self._a * other)

    def __setitem__(self, key: Any, value: _FakeArray) -> None:
        assert type(value) is _FakeArray, "only device-to-device copies"
        self._a[key] = value._a


class _Events:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.allocator: Any = None
        self.capturing = False
        self.fail_in_capture = False


class _Stream:
    def __init__(self, ev: _Events, name: str) -> None:
        self.ev, self.name = ev, name

    def __enter__(self) -> _Stream:
        self.ev.log.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.ev.log.append(f"exit {self.name}")

    def record(self) -> str:
        return f"event of {self.name}"

    def wait_event(self, event: str) -> None:
        self.ev.log.append(f"{self.name} waits for {event}")

    def synchronize(self) -> None:
        self.ev.log.append(f"synchronize {self.name}")

    def begin_capture(self) -> None:
        self.ev.capturing = True
        self.ev.log.append(f"begin_capture {self.name}")

    def end_capture(self) -> _Graph:
        self.ev.capturing = False
        self.ev.log.append(f"end_capture {self.name}")
        if self.ev.fail_in_capture:
            raise RuntimeError("cudaErrorStreamCaptureInvalidated")
        return _Graph(self.ev)


class _Graph:
    def __init__(self, ev: _Events) -> None:
        self.ev = ev

    def upload(self, stream: Any = None) -> None:
        self.ev.log.append(f"upload on {stream.name}")

    def launch(self, stream: Any = None) -> None:
        self.ev.log.append(f"launch on {stream.name}")


class _Pool:
    def __init__(self, ev: _Events) -> None:
        self.ev = ev

    def malloc(self, nbytes: int) -> None:  # never called by the fake arrays
        raise AssertionError("unused")


class _Cuda:
    def __init__(self, ev: _Events) -> None:
        self.ev = ev
        self.current = _Stream(ev, "current")
        self.pools: list[_Pool] = []

    def MemoryPool(self) -> _Pool:  # noqa: N802 (CuPy's name)
        pool = _Pool(self.ev)
        self.pools.append(pool)
        return pool

    def Stream(self, non_blocking: bool = False) -> _Stream:  # noqa: N802 (CuPy's name)
        assert non_blocking, "capture needs a non-blocking side stream"
        return _Stream(self.ev, "side")

    def get_current_stream(self) -> _Stream:
        return self.current

    @contextlib.contextmanager
    def using_allocator(self, allocator: Any) -> Iterator[None]:
        previous, self.ev.allocator = self.ev.allocator, allocator
        self.ev.log.append("private allocator on")
        try:
            yield
        finally:
            self.ev.allocator = previous
            self.ev.log.append("private allocator off")


class _FakeCupy:
    __name__ = "cupy"  # what backend.is_cupy looks at

    def __init__(self) -> None:
        self.ev = _Events()
        self.cuda = _Cuda(self.ev)

    def empty_like(self, x: Any) -> _FakeArray:
        return _FakeArray(np.empty(x.shape, x.dtype))

    def asarray(self, a: Any) -> _FakeArray:
        return _FakeArray(np.array(a))

    def asnumpy(self, a: _FakeArray) -> np.ndarray:
        return a._a.copy()


FAKE = _FakeCupy()


def test_the_cupy_path_warms_up_captures_once_into_a_private_pool_then_only_launches() -> None:
    global FAKE
    FAKE = _FakeCupy()
    ev = FAKE.ev
    seen: list[tuple[bool, Any]] = []

    def fn(x: Any) -> Any:
        seen.append((ev.capturing, ev.allocator))
        return x * 2.0

    step = GraphedStep(fn)
    x = FAKE.asarray(np.arange(3, dtype=np.float32))
    out = step(x)
    assert step.graphed and step.captures == 1
    pool = FAKE.cuda.pools[0]
    # fn ran twice, both times with the private pool's allocator: warm-up, then under capture.
    assert seen == [(False, pool.malloc), (True, pool.malloc)]
    assert ev.log == [
        "private allocator on", "side waits for event of current", "enter side",
        "synchronize side", "begin_capture side", "end_capture side", "exit side",
        "private allocator off", "upload on current", "launch on current"]
    static = step.static_inputs(x)
    assert static is not None
    ev.log.clear()
    for k in range(3):
        x_k = FAKE.asarray(np.full(3, k, np.float32))
        assert step(x_k) is out  # the static output buffer
        np.testing.assert_array_equal(to_host(static[0]), np.full(3, k, np.float32))
    assert len(seen) == 2 and ev.log == ["launch on current"] * 3
    assert step.captures == 1 and len(FAKE.cuda.pools) == 1
    # A new shape: a new capture, with its own private pool.
    step(FAKE.asarray(np.zeros(5, np.float32)))
    assert step.captures == 2 and len(FAKE.cuda.pools) == 2 and len(seen) == 4


def test_a_failed_capture_ends_the_capture_and_names_the_cause() -> None:
    global FAKE
    FAKE = _FakeCupy()
    FAKE.ev.fail_in_capture = True
    step = GraphedStep(lambda x: x * 2.0)
    with pytest.raises(DeviceError, match="CUDA graph capture of the step failed"):
        step(FAKE.asarray(np.ones(2, np.float32)))
    assert "end_capture side" in FAKE.ev.log and "launch on current" not in FAKE.ev.log
    assert FAKE.ev.log[-1] == "private allocator off"

    class CUDARuntimeError(RuntimeError):
        pass

    CUDARuntimeError.__module__ = "cupy_backends.cuda.api.runtime"
    for error, expected in [(ValueError("the step's own error"), ValueError),
                            (CUDARuntimeError("cudaErrorStreamCaptureUnsupported"), DeviceError)]:
        FAKE = _FakeCupy()

        def fails_under_capture(x: Any, error: Exception = error, ev: _Events = FAKE.ev) -> Any:
            if ev.capturing:
                raise error
            return x * 2.0

        with pytest.raises(expected, match=str(error)):
            GraphedStep(fails_under_capture)(FAKE.asarray(np.ones(2, np.float32)))
        assert FAKE.ev.log[-3:] == ["end_capture side", "exit side", "private allocator off"]


# ---------------------------------------------------------------------------------------------
# torchlean bench --device cuda
# ---------------------------------------------------------------------------------------------

def test_gpu_bench_steps_agree_and_move_nothing_between_host_and_device() -> None:
    from torchlean.bench import harness as bench

    data = bench.make_data("W2")
    with strict_cuda() as xp:
        impls = {fw: bench.build_gpu("W2", fw, data, xp)
                 for fw in ("torchlean-eager", "torchlean-compiled", "torchlean-graph")}
        checks = {fw: impl.check() for fw, impl in impls.items()
                  if isinstance(impl, bench.Impl)}
        assert len(checks) == 3
        errors = bench.agree("W2", checks)
        assert all(e == 0.0 for e in errors.values()), errors  # the same kernels underneath
        before = (xp.transfers.uploads, xp.transfers.downloads)
        for impl in impls.values():
            assert isinstance(impl, bench.Impl)
            for _ in range(2):
                impl.step()
        assert (xp.transfers.uploads, xp.transfers.downloads) == before


def test_gpu_bench_without_a_gpu_is_a_clean_device_error(capsys: Any) -> None:
    from torchlean import cli
    from torchlean.core.backend import namespace_for

    try:
        namespace_for("cuda")
    except DeviceError as exc:
        reason = str(exc)
    else:
        pytest.skip("a CUDA GPU is present: tests/test_gpu.py runs the GPU benchmark")
    assert cli.main(["bench", "--device", "cuda", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"torchlean bench: error: {reason}" and "Traceback" not in err
    assert cli.main(["bench", "--device", "cuda", "--workloads", "W1"]) == 2
    assert "unknown workloads on --device cuda" in capsys.readouterr().err
