"""beta-CROWN: bounds of a ReLU network on a *domain*, a set of ReLU neurons fixed active or
inactive, with the split constraints' Lagrange multipliers (beta) optimised with the slopes.

A domain fixes some pre-activations ``z_j`` to a sign: active (``z_j >= 0``) or inactive
(``z_j <= 0``). Its bound pass

1. intersects the domain's pre-activation bounds (inherited from its parent, valid on the
   larger domain, so on this one) with the split: ``l_j := max(l_j, 0)`` when active,
   ``u_j := min(u_j, 0)`` when inactive, so split neurons are stable (their relu exact), and
   re-runs the interval sweep, which tightens later layers;
2. bounds each open output row ``a . y`` from below by the Lagrangian
   ``a . y - sum_j beta_j s_j z_j`` (``s_j = +1`` active, ``-1`` inactive, ``beta_j >= 0``):
   on the domain ``s_j z_j >= 0``, so any lower bound of it bounds ``a . y``. With the relu
   lower slopes ``alpha`` in [0, 1] of the unstable neurons, ``alpha`` and ``beta`` climb the
   CROWN backward pass of that Lagrangian by projected gradient ascent (Adam), for every
   (domain, row) pair of the batch at once (the pair is the batch axis); the pass and its
   gradient are written out in NumPy (``_Objective``), tested equal to the same pass traced
   into a torchlean graph and differentiated by torchlean's reverse mode (``_trace``);
3. evaluates the bound rigorously with the best ``alpha`` and ``beta`` found: the engine's
   ``Propagation.lower`` with ``alpha`` set and the beta terms as extra multipliers at the
   pre-activation nodes (``Propagation.extra``), with ``kernel=True`` enclosing the float32
   network's rounding. The traced arithmetic only ranks candidates; any ``alpha`` in [0, 1] and
   ``beta >= 0`` give a valid bound, so only this last step needs care (and the engine gives it).

A domain whose intersected bounds cross (``l > u`` somewhere) contains no execution of the
network at all and is proved empty. The splits are on the values the float32 network computes
(the engine's node values), so the two children of a split cover every execution of the parent.

Only feed-forward chains of affine segments and relus are handled (``relu_chain``: ``linear``,
``matmul`` with a constant weight, constant ``add``/``sub``/``mul``, scalings and reshapes, as
ONNX Gemm, MatMul + Add and input normalisations import); ``bounds.relu_bab`` drives the
search over domains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import ops_interface as F
from ..engine.transforms import compile as compile_fn
from .bab import Models
from .engine import Propagation, relu_slopes
from .ibp import Interval

Array = Any

ALPHA_LR = 0.1
BETA_LR = 0.05
# The traced bound only ranks candidate slopes and multipliers (the verdict is the engine's
# rigorous float64 evaluation), so it runs in float32: half the time of float64 here.
OPT_DTYPE = "float32"
# once at most this share of a pass's pairs is still below its threshold, the bound is traced
# again for those alone (the others stop costing the products with every layer's weights)
COMPACT = 0.6
# ``bound_pairs(prove_at=...)`` skips the rigorous pass of pairs whose traced bound is more than
# this (relative) below their threshold: it could not prove them (the rigorous bound is the
# traced one less round-off); a pair skipped by mistake is only split again, never unsound
SKIP_TOLERANCE = 1e-3


@dataclass
class Chain:
    """A ReLU chain inside a compiled graph: affine maps ``(W_k, b_k)`` (the last one gives the
    output), the graph nodes of each relu's pre-activation and of each relu, and the output."""

    layers: list[tuple[Array, Array]]
    pre: list[int]
    relus: list[int]
    out: int

    @property
    def sizes(self) -> list[int]:
        return [w.shape[0] for w, _ in self.layers[:-1]]


# Ops that map their one input-dependent operand affinely, elementwise per example, the other
# operands being constants: (x, c) pairs of ``add``/``sub``/``mul`` and scalar attributes.
_RESHAPES = ("reshape", "flatten")
_ELEMENTWISE = ("add", "sub", "mul")
_SCALARS = ("scale", "add_scalar")


