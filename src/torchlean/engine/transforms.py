"""Functional transforms over plain arrays, and compile-once wrappers.

``grad``, ``value_and_grad``, ``vjp``, ``jvp``, ``hvp`` and ``hessian`` follow torch.func / JAX
conventions (``argnums`` an int or tuple; ``primals`` and ``tangents`` tuples). Each call traces
the function into a graph (cheap: one pass of Python) and runs it; ``compile`` traces once and
returns a ``Compiled`` object (TorchLean's CompiledScalar / CompiledOut) to run many times.

Higher derivatives are forward-over-reverse: ``grad_graph`` records the reverse pass as graph
nodes, and forward mode over that graph gives H v. An op without a JVP rule raises
``UnsupportedJvpError`` naming it; there is never a silent zero tangent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core import alloc
from ..core.attr_kinds import max_elements
from ..core.backend import device_of, namespace_for, namespace_of, numeric_array
from ..core.errors import ShapeError, SignatureError, TraceError, device_mismatch
from ..core.kernels import array_on
from ..core.registry import KERNELS
from ..core.shape import as_shape
from . import codegen
from .graph import Graph, grad_graph, trace
from .replay import same_attrs
from .tape import Tape


def _arrays_and_dtype(op: str, xs: Sequence[Any], dtype: Any = None) -> tuple[list[Any], Any]:
    """Convert inputs to arrays of one float dtype: the inputs' own, or float64 for non-floats."""
    # Device arrays stay where they are (the compiled run uploads host data next to them).
    arrays = [numeric_array(f"{op}: argument {k}", x, namespace_of(x)) for k, x in enumerate(xs)]
    if dtype is None:
        floats = {a.dtype for a in arrays if a.dtype.kind == "f"}
        if len(floats) > 1:
            raise ShapeError(f"{op}: inputs mix dtypes {sorted(d.name for d in floats)}; cast "
                             "them to one float dtype first")
        dtype = floats.pop() if floats else np.dtype(np.float64)
    return [a.astype(dtype, copy=False) for a in arrays], np.dtype(dtype)


def _argnums(op: str, argnums: int | Sequence[int], n: int) -> tuple[tuple[int, ...], bool]:
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums) if isinstance(argnums, tuple | list) else ()
    if not nums or any(isinstance(a, bool) or not isinstance(a, int) for a in nums):
        raise ShapeError(f"{op}: argnums must be an int or a tuple of ints, found {argnums!r}")
    for a in nums:
        if not -n <= a < n:
            raise ShapeError(f"{op}: argnums {argnums} out of range for {n} arguments")
    return tuple(a % n for a in nums), single


