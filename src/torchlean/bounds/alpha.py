"""alpha-CROWN: the relu lower-bound slopes optimised for the specification's lower bound.

The CROWN bound of the specification rows, as a function of the lower slopes ``alpha`` of the
unstable relus (one per example, row and neuron), is traced into a torchlean graph with
``tl.compile``; projected gradient ascent (Adam steps, then clipping to [0, 1]) runs on the
gradients of that graph's reverse mode. The traced objective is the textbook CROWN bound in plain
float64 arithmetic: it only *chooses* the slopes. The bound reported is the engine's rigorous
evaluation with the chosen slopes (``Propagation.lower`` with ``alpha`` set), which is sound for
any slopes in [0, 1], so the optimiser's arithmetic needs no care. Intermediate bounds stay those
of CROWN (as auto_LiRPA's default).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import ops_interface as F
from ..engine.transforms import compile as compile_fn
from .engine import Propagation, _with_k, max_g, min_g, pool_windows, relu_slopes, smooth_slopes

Array = Any


def _sum_rest(x: Any) -> Any:
    """Sum over every axis after the first two of a traced ``(B, K, ...)`` value."""
    if len(x.shape) > 3:
        x = F.reshape(x, shape=tuple(x.shape[:2]) + (int(np.prod(x.shape[2:])),))
    if len(x.shape) == 3:
        x = F.reduce_sum(x, axis=2)
    return x


def _concretize(v: Any, lo: Array, hi: Array) -> Any:
    """Traced ``sum(relu(v) * lo - relu(-v) * hi)``: the box's least value of ``v . x``."""
    return _sum_rest(F.relu(v) * _with_k(lo) - F.relu(-v) * _with_k(hi))


