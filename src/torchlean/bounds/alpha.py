"""alpha-CROWN: the relaxation slopes optimised, for the output and every intermediate bound.

As in auto_LiRPA's default, every bound CROWN computes gets its own slopes: the specification rows
(one set per example and row) and, with ``intermediate``, each intermediate pre-activation bound
a relaxation depends on (one set per *target* layer, its rows the neurons whose bounds matter --
a relu's unstable ones, every tanh / sigmoid one -- lower and upper). The optimised slopes are
the relu lower slopes in [0, 1] and, for tanh and sigmoid, both the lower and the upper line's
slope (any slope is sound: the engine bounds ``sigma(t) - a t`` itself). The whole chain --
intermediate bounds from their slopes, the relaxations built on those bounds (relu chords follow
them), the specification's bound -- is traced into one torchlean graph with ``tl.compile``, and
projected gradient ascent (Adam, then clipping to the slope's range) runs on the gradients of that
graph's reverse mode. The objective is the shortfall ``sum(min(bound - threshold, 0))`` of the
specification rows (proved rows stop pulling) plus, for each target's slopes, the sum of their
own rows' bounds (the final bound alone gives intermediate slopes a weak signal). It stops early
once every row's traced bound is ``STOP_MARGIN`` above its threshold, or when no
example's best bound has improved for ``PATIENCE`` steps.

The traced bound is written so that its reverse-mode gradient is its derivative: a bias or any
constant term is linear in the multiplier, a relu row is ``v s + relu(v) (alpha - s)``, and an
intermediate bound intersected with CROWN's keeps the gradient of the optimised one (auto_LiRPA's
straight-through guard). ``relu(v)`` / ``relu(-v)`` splits have derivative 0 where ``v`` is exactly
0 -- wherever a slope sits at 0 -- and a plain max stops the gradient where CROWN's bound is the
tighter one; either sent the ascent the wrong way (tests/test_alpha_gradients.py). With these,
the slopes follow auto_LiRPA's alpha-CROWN step for step from the same start.

On a chain of affine layers and relus (the VNN-COMP MNIST-FC and ACAS Xu networks) the same
objective and its gradient run as NumPy products over the neurons that are not inactive
(``bounds.alpha_objective``), several times faster; the traced graph is used for every other
network and is the tests' oracle for that path.

The traced objective is the textbook CROWN bound in plain float64: it only *ranks* slopes. The
bounds reported are the engine's rigorous evaluation with the best slopes found (per example):
``Propagation.lower`` with ``alpha`` set, target by target in graph order, each intersected with
CROWN's, then the specification (sound for any slopes), so the optimiser's arithmetic needs no
care.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import ops_interface as F
from ..engine.transforms import compile as compile_fn
from . import alpha_objective, engine
from .engine import (
    Propagation,
    _with_k,
    convex_slopes,
    convex_terms,
    finite_box,
    handled,
    max_g,
    min_g,
    pool_geometry,
    pool_input_view,
    pool_upper,
    pool_window_view,
    pool_windows,
    relu_slopes,
    smooth_slopes,
)

Array = Any

# Most slope entries optimised for the intermediate bounds (beyond it they keep CROWN's).
ALPHA_ENTRIES = 1 << 24
# Use the NumPy objective of bounds.alpha_objective on relu chains (False: always the traced
# graph, the oracle the tests compare it with).
FAST = True
FAST_DTYPE = np.float64
# Weight of the intermediate rows' own bounds in the objective of their slopes.
DIRECT_WEIGHT = 1.0
# The optimiser stops once no example's best bound has improved for this many steps in a row
# (auto_LiRPA's ``early_stop_patience``: the Adam steps decay, and a bound that has stopped
# moving for 10 steps has settled; one MNIST-FC instance ran 100 steps for what 10 gave).
PATIENCE = 10
# The optimiser counts a row as proved (it stops pulling it, and stops once every conjunction is
# proved) only this far above its threshold: the traced bound is plain float64, the reported one
# rigorous (float32 kernels' rounding included), a little lower. Stopping at 0 left ACAS Xu 1_4
# prop 3 at a rigorous -0.00003 after 9 steps.
STOP_MARGIN = 1e-3
# Optimise max pooling's lower-bound weights over each window (auto_LiRPA's BoundMaxPool alpha)
# with the slopes; False keeps CROWN's single entry (the tests' reference).
POOL_MIX = True


def _sum_rest(x: Any) -> Any:
    """Sum over every axis after the first two of a traced ``(B, K, ...)`` value."""
    if len(x.shape) > 3:
        x = F.reshape(x, shape=tuple(x.shape[:2]) + (int(np.prod(x.shape[2:])),))
    if len(x.shape) == 3:
        x = F.reduce_sum(x, axis=2)
    return x


def _concretize(v: Any, lo: Array, hi: Array) -> Any:
    """Traced ``sum(relu(v) * lo - relu(-v) * hi)``: the box's least value of ``v . x``.

    Written ``v * lo + relu(-v) * (lo - hi)``: the same value, and on a point (``lo == hi``,
    a bias) the linear ``v * lo`` with its derivative everywhere. The split form's derivative
    is 0 where ``v`` is exactly 0 -- as it is wherever a relu slope sits at 0 (CROWN's initial
    slope for half of the unstable neurons, and where the projection clips), so those slopes'
    gradients lost the bias terms (measured: d bound / d slope +0.026 by reverse mode against
    -0.0014 by finite differences on ACAS Xu 3_8 prop 3).
    """
    lo_k, hi_k = _with_k(lo), _with_k(hi)
    if np.array_equal(lo, hi):
        return _sum_rest(v * lo_k)
    return _sum_rest(v * lo_k + F.relu(-v) * (lo_k - hi_k))


class _Chain:
    """Traced CROWN passes over one propagation: ``bound(target, nu0, slopes, boxes)``."""

    def __init__(self, prop: Propagation) -> None:
        self.prop = prop

    def box(self, p: int, boxes: dict[int, Any]) -> tuple[Any, Any]:
        """Bounds of node ``p`` in (B, *rest) form: traced if optimised, else constants."""
        if p in boxes:
            return boxes[p]
        iv = self.prop.bx(p)
        return iv.lo, iv.hi

    def bound(self, owner: Any, target: int, nu0: Array, slope: dict[int, Any],
              boxes: dict[int, Any]) -> Any:
        prop = self.prop
        nodes = prop.nodes
        nu: dict[int, Any] = {target: owner.const(nu0)}
        total: Any = None

        def add(term: Any) -> None:
            nonlocal total
            total = term if total is None else total + term

        def give(p: int, c: Any) -> None:
            nu[p] = c if p not in nu else nu[p] + c

        for i in range(target, -1, -1):
            v = nu.pop(i, None)
            if v is None:
                continue
            node = nodes[i]
            name = node.op.name if node.op is not None else ""
            if i not in prop.data_ids and prop.batched(i) and self._step(
                    owner, i, name, v, slope, boxes, add, give):
                continue
            lo, hi = self.box(i, boxes)
            if isinstance(lo, np.ndarray):
                add(_concretize(v, lo, hi))
            else:  # an optimised box: sum(relu(v) * lo - relu(-v) * hi), traced
                add(_sum_rest(v * _k(lo) + F.relu(-v) * (_k(lo) - _k(hi))))
        assert total is not None
        return total

    def _step(self, owner: Any, i: int, name: str, v: Any, slope: dict[int, Any],
              boxes: dict[int, Any], add: Any, give: Any) -> bool:
        """Pass ``v`` through node ``i`` (False: bound it by its box instead)."""
        prop = self.prop
        nodes = prop.nodes
        node = nodes[i]
        op = node.op
        if name == "linear":
            pw, pb, px = node.parents
            w, b = prop.point(pw), prop.point(pb)
            if w is None or b is None or not prop.batched(px):
                return False
            lead = int(np.prod(v.shape[:-1]))
            flat = F.reshape(v, shape=(lead, w.shape[0]))
            give(px, F.reshape(flat @ w, shape=tuple(v.shape[:-1]) + (w.shape[1],)))
            add(_sum_rest(v * b))
            return True
        if name in ("conv2d", "conv"):
            pw, pb, px = node.parents
            w, b = prop.point(pw), prop.point(pb)
            if prop.whole or w is None or b is None or not prop.batched(px):
                return False
            bk = v.shape[0] * v.shape[1]
            x_shape = nodes[px].shape
            g = F.reshape(v, shape=(bk,) + node.shape[1:])
            dummy = owner.const(np.zeros((bk,) + x_shape[1:]))
            attrs = {k: a for k, a in node.attrs.items() if k != "dtype"}
            gx = op.apply_vjp(  # type: ignore[union-attr]
                owner.ops, g, [owner.const(w), owner.const(b), dummy], None, attrs,
                (False, False, True))[2]
            give(px, F.reshape(gx, shape=tuple(v.shape[:2]) + x_shape[1:]))
            add(_sum_rest(v * b.reshape((1, 1, b.shape[0]) + (1,) * (w.ndim - 2))))
            return True
        if name in ("matmul", "matmul_nd", "bmm"):
            a, b2 = node.parents
            if prop.variable[a] == prop.variable[b2]:
                return False
            left = prop.variable[a]
            px, pw = (a, b2) if left else (b2, a)
            w = prop.point(pw)
            o, xs = tuple(node.shape), tuple(nodes[px].shape)
            if (w is None or w.ndim < 2 or len(xs) < 2 or len(xs) != len(o) or xs[:-2] != o[:-2]
                    or w.ndim > len(o) or not prop.batched(px)
                    or (not prop.whole and w.ndim == len(o) > 2 and w.shape[0] != 1)):
                return False
            wp = w.reshape((1,) * (len(o) - w.ndim) + w.shape)
            if prop.whole:
                wk = wp.reshape((1, 1) + wp.shape)
            elif len(o) == 2:  # rows are examples: (B, K, m) @ (m, k) as row vectors
                wk = w
            else:  # the example axis leads W: insert the row axis
                wk = wp.reshape((1, 1) + wp.shape[1:])
            wt = owner.const(np.ascontiguousarray(np.swapaxes(wk, -1, -2)))
            give(px, F.matmul_any(v, wt) if left else F.matmul_any(wt, v))
            return True
        if name in ("reshape", "flatten", "detach"):
            px = node.parents[0]
            if not prop.batched(px):
                return False
            give(px, F.reshape(v, shape=tuple(v.shape[:2]) + prop.rest(px)))
            return True
        if name == "permute":
            px = node.parents[0]
            inv = np.argsort(tuple(node.attrs["perm"]))
            axes = ((0, 1) + tuple(int(j) + 2 for j in inv) if prop.whole
                    else (0, 1) + tuple(int(j) + 1 for j in inv[1:]))
            give(px, F.permute(v, perm=axes))
            return True
        if name in ("add", "sub"):
            if not all(not prop.variable[p] or prop.batched(p) for p in node.parents):
                return False
            for p, sign in zip(node.parents, (1.0, 1.0 if name == "add" else -1.0),
                               strict=True):
                if prop.variable[p]:
                    w = v if sign > 0 else -v
                    if nodes[p].shape != node.shape:
                        w = _traced_sum_to(w, prop.rest(p))
                    give(p, w)
                else:
                    c = prop.ivals[p]
                    assert c is not None
                    lo = np.broadcast_to(sign * (c.lo if sign > 0 else c.hi), prop.bshape(node))
                    hi = np.broadcast_to(sign * (c.hi if sign > 0 else c.lo), prop.bshape(node))
                    add(_concretize(v, lo, hi))
            return True
        if name == "mul":
            a, b2 = node.parents
            var, const = (a, b2) if prop.variable[a] else (b2, a)
            c = prop.point(const)
            if c is None or nodes[var].shape != node.shape or prop.variable[const]:
                return False
            give(var, v * _with_k(np.broadcast_to(c, prop.bshape(node))))
            return True
        if name == "scale":
            give(node.parents[0], v * float(node.attrs["c"]))
            return True
        if name == "add_scalar":
            give(node.parents[0], v)
            add(_sum_rest(v) * float(node.attrs["c"]))
            return True
        if name == "relu":
            return self._relu(owner, i, v, slope, boxes, add, give)
        if name in ("tanh", "sigmoid"):
            px = node.parents[0]
            pbox = prop.bx(px)
            if not finite_box(pbox):
                return False
            if i in slope:
                # optimised slopes; the lines' offsets sigma(t*) - a t* at the current extreme
                # points t* (inputs, recomputed every step): exact values and, by the envelope
                # theorem, exact gradients in the slopes
                a_lo, a_hi, s_lo, t_lo, s_hi, t_hi = slope[i]
                h_lo = s_lo - a_lo * t_lo
                h_hi = s_hi - a_hi * t_hi
                add(_sum_rest(F.relu(v) * h_lo - F.relu(-v) * h_hi))
                give(px, v * a_hi + F.relu(v) * (a_lo - a_hi))
                return True
            a_lo, a_hi = smooth_slopes(name, pbox.lo, pbox.hi)
            h_lo = min_g(name, pbox.lo, pbox.hi, a_lo)
            h_hi = max_g(name, pbox.lo, pbox.hi, a_hi)
            add(_sum_rest(F.relu(v) * _with_k(h_lo) - F.relu(-v) * _with_k(h_hi)))
            give(px, v * _with_k(a_hi) + F.relu(v) * _with_k(a_lo - a_hi))
            return True
        if name in ("exp", "softplus"):
            px = node.parents[0]
            pbox = prop.bx(px)
            if not finite_box(pbox) or (
                    name == "exp" and np.any(pbox.hi > 700)):
                return False
            a_lo, a_hi = convex_slopes(name, pbox.lo, pbox.hi)
            h_lo, h_hi = convex_terms(name, pbox.lo, pbox.hi, a_lo, a_hi)
            add(_sum_rest(F.relu(v) * _with_k(h_lo) - F.relu(-v) * _with_k(h_hi)))
            give(px, v * _with_k(a_hi) + F.relu(v) * _with_k(a_lo - a_hi))
            return True
        if name in ("max_pool2d", "max_pool"):
            px = node.parents[0]
            k = pool_geometry(node, nodes[px].shape)
            if k is None or prop.whole:
                return False
            pbox = prop.bx(px)
            onehot, dominated, top = pool_windows(pbox.lo, pbox.hi, k)
            dom = _with_k(dominated.astype(np.float64))
            coef = v * dom + F.relu(v) * (1.0 - dom)
            neg = F.relu(-v) * (1.0 - dom)  # |v| where the upper side bounds the max
            top_k: Any = _with_k(top)
            pop = nodes[px].op
            pre = nodes[px].parents[0] if pop is not None and pop.name == "relu" else None
            if pre is not None and pre in boxes:
                # a relu's output whose input bounds are optimised: the window's greatest upper
                # bound follows them (as the rigorous pass's, refreshed by _tighten_rows)
                top_k = _k(F.max_pool2d(F.relu(boxes[pre][1]), kernel_size=k, stride=None))
            x_shape = nodes[px].shape

            def spread(c: Any) -> Any:  # (B, K, C, Ho, Wo) -> each window's entries
                b_, k_, ch, ho, wo = c.shape
                c7 = F.broadcast_to(F.reshape(c, shape=(b_, k_, ch, ho, 1, wo, 1)),
                                    shape=(b_, k_, ch, ho, k[0], wo, k[1]))
                return F.reshape(c7, shape=(b_, k_) + x_shape[1:])

            if engine.POOL_CHORD and _finite(prop, px):
                # the engine's chord on the entry of greatest upper bound: max <= a x_i + h
                up_hot, a, m_lo, l_i = pool_upper(pbox.lo, pbox.hi, k)
                h_k = (_with_k(np.maximum(m_lo - a * l_i, (1.0 - a) * top)) if pre not in boxes
                       else top_k * _with_k(1.0 - a))
                add(_sum_rest(-neg * h_k))
                give(px, spread(-neg * _with_k(a)) * _with_k(pool_input_view(up_hot, k)))
            else:
                add(_sum_rest(-neg * top_k))
            up5 = spread(coef)
            if i not in slope:
                give(px, up5 * _with_k(onehot))
                return True
            # optimised window weights (B, K, C, Ho, Wo, kh*kw) on the simplex (the projection
            # keeps them there): the mix in the input's layout; dominated windows keep their
            # exact entry, as the rigorous pass does
            ch, ho, wo = node.shape[1:]
            wk = tuple(slope[i].shape[:2])
            w7 = F.reshape(slope[i], shape=wk + (ch, ho, wo, k[0], k[1]))
            w_in = F.reshape(F.permute(w7, perm=(0, 1, 2, 3, 5, 4, 6)), shape=wk + x_shape[1:])
            dom_in = pool_input_view(np.repeat(dominated[..., None], k[0] * k[1], axis=-1)
                                     .astype(np.float64), k)
            give(px, up5 * (_with_k(onehot * dom_in) + w_in * _with_k(1.0 - dom_in)))
            return True
        return False

    def _feeds_pool(self, i: int) -> bool:
        """Whether node ``i``'s output is read by a max pooling."""
        prop = self.prop
        return any(_name(prop, r) in POOLS for r in prop.readers()[i]
                   if prop.nodes[r].op is not None)

    def _relu(self, owner: Any, i: int, v: Any, slope: dict[int, Any], boxes: dict[int, Any],
              add: Any, give: Any) -> bool:
        prop = self.prop
        px = prop.nodes[i].parents[0]
        base = prop.bx(px)
        if not finite_box(base):
            return False
        lower, upper = relu_slopes(base.lo, base.hi)
        unstable = (base.lo < 0) & (base.hi > 0)
        mask = unstable.astype(np.float64)
        lo_slope = _with_k(lower)
        if px in boxes:
            # optimised bounds (traced): the chord through (l, 0) and (u, u) of the neurons
            # CROWN left unstable, l and u clamped to their sides of 0
            lo, hi = boxes[px]
            lc = -F.relu(-lo)
            uc = F.relu(hi)
            chord = uc / (uc - lc + 1e-30)
            up_slope = chord * mask + np.where(unstable, 0.0, upper)
            intercept = -(chord * lc) * mask
            if i in slope:
                # a neuron the optimised bounds made stable takes its exact slope (1 or 0), as
                # the rigorous pass does (auto_LiRPA's masks, recomputed every step); a free
                # slope there only loosens the traced bound the optimiser climbs
                active = F.positive_mask(lo) * mask
                still = mask - active - F.positive_mask(-hi) * mask
                lo_slope = slope[i] * _k(still) + _k(active) + _with_k(lower * (1.0 - mask))
            give(px, _relu_mult(v, lo_slope, _k(up_slope), self._feeds_pool(i)))
            add(_sum_rest(-F.relu(-v) * _k(intercept)))
        else:
            if i in slope:  # stable neurons keep their exact slope (as the rigorous pass)
                lo_slope = slope[i] * _with_k(mask) + _with_k(lower * (1.0 - mask))
            intercept = np.where(unstable, -upper * base.lo, 0.0)
            give(px, _relu_mult(v, lo_slope, _with_k(upper), self._feeds_pool(i)))
            add(_sum_rest(-F.relu(-v) * _with_k(intercept)))
        return True


