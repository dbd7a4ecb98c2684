"""The eager autograd tape (TorchLean's ``Engine.Core``).

A tape is a grow-only list of nodes. Every op checks its inputs with the primitive's shape rule,
runs the forward kernel at once, appends exactly one node and returns its id (an int). Reverse mode
is the shared driver (``autodiff.run_reverse``) over the tape's reverse plan, which is extended as
the tape grows (a node's step never changes once recorded); forward mode walks ids forwards.

There is one method per registered primitive (``tape.relu(x)``, ``tape.linear(w, b, x)``,
``tape.reduce_sum(x, axis)``): node ids first, then the op's static attributes. The methods are
generated from the registry, so the tape can never fall out of step with it.

A session's tape is given the session's ``replay.PlanCache``: an op repeating the node the last
pass recorded at its position skips the checks that cannot fail on a repeat and reuses that
node's reverse step (the eager hot path; ``engine.replay`` says what is and is not cached).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import ops as _ops  # noqa: F401  (registers every primitive)
from ..core import alloc
from ..core.autodiff import Step, forward_tangents, reverse_step, run_reverse
from ..core.backend import (
    as_dtype,
    check_device,
    device_of,
    namespace_for,
    namespace_of,
    to_host,
)
from ..core.errors import ShapeError, TapeError
from ..core.kernels import array_on, device_kernel_check, run_checked
from ..core.node import Node
from ..core.registry import ARRAY_OPS, KERNELS, REGISTRY, Primitive
from ..core.registry import get as get_primitive
from ..core.shape import as_shape
from ..ops.fast import pool as fast_pool
from .anomaly import NonFiniteError
from .replay import UNSET, Entry, PlanCache, same_attrs, snapshot

_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)


class Tape:
    """An eager tape over one dtype (float32 by default) and device.

    On a device ("cuda") every value lives there: host data given as a leaf, seed or tangent is
    uploaded explicitly (``backend.to_device``), and data already on another device is a
    ``DeviceError`` naming the op and both devices, never a silent copy. Each recorded op is
    checked to have a device kernel (``registry.check_device_kernel``).

    ``cache``: a session's ``replay.PlanCache``. Recording the sequence of ops the cache holds
    (the same ops on the same shapes as the session's last pass) skips every check that cannot
    fail on a repeat and reuses each node's reverse step; the first difference falls back to
    full recording for the rest of the tape (see ``engine.replay``)."""

    def __init__(self, dtype: Any = "float32", device: str = "cpu",
                 check_finite: bool = False, *, xp: Any = None,
                 cache: PlanCache | None = None) -> None:
        # (A session hands over its checked dtype; ``as_dtype`` costs microseconds per tape.)
        self.dtype = dtype if dtype is _FLOAT32 or dtype is _FLOAT64 else as_dtype(dtype)
        # ``xp``: the namespace itself, from an owner that already resolved it (a session, a
        # graph replay), so a tape per step does not look the device up again.
        self.device = check_device(device) if xp is None else device_of(xp)
        self.xp = namespace_for(device) if xp is None else xp
        # On a device: the registry's check that an op has a device kernel (None on the CPU,
        # so the per-op hot path pays one attribute test).
        self._kernel_check = device_kernel_check(self.xp)
        self.check_finite = check_finite
        # Node ``k`` is ``(_entries[k], _values[k])``: its static facts (an ``Entry``, possibly
        # shared with the passes before and after this one through ``cache``) and its value.
        # ``_entries`` may be longer than the tape: the rest is the cached sequence still ahead.
        self._cache = cache
        self._entries: list[Entry] = (cache.current(self.xp, self.dtype) if cache is not None
                                      else [])
        self._cached_len = len(self._entries)
        self._first_miss: int | None = None
        self._values: list[Any] = []
        self._view: list[Node] = []  # ``nodes``, materialised on demand
        self._plan: list[Step | None] = []  # reverse steps of nodes[: len(self._plan)]

    # --- reading -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of nodes on the tape."""
        return len(self._values)

    @property
    def replayed(self) -> int:
        """How many of the first nodes were recorded from the cache (``engine.replay``)."""
        if self._first_miss is not None:
            return self._first_miss
        return min(len(self._values), self._cached_len)

    @property
    def nodes(self) -> Sequence[Node]:
        """The nodes (each with its ``value``), made from the entries when first asked for."""
        view = self._view
        values = self._values
        entries = self._entries
        for k in range(len(view), len(values)):
            e = entries[k]
            view.append(Node(e.op, e.parents, e.attrs, e.requires_grad, e.shape, dtype=e.dtype,
                             value=values[k], name=e.name))
        return view

    def node(self, i: int) -> Node:
        return self.nodes[self._check_id("node", i)]

    def value(self, i: int) -> Any:
        return self._values[self._check_id("value", i)]

    def require_value(self, i: int, shape: Sequence[int]) -> Any:
        """The value of node ``i``, checked to have ``shape`` (TorchLean's ``requireValue``)."""
        value = self.value(i)
        expected = as_shape("require_value", shape)
        if tuple(value.shape) != expected:
            raise ShapeError(f"require_value: node {i} has shape {tuple(value.shape)}, "
                             f"expected {expected}")
        return value

    def _check_id(self, op: str, i: Any) -> int:
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise TapeError(f"{op}: node ids are ints, found {type(i).__name__} {i!r}")
        if not 0 <= i < len(self._values):
            raise TapeError(f"{op}: node id {i} out of range (tape has {len(self._values)} "
                            "nodes)")
        return int(i)

    # --- building ------------------------------------------------------------------------------

    def as_array(self, op: str, array: Any) -> Any:
        """Convert user data to this tape's array type; float arrays keep their dtype. Host data
        is uploaded to a device tape explicitly; data on another device is a ``DeviceError``."""
        xp = self.xp
        if isinstance(array, xp.ndarray) and array.dtype in (np.float32, np.float64):
            return array
        arr = array_on(op, array, xp)
        if arr.dtype.kind == "f" and arr.dtype in (np.float32, np.float64):
            return arr
        return arr.astype(self.dtype)

    def leaf(self, array: Any, name: str | None = None, requires_grad: bool = True,
             copy: bool = True) -> int:
        """Append a leaf holding ``array``, copied so later edits to it cannot change the tape.
        ``copy=False`` keeps the caller's array: for owners that detect changes themselves (a
        session checks each parameter's version before it reads or differentiates again)."""
        value = self.as_array("leaf", array)
        if copy and (self.xp is np or value is array):  # an upload is already a fresh copy
            value = value.copy()
        return self._append_leaf(value, name, requires_grad)

    def _append_leaf(self, value: Any, name: str | None, requires_grad: bool) -> int:
        """``leaf`` for a value already in this tape's namespace and a float dtype (an owner
        that converted it itself, ``session.EagerBackend``), copied if it had to be."""
        if self.check_finite:
            _check_finite("leaf", value)
        values = self._values
        n = len(values)
        rg = bool(requires_grad)
        entries = self._entries
        if n < len(entries):
            e = entries[n]
            if (e.op is None and e.requires_grad is rg and e.shape == value.shape
                    and e.dtype == value.dtype and e.name == name):
                values.append(value)
                return n
            entries = self._miss(n)
        entries.append(Entry(None, (), {}, rg, tuple(value.shape), value.dtype, name, {}))
        values.append(value)
        return n

    def _miss(self, n: int) -> list[Entry]:
        """Leave the cached sequence at node ``n``: keep the entries of nodes ``0..n-1`` (a
        copy: the cache's list may be another tape's) and cache this tape's sequence instead."""
        entries = self._entries[:n]
        self._entries = entries
        if self._first_miss is None:
            self._first_miss = n
        if self._cache is not None:
            self._cache.entries = entries
        return entries

    def apply(self, op: str | Primitive, *args: Any, **kwargs: Any) -> int:
        """Record primitive ``op`` on node ids ``args[:arity]`` with the remaining attributes."""
        prim = op if isinstance(op, Primitive) else get_primitive(op)
        ids, attrs = prim.split_call(args, kwargs, "node ids", TapeError)
        return self.record(prim, ids, attrs)

    def record(self, prim: Primitive, ids: Sequence[int], attrs: dict[str, Any],
               name: str | None = None) -> int:
        """Check, compute and append one node. Nothing changes when a check fails.

        When the node repeats the cached one at its position (``engine.replay``: the same op
        on the same parents with the same attributes, every earlier node repeated too), only
        the kernel runs: its checks passed on these very shapes and dtypes before."""
        values = self._values
        n = len(values)
        entries = self._entries
        if n < len(entries):
            e = entries[n]
            if (e.op is prim and e.parents == ids and e.name == name
                    and ((not attrs and not e.raw) or same_attrs(e.raw, attrs))):
                checked = e.attrs
                arity = len(ids)
                if arity == 1 and not checked:  # the common calls, without keyword expansion
                    out = prim.forward(values[ids[0]])
                elif arity == 2 and not checked:
                    out = prim.forward(values[ids[0]], values[ids[1]])
                elif arity == 3 and not checked:  # (linear)
                    out = prim.forward(values[ids[0]], values[ids[1]], values[ids[2]])
                elif arity:
                    out = prim.forward(*[values[i] for i in ids], **checked)
                elif self.xp is not np:  # a nullary op makes its value in the tape's namespace
                    out = prim.forward(**checked, xp=self.xp)
                else:
                    out = prim.forward(**checked)
                if self.check_finite:
                    _check_finite(prim.name, out, n)
                values.append(out)
                return n
        args = []
        requires_grad = False
        for i in ids:
            # Plain ints skip the isinstance checks.
            if (type(i) is not int and (isinstance(i, bool) or not isinstance(i, int))
                    or not 0 <= i < n):
                raise TapeError(f"{prim.name}: node id {i!r} is not on the tape "
                                f"(ids run 0..{n - 1})")
            args.append(values[i])
            if entries[i].requires_grad:
                requires_grad = True
        if self._kernel_check is not None:
            self._kernel_check(prim, self.xp)
        raw = attrs
        xp = None
        if not args:
            if "dtype" in prim.attrs:
                attrs = {**attrs, "dtype": self.dtype}
            xp = self.xp  # a nullary op makes its value in the tape's namespace
        attrs = prim.check_attrs(attrs)  # kinds checked and normalised before any compute
        out = run_checked(prim, args, attrs, xp)
        if self.check_finite:
            _check_finite(prim.name, out, n)
        requires_grad = requires_grad and not prim.nondiff
        if n < len(entries):
            entries = self._miss(n)
        # Copies of the caller's dicts: the entry outlives the call, and is compared (``raw``)
        # and reused (``attrs``) by later passes.
        entries.append(Entry(prim, tuple(ids),
                             dict(attrs) if attrs is raw else attrs, requires_grad,
                             tuple(out.shape), out.dtype, name, snapshot(raw)))
        values.append(out)
        return n

    # --- reverse mode --------------------------------------------------------------------------

    def _seed(self, op: str, out: int, seed: Any) -> Any:
        value = self.value(out)
        seed_arr = array_on(f"{op} seed", seed, self.xp, value.dtype)
        if seed_arr.shape != value.shape:
            raise ShapeError(f"{op}: seed has shape {tuple(seed_arr.shape)}, output node {out} "
                             f"has shape {tuple(value.shape)}")
        return seed_arr

    def backward_dense(self, out: int, seed: Any,
                       on_leaf: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Cotangent of every node (``None`` where the reverse pass did not reach it);
        ``on_leaf(i, g)`` as each leaf's cotangent becomes final (``autodiff.run_reverse``)."""
        out = self._check_id("backward_dense", out)
        return self._reverse(out, self._seed("backward_dense", out, seed), on_leaf)

    def _reverse(self, out: int, seed: Any,
                 on_leaf: Callable[[int, Any], None] | None, fuse: bool = False) -> list[Any]:
        """The reverse pass from checked node ``out`` with checked cotangent ``seed``.

        ``fuse`` (callers that read only the leaves' cotangents, as training does): under the
        fast kernels, a ``relu`` whose only consumer is a max pooling has the two reverse steps
        run as one (``_fused_relu_pooling``); that relu's own cotangent is then not formed.

        A pass that repeated every node of its session's cached sequence, and no more, reruns
        the steps the last such pass ran for the same output (``PlanCache.reverse``): its
        entries, so their steps and the fusion's inputs, are the very same objects; from the
        second such pass on, as one generated function (``PlanCache.reverse_function``)."""
        entries = self._entries
        fused = fuse and KERNELS.fast and self.xp is np
        cache = self._cache
        n = len(self._values)
        repeat = (cache is not None and self._first_miss is None and n == self._cached_len
                  and cache.entries is entries and len(entries) == n)
        if repeat:
            alloc.repeated_step()  # (a loop: keep its freed buffers in the heap, core/alloc.py)
            known = cache.reverse  # type: ignore[union-attr]
            if known is not None and known[0] is entries and known[1] == (n, out, fused):
                if entries[out].requires_grad:
                    # The kept steps as one generated function (``replay.emit_reverse``).
                    emitted = cache.reverse_function()  # type: ignore[union-attr]
                    if emitted is not None:
                        return emitted(self._values, seed, on_leaf)
                return run_reverse(known[2], self._values, out, seed,
                                   entries[out].requires_grad, ARRAY_OPS, on_leaf)
        plan = self._plan
        for k in range(len(plan), out + 1):
            # A repeated node's step was computed on an earlier pass (the entry is shared).
            e = entries[k]
            step = e.step
            if step is UNSET:
                step = e.step = reverse_step(entries, k)
            plan.append(step)
        run = plan
        if fused:
            pools = [k for k in range(out + 1) if entries[k].op in RELU_POOLS]
            if pools:
                run = _fused_relu_pooling(entries, plan, pools, out)
        if repeat:
            cache.keep_reverse(entries, (n, out, fused), list(run))  # type: ignore[union-attr]
        return run_reverse(run, self._values, out, seed, entries[out].requires_grad,
                           ARRAY_OPS, on_leaf)

    def backward_dense_all(self, out: int, seed: Any) -> list[Any]:
        """Cotangent of every node, zeros where the reverse pass did not reach it."""
        dense = self.backward_dense(out, seed)
        xp = self.xp
        return [xp.zeros_like(value) if g is None else g
                for g, value in zip(dense, self._values, strict=True)]

    def backward(self, out: int, seed: Any,
                 on_leaf: Callable[[int, Any], None] | None = None) -> dict[int, Any]:
        """Cotangents of the reached nodes only, keyed by node id."""
        dense = self.backward_dense(out, seed, on_leaf)
        return {i: g for i, g in enumerate(dense) if g is not None}

    def backward_scalar(self, out: int,
                        on_leaf: Callable[[int, Any], None] | None = None,
                        leaves_only: bool = False) -> dict[int, Any]:
        """``backward`` with seed 1 for a scalar output (like ``loss.backward()``).
        ``leaves_only``: the caller reads only the leaves' cotangents, so reverse steps may be
        fused (``_reverse``'s ``fuse``): an interior node's entry may then be missing."""
        out = self._check_id("backward_scalar", out)
        value = self._values[out]
        if value.shape != ():
            raise ShapeError(f"backward_scalar: output node {out} has shape {tuple(value.shape)}, "
                             "expected a scalar (); use backward(out, seed) for tensors")
        dense = self._reverse(out, self.xp.ones((), dtype=value.dtype), on_leaf, leaves_only)
        return {i: g for i, g in enumerate(dense) if g is not None}

    # --- forward mode --------------------------------------------------------------------------

    def jvp(self, out: int, tangents: dict[int, Any]) -> Any:
        """Tangent of node ``out`` given tangents of some nodes (usually leaves); zeros if none."""
        out = self._check_id("jvp", out)
        nodes = self.nodes
        if not isinstance(tangents, dict):
            raise TapeError(f"jvp: tangents must be a dict {{node id: tangent}}, found "
                            f"{type(tangents).__name__}")
        seeds: dict[int, Any] = {}
        for i, t in tangents.items():
            value = self.value(self._check_id("jvp", i))
            t_arr = array_on(f"jvp tangent for node {i}", t, self.xp, value.dtype)
            if t_arr.shape != value.shape:
                raise ShapeError(f"jvp: tangent for node {i} has shape {tuple(t_arr.shape)}, "
                                 f"node has shape {tuple(value.shape)}")
            seeds[i] = t_arr
        # Treat seeded interior nodes as leaves of the forward pass: their tangent is given.
        values = self._values
        view: list[Any] = [Node.leaf_view(n) if i in seeds and n.op is not None else n
                           for i, n in enumerate(nodes[: out + 1])]
        result = forward_tangents(view, values, seeds, ARRAY_OPS, upto=out)[out]
        return self.xp.zeros_like(values[out]) if result is None else result

    def __getattr__(self, name: str) -> Callable[..., int]:
        # Only reached for names that are not primitives (those are real methods, set below).
        raise AttributeError(f"Tape has no op or attribute {name!r}")


# The max pooling primitives with a fused relu VJP (``ops.fast.pool.relu_vjp``).
# Max-pooling primitive -> its relu-fused VJP (``ops.fast.pool.RELU_FUSED``): the eager tape's
# fusion and ``tl.Tensor``'s.
RELU_POOLS = {REGISTRY[name]: fused for name, fused in fast_pool.RELU_FUSED.items()}
_RELU = REGISTRY["relu"]


def _fused_relu_pooling(entries: Sequence[Any], plan: list[Step | None], pools: list[int],
                        out: int) -> list[Step | None]:
    """``plan`` with each ``p = max_pool(relu(c))`` whose relu output feeds nothing but the
    pooling given one reverse step: the pooling's step takes ``(x, c)`` as parents and returns
    ``(None, relu_vjp(g, x, p))``, so ``x`` receives no cotangent and relu's step never runs.
    The same bits as the two steps (``relu_vjp``'s docstring; generated code makes the same
    fusion, ``engine.codegen._fuse_relu_pooling``): W3 eager, about 0.4 ms of a 7.6 ms step.
    A copy: the tape's own plan (shared with later passes) is unchanged."""
    users: dict[int, int] = {}
    for k in range(out + 1):
        for q in entries[k].parents:
            users[q] = users.get(q, 0) + 1
    run = None
    for k in pools:
        step = plan[k]
        x = entries[k].parents[0]
        relu = entries[x]
        if step is None or relu.op is not _RELU or users.get(x) != 1 or x == out \
                or not entries[relu.parents[0]].requires_grad:
            continue
        if run is None:
            run = list(plan)
        _, rule, kwargs, _, _ = step
        run[k] = (k, fused_relu_pool_rule(RELU_POOLS[entries[k].op], rule, plan[x]), kwargs,
                  (x, relu.parents[0]), (1,))
    return plan if run is None else run


def fused_relu_pool_rule(fused: Any, pool_rule: Any, relu_step: Any) -> Any:
    """A reverse rule over inputs ``(x, c)`` (x = relu(c)) giving ``(None, dc)``: ``fused``
    (``ops.fast.pool.RELU_FUSED``), or the pooling's rule then relu's step for a cotangent of
    another dtype. The eager tape's fusion and ``tl.Tensor``'s (``tensor._relu_pool_step``)."""

    def rule(ops: Any, g: Any, xs: Any, out: Any, **attrs: Any) -> tuple[None, Any]:
        x, c = xs
        if type(g) is np.ndarray and g.dtype == x.dtype:
            return None, fused(g, x, out, **attrs)
        # (Another dtype: the two steps as recorded.)
        t = pool_rule(ops, g, [x], out, **attrs)[0]
        _, relu_rule, relu_kwargs, _, _ = relu_step
        return None, relu_rule(ops, t, [c], x, **relu_kwargs)[0]

    return rule


def _check_finite(op: str, value: Any, node: int | None = None) -> None:
    xp = namespace_of(value)
    finite = xp.isfinite(value)
    # One explicit readback of the reduced flag on a device (not of the whole array).
    ok = finite.all() if xp is np else to_host(finite.all())
    if not bool(ok):
        if xp is not np:  # the error path reads the array back once to count
            value = to_host(value)
            finite = np.isfinite(value)
        bad = int(value.size - int(finite.sum()))
        at = "" if node is None else f" (node {node}, the first non-finite value of the pass)"
        raise NonFiniteError(f"{op}: {bad} of {value.size} entries are NaN or infinite{at}")


def _make_method(prim: Primitive) -> Callable[..., int]:
    arity = len(prim.inputs)
    plain = not prim.attrs

    def method(self: Tape, *args: Any, **kwargs: Any) -> int:
        if plain and len(args) == arity and not kwargs:  # the common call, split for free
            return self.record(prim, args, {})
        ids, attrs = prim.split_call(args, kwargs, "node ids", TapeError)
        return self.record(prim, ids, attrs)

    attrs = ", ".join(prim.inputs + tuple(prim.attrs))
    method.__name__ = prim.name
    method.__qualname__ = f"Tape.{prim.name}"
    method.__doc__ = f"tape.{prim.name}({attrs}) -> node id\n\n{prim.semantics}"
    return method


def install_primitive_methods() -> None:
    """Give ``Tape`` one method per registered primitive (idempotent)."""
    for name, prim in REGISTRY.items():
        if name not in Tape.__dict__:
            setattr(Tape, name, _make_method(prim))


install_primitive_methods()
