"""Replay a compiled training step as one captured CUDA graph (CuPy stream capture).

A compiled step (``Compiled.value_and_backward``: forward and backward of a traced graph with
static shapes) launches hundreds of small kernels; each launch costs a few microseconds of host
time, which dominates small models on a GPU. ``GraphedStep`` captures the whole step once per
input shape into a ``cupy.cuda.Graph`` and afterwards launches that graph: one launch per step.

The discipline a captured graph needs, and what ``GraphedStep`` does on every namespace:

- Static inputs. The graph reads its inputs from the buffers it was captured with. Each call
  copies the new inputs into those buffers on the device (``static[...] = x``) and then runs
  the step. Inputs must already be on the step's device (host arrays are refused: no implicit
  upload).
- Static outputs. The graph writes its results into the buffers it allocated while being
  captured; a call returns those same arrays, so **the next call overwrites them**. Copy an
  output that must outlive the next step.
- Parameters. The step reads each parameter through the array it had at capture
  (``param.array``); optimisers update that array in place, so no re-capture is needed across
  steps. If a parameter's array is replaced (moved to the host and back, or by code that
  does not copy into it), the next call captures again (counted in ``captures``).
- Private memory. On CuPy, every allocation of the warm-up and the capture comes from a
  ``cupy.cuda.MemoryPool`` that belongs to this capture and lives as long as its graph, so the
  blocks the graph writes at replay are never handed to anyone else.
- One capture per shape key (shapes and dtypes of the inputs); a new shape is a new capture
  with new buffers.

On real CuPy (``backend.is_cupy``) the step is warmed up once on a side stream (kernels compiled,
cuBLAS handles and workspaces created), then captured with ``stream.begin_capture()`` /
``end_capture()``, and each call launches the graph on the current stream. On any other
namespace (NumPy, the tests' strict stand-in device) the same class calls the step directly
with the same buffers: inputs copied into the static inputs, results copied into the static
outputs, which are returned. That path is how the buffer logic is tested without a GPU.

A step that transfers data between host and device, synchronises, or branches on device values
cannot be captured; capture then fails with a ``DeviceError`` naming the cause.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.backend import is_cupy, namespace_of
from ..core.errors import DeviceError

Key = tuple[tuple[tuple[int, ...], str], ...]


@dataclass(frozen=True)
class _Const:
    """A non-array entry of a step's result (``None`` or a Python number), kept as it is."""

    value: Any


def _flatten(tree: Any, leaves: list[Any]) -> Any:
    """The structure of ``tree`` (tuples and lists nested): each array is replaced by its index
    in ``leaves`` (appended there), ``None`` and Python numbers by ``_Const``."""
    if isinstance(tree, tuple | list):
        return type(tree)(_flatten(e, leaves) for e in tree)
    if tree is None or isinstance(tree, bool | int | float):
        return _Const(tree)
    leaves.append(tree)
    return len(leaves) - 1


def _unflatten(spec: Any, leaves: Sequence[Any]) -> Any:
    if isinstance(spec, tuple | list):
        return type(spec)(_unflatten(e, leaves) for e in spec)
    return spec.value if isinstance(spec, _Const) else leaves[spec]


class _Capture:
    """One captured step: its static input and output buffers, the parameter arrays it reads,
    and (on CuPy) its graph and private memory pool."""

    def __init__(self, static_in: list[Any], static_out: list[Any], spec: Any,
                 param_arrays: list[Any], graph: Any = None, pool: Any = None) -> None:
        self.static_in = static_in
        self.static_out = static_out
        self.spec = spec
        self.param_arrays = param_arrays
        self.graph = graph
        self.pool = pool  # kept alive with the graph: its blocks are the graph's buffers

    def params_current(self, params: Sequence[Any]) -> bool:
        return all(p.array is a for p, a in zip(params, self.param_arrays, strict=True))