def _per_example(c: Array, shape: tuple[int, ...]) -> Array | None:
    """Constant ``c`` broadcast against a node of ``shape`` (batch axis first), as one example's
    flat values; None when it does not broadcast or differs between examples."""
    c = np.asarray(c, np.float64)
    if c.ndim > len(shape):
        return None
    if c.ndim == len(shape) and c.shape[0] != 1:
        return None
    try:
        return np.broadcast_to(c, (1, *shape[1:])).reshape(-1)
    except ValueError:
        return None


def relu_chain(model: Any) -> Chain | None:
    """The ``Chain`` of a compiled model with a batch axis whose input-dependent ops form one
    path: ``relu`` nodes separating affine segments, each a sequence of ``linear(W, b, x)``,
    ``matmul(x, W)``, ``add``/``sub``/``mul`` with a constant operand broadcast per example
    (an ONNX Gemm, MatMul + Add in either order, a Sub/Div or Mul/Add input normalisation),
    ``scale``/``add_scalar`` and reshapes that keep the batch axis first; None for any other
    graph. Ops on constants alone (a transposed weight, a reciprocal ``1 / std``) are
    evaluated as the network does. The relu inputs and the output must be ``(B, n)``.

    Each segment's ``(W_k, b_k)`` is the real-valued composition of its ops (float64); it only
    steers the search (the traced objective ranks slopes and multipliers, LPs propose points
    and duals): every bound that decides anything is the engine's rigorous pass over the graph's
    own ops (``Propagation``, with round-off enclosed when ``kernel=True``), so a segment of
    several float32 ops is never replaced by one folded float32 layer."""
    graph = model.graph
    consts = Models.consts(model)
    nodes = graph.nodes
    if len(graph.inputs) - len(graph.params) < 1:
        return None
    cur = graph.inputs[0]
    shape0 = tuple(nodes[cur].shape)
    if len(shape0) < 2:
        return None
    batch = shape0[0]
    values: dict[int, Array | None] = {}

    def value(p: int) -> Array | None:
        """The value of a node that does not depend on the input (None if it does)."""
        if p in consts:
            return np.asarray(consts[p])
        if p not in values:
            node = nodes[p]
            args = [value(q) for q in node.parents] if node.kind == "op" and node.op else [None]
            values[p] = (None if any(a is None for a in args) or node.op is None
                         else np.asarray(node.op.forward(*args, **node.attrs)))
        return values[p]

    n_cur = int(np.prod(shape0[1:], dtype=np.int64))
    # the current segment: x_flat -> m x_flat + v, with m = diag(d) while m is None (until a
    # weight layer: no identity matrix of the input's width is built or multiplied)
    m: Array | None = None
    d, v = np.ones(n_cur), np.zeros(n_cur)
    layers: list[tuple[Array, Array]] = []
    pre: list[int] = []
    relus: list[int] = []
    weighted = False  # the current segment has a linear or matmul
    for i, node in enumerate(nodes):
        if node.kind != "op":
            continue
        op = node.op
        if op is None:
            return None
        if cur not in node.parents:
            if value(i) is None:  # input-dependent but off the path: not a chain
                return None
            continue
        shape = tuple(node.shape)
        if len(shape) < 2 or shape[0] != batch:
            return None
        others = [p for p in node.parents if p != cur]
        name = op.name
        if name == "relu":
            # every segment has a weight layer, so the relu's input is an affine op's output
            if len(shape) != 2 or len(nodes[cur].shape) != 2 or not weighted:
                return None
            layers.append((m, v))
            pre.append(cur)
            relus.append(i)
            m, d, v = None, np.ones(shape[1]), np.zeros(shape[1])
            weighted = False
        elif name in _RESHAPES:
            if len(node.parents) != 1 and any(value(p) is None for p in others):
                return None
        elif name == "linear":
            pw, pb, px = node.parents
            w, b = value(pw), value(pb)
            if px != cur or w is None or b is None or np.ndim(w) != 2 or len(shape) != 2:
                return None
            w = np.asarray(w, np.float64)
            m, v = w * d if m is None else w @ m, w @ v + np.broadcast_to(
                np.asarray(b, np.float64), (w.shape[0],))
            weighted = True
        elif name == "matmul":
            px, pw = node.parents
            w = value(pw)
            if (px != cur or w is None or np.ndim(w) != 2 or len(shape) != 2
                    or len(nodes[cur].shape) != 2):
                return None
            w = np.asarray(w, np.float64).T
            m, v = w * d if m is None else w @ m, w @ v
            weighted = True
        elif name in _ELEMENTWISE:
            if (len(node.parents) != 2 or node.parents[0] == node.parents[1]
                    or tuple(nodes[cur].shape) != shape):
                return None
            c = value(others[0])
            c_flat = None if c is None else _per_example(c, shape)
            if c_flat is None or c_flat.size != v.size:
                return None
            if name == "add":
                v = v + c_flat
            elif name == "mul":
                v = c_flat * v
                if m is None:
                    d = c_flat * d
                else:
                    m = c_flat[:, None] * m
            elif node.parents[0] == cur:  # x - c
                v = v - c_flat
            else:  # c - x
                v = c_flat - v
                if m is None:
                    d = -d
                else:
                    m = -m
        elif name in _SCALARS:
            c_attr = node.attrs.get("c")
            if len(node.parents) != 1 or not isinstance(c_attr, int | float):
                return None
            if name == "scale":
                v = float(c_attr) * v
                if m is None:
                    d = float(c_attr) * d
                else:
                    m = float(c_attr) * m
            else:
                v = v + float(c_attr)
        else:
            return None
        cur = i
    if cur != graph.output or len(nodes[cur].shape) != 2 or not weighted:
        return None
    layers.append((m, v))
    return Chain(layers, pre, relus, cur)