def _relu_mult(v: Any, lo_slope: Any, up_slope: Any, right: bool) -> Any:
    """A relu's traced multiplier: ``v lo_slope`` where ``v >= 0``, ``v up_slope`` below.

    Where ``v`` is exactly 0 the two forms differ in their derivative only: ``right`` takes the
    side ``v > 0`` (the lower slope). A max pooling's optimised window weights sit at 0 on most
    entries (the simplex projection's zeros) and can only grow, which makes ``v`` positive
    there; the other form's derivative was the side ``v < 0`` (measured: the gradient of a zero
    weight off by 2.6e-3 of 3.2e-2 against one-sided differences). Relu chains keep the other
    form, which bounds.alpha_objective's NumPy gradient reproduces."""
    if right:
        return v * lo_slope + F.relu(-v) * (lo_slope - up_slope)
    return v * up_slope + F.relu(v) * (lo_slope - up_slope)


def _traced_sum_to(v: Any, rest: tuple[int, ...]) -> Any:
    """Traced multipliers (B, K, *r) summed down to (B, K, *rest), as ``engine._sum_to``."""
    r = tuple(v.shape[2:])
    lead = len(r) - len(rest)
    for _ in range(lead):
        v = F.reduce_sum(v, axis=2)
    for j, (a, b) in enumerate(zip(rest, r[lead:], strict=True)):
        if a == 1 and b != 1:
            shape = tuple(v.shape)
            v = F.reshape(F.reduce_sum(v, axis=2 + j), shape=shape[:2 + j] + (1,) + shape[3 + j:])
    return v


