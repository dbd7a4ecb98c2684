"""The calls torchlean makes on a device namespace, checked against CuPy's real API.

The device tests run on the strict stand-in (``strict_device``), which runs NumPy underneath and
so accepts every keyword NumPy does; CuPy does not (its ufuncs take only ``out``, ``dtype`` and
``casting``; its ``as_strided`` has no ``writeable``; ``einsum`` has no ``out``). Here the
stand-in is instrumented so that every namespace function, ufunc ``.at``/``.reduce``/``.outer``
and array method the device suites call is checked against CuPy's signature (``inspect`` where
CuPy has a Python signature, the docstring's signature line for its Cython methods, the ufunc
call's keyword rule otherwise), then the device kernels of every primitive and the device
training paths are run. Also checked: CuPy's CUDA-graph and memory-pool API used by
``cuda_graph``, and that the fused ``ElementwiseKernel``s of ``optim`` and ``ops.cuda_kernels``
parse and are called with as many arguments as they declare.

None of this needs a GPU, only CuPy importable; CI does not install CuPy, so there every test here
is skipped.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

cupy = pytest.importorskip(
    "cupy", reason="CuPy is not installed or does not import (CI has neither CuPy nor a GPU)",
    exc_type=ImportError)

import strict_device as sd  # noqa: E402

from torchlean.core.registry import REGISTRY  # noqa: E402

UFUNC_KEYWORDS = {"out", "dtype", "casting"}  # what cupy.ufunc.__call__ accepts (and _where)


def _doc_signature(fn: Any) -> inspect.Signature | None:
    """The signature on the first line of a Cython function's docstring (types dropped)."""
    lines = (getattr(fn, "__doc__", None) or "").strip().splitlines()
    match = re.match(r"^[\w.]+\((.*)\)(\s*->.*)?$", lines[0]) if lines else None
    if match is None:
        return None
    params = []
    for part in (p.strip() for p in match.group(1).split(",")):
        if not part or part == "self":
            continue
        if part in ("*", "/") or part.startswith("*"):
            params.append(part)
            continue
        name, eq, _ = part.partition("=")
        params.append(name.split()[-1] + ("=None" if eq else ""))
    namespace: dict[str, Any] = {}
    exec("def f(" + ", ".join(params) + "): pass", namespace)  # noqa: S102 (a signature only)
    return inspect.signature(namespace["f"])


def _signature(fn: Any) -> inspect.Signature | None:
    """``fn``'s signature; the docstring's where Python's is only ``(*args, **kwargs)``
    (``cupy.einsum`` checks its keywords inside)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return _doc_signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return _doc_signature(fn) or sig
    return sig


def _check(problems: list[str], label: str, fn: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> None:
    if fn is None:
        problems.append(f"{label}: CuPy has no such function")
    elif isinstance(fn, cupy.ufunc):
        if set(kwargs) - UFUNC_KEYWORDS:
            problems.append(f"{label}: CuPy's ufunc rejects {sorted(set(kwargs) - UFUNC_KEYWORDS)}")
        if not fn.nin <= len(args) <= fn.nargs:
            problems.append(f"{label}: {len(args)} positional arguments")
    else:
        sig = _signature(fn)
        if sig is None:
            problems.append(f"{label}: no signature to check {sorted(kwargs)} against")
            return
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            problems.append(f"{label}{sig}: {exc}")


@contextmanager
def checked_against_cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Within the block every call on the stand-in is also checked against CuPy; yields the
    list of calls CuPy would reject."""
    problems: list[str] = []
    ns = sd.NAMESPACE
    cupy_of: dict[int, tuple[str, Any]] = {}
    for name in sd.CUPY_FUNCTIONS:
        cupy_of[id(getattr(ns, name))] = (name, getattr(cupy, name, None))
    for name in ("norm", "inv", "solve", "det", "slogdet", "eigh", "svd", "qr", "cholesky"):
        cupy_of[id(getattr(ns.linalg, name))] = (f"linalg.{name}", getattr(cupy.linalg, name))
    stride_tricks = importlib.import_module("cupy.lib.stride_tricks")
    for name in ("as_strided", "sliding_window_view"):
        cupy_of[id(getattr(ns.lib.stride_tricks, name))] = (
            f"lib.stride_tricks.{name}", getattr(stride_tricks, name))
    call, at, reduce, outer = (sd._Function.__call__, sd._Function.at, sd._Function.reduce,
                               sd._Function.outer)

    def checked_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        label, fn = cupy_of[id(self)]
        _check(problems, label, fn, args, kwargs)
        return call(self, *args, **kwargs)

    def checked_at(self: Any, a: Any, indices: Any, b: Any = None) -> Any:
        label, fn = cupy_of[id(self)]
        try:  # CuPy's ufunc.at raises NotImplementedError for ufuncs without a scatter kernel
            fn.at(None, None, None)
        except NotImplementedError:
            problems.append(f"{label}.at: not supported by CuPy")
        except Exception:  # noqa: S110 (supported: it went on to use the (None) array)
            pass
        return at(self, a, indices, b)

    def checked_reduce(self: Any, *args: Any, **kwargs: Any) -> Any:
        label, _ = cupy_of[id(self)]
        if label not in ("add", "multiply"):  # CuPy's ufunc.reduce: only these two
            problems.append(f"{label}.reduce: not supported by CuPy")
        return reduce(self, *args, **kwargs)

    def checked_outer(self: Any, *args: Any, **kwargs: Any) -> Any:
        label, fn = cupy_of[id(self)]
        _check(problems, f"{label}.outer", fn, args[:fn.nin], kwargs)
        return outer(self, *args, **kwargs)

    asarray, array = ns.asarray, ns.array

    def checked_asarray(a: Any, *args: Any, **kwargs: Any) -> Any:
        _check(problems, "asarray", cupy.asarray, (a, *args), kwargs)
        return asarray(a, *args, **kwargs)

    def checked_array(a: Any, *args: Any, **kwargs: Any) -> Any:
        _check(problems, "array", cupy.array, (a, *args), kwargs)
        return array(a, *args, **kwargs)

    getattr_ = sd.StrictArray.__getattr__

    def checked_getattr(self: Any, name: str) -> Any:
        method = getattr_(self, name)

        def checked(*args: Any, **kwargs: Any) -> Any:
            _check(problems, f"ndarray.{name}", getattr(cupy.ndarray, name, None), args, kwargs)
            return method(*args, **kwargs)

        return checked

    monkeypatch.setattr(sd._Function, "__call__", checked_call)
    monkeypatch.setattr(sd._Function, "at", checked_at)
    monkeypatch.setattr(sd._Function, "reduce", checked_reduce)
    monkeypatch.setattr(sd._Function, "outer", checked_outer)
    monkeypatch.setattr(ns, "asarray", checked_asarray)
    monkeypatch.setattr(ns, "array", checked_array)
    monkeypatch.setattr(sd.StrictArray, "__getattr__", checked_getattr)
    yield problems


