"""alpha-CROWN's objective and its gradient written out in NumPy, for chains of affine layers and
relus (the VNN-COMP MNIST-FC and ACAS Xu networks).

``bounds.alpha`` optimises the relu slopes on a traced torchlean graph of the whole bound (every
intermediate target's CROWN pass, the relaxations built on their bounds, the specification's
pass), which is general but slow: its products are dense over every neuron, and each step pays
the graph's evaluation and reverse-mode overhead. On a chain ``x -> A_0 -> relu -> A_1 -> ... ->
A_{L-1}`` (``bounds.forward.chain_of``: ``A_k`` a ``linear``, or a ``matmul`` by a constant and
an ``add``; the input may be reshaped and shifted first) the same objective is a short sequence
of products, written here with its hand-derived gradient:

- a pass from ``z_j`` down to the input keeps, per relu, only the neurons that are not inactive
  in some example (an inactive neuron's multiplier is exactly 0 whatever the slopes), so every
  product uses ``W_k`` restricted to those rows and columns;
- the gradient of a pass is its adjoint, a *forward* sweep: the input vertex that minimises
  each row (``where(v < 0, hi, lo)``) is run through the relaxed network, and the slope gradient
  is that adjoint times the positive part of the multiplier. Intermediate bounds that the
  optimiser tightens feed the later passes' chords; their gradients flow back to the rows of the
  earlier targets as extra row weights (targets are processed in reverse order).

The value and gradient are those of the traced graph (``_Chain`` in ``bounds.alpha``), including
its conventions at ties (a relu's derivative is 0 at 0, a multiplier of exactly 0 takes the
upper slope's derivative, the straight-through intersection with CROWN's bounds), so the
optimiser takes the same steps; ``tests/test_alpha_objective.py`` checks both against the traced
graph's reverse mode. Like the traced objective it only *ranks* slopes: the reported bound is
the engine's rigorous pass with the best slopes found, so this arithmetic needs no care.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import Propagation, finite_box, relu_slopes
from .forward import chain_of

Array = Any

# Ops that pass a chain's value on unchanged but for its shape, and constant shifts.
_RESHAPES = ("reshape", "flatten", "detach")


@dataclass
class _Layer:
    """One affine layer ``z = h @ w.T + b`` and its relu (absent on the last layer)."""

    top: int              # node id of the layer's output (the relu's input)
    w: Array              # (n_out, n_in), float64
    b: Array              # (n_out,)
    relu: int | None = None


class ChainObjective:
    """The traced objective of ``alpha._optimise`` on a relu chain: ``value(alphas)`` then
    ``gradient(seed)`` (the gradients of ``sum(seed * objective)`` in the layout of ``alphas``)."""

    def __init__(self, prop: Propagation, layers: list[_Layer], x_lo: Array, x_hi: Array,
                 spec: Array, layout: list[tuple[int, int]],
                 targets: list[tuple[int, Array]], out_id: int, direct_weight: float,
                 dtype: Any) -> None:
        self.direct_weight = direct_weight
        self.dtype = dtype
        self.layers = layers
        self.layout = layout
        self.out_id = out_id
        self.x_lo, self.x_hi = x_lo.astype(dtype), x_hi.astype(dtype)
        self.batch = prop.batch
        self.targets = targets
        self.layer_of = {lay.top: k for k, lay in enumerate(layers)}
        self.relu_layer = {lay.relu: k for k, lay in enumerate(layers) if lay.relu is not None}
        # per relu layer k: the kept neurons (not inactive in some example) and CROWN's box,
        # slopes and masks on them
        self.keep: list[Array] = []
        self.base: list[tuple[Array, ...]] = []
        for lay in layers[:-1]:
            box = prop.bx(lay.top)
            lo = np.asarray(box.lo, np.float64).reshape(prop.batch, -1)
            hi = np.asarray(box.hi, np.float64).reshape(prop.batch, -1)
            keep = np.flatnonzero((hi > 0).any(axis=0))
            lo, hi = lo[:, keep], hi[:, keep]
            lower, upper = relu_slopes(lo, hi)
            unstable = (lo < 0) & (hi > 0)
            intercept = np.where(unstable, -upper * lo, 0.0)
            self.keep.append(keep)
            self.base.append(tuple(x.astype(dtype) for x in (lo, hi, lower, upper, unstable,
                                                             intercept)))
        # the layers' weights on the kept neurons (columns: the previous relu's kept ones)
        self.w: list[Array] = []
        self.b: list[Array] = []
        for k, lay in enumerate(layers):
            rows = self.keep[k] if k < len(layers) - 1 else slice(None)
            w = lay.w[rows]
            if k > 0:
                w = w[:, self.keep[k - 1]]
            self.w.append(np.ascontiguousarray(w, dtype=dtype))
            self.b.append(lay.b[rows].astype(dtype))
        # the passes: each target (rows +e, -e of its ``which``), then the specification
        self.passes: list[tuple[int, Array, Array]] = []
        for px, which in targets:
            j = self.layer_of[px]
            wj = layers[j].w[which]
            if j > 0:
                wj = wj[:, self.keep[j - 1]]
            w0 = np.concatenate([wj, -wj])[None]
            b0 = np.concatenate([layers[j].b[which], -layers[j].b[which]])[None]
            self.passes.append((j, w0.astype(dtype), b0.astype(dtype)))
        s = np.asarray(spec, np.float64).reshape(spec.shape[0], spec.shape[1], -1)
        last = len(layers) - 1
        ws = layers[last].w if last == 0 else layers[last].w[:, self.keep[last - 1]]
        self.passes.append((last, (s @ ws).astype(dtype), (s @ layers[last].b).astype(dtype)))
        # where each alpha array sits: (pass index, relu layer)
        pass_of = {px: n for n, (px, _) in enumerate(targets)}
        pass_of[out_id] = len(targets)
        self.slot: dict[tuple[int, int], int] = {}
        for a, (tgt, r) in enumerate(layout):
            self.slot[(pass_of[tgt], self.relu_layer[r])] = a
        self._state: Any = None
        self._spec: Array = None

    # --- value --------------------------------------------------------------------------------

    def _relax(self, k: int, alpha: Array | None, box: tuple[Array, Array] | None
               ) -> tuple[Array, Array, Array, Array]:
        """Relu layer ``k``'s lower slope (B, R, n), upper slope and intercept (B, n), and the
        mask of the entries whose lower slope is free (the gradient's)."""
        lo0, hi0, lower, upper, mask, intercept = self.base[k]
        if box is None:
            s, t = upper, intercept
            still = mask
        else:
            lo, hi = box
            lc, uc = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
            chord = uc / (uc - lc + 1e-30)
            s = chord * mask + np.where(mask > 0, 0.0, upper)
            t = -(chord * lc) * mask
            active = (lo > 0) * mask
            still = mask - active - (hi < 0) * mask
            lower = lower * (1.0 - mask) + active
        if alpha is None:
            return lower[:, None], s, t, still
        a = alpha * still[:, None] + (lower * (1.0 - still))[:, None]
        return a, s, t, still

    def value(self, alphas: list[Array]) -> Array:
        """The objective (B, K): the specification's bound plus every target's summed bounds."""
        boxes: dict[int, tuple[Array, Array]] = {}
        direct: Array = 0.0
        saved = []
        value = None
        for n, (j, w0, b0) in enumerate(self.passes):
            total, steps, v_in = self._pass(n, j, w0, b0, alphas, boxes)
            saved.append((total, steps, v_in))
            if n < len(self.targets):
                px, which = self.targets[n]
                k = self.layer_of[px]
                m = which.size
                cols = np.searchsorted(self.keep[k], which)
                lo0, hi0 = self.base[k][0], self.base[k][1]
                lo, hi = lo0.copy(), hi0.copy()
                lo[:, cols] = np.maximum(total[:, :m], lo0[:, cols])
                hi[:, cols] = np.minimum(-total[:, m:], hi0[:, cols])
                boxes[k] = (lo, hi)
                direct = direct + total.sum(axis=1)
            else:
                value = total
        assert value is not None
        self._state = (saved, boxes)
        self._spec = value.astype(np.float64)
        if not self.targets:
            return self._spec
        return self._spec + self.direct_weight * np.asarray(direct, np.float64)[:, None]

    def spec_value(self) -> Array:
        """The specification's bound (B, K) of the last ``value`` call."""
        return self._spec

    def _pass(self, n: int, j: int, w0: Array, b0: Array, alphas: list[Array],
              boxes: dict[int, tuple[Array, Array]]) -> tuple[Array, list[Any], Array]:
        """One CROWN pass from layer ``j``'s rows down to the input: the bound (B, R), per relu
        layer (top down) what the gradient needs, and the multiplier at the input."""
        total = np.broadcast_to(b0, (self.batch, b0.shape[1])).copy()
        v = w0
        steps = []
        for k in range(j - 1, -1, -1):
            slot = self.slot.get((n, k))
            alpha = None if slot is None else alphas[slot][:, :, self.keep[k]].astype(self.dtype)
            a, s, t, still = self._relax(k, alpha, boxes.get(k))
            neg = np.minimum(v, 0.0)
            slope = np.where(v > 0, a, s[:, None])  # the line each row's multiplier takes
            g = v * slope
            total += np.matmul(neg, t[:, :, None])[..., 0] + g @ self.b[k]
            steps.append((k, v, neg, slope, t, still, slot))
            v = g @ self.w[k]
        total += (np.matmul(np.maximum(v, 0.0), self.x_lo[:, :, None])
                  + np.matmul(np.minimum(v, 0.0), self.x_hi[:, :, None]))[..., 0]
        return total, steps, v

    # --- gradient -----------------------------------------------------------------------------

    def gradient(self, seed: Array, alphas: list[Array]) -> list[Array | None]:
        """Gradients of ``sum(seed * value(alphas))`` in the slopes (the last ``value`` call's)."""
        saved, boxes = self._state
        seed = np.broadcast_to(np.asarray(seed, self.dtype), (self.batch, seed.shape[-1]))
        grads: list[Array | None] = [None] * len(alphas)
        # d objective / d (lo, hi) of the optimised boxes, filled by later passes first
        dbox = {k: (np.zeros_like(lo), np.zeros_like(hi)) for k, (lo, hi) in boxes.items()}
        # every target's rows enter the objective once per seeded row
        weight = self.direct_weight * seed.sum(axis=1)
        for n in range(len(self.passes) - 1, -1, -1):
            if n == len(self.passes) - 1:
                omega = seed
            else:
                px, which = self.targets[n]
                k = self.layer_of[px]
                cols = np.searchsorted(self.keep[k], which)
                dlo, dhi = dbox[k]
                omega = weight[:, None] + np.concatenate([dlo[:, cols], -dhi[:, cols]], axis=1)
            self._adjoint(n, omega, saved[n], alphas, grads, dbox)
        return grads

    def _adjoint(self, n: int, omega: Array, saved: Any, alphas: list[Array],
                 grads: list[Array | None], dbox: dict[int, tuple[Array, Array]]) -> None:
        """Pass ``n``'s adjoint with row weights ``omega`` (B, R), from the input up: the
        minimising input vertex run through the relaxed layers."""
        _, steps, v_in = saved
        omega = omega.astype(self.dtype)
        om = omega[:, :, None]
        # d total / d (multiplier at the input): the box's end that minimises each entry
        vbar = om * np.where(v_in < 0, self.x_hi[:, None], self.x_lo[:, None])
        for k, v, neg, slope, t, still, slot in reversed(steps):
            gbar = vbar @ self.w[k].T + om * self.b[k]  # d total / d g_k
            if slot is not None:
                full = np.zeros(alphas[slot].shape)
                full[:, :, self.keep[k]] = gbar * np.maximum(v, 0.0) * still[:, None]
                grads[slot] = full
            if k in dbox:
                self._box_grad(k, (gbar * neg).sum(axis=1), np.matmul(omega[:, None], neg)[:, 0],
                               dbox)
            vbar = gbar * slope
            vbar += np.where(v < 0, om * t[:, None], 0.0)

    def _box_grad(self, k: int, ds: Array, dt: Array, dbox: dict[int, tuple[Array, Array]]
                  ) -> None:
        """Add to relu layer ``k``'s box gradient that of its chord slope ``s`` (``ds``) and
        intercept ``t`` (``dt``), both (B, n): ``s = u / (u - l)``, ``t = -s l`` with ``l``
        and ``u`` clamped to their sides of 0."""
        # in float64 whatever the objective's dtype: ``d * d`` underflows float32 where l = u = 0
        lo, hi = (np.asarray(x, np.float64) for x in self._state[1][k])
        mask = self.base[k][4]
        ds, dt = np.asarray(ds, np.float64), np.asarray(dt, np.float64)
        lc, uc = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
        d = uc - lc + 1e-30
        chord = uc / d
        dchord = mask * (ds - dt * lc)
        dlc = dchord * uc / (d * d) - dt * chord * mask
        duc = dchord * (1e-30 - lc) / (d * d)
        dlo, dhi = dbox[k]
        dlo += dlc * (lo < 0)
        dhi += duc * (hi > 0)


def build(prop: Propagation, out_id: int, spec: Array, layout: list[tuple[int, int]],
          targets: list[tuple[int, Array]], direct_weight: float = 1.0,
          dtype: Any = np.float64) -> ChainObjective | None:
    """The NumPy objective for ``alpha._optimise``'s problem, or ``None`` when the graph is not
    a chain of affine layers and relus ending at ``out_id`` (``bounds.forward.chain_of``; then
    the traced objective is used)."""
    if prop.extra:
        return None
    chain = chain_of(prop, max_inputs=None)
    if chain is None or chain.layers[-1].pre != out_id:
        return None
    layers = [_Layer(lay.pre, lay.w, lay.b, lay.relu) for lay in chain.layers]
    for lay in layers[:-1]:
        box = prop.bx(lay.top)
        if lay.relu is None or not finite_box(box):
            return None
    if np.ndim(spec) != 3 or spec.shape[2] != layers[-1].w.shape[0]:
        return None
    known = {lay.relu for lay in layers} | {lay.top for lay in layers}
    if any(r not in known for _, r in layout) or any(px not in known for px, _ in targets):
        return None
    # the box where the traced objective takes it (the data input, through reshapes and
    # constant shifts), else the chain's start node's
    start = _start_box(prop, chain.start)
    if start is None:
        box = prop.bx(chain.start)
        start = (np.asarray(box.lo, np.float64), np.asarray(box.hi, np.float64))
    return ChainObjective(prop, layers, start[0], start[1], spec, layout, targets, out_id,
                          direct_weight, dtype)


def _start_box(prop: Propagation, i: int) -> tuple[Array, Array] | None:
    """The box (B, n) of the first layer's input ``i``, computed from the data input's through
    reshapes and constant shifts, in float64; ``None`` for anything else."""
    nodes = prop.nodes
    ops: list[tuple[str, Array | None]] = []
    while i not in prop.data_ids:
        node = nodes[i]
        if node.op is None or not prop.batched(i):
            return None
        name = node.op.name
        if name in _RESHAPES:
            ops.append(("reshape", None))
            i = node.parents[0]
        elif name in ("add", "sub") and len(node.parents) == 2 and prop.variable[node.parents[0]]:
            a, c = node.parents
            cv = prop.point(c)
            if cv is None or prop.variable[c] or nodes[a].shape != node.shape:
                return None
            ops.append((name, np.asarray(cv, np.float64)))
            i = a
        else:
            return None
    box = prop.bx(i)
    lo = np.asarray(box.lo, np.float64)
    hi = np.asarray(box.hi, np.float64)
    for name, shift in reversed(ops):
        if shift is not None:
            sign = 1.0 if name == "add" else -1.0
            lo, hi = lo + sign * shift, hi + sign * shift
            if lo.shape != box.lo.shape:  # the constant would broadcast over the example axis
                return None
    return lo.reshape(prop.batch, -1), hi.reshape(prop.batch, -1)