def _k(x: Any) -> Any:
    """A traced (B, *rest) value as (B, 1, *rest)."""
    return F.reshape(x, shape=(x.shape[0], 1) + tuple(x.shape[1:]))


def optimise(prop: Propagation, out_id: int, spec: Array, start: tuple[Array, Array], *,
             thresholds: Array | None, steps: int, lr: float, intermediate: bool = True,
             groups: Array | None = None) -> tuple[tuple[Array, Array], dict[str, Any]]:
    """Optimised bounds of the specification rows (rigorous, never looser than ``start``) and a
    summary; with ``intermediate``, ``prop``'s intermediate bounds are tightened in place.

    ``groups`` (``(K,)`` integers, default one group per row): rows of one group form a
    conjunction, proved when ANY of its rows is above its threshold (a VNN-LIB unsafe ``and``:
    one violated constraint refutes it); the optimiser then climbs each open group's best row
    only, and stops once every group is proved. Examples whose groups are all proved already
    are left alone (their slopes cannot change the verdict); the rest are optimised as one batch.
    """
    lo, hi = start
    t = np.zeros_like(lo) if thresholds is None else thresholds
    g = np.arange(lo.shape[1]) if groups is None else np.asarray(groups, np.int64)
    rows = np.flatnonzero(np.any(_group_gaps(lo - t, g) <= 0, axis=1))
    if rows.size == 0 or steps == 0:
        return start, {"alpha_steps": 0, "alpha_examples": 0}
    whole_batch = rows.size == prop.batch
    if not whole_batch and _needs_traced_batch(prop):
        rows, whole_batch = np.arange(prop.batch), True
    sub = prop if whole_batch else prop.subset(rows)
    sub_spec = spec if spec.shape[0] == 1 else spec[rows]
    bound, info = _optimise(sub, out_id, sub_spec, t[rows], steps=steps, lr=lr,
                            intermediate=intermediate, groups=g)
    out = np.array(lo, copy=True)
    out[rows] = np.maximum(out[rows], bound)
    if not whole_batch:
        for i, iv in enumerate(sub.ivals):  # tightened intermediate bounds, back in place
            full = prop.ivals[i]
            if iv is None or full is None or iv is full or not prop.batched(i):
                continue
            full.lo = np.array(full.lo, copy=True)
            full.hi = np.array(full.hi, copy=True)
            full.lo[rows] = np.maximum(full.lo[rows], iv.lo)
            full.hi[rows] = np.minimum(full.hi[rows], iv.hi)
    info["alpha_examples"] = int(rows.size)
    return (out, hi), info