@dataclass
class PairBounds:
    """The result of one batched pass over (domain, row) pairs: rigorous lower bounds
    ``lower`` ``(P,)`` (``+inf`` for an empty domain); the pre-activation bounds the pass used
    per layer (``(P, n_k)`` each, the children's inheritance); the multipliers of each relu's
    output for the best slopes (``mu``, ``(P, n_k)``, for branching); and the input point
    minimising the last linear bound (``primal``, ``(P, n_in)``, a candidate counterexample);
    the best slopes and multipliers found (``alpha``, ``beta``: ``(P, n_k)`` float32 each, a
    child's warm start) and the traced bound they gave (``traced``, ``(P,)``: above
    ``lower`` by the rigorous evaluation's round-off enclosure)."""

    lower: Array
    lo: list[Array]
    hi: list[Array]
    mu: list[Array]
    primal: Array
    steps: int
    alpha: list[Array]
    beta: list[Array]
    traced: Array


def _propagate(model: Any, chain: Chain, x_lo: Array, x_hi: Array, lo: list[Array],
               hi: list[Array], kernel: bool, refresh: frozenset[int] = frozenset()
               ) -> tuple[Propagation, Array]:
    """The engine's interval sweep over a batch with every pre-activation intersected with the
    given bounds (inherited and split), and the relu layers in ``refresh`` (indices) also
    tightened by CROWN on them (the engine's ``crown_node``, with the earlier layers' split
    bounds: valid on the domain); also which examples are empty (crossed bounds)."""
    graph = model.graph
    feat = graph.nodes[graph.inputs[0]].shape
    prop = Propagation(graph, Models.consts(model), x_lo.reshape(feat), x_hi.reshape(feat),
                       kernel=kernel, n_data=1)
    empty = np.zeros(feat[0], dtype=bool)
    where = {p: k for k, p in enumerate(chain.pre)}
    # every example the same box (as in branch and bound over relu splits): the first layer's
    # interval (the widest product, identical for all) is computed for one and broadcast
    shared = bool(np.all(x_lo == x_lo[:1]) and np.all(x_hi == x_hi[:1]))
    for i, node in enumerate(graph.nodes):
        if node.kind != "op":
            continue
        if i == chain.pre[0] and shared and node.op is not None and node.op.name == "linear":
            iv = _first_layer(prop, i)
        else:
            iv = prop.interval(i)
        k = where.get(i)
        if k is not None:
            new_lo, new_hi = np.maximum(iv.lo, lo[k]), np.minimum(iv.hi, hi[k])
            if k in refresh and k > 0:  # the first layer's intervals are exact already
                iv.lo, iv.hi = new_lo, np.maximum(new_hi, new_lo)
                c_lo, c_hi = prop.crown_node(i)
                new_lo, new_hi = np.maximum(new_lo, c_lo), np.minimum(new_hi, c_hi)
            crossed = new_lo > new_hi
            empty |= crossed.any(axis=1)
            # an empty example is discarded; keep its arithmetic finite and ordered
            iv.lo, iv.hi = new_lo, np.where(crossed, new_lo, new_hi)
    return prop, empty