def test_the_checker_rejects_what_cupy_rejects(monkeypatch: pytest.MonkeyPatch) -> None:
    """The instrumented stand-in flags keywords CuPy does not take (so its silence means
    something)."""
    with checked_against_cupy(monkeypatch) as problems, sd.strict_cuda() as xp:
        x = xp.asarray(np.ones((2, 3)))
        xp.add(x, x, out=x, where=x > 0)  # NumPy's ufunc keyword; CuPy's spelling is private
        xp.lib.stride_tricks.as_strided(x, shape=(3,), strides=(8,), writeable=True)
        xp.einsum("ij->i", x, out=xp.empty(2))
        x.astype(np.float32, copy=False)  # fine on CuPy
        xp.maximum(x, 0.0, out=x)  # fine on CuPy
        xp.subtract.at(x, xp.asarray(np.array([0])), 1.0)  # CuPy has subtract.at
        xp.multiply.at(x, xp.asarray(np.array([0])), 2.0)  # CuPy has no multiply.at
    assert len(problems) == 4, problems
    assert "add: CuPy's ufunc rejects ['where']" in problems[0]
    assert "writeable" in problems[1] and "out" in problems[2]
    assert problems[3] == "multiply.at: not supported by CuPy"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_primitive_device_kernels_call_only_what_cupy_accepts(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_device_ops import test_kernels_on_the_device_match_the_cpu

    with checked_against_cupy(monkeypatch) as problems:
        test_kernels_on_the_device_match_the_cpu(name)
    assert problems == []


def _runtime_tests() -> list[Any]:
    """The device runtime and training tests that take no arguments, plus the optimisers'."""
    cases: list[Any] = []
    for module in ("test_device_runtime", "test_device_training", "test_cuda_graph",
                   "test_device_random"):
        mod = importlib.import_module(module)
        for name, fn in sorted(vars(mod).items()):
            if name.startswith("test_") and callable(fn) and not inspect.signature(fn).parameters:
                cases.append(pytest.param(fn, (), id=f"{module}.{name}"))
    training = importlib.import_module("test_device_training")
    for kind in sorted(training.OPTIMISERS):
        cases.append(pytest.param(training.test_optimisers_on_the_device_match_the_cpu_in_place,
                                  (kind,), id=f"optimiser-{kind}"))
    runtime = importlib.import_module("test_device_runtime")
    for backend in ("eager", "compiled"):
        cases.append(pytest.param(runtime.test_stepper_trains_on_the_device_as_on_the_cpu,
                                  (backend,), id=f"stepper-{backend}"))
    return cases


@pytest.mark.parametrize("fn, args", _runtime_tests())
def test_device_runtime_calls_only_what_cupy_accepts(fn: Any, args: tuple[Any, ...],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with checked_against_cupy(monkeypatch) as problems:
        fn(*args)
    assert problems == []


@pytest.mark.parametrize("ufunc, keywords", [
    ("add", {"out": None}), ("divide", {"out": None}), ("greater", {"out": None}),
    ("maximum", {"out": None}), ("multiply", {"out": None}), ("multiply", {"dtype": np.float64}),
])
def test_ufunc_keywords_the_kernels_use_pass_cupys_keyword_check(ufunc: str,
                                                                 keywords: dict[str, Any]
                                                                 ) -> None:
    """CuPy checks a ufunc's keyword names before it touches the device: without a GPU an
    accepted call fails later (no CUDA driver), a rejected one with 'Wrong arguments'."""
    with pytest.raises(TypeError, match="Wrong arguments"):
        getattr(cupy, ufunc)(1.0, 2.0, where=True)
    try:
        getattr(cupy, ufunc)(1.0, 2.0, **keywords)
    except TypeError as exc:
        assert "Wrong arguments" not in str(exc), exc
    except Exception:  # noqa: S110 (no GPU here: the keyword check had passed)
        pass


def test_cuda_graph_and_memory_pool_api() -> None:
    """What ``cuda_graph._capture_cupy`` and ``GraphedStep`` call, with those arguments."""
    cuda = cupy.cuda
    inspect.signature(cuda.Stream.__init__).bind(None, non_blocking=True)
    inspect.signature(cuda.Stream.begin_capture).bind(None)
    inspect.signature(cuda.Stream.end_capture).bind(None)
    inspect.signature(cuda.Stream.wait_event).bind(None, object())
    inspect.signature(cuda.Stream.record).bind(None)
    inspect.signature(cuda.Stream.synchronize).bind(None)
    assert hasattr(cuda.Stream, "__enter__") and hasattr(cuda.Stream, "__exit__")
    for method in (cuda.Graph.launch, cuda.Graph.upload):
        sig = _doc_signature(method)
        assert sig is not None, method
        sig.bind(stream=None)
    assert _doc_signature(cuda.MemoryPool.malloc) is not None
    inspect.signature(cuda.using_allocator).bind(object())
    assert callable(cuda.get_current_stream)
    assert callable(cuda.runtime.deviceSynchronize)
    assert callable(cuda.Device.synchronize)
    # begin_capture's default mode is relaxed (allocations in the private pool may cudaMalloc).
    assert "streamCaptureModeRelaxed" in (cuda.Stream.begin_capture.__doc__ or "")


_ELEMENTWISE_KERNEL = cupy.ElementwiseKernel


class _Recorder:
    """Stands in for a compiled ElementwiseKernel: parses the real one, records the call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kernel = _ELEMENTWISE_KERNEL(*args, **kwargs)
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


def test_fused_optimiser_kernels_parse_and_get_all_their_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torchlean.optim import optimizers as optim

    monkeypatch.setattr(optim, "_KERNELS", {})
    monkeypatch.setattr(cupy, "ElementwiseKernel", _Recorder)
    p, g = np.ones(3, np.float32), np.ones(3, np.float32)
    sgd = {"lr": 0.1, "weight_decay": 0.01, "momentum": 0.0, "dampening": 0.0, "nesterov": False}
    optim._sgd_fused(p, g, {"step": 1}, sgd)
    optim._sgd_fused(p, g, {"step": 1, "momentum_buffer": p.copy()}, {**sgd, "momentum": 0.9})
    adam = {"lr": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}
    optim._adam_fused(p, g, {"step": 1, "exp_avg": p.copy(), "exp_avg_sq": p.copy()}, adam, True)
    assert sorted(optim._KERNELS) == ["adam", "sgd", "sgd_momentum"]
    for name, rec in optim._KERNELS.items():
        assert rec.kernel.kwargs == {"options": ("--fmad=false",)}, name
        assert [len(c) for c in rec.calls] == [rec.kernel.nin + rec.kernel.nout], name


def test_col2im_kernel_parses_and_gets_all_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from torchlean.ops import cuda_kernels

    monkeypatch.setattr(cuda_kernels, "_KERNELS", {})
    fake = SimpleNamespace(ElementwiseKernel=_Recorder, empty=np.empty)
    for lead, full, kernel, stride in [((2,), (7,), (3,), (2,)),
                                       ((2, 3), (6, 5), (3, 2), (1, 2)),
                                       ((1,), (5, 5, 4), (2, 2, 2), (1, 1, 1))]:
        out = tuple((n - k) // s + 1 for n, k, s in zip(full, kernel, stride, strict=True))
        cols = np.zeros(lead + kernel + out)
        buf = cuda_kernels.scatter_windows(fake, cols, lead, full, kernel, out, stride, True)
        assert buf.shape == lead + full
    assert len(cuda_kernels._KERNELS) == 3
    for rec in cuda_kernels._KERNELS.values():
        assert [len(c) for c in rec.calls] == [rec.kernel.nin + rec.kernel.nout]


def test_namespace_helpers_recognise_cupy() -> None:
    from torchlean.core.backend import is_cupy

    assert is_cupy(cupy)
    assert cupy.ndarray.__module__.startswith("cupy")  # backend.namespace_of's test
    assert not hasattr(cupy, "vecdot")  # ops.norm takes einsum where the namespace has it
    assert hasattr(cupy, "einsum")