def _objective(prop: Propagation, out_id: int, spec: Array, relus: list[int]) -> Any:
    """The CROWN lower bound of the specification rows as a function of the relu slopes."""
    nodes = prop.nodes

    def bound(*alphas: Any) -> Any:
        slope = dict(zip(relus, alphas, strict=True))
        owner = alphas[0].owner
        nu: dict[int, Any] = {out_id: owner.const(spec)}
        total: Any = None

        def add(term: Any) -> None:
            nonlocal total
            total = term if total is None else total + term

        def give(p: int, c: Any) -> None:
            nu[p] = c if p not in nu else nu[p] + c

        for i in range(out_id, -1, -1):
            v = nu.pop(i, None)
            if v is None:
                continue
            node = nodes[i]
            op = node.op
            name = op.name if op is not None else ""
            box = prop.ivals[i]
            assert box is not None
            handled = i not in prop.data_ids and prop.batched(i)
            if handled and name == "linear":
                pw, pb, px = node.parents
                w, b = prop.point(pw), prop.point(pb)
                if w is not None and b is not None and prop.batched(px):
                    k = v.shape[1]
                    flat = F.reshape(v, shape=(v.shape[0] * k, w.shape[0]))
                    give(px, F.reshape(flat @ w, shape=(v.shape[0], k, w.shape[1])))
                    add(_sum_rest(v * b))
                    continue
            elif handled and name in ("conv2d", "conv"):
                pw, pb, px = node.parents
                w, b = prop.point(pw), prop.point(pb)
                if w is not None and b is not None and prop.batched(px):
                    bk = v.shape[0] * v.shape[1]
                    x_shape = nodes[px].shape
                    g = F.reshape(v, shape=(bk,) + node.shape[1:])
                    dummy = owner.const(np.zeros((bk,) + x_shape[1:]))
                    attrs = {k: a for k, a in node.attrs.items() if k != "dtype"}
                    gx = op.apply_vjp(  # type: ignore[union-attr]
                        owner.ops, g, [owner.const(w), owner.const(b), dummy],
                                           None, attrs, (False, False, True))[2]
                    give(px, F.reshape(gx, shape=tuple(v.shape[:2]) + x_shape[1:]))
                    add(_sum_rest(v * b.reshape((1, 1, b.shape[0]) + (1,) * (w.ndim - 2))))
                    continue
            elif handled and name == "reshape":
                px = node.parents[0]
                if prop.batched(px):
                    give(px, F.reshape(v, shape=tuple(v.shape[:2]) + nodes[px].shape[1:]))
                    continue
            elif handled and name in ("add", "sub") and all(
                    not prop.variable[p] or nodes[p].shape == node.shape for p in node.parents):
                for p, sign in zip(node.parents, (1.0, 1.0 if name == "add" else -1.0),
                                   strict=True):
                    if prop.variable[p]:
                        give(p, v if sign > 0 else -v)
                    else:
                        c = prop.ivals[p]
                        assert c is not None
                        lo = np.broadcast_to(sign * (c.lo if sign > 0 else c.hi),
                                             prop.bshape(node))
                        hi = np.broadcast_to(sign * (c.hi if sign > 0 else c.lo),
                                             prop.bshape(node))
                        add(_concretize(v, lo, hi))
                continue
            elif handled and name == "mul":
                a, b2 = node.parents
                var, const = (a, b2) if prop.variable[a] else (b2, a)
                c = prop.point(const)
                if c is not None and nodes[var].shape == node.shape and not prop.variable[const]:
                    give(var, v * _with_k(np.broadcast_to(c, prop.bshape(node))))
                    continue
            elif handled and name == "scale":
                give(node.parents[0], v * float(node.attrs["c"]))
                continue
            elif handled and name == "relu":
                px = node.parents[0]
                pbox = prop.ivals[px]
                assert pbox is not None
                if np.all(np.isfinite(pbox.lo)) and np.all(np.isfinite(pbox.hi)):
                    lower, upper = relu_slopes(pbox.lo, pbox.hi)
                    intercept = np.where((pbox.lo < 0) & (pbox.hi > 0), -upper * pbox.lo, 0.0)
                    lo_slope = slope[i] if i in slope else _with_k(lower)
                    give(px, F.relu(v) * lo_slope - F.relu(-v) * _with_k(upper))
                    add(_sum_rest(-F.relu(-v) * _with_k(intercept)))
                    continue
            elif handled and name in ("tanh", "sigmoid"):
                px = node.parents[0]
                pbox = prop.ivals[px]
                assert pbox is not None
                if np.all(np.isfinite(pbox.lo)) and np.all(np.isfinite(pbox.hi)):
                    a_lo, a_hi = smooth_slopes(name, pbox.lo, pbox.hi)
                    h_lo = min_g(name, pbox.lo, pbox.hi, a_lo)
                    h_hi = max_g(name, pbox.lo, pbox.hi, a_hi)
                    add(_sum_rest(F.relu(v) * _with_k(h_lo) - F.relu(-v) * _with_k(h_hi)))
                    give(px, F.relu(v) * _with_k(a_lo) - F.relu(-v) * _with_k(a_hi))
                    continue
            elif handled and name == "max_pool2d":
                px = node.parents[0]
                k = tuple(node.attrs["kernel_size"])
                stride = node.attrs.get("stride")
                x_shape = nodes[px].shape
                if ((stride is None or tuple(stride) == k) and len(x_shape) == 4
                        and not x_shape[2] % k[0] and not x_shape[3] % k[1]):
                    pbox = prop.ivals[px]
                    assert pbox is not None
                    onehot, dominated, top = pool_windows(pbox.lo, pbox.hi, k)  # type: ignore
                    dom = _with_k(dominated.astype(np.float64))
                    coef = v * dom + F.relu(v) * (1.0 - dom)
                    add(_sum_rest(-F.relu(-v) * (1.0 - dom) * _with_k(top)))
                    bk, kk = v.shape[:2]
                    ch, ho, wo = node.shape[1:]
                    up7 = F.reshape(coef, shape=(bk, kk, ch, ho, 1, wo, 1))
                    up7 = F.broadcast_to(up7, shape=(bk, kk, ch, ho, k[0], wo, k[1]))
                    up5 = F.reshape(up7, shape=(bk, kk) + x_shape[1:])
                    give(px, up5 * _with_k(onehot))
                    continue
            add(_concretize(v, box.lo, box.hi))
        assert total is not None
        return total

    return bound