class Compiled:
    """A function traced once into a graph; run it many times (forward, jvp, vjp, backward).

    Inputs must have the traced shapes (checked). Parameters the function used through modules
    (``Param``s met while tracing) become extra inputs after the traced leaves; their current
    values are supplied automatically, and ``vjp``/``backward`` return their gradients last.
    ``to_tape`` replays the graph on an eager tape
    whose reverse pass equals ``backprop_all`` bitwise (the seed-004 link).

    Devices: a run happens where its data is. With ``device`` given ("cpu" or "cuda") the
    namespace is fixed; otherwise it is the device of the first input on one, else of the first
    parameter on one, else the host. Host inputs of a device run are uploaded explicitly,
    parameters are moved there once (``Param.on``) and read through ``param.array`` on every
    run (so in-place optimiser updates are seen without an upload), constants are uploaded once
    per graph (``Graph.consts_on``); data on another device is a ``DeviceError``.

    Generated code: on the host, ``value_and_backward``/``backward``, ``forward`` and ``hvp``
    run a straight-line function emitted once per graph (``engine.codegen``), bitwise equal to
    the interpreted plan, from their second call on (the first is interpreted, so one-off
    transforms pay nothing); where it cannot be emitted the plan is interpreted. ``codegen = False``
    on an instance always interprets (the bench and the equality tests compare the two).
    """

    def __init__(self, fn: Callable[..., Any], shapes: Sequence[Sequence[int]],
                 dtype: Any = "float32", wrt: Sequence[int] | None = None,
                 owner_arg: bool = False, device: str | None = None) -> None:
        leaf_shapes = [as_shape(f"compile: leaf {k} shape", s) for k, s in enumerate(shapes)]
        if wrt is not None:
            wrt = _argnums("compile wrt", tuple(wrt), len(leaf_shapes))[0] if tuple(wrt) else ()
        self._fixed_xp: Any = None if device is None else namespace_for(device)
        self.graph: Graph = trace(fn, leaf_shapes, dtype, wrt, owner_arg)
        self.dtype = self.graph.dtype
        self._grad_graph: Graph | None = None
        self.codegen = True
        # Generated plans by (kind, graph, graph size, pattern): None where emission failed,
        # _SEEN_ONCE after a first (interpreted) call.
        self._generated: dict[Any, Any] = {}

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.graph.nodes[self.graph.output].shape

    @property
    def params(self) -> list[Any]:
        return self.graph.params

    def namespace(self, xs: Sequence[Any]) -> Any:
        """The array namespace a run on inputs ``xs`` happens in (see the class docstring)."""
        xp = self._fixed_xp
        if xp is not None:
            return xp
        for x in xs:
            if type(x) is not np.ndarray and x is not None:
                src = namespace_of(x)
                if src is not np:
                    return src
        for p in self.graph.params:
            arr = p.array
            if type(arr) is not np.ndarray:
                return namespace_of(arr)
        return np

    def _full(self, xs: Sequence[Any], xp: Any = np) -> list[Any]:
        """The traced inputs, then the parameters' current arrays in namespace ``xp`` (each
        parameter moved there once, then read where it lives)."""
        n = len(self.graph.inputs) - len(self.graph.params)
        if len(xs) != n:
            raise ShapeError(f"compiled function takes {n} inputs, found {len(xs)}")
        params = self.graph.params
        if xp is np:
            arrays = [p.array for p in params]
            for p, a in zip(params, arrays, strict=True):
                if type(a) is not np.ndarray:
                    raise device_mismatch(f"compiled run: parameter {p.name or '(unnamed)'}",
                                          p.device, "cpu", "a parameter")
            return list(xs) + arrays
        for p in params:
            src = namespace_of(p.array)
            if src is not np and src is not xp:
                raise device_mismatch(f"compiled run: parameter {p.name or '(unnamed)'}",
                                      p.device, device_of(xp), "a parameter")
        return list(xs) + [p.on(xp) for p in params]

    def _values(self, op: str, xs: Sequence[Any]) -> list[Any]:
        """Every node's value for inputs ``xs`` (checked against the traced shapes)."""
        g = self.graph
        xp = self.namespace(xs)
        return g.evaluate(g.check_inputs(op, self._full(xs, xp), xp=xp), xp)

    def _cotangents(self, values: list[Any], seed: Any,
                    on_input: Callable[[int, Any], None] | None = None) -> tuple[Any, ...]:
        """One cotangent per graph input (zeros where none arrives) for output seed ``seed``;
        ``on_input(k, g)`` as input ``k``'s cotangent becomes final during the pass."""
        g = self.graph
        on_leaf = None
        if on_input is not None:
            index = {node: k for k, node in enumerate(g.inputs)}
            callback = on_input

            def on_leaf(i: int, cotangent: Any) -> None:
                k = index.get(i)
                if k is not None:
                    callback(k, cotangent)

        return _or_zeros(g.backprop(values, g.output, seed, on_leaf), values, g.inputs)

    def _run_generated(self, op: str, graph: Graph, kind: str, xs: Sequence[Any],
                       tangents: Sequence[Any] | None = None,
                       sgd: tuple[tuple[bool, ...], float] | None = None
                       ) -> tuple[Any, ...] | None:
        """The outputs of ``graph``'s generated ``kind`` plan on inputs ``xs`` (checked here),
        or ``None``: codegen off, a device run, no plan could be emitted, or the plan busy.
        ``sgd``: (which inputs to update, the learning rate) of kind ``"sgd"``."""
        if not self.codegen:
            return None
        xp = self.namespace(xs)
        if xp is not np:
            return None
        arrays = graph.check_inputs(op, self._full(xs, xp), xp=xp)
        if sgd is not None:
            update, lr = sgd
            n = len(arrays) - len(graph.params)
            if any(update[n + k] and arrays[n + k] is not p.array
                   for k, p in enumerate(graph.params)):
                return None  # (an update into a converted copy would be lost)
            pattern: tuple[bool, ...] = update
            plan = self._plan_for(graph, kind, pattern, lambda: codegen.emit_sgd_step(
                graph, arrays, update, lr))
            return None if plan is None else plan.run([*arrays, lr])
        if tangents is not None:
            dxs = graph.check_inputs(f"{op} tangents", _pad_tangents(graph, tangents),
                                     allow_none=True, xp=xp)
            pattern = tuple(t is None for t in dxs)
            arrays = arrays + [t for t in dxs if t is not None]
        else:
            pattern = ()
        n = len(graph.inputs)
        if kind == "backward":
            plan = self._plan_for(graph, kind, pattern,
                                  lambda: codegen.emit_value_and_backward(graph, arrays))
        elif kind == "forward":
            plan = self._plan_for(graph, kind, pattern,
                                  lambda: codegen.emit_forward(graph, arrays))
        else:
            plan = self._plan_for(graph, kind, pattern,
                                  lambda: codegen.emit_tangents(graph, arrays[:n], dxs))
        return None if plan is None else plan.run(arrays)

    def _plan_for(self, graph: Graph, kind: str, pattern: tuple[bool, ...],
                  emit: Callable[[], Any]) -> Any:
        """The generated plan of ``kind`` for this graph, input pattern and kernel set (a plan
        is traced with one set, ``registry.fast_kernels``, and calls its fast kernels
        directly), emitted by ``emit()`` on the second call; None on the first call and where
        none could be emitted."""
        key = (kind, id(graph), len(graph.nodes), pattern, KERNELS.fast)
        plan = self._generated.get(key, _UNSEEN)
        if plan is _UNSEEN:
            # The first call interprets: a graph compiled for one call (``tl.grad``, ``tl.hvp``
            # trace per call) never pays for tracing and emitting; the second call emits.
            self._generated[key] = _SEEN_ONCE
            return None
        if plan is _SEEN_ONCE:
            alloc.repeated_step()  # (a loop: keep its freed buffers in the heap, core/alloc.py)
            plan = self._generated[key] = emit()
        return plan

    def _scalar(self, op: str) -> None:
        if self.out_shape != ():
            raise ShapeError(f"{op}: output has shape {self.out_shape}, expected a scalar (); "
                             "use vjp(xs, seed) for tensor outputs")

    def _seed(self, op: str, seed: Any, xp: Any = np) -> Any:
        arr = array_on(f"{op} seed", seed, xp, self.dtype)
        if arr.shape != self.out_shape:
            raise ShapeError(f"{op}: seed has shape {arr.shape}, output has {self.out_shape}")
        return arr

    def forward(self, *xs: Any) -> Any:
        if len(self.graph.outputs) == 1:
            got = self._run_generated("forward", self.graph, "forward", xs)
            if got is not None:
                return got[0]
        return self._values("forward", xs)[self.graph.output]

    __call__ = forward

    def value_and_jvp(self, xs: Sequence[Any], dxs: Sequence[Any]) -> tuple[Any, Any]:
        """The output and its tangent for input tangents ``dxs`` (``None`` means zero)."""
        g = self.graph
        values = self._values("jvp", xs)
        tangents = g.check_inputs("jvp tangents", _pad_tangents(g, dxs), allow_none=True,
                                  xp=_namespace_of_values(values, g))
        return values[g.output], _or_zeros(g.tangents(values, tangents), values, [g.output])[0]

    def jvp(self, xs: Sequence[Any], dxs: Sequence[Any]) -> Any:
        """Output tangent for input tangents ``dxs`` (one per input; ``None`` means zero)."""
        return self.value_and_jvp(xs, dxs)[1]

    def vjp(self, xs: Sequence[Any], seed: Any) -> tuple[Any, ...]:
        """One cotangent per input for output cotangent ``seed``."""
        values = self._values("vjp", xs)
        return self._cotangents(values, self._seed("vjp", seed,
                                                   _namespace_of_values(values, self.graph)))

    def backward(self, *xs: Any) -> tuple[Any, ...]:
        """Gradients of a scalar output (seed 1), one per input."""
        self._scalar("backward")
        got = self._run_generated("backward", self.graph, "backward", xs)
        if got is not None:
            return tuple(got[1:])
        values = self._values("backward", xs)
        out = values[self.graph.output]
        return self._cotangents(values, namespace_of(out).ones((), dtype=self.dtype))

    def value_and_backward(self, *xs: Any, on_input: Callable[[int, Any], None] | None = None
                           ) -> tuple[Any, tuple[Any, ...]]:
        """The scalar output and its gradients in one forward pass; ``on_input(k, g)`` is called
        as input ``k``'s gradient becomes final (parameters count after the traced leaves)."""
        self._scalar("value_and_backward")
        if on_input is None:
            got = self._run_generated("value_and_backward", self.graph, "backward", xs)
            if got is not None:
                return got[0], tuple(got[1:])
        values = self._values("value_and_backward", xs)
        out = values[self.graph.output]
        seed = namespace_of(out).ones((), dtype=self.dtype)
        return out, self._cotangents(values, seed, on_input)

    def sgd_step(self, xs: Sequence[Any], lr: float, update: Sequence[bool]) -> Any:
        """One plain SGD step as one generated plan: the scalar output's value, every input
        ``k`` with ``update[k]`` (parameters, after the traced inputs) moved by ``-lr`` times
        its gradient in place (``codegen.emit_sgd_step``: a linear weight's gradient is
        accumulated into it by one GEMM, never formed). Returns ``None``, having changed
        nothing, where no such plan runs: codegen off, a device, the first call, a plan that
        could not be emitted or is busy; the caller then takes the general path."""
        self._scalar("sgd_step")
        got = self._run_generated("sgd_step", self.graph, "sgd", xs,
                                  sgd=(tuple(update), float(lr)))
        return None if got is None else got[0]

    def backprop_all(self, xs: Sequence[Any], seed: Any) -> list[Any]:
        """One cotangent per node, in graph order (zeros where unreached)."""
        g = self.graph
        values = self._values("backprop_all", xs)
        dense = g.backprop(values, g.output,
                           self._seed("backprop_all", seed, _namespace_of_values(values, g)))
        return list(_or_zeros(dense, values, range(len(values))))

    def to_tape(self, *xs: Any) -> tuple[Tape, list[int], int]:
        xp = self.namespace(xs)
        tape, leaf_ids, outs = self.graph.to_tape(self._full(xs, xp), xp)
        return tape, leaf_ids, outs[0]

    def _hvp_graph(self) -> Graph:
        if self._grad_graph is None:
            self._scalar("hvp")
            self._grad_graph = grad_graph(self.graph)
        return self._grad_graph

    def hvp(self, xs: Sequence[Any], vs: Sequence[Any]) -> tuple[Any, ...]:
        """Hessian-vector products of a scalar output, one per input (forward-over-reverse).

        A ``None`` in ``vs`` is a zero direction, which forward mode skips entirely.
        """
        gg = self._hvp_graph()
        got = self._run_generated("hvp", gg, "tangents", xs, vs)
        if got is not None:
            return got
        xp = self.namespace(xs)
        arrays = gg.check_inputs("hvp", self._full(xs, xp), xp=xp)
        tangents = gg.check_inputs("hvp tangents", _pad_tangents(gg, vs), allow_none=True, xp=xp)
        lazy = gg.lazy_tangents(arrays, tangents, xp)  # only the values the rules read
        if lazy is not None:
            return tuple(lazy)
        values = gg.evaluate(arrays, xp)
        return _or_zeros(gg.tangents(values, tangents), values, gg.outputs)

    def hessian(self, xs: Sequence[Any], argnum: int) -> Any:
        """The Hessian of a scalar output w.r.t. input ``argnum``: shape ``x.shape + x.shape``,
        with ``H[i, j] = d^2 f / dx_i dx_j``, one forward-over-reverse pass per column."""
        gg = self._hvp_graph()
        xp = self.namespace(xs)
        values = gg.evaluate(gg.check_inputs("hessian", self._full(xs, xp), xp=xp), xp)
        x = values[gg.inputs[argnum]]
        n = x.size
        rows = xp.empty((n,) + x.shape, dtype=gg.dtype)
        seeds: list[Any] = [None] * len(gg.inputs)
        for j in range(n):
            basis = xp.zeros(n, dtype=gg.dtype)
            basis[j] = 1
            seeds[argnum] = basis.reshape(x.shape)
            t = gg.tangents(values, seeds)[gg.outputs[argnum]]
            rows[j] = 0 if t is None else t
        # rows[j] = H e_j is column j; transpose so that H[i, j] = (H e_j)_i.
        return xp.moveaxis(rows.reshape((n, n)), 0, 1).reshape(x.shape + x.shape)


