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
- max pooling (non-overlapping windows): ``max(v) >= v_j`` for the window's entry with the
  greatest lower bound, ``max(v) <= max u`` (or ``= v_j`` when that entry dominates);
- data inputs, constants and ops without a CROWN handler: ``nu . v`` over the node's interval.

With ``kernel=True`` each op's float32 rounding is a perturbation ``|delta_n| <= eps_n`` (from the
interval rules), contributing ``-|nu_n| . eps_n``; the bound then holds for the float32 kernels.

Examples are independent: every node that varies with the input has the batch as its first axis,
and multipliers have shape ``(B or 1, K, *node_shape[1:])`` for ``K`` specification rows per
example. A multiplier that does not depend on the example keeps a batch axis of 1.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..core.registry import ARRAY_OPS
from ..engine.graph import Graph, GraphNode
from .ibp import RULES, Context, Interval
from .rounding import ETA64, U64, down, gamma, libm_lo, mag, mid_rad, sum_down, up

Array = Any

# Memory budget of one backward pass (entries of the largest multiplier); targets with many
# neurons are split into chunks of specification rows.
CHUNK_ENTRIES = 1 << 23


class BoundsError(TorchLeanError):
    """Bad input to the bound engine (boxes, specifications, graphs it cannot bound)."""


class UnsupportedOpError(BoundsError):
    """A primitive in the graph has no bound rule."""


