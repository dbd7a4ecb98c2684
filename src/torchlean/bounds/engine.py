"""The bound engine: IBP forward sweep and CROWN backward passes over a compiled ``Graph``.

``propagate`` walks ``graph.nodes`` in order. Every node first gets its interval from its
primitive's rule (``ibp``); nodes whose value feeds a relaxed nonlinearity (relu, tanh, sigmoid,
max pooling) and the output then get CROWN bounds, intersected with the interval ones (both are
sound, so the intersection is; it also makes CROWN never looser than IBP).

A CROWN bound of ``sum(nu0 * v_target)`` is evaluated as a Lagrangian dual (weak duality): for
*any* multipliers ``nu_n`` (one array per node, the familiar back-propagated linear coefficients)
the sum over nodes of ``min over v_n in its box of (terms in v_n)`` is a lower bound. The
multipliers are chosen by the usual backward pass (``nu_parent = J^T nu`` through linear ops, the
relaxation slope times ``nu`` through nonlinear ones), computed in plain float64; the lower bound
is then evaluated rigorously, so rounding in the backward pass costs tightness, never soundness:

- linear op ``v = J x + b``: the term ``nu . b`` (outward rounded) plus the residual of the rounded
  ``J^T nu``, at most ``gamma_n |nu|^T |J| max|x|``;
- relu / tanh / sigmoid: ``min over [l, u] of nu * sigma(v) - nu_x * v``, per neuron, in closed
  form (relu: the least of the values at l, u and 0; tanh / sigmoid, with CROWN's tangent or
  chord slopes: ends of the concave part, a tangent of the convex part at its critical point);
- max pooling (non-overlapping, unpadded windows: ``max_pool2d`` and the ``max_pool`` an ONNX
  MaxPool imports as): ``max(v) >= v_j`` for the window's entry with the greatest lower bound
  (with alpha-CROWN's weights, ``max(v) >= sum_j w_j v_j`` for a convex mix; see
  ``_pool_mixed``), ``max(v) <= max u`` (or ``= v_j`` when that entry dominates);
- matrix products with one constant factor (``matmul``, ``matmul_nd``, ``bmm``; ONNX MatMul and
  Gemm), ``linear``, convolutions, permutes and every other primitive declared linear (data
  movement, gathers, sums; through the op's own VJP): linear ops as above;
- elementwise ``mul`` by a constant: linear as above; a constant the network computes (ONNX
  Div's ``inv(c)``), known only as an interval ``[c - r, c + r]``, multiplies by ``c`` with the
  residual ``|nu| r max|x|`` as slack;
- data inputs, constants and ops without a CROWN handler: ``nu . v`` over the node's interval
  (recorded in ``Propagation.fallbacks`` for the caller to report).

With ``kernel=True`` each op's float32 rounding is a perturbation ``|delta_n| <= eps_n`` (from the
interval rules), contributing ``-|nu_n| . eps_n``; the bound then holds for the float32 kernels.

Examples are independent when every node that varies with the input has the batch as its first
axis and no op mixes examples ("batched" mode): multipliers have shape
``(B or 1, K, *node_shape[1:])`` for ``K`` specification rows per example, and a multiplier that
does not depend on the example keeps a batch axis of 1. Otherwise (a graph without a batch axis,
such as VNN-COMP's ``(1,)``-input nets, or one that moves the batch axis) the whole graph is one
example ("whole" mode): ``B = 1`` and multipliers have shape ``(1, K, *node_shape)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..core.registry import ARRAY_OPS, REGISTRY
from ..engine.graph import Graph, GraphNode
from .ibp import RULES, Context, Interval, linear_point
from .rounding import ETA64, U64, down, gamma, libm_hi, libm_lo, mag, mid_rad, sum_down, up

Array = Any

# Memory budget of one backward pass (entries of the largest multiplier); targets with many
# neurons are split into chunks of specification rows.
CHUNK_ENTRIES = 1 << 23
# A product by a layer's weights skips the rows of W whose multipliers are all zero when at most
# this share of them is nonzero (below it, gathering the rest costs less than it saves).
SPARSE_SHARE = 0.8
# A handler's return value when it has also added the node's own kernel-rounding term
# ``|nu| . eps`` (``lower`` adds it otherwise).
COVERED = 2


class BoundsError(TorchLeanError):
    """Bad input to the bound engine (boxes, specifications, graphs it cannot bound)."""


class UnsupportedOpError(BoundsError):
    """A primitive in the graph has no bound rule."""


RELAXED = ("relu", "tanh", "sigmoid", "max_pool2d", "max_pool", "exp", "softplus")
_MATMULS = ("matmul", "matmul_nd", "bmm")
# Max pooling's upper side by a chord on the entry of greatest upper bound (``pool_upper``);
# False: the constant greatest upper bound of the window (auto_LiRPA's CROWN).
POOL_CHORD = True
# Elementwise maps by constants: they keep an interval image exact.
_SHIFTS = ("add", "sub", "add_scalar", "scale", "mul", "reshape", "flatten", "detach", "permute")
# Linear primitives that act along axis 0 (which is the example axis in batched mode).
_AXIS0_OPS = ("transpose2d", "transpose3d_first_to_last", "transpose3d_last_to_first",
              "slice_range0", "pad_range0", "concat_dim0", "concat_vectors", "gather_row",
              "gather_rows_nat", "gather_scalar", "gather_scalar_nat", "gather_vec_nat",
              "scatter_add_nat", "scatter_add_row", "scatter_add_vec", "take", "take_adjoint",
              "sum", "sum_to", "swap_adjacent_at_depth")


class Propagation:
    """Bounds of every node of one graph for one input box (see the module docstring)."""

    def __init__(self, graph: Graph, consts: dict[int, Array], lower: Array, upper: Array,
                 *, kernel: bool, n_data: int) -> None:
        self.graph = graph
        self.nodes: list[GraphNode] = graph.nodes
        self.kernel = kernel
        self.ctx = Context.for_dtype(graph.dtype)
        self.ivals: list[Interval | None] = [None] * len(graph.nodes)
        self.variable = [False] * len(graph.nodes)
        self.batch = int(np.shape(lower)[0]) if np.ndim(lower) else 1
        self.graph_batch = self.batch  # the traced batch; ``subset`` narrows ``batch`` only
        self.data_ids = set(graph.inputs[:n_data])
        self.box_lo, self.box_hi = lower, upper
        for i in self.data_ids:
            self.ivals[i] = Interval(np.asarray(lower, np.float64), np.asarray(upper, np.float64))
            self.variable[i] = True
        for i, value in consts.items():
            v = np.asarray(value, np.float64)
            self.ivals[i] = Interval(v, v)
        for i, node in enumerate(graph.nodes):
            if node.kind == "op":
                self.variable[i] = any(self.variable[p] for p in node.parents)
        self._cache: dict[Any, Any] = {}
        self.alpha: dict[int, Array] = {}
        self.linear_only = False  # IBP with the specification folded: no relaxations
        self.fallbacks: set[tuple[int, str]] = set()  # (node, op) CROWN bounded by intervals
        self.last_spec: tuple[Array, Any] | None = None  # specification rows and their bounds
        # Extra multipliers added at nodes before ``lower`` back-substitutes (node -> (B, K,
        # *rest)): beta-CROWN's split constraints (bounds.beta); set only for one call.
        self.extra: dict[int, Array] = {}
        # When a dict, ``lower`` records there the multiplier reaching each node (node -> (B or
        # 1, K, *rest)); at the data input it is the bound's linear coefficient of each input
        # (branch and bound splits the input that weighs most).
        self.trace: dict[int, Array] | None = None
        # Batched mode: axis 0 of every varying node is the example. Otherwise ("whole" mode)
        # the graph is one example and multipliers carry the full node shape.
        self.whole = not all(self._batch_safe(i) for i, nd in enumerate(graph.nodes)
                             if self.variable[i])
        if self.whole:
            self.batch = self.graph_batch = 1

    # --- IBP ---------------------------------------------------------------------------------

    def interval(self, i: int) -> Interval:
        """Interval of op node ``i`` from its parents' (stores and returns it)."""
        node = self.nodes[i]
        assert node.op is not None
        rule = RULES.get(node.op.name)
        if rule is None:
            raise UnsupportedOpError(
                f"bounds: primitive {node.op.name!r} (node %{i}) has no bound rule; supported: "
                f"{', '.join(sorted(RULES))}")
        ins = [self.ivals[p] for p in node.parents]
        assert all(x is not None for x in ins)
        attrs = {k: v for k, v in node.attrs.items() if k != "dtype"}
        w = ins[0]
        if (node.op.name == "linear" and w is not None and w.lo is w.hi
                and np.ndim(w.lo) == 2 and np.ndim(ins[2].lo) == 2):  # type: ignore[union-attr]
            # constant weights: |W| formed once, shared with CROWN's residual term
            out = linear_point(w.lo, ins[1], ins[2], self.ctx,  # type: ignore[arg-type]
                               self.abs_const(node.parents[0]))
        else:
            out = rule(ins, attrs, self.ctx)  # type: ignore[arg-type]
        lo, hi = np.broadcast_to(out.lo, node.shape), np.broadcast_to(out.hi, node.shape)
        eps = out.eps if self.kernel else 0.0
        if self.kernel and np.any(eps):
            lo, hi = down(lo - eps), up(hi + eps)
        self.ivals[i] = Interval(np.asarray(lo, np.float64), np.asarray(hi, np.float64),
                                 np.broadcast_to(eps, node.shape) if np.any(eps) else 0.0)
        return self.ivals[i]  # type: ignore[return-value]

    # --- CROWN ---------------------------------------------------------------------------------

    def _batch_safe(self, i: int) -> bool:
        """Whether varying node ``i`` keeps axis 0 as the example axis (examples independent)."""
        node = self.nodes[i]
        shape = node.shape
        if len(shape) < 1 or shape[0] != self.batch:
            return False
        if node.op is None:
            return True
        name = node.op.name
        if name in _MATMULS:
            a, b = node.parents
            # the batch must be a leading (broadcast) axis, or the row axis of the left factor
            return not self.variable[b] or len(self.nodes[b].shape) >= 3
        if name == "permute":
            return tuple(node.attrs["perm"])[0] == 0
        if name in _AXIS0_OPS:
            return False
        if name in ("reduce_sum", "reduce_mean"):
            return int(node.attrs["axis"]) % max(1, len(self.nodes[node.parents[0]].shape)) != 0
        return True

    def batched(self, i: int) -> bool:
        """Whether node ``i`` varies with the input (and, batched, has the batch first)."""
        if self.whole:
            return self.variable[i]
        shape = self.nodes[i].shape
        return self.variable[i] and len(shape) >= 1 and shape[0] == self.graph_batch

    def rest(self, i: int) -> tuple[int, ...]:
        """Node ``i``'s shape after the example axis (all of it in whole mode)."""
        shape = tuple(self.nodes[i].shape)
        return shape if self.whole else shape[1:]

    def bshape(self, node: GraphNode) -> tuple[int, ...]:
        """A batched node's shape with this propagation's batch size."""
        shape = tuple(node.shape)
        return (self.batch,) + (shape if self.whole else shape[1:])

    def bx(self, i: int) -> Interval:
        """Node ``i``'s interval with an example axis first (added in whole mode)."""
        iv = self.ivals[i]
        assert iv is not None
        if not self.whole:
            return iv
        eps = iv.eps[None] if np.ndim(iv.eps) else iv.eps
        return Interval(np.asarray(iv.lo)[None], np.asarray(iv.hi)[None], eps)

    def copy(self) -> Propagation:
        """An independent copy (intervals copied, so tightening one leaves the other)."""
        new = copy.copy(self)
        new.ivals = [None if iv is None else Interval(iv.lo, iv.hi, iv.eps) for iv in self.ivals]
        new._cache = dict(self._cache)
        new.alpha, new.fallbacks, new.extra = {}, set(self.fallbacks), {}
        return new

    def subset(self, rows: Array) -> Propagation:
        """The same bounds restricted to the examples ``rows`` (for alpha-CROWN's optimiser)."""
        sub = copy.copy(self)
        sub.batch = len(rows)
        sub._cache, sub.alpha, sub.fallbacks, sub.extra = {}, {}, self.fallbacks, {}
        sub.ivals = list(self.ivals)
        for i, iv in enumerate(self.ivals):
            if iv is not None and self.batched(i):
                eps = iv.eps[rows] if np.ndim(iv.eps) else iv.eps
                sub.ivals[i] = Interval(iv.lo[rows], iv.hi[rows], eps)
        return sub

    def targets(self) -> set[int]:
        """Nodes whose bounds a relaxation depends on (inputs of relaxed ops), beyond the first
        layer (an affine image of the box by one mixing op already has exact interval bounds)."""
        mixes = self._mixes()
        out = set()
        for node in self.nodes:
            if node.kind == "op" and node.op is not None and node.op.name in RELAXED:
                p = node.parents[0]
                if self.variable[p] and mixes[p] != 1 and mixes[p] != 0:
                    out.add(p)
        return out

    def _mixes(self) -> list[int | None]:
        """Per node: how many mixing linear ops (linear, matmul, conv) lie between it and the
        data input, if only those, data movement and shifts/scalings by constants do (exact
        under interval arithmetic while it is at most 1); ``None`` otherwise."""
        out: list[int | None] = [0] * len(self.nodes)
        for i, node in enumerate(self.nodes):
            if node.op is None or not self.variable[i]:
                continue
            var = [p for p in node.parents if self.variable[p]]
            counts = [out[p] for p in var]
            name = node.op.name
            if len(var) != 1 or counts[0] is None:
                out[i] = None
            elif name in ("linear", "conv", "conv2d", "conv_core") + _MATMULS:
                out[i] = counts[0] + 1
            elif name in _SHIFTS or (node.op.linear and len(node.parents) == 1):
                out[i] = counts[0]
            else:
                out[i] = None
        return out

    def crown_node(self, i: int) -> tuple[Array, Array]:
        """CROWN lower and upper bounds of node ``i`` (batched), chunked over its neurons.

        When every consumer is a relu, neurons whose interval is stable (one sign) in every
        example keep it: the relu relaxation of a stable neuron is exact whatever its bounds.
        """
        box = self.bx(i)
        shape = self.nodes[i].shape if self.whole else self.bshape(self.nodes[i])
        rest = self.rest(i)
        n = int(np.prod(rest))
        lo = np.array(box.lo, dtype=np.float64).reshape(self.batch, n)
        hi = np.array(box.hi, dtype=np.float64).reshape(self.batch, n)
        consumers = [self.nodes[j].op for j in self.readers()[i]]
        if consumers and all(c is not None and c.name == "relu" for c in consumers):
            wanted = np.flatnonzero(((lo < 0) & (hi > 0)).any(axis=0))
        else:
            wanted = np.arange(n)
        width = max(1, CHUNK_ENTRIES // max(1, self.batch * self._widest()))
        for start in range(0, len(wanted), width):
            which = wanted[start:start + width]
            nu0 = Unit(np.concatenate([which, which]), np.repeat([1.0, -1.0], len(which)),
                       (1, 2 * len(which)) + rest)
            bound = self.lower(i, nu0)
            lo[:, which] = bound[:, : len(which)]
            hi[:, which] = -bound[:, len(which):]
        return lo.reshape(shape), hi.reshape(shape)

    def _widest(self) -> int:
        key = ("widest", None)
        if key not in self._cache:
            self._cache[key] = max(int(np.prod(self.rest(i)))
                                   for i, n in enumerate(self.nodes) if n.shape)
        return self._cache[key]  # type: ignore[no-any-return]

    def lower(self, target: int, nu0: Array) -> Array:
        """A rigorous lower bound, per example and row, of ``sum(nu0[:, k] * v_target)``."""
        terms: list[Array] = []   # (B or 1, K) values whose exact sum is the dual bound...
        slack: list[Array] = []   # ...minus these nonnegative error bounds
        nu: dict[int, Array] = {target: nu0}
        for p, extra in self.extra.items():
            # the bound is then of sum(nu0 * v_target) + sum(extra * v_p): sound as any dual
            if p < target:
                self.accumulate(nu, p, np.asarray(extra, np.float64), slack)
        for i in range(target, -1, -1):
            v = nu.pop(i, None)
            if v is None:
                continue
            node = self.nodes[i]
            if isinstance(v, Compact | Unit) and (self.trace is not None or node.op is None
                                                  or node.op.name != "linear"):
                v = v.dense()
            if isinstance(v, Scaled):
                if _linear_scaled(self, i, v, nu, terms, slack):
                    if self.kernel and np.any(self.bx(i).eps):
                        slack.append(v.abs_dot(self.bx(i).eps))
                    continue
                v = v.dense()
            handler = None
            if node.op is not None:
                handler = _HANDLERS.get(node.op.name, _generic_linear if node.op.linear else None)
            if self.linear_only and node.op is not None and node.op.name in RELAXED:
                handler = None
            done: int = False
            if self.trace is not None:
                self.trace[i] = v.dense() if isinstance(v, Scaled) else v
            if handler is not None and i not in self.data_ids and self.batched(i):
                done = handler(self, i, v, nu, terms, slack)
            if not done:
                if isinstance(v, Compact | Unit):
                    v = v.dense()
                if node.op is not None and not self.linear_only:
                    self.fallbacks.add((i, node.op.name))
                terms.append(self._concretize(v, self.bx(i)))
            elif self.kernel and done != COVERED:
                if isinstance(v, Compact | Unit):
                    v = v.dense()
                eps = self.bx(i).eps
                if np.any(eps):
                    slack.append(_dot_rest(np.abs(v), eps, up_bound=True))
        total = np.zeros((1, nu0.shape[1]))
        for t in terms:
            total = total + t
        err = np.zeros((1, nu0.shape[1]))
        for s in slack:
            err = err + s
        n = len(terms) + len(slack) + 2
        mags = sum(np.abs(t) for t in terms)
        return down(total - up(err * (1 + gamma(n))) - gamma(n) * mags - n * ETA64)

    def _concretize(self, v: Array, box: Interval) -> Array:
        """Lower bound of ``sum(v * x)`` over ``x`` in ``box`` (node-shaped), per (b, k):
        ``v . c - |v| . r`` for a centre and radius enclosing the box, widened by gamma_n."""
        if not finite_box(box):
            lo, hi = _with_k(box.lo), _with_k(box.hi)
            with np.errstate(invalid="ignore"):
                t = np.where(v > 0, v * lo, np.where(v < 0, v * hi, 0.0))
            return _sum_rest_down(t)
        c, r = mid_rad(box.lo, box.hi)
        a = np.abs(v)
        n = int(np.prod(np.shape(v)[2:])) + 4
        if v.shape[0] == 1 and np.shape(c)[0] == 1:  # one example: one product for |v|'s sums
            centre = v.reshape(v.shape[1], -1) @ c.reshape(-1)
            both = a.reshape(v.shape[1], -1) @ np.stack([r.reshape(-1), np.abs(c).reshape(-1)],
                                                        axis=1)
            radius, size = both[:, 0], both[:, 1]
            return down(centre - radius - gamma(2 * n) * (size + radius) - n * ETA64)[None]
        centre = _matvec(v, _with_k(c))
        radius = _matvec(a, _with_k(r))
        size = _matvec(a, _with_k(np.abs(c)))
        return down(centre - radius - gamma(2 * n) * (size + radius) - n * ETA64)

    def accumulate(self, nu: dict[int, Array], p: int, contribution: Array,
                   slack: list[Array]) -> None:
        """Add a multiplier contribution to parent ``p`` (rounding of the sum in ``slack``)."""
        prev = nu.get(p)
        if prev is None:
            nu[p] = contribution
            return
        if isinstance(prev, Scaled | Compact):
            prev = prev.dense()
        if isinstance(contribution, Scaled | Compact):
            contribution = contribution.dense()
        total = prev + contribution
        nu[p] = total
        slack.append(_dot_rest(np.abs(total), self.vmax(p), up_bound=True) * (2 * U64))

    def readers(self) -> list[list[int]]:
        """Per node, the nodes that take it as an input (computed once)."""
        key = ("readers", None)
        if key not in self._cache:
            out: list[list[int]] = [[] for _ in self.nodes]
            for j, node in enumerate(self.nodes):
                for p in node.parents:
                    out[p].append(j)
            self._cache[key] = out
        return self._cache[key]  # type: ignore[no-any-return]

    def abs_const(self, p: int) -> Array:
        """``|c|`` of a constant node (its point value), computed once."""
        key = ("abs", p)
        if key not in self._cache:
            box = self.ivals[p]
            assert box is not None
            self._cache[key] = np.abs(box.lo)
        return self._cache[key]

    def vmax(self, p: int) -> Array:
        key = ("vmax", p)
        if key not in self._cache:
            box = self.bx(p)
            self._cache[key] = mag(box.lo, box.hi)
        return self._cache[key]

    def point(self, p: int) -> Array | None:
        """The value of a constant node whose interval is a single point, else ``None``."""
        box = self.ivals[p]
        if box is None or self.variable[p] or not np.array_equal(box.lo, box.hi):
            return None
        return box.lo


# --- helpers over (B or 1, K, *rest) multipliers -------------------------------------------------


def _dot_down(v: Array, b: Array) -> Array:
    """Lower bound of ``sum(v * b)`` over the node axes for a vector ``b`` on the last axis."""
    n = int(np.prod(np.shape(v)[2:])) + 4
    s = (v.reshape(-1, v.shape[-1]) @ b).reshape(v.shape[:2] + (-1,)).sum(axis=-1)
    m = (np.abs(v).reshape(-1, v.shape[-1]) @ np.abs(b)).reshape(v.shape[:2] + (-1,)).sum(-1)
    return down(s - gamma(2 * n) * m - n * ETA64)


def _with_k(a: Array) -> Array:
    """A node-shaped array (B, *rest) as (B, 1, *rest) against multipliers."""
    a = np.asarray(a)
    return a.reshape((a.shape[0], 1) + a.shape[1:])


def _rest_axes(a: Array) -> tuple[int, ...]:
    return tuple(range(2, np.ndim(a)))


def _sum_rest_down(t: Array) -> Array:
    axes = _rest_axes(t)
    if not axes:
        return down(t)
    return sum_down(t, axes)


def _dot_rest(abs_nu: Array, m: Array, up_bound: bool = True) -> Array:
    """An upper bound of ``sum(|nu| * m)`` over the node axes (both nonnegative)."""
    m = np.asarray(m)
    mk = _with_k(m) if m.ndim else m
    s = _matvec(abs_nu, mk) if _rest_axes(abs_nu) and m.ndim else (
        np.sum(abs_nu * mk, axis=_rest_axes(abs_nu)) if _rest_axes(abs_nu) else abs_nu * mk)
    n = int(np.prod(np.shape(abs_nu)[2:])) + 2
    return up(s * (1 + gamma(n)) + n * ETA64)


def _const_term(prop: Propagation, v: Array, p: int, node: GraphNode, sign: float) -> Array:
    """Lower bound of ``sum(sign * v * c)`` for a constant operand ``p`` broadcast to ``node``."""
    box = prop.ivals[p]  # constant: node-shaped, broadcast against (B, *rest)
    assert box is not None
    lo = np.broadcast_to(box.lo, prop.bshape(node))
    hi = np.broadcast_to(box.hi, prop.bshape(node))
    if sign < 0:
        lo, hi = -hi, -lo
    return prop._concretize(v, Interval(lo, hi))


# --- handlers: pass multipliers to parents, add dual terms; False = concretize instead ---------

# A handler returns False (concretize instead), True, or COVERED.
Handler = Callable[[Propagation, int, Array, dict[int, Array], list[Array], list[Array]], int]
_HANDLERS: dict[str, Handler] = {}


def _handler(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            _HANDLERS[name] = fn
        return fn

    return register


def _matrix(prop: Propagation, p: int) -> Array | None:
    key = ("point", p)
    if key not in prop._cache:
        prop._cache[key] = prop.point(p)
    return prop._cache[key]


@_handler("linear")
def _linear(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
            slack: list[Array]) -> int:
    node = prop.nodes[i]
    pw, pb, px = node.parents
    w, b = _matrix(prop, pw), _matrix(prop, pb)
    if w is None or b is None or not prop.batched(px):
        return False
    out_f, in_f = w.shape
    key = ("absJ", i)
    if key not in prop._cache:
        prop._cache[key] = prop.vmax(px) @ prop.abs_const(pw).T
    if isinstance(v, Compact):
        return _linear_shared(prop, i, v.vals, w, b, px, nu, terms, slack, v.cols)
    if isinstance(v, Unit) and (len(v.shape) != 3 or prop.whole):
        v = v.dense()
    if isinstance(v, Unit) or (v.ndim == 3 and v.shape[0] == 1 and not prop.whole):
        return _linear_shared(prop, i, v if isinstance(v, Unit) else v[0], w, b, px, nu,
                              terms, slack)
    contribution = _times_w(v, w).reshape(v.shape[:-1] + (in_f,))
    terms.append(_dot_down(v, b))
    # each entry of the product sums out_f terms
    slack.append(_dot_rest(np.abs(v), prop._cache[key], True) * gamma(max(out_f, in_f) + 4))
    prop.accumulate(nu, px, contribution, slack)
    return True


def _linear_shared(prop: Propagation, i: int, v: Array, w: Array, b: Array, px: int,
                   nu: dict[int, Array], terms: list[Array], slack: list[Array],
                   live: Array | None = None) -> int:
    """``linear`` under multipliers ``v`` (K, out_f) shared by every example: the same dual
    terms as the general path (``_dot_down`` for the bias, ``_dot_rest`` for the product's
    residual and for the kernel's rounding ``eps``), with the three magnitude sums taken as one
    product ``|v| [|b|, |J| max|x|, eps]``, and only over the neurons whose multipliers are not
    all zero (as ``_times_w``; ``live``: ``v`` holds only those columns, from a ``Compact``;
    a ``Unit`` ``v`` reads rows of W).
    Each column is its own sum of nonnegative terms, so its ``gamma_n`` bound holds whatever
    the product's blocking; dropped terms are exact zeros."""
    out_f, in_f = w.shape
    absj = prop._cache[("absJ", i)]  # (B, out_f)
    eps = prop.bx(i).eps if prop.kernel else 0.0
    with_eps = bool(np.any(eps))
    if isinstance(v, Unit):
        # crown_node's unit rows +-e_j: pick rows of W, b and the magnitude columns (exact)
        rows, signs = v.rows, v.signs
        contribution = w[rows] * signs[:, None]
        centre = b[rows] * signs
        mags = np.abs(b[rows])
        res = absj[:, rows]
        kern = np.broadcast_to(eps, absj.shape)[:, rows] if with_eps else None
        n = 5
    else:
        if live is None:
            live = np.flatnonzero(v.any(axis=0))
            if len(live) <= SPARSE_SHARE * out_f:
                v = np.take(v, live, axis=1)
            else:
                live = None
        if live is not None:
            got = prop._cache.get(("rows", i))
            if got is None or got[0] is not live:  # the relu's columns are one array per pass
                got = prop._cache[("rows", i)] = (live, w[live], b[live])
            w, b, absj = got[1], got[2], np.take(absj, live, axis=1)
            if with_eps:
                eps = np.broadcast_to(eps, prop.bshape(prop.nodes[i]))[:, live]
        contribution = v @ w
        cols = [np.abs(b)[:, None], absj.T]
        if with_eps:
            cols.append(np.broadcast_to(eps, absj.shape).T)
        a = np.abs(v)
        sums = a @ np.concatenate(cols, axis=1)  # (K, 1 + B [+ B])
        centre = v @ b
        mags = sums[:, 0]
        bsz = absj.shape[0]
        res = sums[:, 1:1 + bsz].T
        kern = sums[:, 1 + bsz:].T if with_eps else None
        n = out_f + 4
    terms.append(down(centre - gamma(2 * n) * mags - n * ETA64)[None])
    n2 = out_f + 2
    slack.append(up(res * (1 + gamma(n2)) + n2 * ETA64) * gamma(max(out_f, in_f) + 4))
    if kern is not None:
        slack.append(up(kern * (1 + gamma(n2)) + n2 * ETA64))
    box = _input_box(prop, i, px) if prop.trace is None and in_f == contribution.shape[1] else None
    if box is None:
        prop.accumulate(nu, px, contribution[None], slack)
        return COVERED
    # The layer reads the data input (maybe through a reshape) and nothing else does: the dual
    # term of the input, min over the box of contribution . x, as ``_concretize`` takes it,
    # on the product while it is at hand (|.| in place: the array is this function's own).
    c, r_c = box
    centre = contribution @ c
    both = np.abs(contribution, out=contribution) @ r_c
    n = in_f + 4
    terms.append(down(centre - both[:, 0] - gamma(2 * n) * (both[:, 1] + both[:, 0])
                      - n * ETA64)[None])
    return COVERED


def _input_box(prop: Propagation, i: int, px: int) -> tuple[Array, Array] | None:
    """For a layer ``i`` whose input ``px`` is the data input of one example, or a reshape of
    it, read by this layer alone (so no other multiplier reaches it), with a finite box and no
    rounding in the reshape: the box's flat centre ``c`` and the columns ``[r, |c|]``."""
    if px in prop.extra:
        return None
    key = ("input_box", i)
    if key not in prop._cache:
        prop._cache[key] = _find_input_box(prop, i, px)
    return prop._cache[key]  # type: ignore[no-any-return]


def _find_input_box(prop: Propagation, i: int, px: int) -> tuple[Array, Array] | None:
    readers = prop.readers()
    node = prop.nodes[px]
    src = px
    if node.op is not None:
        if (node.op.name not in ("reshape", "flatten") or len(node.parents) != 1
                or readers[px] != [i] or np.any(prop.bx(px).eps)):
            return None
        src = node.parents[0]
    if src not in prop.data_ids or readers[src] != [px if src != px else i] or src in prop.extra:
        return None
    box = prop.bx(src)
    lo, hi = np.asarray(box.lo), np.asarray(box.hi)
    if lo.shape[0] != 1 or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return None
    c, r = mid_rad(lo.reshape(-1), hi.reshape(-1))
    return c, np.stack([r, np.abs(c)], axis=1)


def _times_w(v: Array, w: Array) -> Array:
    """``v W`` over the last axis, as rows ``(rows, in_f)``: the same products as the dense
    GEMM without the ones known to be zero. Only the columns of ``v`` that are nonzero
    somewhere take part: a relu whose neuron is inactive in every example passes a zero
    multiplier, and on the VNN-COMP MNIST networks most first- and second-layer neurons are
    (206 and 181 of 256 on 256x6 ``prop_0_0.03``). Dropping zero terms leaves every sum with
    fewer terms, so the caller's error bound for the dense sum still holds."""
    out_f = w.shape[0]
    v2 = v.reshape(-1, out_f)
    live = np.flatnonzero(v2.any(axis=0))
    if len(live) > SPARSE_SHARE * out_f:
        return v2 @ w
    return np.take(v2, live, axis=1) @ w[live]


def _adjoint(prop: Propagation, i: int, v: Array, px: int, inputs: list[Any],
             needed: tuple[bool, ...]) -> Array:
    """The op's own VJP rule applied to the multipliers (examples and rows stacked)."""
    node = prop.nodes[i]
    assert node.op is not None
    x_shape = prop.nodes[px].shape
    bk = v.shape[0] * v.shape[1]
    g = np.ascontiguousarray(np.broadcast_to(v, v.shape)).reshape((bk,) + node.shape[1:])
    dummy = np.broadcast_to(np.zeros((), np.float64), (bk,) + x_shape[1:])
    args = [dummy if a is None else a for a in inputs]
    attrs = {k: val for k, val in node.attrs.items() if k != "dtype"}
    out = node.op.apply_vjp(ARRAY_OPS, g, args, None, attrs, needed)
    k = needed.index(True)
    return np.asarray(out[k]).reshape(v.shape[:2] + x_shape[1:])


@_handler("conv2d", "conv")
def _conv(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
          slack: list[Array]) -> bool:
    node = prop.nodes[i]
    pw, pb, px = node.parents
    w, b = _matrix(prop, pw), _matrix(prop, pb)
    if (prop.whole or w is None or b is None or not prop.batched(px)
            or len(node.shape) != w.ndim):
        return False
    contribution = _adjoint(prop, i, v, px, [w, b, None], (False, False, True))
    # sum(v * b) = sum over channels of b_c times v's channel sums (no full-size product)
    per_channel = v.reshape(v.shape[:3] + (-1,))
    n = int(np.prod(v.shape[2:])) + 4
    centre = per_channel.sum(axis=-1) @ b
    size = np.abs(per_channel).sum(axis=-1) @ np.abs(b)
    terms.append(down(centre - gamma(2 * n) * size - n * ETA64))
    key = ("absJ", i)
    if key not in prop._cache:
        attrs = {k: val for k, val in node.attrs.items() if k != "dtype"}
        assert node.op is not None
        prop._cache[key] = node.op.forward(np.abs(w), np.zeros_like(b), prop.vmax(px), **attrs)
    slack.append(_dot_rest(np.abs(v), prop._cache[key], True) * gamma(int(w.size) + 4))
    prop.accumulate(nu, px, contribution, slack)
    return True


@_handler("avg_pool2d", "avg_pool", "avg_pool2d_pad")
def _avg_pool(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
              slack: list[Array]) -> bool:
    node = prop.nodes[i]
    px = node.parents[0]
    if prop.whole or not prop.batched(px):
        return False
    contribution = _adjoint(prop, i, v, px, [None], (True,))
    key = ("absJ", i)
    if key not in prop._cache:
        attrs = {k: val for k, val in node.attrs.items() if k != "dtype"}
        assert node.op is not None
        prop._cache[key] = node.op.forward(prop.vmax(px), **attrs)
    n = int(np.prod(prop.nodes[px].shape[1:]))
    slack.append(_dot_rest(np.abs(v), prop._cache[key], True) * gamma(n + 4))
    prop.accumulate(nu, px, contribution, slack)
    return True


@_handler(*_MATMULS)
def _matmul(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
            slack: list[Array]) -> bool:
    """A matrix product with one constant factor ``W`` (ONNX MatMul, Gemm's transposes):
    ``nu_x = v W^T`` (x on the left) or ``W^T v`` (x on the right), batched over the leading
    axes; no dual term (no offset), the backward rounding as for ``linear``."""
    node = prop.nodes[i]
    a, b = node.parents
    if prop.variable[a] == prop.variable[b]:
        return False  # two varying factors: bilinear, bounded by intervals
    left = prop.variable[a]
    px, pw = (a, b) if left else (b, a)
    w = _matrix(prop, pw)
    o, xs = tuple(node.shape), tuple(prop.nodes[px].shape)
    if (w is None or w.ndim < 2 or len(xs) < 2 or len(xs) != len(o) or xs[:-2] != o[:-2]
            or w.ndim > len(o) or not prop.batched(px)):
        return False
    if not prop.whole and w.ndim == len(o) > 2 and w.shape[0] != 1:
        return False  # a factor per example: not a shared constant
    wp = w.reshape((1,) * (len(o) - w.ndim) + w.shape)
    if prop.whole:
        wk = wp.reshape((1, 1) + wp.shape)
    elif len(o) == 2:  # rows are examples: (B, K, m) @ (m, k) as row vectors
        wk = w
    else:  # the example axis is a leading (broadcast) axis of W: insert the row axis
        wk = wp.reshape((1, 1) + wp.shape[1:])
    wt = np.swapaxes(wk, -1, -2)
    contribution = np.matmul(v, wt) if left else np.matmul(wt, v)
    if contribution.shape[2:] != prop.rest(px):
        return False
    key = ("absJ", i)
    if key not in prop._cache:
        aw = np.abs(w)
        prop._cache[key] = (np.matmul(prop.vmax(px), aw) if left
                            else np.matmul(aw, prop.vmax(px)))
    n = (w.shape[-1] if left else w.shape[-2]) + 4
    slack.append(_dot_rest(np.abs(v), prop._cache[key], True) * gamma(n))
    prop.accumulate(nu, px, contribution, slack)
    return True


@_handler("permute")
def _permute(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
             slack: list[Array]) -> bool:
    px = prop.nodes[i].parents[0]
    if not prop.batched(px):
        return False
    inv = np.argsort(tuple(prop.nodes[i].attrs["perm"]))
    if prop.whole:
        axes = (0, 1) + tuple(int(j) + 2 for j in inv)
    else:  # perm[0] == 0 (batch-safe): the example axis stays first
        axes = (0, 1) + tuple(int(j) + 1 for j in inv[1:])
    prop.accumulate(nu, px, np.transpose(v, axes), slack)
    return True


@_handler("transpose2d")
def _transpose2d(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
                 slack: list[Array]) -> bool:
    px = prop.nodes[i].parents[0]
    if not prop.whole or not prop.batched(px):
        return False
    prop.accumulate(nu, px, np.swapaxes(v, -1, -2), slack)
    return True


def _generic_linear(prop: Propagation, i: int, v: Array, nu: dict[int, Array],
                    terms: list[Array], slack: list[Array]) -> bool:
    """Any other primitive declared linear (movement, gathers, sums, pooling sums) with one
    varying input: ``f(x, c) = f(x, 0) + f(0, c)``; the multiplier passes through the op's own
    VJP one specification row at a time (needs the traced batch), ``f(0, c)`` is a dual term."""
    node = prop.nodes[i]
    op = node.op
    assert op is not None
    var = [p for p in node.parents if prop.variable[p]]
    if (not op.linear or len(var) != 1 or (not prop.whole and prop.batch != prop.graph_batch)
            or not prop.batched(var[0])
            or (len(node.parents) > 1 and op.name not in ("concat_dim0", "concat_vectors"))):
        return False
    px = var[0]
    x_shape = tuple(prop.nodes[px].shape)
    consts = []
    for p in node.parents:
        c = None if p == px else _matrix(prop, p)
        if p != px and c is None:
            return False
        consts.append(c)
    attrs = {k: val for k, val in node.attrs.items() if k != "dtype"}
    zero = np.zeros(x_shape)
    if len(node.parents) > 1:
        offset = np.asarray(op.forward(*[zero if c is None else c for c in consts], **attrs))
        if np.any(offset):
            ob = offset[None] if prop.whole else offset
            terms.append(prop._concretize(v, Interval(ob, ob)))
    needed = tuple(p == px for p in node.parents)
    args = [zero if c is None else c for c in consts]
    full = tuple(node.shape)
    rows = []
    for k in range(v.shape[1]):
        g = v[0, k] if prop.whole else np.broadcast_to(v[:, k], full)
        out = op.apply_vjp(ARRAY_OPS, np.ascontiguousarray(g), args, None, attrs, needed)
        rows.append(np.asarray(out[needed.index(True)], np.float64).reshape(x_shape))
    contribution = np.stack(rows, axis=1 if not prop.whole else 0)
    if prop.whole:
        contribution = contribution[None]
    key = ("absJ", i)
    if key not in prop._cache:
        vm = prop.vmax(px)
        fm = np.asarray(op.forward(*[(vm[0] if prop.whole else vm) if c is None else np.abs(c)
                                     for c in consts], **attrs), np.float64)
        prop._cache[key] = fm[None] if prop.whole else fm
    n = max(int(np.prod(x_shape)), int(np.prod(full))) + 4
    slack.append(_dot_rest(np.abs(v), prop._cache[key], True) * gamma(n))
    prop.accumulate(nu, px, contribution, slack)
    return True


@_handler("reshape", "flatten", "detach")
def _reshape(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
             slack: list[Array]) -> bool:
    px = prop.nodes[i].parents[0]
    if not prop.batched(px):
        return False
    prop.accumulate(nu, px, v.reshape(v.shape[:2] + prop.rest(px)), slack)
    return True


@_handler("add", "sub")
def _add_sub(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
             slack: list[Array]) -> bool:
    node = prop.nodes[i]
    assert node.op is not None
    signs = (1.0, 1.0) if node.op.name == "add" else (1.0, -1.0)
    for p in node.parents:
        if prop.variable[p] and not prop.batched(p):
            return False
    for p, sign in zip(node.parents, signs, strict=True):
        if prop.variable[p]:
            w = v if sign > 0 else -v
            if prop.nodes[p].shape != node.shape:
                # a varying operand broadcast against the other: its multiplier sums over the
                # broadcast axes (the sum's rounding, gamma_n |v| . max|x|, is slack)
                rest = prop.rest(p)
                w = _sum_to(w, rest)
                if w is None:
                    return False
                n = int(np.prod(prop.rest(i))) // max(1, int(np.prod(rest))) + 4
                wide = np.broadcast_to(prop.vmax(p).reshape(
                    (prop.batch,) + (1,) * (len(prop.rest(i)) - len(rest)) + rest),
                    prop.bshape(node))
                slack.append(_dot_rest(np.abs(v), wide, True) * gamma(n))
            prop.accumulate(nu, p, w, slack)
        else:
            terms.append(_const_term(prop, v, p, node, sign))
    return True


def _sum_to(v: Array, rest: tuple[int, ...]) -> Array | None:
    """Multipliers ``(B, K, *r)`` summed down to ``(B, K, *rest)`` (``rest`` broadcasts to r)."""
    r = v.shape[2:]
    lead = len(r) - len(rest)
    if lead < 0:
        return None
    out = v.sum(axis=tuple(range(2, 2 + lead))) if lead else v
    for j, (a, b) in enumerate(zip(rest, r[lead:], strict=True)):
        if a == 1 and b != 1:
            out = out.sum(axis=2 + j, keepdims=True)
        elif a != b:
            return None
    return out


@_handler("mul")
def _mul(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
         slack: list[Array]) -> bool:
    node = prop.nodes[i]
    a, b = node.parents
    var, const = (a, b) if prop.variable[a] else (b, a)
    c = _matrix(prop, const)
    rad = None
    box = prop.ivals[const]
    if (c is None and not prop.variable[const] and box is not None
            and np.all(np.isfinite(box.lo)) and np.all(np.isfinite(box.hi))):
        # a constant the network computes (the reciprocal of an input normalisation's Div): its
        # float32 value lies in its interval; the midpoint is the multiplier and the rest,
        # ``|v| |x| r``, is slack (not an interval fallback, which drops x's dependence)
        c, rad = mid_rad(np.asarray(box.lo, np.float64), np.asarray(box.hi, np.float64))
    if prop.variable[const] or c is None or prop.nodes[var].shape != node.shape:
        return False
    cfull = np.broadcast_to(c, prop.bshape(node))
    cb = _with_k(cfull)
    slack.append(_dot_rest(np.abs(v), np.abs(cfull) * prop.vmax(var), True) * (2 * U64))
    if rad is not None:
        spread = up(np.broadcast_to(rad, prop.bshape(node)) * prop.vmax(var))
        slack.append(_dot_rest(np.abs(v), spread, True))
    prop.accumulate(nu, var, v * cb, slack)
    return True


@_handler("scale")
def _scale(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
           slack: list[Array]) -> bool:
    px = prop.nodes[i].parents[0]
    c64 = float(prop.nodes[i].attrs["c"])
    c32 = float(np.float32(c64))
    # The kernel may multiply by either reading of c: the difference is a bounded perturbation.
    spread = abs(c64 - c32) + 2 * U64 * abs(c64)
    slack.append(_dot_rest(np.abs(v), prop.vmax(px), True) * up(spread))
    prop.accumulate(nu, px, v * c64, slack)
    return True


@_handler("add_scalar")
def _add_scalar(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
                slack: list[Array]) -> bool:
    node = prop.nodes[i]
    c64 = float(node.attrs["c"])
    c32 = float(np.float32(c64))
    lo = np.full(prop.bshape(node), min(c64, c32))
    hi = np.full(prop.bshape(node), max(c64, c32))
    terms.append(prop._concretize(v, Interval(lo, hi)))
    prop.accumulate(nu, node.parents[0], v, slack)
    return True


def relu_slopes(lo: Array, hi: Array) -> tuple[Array, Array]:
    """CROWN's default relu slopes: adaptive lower slope (1 if u > -l), upper chord slope."""
    unstable = (lo < 0) & (hi > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        chord = np.where(unstable, hi / (hi - lo), (lo >= 0).astype(np.float64))
    lower = np.where(unstable, (hi > -lo).astype(np.float64), (lo >= 0).astype(np.float64))
    return lower, chord


@_handler("relu")
def _relu(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
          slack: list[Array]) -> bool:
    """Slopes 0 / 1 on stable neurons; on unstable ones ``alpha`` in [0, 1] where the multiplier
    is >= 0 and the chord slope ``s = u / (u - l)`` where it is negative.

    The dual term ``min over [l, u] of nu * relu(t) - nu_x * t`` (at l, u or 0) is then exactly 0
    on stable neurons and where ``nu >= 0`` (``nu_x = fl(nu * alpha)`` lies in ``[0, nu]``); where
    ``nu < 0`` it is ``min(-nu_x l, (nu - nu_x) u)``, which equals ``-nu_x l`` up to the error of
    the rounded chord slope, at most ``8 u64 |nu| (u - l)`` (a slack term).
    """
    px = prop.nodes[i].parents[0]
    box = prop.bx(px)
    assert box is not None
    if not finite_box(box):
        return False
    alpha = prop.alpha.get(i)
    if alpha is None and v.shape[0] == 1 and prop.batch == 1:
        _relu_one(prop, px, v, nu, terms, slack)
        return True
    lower, upper, l_unstable, w_unstable = _slopes(prop, px)
    if alpha is not None:
        unstable = _with_k(w_unstable > 0)
        lower_k = np.where(unstable, np.clip(alpha, 0.0, 1.0), _with_k(lower))
    else:
        lower_k = _with_k(lower)
    parent_op = prop.nodes[px].op
    if (alpha is None and v.shape[0] == 1 < prop.batch and px not in nu
            and parent_op is not None and parent_op.name == "linear"):
        # Shared multipliers (an intermediate bound's identity rows): keep nu_x factored, so the
        # next linear layer multiplies per example over its active neurons only.
        vx: Any = Scaled(v, upper, lower - upper)
    else:
        vx = np.where(v >= 0, lower_k, _with_k(upper))
        np.multiply(vx, v, out=vx)
    # sum of nu * s * l over nu < 0 (>= 0); it differs from the stored nu_x * l by one rounding
    # per entry, at most u64 |nu| (u - l): slack.
    t = _matvec(np.minimum(v, 0.0), _with_k(upper * l_unstable))
    n = int(np.prod(v.shape[2:])) + 4
    terms.append(down(-t * (1 + gamma(2 * n)) - ETA64 * n))
    slack.append(_dot_rest(np.abs(v), w_unstable, True) * (10 * U64))
    prop.accumulate(nu, px, vx, slack)
    return True


def _relu_one(prop: Propagation, px: int, v: Array, nu: dict[int, Array], terms: list[Array],
              slack: list[Array]) -> None:
    """``_relu`` for one example with CROWN's slopes: the same multiplier and dual terms, with
    the work on the active and unstable neurons only. An inactive neuron's slope is 0 for
    either sign of the multiplier, and a stable neuron's terms are exactly 0 (dropping exact
    zeros from a sum leaves its ``gamma_n`` bound valid). The multiplier passed on is kept
    ``Compact`` (the values on those neurons), which a linear layer multiplies as it is."""
    key = ("relu_one", px)
    if key not in prop._cache:
        lower, upper, l_unstable, w_unstable = _slopes(prop, px)
        lo = prop.bx(px).lo.reshape(-1)
        cols = np.flatnonzero((lo >= 0) | (w_unstable.reshape(-1) > 0))
        prop._cache[key] = (cols, lower.reshape(-1)[cols], upper.reshape(-1)[cols],
                            (upper * l_unstable).reshape(-1)[cols],
                            w_unstable.reshape(-1)[cols], bool(np.any(w_unstable)))
    cols, lo_s, up_s, ul, width, any_unstable = prop._cache[key]
    v2 = v.reshape(v.shape[1], -1)
    vc = np.take(v2, cols, axis=1)
    n = v2.shape[1] + 4
    if any_unstable:
        # terms over the unstable columns (ul and width are 0 on the active ones)
        t = np.minimum(vc, 0.0) @ ul
        terms.append(down(-t * (1 + gamma(2 * n)) - ETA64 * n)[None])
        n2 = v2.shape[1] + 2
        s = up((np.abs(vc) @ width) * (1 + gamma(n2)) + n2 * ETA64)
        slack.append(s[None] * (10 * U64))
        vc *= np.where(vc >= 0, lo_s, up_s)  # slope 1 on the active columns either way
    compact = Compact(vc, cols, v.shape)
    op = prop.nodes[px].op
    keep = not prop.whole and v.ndim == 3 and op is not None and op.name == "linear"
    prop.accumulate(nu, px, compact if keep else compact.dense(), slack)


class Unit:
    """Unit multipliers ``(1, K, *rest)``: row k is ``signs[k]`` at the flat neuron
    ``rows[k]`` and 0 elsewhere (``crown_node``'s rows; a linear layer reads rows of W)."""

    def __init__(self, rows: Array, signs: Array, shape: tuple[int, ...]) -> None:
        self.rows, self.signs, self.shape = rows, signs, shape

    def dense(self) -> Array:
        out = np.zeros((len(self.rows), int(np.prod(self.shape[2:]))))
        out[np.arange(len(self.rows)), self.rows] = self.signs
        return out.reshape(self.shape)


class Compact:
    """Multipliers ``(1, K, n)`` of one example that are zero outside the columns ``cols``:
    their values there, ``vals`` (K, len(cols)). A definition (``dense`` is exact)."""

    def __init__(self, vals: Array, cols: Array, shape: tuple[int, ...]) -> None:
        self.vals, self.cols, self.shape = vals, cols, shape

    def dense(self) -> Array:
        out = np.zeros((self.vals.shape[0], int(np.prod(self.shape[2:]))))
        out[:, self.cols] = self.vals
        return out.reshape(self.shape)


class Scaled:
    """The multiplier ``v * neg + max(v, 0) * (pos - neg)`` (per example ``neg``, ``pos - neg``
    of shape (B, *rest); ``v`` shared, (1, K, *rest)), kept factored. It is a definition, not a
    computation: the value is exact, and what is computed from it is bounded where it is used.
    """

    def __init__(self, v: Array, neg: Array, diff: Array) -> None:
        self.v, self.vp = v, np.maximum(v, 0.0)
        self.neg, self.diff = neg, diff
        self.shape = (neg.shape[0],) + v.shape[1:]

    def dense(self) -> Array:
        out = self.v * _with_k(self.neg)
        out += self.vp * _with_k(self.diff)  # rounding: callers add the same slack as for vx
        return out

    def abs_dot(self, m: Array) -> Array:
        """An upper bound of ``sum(|nu| * m)`` over the node axes (``m >= 0``, node-shaped)."""
        m = np.broadcast_to(m, self.shape[:1] + self.shape[2:])
        return up((_matvec(np.abs(self.v), _with_k(self.neg * m))
                   + _matvec(self.vp, _with_k(np.abs(self.diff) * m))) * (1 + gamma(8)))


def _linear_scaled(prop: Propagation, i: int, v: Scaled, nu: dict[int, Array],
                   terms: list[Array], slack: list[Array]) -> bool:
    """A linear layer under a factored multiplier: per example, only the rows of ``W`` whose
    neurons are active (or unstable) take part in the product."""
    node = prop.nodes[i]
    if node.op is None or node.op.name != "linear":
        return False
    pw, pb, px = node.parents
    w, b = _matrix(prop, pw), _matrix(prop, pb)
    if (w is None or b is None or not prop.batched(px) or len(prop.rest(i)) != 1
            or prop.whole):
        return False
    out_f, in_f = w.shape
    shared, pos = v.v[0], v.vp[0]
    contribution = np.empty((prop.batch, shared.shape[0], in_f))
    for e in range(prop.batch):
        act = np.flatnonzero(v.neg[e])
        acc = shared[:, act] @ (v.neg[e, act, None] * w[act])
        unstable = np.flatnonzero(v.diff[e])
        if unstable.size:
            acc += pos[:, unstable] @ (v.diff[e, unstable, None] * w[unstable])
        contribution[e] = acc
    n = 2 * out_f + 8
    centre = _matvec(v.v, _with_k(v.neg * b)) + _matvec(v.vp, _with_k(v.diff * b))
    size = v.abs_dot(np.abs(b))
    terms.append(down(centre - gamma(n) * size - n * ETA64))
    key = ("absJ", i)
    if key not in prop._cache:
        prop._cache[key] = prop.vmax(px) @ np.abs(w).T
    slack.append(v.abs_dot(prop._cache[key]) * gamma(n))
    prop.accumulate(nu, px, contribution, slack)
    return True


def _matvec(a: Array, b: Array) -> Array:
    """``sum(a * b)`` over the node axes, as one batched matrix-vector product."""
    a2 = a.reshape(a.shape[:2] + (-1,))
    b2 = b.reshape((b.shape[0], -1, 1))
    return np.matmul(a2, b2)[..., 0]


def _slopes(prop: Propagation, px: int) -> tuple[Array, Array, Array, Array]:
    """Lower and upper slopes, ``l`` on unstable neurons (else 0), ``u - l`` likewise."""
    key = ("slopes", px)
    if key not in prop._cache:
        box = prop.bx(px)
        assert box is not None
        lower, upper = relu_slopes(box.lo, box.hi)
        unstable = (box.lo < 0) & (box.hi > 0)
        prop._cache[key] = (lower, upper, np.where(unstable, box.lo, 0.0),
                            np.where(unstable, up(box.hi - box.lo), 0.0))
    return prop._cache[key]


def _sigma(name: str, t: Array) -> Array:
    with np.errstate(over="ignore"):
        return np.tanh(t) if name == "tanh" else 1.0 / (1.0 + np.exp(-t))


def _dsigma(name: str, t: Array) -> Array:
    """The derivative, computed (absolute error well below 32 u64: see ``min_g``)."""
    y = _sigma(name, t)
    return 1.0 - y * y if name == "tanh" else y * (1.0 - y)


def _critical(name: str, a: Array) -> Array:
    """Approximately the t < 0 where sigma'(t) = a (NaN where there is none)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if name == "tanh":
            r = np.sqrt(1.0 - a)
            return np.where((a > 0) & (a < 1), -np.arctanh(np.minimum(r, 1 - 1e-16)), np.nan)
        r = np.sqrt(1.0 - 4.0 * a)
        y = 0.5 * (1.0 - r)
        return np.where((a > 0) & (a < 0.25), np.log(y / (1.0 - y)), np.nan)


def _g_lo(name: str, t: Array, a: Array) -> Array:
    """A lower bound of ``sigma(t) - a t`` (transcendental within LIBM_ULPS, one product)."""
    return down(libm_lo(_sigma(name, t)) - up(a * t) - 2 * U64 * np.abs(a * t))


def min_g(name: str, lo: Array, hi: Array, a: Array) -> Array:
    """A rigorous lower bound of ``min over [lo, hi] of sigma(t) - a t`` (tanh, sigmoid).

    sigma is convex on t <= 0 and concave on t >= 0. On the concave part the minimum is at an
    end; on the convex part [p, q] the tangent of g at any m in it lies below g, so
    ``g >= g(m) + g'(m) (t - m)``, least at p or q; m is the (approximate) critical point, so the
    bound is nearly exact, and g'(m) is taken as an interval to cover its rounding.
    """
    best = np.minimum(_g_lo(name, lo, a), _g_lo(name, hi, a))
    straddles = (lo < 0) & (hi > 0)
    best = np.where(straddles, np.minimum(best, _g_lo(name, np.zeros_like(lo), a)), best)
    p, q = lo, np.minimum(hi, 0.0)
    convex = lo < 0
    m = _critical(name, a)
    m = np.where(np.isnan(m), np.where(_dsigma(name, p) >= a, p, q), m)
    m = np.clip(m, p, q)
    d = _dsigma(name, m) - a
    e = 32 * U64 * (1.0 + np.abs(a))
    lin = np.minimum(np.minimum((d - e) * (p - m), (d + e) * (p - m)),
                     np.minimum((d - e) * (q - m), (d + e) * (q - m)))
    tangent = down(_g_lo(name, m, a) + lin - 8 * U64 * np.abs(lin) - ETA64)
    return np.where(convex, np.minimum(best, tangent), best)


def max_g(name: str, lo: Array, hi: Array, a: Array) -> Array:
    """A rigorous upper bound of ``max over [lo, hi] of sigma(t) - a t``, by symmetry:
    tanh(-s) = -tanh(s) and sigmoid(-s) = 1 - sigmoid(s)."""
    low = min_g(name, -hi, -lo, a)
    return up(-low) if name == "tanh" else up(1.0 - low)


def smooth_slopes(name: str, lo: Array, hi: Array) -> tuple[Array, Array]:
    """CROWN's slopes for the lower and the upper line: the tangent at the midpoint where sigma
    bends away from the line's side, the chord otherwise. Any slope is sound here (the dual
    term bounds sigma(t) - a t itself), so these only steer tightness."""
    mid = 0.5 * lo + 0.5 * hi
    width = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        chord = np.where(width > 1e-9, (_sigma(name, hi) - _sigma(name, lo)) / width,
                         _dsigma(name, mid))
    tangent = _dsigma(name, mid)
    lower = np.where(hi <= 0, tangent, chord)
    upper = np.where(lo >= 0, tangent, chord)
    return lower, upper


@_handler("tanh", "sigmoid")
def _smooth(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
            slack: list[Array]) -> bool:
    node = prop.nodes[i]
    assert node.op is not None
    px = node.parents[0]
    box = prop.bx(px)
    assert box is not None
    if not finite_box(box):
        return False
    key = ("smooth", px)
    if key not in prop._cache:
        name = node.op.name
        a_lo, a_hi = smooth_slopes(name, box.lo, box.hi)
        # nu >= 0: nu * min(sigma(t) - a_lo t); nu < 0: nu * max(sigma(t) - a_hi t)
        prop._cache[key] = (a_lo, a_hi, min_g(name, box.lo, box.hi, a_lo),
                            max_g(name, box.lo, box.hi, a_hi))
    a_lo, a_hi, h_lo, h_hi = prop._cache[key]
    a_lo, a_hi, h_lo, h_hi = _with_k(a_lo), _with_k(a_hi), _with_k(h_lo), _with_k(h_hi)
    chosen = prop.alpha.get(i)
    if chosen is not None:  # alpha-CROWN's slopes, per row: (B, K, *rest) each
        name = node.op.name
        lo_k, hi_k = _with_k(box.lo), _with_k(box.hi)
        a_lo, a_hi = chosen
        h_lo, h_hi = min_g(name, lo_k, hi_k, a_lo), max_g(name, lo_k, hi_k, a_hi)
    t = np.where(v >= 0, v * h_lo, v * h_hi)
    terms.append(_sum_rest_down(t))
    vx = v * np.where(v >= 0, a_lo, a_hi)
    slack.append(_dot_rest(np.abs(vx), prop.vmax(px), True) * (2 * U64))
    prop.accumulate(nu, px, vx, slack)
    return True


def pool_windows(lo: Array, hi: Array, k: tuple[int, int]) -> tuple[Array, Array, Array]:
    """For non-overlapping k-windows of (B, C, H, W) bounds: the one-hot of each window's entry
    with the greatest lower bound, whether it dominates the window, and the window's max upper
    bound."""
    b, c, h, w = lo.shape
    kh, kw = k
    shape = (b, c, h // kh, kh, w // kw, kw)
    lw = lo.reshape(shape).transpose(0, 1, 2, 4, 3, 5).reshape(b, c, h // kh, w // kw, kh * kw)
    hw = hi.reshape(shape).transpose(0, 1, 2, 4, 3, 5).reshape(b, c, h // kh, w // kw, kh * kw)
    j = np.argmax(lw, axis=-1)
    onehot = np.zeros_like(lw)
    np.put_along_axis(onehot, j[..., None], 1.0, axis=-1)
    others = np.where(onehot > 0, -np.inf, hw).max(axis=-1)
    dominated = np.take_along_axis(lw, j[..., None], axis=-1)[..., 0] >= others
    onehot = onehot.reshape(b, c, h // kh, w // kw, kh, kw).transpose(0, 1, 2, 4, 3, 5)
    return onehot.reshape(b, c, h, w), dominated, hw.max(axis=-1)


def _convex(name: str, t: Array) -> Array:
    with np.errstate(over="ignore"):
        return np.asarray(REGISTRY[name].forward(np.asarray(t, np.float64)), np.float64)


def _dconvex(name: str, t: Array) -> Array:
    with np.errstate(over="ignore"):
        return np.exp(t) if name == "exp" else 1.0 / (1.0 + np.exp(-t))


def _convex_critical(name: str, a: Array) -> Array:
    """Approximately the t where f'(t) = a (NaN where there is none)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if name == "exp":
            return np.where(a > 0, np.log(a), np.nan)
        return np.where((a > 0) & (a < 1), np.log(a) - np.log1p(-a), np.nan)


def convex_terms(name: str, lo: Array, hi: Array, a_lo: Array, a_hi: Array
                 ) -> tuple[Array, Array]:
    """Rigorous ``min over [lo, hi] of f(t) - a_lo t`` and ``max of f(t) - a_hi t`` for a convex
    f (exp, softplus): the max at an end; the min by the tangent of g at the approximate
    critical point m, ``g >= g(m) + g'(m) (t - m)``, least at an end (g'(m) as an interval)."""

    def g_lo(t: Array, a: Array) -> Array:
        return down(libm_lo(_convex(name, t)) - up(a * t) - 2 * U64 * np.abs(a * t))

    def g_hi(t: Array, a: Array) -> Array:
        return up(libm_hi(_convex(name, t)) - down(a * t) + 2 * U64 * np.abs(a * t))

    h_hi = np.maximum(g_hi(lo, a_hi), g_hi(hi, a_hi))
    m = _convex_critical(name, a_lo)
    m = np.clip(np.where(np.isnan(m), lo, m), lo, hi)
    d = _dconvex(name, m) - a_lo
    e = 32 * U64 * (np.abs(_dconvex(name, m)) + np.abs(a_lo)) + ETA64
    lin = np.minimum(np.minimum((d - e) * (lo - m), (d + e) * (lo - m)),
                     np.minimum((d - e) * (hi - m), (d + e) * (hi - m)))
    tangent = down(g_lo(m, a_lo) + lin - 8 * U64 * np.abs(lin) - ETA64)
    h_lo = np.minimum(np.minimum(g_lo(lo, a_lo), g_lo(hi, a_lo)), tangent)
    return h_lo, h_hi


def convex_slopes(name: str, lo: Array, hi: Array) -> tuple[Array, Array]:
    """Tangent at the midpoint (lower line), chord (upper line); any slope is sound."""
    mid = 0.5 * lo + 0.5 * hi
    width = hi - lo
    tangent = _dconvex(name, mid)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        chord = np.where(width > 1e-9, (_convex(name, hi) - _convex(name, lo)) / width, tangent)
    return tangent, np.where(np.isfinite(chord), chord, tangent)


@_handler("exp", "softplus")
def _convex_op(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
               slack: list[Array]) -> bool:
    node = prop.nodes[i]
    assert node.op is not None
    px = node.parents[0]
    box = prop.bx(px)
    name = node.op.name
    if not finite_box(box) or (
            name == "exp" and np.any(box.hi > 700)):
        return False
    key = ("convex", px)
    if key not in prop._cache:
        a_lo, a_hi = convex_slopes(name, box.lo, box.hi)
        prop._cache[key] = (a_lo, a_hi) + convex_terms(name, box.lo, box.hi, a_lo, a_hi)
    a_lo, a_hi, h_lo, h_hi = prop._cache[key]
    if not (np.all(np.isfinite(h_lo)) and np.all(np.isfinite(h_hi))):
        return False
    t = np.where(v >= 0, v * _with_k(h_lo), v * _with_k(h_hi))
    terms.append(_sum_rest_down(t))
    vx = v * np.where(v >= 0, _with_k(a_lo), _with_k(a_hi))
    slack.append(_dot_rest(np.abs(vx), prop.vmax(px), True) * (2 * U64))
    prop.accumulate(nu, px, vx, slack)
    return True


def pool_geometry(node: GraphNode, x_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The window of a 2-D max pooling with non-overlapping, unpadded windows tiling the input
    (``max_pool2d``, or ``max_pool`` as an imported ONNX MaxPool maps), else ``None``."""
    if len(x_shape) != 4:
        return None
    k = _pair(node.attrs["kernel_size"])
    stride = node.attrs.get("stride")
    s = k if stride is None else _pair(stride)
    pad = _pair(node.attrs.get("padding", 0) or 0)
    if k is None or s != k or pad != (0, 0) or x_shape[2] % k[0] or x_shape[3] % k[1]:
        return None
    return k


def _pair(value: Any) -> tuple[int, int] | None:
    t = tuple(int(a) for a in np.ravel(value))
    if len(t) == 1:
        t = (t[0], t[0])
    return (t[0], t[1]) if len(t) == 2 else None


@_handler("max_pool2d", "max_pool")
def _max_pool(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
              slack: list[Array]) -> bool:
    node = prop.nodes[i]
    px = node.parents[0]
    k = pool_geometry(node, prop.nodes[px].shape)
    if k is None or prop.whole or not prop.batched(px):
        return False
    key = ("pool", i)
    if key not in prop._cache:
        box = prop.bx(px)
        assert box is not None
        prop._cache[key] = pool_windows(box.lo, box.hi, k)  # type: ignore[arg-type]
    onehot, dominated, top = prop._cache[key]
    dom = _with_k(dominated)
    coef = np.where(dom | (v >= 0), v, 0.0)
    box = prop.bx(px)
    finite = finite_box(box)
    mix = prop.alpha.get(i)
    if not (finite and POOL_CHORD):  # the constant upper bound where v < 0
        terms.append(_sum_rest_down(np.where(dom | (v >= 0), 0.0, v * _with_k(top))))
    if not finite:
        mix = None
    elif POOL_CHORD:
        # the upper side (negative multipliers) by the chord of ``pool_upper`` on the entry of
        # greatest upper bound, instead of the constant ``max u``
        ukey = ("pool_upper", i)
        if ukey not in prop._cache:
            prop._cache[ukey] = pool_upper(box.lo, box.hi, k)
        up_hot, a, m_lo, l_i = prop._cache[ukey]
        upper = _pool_chord(v, dom, top, up_hot, a, m_lo, l_i, terms, slack)
        lower = (_pool_mixed(box, k, v, coef, mix, onehot, dom, top, terms) if mix is not None
                 else coef[..., None] * pool_window_view(_with_k(onehot), k))
        # disjoint: the upper side is 0 where the lower side is not
        prop.accumulate(nu, px, pool_input_view(lower + upper, k), slack)
        return True
    if mix is not None:
        prop.accumulate(nu, px, pool_input_view(
            _pool_mixed(box, k, v, coef, mix, onehot, dom, top, terms), k), slack)
        return True
    b, kk, c, ho, wo = np.broadcast_shapes(coef.shape, dom.shape)
    spread = (np.broadcast_to(coef, (b, kk, c, ho, wo))[:, :, :, :, None, :, None]
              * onehot.reshape(onehot.shape[0], 1, c, ho, k[0], wo, k[1]))
    prop.accumulate(nu, px, spread.reshape((b, kk) + prop.nodes[px].shape[1:]), slack)
    return True


def pool_window_view(a: Array, k: tuple[int, int]) -> Array:
    """A (..., C, H, W) array as (..., C, H/kh, W/kw, kh*kw): each pooling window's entries
    on the last axis (row-major within the window)."""
    *lead, c, h, w = a.shape
    kh, kw = k
    t = a.reshape((*lead, c, h // kh, kh, w // kw, kw))
    n = len(lead)
    t = t.transpose(tuple(range(n + 1)) + (n + 1, n + 3, n + 2, n + 4))
    return t.reshape((*lead, c, h // kh, w // kw, kh * kw))


def pool_input_view(a: Array, k: tuple[int, int]) -> Array:
    """The inverse of ``pool_window_view``: (..., C, Ho, Wo, kh*kw) back to (..., C, H, W)."""
    *lead, c, ho, wo, _ = a.shape
    kh, kw = k
    t = a.reshape((*lead, c, ho, wo, kh, kw))
    n = len(lead)
    t = t.transpose(tuple(range(n + 1)) + (n + 1, n + 3, n + 2, n + 4))
    return t.reshape((*lead, c, ho * kh, wo * kw))


def finite_box(box: Interval) -> bool:
    """Whether every bound of ``box`` is finite (relaxations need finite ends)."""
    return bool(np.all(np.isfinite(box.lo)) and np.all(np.isfinite(box.hi)))


def _pool_mixed(box: Interval, k: tuple[int, int], v: Array, coef: Array, mix: Array,
                onehot: Array, dom: Array, top: Array, terms: list[Array]) -> Array:
    """The max-pool multiplier for alpha-CROWN's window weights ``mix`` (B or 1, K, C, Ho, Wo,
    kh*kw): where the multiplier is >= 0 and no entry dominates, ``max(x) >= sum_j w_j x_j``
    for weights ``w_j >= 0`` summing to 1 (any convex mix of a window lower-bounds its max).

    Soundness does not rest on the weights: with ``nu_j = fl(coef * w_j) >= 0`` (negative or NaN
    weights are set to 0) and ``S = sum_j nu_j`` (exact), ``sum_j nu_j x_j <= S max(x)``, so the
    dual term ``min over the box of coef max(x) - sum_j nu_j x_j`` is at least
    ``min over M in [L, U] of (coef - S) M`` (``L`` the window's greatest lower bound, ``U`` its
    greatest upper bound), evaluated with ``coef - S`` enclosed. For weights on the simplex it
    is a rounding-sized term; weights that do not sum to 1 are paid for here, never unsound.
    Dominated windows keep their exact entry, the rest of ``coef`` (negative multipliers) the
    constant upper bound added by the caller."""
    kk = k[0] * k[1]
    dom6 = dom[..., None]
    weights = np.where(dom6, pool_window_view(_with_k(onehot), k),
                       np.maximum(np.nan_to_num(np.asarray(mix, np.float64), nan=0.0), 0.0))
    nu_w = coef[..., None] * weights
    lower_side = ~dom & (v >= 0)
    s = nu_w.sum(axis=-1)
    d = v - s
    e = gamma(kk + 2) * (np.abs(v) + s)
    big = _with_k(pool_window_view(box.lo, k).max(axis=-1))  # L: max(x) >= L on the box
    terms.append(_sum_rest_down(np.where(lower_side, mix_gap(d - e, d + e, big, _with_k(top)),
                                         0.0)))
    return nu_w


def pool_upper(lo: Array, hi: Array, k: tuple[int, int]) -> tuple[Array, Array, Array, Array]:
    """Per window of (B, C, H, W) bounds, the chord upper bound of its max on the entry ``i``
    of greatest upper bound ``U``: ``max(x) <= U - a (U - x_i)`` with ``a = (U - U2) / (U -
    l_i)`` clipped to [0, 1] (``U2`` the greatest upper bound of the other entries), the line
    through ``(l_i, max(U2, l_i))`` and ``(U, U)``; ``a = 0`` is the constant ``U``. Returns the
    one-hot of ``i`` (window layout, (B, C, Ho, Wo, kh*kw)), ``a``, ``max(U2, l_i)`` and
    ``l_i``."""
    lw, hw = pool_window_view(lo, k), pool_window_view(hi, k)
    j = np.argmax(hw, axis=-1)[..., None]
    onehot = np.zeros_like(hw)
    np.put_along_axis(onehot, j, 1.0, axis=-1)
    top = np.take_along_axis(hw, j, axis=-1)[..., 0]
    second = np.where(onehot > 0, -np.inf, hw).max(axis=-1)
    l_i = np.take_along_axis(lw, j, axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(top > l_i, (top - second) / (top - l_i), 0.0)
    a = np.clip(np.nan_to_num(a, nan=0.0, posinf=1.0), 0.0, 1.0)
    return onehot, a, np.maximum(second, l_i), l_i


def _pool_chord(v: Array, dom: Array, top: Array, onehot: Array, a: Array, m_lo: Array,
                l_i: Array, terms: list[Array], slack: list[Array]) -> Array:
    """The upper side of a max pooling (windows no entry dominates, multiplier ``v < 0``): the
    multiplier ``q = fl(v a)`` on the entry ``i`` of ``pool_upper``'s chord (window layout).

    Sound for any ``q <= 0``: for fixed ``x_i`` the dual term ``v max(x) - q x_i`` is least with
    the other entries at their upper bounds, ``v max(U2, x_i) - q x_i``, concave in ``x_i``: its
    minimum over ``[l_i, U]`` is at an end, ``min(v max(U2, l_i) - q l_i, (v - q) U)``, evaluated
    with its rounding (two products and a difference) in ``slack``."""
    neg = ~dom & (v < 0)
    ak, mk, lk, tk = _with_k(a), _with_k(m_lo), _with_k(l_i), _with_k(top)
    q = np.where(neg, v * ak, 0.0)
    t = np.where(neg, np.minimum(v * mk - q * lk, v * tk - q * tk), 0.0)
    terms.append(_sum_rest_down(t))
    err = np.where(neg, np.abs(v) * np.maximum(np.abs(mk), np.abs(tk))
                   + np.abs(q) * np.maximum(np.abs(lk), np.abs(tk)), 0.0)
    n = int(np.prod(np.shape(err)[2:])) + 2
    slack.append(up(np.sum(err, axis=_rest_axes(err)) * (4 * U64) * (1 + gamma(n)) + n * ETA64))
    return q[..., None] * onehot[:, None]


def mix_gap(d_lo: Array, d_hi: Array, lo: Array, hi: Array) -> Array:
    """``min of d * M`` over ``d`` in [d_lo, d_hi] and ``M`` in [lo, hi] (a bilinear form: at a
    corner): what a window's weights that do not sum exactly to its multiplier cost."""
    return np.minimum(np.minimum(d_lo * lo, d_lo * hi), np.minimum(d_hi * lo, d_hi * hi))


def handled() -> Sequence[str]:
    """Primitive names CROWN propagates through (others are bounded by their intervals)."""
    return sorted(_HANDLERS)