_UNSEEN = object()
_SEEN_ONCE = object()  # a key run once, interpreted: the next call emits its plan


_TORCH_COMPILE_KEYWORDS = ("fullgraph", "dynamic", "backend", "mode", "options", "disable")


def compile(  # noqa: A001  (the public name, as torch.compile)
    fn: Callable[..., Any] | None = None, *leaf_shapes: Sequence[int], dtype: Any = "float32",
    wrt: Sequence[int] | None = None, **torch_options: Any,
) -> Any:
    """Trace ``fn`` once over leaves of ``leaf_shapes``; see ``Compiled``.

    ``wrt`` names the differentiable leaves (default: all). The others are data: no rule
    computes their cotangents, and ``vjp``/``backward`` report zeros for them.

    torch's form, without shapes (``torch.compile(model, mode=...)``, or as a decorator with or
    without options), returns the model or function itself: torch's compiled module computes
    what the eager one does, and so does this one (``model.compile()`` / ``tl.compile(fn,
    *shapes)`` give torchlean's traced graphs).
    """
    unknown = sorted(set(torch_options) - set(_TORCH_COMPILE_KEYWORDS))
    if unknown:
        raise SignatureError(f"compile: unexpected keyword argument(s) {unknown} (torch's are "
                             f"{', '.join(_TORCH_COMPILE_KEYWORDS)})")
    if not leaf_shapes:
        if fn is None:  # @torch.compile(mode=...)
            return lambda f: f
        if not callable(fn):
            raise SignatureError(f"compile: expected a function or a module, found "
                                 f"{type(fn).__name__}")
        return fn
    if fn is None or torch_options:
        raise SignatureError("compile: traced compilation takes a function and leaf shapes "
                             f"(torch's options {sorted(torch_options)} apply to the shapeless "
                             "form only)")
    return Compiled(fn, leaf_shapes, dtype, wrt)


