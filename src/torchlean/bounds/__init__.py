"""Certified bounds on a compiled graph: IBP, CROWN and alpha-CROWN, sound under round-off.

``compute_bounds(compiled, lower, upper, method=..., spec=C, thresholds=t)`` bounds every node of
the graph ``tl.compile`` built (or ``torchlean.onnx.load`` imported) for all inputs in the box
``[lower, upper]`` (one data input; parameters are fixed), and, given a specification matrix
``C`` of shape ``(B, K, *out[1:])`` (or ``(1, K, *out)`` for a graph traced for one example or
without a batch axis), bounds ``sum(C[b, k] * output[b])`` directly (margins ``y_true - y_other``
via ``margin_spec``); with thresholds ``t`` (``(B, K)``) the result says which rows
``C y > t`` are proved. Methods: ``"ibp"`` (interval rules; the specification folded into the
last linear layer), ``"crown"`` (backward linear relaxations, CROWN bounds on every
pre-activation), ``"alpha-crown"`` (the relu lower slopes of every layer optimised by projected
gradient ascent, for the specification and for every intermediate bound, which tighten too;
gradients from torchlean's own reverse mode; see ``alpha``). A CROWN node the engine cannot relax
is bounded by its interval and named in ``Bounds.interval_fallbacks``.

Why the bounds are sound under floating-point round-off
--------------------------------------------------------
*Real network.* The network is the real-valued function computed by exact arithmetic on its
float32 weights. Every bound is carried in float64 and each rule encloses the exact result of its
op: products of float32 numbers are exact in float64; every sum of ``n`` float64 terms is widened
by Higham's ``gamma_n`` times the sum of magnitudes (valid for any summation order, so for BLAS
too); every single rounding is stepped outward with ``numpy.nextafter``; transcendental functions
are widened by 4 ulps (glibc documents 1-2). CROWN's multipliers are computed in plain float64,
but its bound is evaluated as a Lagrangian dual (``engine``): any multipliers give a valid lower
bound by weak duality, and the dual is evaluated with the same outward rounding, plus the
residual of the rounded back-substitution (at most ``gamma_n |nu|^T |J| max|x|``).

*Float32 kernels.* With ``kernel=True`` (the default) the bounds also enclose what the float32
kernels actually compute: each rule reports ``eps``, a bound on ``|kernel(x) - op(x)|`` for float32
inputs ``x`` in the box (a GEMM or convolution summing ``n`` products: ``gamma_n(u32)`` times the
sum of magnitudes, whatever the blocking or FMA use; one rounding for elementwise arithmetic; an
assumed 16 float32 ulps for composite transcendental kernels such as sigmoid). Interval rules widen
by ``eps`` before the next op, and CROWN treats each op's rounding as a perturbation bounded by
``eps`` (the dual gains ``-|nu| . eps``). As the kernel's inputs are themselves the kernel's
previous outputs, which lie in the widened boxes by induction, every float32 execution on an input
in the box stays inside. Assumptions: IEEE float32/float64 with round-to-nearest, no flush of
subnormals to zero (bounded anyway by an absolute term), and the libm accuracy above.

A primitive without a bound rule raises ``UnsupportedOpError`` naming it; ops without a CROWN
handler are bounded by their intervals inside CROWN (sound, looser).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ibp
from .alpha import optimise
from .engine import BoundsError, Propagation, UnsupportedOpError
from .rounding import down, up

Array = Any
METHODS = ("ibp", "crown", "alpha-crown")

__all__ = ["METHODS", "Bounds", "BoundsError", "UnsupportedOpError", "box", "compute_bounds",
           "margin_spec", "ibp"]


@dataclass
class Bounds:
    """Bounds of one box: every node's ``(lo, hi)``, the output's, and the specification's.

    ``interval_fallbacks`` lists the ``(node index, primitive name)`` pairs CROWN could not
    propagate through and bounded by their intervals instead (sound, looser): empty when every
    node had a linear relaxation (and always for ``"ibp"``). ``proved`` (with ``thresholds``):
    which rows ``spec . y > threshold`` hold for every input in the box.
    """

    method: str
    nodes: list[tuple[Array, Array]]
    output: tuple[Array, Array]
    spec: tuple[Array, Array] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    interval_fallbacks: list[tuple[int, str]] = field(default_factory=list)
    proved: Array | None = None
    _prop: Any = field(default=None, repr=False, compare=False)


def box(center: Array, eps: float, lo: float | None = 0.0, hi: float | None = 1.0
        ) -> tuple[Array, Array]:
    """The L-infinity ball of radius ``eps`` around ``center``, clipped to ``[lo, hi]``.

    Float64 arrays; ``lower <= upper`` everywhere (a centre outside the valid range is an error).
    """
    c = np.asarray(center, dtype=np.float64)
    if not isinstance(eps, int | float | np.floating) or not np.isfinite(eps) or eps < 0:
        raise BoundsError(f"box: eps must be a finite number >= 0, found {eps!r}")
    if not np.all(np.isfinite(c)):
        raise BoundsError("box: the centre has non-finite entries")
    lower, upper = down(c - eps), up(c + eps)  # the float64 ball, never a hair smaller
    if lo is not None:
        if np.any(c < lo):
            raise BoundsError(f"box: centre entries below the valid range's low end {lo}")
        lower = np.maximum(lower, lo)
    if hi is not None:
        if np.any(c > hi):
            raise BoundsError(f"box: centre entries above the valid range's high end {hi}")
        upper = np.minimum(upper, hi)
    return lower, upper


def margin_spec(labels: Array, num_classes: int) -> Array:
    """Rows ``e_y - e_j`` for every other class ``j``: shape ``(B, num_classes - 1, num_classes)``.

    A positive lower bound on every row certifies that class ``y`` wins everywhere in the box.
    """
    y = np.asarray(labels)
    if y.ndim != 1 or not np.all(np.equal(np.mod(y, 1), 0)):
        raise BoundsError(f"margin_spec: labels must be a vector of class indices, found shape "
                          f"{y.shape}")
    y = y.astype(np.int64)
    if num_classes < 2 or np.any(y < 0) or np.any(y >= num_classes):
        raise BoundsError(f"margin_spec: labels must lie in [0, {num_classes}) with at least two "
                          f"classes, found {y.min() if y.size else None}..."
                          f"{y.max() if y.size else None}")
    eye = np.eye(num_classes)
    rows = []
    for label in y:
        others = [j for j in range(num_classes) if j != label]
        rows.append(eye[label][None, :] - eye[others])
    return np.stack(rows) if rows else np.zeros((0, num_classes - 1, num_classes))


def _graph_and_consts(compiled: Any) -> tuple[Any, dict[int, Array], int]:
    graph = getattr(compiled, "graph", None)
    if graph is None or not hasattr(graph, "nodes"):
        raise BoundsError(f"bounds: expected a compiled function (tl.compile), found "
                          f"{type(compiled).__name__}")
    consts = dict(graph.consts)
    n_params = len(graph.params)
    n_data = len(graph.inputs) - n_params
    for k, p in enumerate(graph.params):
        consts[graph.inputs[n_data + k]] = np.asarray(p.array)
    if n_data != 1:
        raise BoundsError(f"bounds: the compiled function must take exactly one data input (the "
                          f"perturbed one), found {n_data}")
    if len(graph.outputs) != 1:
        raise BoundsError(f"bounds: the compiled function must return one output, found "
                          f"{len(graph.outputs)}")
    return graph, consts, n_data


def compute_bounds(compiled: Any, lower: Array, upper: Array, *, method: str = "crown",
                   spec: Array | None = None, kernel: bool = True, alpha_steps: int = 20,
                   alpha_lr: float = 0.2, output_crown: bool = True,
                   thresholds: Array | None = None, reuse: Bounds | None = None,
                   alpha_intermediate: bool = True, groups: Array | None = None) -> Bounds:
    """Bounds of every node of ``compiled`` for data inputs in ``[lower, upper]``.

    ``spec`` (``(B, K, *out_shape[1:])``; for a graph without a batch axis, or traced for one
    example, ``(1, K, *out_shape)`` too): also bound ``sum(spec[b, k] * out[b])``, lower and
    upper. ``thresholds`` (``(B, K)``, default 0): the rows to prove are ``spec . y > t``; the
    result's ``proved`` says which hold, and alpha-CROWN stops once all do. ``kernel``: enclose
    the float32 kernels' results too, not only the exact real ones. ``output_crown=False``
    leaves the output node with interval bounds (certification needs only the specification's,
    which CROWN bounds directly). ``reuse``: a ``"crown"`` result for the same graph, box and
    ``kernel`` whose bounds alpha-CROWN starts from instead of running CROWN again.
    ``alpha_intermediate``: alpha-CROWN also optimises the slopes used for the intermediate
    (pre-activation) bounds, tightening them (auto_LiRPA's default); ``False`` keeps CROWN's.
    ``alpha_steps`` and ``alpha_lr``: Adam steps and step size (0.2 verified more of VNN-COMP
    2021's ACAS Xu instances than auto_LiRPA's 0.5 with this objective, and as many MNIST ones).
    ``groups`` (``(K,)`` integers): rows with the same id form one conjunction of an unsafe set,
    refuted when any one of its rows is proved; alpha-CROWN then aims at each conjunction's best
    row and stops once every conjunction is refuted (default: every row must be proved).
    """
    if method not in METHODS:
        raise BoundsError(f"bounds: unknown method {method!r}; expected one of {METHODS}")
    graph, consts, n_data = _graph_and_consts(compiled)
    x_shape = graph.nodes[graph.inputs[0]].shape
    lo = _box_array("lower", lower, x_shape)
    hi = _box_array("upper", upper, x_shape)
    if np.any(lo > hi):
        raise BoundsError(f"bounds: lower > upper at {int(np.sum(lo > hi))} entries")
    out_id = graph.output
    out_shape = tuple(graph.nodes[out_id].shape)
    if not isinstance(alpha_steps, int) or alpha_steps < 0:
        raise BoundsError(f"bounds: alpha_steps must be an integer >= 0, found {alpha_steps!r}")
    if not isinstance(alpha_lr, int | float) or not np.isfinite(alpha_lr) or alpha_lr <= 0:
        raise BoundsError(f"bounds: alpha_lr must be a finite number > 0, found {alpha_lr!r}")
    if groups is not None:
        groups = np.asarray(groups)
        if (spec is None or groups.shape != (np.shape(spec)[1],)
                or not np.issubdtype(groups.dtype, np.integer) or np.any(groups < 0)):
            want = np.shape(spec)[1] if spec is not None else "?"
            raise BoundsError(f"bounds: groups must be K = {want} nonnegative integers (one "
                              f"per spec row, with a spec), found shape "
                              f"{groups.shape}, dtype {groups.dtype}")
    if reuse is not None and (not isinstance(reuse, Bounds) or reuse._prop is None
                              or reuse._prop.graph is not graph
                              or reuse._prop.kernel != kernel
                              or not np.array_equal(reuse._prop.box_lo, lo)
                              or not np.array_equal(reuse._prop.box_hi, hi)):
        raise BoundsError("bounds: reuse must be a CROWN result of compute_bounds for the same "
                          "compiled graph, box and kernel setting")

    if reuse is not None and method != "ibp":
        prop = reuse._prop.copy()
    else:
        prop = Propagation(graph, consts, lo, hi, kernel=kernel, n_data=n_data)
        crown = method != "ibp"
        targets = prop.targets() if crown else set()
        for i, node in enumerate(graph.nodes):
            if node.kind != "op":
                continue
            prop.interval(i)
            if i in targets:
                _tighten(prop, i, *prop.crown_node(i))
    crown = method != "ibp"
    if crown and output_crown and prop.batched(out_id) and reuse is None:
        _tighten(prop, out_id, *prop.crown_node(out_id))
    spec_rows, unpack = _spec_rows(prop, spec, out_shape)
    t = None
    if thresholds is not None:
        if spec is None:
            raise BoundsError("bounds: thresholds need a spec")
        t = _thresholds(thresholds, np.shape(spec)[:2])
    info: dict[str, Any] = {}
    spec_bounds = None
    if spec_rows is not None:
        last = prop.last_spec
        if reuse is not None and last is not None and np.array_equal(last[0], spec_rows):
            folded = last[1]  # the reused CROWN result's own bounds of these rows
        else:
            folded = _spec_lower(prop, out_id, spec_rows, crown)
            prop.last_spec = (spec_rows, folded)
        if method == "alpha-crown":
            b, k = np.shape(spec)[:2]  # type: ignore[arg-type]
            tk = unpack_t(t, prop, k, b) if t is not None else None
            gk = None
            if groups is not None:  # whole mode: rows of example e are e * K + k
                gk = (groups if not prop.whole or b == 1 else
                      (groups[None, :] + (int(groups.max()) + 1) * np.arange(b)[:, None]).ravel())
            folded, info = optimise(prop, out_id, spec_rows, folded, thresholds=tk,
                                    steps=alpha_steps, lr=alpha_lr,
                                    intermediate=alpha_intermediate, groups=gk)
        spec_bounds = unpack(folded)
    if method == "alpha-crown" and output_crown and prop.batched(out_id) and info.get(
            "alpha_targets"):
        # CROWN again on the tightened intermediate bounds (it is not monotone in them, so
        # intersected with the first)
        _tighten(prop, out_id, *prop.crown_node(out_id))
    nodes = [(iv.lo, iv.hi) if iv is not None else (None, None) for iv in prop.ivals]
    out = prop.ivals[out_id]
    assert out is not None
    proved = None
    if spec_bounds is not None:
        proved = spec_bounds[0] > (0.0 if t is None else t)
    fallbacks = sorted(prop.fallbacks) if crown else []
    return Bounds(method, nodes, (out.lo, out.hi), spec_bounds, info, fallbacks, proved,
                  prop if method == "crown" else None)


def unpack_t(t: Array, prop: Propagation, k: int, b: int) -> Array:
    """Thresholds ``(B, K)`` in the propagation's row layout (whole mode: ``(1, B*K)``)."""
    return t.reshape(1, b * k) if prop.whole else t


def _thresholds(value: Array, shape: tuple[int, ...]) -> Array:
    try:
        t = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise BoundsError("bounds: thresholds are not a numeric array") from None
    try:
        t = np.broadcast_to(t, shape).copy()
    except ValueError:
        raise BoundsError(f"bounds: thresholds must broadcast to the spec's rows {shape}, found "
                          f"shape {np.shape(value)}") from None
    if np.any(np.isnan(t)):
        raise BoundsError("bounds: thresholds have NaN entries")
    return t


def _spec_rows(prop: Propagation, spec: Array | None, out_shape: tuple[int, ...]
               ) -> tuple[Array | None, Any]:
    """The specification as the engine's multipliers ``(B or 1, K', *rest)``, and the map from
    the engine's ``(B', K')`` bounds back to the caller's ``(B, K)``."""
    if spec is None:
        return None, None
    s = np.asarray(spec, dtype=np.float64)
    if not np.all(np.isfinite(s)):
        raise BoundsError("bounds: spec has non-finite entries")
    batched_form = (s.ndim >= 2 and len(out_shape) >= 1 and s.shape[0] == out_shape[0]
                    and s.shape[2:] == out_shape[1:])
    single_form = s.ndim >= 2 and s.shape[0] == 1 and s.shape[2:] == out_shape
    if not (batched_form or single_form):
        raise BoundsError(f"bounds: spec must have shape (B, K, *{out_shape[1:]}) with B = "
                          f"{out_shape[0] if out_shape else '?'} (or (1, K, *{out_shape})), "
                          f"found {s.shape}")
    k = s.shape[1]
    if not prop.whole:
        if batched_form:
            return s, lambda f: (f[0], f[1])
        return s.reshape((1, k) + out_shape[1:]), lambda f: (f[0], f[1])
    if single_form:
        return s, lambda f: (f[0], f[1])
    # Batched rows on a graph bounded as one example: row (b, k) reads output b only.
    b = s.shape[0]
    rows = np.zeros((1, b, k) + out_shape)
    for e in range(b):
        rows[0, e, :, e] = s[e]
    return (rows.reshape((1, b * k) + out_shape),
            lambda f: (f[0].reshape(b, k), f[1].reshape(b, k)))


def _box_array(what: str, value: Array, shape: tuple[int, ...]) -> Array:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise BoundsError(f"bounds: {what} is not a numeric array") from None
    if arr.shape != shape:
        raise BoundsError(f"bounds: {what} has shape {arr.shape}, the graph's input is {shape}")
    if np.any(np.isnan(arr)):
        raise BoundsError(f"bounds: {what} has NaN entries")
    return arr


def _tighten(prop: Propagation, i: int, lo: Array, hi: Array) -> None:
    iv = prop.ivals[i]
    assert iv is not None
    iv.lo = np.maximum(iv.lo, lo)
    iv.hi = np.minimum(iv.hi, hi)


def _spec_lower(prop: Propagation, out_id: int, spec: Array, crown: bool) -> tuple[Array, Array]:
    """Lower and upper bounds of the specification rows: IBP with the specification folded into
    the last linear layer, and (for CROWN) the full backward bound; the better of the two."""
    nu0 = np.concatenate([spec, -spec], axis=1)
    k = spec.shape[1]
    prop.linear_only = True
    folded = prop.lower(out_id, nu0)
    prop.linear_only = False
    if crown:
        folded = np.maximum(folded, prop.lower(out_id, nu0))
    return folded[:, :k], -folded[:, k:]