def _needs_traced_batch(prop: Propagation) -> bool:
    """Whether a handler would need the traced batch size (generic linear ops)."""
    special = set(handled())
    return any(n.op is not None and n.op.linear and n.op.name not in special
               for n in prop.nodes)


class _Problem:
    """What one alpha-CROWN optimisation works on: the intermediate targets (node, neurons) and
    their rows, the slopes' layout (bound, node) and starting values, and ``traced()``: the
    objective traced into a graph (its slopes and offsets as inputs) and the id of its node of
    the specification's bound."""

    def __init__(self, targets: list[tuple[int, Array]], rows_of: dict[int, Array],
                 layout: list[tuple[int, int]], init: list[Array], traced: Any) -> None:
        self.targets, self.rows_of, self.layout, self.init = targets, rows_of, layout, init
        self.traced = traced


def _problem(prop: Propagation, out_id: int, spec: Array, intermediate: bool
             ) -> _Problem | None:
    nodes = prop.nodes
    acts = [i for i, n in enumerate(nodes)
            if i < out_id and n.kind == "op" and n.op is not None and prop.batched(i)
            and ((n.op.name == "relu" and _unstable(prop, n.parents[0]).any())
                 or (n.op.name in SMOOTH and _finite(prop, n.parents[0])))]
    # max poolings whose windows are not all decided: their lower-bound mixes are optimised too
    acts = sorted(acts + (_pools(prop, out_id) if POOL_MIX else []))
    k = spec.shape[1]
    if not acts:
        return None
    # Intermediate targets: pre-activations of the optimised nodes that CROWN bounded (beyond
    # the first layer), each with its rows: the neurons whose bounds shape the relaxation (the
    # union over examples of the unstable ones for a relu; all for tanh / sigmoid).
    targets: list[tuple[int, Array]] = []
    if intermediate:
        wanted = prop.targets()
        budget = ALPHA_ENTRIES
        for r in acts:
            px = nodes[r].parents[0]
            if px not in wanted or any(px == q for q, _ in targets):
                continue
            if _name(prop, r) in POOLS:
                continue
            need = (_unstable(prop, px) if _name(prop, r) == "relu"
                    else np.ones(prop.bshape(nodes[px]), dtype=bool))
            which = np.flatnonzero(need.reshape(prop.batch, -1).any(axis=0))
            size = prop.batch * 2 * which.size * sum(
                int(np.prod(prop.rest(nodes[q].parents[0] if _name(prop, q) in POOLS else q)))
                for q in acts if q < px)
            if size > budget:
                break
            budget -= size
            targets.append((px, which))
    rows_of = {px: _rows(prop, px, which) for px, which in targets}
    # graph inputs: the slopes of every (bound, node) pair -- one array for a relu, a lower and
    # an upper slope for tanh / sigmoid -- then, per tanh / sigmoid pair, the four offset inputs
    layout: list[tuple[int, int]] = [(out_id, r) for r in acts]
    for px, _ in targets:
        layout += [(px, r) for r in acts if r < px]
    init: list[Array] = []
    for tgt, r in layout:
        rows = k if tgt == out_id else 2 * dict(targets)[tgt].size
        pbox = prop.bx(nodes[r].parents[0])
        if _name(prop, r) in POOLS:  # the entry with the greatest lower bound (CROWN's choice)
            pk = pool_geometry(nodes[r], nodes[nodes[r].parents[0]].shape)
            assert pk is not None
            onehot = pool_window_view(pool_windows(pbox.lo, pbox.hi, pk)[0], pk)
            init.append(np.repeat(_with_k(onehot), rows, axis=1))
        elif _name(prop, r) == "relu":
            init.append(np.repeat(_with_k(relu_slopes(pbox.lo, pbox.hi)[0]), rows, axis=1))
        else:
            for a in smooth_slopes(_name(prop, r), pbox.lo, pbox.hi):
                init.append(np.repeat(_with_k(a), rows, axis=1))
    n_alpha = len(init)
    chain = _Chain(prop)
    spec_node: list[int] = []

    def objective(*args: Any) -> Any:
        owner = args[0].owner
        slopes: dict[int, dict[int, Any]] = {}
        a_it, x_it = iter(args[:n_alpha]), iter(args[n_alpha:])
        for tgt, r in layout:
            if _width(prop, r) == 1:
                slopes.setdefault(tgt, {})[r] = next(a_it)
            else:
                slopes.setdefault(tgt, {})[r] = (next(a_it), next(a_it)) + tuple(
                    next(x_it) for _ in range(4))
        boxes: dict[int, Any] = {}
        direct: Any = None
        for px, which in targets:
            b = chain.bound(owner, px, rows_of[px], slopes.get(px, {}), boxes)
            box = prop.bx(px)
            boxes[px] = _tightened(prop, px, which, b,
                                   owner.const(box.lo.reshape(prop.batch, -1)),
                                   owner.const(box.hi.reshape(prop.batch, -1)))
            width = F.reduce_sum(b, axis=1)  # minus the summed widths of the target's rows
            direct = width if direct is None else direct + width
        value = chain.bound(owner, out_id, spec, slopes[out_id], boxes)
        spec_node.append(value.id)
        if direct is None:
            return value
        # Each target's slopes also climb their own rows' bounds (tighter intermediate bounds
        # help every later relaxation; the final bound alone gives them a weak signal).
        direct = F.reshape(direct, shape=(direct.shape[0], 1))
        return value + F.broadcast_to(direct, shape=tuple(value.shape)) * DIRECT_WEIGHT


    def traced() -> tuple[Any, int]:
        aux0 = _offsets(prop, layout, init)
        graph = compile_fn(objective, *[a.shape for a in init], *[a.shape for a in aux0],
                           dtype="float64").graph
        return graph, spec_node[-1]

    return _Problem(targets, rows_of, layout, init, traced)