def _first_layer(prop: Propagation, i: int) -> Interval:
    """``prop.interval(i)`` for the first linear node ``i`` computed on the first example's
    input interval alone and broadcast to the batch (every example has the same input box)."""
    px = prop.nodes[i].parents[2]  # linear(w, b, x)
    whole = prop.ivals[px]
    assert whole is not None
    eps = whole.eps[:1] if np.ndim(whole.eps) else whole.eps
    prop.ivals[px] = Interval(whole.lo[:1], whole.hi[:1], eps)
    try:
        return prop.interval(i)  # stores its result broadcast to the node's (batch) shape
    finally:
        prop.ivals[px] = whole


def _objective_parts(chain: Chain, lo: list[Array], hi: list[Array], sign: list[Array]
                     ) -> list[tuple[Array, Array, Array, Array, Array]]:
    """Per relu layer: unstable mask, stable-active mask, upper slope, upper intercept, sign."""
    parts = []
    for k in range(len(chain.pre)):
        l, u = lo[k], hi[k]
        unstable = ((l < 0) & (u > 0)).astype(np.float64)
        _, upper = relu_slopes(l, u)
        intercept = np.where(unstable > 0, -upper * l, 0.0)
        active = (l >= 0).astype(np.float64)
        parts.append((unstable, active, upper, intercept, sign[k].astype(np.float64)))
    return parts


def _trace(chain: Chain, rows: Array, parts: list[Any], x_lo: Array, x_hi: Array
           ) -> tuple[Any, list[int]]:
    """Compile the traced Lagrangian bound per pair: inputs alphas then betas (``(P, n_k)``
    each); also returns the nodes of each relu output's multiplier and of the input's. Every
    pair shares the input box (``x_lo[0]``, ``x_hi[0]``). The optimiser uses ``_Objective``;
    this graph and torchlean's reverse mode are its oracle in the tests."""
    n_layers = len(chain.pre)
    marks: list[int] = []
    dt = np.dtype(OPT_DTYPE)
    layers = [(w.astype(dt), b.astype(dt)) for w, b in chain.layers]
    parts = [tuple(x.astype(dt) for x in part) for part in parts]

    def objective(*args: Any) -> Any:
        owner = args[0].owner
        alphas, betas = args[:n_layers], args[n_layers:]
        w, b = layers[-1]
        lam = owner.const(rows.astype(dt))
        total = F.reduce_sum(lam * b, axis=1)
        mu = lam @ w
        mus: list[Any] = [None] * n_layers
        for k in range(n_layers - 1, -1, -1):
            mus[k] = mu
            unstable, active, upper, intercept, sign = parts[k]
            pos = F.relu(mu)
            neg = mu - pos
            slope = alphas[k] * unstable + active
            nu = pos * slope + neg * upper - betas[k] * sign
            w, b = layers[k]
            total = total + F.reduce_sum(neg * intercept + nu * b, axis=1)
            mu = nu @ w
        # the box's least value of mu . x, as mu . c - |mu| . r (two products, not four
        # elementwise passes over the widest layer)
        total = total + F.reshape(mu @ centre - F.abs(mu) @ radius, shape=(rows.shape[0],))
        marks.extend(m.id for m in mus)
        marks.append(mu.id)
        return total

    centre = ((x_lo[0] + x_hi[0]) / 2).reshape(-1, 1).astype(dt)
    radius = ((x_hi[0] - x_lo[0]) / 2).reshape(-1, 1).astype(dt)

    shapes = [(rows.shape[0], n) for n in chain.sizes] * 2
    compiled = compile_fn(objective, *shapes, dtype=OPT_DTYPE)
    return compiled.graph, marks