RELAXED = ("relu", "tanh", "sigmoid", "max_pool2d")


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
        out = rule(ins, attrs, self.ctx)  # type: ignore[arg-type]
        lo, hi = np.broadcast_to(out.lo, node.shape), np.broadcast_to(out.hi, node.shape)
        eps = out.eps if self.kernel else 0.0
        if self.kernel and np.any(eps):
            lo, hi = down(lo - eps), up(hi + eps)
        self.ivals[i] = Interval(np.asarray(lo, np.float64), np.asarray(hi, np.float64),
                                 np.broadcast_to(eps, node.shape) if np.any(eps) else 0.0)
        return self.ivals[i]  # type: ignore[return-value]

    # --- CROWN ---------------------------------------------------------------------------------

    def batched(self, i: int) -> bool:
        """Whether node ``i`` varies with the input and has the batch as its first axis."""
        shape = self.nodes[i].shape
        return self.variable[i] and len(shape) >= 1 and shape[0] == self.graph_batch

    def bshape(self, node: GraphNode) -> tuple[int, ...]:
        """A batched node's shape with this propagation's batch size."""
        return (self.batch,) + tuple(node.shape[1:])

    def subset(self, rows: Array) -> Propagation:
        """The same bounds restricted to the examples ``rows`` (for alpha-CROWN's optimiser)."""
        sub = copy.copy(self)
        sub.batch = len(rows)
        sub._cache, sub.alpha = {}, {}
        sub.ivals = list(self.ivals)
        for i, iv in enumerate(self.ivals):
            if iv is not None and self.batched(i):
                eps = iv.eps[rows] if np.ndim(iv.eps) else iv.eps
                sub.ivals[i] = Interval(iv.lo[rows], iv.hi[rows], eps)
        return sub

    def targets(self) -> set[int]:
        """Nodes whose bounds a relaxation depends on (inputs of relaxed ops), beyond the first
        layer (an affine image of the box already has exact interval bounds)."""
        out = set()
        for node in self.nodes:
            if node.kind == "op" and node.op is not None and node.op.name in RELAXED:
                p = node.parents[0]
                pn = self.nodes[p]
                first_layer = pn.kind == "op" and all(
                    q in self.data_ids or not self.variable[q] for q in pn.parents)
                if self.variable[p] and not first_layer:
                    out.add(p)
        return out

    def crown_node(self, i: int) -> tuple[Array, Array]:
        """CROWN lower and upper bounds of node ``i`` (batched), chunked over its neurons.

        When every consumer is a relu, neurons whose interval is stable (one sign) in every
        example keep it: the relu relaxation of a stable neuron is exact whatever its bounds.
        """
        box = self.ivals[i]
        assert box is not None
        shape = self.nodes[i].shape
        rest = shape[1:]
        n = int(np.prod(rest))
        lo = np.array(box.lo, dtype=np.float64).reshape(self.batch, n)
        hi = np.array(box.hi, dtype=np.float64).reshape(self.batch, n)
        consumers = [nd.op.name for nd in self.nodes if nd.op is not None and i in nd.parents]
        if consumers and all(c == "relu" for c in consumers):
            wanted = np.flatnonzero(((lo < 0) & (hi > 0)).any(axis=0))
        else:
            wanted = np.arange(n)
        width = max(1, CHUNK_ENTRIES // max(1, self.batch * self._widest()))
        for start in range(0, len(wanted), width):
            which = wanted[start:start + width]
            rows = np.zeros((len(which), n))
            rows[np.arange(len(which)), which] = 1.0
            rows = rows.reshape((1, len(which)) + rest)
            bound = self.lower(i, np.concatenate([rows, -rows], axis=1))
            lo[:, which] = bound[:, : len(which)]
            hi[:, which] = -bound[:, len(which):]
        return lo.reshape(shape), hi.reshape(shape)

    def _widest(self) -> int:
        return max(int(np.prod(n.shape[1:])) for n in self.nodes if n.shape)

    def lower(self, target: int, nu0: Array) -> Array:
        """A rigorous lower bound, per example and row, of ``sum(nu0[:, k] * v_target)``."""
        terms: list[Array] = []   # (B or 1, K) values whose exact sum is the dual bound...
        slack: list[Array] = []   # ...minus these nonnegative error bounds
        nu: dict[int, Array] = {target: nu0}
        for i in range(target, -1, -1):
            v = nu.pop(i, None)
            if v is None:
                continue
            node = self.nodes[i]
            if isinstance(v, Scaled):
                if _linear_scaled(self, i, v, nu, terms, slack):
                    if self.kernel and np.any(self.ivals[i].eps):  # type: ignore[union-attr]
                        slack.append(v.abs_dot(self.ivals[i].eps))  # type: ignore[union-attr]
                    continue
                v = v.dense()
            handler = _HANDLERS.get(node.op.name) if node.op is not None else None
            if self.linear_only and node.op is not None and node.op.name in RELAXED:
                handler = None
            done = False
            if handler is not None and i not in self.data_ids and self.batched(i):
                done = handler(self, i, v, nu, terms, slack)
            if not done:
                terms.append(self._concretize(v, self.ivals[i]))  # type: ignore[arg-type]
            elif self.kernel:
                eps = self.ivals[i].eps  # type: ignore[union-attr]
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
        if not (np.all(np.isfinite(box.lo)) and np.all(np.isfinite(box.hi))):
            lo, hi = _with_k(box.lo), _with_k(box.hi)
            with np.errstate(invalid="ignore"):
                t = np.where(v > 0, v * lo, np.where(v < 0, v * hi, 0.0))
            return _sum_rest_down(t)
        c, r = mid_rad(box.lo, box.hi)
        a = np.abs(v)
        centre = _matvec(v, _with_k(c))
        radius = _matvec(a, _with_k(r))
        size = _matvec(a, _with_k(np.abs(c)))
        n = int(np.prod(np.shape(v)[2:])) + 4
        return down(centre - radius - gamma(2 * n) * (size + radius) - n * ETA64)

    def accumulate(self, nu: dict[int, Array], p: int, contribution: Array,
                   slack: list[Array]) -> None:
        """Add a multiplier contribution to parent ``p`` (rounding of the sum in ``slack``)."""
        prev = nu.get(p)
        if prev is None:
            nu[p] = contribution
            return
        if isinstance(prev, Scaled):
            prev = prev.dense()
        if isinstance(contribution, Scaled):
            contribution = contribution.dense()
        total = prev + contribution
        nu[p] = total
        slack.append(_dot_rest(np.abs(total), self.vmax(p), up_bound=True) * (2 * U64))

    def vmax(self, p: int) -> Array:
        key = ("vmax", p)
        if key not in self._cache:
            box = self.ivals[p]
            assert box is not None
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
    box = prop.ivals[p]
    assert box is not None
    lo = np.broadcast_to(box.lo, prop.bshape(node))
    hi = np.broadcast_to(box.hi, prop.bshape(node))
    if sign < 0:
        lo, hi = -hi, -lo
    return prop._concretize(v, Interval(lo, hi))


# --- handlers: pass multipliers to parents, add dual terms; False = concretize instead ---------

Handler = Callable[[Propagation, int, Array, dict[int, Array], list[Array], list[Array]], bool]
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
            slack: list[Array]) -> bool:
    node = prop.nodes[i]
    pw, pb, px = node.parents
    w, b = _matrix(prop, pw), _matrix(prop, pb)
    if w is None or b is None or not prop.batched(px):
        return False
    out_f, in_f = w.shape
    contribution = (v.reshape(-1, out_f) @ w).reshape(v.shape[:-1] + (in_f,))
    terms.append(_dot_down(v, b))
    key = ("absJ", i)
    if key not in prop._cache:
        prop._cache[key] = prop.vmax(px) @ np.abs(w).T
    # each entry of the product sums out_f terms
    slack.append(_dot_rest(np.abs(v), prop._cache[key], True) * gamma(max(out_f, in_f) + 4))
    prop.accumulate(nu, px, contribution, slack)
    return True


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
    if w is None or b is None or not prop.batched(px) or len(node.shape) != w.ndim:
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
    if not prop.batched(px):
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