class GraphedStep:
    """``fn(*arrays)`` replayed from one capture per input shape (see the module docstring).

    ``fn`` takes device arrays and returns an array or a (nested) tuple/list of arrays (``None``
    and Python numbers are passed through). ``params`` are the ``Param``s ``fn`` reads through
    ``param.array``: a capture is redone when one of their arrays was replaced.

    ``captures`` counts captures (one per shape key, plus one per parameter replacement);
    ``calls`` counts calls. ``graphed`` is true when the step runs as a real CUDA graph.
    """

    def __init__(self, fn: Callable[..., Any], params: Sequence[Any] = ()) -> None:
        self.fn = fn
        self.params = list(params)
        self.captures = 0
        self.calls = 0
        self.graphed = False
        self._entries: dict[Key, _Capture] = {}

    @staticmethod
    def key_of(xs: Sequence[Any]) -> Key:
        return tuple((tuple(x.shape), np.dtype(x.dtype).str) for x in xs)

    def static_inputs(self, *xs: Any) -> list[Any] | None:
        """The static input buffers for inputs shaped like ``xs`` (None before their capture)."""
        entry = self._entries.get(self.key_of(xs))
        return None if entry is None else entry.static_in

    def __call__(self, *xs: Any) -> Any:
        if not xs:
            raise DeviceError("GraphedStep: the step needs at least one array input (its "
                              "device is the inputs' device)")
        xp = namespace_of(xs[0])
        for k, x in enumerate(xs):
            if namespace_of(x) is not xp:
                raise DeviceError(f"GraphedStep: input {k} is a {type(x).__name__} and input 0 "
                                  f"a {type(xs[0]).__name__}; move the inputs to one device "
                                  "first (backend.to_device), nothing is copied implicitly")
        self.calls += 1
        key = self.key_of(xs)
        entry = self._entries.get(key)
        if entry is None or not entry.params_current(self.params):
            # Drop the old capture first, so its private pool is released before a new one.
            self._entries.pop(key, None)
            entry = self._entries[key] = self._capture(xp, xs)
            return _unflatten(entry.spec, entry.static_out)
        for static, x in zip(entry.static_in, xs, strict=True):
            static[...] = x
        if entry.graph is not None:
            entry.graph.launch(stream=xp.cuda.get_current_stream())
        else:
            leaves: list[Any] = []
            spec = _flatten(self.fn(*entry.static_in), leaves)
            if spec != entry.spec:
                raise DeviceError("GraphedStep: the step returned a different structure than "
                                  "at its capture; a graphed step must be shape-static")
            for static, value in zip(entry.static_out, leaves, strict=True):
                static[...] = value
        return _unflatten(entry.spec, entry.static_out)

    # -----------------------------------------------------------------------------------------

    def _capture(self, xp: Any, xs: Sequence[Any]) -> _Capture:
        self.captures += 1
        params = [p.array for p in self.params]
        if not is_cupy(xp):
            static_in = [xp.empty_like(x) for x in xs]
            for static, x in zip(static_in, xs, strict=True):
                static[...] = x
            leaves: list[Any] = []
            spec = _flatten(self.fn(*static_in), leaves)
            static_out = []
            for value in leaves:
                buf = xp.empty_like(value)
                buf[...] = value
                static_out.append(buf)
            return _Capture(static_in, static_out, spec, params)
        self.graphed = True
        return self._capture_cupy(xp, xs, params)

    def _capture_cupy(self, cp: Any, xs: Sequence[Any], params: list[Any]) -> _Capture:
        """Warm up on a side stream, then capture ``fn`` into a CUDA graph, allocating from a
        private memory pool. Runs only on real CuPy."""
        pool = cp.cuda.MemoryPool()
        current = cp.cuda.get_current_stream()
        side = cp.cuda.Stream(non_blocking=True)
        with cp.cuda.using_allocator(pool.malloc):
            static_in = [cp.empty_like(x) for x in xs]
            for static, x in zip(static_in, xs, strict=True):
                static[...] = x  # on the current stream, ordered before the side stream below
            side.wait_event(current.record())
            with side:
                self.fn(*static_in)  # warm-up: compiles kernels, creates library handles
                side.synchronize()
                side.begin_capture()
                try:
                    out = self.fn(*static_in)
                except BaseException as exc:
                    try:
                        side.end_capture()
                    except Exception:  # the step's own error is the one to report
                        pass
                    if type(exc).__module__.startswith("cupy"):  # CUDA refused an operation
                        raise _capture_failed(exc) from exc
                    raise
                try:
                    graph = side.end_capture()
                except Exception as exc:
                    raise _capture_failed(exc) from exc
            leaves: list[Any] = []
            spec = _flatten(out, leaves)
        graph.upload(stream=current)
        # The capture ran nothing; run it once so the outputs of this first call are computed.
        graph.launch(stream=current)
        return _Capture(static_in, leaves, spec, params, graph, pool)


def _capture_failed(exc: BaseException) -> DeviceError:
    return DeviceError(f"CUDA graph capture of the step failed ({type(exc).__name__}: {exc}); a "
                       "graphed step must not move data between host and device, synchronise, "
                       "or read device values on the host; run it without cuda_graph")


# One GraphedStep per Compiled object (a Compiled is already one traced shape), so a Stepper can
# look it up with one call per step; entries go when the Compiled does.
_STEPS: weakref.WeakKeyDictionary[Any, GraphedStep] = weakref.WeakKeyDictionary()


def graphed_step(compiled: Any) -> GraphedStep:
    """The ``GraphedStep`` of ``compiled.value_and_backward`` (one per ``Compiled``), reading
    the compiled graph's parameters through their arrays. It returns ``(value, gradients)``:
    the loss as a 0-d device array and one gradient per input (the traced leaves first, then the
    parameters), all static buffers overwritten by the next call."""
    step = _STEPS.get(compiled)
    if step is None:
        step = _STEPS[compiled] = GraphedStep(compiled.value_and_backward, compiled.params)
    return step


def maybe_graphed(compiled: Any, xs: Sequence[Any], enabled: bool = True
                  ) -> tuple[Any, tuple[Any, ...]]:
    """``compiled.value_and_backward(*xs)``, replayed from a CUDA graph where that applies.

    With ``enabled`` and inputs on a device (CuPy, or the tests' stand-in device), the step runs
    through ``graphed_step(compiled)``: captured once, then one graph launch per call. The loss
    is returned as a fresh 0-d array (a copy, so a loss kept across steps stays valid); the
    gradients are the step's static buffers, valid until the next call with the same shapes
    (consume them, as an optimiser step does, or copy them). Otherwise (disabled, or host
    inputs) it is exactly ``compiled.value_and_backward(*xs)``: the CPU path is untouched.

    Callers must not combine it with per-gradient callbacks (``on_input``) or host-side checks
    inside the step (``check_finite``): those read device values during the step, which a
    captured graph cannot do; use the plain path for them.
    """
    if not enabled or not xs or namespace_of(xs[0]) is np:
        return compiled.value_and_backward(*xs)  # type: ignore[no-any-return]
    value, grads = graphed_step(compiled)(*xs)
    return value.copy(), grads