def _optimise(prop: Propagation, out_id: int, spec: Array, t: Array, *, steps: int, lr: float,
              intermediate: bool, groups: Array) -> tuple[Array, dict[str, Any]]:
    t = t + STOP_MARGIN  # the optimiser's own thresholds (see STOP_MARGIN); the caller's stay
    k = spec.shape[1]
    problem = _problem(prop, out_id, spec, intermediate)
    if problem is None:
        return prop.lower(out_id, spec), {"alpha_steps": 0}
    targets, rows_of, layout, init = (problem.targets, problem.rows_of, problem.layout,
                                      problem.init)
    aux0 = _offsets(prop, layout, init)
    # a chain of affine layers and relus: the same objective and gradient in NumPy, over the
    # neurons that are not inactive (bounds.alpha_objective); else the traced graph
    fast = (alpha_objective.build(prop, out_id, spec, layout, targets, DIRECT_WEIGHT,
                                  FAST_DTYPE) if FAST else None)
    if fast is None:
        graph, spec_node = problem.traced()
    caps = _caps(prop, layout, init)
    # tanh / sigmoid bounds are far more sensitive to their slopes than relu bounds: smaller
    # steps (relative to the slope's range)
    flags = _relu_flags(prop, layout)
    scale = [1.0 if c == 1.0 and _is_relu else SMOOTH_STEP * c for c, _is_relu in
             zip(caps, flags, strict=True)]
    simplex = _pool_flags(prop, layout)
    alphas = [a.copy() for a in init]
    best = np.full((prop.batch if spec.shape[0] == 1 else spec.shape[0], k), -np.inf)
    best_alphas = [a.copy() for a in init]
    m1 = [np.zeros_like(a) for a in alphas]
    m2 = [np.zeros_like(a) for a in alphas]
    b1, b2 = 0.9, 0.999
    rate = lr
    done_steps = 0
    stale = 0  # steps since any example's best bound last improved
    try:
        for step in range(1, steps + 1):
            if fast is not None:
                total = fast.value(alphas)
                value = fast.spec_value()
            else:
                aux = aux0 if step == 1 else _offsets(prop, layout, alphas)
                values = graph.evaluate(graph.check_inputs("alpha-crown", alphas + aux))
                total = values[graph.output]
                value = np.asarray(values[spec_node])
            # the traced bound (plain float64) only ranks the slopes: the best per example is
            # evaluated rigorously at the end
            better = _score(value, t, groups) > _score(best, t, groups)
            best = np.where(better[:, None], value, best)
            for j, a in enumerate(alphas):
                # (the step below makes new arrays: ``a`` itself is never changed in place)
                if better.all() or (better.any() and a.shape[0] != len(better)):
                    best_alphas[j] = a
                elif better.any():
                    mask = better.reshape((-1,) + (1,) * (a.ndim - 1))
                    best_alphas[j] = np.where(mask, a, best_alphas[j])
            done_steps = step
            stale = 0 if better.any() else stale + 1
            if (np.all(_group_gaps(best - t, groups) > 0) or step == steps
                    or stale >= PATIENCE):
                break
            # d sum over groups of min(max over the group's rows of (bound - t), 0) / d bound:
            # the best row of each group not proved yet
            seed = np.broadcast_to(_seed_rows(value - t, groups, best - t),
                                   np.shape(total)).astype(np.float64)
            if fast is not None:
                grads = fast.gradient(seed, alphas)
            else:
                dense = graph.backprop(values, graph.output, seed)
                grads = [dense[graph.inputs[j]] for j in range(len(alphas))]
            for j, a in enumerate(alphas):
                g = grads[j]
                if g is None:
                    continue
                m1[j] = b1 * m1[j] + (1 - b1) * g
                m2[j] = b2 * m2[j] + (1 - b2) * g * g
                step_j = rate * scale[j] * (m1[j] / (1 - b1 ** step)) / (
                    np.sqrt(m2[j] / (1 - b2 ** step)) + 1e-8)
                # ascent, then projection (window weights: onto the simplex)
                alphas[j] = (project_simplex(a + step_j) if simplex[j]
                             else np.clip(a + step_j, 0.0, caps[j]))
            rate *= 0.98
        # rigorous bounds with the best slopes: intermediate targets in order (each tightens
        # the boxes the later relaxations use), then the specification
        for px, which in targets:
            prop.alpha = _slopes_for(prop, layout, best_alphas, px)
            _tighten_rows(prop, px, which, prop.lower(px, rows_of[px]))
        prop.alpha = _slopes_for(prop, layout, best_alphas, out_id)
        bound = prop.lower(out_id, spec)
    finally:
        prop.alpha = {}
    return bound, {"alpha_steps": done_steps, "alpha_targets": len(targets),
                   "alpha_pools": len({r for _, r in layout if _name(prop, r) in POOLS}),
                   "alpha_objective": "traced" if fast is None else "numpy"}


