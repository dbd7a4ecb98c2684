"""The compiled graph (TorchLean's GraphM) and its link to the runtime tape (LinkedSession).

A ``Graph`` is an SSA list of nodes over its input leaves and constants: node ``i`` applies a
registered primitive to earlier nodes. It is traced once from a function written with ``F`` and
operators (``GraphBuilder``), verified (``verify``), and then run many times on new inputs: no
input value is baked in, so reuse across inputs is sound.

Execution reads the same registry as the eager tape, and reverse mode is the same driver
(``autodiff.run_reverse`` over a plan from ``autodiff.reverse_plan``, cached here because shapes
are static), which is why ``to_tape(xs)`` followed by ``tape.backward_dense_all`` equals
``Compiled.backprop_all`` bitwise by construction.

``grad_graph`` records the reverse pass itself as graph nodes (the rules run on the builder's
``RecordingOps`` interpreter), so gradients are again a graph: forward mode over it gives
Hessian-vector products (forward-over-reverse).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from ..core.autodiff import Step, forward_tangents, reverse_pass, reverse_plan, run_reverse
from ..core.backend import as_dtype, namespace_of, numeric_array
from ..core.errors import ShapeError, TapeError, TraceError
from ..core.kernels import array_on, device_kernel_check
from ..core.node import Node
from ..core.registry import ARRAY_OPS, REGISTRY, Primitive
from ..core.shape import StaticShape
from .ops_interface import RecordingOps, Ref
from .tape import Tape


class GraphError(TapeError):
    """A malformed graph (found by ``Graph.verify``)."""


GraphNode = Node  # the graph's nodes are the one node type (``core.node``); the old name


class Var(Ref):
    """A traced graph value; F.* and operators on it record nodes."""

    __slots__ = ()


class Graph:
    """An SSA graph: input leaves, constants, primitive nodes, and output ids."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = as_dtype(dtype)
        self.nodes: list[GraphNode] = []
        self.inputs: list[int] = []
        self.consts: dict[int, Any] = {}
        self.outputs: list[int] = []
        self._plans: dict[Any, tuple[int, Any]] = {}  # execution plans, keyed by kind
        # Constants uploaded to a device namespace, once per graph and namespace (keyed by the
        # namespace; rebuilt when the graph gains constants).
        self._device_consts: dict[Any, tuple[int, dict[int, Any]]] = {}
        # Parameters met while tracing (``builder.use(param)``): inputs after the traced leaves,
        # whose current values a ``Compiled`` supplies itself on every run.
        self.params: list[Any] = []

    @property
    def output(self) -> int:
        if len(self.outputs) != 1:
            raise GraphError(f"graph has {len(self.outputs)} outputs, expected one")
        return self.outputs[0]

    def __len__(self) -> int:
        return len(self.nodes)

    # --- listing and checking ----------------------------------------------------------------

    def __str__(self) -> str:
        lines = [f"graph({', '.join(f'%{i}' for i in self.inputs)}) dtype={self.dtype.name}"]
        for i, node in enumerate(self.nodes):
            shape = f"{node.shape} {node.dtype.name}"
            if node.kind == "input":
                lines.append(f"  %{i} = input[{node.index}] : {shape}")
            elif node.kind == "const":
                lines.append(f"  %{i} = const : {shape}")
            else:
                assert node.op is not None
                args = ", ".join(f"%{p}" for p in node.parents)
                attrs = ", ".join(f"{k}={_short(v)}" for k, v in node.attrs.items() if k != "dtype")
                lines.append(f"  %{i} = {node.op.name}({args}{'; ' + attrs if attrs else ''})"
                             f" : {shape}")
        lines.append(f"  return {', '.join(f'%{o}' for o in self.outputs)}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz DOT of the graph (one box per node, edges from parents)."""
        out = ["digraph torchlean {", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
        for i, node in enumerate(self.nodes):
            label = (f"input[{node.index}]" if node.kind == "input" else
                     "const" if node.kind == "const" else node.op.name if node.op else "?")
            style = ", style=filled, fillcolor=lightblue" if node.kind == "input" else ""
            if i in self.outputs:
                style = ", style=filled, fillcolor=lightpink"
            out.append(f'  n{i} [label="%{i} {label}\\n{node.shape}"{style}];')
            for p in node.parents:
                out.append(f"  n{p} -> n{i};")
        out.append("}")
        return "\n".join(out)

    def verify(self) -> None:
        """Check ids, shapes and dtypes of every node against its primitive's shape rule."""
        for i, node in enumerate(self.nodes):
            if node.kind == "op":
                if node.op is None or node.op.name not in REGISTRY:
                    raise GraphError(f"node %{i}: unknown op")
                for p in node.parents:
                    if not 0 <= p < i:
                        raise GraphError(f"node %{i} ({node.op.name}): parent %{p} is not earlier")
                if len(node.parents) != len(node.op.inputs):
                    raise GraphError(f"node %{i} ({node.op.name}): {len(node.parents)} parents, "
                                     f"op takes {len(node.op.inputs)}")
                attrs = {k: v for k, v in node.attrs.items() if k != "dtype"}
                try:
                    shape = node.op.infer(*[self.nodes[p].shape for p in node.parents], **attrs)
                except ShapeError as exc:
                    raise GraphError(f"node %{i}: {exc}") from None
                if tuple(shape) != node.shape:
                    raise GraphError(f"node %{i} ({node.op.name}): recorded shape {node.shape}, "
                                     f"shape rule gives {tuple(shape)}")
            elif node.parents:
                raise GraphError(f"node %{i}: {node.kind} nodes have no parents")
            if node.dtype != self.dtype:
                raise GraphError(f"node %{i}: dtype {node.dtype} differs from graph {self.dtype}")
        for k, i in enumerate(self.inputs):
            if self.nodes[i].kind != "input" or self.nodes[i].index != k:
                raise GraphError(f"input {k} (%{i}) is not an input node")
        for i in self.consts:
            if self.nodes[i].kind != "const":
                raise GraphError(f"const %{i} is not a const node")
        for o in self.outputs:
            if not 0 <= o < len(self.nodes):
                raise GraphError(f"output %{o} is not a node")

    # --- execution ---------------------------------------------------------------------------

    def check_inputs(self, op: str, xs: Sequence[Any], allow_none: bool = False,
                     xp: Any = np) -> list[Any]:
        """Inputs as arrays of the graph's dtype and traced shapes (``None`` kept if allowed:
        a zero tangent that forward mode can skip), in namespace ``xp``: host data is uploaded
        to a device explicitly; data on another device is a ``DeviceError``."""
        if len(xs) != len(self.inputs):
            raise ShapeError(f"{op}: graph takes {len(self.inputs)} inputs, found {len(xs)}")
        arrays: list[Any] = []
        dtype = self.dtype
        for k, (x, i) in enumerate(zip(xs, self.inputs, strict=True)):
            if x is None and allow_none:
                arrays.append(None)
                continue
            arr = x if isinstance(x, xp.ndarray) and x.dtype == dtype else array_on(
                f"{op}: input {k}", x, xp, dtype)
            if arr.shape != self.nodes[i].shape:
                raise ShapeError(f"{op}: input {k} has shape {arr.shape}, the graph was traced "
                                 f"with {self.nodes[i].shape}")
            arrays.append(arr)
        return arrays

    def evaluate(self, xs: Sequence[Any], xp: Any = None) -> list[Any]:
        """The value of every node for inputs ``xs`` (already checked, in namespace ``xp``:
        by default the inputs' own, NumPy when there are none)."""
        if xp is None:
            xp = namespace_of(xs[0]) if len(xs) else np
        values: list[Any] = [None] * len(self.nodes)
        for i, x in zip(self.inputs, xs, strict=True):
            values[i] = x
        for i, c in (self.consts if xp is np else self.consts_on(xp)).items():
            values[i] = c
        for i, forward, parents, attrs in self._plan(xp):
            values[i] = forward(*[values[p] for p in parents], **attrs)
        return values

    def consts_on(self, xp: Any) -> dict[int, Any]:
        """The constants in namespace ``xp``: on a device, uploaded once per graph and namespace
        and kept (a graph replayed many times uploads its constants once)."""
        if xp is np:
            return self.consts
        cached = self._device_consts.get(xp)
        if cached is None or cached[0] != len(self.consts):
            arrays = {i: array_on(f"const %{i}", c, xp) for i, c in self.consts.items()}
            cached = self._device_consts[xp] = (len(self.consts), arrays)
        return cached[1]

    def _plan(self, xp: Any = np
              ) -> list[tuple[int, Callable[..., Any], tuple[int, ...], dict[str, Any]]]:
        """Forward steps ``(id, kernel, parents, attrs)``, built once per graph size (and
        namespace: on a device, each op is checked to have a device kernel when the plan is
        built, and nullary ops get ``xp=``)."""
        key = "forward" if xp is np else ("forward", xp)
        cached = self._plans.get(key)
        if cached is None or cached[0] != len(self.nodes):
            check = device_kernel_check(xp)
            steps = []
            for i, n in enumerate(self.nodes):
                if n.kind != "op" or n.op is None:
                    continue
                if check is not None:
                    check(n.op, xp)
                attrs = n.attrs if xp is np or n.parents else {**n.attrs, "xp": xp}
                steps.append((i, n.op.forward, n.parents, attrs))
            cached = self._plans[key] = (len(self.nodes), steps)
        return cached[1]

    def _reverse_plan(self) -> list[Step | None]:
        """The shared driver's reverse plan of this graph, built once per graph size."""
        cached = self._plans.get("reverse")
        if cached is None or cached[0] != len(self.nodes):
            cached = self._plans["reverse"] = (len(self.nodes), reverse_plan(self.nodes))
        return cached[1]

    def array_ops(self) -> Any:
        """The Ops interpreter the reverse and forward-mode passes compute with: the kernels a
        rule's ``ops.mul`` calls (``engine.codegen`` emits calls to the same ones)."""
        return ARRAY_OPS

    def backprop(self, values: Sequence[Any], out: int, seed: Any,
                 on_leaf: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Cotangent of every node (``None`` where unreached) from ``seed`` at node ``out``:
        the shared reverse driver over the cached plan (so the linked tape agrees bitwise);
        ``on_leaf(i, g)`` as each leaf's cotangent becomes final."""
        return run_reverse(self._reverse_plan(), values, out, seed,
                           self.nodes[out].requires_grad, self.array_ops(), on_leaf)

    def tangents(self, values: Sequence[Any], input_tangents: Sequence[Any]) -> list[Any]:
        seeds = {i: t for i, t in zip(self.inputs, input_tangents, strict=True) if t is not None}
        return forward_tangents(self.nodes, values, seeds, self.array_ops())

    def lazy_tangents(self, xs: Sequence[Any], input_tangents: Sequence[Any],
                      xp: Any = np) -> list[Any] | None:
        """The tangent of every output for inputs ``xs`` (checked, in namespace ``xp``), zeros
        where none arrives, computing only the forward values the tangent rules read.

        ``evaluate`` then ``tangents`` computes every node's value first; forward mode over a
        gradient graph (hvp) never reads most of them: the gradients themselves (``g^T x`` per
        weight: outputs whose tangents are wanted, not their values) and the cotangents only
        they use. Here a node's value is computed when a rule first hands it to a kernel (or
        reads anything but its static shape and dtype), with its missing ancestors, in graph
        order: the same kernels on the same arrays, so the same bits as the full pass (W4's
        hvp: 3 of its 22 products are never run). ``None`` where a rule needs more than that
        (anything raised): the caller runs the full pass, which raises what is genuine."""
        values = _LazyValues(self, xs, xp)
        seeds = {i: t for i, t in zip(self.inputs, input_tangents, strict=True) if t is not None}
        try:
            found = forward_tangents(self.nodes, cast(Sequence[Any], values), seeds,
                                     _ForcingOps(self.array_ops(), values))
            outs = [values.force_any(found[i]) for i in self.outputs]
        except Exception:  # noqa: BLE001  (a rule that needs a value's contents: the full pass)
            return None
        return [xp.zeros(self.nodes[i].shape, dtype=self.dtype) if t is None else t
                for t, i in zip(outs, self.outputs, strict=True)]

    def to_tape(self, xs: Sequence[Any], xp: Any = np) -> tuple[Tape, list[int], list[int]]:
        """Replay the graph on a fresh eager tape of namespace ``xp``'s device; node ids
        coincide with graph ids."""
        arrays = self.check_inputs("to_tape", xs, xp=xp)
        tape = Tape(dtype=self.dtype, xp=xp)
        consts = self.consts_on(xp)
        leaf_ids: list[int] = []
        for i, node in enumerate(self.nodes):
            if node.kind == "input":
                tid = tape.leaf(arrays[node.index], requires_grad=node.requires_grad)
                leaf_ids.append(tid)
            elif node.kind == "const":
                tid = tape.leaf(consts[i], requires_grad=False)
            else:
                assert node.op is not None
                tid = tape.record(node.op, node.parents, node.attrs)
            assert tid == i
        return tape, leaf_ids, list(self.outputs)


_MISSING = object()


class _Lazy(StaticShape):
    """A graph value not computed yet (``Graph.lazy_tangents``): its static shape and dtype;
    any other attribute, and every kernel call (``_ForcingOps``), computes it first."""

    __slots__ = ("id", "shape", "dtype", "_values")

    def __init__(self, i: int, shape: tuple[int, ...], dtype: Any, values: _LazyValues) -> None:
        self.id = i
        self.shape = shape
        self.dtype = dtype
        self._values = values

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d value")
        return self.shape[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._values.force(self.id), name)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        return np.asarray(self._values.force(self.id), *args, **kwargs)


class _LazyValues:
    """The values ``forward_tangents`` indexes: computed ones, or ``_Lazy`` placeholders that
    compute themselves (and their missing ancestors, in graph order) on demand."""

    def __init__(self, graph: Graph, xs: Sequence[Any], xp: Any) -> None:
        n = len(graph.nodes)
        self.nodes = graph.nodes
        self.vals: list[Any] = [_MISSING] * n
        for i, x in zip(graph.inputs, xs, strict=True):
            self.vals[i] = x
        for i, c in (graph.consts if xp is np else graph.consts_on(xp)).items():
            self.vals[i] = c
        self.steps = {i: (forward, parents, attrs)
                      for i, forward, parents, attrs in graph._plan(xp)}
        self.lazy = [_Lazy(i, node.shape, node.dtype, self) for i, node in enumerate(graph.nodes)]

    def __len__(self) -> int:
        return len(self.vals)

    def __getitem__(self, i: int) -> Any:
        v = self.vals[i]
        return self.lazy[i] if v is _MISSING else v

    def force(self, i: int) -> Any:
        vals = self.vals
        if vals[i] is not _MISSING:
            return vals[i]
        todo: set[int] = set()
        stack = [i]
        while stack:
            j = stack.pop()
            if j in todo or vals[j] is not _MISSING:
                continue
            todo.add(j)
            stack.extend(self.nodes[j].parents)
        for j in sorted(todo):  # ids are in graph order (SSA)
            forward, parents, attrs = self.steps[j]
            vals[j] = forward(*[vals[p] for p in parents], **attrs)
        return vals[i]

    def force_any(self, value: Any) -> Any:
        """``value`` with any placeholder in it (one level of lists and tuples) computed."""
        if isinstance(value, _Lazy):
            return self.force(value.id)
        if isinstance(value, list | tuple) and any(isinstance(v, _Lazy) for v in value):
            return type(value)(self.force_any(v) for v in value)
        return value


class _ForcingOps:
    """An Ops interpreter that computes placeholders before calling the real one's kernel."""

    def __init__(self, base: Any, values: _LazyValues) -> None:
        self._base = base
        self._values = values
        self.name = base.name

    def __getattr__(self, name: str) -> Callable[..., Any]:
        kernel = getattr(self._base, name)
        force = self._values.force_any

        def call(*args: Any, **attrs: Any) -> Any:
            return kernel(*[force(a) for a in args], **{k: force(v) for k, v in attrs.items()})

        setattr(self, name, call)
        return call


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    return repr(value)


class GraphBuilder:
    """Records ops on ``Var``s into a ``Graph``: the owner of those refs (an
    ``ops_interface.Owner``)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.ops = RecordingOps(self, "graph")  # rules run on it record graph nodes

    def var(self, i: int) -> Var:
        node = self.graph.nodes[i]
        return Var(self, i, node.shape, node.dtype)

    def input(self, shape: Sequence[int], requires_grad: bool = True) -> Var:
        """A new input leaf; ``requires_grad=False`` marks data that never needs a gradient, so
        no rule computes one for it."""
        g = self.graph
        shape_t = tuple(int(d) for d in shape)
        g.nodes.append(Node(None, (), {}, bool(requires_grad), shape_t, dtype=g.dtype,
                            kind="input", index=len(g.inputs)))
        g.inputs.append(len(g.nodes) - 1)
        return self.var(len(g.nodes) - 1)

    def use(self, param: Any) -> Var:
        """A parameter as a graph input (the same input if used twice)."""
        g = self.graph
        for k, p in enumerate(g.params):
            if p is param:
                return self.var(g.inputs[len(g.inputs) - len(g.params) + k])
        if param.dtype != g.dtype:
            raise ShapeError(f"use: parameter {param.name!r} is {param.dtype}, the graph is "
                             f"{g.dtype}")
        var = self.input(param.shape, requires_grad=param.requires_grad)
        g.params.append(param)
        return var

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        if training and p > 0:
            raise TraceError("dropout: a traced graph would bake one random mask into every run; "
                             "train with dropout on the eager backend, or trace in eval mode")
        return x

    def value(self, ref: Ref) -> Any:
        raise TraceError("value: a traced value has no value while tracing; run the compiled "
                         "graph and read its outputs")

    def const(self, value: Any) -> Var:
        g = self.graph
        # Host data stays on the host (the graph uploads its constants once per device); an
        # array already on a device stays there.
        arr = numeric_array("const", value, namespace_of(value))
        if arr.dtype.kind == "f" and arr.dtype != g.dtype:
            raise ShapeError(f"const: dtype {arr.dtype} differs from the graph's {g.dtype}")
        arr = arr.astype(g.dtype)
        g.nodes.append(Node(None, (), {}, False, tuple(arr.shape), dtype=g.dtype, kind="const"))
        g.consts[len(g.nodes) - 1] = arr
        return self.var(len(g.nodes) - 1)

    def record(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> Var:
        """Record ``prim`` on refs this builder owns (the caller checked: ``F.owner_of``)."""
        return self.var(self.record_node(prim, [r.id for r in refs], attrs))

    def record_node(self, prim: Primitive, ids: Sequence[int], attrs: dict[str, Any]) -> int:
        """Append one op node over node ids after checking its shape rule; returns its id."""
        g = self.graph
        nodes = g.nodes
        if not ids and "dtype" in prim.attrs:
            attrs = {**attrs, "dtype": g.dtype}
        attrs = prim.check_attrs(attrs)  # kinds checked and normalised before the shape rule
        shape = tuple(prim.infer(*[nodes[i].shape for i in ids],
                                 **{k: v for k, v in attrs.items() if k != "dtype"}))
        requires_grad = not prim.nondiff and any(nodes[i].requires_grad for i in ids)
        nodes.append(Node(prim, tuple(ids), attrs, requires_grad, shape, dtype=g.dtype))
        return len(nodes) - 1


def trace(fn: Callable[..., Any], shapes: Sequence[Sequence[int]], dtype: Any,
          wrt: Sequence[int] | None = None, owner_arg: bool = False) -> Graph:
    """Trace ``fn`` on fresh input leaves of the given shapes into a verified graph.

    Only the leaves in ``wrt`` (default: all) are differentiable; the others are data. With
    ``owner_arg`` the builder (the owner of the traced refs) is passed first, for functions that
    need an owner even without inputs (``owner.use(param)``).
    """
    graph = Graph(dtype)
    builder = GraphBuilder(graph)
    leaves = [builder.input(s, requires_grad=wrt is None or k in wrt)
              for k, s in enumerate(shapes)]
    result = fn(builder, *leaves) if owner_arg else fn(*leaves)
    outs = result if isinstance(result, tuple | list) else (result,)
    if not outs:
        raise TraceError("trace: the function returned nothing; return a ref computed with F.*")
    for o in outs:
        if not isinstance(o, Ref):
            raise TraceError(f"trace: the function must return refs computed from its inputs "
                             f"with F.* / operators, found {type(o).__name__}")
        if o.owner is not builder:
            raise TraceError("trace: the function returned a ref from another graph or session")
    graph.outputs = [o._id for o in outs]
    graph.verify()
    return graph


def grad_graph(graph: Graph, wrt: Sequence[int] | None = None) -> Graph:
    """A graph computing the gradient of ``graph``'s scalar output w.r.t. its inputs.

    The forward nodes are copied, then the reverse pass is *recorded* (rules run on the
    builder's ``RecordingOps``), so the result is itself differentiable. Outputs: one gradient
    per requested input.
    """
    out = graph.output
    if graph.nodes[out].shape != ():
        raise ShapeError(f"grad: the function's output has shape {graph.nodes[out].shape}, "
                         "expected a scalar ()")
    g2 = Graph(graph.dtype)
    g2.nodes = list(graph.nodes)
    g2.inputs = list(graph.inputs)
    g2.consts = dict(graph.consts)
    g2.params = list(graph.params)
    builder = GraphBuilder(g2)
    values = [builder.var(i) for i in range(len(graph.nodes))]
    seed = builder.const(np.ones((), dtype=graph.dtype))  # uploaded with the other constants
    cotangents = reverse_pass(g2.nodes, values, out, seed, builder.ops)
    outputs = []
    for k in (range(len(graph.inputs)) if wrt is None else wrt):
        i = graph.inputs[k]
        c = cotangents[i]
        outputs.append((builder.ops.zeros_like(values[i]) if c is None else c)._id)
    g2.outputs = outputs
    return g2
