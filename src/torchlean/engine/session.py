"""The seed's Torch session, recording only: Options, Session, refs and the two backends.

A ``Session`` records one forward pass through one of two backends, both owners in the sense of
``ops_interface.Owner``: ``EagerBackend`` records on a ``Tape`` (values computed as each op is
recorded), ``CompiledBackend`` records a ``Graph`` (values computed when asked for, then backward
runs on the graph's linked tape). User code is the same for both: ``F.*`` and operators on
``TensorRef``s. Optimiser steps on a session, ``Stepper``, ``ParamList`` and ``ScalarTrainer``
live in ``torchlean.training`` (``tl.Session`` is ``training.trainers.Session``).
Parameters (``Param``) live across sessions; ``backward`` accumulates into ``param.grad`` like
PyTorch's ``loss.backward()``.

Randomness (``rand_uniform``, ``bernoulli_mask``, ``dropout``) is counter-based: draw k of a session
uses key ``seed + k``, so the same seed gives the same bits in both backends.

Devices: with ``Options(device="cuda")`` every value of a pass lives on the device. A parameter
is moved there the first time a device session uses it (``Param.on``: one upload ever; later
passes read ``param.array`` where it lives), host inputs and constants are uploaded explicitly
once per use, and ``value``/``backward``/``grad``/``jvp`` return device arrays. Data on another
device than the session's is a ``DeviceError``, never a silent copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.backend import (
    as_dtype,
    check_device,
    device_of,
    namespace_for,
    namespace_of,
    numeric_array,
)
from ..core.errors import ShapeError, TapeError, TorchLeanError, device_mismatch
from ..core.kernels import array_on
from ..core.registry import REGISTRY, Primitive
from ..core.shape import as_shape
from . import anomaly
from . import ops_interface as F
from .graph import Graph, GraphBuilder
from .ops_interface import NatRef, Ref
from .params import Param
from .replay import PlanCache
from .tape import Tape

BACKENDS = ("eager", "compiled")
_new_ref = object.__new__


@dataclass(frozen=True)
class Options:
    """How a session runs. ``fast_kernels`` (TorchLean's ``fastKernels``, default on): training
    steps (``Stepper``: ``ScalarTrainer``, ``fit``) run the primitives' fast kernels
    (``ops.fast``: runtime-only, equal to the reference within ``registry.FAST_RTOL``) in eager
    and compiled passes; off, they run the reference kernels. Never used by ``to_tape``, the
    spec checks or the bound engine, which run the reference."""

    backend: str = "eager"
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0
    requires_grad_by_default: bool = True
    fast_kernels: bool = True
    check_finite: bool = False
    # Replay compiled training steps on a device as one captured CUDA graph (``cuda_graph``):
    # None (auto) uses one where it applies (compiled backend, a device, no per-value checks) and
    # falls back to the plain step, with a warning, if capture fails; True requires it (a failed
    # capture is an error); False never uses one. On the CPU there is nothing to capture.
    cuda_graph: bool | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise TorchLeanError(f"Options: backend must be one of {BACKENDS}, found "
                                 f"{self.backend!r}")
        check_device(self.device)
        namespace_for(self.device)  # device "cuda" without CuPy or a GPU: a DeviceError now
        as_dtype(self.dtype)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise TorchLeanError(f"Options: seed must be a non-negative int, found {self.seed!r}")
        if self.cuda_graph not in (None, True, False):
            raise TorchLeanError(f"Options: cuda_graph must be None, True or False, found "
                                 f"{self.cuda_graph!r}")
        if self.cuda_graph and self.backend != "compiled":
            raise TorchLeanError("Options: cuda_graph=True replays a compiled step; it needs "
                                 f"backend='compiled', found {self.backend!r}")
        if self.cuda_graph and self.check_finite:
            raise TorchLeanError("Options: cuda_graph=True and check_finite=True cannot be "
                                 "combined (check_finite reads every value on the host during "
                                 "the step, which a captured graph cannot do)")

    @property
    def graphs_steps(self) -> bool:
        """Whether compiled steps may be replayed from a CUDA graph (see ``cuda_graph``)."""
        return (self.cuda_graph is not False and self.backend == "compiled"
                and self.device != "cpu" and not self.check_finite)


class StaleSessionError(TorchLeanError):
    """A session was reused after the parameters it recorded were updated."""


class TensorRef(Ref):
    """A value recorded in a session; use it with F.* and operators."""

    __slots__ = ()


class _Backend:
    """The owner of a session's refs (``ops_interface.Owner``): records ops, makes leaves, and holds
    which node each ``Param`` became. ``EagerBackend`` and ``CompiledBackend`` differ only in
    where an op is recorded and how values are read; one backend lives for one recorded pass."""

    def __init__(self, opts: Options, dtype: np.dtype, xp: Any = np) -> None:
        self.opts = opts
        self.dtype = dtype
        self.xp = xp
        self.params: dict[int, Param] = {}       # node id -> Param
        self.param_ids: dict[int, int] = {}      # id(Param) -> node id
        self.versions: dict[int, int] = {}       # id(Param) -> its version when recorded
        self.random_draws = 0

    # --- what the two backends implement ------------------------------------------------------
    def leaf(self, op: str, array: Any, requires_grad: bool, name: str | None = None,
             copy: bool = True) -> TensorRef:
        raise NotImplementedError

    def ref(self, node_id: int) -> TensorRef:
        raise NotImplementedError

    def record(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> TensorRef:
        raise NotImplementedError

    def linked_tape(self) -> Tape:
        """A tape holding this pass's values, for reading and differentiating."""
        raise NotImplementedError

    # --- the rest of the owner protocol, shared ------------------------------------------------
    def const(self, array: Any) -> TensorRef:
        return self.leaf("const", array, False)

    def use(self, param: Param) -> TensorRef:
        if not isinstance(param, Param):
            raise TorchLeanError(f"use: expected a Param, found {type(param).__name__}")
        node = self.param_ids.get(id(param))
        if node is not None:
            self.check_fresh("use")
            return self.ref(node)
        # No copy of the parameter's array: an update changes its version, which every later
        # read or backward of this pass checks (check_fresh), so a stale value is never used.
        # A device session moves the parameter there once; later passes find it there.
        xp = self.xp
        data = param.array
        if type(data) is not np.ndarray or xp is not np:
            src = namespace_of(data)
            if src is not xp:
                if src is not np:
                    raise device_mismatch(f"use: parameter {param.name or '(unnamed)'}",
                                          device_of(src), device_of(xp), "a parameter")
                data = param.on(xp)
        ref = self.leaf("use", data, param.requires_grad, param.name, copy=False)
        self._register(param, ref.id)
        return ref

    def _register(self, param: Param, node: int) -> None:
        """Node ``node`` is ``param`` in this pass, at its current version (``check_fresh``)."""
        self.params[node] = param
        self.param_ids[id(param)] = node
        self.versions[id(param)] = param.version

    def check_fresh(self, op: str) -> None:
        """Refuse to go on with a pass whose parameters changed since they were recorded.

        A session records one forward pass with the parameter values it saw; after an optimiser
        step, reusing it would silently compute with (and differentiate at) the old values."""
        for param in self.params.values():
            if param.version != self.versions[id(param)]:
                raise StaleSessionError(
                    f"{op}: parameter {param.name or '(unnamed)'} changed (an optimiser step or "
                    "assign) after this session recorded it; a Session records one forward "
                    "pass: call session.reset() (or use a new Session) before the next pass")

    def value(self, ref: Ref) -> Any:
        return self.linked_tape().value(ref.id)

    def next_counter(self) -> int:
        self.random_draws += 1
        return self.random_draws - 1

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        """Inverted dropout: zero each entry with probability p, scale the rest by 1/(1-p)."""

        def mask_of(keep: float) -> Ref:
            return F.apply("bernoulli_mask", self.const(np.asarray(keep)), shape=tuple(x.shape),
                           seed=self.opts.seed, counter=self.next_counter())

        return F.inverted_dropout(x, p, training, mask_of)  # type: ignore[no-any-return]


class EagerBackend(_Backend):
    """Records on a ``Tape``: each op runs as it is recorded."""

    def __init__(self, opts: Options, dtype: np.dtype, xp: Any = np,
                 cache: PlanCache | None = None) -> None:
        super().__init__(opts, dtype, xp)
        self.tape = Tape(dtype, opts.device, opts.check_finite, xp=xp, cache=cache)

    def leaf(self, op: str, array: Any, requires_grad: bool, name: str | None = None,
             copy: bool = True) -> TensorRef:
        # The one place data of another dtype enters; inside ops, mixed dtypes are an error.
        tape = self.tape
        arr = tape.as_array(op, array)
        if arr.dtype.kind == "f" and arr.dtype != self.dtype:
            arr = arr.astype(self.dtype)
        elif copy and arr is array:  # (as_array uploads a host array to a device: a copy)
            arr = arr.copy()
        # (``tape.leaf`` less its second conversion, and the ref built as ``record`` builds one:
        # a session makes a leaf per parameter, input and constant of every pass.)
        return self._new(tape._append_leaf(arr, name, requires_grad), arr)

    def use(self, param: Param) -> TensorRef:
        # ``_Backend.use``'s first use of a host parameter of the session's dtype, where
        # ``leaf`` would neither convert nor copy (a session uses every parameter each pass).
        if (type(param) is Param and self.xp is np and id(param) not in self.param_ids):
            data = param.array
            if type(data) is np.ndarray and data.dtype == self.dtype:
                n = self.tape._append_leaf(data, param.name, param.requires_grad)
                self._register(param, n)
                return self._new(n, data)
        return super().use(param)

    def ref(self, node_id: int) -> TensorRef:
        value = self.tape.value(node_id)
        return TensorRef(self, node_id, tuple(value.shape), value.dtype)

    def record(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> TensorRef:
        # The per-op hot path of eager sessions: the tape checks the ids (or finds the op in
        # its cached plan), and the ref is built slot by slot.
        tape = self.tape
        arity = len(refs)
        if arity == 1:
            ids: tuple[int, ...] = (refs[0]._id,)
        elif arity == 2:
            ids = (refs[0]._id, refs[1]._id)
        elif arity == 3:
            ids = (refs[0]._id, refs[1]._id, refs[2]._id)
        else:
            ids = tuple([r._id for r in refs])
        n = tape.record(prim, ids, attrs)
        return self._new(n, tape._values[n])

    def _new(self, n: int, value: Any) -> TensorRef:
        """The ref of node ``n`` holding ``value``, built slot by slot (no ``__init__`` checks:
        the hot path of every leaf and op)."""
        ref = _new_ref(TensorRef)
        ref._owner = self
        ref._id = n
        ref.shape = value.shape
        ref.dtype = value.dtype
        return ref

    def linked_tape(self) -> Tape:
        return self.tape


class CompiledBackend(_Backend):
    """Records a ``Graph``; values come from replaying it on its linked tape when asked for."""

    def __init__(self, opts: Options, dtype: np.dtype, xp: Any = np) -> None:
        super().__init__(opts, dtype, xp)
        self.builder = GraphBuilder(Graph(dtype))
        self.leaf_values: list[Any] = []
        self._linked: tuple[int, Tape] | None = None

    def leaf(self, op: str, array: Any, requires_grad: bool, name: str | None = None,
             copy: bool = True) -> TensorRef:
        # In the session's namespace: host data is uploaded to a device once, here; data on
        # another device is a DeviceError. (astype copies, as a leaf's value must be.)
        arr = array_on(op, array, self.xp).astype(self.dtype)
        if requires_grad:
            var = self.builder.input(arr.shape)
            self.leaf_values.append(arr)
        else:
            var = self.builder.const(arr)
        return TensorRef(self, var.id, var.shape, var.dtype)

    def ref(self, node_id: int) -> TensorRef:
        node = self.builder.graph.nodes[node_id]
        return TensorRef(self, node_id, node.shape, node.dtype)

    def record(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> TensorRef:
        node_id = self.builder.record_node(prim, [r.id for r in refs], attrs)
        return self.ref(node_id)

    def linked_tape(self) -> Tape:
        """The graph replayed on its linked runtime tape (cached until the graph grows)."""
        graph = self.builder.graph
        if self._linked is None or self._linked[0] != len(graph):
            graph.outputs = [len(graph) - 1] if len(graph) else []
            tape, _, _ = graph.to_tape(self.leaf_values, self.xp)
            if self.opts.check_finite:  # the compiled backend checks its replayed values too
                anomaly.check_tape_values(tape, "check_finite (compiled)")
            self._linked = (len(graph), tape)
        return self._linked[1]


class Session:
    """One recorded forward pass over parameters, inputs and constants. See the module docstring.

    The refs it hands out belong to its backend (``EagerBackend`` or ``CompiledBackend``), which
    ``reset`` replaces; parameters and optimiser state outlive a reset.
    """

    def __init__(self, opts: Options | None = None) -> None:
        self.opts = opts or Options()
        self.dtype = as_dtype(self.opts.dtype)
        self.xp = namespace_for(self.opts.device)
        self.reset()

    # --- lifecycle ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the recorded pass (parameters and optimiser state are kept). An eager session
        keeps what its passes' checks concluded (``engine.replay``): a next pass repeating the
        same ops on the same shapes skips them."""
        if self.opts.backend == "eager":
            if getattr(self, "_cache_opts", None) is not self.opts:
                self._cache_opts = self.opts
                self._plan_cache = PlanCache()
            self._backend: _Backend = EagerBackend(self.opts, self.dtype, self.xp,
                                                   self._plan_cache)
        else:
            self._backend = CompiledBackend(self.opts, self.dtype, self.xp)

    @property
    def tape(self) -> Tape | None:
        """The eager tape (``None`` on the compiled backend)."""
        backend = self._backend
        return backend.tape if isinstance(backend, EagerBackend) else None

    @property
    def graph(self) -> Graph:
        """The recorded graph (compiled backend only)."""
        backend = self._backend
        if not isinstance(backend, CompiledBackend):
            raise TorchLeanError("graph: the eager backend records a tape, not a graph")
        return backend.builder.graph

    @property
    def _random_draws(self) -> int:
        return self._backend.random_draws

    # --- leaves ------------------------------------------------------------------------------

    def use(self, param: Param) -> TensorRef:
        """The ref of a parameter in this pass (the same ref if used twice)."""
        return self._backend.use(param)

    def input(self, array: Any, requires_grad: bool | None = None) -> TensorRef:
        """A data leaf. Integer arrays become float leaves (class labels) without gradient."""
        arr = numeric_array("input", array) if isinstance(array, list | tuple | int | float) \
            else array
        is_int = getattr(arr, "dtype", np.dtype(float)).kind in "iub"
        if requires_grad is None:
            requires_grad = self.opts.requires_grad_by_default and not is_int
        if is_int and requires_grad:
            raise TorchLeanError("input: integer data cannot require gradient")
        return self._backend.leaf("input", arr, bool(requires_grad))

    def const(self, array: Any) -> TensorRef:
        """A constant leaf (never receives gradient)."""
        return self._backend.const(array)

    def nat(self, i: int) -> NatRef:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or i < 0:
            raise TorchLeanError(f"nat: expected a non-negative int, found {i!r}")
        return NatRef(int(i))

    def nat_vec(self, ints: Iterable[int]) -> NatRef:
        if not isinstance(ints, np.ndarray | Iterable):
            raise TorchLeanError(f"nat_vec: expected a vector of non-negative ints, found {ints!r}")
        arr = numeric_array("nat_vec", list(ints) if not isinstance(ints, np.ndarray) else ints)
        if arr.ndim != 1 or (arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0)):
            raise TorchLeanError(f"nat_vec: expected a vector of non-negative ints, found {ints!r}")
        return NatRef(arr.astype(np.int64))

    # --- randomness --------------------------------------------------------------------------

    def rand_uniform(self, shape: Sequence[int]) -> TensorRef:
        """U[0, 1) of ``shape`` from the session seed and its next draw counter."""
        target = as_shape("rand_uniform", shape)  # checked before the draw counter moves
        backend = self._backend
        return backend.record(REGISTRY["rand_uniform"], [], {
            "shape": target, "seed": self.opts.seed, "counter": backend.next_counter()})

    def bernoulli_mask(self, keep_prob: Any, shape: Sequence[int]) -> TensorRef:
        """{0, 1} mask with P(1) = keep_prob (a scalar ref or number)."""
        # Check everything before a keep_prob constant is recorded or the draw counter moves.
        target = as_shape("bernoulli_mask", shape)
        if isinstance(keep_prob, Ref):
            self._check_ref("bernoulli_mask", keep_prob)
        else:
            keep_prob = numeric_array("bernoulli_mask", keep_prob)
        if tuple(keep_prob.shape) != ():
            raise ShapeError(f"bernoulli_mask: keep_prob must be a scalar (), found "
                             f"{tuple(keep_prob.shape)}")
        kp = keep_prob if isinstance(keep_prob, Ref) else self.const(keep_prob)
        return F.apply("bernoulli_mask", kp, shape=target, seed=self.opts.seed,
                       counter=self._backend.next_counter())

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        """Inverted dropout: zero each entry with probability p, scale the rest by 1/(1-p)."""
        return self._backend.dropout(x, p, training)

    # --- reading and differentiating ---------------------------------------------------------

    def _check_ref(self, op: str, ref: Any) -> int:
        if not isinstance(ref, Ref) or ref.owner is not self._backend:
            raise TapeError(f"{op}: expected a ref recorded in this session, found {ref!r}")
        return ref.id

    def value(self, ref: Ref) -> Any:
        node_id = self._check_ref("value", ref)
        if node_id in self._backend.params:  # a parameter's leaf holds the parameter's array
            self._backend.check_fresh("value")
        return self._backend.linked_tape().value(node_id)

    def backward(self, out: Ref, seed: Any = None) -> dict[int, Any]:
        """Cotangents of the reached nodes (keyed by ref id); accumulates into ``Param.grad``."""
        out_id = self._check_ref("backward", out)
        self._backend.check_fresh("backward")
        tape = self._backend.linked_tape()
        if seed is None:
            if out.shape != ():
                raise ShapeError(f"backward: output has shape {out.shape}; a non-scalar output "
                                 "needs an explicit seed")
            grads = tape.backward_scalar(out_id)
        else:
            grads = tape.backward(out_id, seed)
        if self.opts.check_finite:
            anomaly.check_tape_grads(tape, grads, "check_finite (backward)")
        for node_id, param in self._backend.params.items():
            g = grads.get(node_id)
            if g is not None and param.requires_grad:
                param.accumulate_grad(g)
        return grads

    def grad(self, grads: dict[int, Any], ref: Ref) -> Any:
        """The gradient of ``ref`` in ``grads`` (zeros when it was not reached)."""
        node_id = self._check_ref("grad", ref)
        g = grads.get(node_id)
        return self.xp.zeros(ref.shape, dtype=ref.dtype) if g is None else g

    def jvp(self, out: Ref, tangents: dict[Ref, Any]) -> Any:
        """Forward-mode tangent of ``out`` given tangents of some refs (both backends)."""
        out_id = self._check_ref("jvp", out)
        if not isinstance(tangents, dict):
            raise TapeError(f"jvp: tangents must be a dict {{ref: tangent}}, found "
                            f"{type(tangents).__name__}")
        seeds = {self._check_ref("jvp", r): t for r, t in tangents.items()}
        self._backend.check_fresh("jvp")
        return self._backend.linked_tape().jvp(out_id, seeds)

    # --- optimiser steps ---------------------------------------------------------------------

    def params(self) -> list[Param]:
        """The parameters used in this pass, in first-use order."""
        used = self._backend.params
        return [used[i] for i in sorted(used)]