@_handler("reshape")
def _reshape(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
             slack: list[Array]) -> bool:
    px = prop.nodes[i].parents[0]
    if not prop.batched(px):
        return False
    prop.accumulate(nu, px, v.reshape(v.shape[:2] + prop.nodes[px].shape[1:]), slack)
    return True


@_handler("add", "sub")
def _add_sub(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
             slack: list[Array]) -> bool:
    node = prop.nodes[i]
    assert node.op is not None
    signs = (1.0, 1.0) if node.op.name == "add" else (1.0, -1.0)
    for p in node.parents:
        if prop.variable[p] and prop.nodes[p].shape != node.shape:
            return False  # a varying operand broadcast against the other: concretize instead
    for p, sign in zip(node.parents, signs, strict=True):
        if prop.variable[p]:
            prop.accumulate(nu, p, v if sign > 0 else -v, slack)
        else:
            terms.append(_const_term(prop, v, p, node, sign))
    return True


@_handler("mul")
def _mul(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
         slack: list[Array]) -> bool:
    node = prop.nodes[i]
    a, b = node.parents
    var, const = (a, b) if prop.variable[a] else (b, a)
    c = _matrix(prop, const)
    if prop.variable[const] or c is None or prop.nodes[var].shape != node.shape:
        return False
    cfull = np.broadcast_to(c, prop.bshape(node))
    cb = _with_k(cfull)
    slack.append(_dot_rest(np.abs(v), np.abs(cfull) * prop.vmax(var), True) * (2 * U64))
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
    box = prop.ivals[px]
    assert box is not None
    if not (np.all(np.isfinite(box.lo)) and np.all(np.isfinite(box.hi))):
        return False
    lower, upper, l_unstable, w_unstable = _slopes(prop, px)
    alpha = prop.alpha.get(i)
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
    if w is None or b is None or not prop.batched(px) or len(node.shape) != 2:
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
        box = prop.ivals[px]
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
    box = prop.ivals[px]
    assert box is not None
    if not (np.all(np.isfinite(box.lo)) and np.all(np.isfinite(box.hi))):
        return False
    key = ("smooth", px)
    if key not in prop._cache:
        name = node.op.name
        a_lo, a_hi = smooth_slopes(name, box.lo, box.hi)
        # nu >= 0: nu * min(sigma(t) - a_lo t); nu < 0: nu * max(sigma(t) - a_hi t)
        prop._cache[key] = (a_lo, a_hi, min_g(name, box.lo, box.hi, a_lo),
                            max_g(name, box.lo, box.hi, a_hi))
    a_lo, a_hi, h_lo, h_hi = prop._cache[key]
    t = np.where(v >= 0, v * _with_k(h_lo), v * _with_k(h_hi))
    terms.append(_sum_rest_down(t))
    vx = v * np.where(v >= 0, _with_k(a_lo), _with_k(a_hi))
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


@_handler("max_pool2d")
def _max_pool(prop: Propagation, i: int, v: Array, nu: dict[int, Array], terms: list[Array],
              slack: list[Array]) -> bool:
    node = prop.nodes[i]
    px = node.parents[0]
    x_shape = prop.nodes[px].shape
    k = tuple(node.attrs["kernel_size"])
    stride = node.attrs.get("stride")
    stride = k if stride is None else tuple(stride)
    if (len(x_shape) != 4 or stride != k or x_shape[2] % k[0] or x_shape[3] % k[1]
            or not prop.batched(px)):
        return False
    key = ("pool", i)
    if key not in prop._cache:
        box = prop.ivals[px]
        assert box is not None
        prop._cache[key] = pool_windows(box.lo, box.hi, k)  # type: ignore[arg-type]
    onehot, dominated, top = prop._cache[key]
    dom = _with_k(dominated)
    coef = np.where(dom | (v >= 0), v, 0.0)
    terms.append(_sum_rest_down(np.where(dom | (v >= 0), 0.0, v * _with_k(top))))
    b, kk, c, ho, wo = np.broadcast_shapes(coef.shape, dom.shape)
    spread = (np.broadcast_to(coef, (b, kk, c, ho, wo))[:, :, :, :, None, :, None]
              * onehot.reshape(onehot.shape[0], 1, c, ho, k[0], wo, k[1]))
    prop.accumulate(nu, px, spread.reshape((b, kk) + prop.nodes[px].shape[1:]), slack)
    return True


def handled() -> Sequence[str]:
    """Primitive names CROWN propagates through (others are bounded by their intervals)."""
    return sorted(_HANDLERS)
