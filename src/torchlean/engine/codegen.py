"""Compiled graphs run as generated code: one straight-line Python function per plan.

A ``Compiled`` graph's forward + reverse plan (``Graph.evaluate`` then ``autodiff.run_reverse``)
is interpreted on every call: a loop over steps, a list of values, argument lists built per node,
kwargs dicts, and a rule call per node that itself calls kernels through ``ARRAY_OPS``. This
module removes the interpreter. It runs the plan once on the call's real inputs with a *tracing*
interpreter (``_TraceOps``: every kernel call is made exactly as ``ARRAY_OPS`` would make it, and
recorded), then emits the recorded calls as the body of one Python function::

    def plan(a0, a1, a2):
        r0 = k_linear(a2, a0, a1)
        r1 = maximum(r0, 0, b0)        # a NumPy ufunc writing into a preallocated buffer
        ...
        return (r7, r3, r5)

**Bitwise equality, by construction.** Every statement calls the same kernel, with the same
arguments and attributes, in the same order as the interpreted plan (the reverse driver's
summation order included: the trace *is* a run of that driver). Two rewrites change how a kernel
is called, never what it computes: an op whose reference kernel is one NumPy ufunc (``add``,
``mul``, ``tanh``, ``relu`` = ``maximum(x, 0)``, ...) calls the ufunc directly, and, where its
result is an intermediate array (not returned, not a 0-d scalar, not viewed by anything that
outlives it), writes it into a buffer allocated once per plan (``out=``; a ufunc computes the
same bits with or without ``out``). Each such call is checked once, while tracing, against the
kernel it replaces on the traced values (type, dtype, shape and bytes); a kernel that differs
(a fast kernel installed in its place, say) keeps its kernel call. Buffers are shared between
values whose lifetimes do not overlap (lifetimes include every view of a value), and variable
names are reused the same way, so dead values are freed as the interpreter frees them, or
earlier.

**Fast kernels.** A plan is traced with one kernel set (``registry.fast_kernels``) and runs only
under it (``Plan.fast``). With the fast set, a fast forward whose kernel declares explicit halves
(``ops.fast.residuals.EXPLICIT``: attention, layer norm) is emitted as ``t = forward_saving(...)``
and its VJP as ``vjp_from(..., out, t[1])``: the residual is a local variable of the generated
function, alive exactly as long as its last use. Any other fast kernel (convolution, pooling)
is called as the interpreter calls it: its forward through the dispatcher, which keeps the
residual in the store against the output object this call made, and its VJP as one call of the
fast rule on that object. Traced with ``_TraceOps`` the dispatchers would pick the reference VJP
(they run the fast one for ``ARRAY_OPS`` only), so ``_reverse_plan`` swaps those steps for rules
that record the fast call. Either way the plan is bitwise equal to the interpreted one. One
peephole on top: ``relu`` followed by max pooling has its three reverse calls (the pooling's
VJP, relu's mask, their product) emitted as one fused call that gives the same bits
(``_fuse_relu_pooling``, ``ops.fast.pool.relu_vjp``; W3 compiled: about 0.4 ms of a 8 ms
step), and where that relu's value feeds nothing else the relu itself is folded into the
pooling's forward (``_fuse_relu_pool_forward``, ``ops.fast.pool.relu_max_forward``: the
relu'd activation is never written; W3 compiled: about 0.3 ms of a 6 ms step).

**Passes over the trace** (each keeps the interpreter's bits: the same kernels on the same
values; the plan's first run is checked against the trace as always). Dead code: a call whose
result nothing uses is dropped, so an hvp never computes the gradients' own values (``g^T x``
per weight), only their tangents. Constant folding (``_fold_constants``): a pure call whose
arguments are all constants is computed once while tracing (the reverse seed ``ones(())``, its
scale, the broadcast of cross-entropy's sum). Common calls (``_share_common_calls``): a pure
call repeating an earlier one with the same function, arguments and attributes reads its
result (forward-over-reverse computes relu's mask once per layer instead of twice), and a
``reshape`` to the shape its input has reads its input. Zeros for an output nothing reached
are made from its shape (``_zeros_where_none``), not by ``zeros_like`` of a value computed
only to be read. Returned values keep their own calls: outputs are fresh arrays per call. W4's
hvp plan after these: the 10 large and 8 small products forward-over-reverse needs, 2 masks
and 2 zeros (before: 4 masks, 3 zero biases with their additions, 4 zeros-likes); W2's step
plan: no seed chain. The GEMMs are about 88% of the hvp (W4 compiled at about 0.6x PyTorch's
double backward where the same 18 products alone, on NumPy's OpenBLAS, are about 0.51-0.57x).

**Fallback, never a wrong result.** Anything the tracer cannot follow makes ``emit`` return
``None`` and the caller keeps the interpreter: a rule that reads a value in Python control flow,
passes something that is not a traced value as an op input, or raises. A plan runs on the host
(NumPy) only; device runs, ``on_input`` callbacks and concurrent calls on one plan (its buffers
are single-use at a time: a second caller uses the interpreter) stay interpreted.

**Fusion (numexpr, numba): measured, not used.** Measured on the 2-core machine (shared, load
about 9, one thread; numexpr 2.14.2, numba 0.68.1): numexpr's ``evaluate("g*(1-y*y)")`` costs
17.7 us on 16 floats (2.8 us re-evaluated) against 1.2 us for the three ufunc calls it fuses,
and 264 us against 61 us on 65,536 floats, so it loses at both of this project's sizes. numba
does fuse: the whole W1 forward + backward as one ``njit`` loop ran in about 90 us, against about
3 ms for the ufunc calls at that load (JAX jit is in that class too), but compiling that one
function took 4.8 s, a generated graph would need its own (seconds per graph, per shape), and
numba's ``tanh`` (LLVM, libm) is not NumPy's SIMD one: it differs from NumPy's on 38% of float32
points in [-3, 3], so every fused kernel would change the bits and need a tolerance column in
``torchlean verify``. On W2, W3 and W5 the elementwise ops are a few percent of a step that GEMMs,
convolutions and attention dominate. So the default path takes no new dependency and stays
bitwise equal to the interpreter (W1 reaches about the hand-written NumPy floor without fusion);
fusing with numba is the next step if a workload ever needs JAX-like elementwise speed.
"""