SMOOTH = ("tanh", "sigmoid")
POOLS = ("max_pool2d", "max_pool")
SMOOTH_STEP = 0.05


def _relu_flags(prop: Propagation, layout: list[tuple[int, int]]) -> list[bool]:
    """Per optimised array: whether it takes relu-sized steps (relu slopes, pool weights)."""
    flags: list[bool] = []
    for _, r in layout:
        flags += [True] if _width(prop, r) == 1 else [False, False]
    return flags


def _pool_flags(prop: Propagation, layout: list[tuple[int, int]]) -> list[bool]:
    """Per optimised array: whether it holds max-pool window weights (projected onto the
    simplex)."""
    flags: list[bool] = []
    for _, r in layout:
        flags += [_name(prop, r) in POOLS] * _width(prop, r)
    return flags


def _width(prop: Propagation, r: int) -> int:
    """How many arrays node ``r``'s relaxation optimises: 1 (relu slope, pool weights) or 2
    (tanh / sigmoid: a lower and an upper slope)."""
    return 2 if _name(prop, r) in SMOOTH else 1


def _pools(prop: Propagation, out_id: int) -> list[int]:
    """The max poolings before ``out_id`` the engine relaxes (non-overlapping windows on a
    finite box) with a window no entry dominates for some example."""
    out = []
    for i, n in enumerate(prop.nodes[:out_id]):
        if n.kind != "op" or n.op is None or n.op.name not in POOLS or prop.whole:
            continue
        px = n.parents[0]
        k = pool_geometry(n, prop.nodes[px].shape)
        if k is None or not prop.batched(i) or not prop.batched(px) or not _finite(prop, px):
            continue
        pbox = prop.bx(px)
        if not pool_windows(pbox.lo, pbox.hi, k)[1].all():
            out.append(i)
    return out


