"""Differentiable bounds for certified training: IBP and CROWN-IBP written against ``F``.

The model's forward pass is traced once per input shape (``tl.compile``: the same graph that runs
and that ``certify`` bounds), and this module interprets that graph with *interval* rules instead
of the ops themselves. Every rule is written with the Ops interface ``F``, so one code path

* computes numbers when given plain arrays (``owner=None``: the parameters' arrays), and
* records ops on an owner (a session's eager tape or a graph being traced) when given refs, so
  the bounds are part of the training loss and their gradients come from the one reverse driver.

``margin_lower_bounds(model, x, labels, eps, beta=...)`` bounds every margin ``y_true - y_j``
over the L-infinity ball of radius ``eps`` around ``x`` clipped to the input range:

* IBP (Gowal et al. 2018): intervals node by node, with the specification folded into the last
  affine layers (the backward pass below stopped at the first non-affine node: "elision"),
* CROWN-IBP (Zhang et al. 2020): IBP bounds for every intermediate node, then one CROWN backward
  pass from the margins to the input with the relu relaxations those bounds give (upper: the
  chord; lower: slope 1 where ``u > -l``, else 0), mixed as ``beta * crown + (1 - beta) * ibp``.
  The pass goes through linear layers, 2-D convolutions (their adjoint), reshapes, sums, relus
  and 2-D max pooling with tiling windows (the numeric engine's relaxation; its upper side the
  certifier's chord with ``pool_chord=True``, else auto_LiRPA's constant); in float64 it equals
  the engine's CROWN over IBP intermediate bounds up to rounding (tests). A relu whose only use
  is a max pool is relaxed inside the pool's rule, at the pooled size (the pool passes each
  coefficient to one entry per window only), and window spreading and picking are products with
  a 0/1 matrix: the pass's work on the (B, K, ...) coefficient arrays is then the
  convolutions' adjoints and a few elementwise products (auto_LiRPA's pass has the same
  shape).

Nodes that have no backward (CROWN) handler are concretised with their IBP interval where the
backward pass meets them (still a valid bound, looser).

Batch normalisation, as auto_LiRPA's ``BoundBatchNormalization`` in certified training: a model
in training mode is traced with its ``BatchNorm`` layers as the ``batch_norm`` primitive (batch
statistics; the running statistics are not touched by the trace), and the bounds normalise with
the statistics of the *clean* batch: the clean forward pass runs beside the intervals, and each
``batch_norm`` node becomes the per-channel affine map ``w x + b`` with ``w = gamma / sqrt(var +
eps)``, ``b = beta - mean w`` (mean and biased variance of the clean input over the batch and
spatial axes). Those statistics are recorded with the loss, so gradients flow through them as
through the clean forward (the reference does not detach them either). In eval mode the layer is
already affine (running statistics, traced as constants). Updating the running statistics is the
training step's business (``certified_training``).

NOT SOUND UNDER ROUND-OFF. These bounds are a training signal: they are computed in the working
precision (float32 in training, with the fast kernels when the training step runs them) with no
outward rounding, so they can be a few ulps tighter than the exact ones. Certification of the
trained model must use the sound certifier (``torchlean.bounds.compute_bounds`` / ``torchlean
certify``), as ``torchlean train --certified`` and its documentation do. In float64 they agree
with the sound float64 IBP values up to rounding (checked by tests/test_certified_training.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import nn
from ..engine import ops_interface as F
from ..engine.ops_interface import Ref
from ..engine.transforms import compile as compile_fn
from . import ibp as interval_rules
from .engine import BoundsError, UnsupportedOpError

Value = Any  # an array (numeric mode) or a Ref of the owner (recording mode)

__all__ = ["IBP_RULES", "BACKWARD_RULES", "Box", "Point", "model_graph", "node_bounds",
           "spec_lower_bounds", "margin_lower_bounds", "robust_cross_entropy", "input_box",
           "clean_logits", "has_batch_norm"]


@dataclass
class Point:
    """A value that does not depend on the perturbed input (parameters, constants)."""

    value: Value


@dataclass
class Box:
    """Bounds ``lo <= node <= hi`` of a node that depends on the perturbed input."""

    lo: Value
    hi: Value


State = Point | Box


class _Ctx:
    """Where values live: ``owner`` records ops (None: compute arrays of ``dtype``)."""

    def __init__(self, owner: Any, dtype: Any, pool_chord: bool = False) -> None:
        self.owner = owner
        self.dtype = np.dtype(dtype)
        # max pooling's upper side in the CROWN pass: the certifier's chord, or the constant
        self.pool_chord = bool(pool_chord)
        # batch norm: the clean pass's values by node index, each batch_norm node's (w, b) by
        # the node's id (what the backward rules are given)
        self.clean: dict[int, Value] = {}
        self.affine: dict[int, tuple[Value, Value]] = {}
        # the backward pass's graph and how many nodes use each node (``spec_lower_bounds``)
        self.graph: Any = None
        self.consumers: list[int] = []

    def const(self, array: Any) -> Value:
        arr = np.asarray(array, dtype=self.dtype)
        return arr if self.owner is None else self.owner.const(arr)


# --- interval rules (IBP), one per kind of op ------------------------------------------------

IbpRule = Callable[[list[State], dict[str, Any], str, _Ctx], Box]
IBP_RULES: dict[str, IbpRule] = {}

# Nondecreasing in every input: apply the op to both ends (points go to both unchanged).
_MONOTONE = (
    "reshape", "flatten", "broadcast_to", "transpose2d", "transpose3d_first_to_last",
    "transpose3d_last_to_first", "transpose3d_last_two", "swap_adjacent_at_depth", "detach",
    "gather_row", "gather_rows_nat", "gather_scalar", "gather_scalar_nat", "gather_vec_nat",
    "slice_range0", "pad_range0", "concat_dim0", "concat_vectors", "max_pool", "max_pool2d",
    "max_pool2d_pad", "pool_unfold", "relu", "max", "min", "permute", "take",
    "sum", "reduce_sum", "sum_to", "reduce_mean", "avg_pool", "avg_pool2d", "avg_pool2d_pad",
    "add", "add_scalar", "clamp", "tanh", "sigmoid", "exp", "softplus", "erf", "sqrt",
    "safe_log", "log", "smooth_max_pool", "smooth_max_pool2d",
)
# Linear in their data input ``x`` (the others must be points): centre and radius.
_LINEAR_IN_X = ("linear", "conv", "conv2d", "conv_transpose", "conv_transpose2d")


def _ends(s: State) -> tuple[Value, Value]:
    return (s.value, s.value) if isinstance(s, Point) else (s.lo, s.hi)


def _monotone(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    lows, highs = zip(*(_ends(s) for s in ins), strict=True)
    return Box(F.apply(name, *lows, **attrs), F.apply(name, *highs, **attrs))


def _mid_rad(s: Box) -> tuple[Value, Value]:
    mid = (s.lo + s.hi) * 0.5
    return mid, s.hi - mid  # one op fewer than (hi - lo) / 2 (ops cost on the eager tape)


def _linear_in_x(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    w, b, x = ins
    if not isinstance(w, Point) or not isinstance(b, Point) or not isinstance(x, Box):
        raise UnsupportedOpError(f"differentiable bounds: {name} with perturbed weights (only "
                                 "the data input may be perturbed)")
    mid, rad = _mid_rad(x)
    centre = F.apply(name, w.value, b.value, mid, **attrs)
    if name == "conv2d" and set(attrs) <= {"stride", "padding"}:
        radius = F.apply("conv_core", F.abs(w.value), rad, **attrs)  # no bias to zero out
    else:
        radius = F.apply(name, F.abs(w.value), b.value * 0.0, rad, **attrs)
    return Box(centre - radius, centre + radius)


def _matmul(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    a, b = ins
    if isinstance(a, Box) and isinstance(b, Point):
        mid, rad = _mid_rad(a)
        centre, radius = F.apply(name, mid, b.value), F.apply(name, rad, F.abs(b.value))
    elif isinstance(a, Point) and isinstance(b, Box):
        mid, rad = _mid_rad(b)
        centre, radius = F.apply(name, a.value, mid), F.apply(name, F.abs(a.value), rad)
    else:
        raise UnsupportedOpError(f"differentiable bounds: {name} of two perturbed operands")
    return Box(centre - radius, centre + radius)


def _sub(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    (alo, ahi), (blo, bhi) = (_ends(s) for s in ins)
    return Box(alo - bhi, ahi - blo)


def _mul(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    (alo, ahi), (blo, bhi) = (_ends(s) for s in ins)
    p = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
    return Box(F.min(F.min(p[0], p[1]), F.min(p[2], p[3])),
               F.max(F.max(p[0], p[1]), F.max(p[2], p[3])))


def _scale(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    lo, hi = _ends(ins[0])
    c = float(attrs["c"])
    return Box(lo * c, hi * c) if c >= 0 else Box(hi * c, lo * c)


def _abs(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    lo, hi = _ends(ins[0])  # |x| >= max(lo, -hi, 0); |x| <= max(-lo, hi)
    return Box(F.relu(lo) + F.relu(-hi), F.max(-lo, hi))


def _square(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    lo, hi = _ends(ins[0])
    below = F.relu(lo) + F.relu(-hi)  # the distance of the interval from 0
    return Box(F.square(below), F.max(F.square(lo), F.square(hi)))


def _gelu(ins: list[State], attrs: dict[str, Any], name: str, ctx: _Ctx) -> Box:
    """The rules of the composite ``gelu`` computes (``ops.elementwise``), chained."""

    def op(prim: str, args: list[State], **kw: Any) -> Box:
        return IBP_RULES[prim](args, kw, prim, ctx)

    return interval_rules.gelu_composite(op, ins[0], attrs.get("approximate", "tanh"))


for _name in _MONOTONE:
    IBP_RULES[_name] = _monotone
for _name in _LINEAR_IN_X:
    IBP_RULES[_name] = _linear_in_x
IBP_RULES.update({"matmul": _matmul, "bmm": _matmul, "matmul_nd": _matmul, "sub": _sub,
                  "mul": _mul, "scale": _scale, "abs": _abs, "square": _square,
                  "gelu": _gelu})
# Each rule here has a sound counterpart in ``ibp`` (the numeric certifier's interval rules).
assert all(interval_rules.rule_for(n) is not None for n in IBP_RULES), "rule without a twin"


# --- the traced model and its IBP pass ---------------------------------------------------------

_GRAPHS: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _norm_layers(model: Any) -> list[tuple[str, Any]]:
    return [(name or "(model)", m) for name, m in getattr(model, "named_modules", list)()
            if isinstance(m, nn.BatchNorm2d)]  # BatchNorm1d is a BatchNorm2d


def has_batch_norm(model: Any) -> bool:
    """Whether ``model`` has batch normalisation layers (whose running statistics a training
    step must update: ``certified_training``)."""
    return bool(_norm_layers(model))


def _trace(model: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """Trace ``model`` on ``shape``. In training mode its batch-norm layers are traced as the
    ``batch_norm`` primitive (the batch's statistics) without updating their running statistics
    (a trace has no values to update them from): ``track_running_stats`` is off for the trace."""
    norms = [m for _, m in _norm_layers(model)] if getattr(model, "training", False) else []
    saved = [m.track_running_stats for m in norms]
    try:
        for m in norms:
            m.track_running_stats = False
        return compile_fn(lambda v: model(v), tuple(shape), dtype=dtype).graph
    finally:
        for m, flag in zip(norms, saved, strict=True):
            m.track_running_stats = flag


def model_graph(model: Any, shape: tuple[int, ...]) -> Any:
    """The graph of ``model`` on inputs of ``shape``, in its parameters' dtype (traced once per
    model, shape and train/eval mode, and in eval mode per value of the running statistics,
    which the graph holds as constants; the model is kept alongside so its id stays unique)."""
    training = bool(getattr(model, "training", False))
    norms = _norm_layers(model)
    stats = () if training or not norms else tuple(
        hash((m.running_mean.numpy().tobytes(), m.running_var.numpy().tobytes()))
        for _, m in norms if m.track_running_stats)
    key = (id(model), tuple(shape), training, stats)
    hit = _GRAPHS.get(key)
    if hit is None or hit[0] is not model:
        params = list(model.parameters())
        dtype = params[0].dtype if params else np.dtype(np.float32)
        graph = _trace(model, shape, dtype)
        for node in graph.nodes:
            if node.kind == "op" and node.op is not None and node.op.name == "standardize":
                raise UnsupportedOpError("certified training: the model standardises with "
                                         "statistics of its input (standardize) outside a "
                                         "batch-norm layer; only batch_norm is bounded (with "
                                         "the clean batch's statistics)")
        if len(graph.inputs) - len(graph.params) != 1 or len(graph.outputs) != 1:
            raise BoundsError("differentiable bounds: the model must take one input and return "
                              "one output")
        if not training and stats:  # eval graphs of older statistics are never used again
            for old in [k for k in _GRAPHS if k[:3] == key[:3]]:
                del _GRAPHS[old]
        hit = _GRAPHS[key] = (model, graph)
    return hit[1]


def node_bounds(graph: Any, lo: Value, hi: Value, ctx: _Ctx, x: Value = None
                ) -> list[State | None]:
    """IBP state of every node of ``graph`` for data inputs in ``[lo, hi]``. A graph with
    ``batch_norm`` nodes needs the clean input ``x`` too: its forward pass runs beside the
    intervals (values in ``ctx.clean``), giving the batch statistics."""
    n_data = len(graph.inputs) - len(graph.params)
    leaves: dict[int, State] = {graph.inputs[0]: Box(lo, hi)}
    for k, p in enumerate(graph.params):
        value = (np.asarray(p.value, dtype=ctx.dtype) if ctx.owner is None
                 else ctx.owner.use(p))
        leaves[graph.inputs[n_data + k]] = Point(value)
    for i, c in graph.consts.items():
        leaves[i] = Point(ctx.const(c))
    clean_until = max((i for i, n in enumerate(graph.nodes) if n.kind == "op"
                       and n.op is not None and n.op.name == "batch_norm"), default=-1)
    if clean_until >= 0:
        if x is None:
            raise BoundsError("differentiable bounds: a model with batch normalisation needs "
                              "the clean input (its statistics)")
        ctx.clean[graph.inputs[0]] = x
    states: list[State | None] = []
    for i, node in enumerate(graph.nodes):
        if node.kind != "op":
            states.append(leaves.get(i))
            continue
        name = node.op.name
        ins = [states[p] for p in node.parents]
        attrs = {k: v for k, v in node.attrs.items() if k != "dtype"}
        if all(isinstance(s, Point) for s in ins):
            states.append(Point(F.apply(name, *[s.value for s in ins], **attrs)))  # type: ignore[union-attr]
            continue
        if i < clean_until:
            ctx.clean[i] = F.apply(name, *[ctx.clean[p] if isinstance(s, Box) else s.value
                                           for p, s in zip(node.parents, ins, strict=True)],
                                   **attrs)
        if name == "batch_norm":
            states.append(_batch_norm(ins, attrs, i, node, ctx))
            continue
        rule = IBP_RULES.get(name)
        if rule is None:
            raise UnsupportedOpError(f"differentiable bounds: no interval rule for {name!r} "
                                     f"(node %{i}); supported: "
                                     f"{', '.join(sorted([*IBP_RULES, 'batch_norm']))}")
        states.append(rule(ins, attrs, name, ctx))  # type: ignore[arg-type]
    return states


def _batch_norm(ins: list[State | None], attrs: dict[str, Any], i: int, node: Any,
                ctx: _Ctx) -> Box:
    """``batch_norm`` with the clean batch's statistics: the affine map ``w x + b`` per channel
    (module docstring), recorded in ``ctx.affine`` for the backward pass."""
    x, gamma, beta = ins
    if not isinstance(x, Box) or not isinstance(gamma, Point) or not isinstance(beta, Point):
        raise UnsupportedOpError("differentiable bounds: batch_norm with perturbed gamma or "
                                 "beta (only the data input may be perturbed)")
    shape = tuple(node.shape)
    if len(shape) != 4:
        raise UnsupportedOpError(f"differentiable bounds: batch_norm of a single sample (shape "
                                 f"{shape}); expected (N, C, H, W)")
    clean = ctx.clean[node.parents[0]]
    per_channel = (1, shape[1], 1, 1)
    mean = F.mean_dims(clean, dim=(0, 2, 3), keepdim=True)
    var = F.mean_dims(F.square(clean - mean), dim=(0, 2, 3), keepdim=True)
    eps = float(attrs.get("eps", 1e-6))
    w = F.reshape(gamma.value, per_channel) * F.apply("inv", F.sqrt(var + eps))
    b = F.reshape(beta.value, per_channel) - mean * w
    ctx.affine[id(node)] = (w, b)
    mid, rad = _mid_rad(x)
    centre, radius = mid * w + b, rad * F.abs(w)
    return Box(centre - radius, centre + radius)


# --- the backward (CROWN) pass for a specification ---------------------------------------------

def _batched(v: Value, batch: int, k: int | None = None) -> Value:
    """``v`` of shape (B, *s) as (B, 1, *s), to broadcast against coefficients (B, K, *s)."""
    shape = tuple(v.shape)
    return F.reshape(v, (batch, 1, *shape[1:]))


def _dot(a: Value, v: Value, batch: int, k: int) -> Value:
    """``sum_s a[b, j, s] * v[b, 0, s]`` (``v`` of shape (B, 1, *s), or (1, 1, *s) for every
    example): shape (B, K). A matrix-vector product per example when ``v`` has ``a``'s
    trailing shape (no product array of ``a``'s size is made, in the pass or its gradient);
    otherwise a broadcast product and a sum."""
    a_shape, v_shape = tuple(a.shape), tuple(v.shape)
    if v_shape[2:] == a_shape[2:] and v_shape[1] == 1:
        size = int(np.prod(a_shape[2:], dtype=np.int64))
        if v_shape[0] == batch:
            out = F.apply("bmm", F.reshape(a, (batch, k, size)), F.reshape(v, (batch, size, 1)))
        else:
            out = F.matmul(F.reshape(a, (batch * k, size)), F.reshape(v, (size, 1)))
        return F.reshape(out, (batch, k))
    prod = a * v
    return F.reduce_sum(F.reshape(prod, (batch, k, -1)), axis=2)


def _concretise(a: Value, s: State, batch: int, k: int) -> Value:
    """``min`` of ``sum a x`` over the box of ``s``: ``a . mid - |a| . rad`` (the same as
    ``a+ . lo + a- . hi``, with one array of ``a``'s size instead of two)."""
    if isinstance(s, Point):
        value = s.value
        if tuple(value.shape)[:1] != (batch,):
            value = F.apply("broadcast_to", value, shape=(batch, *tuple(a.shape)[2:]))
        return _dot(a, _batched(value, batch), batch, k)
    mid, rad = _mid_rad(s)
    return (_dot(a, _batched(mid, batch), batch, k)
            - _dot(F.abs(a), _batched(rad, batch), batch, k))


Backward = Callable[..., tuple[list[tuple[int, Value]], Value | None]]
BACKWARD_RULES: dict[str, Backward] = {}
AFFINE = frozenset({"linear", "reshape", "flatten", "add", "sub", "scale", "batch_norm", "mul"})


def _bw_linear(a: Value, node: Any, states: list[State | None], batch: int, k: int,
               ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    w_id, b_id, x_id = node.parents
    w, b = states[w_id], states[b_id]
    if not isinstance(w, Point) or not isinstance(b, Point):
        return [], None
    out = node.shape[-1]
    flat = F.reshape(a, (batch * k, out))
    bias = F.reshape(F.matmul(flat, F.reshape(b.value, (out, 1))), (batch, k))
    coeff = F.reshape(F.matmul(flat, w.value), (batch, k, *states_shape(states, x_id, node)))
    return [(x_id, coeff)], bias


def states_shape(states: list[State | None], i: int, node: Any) -> tuple[int, ...]:
    s = states[i]
    assert isinstance(s, Box)
    return tuple(tuple(s.lo.shape)[1:])


def _bw_reshape(a: Value, node: Any, states: list[State | None], batch: int, k: int,
                ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    (x_id,) = node.parents
    return [(x_id, F.reshape(a, (batch, k, *states_shape(states, x_id, node))))], None


def _bw_add(a: Value, node: Any, states: list[State | None], batch: int, k: int, ctx: _Ctx,
            sign: float = 1.0) -> tuple[list[tuple[int, Value]], Value | None]:
    out: list[tuple[int, Value]] = []
    bias = None
    for j, p in enumerate(node.parents):
        coeff = a if j == 0 or sign > 0 else a * -1.0
        s = states[p]
        if isinstance(s, Box) and tuple(s.lo.shape) == node.shape:
            out.append((p, coeff))
        elif isinstance(s, Point):
            term = _concretise(coeff, Point(F.apply("broadcast_to", s.value, shape=node.shape)),
                               batch, k)
            bias = term if bias is None else bias + term
        else:
            return [], None  # a broadcast perturbed operand: concretise the sum instead
    return out, bias


def _bw_sub(a: Value, node: Any, states: list[State | None], batch: int, k: int,
            ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    return _bw_add(a, node, states, batch, k, ctx, sign=-1.0)


def _bw_scale(a: Value, node: Any, states: list[State | None], batch: int, k: int,
              ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    return [(node.parents[0], a * float(node.attrs["c"]))], None


def _bw_relu(a: Value, node: Any, states: list[State | None], batch: int, k: int,
             ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    (x_id,) = node.parents
    s = states[x_id]
    assert isinstance(s, Box)
    slope, intercept, lower = _relu_slopes(_batched(s.lo, batch), _batched(s.hi, batch), ctx)
    coeff, bias = _relu_relaxed(a, slope, intercept, lower, batch, k)
    return [(x_id, coeff)], bias


def _relu_slopes(lo: Value, hi: Value, ctx: _Ctx) -> tuple[Value, Value, Value]:
    """CROWN's relaxation of a relu over ``[lo, hi]``, per neuron: the upper line's slope and
    intercept (the chord ``u (x - l) / (u - l)`` on unstable neurons, ``x`` when active, 0 when
    inactive), and the lower line's slope (adaptive: 1 where ``u > -l``, else 0)."""
    u = F.relu(hi)
    neg_l = F.relu(-lo)  # -min(l, 0)
    # the floor on the denominator only matters where u = 0
    slope = u / F.max(u + neg_l, ctx.const(1e-30))
    return slope, slope * neg_l, F.positive_mask(hi + lo)


def _relu_relaxed(a: Value, slope: Value, intercept: Value, lower: Value, batch: int,
                  k: int) -> tuple[Value, Value]:
    """Coefficients ``a`` (B, K, *s) of a relu's output moved to its input: ``a+ lower + a-
    slope``, and the bias ``a- . intercept`` (B, K); the relaxation's arrays are (B, 1, *s).
    Written with as few arrays of ``a``'s size as can be (``a- = a - a+``)."""
    pos = F.relu(a)
    return a * slope + pos * (lower - slope), _dot(a - pos, intercept, batch, k)


def _pair(value: Any) -> tuple[int, int]:
    t = tuple(int(v) for v in np.ravel(value))
    return (t[0], t[0]) if len(t) == 1 else (t[0], t[1])


def _bw_conv(a: Value, node: Any, states: list[State | None], batch: int, k: int,
             ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    """Through a 2-D convolution: the coefficients go back by its adjoint (the transposed
    convolution with the same kernel), the bias adds ``sum(a * b)``."""
    w_id, b_id, x_id = node.parents
    w, b = states[w_id], states[b_id]
    if not isinstance(w, Point) or not isinstance(b, Point) or len(node.shape) != 4:
        return [], None
    x_shape = states_shape(states, x_id, node)
    c_out, h_out, w_out = node.shape[1:]
    kh, kw = tuple(w.value.shape)[2:]
    s, pad = _pair(node.attrs.get("stride", 1)), _pair(node.attrs.get("padding", 0))
    # the rows the stride skips at the far end come back as output padding
    extra = (x_shape[1] - ((h_out - 1) * s[0] - 2 * pad[0] + kh),
             x_shape[2] - ((w_out - 1) * s[1] - 2 * pad[1] + kw))
    flat = F.reshape(a, (batch * k, c_out, h_out, w_out))
    back = F.apply("conv_transpose_core", w.value, flat, stride=s, padding=pad,
                   output_padding=extra)
    # sum(a * b): each channel's coefficients summed (a matrix-vector product), then . b
    per_channel = F.matmul(F.reshape(a, (batch * k * c_out, h_out * w_out)),
                           ctx.const(np.ones((h_out * w_out, 1))))
    bias = F.reshape(F.matmul(F.reshape(per_channel, (batch * k, c_out)),
                              F.reshape(b.value, (c_out, 1))), (batch, k))
    return [(x_id, F.reshape(back, (batch, k, *x_shape)))], bias


_NOT_SELECTED = 1e30  # pushes a window's selected entry below every other upper bound


def _upsample(ho: int, wo: int, kernel: tuple[int, int]) -> np.ndarray:
    """The 0/1 matrix (Ho * Wo, H * W) that copies each window's value to its cells (tiling
    windows). Spreading and picking per window are matrix products with it: NumPy runs those
    far faster than products and sums over the tiny strided window axes."""
    kh, kw = kernel
    rows = np.arange(ho * kh)[:, None] // kh * wo + np.arange(wo * kw)[None, :] // kw
    return (rows.reshape(1, -1) == np.arange(ho * wo)[:, None]).astype(np.float64)


def _bw_max_pool(a: Value, node: Any, states: list[State | None], batch: int, k: int,
                 ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    """Through a 2-D max pooling with windows tiling the input (the numeric engine's
    relaxation): ``max >= x_j``, ``j`` the window's entry of greatest lower bound (first in
    row-major order); ``max <= x_j`` where ``j`` dominates the window (its lower bound >= every
    other entry's upper bound); elsewhere, with ``ctx.pool_chord``, the chord ``max <= (1 - s) U
    + s x_i`` on the entry ``i`` of greatest upper bound ``U`` (``s = (U - U2) / (U - l_i)``,
    ``U2`` the other entries' greatest upper bound: the line through ``(l_i, U2)`` and ``(U,
    U)``, which is ``engine.pool_upper``'s), else the constant ``U`` (auto_LiRPA's CROWN). The
    choices of ``j`` and ``i`` and the dominance are piecewise constant (no gradient); ``U``,
    ``U2``, ``l_i`` and so ``s`` carry the bounds' gradients, as the relu slopes do.

    Each coefficient lands on one entry per window: ``j`` where it is >= 0 or the window is
    dominated, ``i`` otherwise. So when the pooled node is a relu used by nothing else, the
    relu's relaxation is applied here, at the pooled size, to those entries (its slopes picked
    there), and the coefficients go straight to the relu's input: the same bound with a quarter
    of the work on coefficient arrays."""
    (x_id,) = node.parents
    x = states[x_id]
    if not isinstance(x, Box):
        return [], None
    x_shape = tuple(tuple(x.lo.shape)[1:])
    kernel = _pair(node.attrs["kernel_size"])
    stride = node.attrs.get("stride")
    if (len(x_shape) != 3 or (stride is not None and _pair(stride) != kernel)
            or _pair(node.attrs.get("padding", 0) or 0) != (0, 0)
            or x_shape[1] % kernel[0] or x_shape[2] % kernel[1]):
        return [], None
    c, h, w = x_shape
    ho, wo = h // kernel[0], w // kernel[1]
    geom = {"kernel_size": kernel, "stride": kernel, "padding": (0, 0)}
    lo, hi = F.detach(x.lo), F.detach(x.hi)
    ones = ctx.const(np.ones((batch, c, ho, wo)))
    chosen = F.apply("max_pool_backward", lo, ones, **geom)  # one-hot of j per window
    spread_matrix = _upsample(ho, wo, kernel)
    up, down = ctx.const(spread_matrix), ctx.const(np.ascontiguousarray(spread_matrix.T))

    def pick(v: Value, hot: Value) -> Value:  # (B, C, H, W) -> its hot entries, (B, 1, C, Ho, Wo)
        flat = F.reshape(v * hot, (batch * c, h * w))
        return F.reshape(F.matmul(flat, down), (batch, 1, c, ho, wo))

    def spread(coeff: Value, hot: Value) -> Value:  # each window's coefficient to its hot entry
        out = F.matmul(F.reshape(coeff, (batch * k * c, ho * wo)), up)
        return F.reshape(out, (batch, k, c, h, w)) * _batched(hot, batch)

    pool = {"kernel_size": kernel, "stride": kernel}
    best_lo = F.apply("max_pool2d", lo, **pool)
    others_hi = F.apply("max_pool2d", hi - chosen * _NOT_SELECTED, **pool)
    dominated = 1.0 - F.positive_mask(others_hi - best_lo)  # lo_j >= every other hi
    top = F.apply("max_pool2d", x.hi, **pool)  # the pooled node's IBP upper bound
    pos = F.relu(a)
    dom = _batched(dominated, batch)
    coeff = a * dom + pos * (1.0 - dom)  # a+ + a- dom, on j
    free = 1.0 - dominated
    upper: Value = None  # a- (1 - dom) s, on i
    if ctx.pool_chord:
        top_hot = F.apply("max_pool_backward", hi, ones, **geom)  # one-hot of i per window
        second = F.apply("max_pool2d", x.hi - top_hot * _NOT_SELECTED, **pool)
        l_i = F.reshape(pick(x.lo, top_hot), (batch, c, ho, wo))
        # s in [0, 1] where no entry dominates (there U > l_i >= ... and U2 >= l_i); the floor
        # only lowers s, which keeps the bias below sound (a smaller s is a looser line)
        s = F.clamp((top - second) / F.max(top - l_i + dominated, ctx.const(1e-12)),
                    lo=0.0, hi=1.0) * free
        upper = (a - pos) * _batched(s, batch)
        free = free * (1.0 - s)
    bias = _dot(a - pos, _batched(top * free, batch), batch, k)  # a- . (1 - s) U, undominated
    target = x_id
    relu = ctx.graph.nodes[x_id]
    if (relu.kind == "op" and relu.op is not None and relu.op.name == "relu"
            and ctx.consumers[x_id] == 1 and isinstance(states[relu.parents[0]], Box)):
        pre = states[relu.parents[0]]
        assert isinstance(pre, Box)
        slope, intercept, lower = _relu_slopes(pre.lo, pre.hi, ctx)
        coeff, relu_bias = _relu_relaxed(coeff, pick(slope, chosen), pick(intercept, chosen),
                                         pick(lower, chosen), batch, k)
        bias = bias + relu_bias
        if upper is not None:  # upper <= 0: the relu's upper line
            bias = bias + _dot(upper, pick(intercept, top_hot), batch, k)
            upper = upper * pick(slope, top_hot)
        target = relu.parents[0]
    out = spread(coeff, chosen)
    if upper is not None:
        out = out + spread(upper, top_hot)
    return [(target, out)], bias


def _bw_batch_norm(a: Value, node: Any, states: list[State | None], batch: int, k: int,
                   ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    """Through ``batch_norm`` as the affine map its interval rule used (``ctx.affine``)."""
    w, b = ctx.affine[id(node)]
    c = tuple(w.shape)[1]
    w5, b5 = F.reshape(w, (1, 1, c, 1, 1)), F.reshape(b, (1, 1, c, 1, 1))
    return [(node.parents[0], a * w5)], _dot(a, b5, batch, k)


def _bw_mul(a: Value, node: Any, states: list[State | None], batch: int, k: int,
            ctx: _Ctx) -> tuple[list[tuple[int, Value]], Value | None]:
    """Through a product with a constant of a broadcastable shape (eval-mode batch norm's
    scaling): the coefficients are scaled by it."""
    ins = [states[p] for p in node.parents]
    boxes = [j for j, s in enumerate(ins) if isinstance(s, Box)]
    if len(boxes) != 1:
        return [], None
    x_id = node.parents[boxes[0]]
    point = ins[1 - boxes[0]]
    assert isinstance(point, Point)
    if tuple(states_shape(states, x_id, node)) != tuple(node.shape)[1:]:
        return [], None  # the perturbed operand is broadcast: concretise instead
    c = point.value
    shape = tuple(c.shape)
    if len(shape) == len(node.shape) and shape[:1] == (batch,):
        c = _batched(c, batch)  # one factor per example
    elif len(shape) <= len(node.shape) - 1:
        c = F.reshape(c, (1, 1, *(1,) * (len(node.shape) - 1 - len(shape)), *shape))
    else:
        return [], None
    return [(x_id, a * c)], None


BACKWARD_RULES.update({"linear": _bw_linear, "reshape": _bw_reshape, "flatten": _bw_reshape,
                       "add": _bw_add, "sub": _bw_sub, "scale": _bw_scale, "relu": _bw_relu,
                       "conv2d": _bw_conv, "max_pool2d": _bw_max_pool,
                       "batch_norm": _bw_batch_norm, "mul": _bw_mul})


def spec_lower_bounds(graph: Any, states: list[State | None], spec: Value, crown: bool,
                      ctx: _Ctx) -> Value:
    """Lower bounds ``(B, K)`` of ``spec[b] . output[b]`` by a backward pass from the output.

    ``crown=False``: only affine nodes are passed through (IBP with the specification folded into
    the trailing affine layers); ``crown=True``: relus too (CROWN with IBP intermediate bounds).
    Every other node is concretised with its IBP interval.
    """
    out_id = graph.output
    shape = tuple(spec.shape)
    batch, k = int(shape[0]), int(shape[1])
    ctx.graph = graph
    ctx.consumers = [0] * len(graph.nodes)
    for n in graph.nodes:
        for p in n.parents:
            ctx.consumers[p] += 1
    for o in graph.outputs:
        ctx.consumers[o] += 1
    pending: dict[int, Value] = {out_id: spec}
    total: Value = None
    for i in range(out_id, -1, -1):
        a = pending.pop(i, None)
        if a is None:
            continue
        node, state = graph.nodes[i], states[i]
        assert state is not None
        name = node.op.name if node.kind == "op" and node.op is not None else None
        handler = BACKWARD_RULES.get(name) if name and (crown or name in AFFINE) else None
        parents: list[tuple[int, Value]] = []
        bias = None
        if handler is not None and isinstance(state, Box):
            parents, bias = handler(a, node, states, batch, k, ctx)
        if handler is None or not (parents or bias is not None):
            bias = _concretise(a, state, batch, k)
            parents = []
        if bias is not None:
            total = bias if total is None else total + bias
        for p, coeff in parents:
            pending[p] = coeff if p not in pending else pending[p] + coeff
    assert total is not None
    return total


# --- the public entry points --------------------------------------------------------------------

def input_box(x: Value, eps: Value, clip: tuple[float, float] | None) -> tuple[Value, Value]:
    """The L-infinity ball ``[x - eps, x + eps]``, clipped to ``clip`` (plain float arithmetic,
    not rounded outward: a training signal)."""
    lo, hi = x - eps, x + eps
    if clip is not None:
        lo = F.clamp(lo, lo=float(clip[0]), hi=float(clip[1]))
        hi = F.clamp(hi, lo=float(clip[0]), hi=float(clip[1]))
    return lo, hi


@functools.lru_cache(maxsize=8)
def _others(n: int) -> np.ndarray:
    """``others[y]``: the unit rows ``e_j`` of the classes ``j != y``, in order: (N, (N-1) N)."""
    eye = np.eye(n)
    others = np.stack([np.delete(eye, y, axis=0) for y in range(n)]).reshape(n, (n - 1) * n)
    others.flags.writeable = False  # shared by every call
    return others


def _margin_spec(labels: Value, num_classes: int, ctx: _Ctx) -> tuple[Value, Value]:
    """The margins' specification without the true class's own (zero) row, as the reference's:
    ``C[b, i] = e_y - e_j`` for the ``N - 1`` classes ``j != y`` in order, (B, N - 1, N); and
    ``E[b, i] = e_j``, which puts those rows back in their columns. (The zero row would cost a
    tenth of the CROWN pass for a bound known to be 0.)"""
    n = num_classes
    if ctx.owner is None:
        onehot = F.one_hot_array(np.asarray(labels).astype(np.int64), n, dtype=ctx.dtype)
    else:
        onehot = F.apply("one_hot", labels, num_classes=n)
    batch = int(tuple(labels.shape)[0])
    rows = F.reshape(F.matmul(onehot, ctx.const(_others(n))), (batch, n - 1, n))
    return F.reshape(onehot, (batch, 1, n)) - rows, rows


def margin_lower_bounds(model: Any, x: Value, labels: Value, eps: Value, *, beta: Value = 0.0,
                        crown: bool = False, clip: tuple[float, float] | None = (0.0, 1.0),
                        dtype: Any = None, relu_inputs: list[Box] | None = None,
                        pool_chord: bool = False) -> Value:
    """Lower bounds ``(B, N)`` of the margins ``out[y] - out[j]`` for every class ``j`` over the
    clipped ball (zero at ``j = y``).

    ``x``, ``labels`` (class indices; floats in a traced graph) and ``eps`` (a number or a 0-d
    ref) are refs of one owner, whose ops then record the bounds, or arrays (numbers; ``dtype``,
    default float32, is the working precision). ``crown=True``: CROWN-IBP, returning
    ``beta * crown + (1 - beta) * ibp``; otherwise IBP. Not rounded outward (module docstring).
    ``relu_inputs``: a list that receives the input box (the IBP pre-activation bounds) of every
    relu, in graph order (certified training's warm-up regularisers read them).
    ``pool_chord``: CROWN's upper side of a max pool is the certifier's chord
    (``engine.pool_upper``, on there by default) instead of the window's constant greatest upper
    bound (auto_LiRPA's).
    """
    owner = F.owner_of([x, labels, eps, beta])
    if owner is not None:
        ctx = _Ctx(owner, x.dtype, pool_chord)  # the recording's dtype
    else:
        ctx = _Ctx(None, np.float32 if dtype is None else dtype, pool_chord)
    if owner is None:
        x = np.asarray(x, dtype=ctx.dtype)
    shape = tuple(x.shape)
    graph = model_graph(model, shape)
    out_shape = graph.nodes[graph.output].shape
    if len(out_shape) != 2 or out_shape[0] != shape[0]:
        raise BoundsError(f"differentiable bounds: expected logits (B, classes), found "
                          f"{out_shape}")
    lo, hi = input_box(x, eps, clip)
    states = node_bounds(graph, lo, hi, ctx, x)
    if relu_inputs is not None:
        relu_inputs += [s for node in graph.nodes if node.kind == "op" and node.op is not None
                        and node.op.name == "relu"
                        for s in [states[node.parents[0]]] if isinstance(s, Box)]
    n = int(out_shape[1])
    spec, columns = _margin_spec(labels, n, ctx)
    lower = spec_lower_bounds(graph, states, spec, False, ctx)
    if crown:
        crown_lb = spec_lower_bounds(graph, states, spec, True, ctx)
        lower = crown_lb * beta + lower * (1.0 - beta) if isinstance(beta, Ref) else (
            crown_lb * float(beta) + lower * (1.0 - float(beta)))
    # (B, N - 1) back to (B, N), 0 in the true class's column
    batch = int(shape[0])
    placed = F.apply("bmm", F.reshape(lower, (batch, 1, n - 1)), columns)
    return F.reshape(placed, (batch, n))


def clean_logits(model: Any, x: Value) -> Value:
    """The model's output on ``x`` (a ref of the recording owner, or an array). A model in
    training mode with batch normalisation runs through its traced graph (the ``batch_norm``
    primitive: a trace of the layer itself cannot update its running statistics); any other
    model is simply called."""
    if not (getattr(model, "training", False) and has_batch_norm(model)):
        return model(x)
    owner = F.owner_of([x])
    graph = model_graph(model, tuple(x.shape))
    n_data = len(graph.inputs) - len(graph.params)
    values: dict[int, Value] = {graph.inputs[0]: x}
    for k, p in enumerate(graph.params):
        values[graph.inputs[n_data + k]] = (np.asarray(p.value, dtype=x.dtype) if owner is None
                                            else owner.use(p))
    for i, c in graph.consts.items():
        values[i] = np.asarray(c, dtype=x.dtype) if owner is None else owner.const(c)
    for i, node in enumerate(graph.nodes):
        if node.kind == "op":
            attrs = {k: v for k, v in node.attrs.items() if k != "dtype"}
            values[i] = F.apply(node.op.name, *[values[p] for p in node.parents], **attrs)
    return values[graph.output]


def robust_cross_entropy(lower: Value, labels: Value) -> Value:
    """Cross-entropy of the logits ``-lower`` against ``labels`` (auto_LiRPA's robust loss: the
    worst-case logits the bounds allow, the true class's margin being 0)."""
    return F.cross_entropy(-lower, labels)