class _Objective:
    """``_trace``'s Lagrangian bound per pair with its gradient written out by hand in NumPy
    (float32): the same arithmetic as the traced graph, without a graph's per-op overhead or a
    compilation per pass (measured: the traced graph's evaluation, reverse pass and tracing
    took about 60% of a pass on 256x4, the products in them a fifth).

    Per relu layer ``k`` (from the output down), with ``mu`` the multiplier of its output:
    ``nu = relu(mu) (alpha unstable + active) + (mu - relu(mu)) upper - beta sign``, the bound
    gains ``(mu - relu(mu)) . intercept + nu . b_k`` and ``mu := nu W_k``; at the input it gains
    ``mu . centre - |mu| . radius``. The derivative of ``relu`` at 0 is taken as 0 (as the
    traced graph's)."""

    def __init__(self, chain: Chain, rows: Array, parts: list[tuple[Array, ...]],
                 centre: Array, radius: Array) -> None:
        dt = np.dtype(OPT_DTYPE)
        self.layers = [(np.ascontiguousarray(w, dt), b.astype(dt)) for w, b in chain.layers]
        self.rows = rows.astype(dt)
        self.parts = [tuple(x.astype(dt) for x in part) for part in parts]
        self.centre, self.radius = centre.astype(dt), radius.astype(dt)

    def take(self, keep: Array) -> None:
        """Keep only the pairs ``keep`` (indices into the current ones)."""
        self.rows = self.rows[keep]
        self.parts = [tuple(x[keep] for x in part) for part in self.parts]

    def run(self, alphas: list[Array], betas: list[Array]
            ) -> tuple[Array, list[Array], Array]:
        """The bound per pair and the multipliers of each relu's output (``mu`` per layer)
        and of the input; ``grad`` then differentiates this evaluation."""
        w, b = self.layers[-1]
        total = self.rows @ b
        mu = self.rows @ w
        n_layers = len(self.parts)
        mus: list[Array] = [None] * n_layers  # type: ignore[list-item]
        saved: list[Any] = [None] * n_layers
        for k in range(n_layers - 1, -1, -1):
            unstable, active, upper, intercept, sign = self.parts[k]
            mus[k] = mu
            on = mu > 0
            pos = mu * on  # (not ``np.where``: ten times slower on a random mask)
            neg = mu - pos
            slope = alphas[k] * unstable
            slope += active
            nu = pos * slope
            nu += neg * upper
            nu -= betas[k] * sign
            w, b = self.layers[k]
            total += np.einsum("pn,pn->p", neg, intercept) + nu @ b
            saved[k] = (on, pos, slope)
            mu = nu @ w
        total += mu @ self.centre - np.abs(mu) @ self.radius
        self.saved, self.mu_in = saved, mu
        return total, mus, mu

    def grad(self, seed: Array) -> tuple[list[Array], list[Array]]:
        """The gradients of ``seed . bound`` (``seed``: a weight per pair) of the last ``run``
        with respect to the slopes and the multipliers, per layer."""
        saved, mu, n_layers = self.saved, self.mu_in, len(self.parts)
        seed = seed.astype(mu.dtype)[:, None]
        sgn = np.subtract(mu > 0, mu < 0, dtype=mu.dtype)  # np.sign, five times faster
        g = seed * (self.centre - sgn * self.radius)
        g_alpha: list[Array] = [None] * n_layers  # type: ignore[list-item]
        g_beta: list[Array] = [None] * n_layers  # type: ignore[list-item]
        for k in range(n_layers):
            unstable, active, upper, intercept, sign = self.parts[k]
            on, pos, slope = saved[k]
            w, b = self.layers[k]
            g_nu = g @ w.T
            g_nu += seed * b
            g_alpha[k] = g_nu * pos * unstable
            g_beta[k] = -g_nu * sign
            if k + 1 < n_layers:
                # g_nu (slope where on, else upper) + seed (0 where on, else intercept), by
                # products with the masks (``np.where`` is ten times slower on a random mask)
                off = ~on
                eff = slope * on
                eff += upper * off
                g = g_nu * eff
                g += seed * (intercept * off)
        return g_alpha, g_beta