def project_simplex(w: Array) -> Array:
    """Euclidean projection of each vector on the last axis onto the probability simplex
    (sort-based; Duchi et al. 2008, as auto_LiRPA's max-pool weights are projected)."""
    n = w.shape[-1]
    srt = -np.sort(-w, axis=-1)
    css = np.cumsum(srt, axis=-1) - 1.0
    ks = np.arange(1, n + 1, dtype=np.float64)
    rho = np.sum(srt - css / ks > 0, axis=-1, keepdims=True)  # >= 1 always
    theta = np.take_along_axis(css, rho - 1, axis=-1) / rho
    return np.maximum(w - theta, 0.0)


def _name(prop: Propagation, i: int) -> str:
    op = prop.nodes[i].op
    assert op is not None
    return op.name


def _finite(prop: Propagation, p: int) -> bool:
    return finite_box(prop.bx(p))


def _caps(prop: Propagation, layout: list[tuple[int, int]], init: list[Array]) -> list[float]:
    """Upper ends of the slopes' ranges: 1 for a relu, the steepest slope of tanh / sigmoid."""
    caps: list[float] = []
    for _, r in layout:
        name = _name(prop, r)
        caps += [1.0] if _width(prop, r) == 1 else [1.0 if name == "tanh" else 0.25] * 2
    assert len(caps) == len(init)
    return caps


def _offsets(prop: Propagation, layout: list[tuple[int, int]], alphas: list[Array]
             ) -> list[Array]:
    """Per tanh / sigmoid pair: ``sigma(t*)`` and ``t*`` where ``sigma(t) - a t`` is least on
    the neuron's interval (lower slope) and greatest (upper slope), in plain float64."""
    out: list[Array] = []
    j = 0
    for _, r in layout:
        name = _name(prop, r)
        if _width(prop, r) == 1:
            j += 1
            continue
        box = prop.bx(prop.nodes[r].parents[0])
        lo, hi = _with_k(box.lo), _with_k(box.hi)
        t_lo = _argmin_g(name, lo, hi, alphas[j])
        t_hi = -_argmin_g(name, -hi, -lo, alphas[j + 1])  # by tanh / sigmoid's symmetry
        for tt in (t_lo, t_hi):
            out += [_sigma_of(name, tt), tt]
        j += 2
    return out


def _sigma_of(name: str, t: Array) -> Array:
    with np.errstate(over="ignore"):
        return np.tanh(t) if name == "tanh" else 1.0 / (1.0 + np.exp(-t))


def _argmin_g(name: str, lo: Array, hi: Array, a: Array) -> Array:
    """Where ``sigma(t) - a t`` is least on [lo, hi]: an end, or the critical point of the
    convex part (t <= 0), approximately."""
    lo, hi, a = np.broadcast_arrays(lo, hi, a)
    with np.errstate(invalid="ignore", divide="ignore"):
        if name == "tanh":
            m = -np.arctanh(np.sqrt(np.clip(1.0 - a, 0.0, 1.0 - 1e-16)))
        else:
            y = 0.5 * (1.0 - np.sqrt(np.clip(1.0 - 4.0 * a, 0.0, 1.0)))
            m = np.log(np.maximum(y, 1e-300)) - np.log1p(-y)
    m = np.clip(np.nan_to_num(m, nan=0.0), lo, np.minimum(hi, 0.0))
    m = np.where(lo < 0, m, lo)
    cands = np.stack([lo, hi, m])
    g = _sigma_of(name, cands) - a * cands
    return np.take_along_axis(cands, np.argmin(g, axis=0)[None], axis=0)[0]


def _slopes_for(prop: Propagation, layout: list[tuple[int, int]], alphas: list[Array],
                target: int) -> dict[int, Any]:
    """The slopes of bound ``target`` as the engine takes them (a pair for tanh / sigmoid)."""
    out: dict[int, Any] = {}
    j = 0
    for tgt, r in layout:
        width = _width(prop, r)
        if tgt == target:
            out[r] = alphas[j] if width == 1 else (alphas[j], alphas[j + 1])
        j += width
    return out


