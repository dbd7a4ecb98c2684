"""Forward-mode linear bounds ("symbolic intervals") of a chain of affine layers and relus,
sound under round-off: the cheap intermediate bounds of input-splitting branch and bound.

Backward CROWN bounds each pre-activation neuron by its own backward pass (two rows per neuron
through every earlier layer): on ACAS Xu that is ~95% of a bound pass. For a network that is a
plain chain ``v -> W1 v + b1 -> relu -> ... -> Wn h + bn`` over a low-dimensional ``v`` (the
node feeding the first affine layer; its interval is the box), this module carries instead, per
neuron and per box, two affine functions of ``v`` -- ``L(v) <= value <= U(v)`` for every ``v``
in the box -- forward through the layers (as Neurify / ReluVal / DeepPoly's forward pass do):

- affine: ``L' = W+ L + W- U + b``, ``U' = W+ U + W- L + b``;
- relu with bounds ``[l, u]``: stable neurons pass (active) or vanish (inactive); an unstable
  one takes ``alpha L`` below (``relu(z) >= alpha z`` for ``alpha`` in [0, 1]) and
  ``s (U - l)`` above, ``s >= u / (u - l)`` (any such line through ``(l, 0)`` lies above relu on
  ``[l, u]``).

Each pre-activation's bounds are the least / greatest value of its functions over the box.
The cost per box and layer is four ``(n, n) x (n, d + 1)`` products instead of ``2n`` backward
passes.

Soundness. The coefficients are computed in plain float64; every step then moves the constant
term outward by an a-priori bound of its own rounding error over the box (a sum of ``k``
products errs by at most ``gamma_k`` times the sum of the products' magnitudes, and every
function's magnitude over the box is bounded by ``|A| . max|v| + |c|``), so each function stays
a rigorous bound of the exact composition. With ``kernel`` error terms (``eps`` of the affine
nodes, from the interval rules: how far the float32 kernels' results may lie from the exact
results on their float32 inputs) the constants move by ``eps`` too, so the bounds hold for the
float32 network's values. The concretisation over the box is rounded outward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .rounding import ETA64, U64, down, gamma, mid_rad, up

Array = Any

__all__ = ["Chain", "Layer", "chain_of", "forward_bounds"]

MAX_INPUTS = 64  # the functions carry one coefficient per input: beyond this, not worth it


@dataclass
class Layer:
    """One affine layer ``z = w @ x + b`` (``w``: (out, in), float64 holding the exact stored
    values) whose kernel errors are the ``eps`` of nodes ``err_nodes``; ``pre`` is the node
    holding ``z``; ``relu`` the relu node applied to it (None for the last layer)."""

    w: Array
    b: Array
    err_nodes: tuple[int, ...]
    pre: int
    relu: int | None


@dataclass
class Chain:
    """A network that is exactly ``start -> layers``: ``start`` is the node feeding the first
    affine layer (its interval is the box the functions are over)."""

    start: int
    layers: list[Layer]


def _const(prop: Any, p: int) -> Array | None:
    return None if prop.variable[p] else prop.point(p)


def chain_of(prop: Any, max_inputs: int | None = MAX_INPUTS) -> Chain | None:
    """The chain structure of ``prop``'s graph (a ``Propagation`` whose constants are set), or
    None when the graph is anything else (then callers use backward CROWN). Recognised layers:
    ``linear(W, b, x)``, and ``matmul(x, W)`` optionally followed by ``add(., b)`` (ONNX MatMul
    + Add, as ACAS Xu's networks import), each optionally followed by ``relu``. ``max_inputs``:
    None for chains of any input width (alpha-CROWN's NumPy objective, ``bounds.alpha_objective``,
    carries no per-input coefficients)."""
    if prop.whole:
        return None
    nodes = prop.nodes
    var_ops = [i for i, n in enumerate(nodes) if n.kind == "op" and prop.variable[i]]
    consumers: dict[int, list[int]] = {}
    for i in var_ops:
        for p in nodes[i].parents:
            consumers.setdefault(p, []).append(i)
    first = None
    for i in var_ops:
        name = nodes[i].op.name
        if name in ("linear", "matmul"):
            first = i
            break
    if first is None:
        return None
    x = nodes[first].parents[2] if nodes[first].op.name == "linear" else nodes[first].parents[0]
    shape = tuple(nodes[x].shape)
    if (len(shape) != 2 or (max_inputs is not None and shape[1] > max_inputs)
            or not prop.variable[x]):
        return None
    layers: list[Layer] = []
    used: set[int] = set()
    cur, i = x, first
    while True:
        node = nodes[i]
        name = node.op.name
        if name == "linear":
            pw, pb, px = node.parents
            w, b = _const(prop, pw), _const(prop, pb)
            if px != cur or w is None or b is None or np.ndim(w) != 2:
                return None
            w = np.asarray(w, np.float64)
            b = np.broadcast_to(np.asarray(b, np.float64), (w.shape[0],))
            errs: tuple[int, ...] = (i,)
            pre = i
        elif name == "matmul":
            px, pw = node.parents
            w = _const(prop, pw)
            if px != cur or w is None or np.ndim(w) != 2:
                return None
            w = np.asarray(w, np.float64).T
            nxt = consumers.get(i, [])
            b = np.zeros(w.shape[0])
            errs, pre = (i,), i
            if len(nxt) == 1 and nodes[nxt[0]].op.name == "add":
                a2, b2 = nodes[nxt[0]].parents
                c = _const(prop, b2 if a2 == i else a2)
                if c is None or np.ndim(c) > 1 or (np.ndim(c) == 1 and np.shape(c)[0] not in (
                        1, w.shape[0])):
                    return None
                b = np.broadcast_to(np.asarray(c, np.float64), (w.shape[0],)).copy()
                errs, pre = (i, nxt[0]), nxt[0]
        else:
            return None
        if tuple(nodes[pre].shape) != (shape[0], w.shape[0]) or w.shape[1] != nodes[cur].shape[1]:
            return None
        used.update(errs)
        nxt = consumers.get(pre, [])
        relu = None
        if len(nxt) == 1 and nodes[nxt[0]].op.name == "relu":
            relu = nxt[0]
            used.add(relu)
            cur = relu
            nxt = consumers.get(relu, [])
        else:
            cur = pre
        layers.append(Layer(w, b, errs, pre, relu))
        if not nxt:
            break
        if len(nxt) != 1:
            return None
        i = nxt[0]
    if cur != prop.graph.output and layers[-1].pre != prop.graph.output:
        return None
    if set(v for v in var_ops if v > x) != used:
        return None
    return Chain(x, layers)


class _Funcs:
    """Lower and upper affine functions of the box's point ``v``: coefficients ``(n, N, d)``
    and constants ``(n, N)`` (neuron-major, so a layer is one matrix product)."""

    def __init__(self, al: Array, cl: Array, au: Array, cu: Array) -> None:
        self.al, self.cl, self.au, self.cu = al, cl, au, cu


def _magnitude(a: Array, c: Array, vmag: Array) -> Array:
    """An upper bound of ``|a . v + c|`` over the box (``vmag = max |v|``, (N, d)): (n, N)."""
    d = a.shape[-1]
    s = np.einsum("knd,nd->kn", np.abs(a), vmag) + np.abs(c)
    return up(s * (1 + gamma(d + 2)) + (d + 2) * ETA64)


def _lowest(a: Array, c: Array, mid: Array, rad: Array) -> Array:
    """A lower bound of ``min over the box of a . v + c`` ((n, N)); the box is enclosed by
    ``mid +- rad`` ((N, d))."""
    d = a.shape[-1]
    aa = np.abs(a)
    s = np.einsum("knd,nd->kn", a, mid) - np.einsum("knd,nd->kn", aa, rad) + c
    m = np.einsum("knd,nd->kn", aa, np.abs(mid) + rad) + np.abs(c)
    return down(s - gamma(2 * d + 4) * m - (2 * d + 4) * ETA64)


def forward_bounds(prop: Any, chain: Chain, inherited: dict[int, tuple[Array, Array]],
                   *, lower_slope: str = "adaptive") -> None:
    """Set the intervals of every node of ``prop`` (a fresh ``Propagation``): IBP in graph order,
    each pre-activation intersected with its forward-mode bounds and with ``inherited[node]``
    (bounds valid on a box containing this one, (N, n) each). ``lower_slope``: the relu lower
    line's slope on unstable neurons, ``"adaptive"`` (1 if u > -l, else 0: CROWN's) or
    ``"parallel"`` (the upper line's slope, as Neurify)."""
    nodes = prop.nodes
    layer_of = {layer.pre: layer for layer in chain.layers}
    funcs: _Funcs | None = None
    mid = rad = vmag = None
    for i, node in enumerate(nodes):
        if node.kind != "op":
            continue
        iv = prop.interval(i)
        if i == chain.start:
            lo, hi = np.asarray(iv.lo, np.float64), np.asarray(iv.hi, np.float64)
            n, d = lo.shape
            mid, rad = mid_rad(lo, hi)
            vmag = np.maximum(np.abs(lo), np.abs(hi))
            eye = np.broadcast_to(np.eye(d)[:, None, :], (d, n, d))
            zero = np.zeros((d, n))
            funcs = _Funcs(eye, zero, eye, zero)
        if i not in layer_of:
            continue
        layer = layer_of[i]
        if funcs is None:  # the chain's start is an input node, not an op
            start = prop.ivals[chain.start]
            lo, hi = np.asarray(start.lo, np.float64), np.asarray(start.hi, np.float64)
            n, d = lo.shape
            mid, rad = mid_rad(lo, hi)
            vmag = np.maximum(np.abs(lo), np.abs(hi))
            eye = np.broadcast_to(np.eye(d)[:, None, :], (d, n, d))
            funcs = _Funcs(eye, np.zeros((d, n)), eye, np.zeros((d, n)))
        funcs = _affine(funcs, layer, prop, vmag)
        f_lo = _lowest(funcs.al, funcs.cl, mid, rad).T
        f_hi = -_lowest(-funcs.au, -funcs.cu, mid, rad).T
        lo = np.maximum(iv.lo, f_lo)
        hi = np.minimum(iv.hi, f_hi)
        if i in inherited:
            lo = np.maximum(lo, inherited[i][0])
            hi = np.minimum(hi, inherited[i][1])
        iv.lo, iv.hi = lo, hi
        if layer.relu is not None:
            funcs = _relu(funcs, lo.T, hi.T, vmag, lower_slope)


def _affine(f: _Funcs, layer: Layer, prop: Any, vmag: Array) -> _Funcs:
    w, b = layer.w, layer.b
    k, n, d = f.al.shape
    wp, wn = np.maximum(w, 0.0), np.minimum(w, 0.0)
    al2, au2 = f.al.reshape(k, n * d), f.au.reshape(k, n * d)
    al = (wp @ al2 + wn @ au2).reshape(-1, n, d)
    au = (wp @ au2 + wn @ al2).reshape(-1, n, d)
    cl = wp @ f.cl + wn @ f.cu + b[:, None]
    cu = wp @ f.cu + wn @ f.cl + b[:, None]
    # rounding of the products and sums: each entry sums 2k + 1 terms, whose values over the box
    # are bounded by |W| times the functions' magnitudes (and |b|)
    m = np.maximum(_magnitude(f.al, f.cl, vmag), _magnitude(f.au, f.cu, vmag))
    err = gamma(2 * k + 4) * (np.abs(w) @ m + np.abs(b)[:, None]) + (2 * k + 4) * ETA64
    for e in layer.err_nodes:  # the float32 kernels' own errors
        eps = prop.ivals[e].eps
        if np.any(eps):
            err = err + np.broadcast_to(eps, prop.nodes[e].shape).T
    err = up(err * (1 + 4 * U64))
    return _Funcs(al, down(cl - err), au, up(cu + err))


def _relu(f: _Funcs, lo: Array, hi: Array, vmag: Array, lower_slope: str) -> _Funcs:
    """The relu relaxation applied to the functions of its input, bounds ``lo``/``hi`` (n, N)."""
    active = lo >= 0
    unstable = (lo < 0) & (hi > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(unstable, up(hi / np.where(unstable, down(hi - lo), 1.0)), 0.0)
    upper = np.where(active, 1.0, s)  # >= u / (u - l) on unstable neurons
    if lower_slope == "parallel":
        alpha = np.where(active, 1.0, np.where(unstable, np.minimum(s, 1.0), 0.0))
    else:
        alpha = np.where(active | (unstable & (hi > -lo)), 1.0, 0.0)
    # lower: alpha L (alpha in [0, 1]); upper: s (U - l) on unstable neurons, U on active ones
    ml = _magnitude(f.al, f.cl, vmag)
    al = f.al * alpha[..., None]
    cl = down(alpha * f.cl - 2 * U64 * alpha * ml - ETA64)
    shift = np.where(unstable, -lo, 0.0)  # U - l
    mu = _magnitude(f.au, f.cu, vmag)
    au = f.au * upper[..., None]
    cu = up(upper * up(f.cu + shift) + 2 * U64 * upper * (mu + shift) + ETA64)
    inactive = ~(active | unstable)
    if inactive.any():
        cl = np.where(inactive, 0.0, cl)
        cu = np.where(inactive, 0.0, cu)
    return _Funcs(al, cl, au, cu)