from __future__ import annotations

import hashlib
import keyword
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.autodiff import forward_tangents, run_reverse
from ..core.registry import ARRAY_OPS, KERNELS, REGISTRY, unbroadcast
from ..core.shape import StaticShape
from ..ops.fast import pool as fast_pool
from ..ops.fast import residuals
from ..ops.fast import sgd as fast_sgd

# From this many entries on, a ufunc's scalar operand stays a scalar (``_Tracer._scalar_array``).
_FULL_LIMIT = 4096

# Beyond this many recorded calls the plan stays interpreted: compiling a Python function of
# hundreds of thousands of lines costs more time and memory than the interpreter it replaces.
MAX_STEPS = 50_000


class _CannotEmit(Exception):
    """The tracer met something it cannot turn into straight-line code (internal: never
    escapes ``emit``)."""


class _Sym(StaticShape):
    """A value while tracing: the real array (``value``) and its place in the trace (``id``).
    Rules see what they see of a graph ``Ref``: shape, dtype, ndim, len; anything else (its
    value in Python control flow, NumPy conversion, operators) stops the trace."""

    __slots__ = ("id", "value", "shape", "dtype")

    def __init__(self, sid: int, value: Any) -> None:
        self.id = sid
        self.value = value
        self.shape = tuple(getattr(value, "shape", ()))
        self.dtype = getattr(value, "dtype", None)

    def __len__(self) -> int:
        if not self.shape:
            raise _CannotEmit("len() of a 0-d traced value")
        return self.shape[0]

    def __bool__(self) -> bool:
        raise _CannotEmit("a traced value in Python control flow")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise _CannotEmit("a traced value converted to an array")


# An op whose reference kernel, on NumPy arrays, is one ufunc call: name -> (ufunc, how the
# op's inputs and attributes become the ufunc's positional arguments). Used only after the
# trace-time check in ``_Tracer.call`` found the kernel's result identical to the ufunc's.
_UFUNCS: dict[str, tuple[Any, Callable[[list[Any], dict[str, Any]], list[Any] | None]]] = {}