def _group_gaps(gaps: Array, groups: Array) -> Array:
    """Per example and group: the best (greatest) gap of the group's rows, ``(B, G)``."""
    out = np.full((gaps.shape[0], int(groups.max()) + 1 if groups.size else 0), -np.inf)
    np.maximum.at(out.T, groups, gaps.T)
    return out


def _leading_rows(gaps: Array, groups: Array, best_gaps: Array) -> Array:
    """Per example, a 0/1 mask of the rows to climb: in each group not yet proved (by the best
    bounds so far), the row with the greatest current gap."""
    open_ = _group_gaps(best_gaps, groups) <= 0  # (B, G)
    lead = _group_gaps(gaps, groups)
    with np.errstate(invalid="ignore"):
        top = gaps >= lead[:, groups]
    # one row per group (the first of ties)
    mask = np.zeros(gaps.shape, dtype=bool)
    for grp in np.unique(groups):
        cols = np.flatnonzero(groups == grp)
        first = cols[np.argmax(top[:, cols], axis=1)]
        mask[np.arange(gaps.shape[0]), first] = open_[:, grp]
    return mask


SEED = "all"


def _seed_rows(gaps: Array, groups: Array, best_gaps: Array) -> Array:
    if SEED == "lead":
        return _leading_rows(gaps, groups, best_gaps)
    open_ = _group_gaps(best_gaps, groups) <= 0
    return open_[:, groups] & (best_gaps <= 0)


def _score(bound: Array, t: Array, groups: Array) -> Array:
    """Per example: the summed shortfall of the groups below their thresholds (each group's best
    row), ties broken by the sum of the bounds."""
    with np.errstate(invalid="ignore"):
        s = (np.minimum(_group_gaps(bound - t, groups), 0.0).sum(axis=1)
             + 1e-9 * bound.sum(axis=1))
    return np.where(np.isfinite(s), s, -np.inf)


def _rows(prop: Propagation, px: int, which: Array) -> Array:
    """Multipliers selecting neurons ``which`` of node ``px``: rows +e then -e."""
    n = int(np.prod(prop.rest(px)))
    rows = np.zeros((which.size, n))
    rows[np.arange(which.size), which] = 1.0
    rows = np.concatenate([rows, -rows])
    return rows.reshape((1, 2 * which.size) + prop.rest(px))


def _tightened(prop: Propagation, px: int, which: Array, b: Any, lo0: Any, hi0: Any
               ) -> tuple[Any, Any]:
    """Traced (B, *rest) bounds of ``px``: the reference bounds ``lo0``, ``hi0`` (traced
    inputs, (B, n)) improved on ``which`` by the bound ``b`` (B, 2m) of the rows +e, -e."""
    n = int(np.prod(prop.rest(px)))
    m = which.size
    owner = b.owner
    scatter = np.zeros((m, n))
    scatter[np.arange(m), which] = 1.0
    pick = owner.const(np.ascontiguousarray(scatter.T))
    put = owner.const(scatter)
    new_lo = b @ owner.const(np.concatenate([np.eye(m), np.zeros((m, m))]))  # (B, m)
    new_hi = b @ owner.const(np.concatenate([np.zeros((m, m)), -np.eye(m)]))
    # max(new, reference) in value, with the gradient of ``new`` everywhere (auto_LiRPA's
    # guard). A plain max stops the gradient wherever the reference is tighter: a row the
    # optimiser pushed below CROWN's bound (early, large Adam steps do) then never gets a signal
    # back, and its slopes stay where they made that bound worse (measured: a third of the
    # second and third layers' rows on ACAS Xu 1_9 prop 1; the final margin -5.24 against -3.98).
    lo0p, hi0p = lo0 @ pick, hi0 @ pick
    gain_lo = (new_lo - lo0p + F.detach(F.relu(lo0p - new_lo))) @ put
    gain_hi = (hi0p - new_hi + F.detach(F.relu(new_hi - hi0p))) @ put
    shape = (prop.batch,) + prop.rest(px)
    return F.reshape(lo0 + gain_lo, shape=shape), F.reshape(hi0 - gain_hi, shape=shape)


def _tighten_rows(prop: Propagation, px: int, which: Array, b: Array) -> None:
    """Intersect node ``px``'s bounds with the rigorous row bounds ``b`` (B, 2m), then drop the
    cached relaxations built on the old bounds."""
    iv = prop.ivals[px]
    assert iv is not None
    m = which.size
    shape = iv.lo.shape
    lo = np.array(iv.lo, dtype=np.float64).reshape(prop.batch, -1)
    hi = np.array(iv.hi, dtype=np.float64).reshape(prop.batch, -1)
    lo[:, which] = np.maximum(lo[:, which], b[:, :m])
    hi[:, which] = np.minimum(hi[:, which], -b[:, m:])
    iv.lo, iv.hi = lo.reshape(shape), hi.reshape(shape)
    for r in prop.readers()[px]:
        # a relu of these bounds (exact in float32): its output box tightens with them, which
        # the relaxations reading it (a max pooling's window bounds) use
        out = prop.ivals[r]
        node = prop.nodes[r]
        if out is not None and node.op is not None and node.op.name == "relu":
            out.lo = np.maximum(out.lo, np.maximum(iv.lo, 0.0))
            out.hi = np.minimum(out.hi, np.maximum(iv.hi, 0.0))
    prop._cache = {key: val for key, val in prop._cache.items() if key[0] == "point"}


def _unstable(prop: Propagation, p: int) -> Array:
    pbox = prop.bx(p)
    return (pbox.lo < 0) & (pbox.hi > 0)