def bound_pairs(model: Any, chain: Chain, x_lo: Array, x_hi: Array, rows: Array,
                lo: list[Array], hi: list[Array], sign: list[Array], *, thresholds: Array,
                alpha0: list[Array] | None = None, beta0: list[Array] | None = None,
                steps: int = 20, kernel: bool = True, prove_at: Array | None = None,
                alpha_lr: float = ALPHA_LR, beta_lr: float = BETA_LR,
                owner: tuple[Any, Chain, Array] | None = None) -> PairBounds:
    """Lower bounds of ``rows[p] . y`` over pair ``p``'s domain (see the module docstring).

    ``model``: the compiled network for exactly ``P`` examples (``chain`` its relu chain);
    ``x_lo``/``x_hi`` ``(P, n_in)``: the input box per pair; ``lo``/``hi``/``sign`` per relu
    layer ``(P, n_k)``: inherited pre-activation bounds (already intersected with the splits)
    and the split signs (+1 active, -1 inactive, 0 free); ``thresholds`` ``(P,)``: a pair stops
    being optimised once its traced bound is above it (so pass the row's threshold plus what
    the rigorous bound is expected to lose against the traced one); ``alpha0``, ``beta0``: starting
    slopes and multipliers; ``prove_at`` ``(P,)``: the rows' own thresholds, when given the
    rigorous pass runs only for the pairs whose traced bound comes within a tolerance of it
    (the others cannot be proved by it; their ``lower`` is their traced bound, kept below
    ``prove_at``: never a proof); ``alpha_lr``, ``beta_lr``: Adam's step sizes (a warm start
    wants a small ``alpha_lr``: Adam's first step moves every slope by about its step size).
    ``owner``: ``(domain_model, domain_chain, at)`` when several pairs share a domain: then
    ``lo``/``hi``/``sign`` are given per domain (``domain_model``'s batch, ``(D, n_k)``), pair
    ``p`` is on domain ``at[p]``, every pair has the same input box, and the interval sweep and
    the rigorous pass's intervals are computed once per domain (the same values as per pair).
    """
    n_pairs = rows.shape[0]
    if owner is None:
        prop, empty = _propagate(model, chain, x_lo, x_hi, lo, hi, kernel)
        at = None
    else:
        d_model, d_chain, at = owner
        n_dom, n_in = lo[0].shape[0], x_lo.shape[1]
        prop, empty = _propagate(d_model, d_chain, np.broadcast_to(x_lo[:1], (n_dom, n_in)),
                                 np.broadcast_to(x_hi[:1], (n_dom, n_in)), lo, hi, kernel)
        empty, sign = empty[at], [s[at] for s in sign]
        chain = d_chain
    lo = [np.asarray(prop.ivals[p].lo, np.float64) for p in chain.pre]  # type: ignore[union-attr]
    hi = [np.asarray(prop.ivals[p].hi, np.float64) for p in chain.pre]  # type: ignore[union-attr]
    if at is not None:
        lo, hi = [x[at] for x in lo], [x[at] for x in hi]
    parts = _objective_parts(chain, lo, hi, sign)
    objective = _Objective(chain, rows, parts, (x_lo[0] + x_hi[0]) / 2, (x_hi[0] - x_lo[0]) / 2)
    n_layers = len(chain.pre)
    dt = np.dtype(OPT_DTYPE)
    if alpha0 is None:
        alpha0 = [relu_slopes(lo[k], hi[k])[0] for k in range(n_layers)]
    # the optimiser's state is float32 like the traced bound it climbs (it only ranks
    # candidates); in-place updates keep the per-step cost to a few passes over each array
    params = [np.clip(np.asarray(a, dt), 0.0, 1.0) for a in alpha0]
    params += [np.zeros(lo[k].shape, dt) if beta0 is None else
               np.where(sign[k] != 0, np.maximum(np.asarray(beta0[k], dt), 0.0), 0.0).astype(dt)
               for k in range(n_layers)]
    active_beta = [np.abs(s) > 0 for s in sign]
    best_val = np.full(n_pairs, -np.inf)
    best = [p.copy() for p in params]
    mus = [np.zeros_like(x) for x in lo]
    primal_mu = np.zeros(x_lo.shape, dt)  # (only its sign is used)
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    lrs = [alpha_lr] * n_layers + [beta_lr] * n_layers
    # the pairs still optimised (``idx``): a pair whose traced bound clears its threshold
    # stops, and once few enough are left the bound is traced again for those alone
    idx = np.arange(n_pairs)
    slack = 1e-4 * (1.0 + np.abs(thresholds))  # the rigorous bound is a little below the traced
    done = 0
    for step in range(1, max(1, steps) + 1):
        val32, mu_k, mu_in = objective.run(params[:n_layers], params[n_layers:])
        val = val32.astype(np.float64)
        better = val > best_val[idx]
        if better.any():  # (row gathers: faster here than plain or masked copies)
            sel = idx[better]
            best_val[sel] = val[better]
            for j, p in enumerate(params):
                best[j][sel] = p[better]
            for k in range(n_layers):
                mus[k][sel] = mu_k[k][better]
            primal_mu[sel] = mu_in[better]
        done = step
        live = best_val[idx] <= thresholds[idx] + slack[idx]
        if step >= steps or not live.any():
            break
        # the pairs that cleared their threshold get no gradient: only the others climb
        g_alpha, g_beta = objective.grad(live)
        grads = g_alpha + g_beta
        if live.sum() <= COMPACT * len(idx):
            idx = idx[live]
            params, m1, m2 = ([p[live] for p in params], [m[live] for m in m1],
                              [m[live] for m in m2])
            grads = [g[live] for g in grads]
            active_beta = [a[live] for a in active_beta]
            objective.take(np.flatnonzero(live))
        c1, c2 = 1 - 0.9 ** step, np.sqrt(1 - 0.999 ** step)
        for j, p in enumerate(params):
            g = np.asarray(grads[j], dt)
            m1[j] *= 0.9
            m1[j] += 0.1 * g
            m2[j] *= 0.999
            g *= g
            g *= 0.001
            m2[j] += g
            # Adam's step lr * (m1 / c1) / (sqrt(m2) / c2 + eps), in place
            den = np.sqrt(m2[j], out=g)  # (the gradient's buffer: not needed any more)
            den /= c2
            den += 1e-8
            move = np.divide(m1[j], den, out=den)
            move *= lrs[j] / c1
            p += move
            if j < n_layers:
                np.clip(p, 0.0, 1.0, out=p)
            else:
                np.maximum(p, 0.0, out=p)
                p *= active_beta[j - n_layers]
    # the rigorous bound with the best slopes and multipliers found, for the pairs it may prove
    if prove_at is None:
        need = np.arange(n_pairs)
        lower = np.full(n_pairs, -np.inf)
    else:
        near = best_val >= prove_at - SKIP_TOLERANCE * (1.0 + np.abs(prove_at))
        need = np.flatnonzero(near & ~empty)
        # never above the threshold: a pair left out is not proved (ranking value only)
        lower = np.minimum(best_val, np.nextafter(prove_at, -np.inf))
    if len(need):
        if at is not None:
            sub = prop.subset(at[need])
        else:
            sub = prop if len(need) == n_pairs else prop.subset(need)
        sub.alpha = {r: best[k][need].astype(np.float64).reshape(len(need), 1, -1)
                     for k, r in enumerate(chain.relus)}
        sub.extra = {p: (-best[n_layers + k][need].astype(np.float64)
                         * sign[k][need]).reshape(len(need), 1, -1)
                     for k, p in enumerate(chain.pre)}
        try:
            lower[need] = sub.lower(chain.out, rows[need].reshape(len(need), 1, -1))[:, 0]
        finally:
            sub.alpha, sub.extra = {}, {}
    lower = np.where(empty, np.inf, lower)
    primal = np.where(primal_mu > 0, x_lo, x_hi)
    return PairBounds(lower, lo, hi, mus, primal, done, best[:n_layers], best[n_layers:],
                      best_val)