def _compile_for(op: str, fn: Callable[..., Any], xs: Sequence[Any],
                 wrt: Sequence[int] | None = None) -> tuple[Compiled, list[Any]]:
    """``fn`` compiled for these arguments (one float dtype); the free transforms run on it."""
    arrays, dtype = _arrays_and_dtype(op, xs)
    c = Compiled(fn, [a.shape for a in arrays], dtype, wrt)
    if len(c.graph.outputs) != 1:
        raise TraceError(f"{op}: the function must return one ref, found {len(c.graph.outputs)}")
    # Parameters used through modules are held fixed: Compiled supplies their current values.
    return c, arrays


def _or_zeros(found: Sequence[Any], values: Sequence[Any], ids: Sequence[int]) -> tuple[Any, ...]:
    """``found[i]`` for each node id, or zeros of that node's shape (and namespace) where
    nothing arrived."""
    return tuple(namespace_of(values[i]).zeros_like(values[i]) if found[i] is None else found[i]
                 for i in ids)


def _namespace_of_values(values: Sequence[Any], graph: Graph) -> Any:
    """The namespace a run's values live in (that of its output)."""
    return namespace_of(values[graph.outputs[0]]) if graph.outputs else np


def _pad_tangents(graph: Graph, tangents: Sequence[Any]) -> list[Any]:
    """Tangents for the traced inputs, then ``None`` (zero) for parameters met while tracing."""
    return list(tangents) + [None] * len(graph.params)


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0
                   ) -> Callable[..., tuple[Any, Any]]:
    """``f(*xs) -> (value, gradient)`` for a scalar-valued ``fn`` (torch.func conventions)."""

    def wrapped(*xs: Any) -> tuple[Any, Any]:
        nums, single = _argnums("grad", argnums, len(xs))
        c, arrays = _compile_for("grad", fn, xs, wrt=nums)
        if c.out_shape != ():
            raise ShapeError(f"grad: the function's output has shape {c.out_shape}, expected a "
                             "scalar (); use vjp for tensor outputs")
        value, grads = c.value_and_backward(*arrays)
        chosen = tuple(grads[k] for k in nums)
        return value, chosen[0] if single else chosen

    return wrapped


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """Gradient of a scalar-valued ``fn`` w.r.t. argument(s) ``argnums``."""
    inner = value_and_grad(fn, argnums)

    def wrapped(*xs: Any) -> Any:
        return inner(*xs)[1]

    return wrapped