def optimise(prop: Propagation, out_id: int, spec: Array, start: Array, *, steps: int,
             lr: float) -> tuple[Array, dict[str, Any]]:
    """Optimised lower bounds of the specification rows (rigorous), and a summary.

    ``start`` holds the rows' CROWN bounds: examples whose rows are all positive already are
    left alone (their slopes cannot change the verdict), the rest are optimised as one batch.
    """
    rows = np.flatnonzero(np.min(start, axis=1) <= 0)
    if rows.size == 0 or steps == 0:
        return start, {"alpha_steps": 0, "alpha_examples": 0}
    bound, info = _optimise(prop.subset(rows), out_id, spec[rows], steps=steps, lr=lr)
    out = np.array(start, copy=True)
    out[rows] = np.maximum(out[rows], bound)
    info["alpha_examples"] = int(rows.size)
    return out, info


def _optimise(prop: Propagation, out_id: int, spec: Array, *, steps: int, lr: float
              ) -> tuple[Array, dict[str, Any]]:
    relus = [i for i, n in enumerate(prop.nodes)
             if n.kind == "op" and n.op is not None and n.op.name == "relu" and prop.batched(i)
             and _unstable(prop, n.parents[0]).any()]
    k = spec.shape[1]
    if not relus or steps == 0:
        return prop.lower(out_id, spec), {"alpha_steps": 0}
    init = []
    for i in relus:
        pbox = prop.ivals[prop.nodes[i].parents[0]]
        assert pbox is not None
        lower, _ = relu_slopes(pbox.lo, pbox.hi)
        init.append(np.repeat(_with_k(lower), k, axis=1))
    shapes = [a.shape for a in init]
    compiled = compile_fn(_objective(prop, out_id, spec, relus), *shapes, dtype="float64")
    graph = compiled.graph
    alphas = [a.copy() for a in init]
    best = [a.copy() for a in init]
    best_value = np.full((spec.shape[0], k), -np.inf)
    m1 = [np.zeros_like(a) for a in alphas]
    m2 = [np.zeros_like(a) for a in alphas]
    b1, b2 = 0.9, 0.999
    rate = lr
    for step in range(1, steps + 1):
        values = graph.evaluate(graph.check_inputs("alpha-crown", alphas))
        value = values[graph.output]
        dense = graph.backprop(values, graph.output, np.ones_like(value))
        better = value > best_value
        best_value = np.where(better, value, best_value)
        for j, a in enumerate(alphas):
            best[j] = np.where(better[:, :, None] if a.ndim == 3 else
                               better.reshape(better.shape + (1,) * (a.ndim - 2)), a, best[j])
            g = dense[graph.inputs[j]]
            if g is None:
                continue
            m1[j] = b1 * m1[j] + (1 - b1) * g
            m2[j] = b2 * m2[j] + (1 - b2) * g * g
            step_j = rate * (m1[j] / (1 - b1 ** step)) / (np.sqrt(m2[j] / (1 - b2 ** step)) + 1e-8)
            alphas[j] = np.clip(a + step_j, 0.0, 1.0)  # ascent, then projection onto [0, 1]
        rate *= 0.98
    prop.alpha = dict(zip(relus, best, strict=True))
    try:
        bound = prop.lower(out_id, spec)
    finally:
        prop.alpha = {}
    return bound, {"alpha_steps": steps, "alpha_objective": float(np.mean(best_value))}


def _unstable(prop: Propagation, p: int) -> Array:
    pbox = prop.ivals[p]
    assert pbox is not None
    return (pbox.lo < 0) & (pbox.hi > 0)