def _binary(args: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
    return list(args) if len(args) == 2 and not attrs else None


def _unary(args: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
    return list(args) if len(args) == 1 and not attrs else None


def _with_c(args: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
    return [args[0], attrs["c"]] if len(args) == 1 and set(attrs) == {"c"} else None


def _relu(args: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
    return [args[0], 0] if len(args) == 1 and not attrs else None


def _inv(args: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
    return [1, args[0]] if len(args) == 1 and not attrs else None


for _name, _uf, _how in [
    ("add", np.add, _binary), ("sub", np.subtract, _binary), ("mul", np.multiply, _binary),
    ("scale", np.multiply, _with_c), ("add_scalar", np.add, _with_c),
    ("square", np.square, _unary), ("abs", np.absolute, _unary), ("sign", np.sign, _unary),
    ("tanh", np.tanh, _unary), ("exp", np.exp, _unary), ("relu", np.maximum, _relu),
    ("inv", np.divide, _inv),
]:
    _UFUNCS[_name] = (_uf, _how)


def same_bits(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are host arrays (or NumPy scalars) of the same kind, dtype, shape
    and bits (``-0.0`` and ``0.0`` differ, a NaN equals the same NaN; any strides). Anything
    else, object arrays included, is never the same."""
    if type(a) is not type(b) or not isinstance(a, np.ndarray | np.generic):
        return False
    if a.dtype != b.dtype or a.shape != b.shape or a.dtype.hasobject:
        return False
    if a.dtype.itemsize not in (1, 2, 4, 8):  # no unsigned view of that size: compare bytes
        return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    bits = f"u{a.dtype.itemsize}"  # (a view of the same item size works on any strides)
    return bool(np.array_equal(np.asarray(a).view(bits), np.asarray(b).view(bits)))


def _fingerprint(value: Any) -> tuple[Any, ...]:
    """What identifies a result bit for bit without keeping it: kind, dtype, shape and a hash
    of its bytes."""
    if not isinstance(value, np.ndarray | np.generic):
        return (type(value), id(value))  # not an array: compared as the same object
    arr = np.ascontiguousarray(value)
    return (type(value), arr.dtype.str, arr.shape,
            hashlib.blake2b(arr.view(np.uint8).data).digest())


class _Step:
    """One recorded call: ``out = fn(*args, **kwargs)``; ``args`` hold ``_Sym``s and constants.
    ``ufunc`` is set when the call may be emitted as that ufunc (``args`` then in its order)."""

    __slots__ = ("out", "fn", "args", "kwargs", "ufunc", "prim")

    def __init__(self, out: _Sym, fn: Any, args: list[Any], kwargs: dict[str, Any],
                 ufunc: Any = None, prim: str | None = None) -> None:
        self.out = out
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.ufunc = ufunc
        self.prim = prim  # the primitive whose kernel this call is, if any


class _Tracer:
    """Runs kernel calls on real values and records them."""

    def __init__(self) -> None:
        self.syms: list[_Sym] = []
        self.steps: list[_Step] = []
        self.inputs: list[_Sym] = []
        self.consts: list[_Sym] = []  # values bound into the function, not recomputed
        self._scalars: dict[Any, _Sym] = {}

    def _new(self, value: Any) -> _Sym:
        sym = _Sym(len(self.syms), value)
        self.syms.append(sym)
        return sym

    def input(self, value: Any) -> _Sym:
        sym = self._new(value)
        self.inputs.append(sym)
        return sym

    def const(self, value: Any) -> _Sym:
        sym = self._new(value)
        self.consts.append(sym)
        return sym

    def _scalar_array(self, c: Any, like: Any) -> _Sym:
        """A Python scalar operand of a ufunc as a constant of the result's dtype: NumPy casts
        a Python scalar to the array's dtype (NEP 50), so the bits are the same. On a small
        result, an array of its shape: a ufunc over two arrays skips the scalar's promotion on
        every call (measured: ``maximum(x, 0)`` on 16 floats about 1.5 us, on two arrays about
        0.2 us). From ``_FULL_LIMIT`` entries on, a NumPy scalar of the dtype: reading a second
        full-size operand costs more than the promotion (65,536 float32 products: 8.4 us
        against 5.6 us with the scalar, one thread, warm cache)."""
        small = like.size < _FULL_LIMIT
        key = (type(c), c, like.shape if small else (), like.dtype.str)
        sym = self._scalars.get(key)
        if sym is None:
            if small:  # in the result's memory order (a channels-last one stays so)
                full = np.full_like(like, c, dtype=like.dtype)
                full.setflags(write=False)
            else:
                full = like.dtype.type(c)
            sym = self._scalars[key] = self.const(full)
        return sym

    def call(self, fn: Any, args: Sequence[Any], kwargs: dict[str, Any],
             prim: str | None = None) -> _Sym:
        """``fn(*args, **kwargs)`` on the traced values, recorded. For a primitive's kernel
        (``prim`` named) every positional argument must be a traced value."""
        if prim is not None and not all(isinstance(a, _Sym) for a in args):
            raise _CannotEmit(f"{prim}: an input that is not a traced value")
        if any(isinstance(v, _Sym) for v in kwargs.values()):
            raise _CannotEmit("a traced value passed as an attribute")
        if len(self.steps) >= MAX_STEPS:
            raise _CannotEmit(f"more than {MAX_STEPS} calls: interpreted instead")
        raw = [a.value if isinstance(a, _Sym) else a for a in args]
        value = fn(*raw, **kwargs)
        out = self._new(value)
        step = _Step(out, fn, list(args), dict(kwargs), prim=prim)
        entry = _UFUNCS.get(prim) if prim is not None else None
        if entry is not None and all(type(v) is np.ndarray for v in raw):
            ufunc, how = entry
            uargs = how(list(args), kwargs)
            if uargs is not None:
                uargs = [a if isinstance(a, _Sym) else self._scalar_array(a, value)
                         for a in uargs]
                direct = ufunc(*[a.value for a in uargs])
                if same_bits(direct, value):  # the kernel is this ufunc, bit for bit
                    step.args, step.kwargs, step.ufunc = uargs, {}, ufunc
        self.steps.append(step)
        return out


class _TraceOps:
    """The tracing Ops interpreter: ``ops.mul(a, b)`` calls ``kernels.mul`` (the kernel the
    interpreted plan calls: ``Graph.array_ops()``) and records the call."""

    def __init__(self, tracer: _Tracer, kernels: Any = ARRAY_OPS) -> None:
        self._tracer = tracer
        self._kernels = kernels
        self.name = "codegen"

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in REGISTRY:
            raise AttributeError(f"no primitive named {name!r} is registered")
        kernel = getattr(self._kernels, name)
        tracer = self._tracer

        def traced(*inputs: Any, **attrs: Any) -> _Sym:
            return tracer.call(kernel, inputs, attrs, prim=name)

        setattr(self, name, traced)
        return traced


class Plan:
    """A generated function and its buffers; ``run(arrays)`` returns its outputs, or ``None``
    when another call is running it or the kernel set differs from the one it was traced
    with (``fast``: it calls fast kernels directly; the caller then interprets)."""

    def __init__(self, fn: Callable[..., tuple[Any, ...]], source: str, n_buffers: int,
                 fast: bool = False) -> None:
        self.fn = fn
        self.source = source
        self.n_buffers = n_buffers
        self.fast = fast
        self._lock = threading.Lock()

    def run(self, arrays: Sequence[Any]) -> tuple[Any, ...] | None:
        if KERNELS.fast != self.fast or not self._lock.acquire(blocking=False):
            return None
        try:
            return self.fn(*arrays)
        finally:
            self._lock.release()


def _root(value: Any) -> Any:
    """The array that owns ``value``'s memory (itself when it owns it)."""
    while isinstance(value, np.ndarray) and value.base is not None:
        value = value.base
    return value


def _roots(value: Any) -> list[Any]:
    """The owners of the memory of every array in ``value`` (an array, or the tuples and lists
    of arrays a fast kernel's forward and VJP return: its residual may view its inputs)."""
    if isinstance(value, tuple | list):
        return [r for v in value for r in _roots(v)]
    return [_root(value)]


def _hashable_key(value: Any) -> Any:
    """A key under which two call arguments are the same argument: a traced value by its id,
    equal scalars, strings, dtypes and shapes by value (with their type: ``1``, ``1.0`` and
    ``True`` differ; a NaN never equals itself), anything else (an array constant, a class) by
    identity."""
    if isinstance(value, _Sym):
        return ("s", value.id)
    if isinstance(value, tuple):
        return ("t", tuple(_hashable_key(v) for v in value))
    if value is None or isinstance(value, bool | int | float | str | np.dtype | np.generic):
        if isinstance(value, float | np.floating) and value != value:
            return ("o", id(value))
        return ("v", type(value), value)
    return ("o", id(value))


def _pure_step(step: _Step) -> bool:
    """Whether a recorded call is a pure function of its arguments that a second identical call
    may share: a direct ufunc call, a primitive's kernel as ``ARRAY_OPS`` calls it (every kernel
    is deterministic, the random ones included: their draws are attributes), or indexing a
    result tuple. Not: calls that make fresh arrays to return (``zeros``, the seed), and the fast
    kernels' halves, whose residuals live in a store keyed by the output object."""
    if step.ufunc is not None or step.fn is operator.getitem:
        return True
    if step.prim is None:
        return False
    prim = REGISTRY.get(step.prim)
    if prim is None or not prim.inputs:
        return False
    return not (KERNELS.fast and (prim.fast_forward is not None or prim.fast_vjp is not None))


def _same_view(step: _Step) -> bool:
    """Whether a ``reshape`` step returned a view of its input with the input's own shape and
    strides (the reverse rules reshape cotangents to the shape they already have)."""
    if step.prim != "reshape" or not step.args or not isinstance(step.args[0], _Sym):
        return False
    a, v = step.args[0].value, step.out.value
    return (type(a) is np.ndarray and type(v) is np.ndarray and a.shape == v.shape
            and a.strides == v.strides and a.dtype == v.dtype and _root(v) is _root(a)
            and v.__array_interface__["data"][0] == a.__array_interface__["data"][0])


def _share_common_calls(tracer: _Tracer, outputs: Sequence[_Sym]) -> int:
    """Common subexpressions: a pure call (``_pure_step``) with the same function, arguments and
    attributes as an earlier one reads that one's result instead (the later call then has no
    use and is dropped as dead code). Forward-over-reverse records such pairs: relu's VJP and
    its tangent rule each compute ``positive_mask(x)`` of the same pre-activation. Kernels are
    deterministic, so the shared result has the bits each call would have had; a result that
    is returned keeps its own call (outputs stay distinct objects). A ``reshape`` to the shape
    its input already has (the same memory and strides: ``_same_view``) reads its input the same
    way. Returns how many calls now read an earlier result."""
    out_ids = {s.id for s in outputs}
    alias: dict[int, _Sym] = {}
    seen: dict[Any, _Sym] = {}
    shared = 0

    def redirect(a: Any) -> Any:
        return alias.get(a.id, a) if isinstance(a, _Sym) else a

    for step in tracer.steps:
        if alias:
            step.args = [redirect(a) for a in step.args]
            step.kwargs = {k: redirect(v) for k, v in step.kwargs.items()}
        if not _pure_step(step):
            continue
        if step.out.id not in out_ids and _same_view(step):
            alias[step.out.id] = step.args[0]  # a reshape to the shape it has: its input
            shared += 1
            continue
        try:
            key = (id(step.ufunc if step.ufunc is not None else step.fn),
                   tuple(_hashable_key(a) for a in step.args),
                   tuple(sorted((k, _hashable_key(v)) for k, v in step.kwargs.items())))
            hash(key)
        except TypeError:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = step.out
        elif step.out.id not in out_ids:
            alias[step.out.id] = first
            shared += 1
    return shared


def _fold_constants(tracer: _Tracer, outputs: Sequence[_Sym]) -> int:
    """Constant folding: a pure call (``_pure_step``, or ``np.ones``) whose traced arguments are
    all constants computes the same value on every run, so its traced value becomes a constant
    of the function instead of a call. The reverse pass starts from such a chain (the seed
    ``ones(())``, scaled, broadcast over the batch by ``sum``'s VJP: W2's cross-entropy pays
    about 0.1 ms a step for it, the first Python-level calls after a large GEMM). A returned
    value keeps its call (outputs are fresh arrays). Kernels never write into their arguments,
    so sharing the folded value between runs is safe. Returns how many calls were folded."""
    consts = {s.id for s in tracer.consts}
    out_ids = {s.id for s in outputs}
    kept: list[_Step] = []
    folded: list[_Sym] = []
    for step in tracer.steps:
        if step.out.id not in out_ids and (_pure_step(step) or step.fn is np.ones) \
                and all(a.id in consts for a in (*step.args, *step.kwargs.values())
                        if isinstance(a, _Sym)):
            consts.add(step.out.id)
            folded.append(step.out)
        else:
            kept.append(step)
    # A returned value that views a folded one (a reshape of it, say) would hand every caller
    # the same memory: then nothing is folded.
    roots = {id(r) for sym in folded for r in _roots(sym.value)}
    if any(id(r) in roots for sym in outputs for r in _roots(sym.value)):
        return 0
    tracer.consts.extend(folded)
    tracer.steps = kept
    return len(folded)


def _live(steps: Sequence[_Step], outputs: Sequence[_Sym]) -> set[int]:
    """The ids of the values ``outputs`` depend on through ``steps`` (the calls to keep)."""
    live = {s.id for s in outputs}
    for step in reversed(steps):
        if step.out.id in live:
            live.update(a.id for a in (*step.args, *step.kwargs.values()) if isinstance(a, _Sym))
    return live


def _uses_and_makers(steps: Sequence[_Step], outputs: Sequence[_Sym],
                     live: set[int] | None = None) -> tuple[dict[int, int], dict[int, _Step]]:
    """How many calls (those making an id in ``live``, when given) and outputs use each value,
    and the call that makes each value."""
    uses: dict[int, int] = {}
    made: dict[int, _Step] = {}
    for step in steps:
        made[step.out.id] = step
        if live is not None and step.out.id not in live:
            continue
        for a in (*step.args, *step.kwargs.values()):
            if isinstance(a, _Sym):
                uses[a.id] = uses.get(a.id, 0) + 1
    for sym in outputs:
        uses[sym.id] = uses.get(sym.id, 0) + 1
    return uses, made


def _generate(tracer: _Tracer, outputs: Sequence[_Sym]) -> Plan:
    """Emit the traced calls that reach ``outputs`` as one function (see the module docstring)."""
    _fold_constants(tracer, outputs)
    _share_common_calls(tracer, outputs)
    steps = tracer.steps
    out_ids = {s.id for s in outputs}
    # Dead code: kernels are pure, so a call whose result nothing uses is dropped.
    live = _live(steps, outputs)
    kept = [step for step in steps if step.out.id in live]
    position = {step.out.id: k for k, step in enumerate(kept)}
    end = len(kept)  # "used by the return statement"
    last: dict[int, int] = {}
    for k, step in enumerate(kept):
        for a in step.args:
            if isinstance(a, _Sym):
                last[a.id] = k
    for sid in out_ids:
        last[sid] = end
    # Buffers: a ufunc result that is an n-d array, not returned, and not viewed by anything
    # returned, lives in a preallocated buffer until the last use of it or of any view of it.
    candidates = {id(step.out.value): step.out.id for step in kept
                  if step.ufunc is not None and type(step.out.value) is np.ndarray
                  and step.out.value.ndim >= 1 and step.out.id not in out_ids}
    buffered: dict[int, int] = {sid: last.get(sid, position[sid]) for sid in candidates.values()}
    for step in kept:
        for root in _roots(step.out.value):
            owner = candidates.get(id(root))
            if owner is None or owner == step.out.id:
                continue
            if step.out.id in out_ids:
                buffered.pop(owner, None)  # a returned view of it: it must be fresh every call
            elif owner in buffered:
                buffered[owner] = max(buffered[owner],
                                      last.get(step.out.id, position[step.out.id]))
    for sid in out_ids:  # a returned input or constant aliasing a candidate: never here
        owner = candidates.get(id(_root(tracer.syms[sid].value)))
        if owner is not None and owner != sid:
            buffered.pop(owner, None)

    names: dict[int, str] = {}
    glob: dict[str, Any] = {}
    bound: dict[int, str] = {}  # id(object) -> global name, so one kernel is bound once

    def bind(obj: Any, prefix: str) -> str:
        key = id(obj)
        name = bound.get(key)
        if name is None:
            name = f"{prefix}{len(glob)}"
            glob[name] = obj
            bound[key] = name
        return name

    def arg(a: Any) -> str:
        if isinstance(a, _Sym):
            return names[a.id]
        if isinstance(a, bool | int | float) and type(a) in (bool, int, float) and (
                a == a and a not in (float("inf"), float("-inf"))):
            return repr(a)
        return bind(a, "c")

    for k, sym in enumerate(tracer.inputs):
        names[sym.id] = f"a{k}"
    for sym in tracer.consts:
        names[sym.id] = bind(sym.value, "c")
    free_regs: list[str] = []
    free_set: set[str] = set()  # the same names, for membership tests
    n_regs = 0
    buffers: list[tuple[tuple[int, ...], Any, tuple[int, ...]]] = []
    free_bufs: dict[tuple[tuple[int, ...], Any, tuple[int, ...]], list[int]] = {}
    buf_of: dict[int, int] = {}
    buf_release: dict[int, list[int]] = {}  # step index -> buffers free after it
    lines = [f"def plan({', '.join(names[s.id] for s in tracer.inputs)}):"]
    for k, step in enumerate(kept):
        text_args = [arg(a) for a in step.args]
        if step.ufunc is not None:
            fname = bind(step.ufunc, "u")
        else:
            fname = bind(step.fn, "k")
        for key, value in step.kwargs.items():
            if not key.isidentifier() or keyword.iskeyword(key):
                raise _CannotEmit(f"attribute {key!r} is not a keyword name")
            text_args.append(f"{key}={arg(value)}")
        sid = step.out.id
        if sid in buffered:
            value = step.out.value
            # The traced value's memory order too: a channels-last convolution output stays so
            # through the ops that write into this buffer (a C-order buffer would turn the
            # layout back, and every later op would mix layouts).
            shape_key = (value.shape, value.dtype, _memory_order(value))
            pool = free_bufs.setdefault(shape_key, [])
            if pool:
                b = pool.pop()
            else:
                b = len(buffers)
                buffers.append(shape_key)  # allocated once the traced values are released
            buf_of[sid] = b
            buf_release.setdefault(buffered[sid], []).append(b)
            # ``out`` by position where NumPy takes it so (a little faster on small arrays);
            # maximum and minimum take it by keyword only (by position is deprecated).
            by_key = step.ufunc in (np.maximum, np.minimum)
            text_args.append(f"out=b{b}" if by_key else f"b{b}")
        # Registers whose value dies here are free for this statement's result (the right-hand
        # side is evaluated before the name is rebound).
        for a in step.args:
            if isinstance(a, _Sym) and last.get(a.id) == k and a.id in position \
                    and names[a.id].startswith("r") and names[a.id] not in free_set:
                free_regs.append(names[a.id])
                free_set.add(names[a.id])
        if free_regs:
            reg = free_regs.pop()
            free_set.discard(reg)
        else:
            reg = f"r{n_regs}"
            n_regs += 1
        names[sid] = reg
        lines.append(f"    {reg} = {fname}({', '.join(text_args)})")
        if sid not in last:  # never used (kept only because it is returned: not possible)
            free_regs.append(reg)
            free_set.add(reg)
        for b in buf_release.pop(k, ()):
            free_bufs[buffers[b]].append(b)
    lines.append(f"    return ({''.join(names[s.id] + ', ' for s in outputs)})")
    source = "\n".join(lines) + "\n"
    code = compile(source, "<torchlean codegen>", "exec")
    exec(code, glob)  # noqa: S102  (our own generated source, built from names above)
    plan = Plan(glob["plan"], source, len(buffers), KERNELS.fast)
    # Release the traced values (outputs kept as fingerprints) before the check run, so that
    # the first call's peak memory is that of one step, not two.
    expected = [_fingerprint(s.value) for s in outputs]
    keep = {s.id for s in tracer.inputs} | {s.id for s in tracer.consts}
    for sym in tracer.syms:
        if sym.id not in keep:
            sym.value = None
    candidates.clear()
    for b, (shape, dtype, order) in enumerate(buffers):
        glob[f"b{b}"] = np.empty([shape[i] for i in order], dtype).transpose(np.argsort(order))
    # The plan's first run, on the traced inputs, must give the traced outputs bit for bit (a
    # last guard against anything the analysis above missed; then the interpreter stays).
    got = plan.run([s.value for s in tracer.inputs])
    if got is None or [_fingerprint(g) for g in got] != expected:
        raise _CannotEmit("the generated plan does not reproduce the traced run")
    return plan


def _fast_here(prim: Any, args: Sequence[Any], attrs: dict[str, Any]) -> bool:
    """Whether the interpreter would run ``prim``'s fast forward on these traced values (the
    dispatcher's test in ``registry._dispatch_forward``)."""
    return (KERNELS.fast and prim.fast_forward is not None and "xp" not in attrs
            and (not args or type(args[-1].value) is np.ndarray))


def _memory_order(value: Any) -> tuple[int, ...]:
    """The axes of an array from the largest stride to the smallest (C order: 0, 1, ...)."""
    return tuple(sorted(range(value.ndim), key=lambda i: -abs(value.strides[i])))


def _trace_forward(tracer: _Tracer, graph: Any, arrays: Sequence[Any]
                   ) -> tuple[list[Any], dict[int, _Sym]]:
    """The traced forward values of every graph node (as ``Graph.evaluate`` computes them), and
    the saved residual of every node whose fast forward has explicit halves
    (``ops.fast.residuals.EXPLICIT``): ``r, s = forward_saving(...)`` in the generated code,
    ``s`` a local variable handed to the node's ``vjp_from``."""
    values: list[Any] = [None] * len(graph.nodes)
    saved: dict[int, _Sym] = {}
    for i, x in zip(graph.inputs, arrays, strict=True):
        values[i] = tracer.input(x)
    for i, c in graph.consts.items():
        values[i] = tracer.const(c)
    for i, forward, parents, attrs in graph._plan(np):
        prim = graph.nodes[i].op
        args = [values[p] for p in parents]
        halves = residuals.EXPLICIT.get(prim.name)
        if halves is not None and _fast_here(prim, args, attrs):
            both = tracer.call(halves[0], args, attrs)
            values[i] = tracer.call(operator.getitem, [both, 0], {})
            saved[i] = tracer.call(operator.getitem, [both, 1], {})
        else:
            # Any other fast forward runs through its dispatcher, as in the interpreter, and
            # keeps its residual in the store (keyed by the output object this call makes).
            values[i] = tracer.call(forward, args, attrs, prim=prim.name)
    return values, saved


def _explicit_vjp(vjp_from: Any, g: Any, *rest: Any, **attrs: Any) -> Any:
    """A fast VJP from its explicit residual: ``rest`` is the inputs, the output, the residual."""
    return vjp_from(ARRAY_OPS, g, list(rest[:-2]), rest[-2], rest[-1], **attrs)


def _stored_vjp(fast_vjp: Any, g: Any, *rest: Any, **attrs: Any) -> Any:
    """A fast VJP reading its residual from the store: ``rest`` is the inputs, then the output
    (the object the forward saved it against in the same call)."""
    return fast_vjp(ARRAY_OPS, g, list(rest[:-1]), rest[-1], **attrs)


def _reverse_plan(tracer: _Tracer, graph: Any, saved: dict[int, _Sym]) -> list[Any]:
    """The graph's reverse plan for tracing. The interpreter's reverse pass runs with
    ``ARRAY_OPS``, so a fast VJP's dispatcher runs the fast rule; traced with ``_TraceOps`` it
    would run the reference. So under ``fast_kernels(True)`` each fast-VJP step's rule is
    replaced by one that records the fast rule as one call (and its reduction, if any, as the
    ``reducing`` wrapper does it), exactly as the interpreter would call it."""
    plan = list(graph._reverse_plan())
    if not KERNELS.fast:
        return plan
    for idx, step in enumerate(plan):
        if step is None:
            continue
        i, rule, kwargs, parents, targets = step
        prim = graph.nodes[i].op
        if prim.fast_vjp is not None:
            needed = tuple(k in targets for k in range(len(parents)))  # input indices
            plan[idx] = (i, _fast_rule(tracer, prim, rule, saved.get(i), needed), kwargs,
                         parents, targets)
    return plan


def _fast_rule(tracer: _Tracer, prim: Any, rule: Any, saved: _Sym | None,
               needed: tuple[bool, ...]) -> Any:
    reduce = rule is not prim.vjp  # vjp_rule wrapped the dispatcher to sum cotangents back
    halves = residuals.EXPLICIT.get(prim.name)

    def traced(ops: Any, g: Any, ins: Sequence[Any], out: Any, **kwargs: Any) -> Any:
        if not isinstance(g, _Sym) or type(g.value) is not np.ndarray:
            return rule(ops, g, ins, out, **kwargs)  # the dispatcher takes the reference too
        if saved is not None and halves is not None:
            if prim.name in residuals.SKIPS and not all(needed):
                # Cotangents nobody receives are not computed (the rest: the same bits).
                kwargs = {**kwargs, "needed": needed}
            both = tracer.call(_explicit_vjp, [halves[1], g, *ins, out, saved], kwargs)
        else:
            both = tracer.call(_stored_vjp, [prim.fast_vjp, g, *ins, out], kwargs)
        got = [None if c is None else tracer.call(operator.getitem, [both, k], {})
               for k, c in enumerate(both.value)]
        if not reduce:
            return tuple(got)
        return tuple(None if c is None else unbroadcast(ops, c, x.shape)
                     for c, x in zip(got, ins, strict=True))

    return traced


def _fuse_relu_pooling(tracer: _Tracer, outputs: Sequence[_Sym]) -> None:
    """Fuse ``x = relu(c); p = max_pool(x)``'s reverse steps, ``t = pool_vjp(g, x, p)[0]``,
    ``m = positive_mask(c)``, ``r = mul(t, m)``, into ``r = relu_vjp(g, x, p)``
    (``ops.fast.pool.relu_vjp``: the same bits, one pass instead of six), where ``t`` and ``m``
    feed nothing else and ``g`` has x's dtype. The three calls it replaces become dead code."""
    steps = tracer.steps
    uses, made = _uses_and_makers(steps, outputs)
    vjps = {REGISTRY[name].fast_vjp: fused for name, fused in fast_pool.RELU_FUSED.items()}
    for k, step in enumerate(steps):
        if step.prim != "mul" or len(step.args) != 2 or step.kwargs:
            continue
        t, m = step.args
        if not (isinstance(t, _Sym) and isinstance(m, _Sym)) or uses.get(t.id) != 1 \
                or uses.get(m.id) != 1:
            continue
        pick, mask = made.get(t.id), made.get(m.id)
        if pick is None or mask is None or pick.fn is not operator.getitem \
                or pick.args[1] != 0 or mask.prim != "positive_mask":
            continue
        vjp = made.get(pick.args[0].id) if isinstance(pick.args[0], _Sym) else None
        if vjp is None or vjp.fn is not _stored_vjp or uses.get(vjp.out.id) != 1 \
                or len(vjp.args) != 4 or vjp.args[0] not in vjps:
            continue
        g, x, pooled = vjp.args[1:]
        relu = made.get(x.id) if isinstance(x, _Sym) else None
        c = mask.args[0]
        if relu is None or relu.prim != "relu" or relu.args[0] is not c \
                or g.dtype != x.dtype or type(g.value) is not np.ndarray:
            continue
        steps[k] = _Step(step.out, vjps[vjp.args[0]], [g, x, pooled], dict(vjp.kwargs))
    _fuse_relu_pool_forward(tracer, outputs)


def _fuse_relu_pool_forward(tracer: _Tracer, outputs: Sequence[_Sym]) -> None:
    """After ``_fuse_relu_pooling``'s VJP fusion: where ``x = relu(c)`` feeds only
    ``p = max_pool(x)`` and that pooling's relu-fused VJP ``relu_vjp(g, x, p)``, compute
    ``p = relu_max_forward(c)`` (``ops.fast.pool``: the pooling of the relu'd values without
    writing them; the same ``p``) and hand the VJP ``c`` (the same shape, dtype and layout; it
    reads no value of it). The relu call becomes dead code. The plan's outputs keep their bits
    (see ``relu_max_forward``; the plan's first run is checked against the trace as always).
    W3 compiled: the relu forwards were about 0.3 ms of a 6 ms step."""
    steps = tracer.steps
    # uses by live calls only (the VJP fusion left the calls it replaced in place, dead)
    uses, made = _uses_and_makers(steps, outputs, _live(steps, outputs))
    fused_vjps = {fused: name for name, fused in fast_pool.RELU_FUSED.items()}
    for step in steps:
        name = fused_vjps.get(step.fn)
        if name is None or len(step.args) != 3:
            continue
        g, x, pooled = step.args
        relu, pool = made.get(x.id), made.get(pooled.id)
        if relu is None or pool is None or relu.prim != "relu" or pool.prim != name \
                or len(pool.args) != 1 or pool.args[0] is not x or uses.get(x.id) != 2:
            continue
        c = relu.args[0]
        if not isinstance(c, _Sym) or type(c.value) is not np.ndarray \
                or c.value.dtype != x.value.dtype or c.value.strides != x.value.strides:
            continue
        pool.fn, pool.args, pool.prim, pool.ufunc = (
            fast_pool.RELU_FUSED_FORWARD[name], [c], None, None)
        step.args = [g, c, pooled]


def _zeros_where_none(tracer: _Tracer, found: Sequence[Any], values: Sequence[Any],
                      ids: Sequence[int]) -> list[_Sym]:
    """``found[i]`` per id, or zeros like ``values[i]`` (as ``transforms._or_zeros``). For a
    C-ordered NumPy value the zeros are made from its shape and dtype alone, so nothing computes
    the value just to read its shape: the zero tangent of a data input's zero gradient in an hvp
    no longer runs ``zeros_like`` twice, and a data input's zero gradient is one ``calloc``."""
    out = []
    for i in ids:
        if found[i] is not None:
            out.append(found[i])
            continue
        value = values[i].value if isinstance(values[i], _Sym) else None
        if type(value) is np.ndarray and value.flags.c_contiguous:
            out.append(tracer.call(np.zeros, [value.shape], {"dtype": value.dtype}))
        else:
            out.append(tracer.call(np.zeros_like, [values[i]], {}))
    return out


def _trace_value_and_grads(tracer: _Tracer, graph: Any, arrays: Sequence[Any]
                           ) -> tuple[list[Any], list[Any]]:
    """A scalar graph's traced forward values and its traced reverse pass from seed 1: the
    cotangent of every node (``None`` where none arrives), as ``run_reverse`` gives them."""
    values, saved = _trace_forward(tracer, graph, arrays)
    out = graph.output
    seed = tracer.call(np.ones, [()], {"dtype": graph.dtype})
    grads = run_reverse(_reverse_plan(tracer, graph, saved), values, out, seed,
                        graph.nodes[out].requires_grad, _TraceOps(tracer, graph.array_ops()))
    return values, grads


def emit_value_and_backward(graph: Any, arrays: Sequence[Any], also: Sequence[int] = ()
                            ) -> Plan | None:
    """A plan returning ``(loss, grad of input 0, ...)`` for a scalar graph, traced on
    ``arrays`` (checked inputs, parameters last); ``None`` where the interpreter must stay.
    ``also``: node ids whose forward values are returned too, after the loss (``(loss, *also,
    grads...)``; certified training reads its bounds node there)."""
    try:
        tracer = _Tracer()
        values, grads = _trace_value_and_grads(tracer, graph, arrays)
        out = graph.output
        outputs = [values[out], *(values[i] for i in also),
                   *_zeros_where_none(tracer, grads, values, graph.inputs)]
        if KERNELS.fast:
            _fuse_relu_pooling(tracer, outputs)
        return _generate(tracer, outputs)
    except Exception:  # noqa: BLE001  (anything untraceable: the interpreter runs instead)
        return None


def _weight_product(producer: dict[int, _Step], g: Any, param: Any) -> list[_Sym] | None:
    """``[G, H]`` where the traced gradient ``g`` of ``param`` is ``matmul(transpose2d(G), H)``
    (a linear layer's weight gradient, as ``linear``'s VJP records it) and ``gemm_step`` fits
    the values; else None."""
    step = producer.get(g.id) if isinstance(g, _Sym) else None
    if step is None or step.prim != "matmul" or len(step.args) != 2:
        return None
    t, h = step.args
    inner = producer.get(t.id) if isinstance(t, _Sym) else None
    if inner is None or inner.prim != "transpose2d" or len(inner.args) != 1 or inner.kwargs:
        return None
    gt = inner.args[0]
    if not isinstance(gt, _Sym) or not isinstance(h, _Sym):
        return None
    return [gt, h] if fast_sgd.gemm_fits(param, gt.value, h.value) else None


def emit_sgd_step(graph: Any, arrays: Sequence[Any], update: Sequence[bool], lr: float
                  ) -> Plan | None:
    """A plan of one plain SGD step on a scalar graph: ``p -= lr * grad`` in place for every
    input ``k`` with ``update[k]`` (the parameters being trained), after the whole forward and
    reverse pass has read them. Its inputs are ``(*arrays, lr)``; it returns ``(loss, None,
    ...)``. A gradient that is one product ``G^T H`` (``_weight_product``) is never formed: one
    GEMM adds ``-lr G^T H`` into the parameter (``ops.fast.sgd.gemm_step``); any other is added
    by ``ops.fast.sgd.update_step``. Traced and checked on copies of the updated inputs (the
    copies are restored between the trace and the check run); ``None`` where the interpreter
    must stay."""
    try:
        originals = [a if u else None for a, u in zip(arrays, update, strict=True)]
        arrays = [a.copy() if u else a for a, u in zip(arrays, update, strict=True)]
        tracer = _Tracer()
        values, grads = _trace_value_and_grads(tracer, graph, arrays)
        rate = tracer.input(float(lr))  # (the plan's last argument)
        producer = {step.out.id: step for step in tracer.steps}
        done = []
        for k, i in enumerate(graph.inputs):
            g = grads[i]
            if not update[k] or g is None:
                continue
            pair = _weight_product(producer, g, originals[k])
            if pair is not None:
                done.append(tracer.call(fast_sgd.gemm_step, [values[i], *pair, rate], {}))
            else:
                done.append(tracer.call(fast_sgd.update_step, [values[i], g, rate], {}))
        for copy, original in zip(arrays, originals, strict=True):
            if original is not None:
                copy[...] = original  # (the check run starts where the trace did)
        outputs = [values[graph.output], *done]
        if KERNELS.fast:
            _fuse_relu_pooling(tracer, outputs)
        return _generate(tracer, outputs)
    except Exception:  # noqa: BLE001
        return None


def emit_forward(graph: Any, arrays: Sequence[Any]) -> Plan | None:
    """A plan returning the graph's outputs (as ``Graph.evaluate``), or ``None``."""
    try:
        tracer = _Tracer()
        values, _ = _trace_forward(tracer, graph, arrays)
        return _generate(tracer, [values[o] for o in graph.outputs])
    except Exception:  # noqa: BLE001
        return None


def emit_tangents(graph: Any, arrays: Sequence[Any], tangents: Sequence[Any]) -> Plan | None:
    """A plan of forward mode over ``graph`` (``Graph.tangents``, zeros where none arrives):
    inputs are the graph's inputs, then the tangents that are not ``None`` (a ``None`` is a
    zero direction, skipped as the interpreter skips it: one plan per pattern of ``None``s);
    outputs one tangent per graph output."""
    try:
        tracer = _Tracer()
        values, _ = _trace_forward(tracer, graph, arrays)
        seeds = {i: tracer.input(t) for i, t in zip(graph.inputs, tangents, strict=True)
                 if t is not None}
        found = forward_tangents(graph.nodes, values, seeds, _TraceOps(tracer, graph.array_ops()))
        return _generate(tracer, _zeros_where_none(tracer, found, values, graph.outputs))
    except Exception:  # noqa: BLE001
        return None


__all__ = ["Plan", "emit_value_and_backward", "emit_forward", "emit_sgd_step", "emit_tangents"]