def vjp(fn: Callable[..., Any], *xs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``(out, vjp_fn)`` where ``vjp_fn(seed)`` returns one cotangent per argument."""
    c, arrays = _compile_for("vjp", fn, xs)
    values = c._values("vjp", arrays)

    def vjp_fn(seed: Any) -> tuple[Any, ...]:
        # One cotangent per argument (parameters met while tracing are held fixed).
        xp = _namespace_of_values(values, c.graph)
        return c._cotangents(values, c._seed("vjp", seed, xp))[: len(xs)]

    return values[c.graph.output], vjp_fn


def _tuple(op: str, name: str, value: Any) -> tuple[Any, ...]:
    if not isinstance(value, tuple | list):
        raise ShapeError(f"{op}: {name} must be a tuple (torch.func convention), found "
                         f"{type(value).__name__}")
    return tuple(value)


def _primals_and_tangents(op: str, primals: Any, tangents: Any
                          ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    primals = _tuple(op, "primals", primals)
    tangents = _tuple(op, "tangents", tangents)
    if len(primals) != len(tangents):
        raise ShapeError(f"{op}: {len(primals)} primals but {len(tangents)} tangents")
    return primals, tangents


def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]
        ) -> tuple[Any, Any]:
    """``(out, tangent_out)``: the forward-mode derivative of ``fn`` at ``primals`` along
    ``tangents``."""
    primals, tangents = _primals_and_tangents("jvp", primals, tangents)
    c, arrays = _compile_for("jvp", fn, primals)
    return c.value_and_jvp(arrays, tangents)


def hvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]
        ) -> tuple[Any, ...]:
    """Hessian-vector product H v of a scalar ``fn``, one entry per primal (forward-over-reverse).

    Equals ``torch.func.jvp(torch.func.grad(fn), primals, tangents)[1]``.

    ``fn`` is traced on every call (define-by-run). When the trace is the graph the last call
    traced (``_same_graph``: the same nodes, attributes, shapes, parameters and constants bit
    for bit), that call's compiled graph runs it: its recorded reverse pass, and from the
    second repeat its generated plan, instead of building both again. A different trace
    replaces the remembered one (one graph is kept, see ``_HvpMemo``).
    """
    primals, tangents = _primals_and_tangents("hvp", primals, tangents)
    c, arrays = _compile_for("hvp", fn, primals)
    if c.out_shape != ():
        raise ShapeError(f"grad: the function's output has shape {c.out_shape}, expected a "
                         "scalar ()")
    return _HVP_MEMO.recall(c).hvp(arrays, tangents)[: len(primals)]


def _same_graph(a: Graph, b: Graph) -> bool:
    """Whether ``a`` and ``b`` are the same traced graph: everything ``grad_graph`` and code
    generation read (dtype, nodes with their ops, parents, attributes, shapes and flags,
    inputs, outputs, the parameters by identity, the constants bit for bit)."""
    if (a.dtype != b.dtype or len(a.nodes) != len(b.nodes) or a.inputs != b.inputs
            or a.outputs != b.outputs or len(a.params) != len(b.params)
            or a.consts.keys() != b.consts.keys()):
        return False
    if any(p is not q for p, q in zip(a.params, b.params, strict=True)):
        return False
    for m, n in zip(a.nodes, b.nodes, strict=True):
        if (m.op is not n.op or m.parents != n.parents or m.kind != n.kind
                or m.shape != n.shape or m.requires_grad != n.requires_grad
                or m.index != n.index or m.dtype != n.dtype or m.name != n.name
                or not same_attrs(m.attrs, n.attrs)):
            return False
    return all(codegen.same_bits(c, b.consts[i]) for i, c in a.consts.items())


class _HvpMemo:
    """``tl.hvp``'s last traced graph: ``recall(c)`` returns the ``Compiled`` remembered for
    the same graph (see ``_same_graph``; the allocation limit is part of the key), or
    remembers ``c`` and returns it. One entry: what it keeps alive is one graph, its constants
    (copies made by the trace) and its generated plans' buffers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[Any, Compiled] | None = None

    def recall(self, c: Compiled) -> Compiled:
        key = max_elements()
        with self._lock:
            last = self._last
            if last is not None and last[0] == key and _same_graph(last[1].graph, c.graph):
                return last[1]
            self._last = (key, c)
            return c

    def clear(self) -> None:
        with self._lock:
            self._last = None


_HVP_MEMO = _HvpMemo()


def hessian(fn: Callable[..., Any], argnums: int = 0) -> Callable[..., Any]:
    """The Hessian of a scalar ``fn`` w.r.t. one argument: shape ``x.shape + x.shape``."""

    def wrapped(*xs: Any) -> Any:
        nums, single = _argnums("hessian", argnums, len(xs))
        if not single:
            raise ShapeError(f"hessian: argnums must be one int (one argument), found {argnums!r}")
        c, arrays = _compile_for("hessian", fn, xs, wrt=nums)
        if c.out_shape != ():
            raise ShapeError(f"grad: the function's output has shape {c.out_shape}, expected a "
                             "scalar ()")
        return c.hessian(arrays, nums[0])

    return wrapped


__all__ = ["Compiled", "compile", "grad", "value_and_grad", "vjp", "jvp", "hvp", "hessian"]