def refresh_bounds(model: Any, chain: Chain, x_lo: Array, x_hi: Array, lo: list[Array],
                   hi: list[Array], layers: frozenset[int], kernel: bool = True
                   ) -> tuple[list[Array], list[Array]]:
    """Domains' pre-activation bounds (``(B, n_k)`` per layer, split already applied) with the
    relu layers ``layers`` re-bounded by CROWN over each domain (``model``: B examples)."""
    prop, _ = _propagate(model, chain, x_lo, x_hi, lo, hi, kernel, layers)
    return ([np.asarray(prop.ivals[p].lo, np.float64) for p in chain.pre],  # type: ignore
            [np.asarray(prop.ivals[p].hi, np.float64) for p in chain.pre])  # type: ignore


def babsr_scores(lo: list[Array], hi: list[Array], mu: list[Array]) -> list[Array]:
    """BaBSR-style scores per unstable neuron (0 elsewhere): how much the relaxation of the
    neuron costs the bound, the upper line's intercept ``-u l / (u - l)`` times the weight
    ``max(-mu, 0)`` the bound puts on it, plus a little of ``|mu| (u - l)`` to rank neurons the
    intercept term leaves at 0."""
    out = []
    for l, u, m in zip(lo, hi, mu, strict=True):
        unstable = (l < 0) & (u > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            intercept = np.where(unstable, -u * l / np.where(unstable, u - l, 1.0), 0.0)
        score = np.maximum(-m, 0.0) * intercept + 1e-4 * np.abs(m) * np.where(unstable, u - l,
                                                                              0.0)
        out.append(np.where(unstable, score + 1e-12, 0.0))
    return out


def child_bounds(chain: Chain, rows: Array, lo: list[Array], hi: list[Array],
                 sign: list[Array], alpha: list[Array], beta: list[Array], x_lo: Array,
                 x_hi: Array, cand: Array) -> Array:
    """Traced bounds ``(P, k, 2)`` of the two children (active, inactive) of splitting pair
    ``p`` on flat neuron ``cand[p, i]``, with the pair's slopes and multipliers (the new split's
    multiplier 0) and its bounds (no new interval sweep): filtered smart branching's look-ahead
    (FSB), one evaluation of ``_Objective`` per child instead of an optimisation. Only ranks
    candidates; ``-inf`` where ``cand`` is negative (no candidate)."""
    n_pairs, k = cand.shape
    sizes = chain.sizes
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    parts = _objective_parts(chain, lo, hi, sign)
    rep = np.repeat(np.arange(n_pairs), 2 * k)  # pair p's children at 2k p + 2 i + side
    flat = np.repeat(cand.reshape(-1), 2)
    side = np.tile([1.0, 0.0], n_pairs * k)  # 1: active child, 0: inactive
    layer = np.searchsorted(offsets, np.maximum(flat, 0), side="right") - 1
    new_parts = []
    for q, part in enumerate(parts):
        unstable, active, upper, intercept, sgn = (x[rep] for x in part)
        at = np.flatnonzero((layer == q) & (flat >= 0))
        j = flat[at] - offsets[q]
        unstable[at, j] = 0.0  # the split neuron is stable in each child: slope 1 or 0
        active[at, j] = side[at]
        upper[at, j] = side[at]
        intercept[at, j] = 0.0
        sgn[at, j] = 2.0 * side[at] - 1.0
        new_parts.append((unstable, active, upper, intercept, sgn))
    objective = _Objective(chain, rows[rep], new_parts, (x_lo[0] + x_hi[0]) / 2,
                           (x_hi[0] - x_lo[0]) / 2)
    values, _, _ = objective.run([np.asarray(a, np.float32)[rep] for a in alpha],
                                 [np.asarray(b, np.float32)[rep] for b in beta])
    values = np.where(flat < 0, -np.inf, values.astype(np.float64))
    return values.reshape(n_pairs, k, 2)

