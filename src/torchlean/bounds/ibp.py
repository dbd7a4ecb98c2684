"""Interval bound rules (IBP), one per primitive, in the side table ``RULES``.

``@bound_rule("tanh", ...)`` records ``RULES["tanh"] = rule`` (keyed by the primitive's name, as
``torchlean.spec.SPECS`` holds the reference definitions; the registry's records carry neither).
A rule takes the parents' intervals and returns the node's::

    rule(ins: list[Interval], attrs: dict, ctx: Context) -> Interval

``Interval.lo/hi`` enclose the exact real result of the op on every point of the input box
(float64, rounded outward: see ``rounding``). ``Interval.eps`` (an array or a scalar, >= 0) bounds
how far the float32 kernel's result may be from that real result, for float32 inputs inside the
box; the engine adds it when asked for bounds of the float32 network (``ctx.kernel`` true). The
module docstring of ``torchlean.bounds`` states the argument.

Rules are written once per *kind* of op where possible: monotone data movement (reshape, gathers,
max pooling: apply the forward kernel to both ends, exactly), positive linear maps (sums, average
pooling: the same plus a rounding term), bilinear maps (linear, matmul, every convolution: centre
and radius, Rump's midpoint-radius product) and monotone scalar functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.registry import REGISTRY
from ..ops.elementwise import GELU_C, GELU_K, INV_SQRT2
from .rounding import (
    ETA32,
    ETA64,
    KERNEL32_ULPS,
    U32,
    U64,
    down,
    gamma,
    libm_hi,
    libm_lo,
    mag,
    mid_rad,
    up,
    widen,
)

Array = Any


@dataclass
class Interval:
    """Bounds of one node: ``lo <= x <= hi`` (float64), and the float32 kernel error ``eps``."""

    lo: Array
    hi: Array
    eps: Array = 0.0


@dataclass(frozen=True)
class Context:
    """What a rule needs besides its inputs: the kernels' unit roundoff and underflow unit."""

    u: float = U32
    eta: float = ETA32

    @staticmethod
    def for_dtype(dtype: Any) -> Context:
        return Context(U32, ETA32) if np.dtype(dtype) == np.float32 else Context(U64, ETA64)


Rule = Callable[[list[Interval], dict[str, Any], Context], Interval]
RULES: dict[str, Rule] = {}


def bound_rule(*names: str) -> Callable[[Rule], Rule]:
    """Decorator: ``fn`` is the interval rule of the primitives ``names``."""

    def register(fn: Rule) -> Rule:
        for name in names:
            if name not in REGISTRY:
                raise TypeError(f"bound rule for {name!r}: no such primitive is registered")
            if name in RULES:
                raise TypeError(f"bound rule for {name!r} defined twice")
            RULES[name] = fn
        return fn

    return register


def _fwd(name: str) -> Callable[..., Any]:
    return REGISTRY[name].forward


def _kernel_rel(out_lo: Array, out_hi: Array, ctx: Context, ulps: float = 1.0) -> Array:
    """Error of a float kernel whose result is within ``ulps`` units of roundoff of the real
    value (relative), plus underflow."""
    return up(ulps * ctx.u * mag(out_lo, out_hi) + 4 * ctx.eta)


# --- exact, monotone data movement -----------------------------------------------------------

_MOVEMENT = (
    "reshape", "flatten", "broadcast_to", "transpose2d", "transpose3d_first_to_last",
    "transpose3d_last_to_first", "transpose3d_last_two", "swap_adjacent_at_depth", "detach",
    "gather_row", "gather_rows_nat", "gather_scalar", "gather_scalar_nat", "gather_vec_nat",
    "slice_range0", "pad_range0", "concat_dim0", "concat_vectors", "max_pool", "max_pool2d",
    "max_pool2d_pad", "pool_unfold", "relu", "max", "min", "sign", "positive_mask",
    "permute", "take",
)


def _make_monotone_exact(name: str) -> Rule:
    """Ops nondecreasing in every input that round nothing (moving, selecting or comparing
    float64 values is exact; so are max, min and relu): apply the kernel to both ends."""
    fwd = _fwd(name)

    def rule(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
        lo = fwd(*[i.lo for i in ins], **attrs)
        hi = fwd(*[i.hi for i in ins], **attrs)
        return Interval(np.asarray(lo, np.float64), np.asarray(hi, np.float64))

    return rule


for _name in _MOVEMENT:
    if _name in REGISTRY:
        RULES[_name] = _make_monotone_exact(_name)


@bound_rule("embedding")
def _embedding(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    """Rows of the table's box picked by every integer id the ids' box holds (a point box, the
    usual case, picks one row; certify refuses models with integer inputs, so wider id boxes
    only arise from hand-built calls). The lookup copies values, so it adds no kernel error; an
    id the kernel would refuse (out of range, fractional) has no output to enclose."""
    w, ids = ins
    rows = w.lo.shape[0]
    if rows == 0:  # every id is refused: no output to enclose, only its shape
        zero = np.zeros(np.shape(ids.lo) + w.lo.shape[1:])
        return Interval(zero, zero)
    first = np.clip(np.ceil(np.asarray(ids.lo, np.float64)), 0, max(rows - 1, 0)).astype(np.int64)
    last = np.clip(np.floor(np.asarray(ids.hi, np.float64)), 0, max(rows - 1, 0)).astype(np.int64)
    shape = first.shape + w.lo.shape[1:]
    lo, hi = np.empty(shape), np.empty(shape)
    for j in np.ndindex(first.shape):
        a, b = int(first[j]), max(int(last[j]), int(first[j]))
        lo[j] = np.min(w.lo[a:b + 1], axis=0)
        hi[j] = np.max(w.hi[a:b + 1], axis=0)
    return Interval(lo, hi)


def _clamp_any(x: Array, lo_c: Any, hi_c: Any, pick: Callable[..., Any]) -> Array:
    """clamp at both the float64 and the float32 reading of its limits; the extreme of the two."""
    a = np.clip(x, lo_c, hi_c)
    b = np.clip(x, float(np.float32(lo_c)), float(np.float32(hi_c)))
    return np.minimum(a, b) if pick is min else np.maximum(a, b)


@bound_rule("clamp")
def _clamp(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    """Monotone and exact; the kernel may read its limits in float32, so enclose both."""
    x, lo_c, hi_c = ins[0], attrs["lo"], attrs["hi"]
    return Interval(_clamp_any(x.lo, lo_c, hi_c, min), _clamp_any(x.hi, lo_c, hi_c, max))


@bound_rule("zeros_like")
def _zeros(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    z = np.zeros(np.shape(ins[0].lo))
    return Interval(z, z.copy())


# --- positive linear maps (sums, means, average pooling) -------------------------------------

_POSITIVE_LINEAR = ("sum", "reduce_sum", "sum_to", "reduce_mean", "avg_pool", "avg_pool2d",
                    "avg_pool2d_pad", "pool_fold", "take_adjoint")


def _make_positive_linear(name: str) -> Rule:
    fwd = _fwd(name)

    def rule(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
        x = ins[0]
        lo = np.asarray(fwd(x.lo, **attrs), np.float64)
        hi = np.asarray(fwd(x.hi, **attrs), np.float64)
        m = np.asarray(fwd(mag(x.lo, x.hi), **attrs), np.float64)
        # Each output sums at most x.size terms (then maybe one division): gamma bound.
        n = max(int(np.size(x.lo)), 1)
        lo, hi = widen(lo, hi, gamma(n + 4) * m + (n + 4) * ETA64)
        eps = up(gamma(n + 4, ctx.u) * m + (n + 4) * ctx.eta)
        return Interval(lo, hi, eps)

    return rule


for _name in _POSITIVE_LINEAR:
    if _name in REGISTRY:
        RULES[_name] = _make_positive_linear(_name)


# --- bilinear maps: centre and radius ----------------------------------------------------------


def bilinear(f: Callable[[Array, Array], Array], a: Interval, b: Interval, n: int,
             ctx: Context, bias: Interval | None = None) -> Interval:
    """Enclosure of ``f(a, b) (+ bias)`` for a bilinear ``f`` summing at most ``n`` products per
    output, ``f`` nonnegative on nonnegative arguments (matrix products, convolutions)."""
    ac, ar = mid_rad(a.lo, a.hi)
    bc, br = mid_rad(b.lo, b.hi)
    centre = f(ac, bc)
    a_point, b_point = not np.any(ar), not np.any(br)
    abs_ac, abs_bc = np.abs(ac), np.abs(bc)
    rad: Array = 0.0
    if not b_point:
        rad = rad + f(abs_ac, br)
    if not a_point:
        rad = rad + f(ar, abs_bc)
        if not b_point:
            rad = rad + f(ar, br)
    m = f(abs_ac + ar, abs_bc + br)  # >= |a||b| for every member: the size of every sum
    if bias is not None:
        centre = centre + 0.5 * (bias.lo + bias.hi)
        bias_mag = mag(bias.lo, bias.hi)
        rad = rad + up(0.5 * (bias.hi - bias.lo))
        m = m + bias_mag
    err = gamma(2 * n + 12) * m + (2 * n + 12) * ETA64
    lo, hi = widen(centre - rad, centre + rad, err + gamma(4) * np.abs(rad))
    eps = up(gamma(n + 2, ctx.u) * m + (n + 2) * ctx.eta)
    return Interval(lo, hi, eps)


def linear_point(w: Array, b: Interval, x: Interval, ctx: Context,
                 abs_w: Array | None = None) -> Interval:
    """``bilinear`` for ``x W^T + b`` with constant weights (a point, ``lo is hi``: how the bound
    engine passes them) and a matrix ``x``: the same centre, radius and magnitude sums, with
    ``|W|`` formed once and the radius and magnitude as one product (each column of the
    stacked product is its own sum; the ``gamma_n`` bounds hold whatever the blocking).
    ``abs_w``: ``|W|`` when the caller has it."""
    n = int(np.shape(w)[1])
    xc, xr = mid_rad(x.lo, x.hi)
    rows = np.shape(xc)[0]
    centre = xc @ w.T
    both = np.concatenate([xr, np.abs(xc) + xr]) @ (np.abs(w) if abs_w is None else abs_w).T
    rad, m = both[:rows], both[rows:]
    centre = centre + 0.5 * (b.lo + b.hi)
    rad = rad + up(0.5 * (b.hi - b.lo))
    m = m + mag(b.lo, b.hi)
    err = gamma(2 * n + 12) * m + (2 * n + 12) * ETA64
    lo, hi = widen(centre - rad, centre + rad, err + gamma(4) * np.abs(rad))
    eps = up(gamma(n + 2, ctx.u) * m + (n + 2) * ctx.eta)
    return Interval(lo, hi, eps)


def _terms(w_shape: tuple[int, ...], first_axis: int = 1) -> int:
    return int(np.prod(w_shape[first_axis:])) if len(w_shape) > first_axis else 1


@bound_rule("linear")
def _linear(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    w, b, x = ins
    if w.lo is w.hi and np.ndim(w.lo) == 2 and np.ndim(x.lo) == 2:
        return linear_point(w.lo, b, x, ctx)
    return bilinear(lambda wv, xv: _fwd("linear")(wv, np.zeros(wv.shape[0]), xv), w, x,
                    int(np.shape(w.lo)[1]), ctx, bias=b)


@bound_rule("matmul", "bmm", *(["matmul_nd"] if "matmul_nd" in REGISTRY else []))
def _matmul(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    a, b = ins
    return bilinear(np.matmul, a, b, int(np.shape(a.lo)[-1]), ctx)


def _conv_like(name: str, with_bias: bool) -> Rule:
    fwd = _fwd(name)

    def rule(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
        w, x = ins[0], ins[-1]
        if with_bias:
            zeros = np.zeros(np.shape(ins[1].lo))

            def f(wv: Array, xv: Array) -> Array:
                return fwd(wv, zeros, xv, **attrs)
        else:
            def f(wv: Array, xv: Array) -> Array:
                return fwd(wv, xv, **attrs)
        n = int(np.size(w.lo))  # every output sums at most all kernel entries' products
        return bilinear(f, w, x, n, ctx, bias=_bias_image(ins[1], attrs, f, w, x)
                        if with_bias else None)

    return rule


def _bias_image(b: Interval, attrs: dict[str, Any], f: Callable[..., Any], w: Interval,
                x: Interval) -> Interval:
    """The bias broadcast to the output's shape (channel axis after the batch axis)."""
    out_shape = np.shape(f(np.zeros(np.shape(w.lo)), np.zeros(np.shape(x.lo))))
    c = np.shape(b.lo)[0]
    n_spatial = len(np.shape(w.lo)) - 2
    view = (c,) + (1,) * n_spatial
    return Interval(np.broadcast_to(np.reshape(b.lo, view), out_shape),
                    np.broadcast_to(np.reshape(b.hi, view), out_shape))


for _name, _bias in (("conv", True), ("conv2d", True), ("conv_transpose", True),
                     ("conv_transpose2d", True), ("conv_core", False),
                     ("conv_transpose_core", False)):
    if _name in REGISTRY:
        RULES[_name] = _conv_like(_name, _bias)


# --- elementwise arithmetic -------------------------------------------------------------------


@bound_rule("add")
def _add(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    a, b = ins
    lo, hi = down(a.lo + b.lo), up(a.hi + b.hi)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx))


@bound_rule("sub")
def _sub(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    a, b = ins
    lo, hi = down(a.lo - b.hi), up(a.hi - b.lo)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx))


def _products(alo: Array, ahi: Array, blo: Array, bhi: Array) -> tuple[Array, Array]:
    p = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
    lo = np.minimum(np.minimum(p[0], p[1]), np.minimum(p[2], p[3]))
    hi = np.maximum(np.maximum(p[0], p[1]), np.maximum(p[2], p[3]))
    return down(lo), up(hi)


@bound_rule("mul")
def _mul(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    a, b = ins
    lo, hi = _products(a.lo, a.hi, b.lo, b.hi)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx))


def _scalar_readings(c: Any) -> tuple[float, float]:
    """The attribute as float64 and as float32 (what a float32 kernel multiplies by)."""
    c64 = float(c)
    c32 = float(np.float32(c64))
    return min(c64, c32), max(c64, c32)


@bound_rule("scale")
def _scale(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    clo, chi = _scalar_readings(attrs["c"])
    lo, hi = _products(x.lo, x.hi, np.float64(clo), np.float64(chi))
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx))


@bound_rule("add_scalar")
def _add_scalar(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    clo, chi = _scalar_readings(attrs["c"])
    lo, hi = down(x.lo + clo), up(x.hi + chi)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx))


@bound_rule("abs")
def _abs(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    hi = mag(x.lo, x.hi)
    lo = np.where((x.lo <= 0) & (x.hi >= 0), 0.0, np.minimum(np.abs(x.lo), np.abs(x.hi)))
    return Interval(lo, hi)


@bound_rule("square")
def _square(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    m = mag(x.lo, x.hi)
    low = np.where((x.lo <= 0) & (x.hi >= 0), 0.0, np.minimum(np.abs(x.lo), np.abs(x.hi)))
    lo, hi = down(low * low), up(m * m)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx))


@bound_rule("inv")
def _inv(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    straddles = (x.lo <= 0) & (x.hi >= 0)
    with np.errstate(divide="ignore"):
        lo = np.where(straddles, -np.inf, down(1.0 / x.hi))
        hi = np.where(straddles, np.inf, up(1.0 / x.lo))
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx, 2.0))


# --- monotone transcendental functions -------------------------------------------------------


def _monotone_libm(name: str, ulps32: float = KERNEL32_ULPS) -> Rule:
    fwd = _fwd(name)

    def rule(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
        x = ins[0]
        with np.errstate(all="ignore"):
            lo = libm_lo(np.asarray(fwd(x.lo, **attrs), np.float64))
            hi = libm_hi(np.asarray(fwd(x.hi, **attrs), np.float64))
        return Interval(lo, hi, _kernel_rel(lo, hi, ctx, ulps32))

    return rule


for _name in ("tanh", "sigmoid", "exp", "softplus", "erf", "safe_log", "sqrt"):
    if _name in REGISTRY:
        RULES[_name] = _monotone_libm(_name)


def _smooth_max(name: str) -> Rule:
    """(1/beta) log sum exp(beta x) per window: nondecreasing in every entry. The kernel's
    max-shifted form rounds each exp (1 ulp), the sum (gamma_k), the log and the final add: its
    absolute error is at most ``(4k + 16) u / beta + 4 u |y|``."""
    fwd = _fwd(name)

    def rule(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
        x = ins[0]
        lo = np.asarray(fwd(x.lo, **attrs), np.float64)
        hi = np.asarray(fwd(x.hi, **attrs), np.float64)
        ks = attrs["kernel_size"]
        # window size; for an int kernel, ks ** ndim bounds it whatever the spatial rank
        k = int(np.prod(ks)) if np.ndim(ks) else int(ks) ** max(1, np.ndim(x.lo))
        beta = float(attrs["beta"])

        def err(u: float, eta: float) -> Array:
            return up((4 * k + 16) * u / beta + 4 * u * mag(lo, hi) + 8 * eta / beta)

        lo, hi = widen(lo, hi, err(U64, ETA64))
        return Interval(lo, hi, err(ctx.u, ctx.eta))

    return rule


for _name in ("smooth_max_pool", "smooth_max_pool2d"):
    if _name in REGISTRY:
        RULES[_name] = _smooth_max(_name)


@bound_rule("log")
def _log(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    with np.errstate(all="ignore"):
        lo = np.where(x.lo > 0, libm_lo(np.log(np.maximum(x.lo, 1e-300))), -np.inf)
        hi = np.where(x.hi > 0, libm_hi(np.log(np.maximum(x.hi, 1e-300))), -np.inf)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx, KERNEL32_ULPS))


# --- normalisations over the last axis -------------------------------------------------------


@bound_rule("softmax")
def _softmax(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    """softmax_i = 1 / (1 + sum_{j != i} exp(x_j - x_i)): smallest at x_i low, the others high."""
    x = ins[0]
    lo = 1.0 / (1.0 + _exp_sum_others(x.hi, x.lo, up))
    hi = 1.0 / (1.0 + _exp_sum_others(x.lo, x.hi, down))
    lo, hi = widen(lo, hi, 16 * U64 * np.maximum(lo, hi))
    d = np.shape(x.lo)[-1]
    return Interval(np.maximum(lo, 0.0), np.minimum(hi, 1.0),
                    _kernel_rel(lo, hi, ctx, KERNEL32_ULPS + 2 * d))


def _exp_sum_others(others: Array, own: Array, direction: Callable[[Array], Array]) -> Array:
    """sum_{j != i} exp(others_j - own_i) for every i, rounded toward ``direction``."""
    diff = direction(others[..., None, :] - own[..., :, None])
    e = np.exp(diff)
    d = np.shape(own)[-1]
    e = e * (1.0 - np.eye(d))
    total = e.sum(axis=-1)
    slack = (LIBM_REL + gamma(d + 2)) * total + d * ETA64
    return up(total + slack) if direction is up else np.maximum(down(total - slack), 0.0)


LIBM_REL = 4 * U64


@bound_rule("log_softmax")
def _log_softmax(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    s = _softmax(ins, attrs, ctx)
    with np.errstate(divide="ignore"):
        lo = libm_lo(np.log(np.maximum(s.lo, 0.0)))
        hi = np.minimum(libm_hi(np.log(s.hi)), 0.0)
    d = np.shape(ins[0].lo)[-1]
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx, KERNEL32_ULPS + 2 * d))


@bound_rule("layer_norm")
def _layer_norm(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    """Standardised values lie in [-sqrt(D-1), sqrt(D-1)] (mean 0, sum of squares < D); then
    the affine map ``gamma * xhat + beta`` in interval arithmetic."""
    x, g, b = ins
    d = np.shape(x.lo)[-1]
    s = up(np.sqrt(max(d - 1, 0)) * (1 + 4 * U64))
    xhat = Interval(np.full(np.shape(x.lo), -s), np.full(np.shape(x.lo), s))
    glo, ghi = _products(xhat.lo, xhat.hi, g.lo, g.hi)
    lo, hi = down(glo + b.lo), up(ghi + b.hi)
    return Interval(lo, hi, _kernel_rel(lo, hi, ctx, KERNEL32_ULPS + 4 * d))


# --- GELU --------------------------------------------------------------------------------------
# The ``gelu`` kernel computes exactly the ops of the composite it replaced, in its order, so
# the composite's rules chained (each intermediate widened by its kernel error, as the engine
# widens nodes with ``kernel``) enclose the float32 kernel's result: that chain is the float32
# enclosure. The real enclosure is tighter: both GELU forms are unimodal, decreasing on
# (-inf, x*] and increasing on [x*, inf) with x* near -0.752 (for x < 0 the sign of f' is that
# of 1 - (1 - s) 2C |x| (1 + 3K x^2), s = sigmoid(2C x (1 + K x^2)), in the tanh form, and of
# m(|x|) - |x| with m Mills' ratio in the exact form; both are strictly monotone in |x|, so
# change sign once, and that between -0.8 and -0.7, for the float64 and float32 readings of the
# constants alike). So over [l, u] the greatest value is at an end, and the least is f(u) on
# the falling part, f(l) on the rising part, else at least the minimum over [-0.8, -0.7]
# (``_GELU_MIN``: the chain over 4,096 slices of it). Each f(end) is enclosed by the chain on
# that point. The rule returns this real enclosure with ``eps`` large enough to cover the
# float32 chain: with ``kernel`` the bounds are the composite's, without it they are tighter.

_GELU_FALLING_TO = -0.8  # f decreases up to here ...
_GELU_RISING_FROM = -0.7  # ... and increases from here on


def _gelu_chain(x: Interval, approximate: str, ctx: Context, kernel: bool) -> Interval:
    """The composite's interval rules chained over ``x``; with ``kernel`` each intermediate is
    widened by its kernel error (what the engine does per node)."""

    def op(name: str, ins: list[Interval], **attrs: Any) -> Interval:
        iv = RULES[name](ins, attrs, ctx)
        if kernel and np.any(iv.eps):
            return Interval(down(iv.lo - iv.eps), up(iv.hi + iv.eps))
        return Interval(iv.lo, iv.hi)

    return gelu_composite(op, x, approximate)


def gelu_composite(op: Callable[..., Any], x: Any, approximate: str) -> Any:
    """GELU as the composite ``ops.elementwise`` computes it, each step ``op(name, inputs,
    **attrs)``: chained here over intervals, and by ``bounds.differentiable`` over its boxes."""
    if approximate == "tanh":
        cube = op("mul", [op("square", [x]), x])
        inner = op("scale", [op("add", [x, op("scale", [cube], c=GELU_K)])], c=GELU_C)
        factor = op("add_scalar", [op("tanh", [inner])], c=1.0)
    else:
        factor = op("add_scalar", [op("erf", [op("scale", [x], c=INV_SQRT2)])], c=1.0)
    return op("scale", [op("mul", [x, factor])], c=0.5)


def _gelu_min(approximate: str) -> float:
    """A lower bound of f over [-0.8, -0.7] (so of its minimum): the least chain bound over
    4,096 equal slices (the real chain's bounds do not depend on the context)."""
    edges = np.linspace(_GELU_FALLING_TO, _GELU_RISING_FROM, 4097)
    return float(np.min(_gelu_chain(Interval(edges[:-1], edges[1:]), approximate, Context(),
                                    False).lo))


_GELU_MIN = {form: _gelu_min(form) for form in ("tanh", "none")}


@bound_rule("gelu")
def _gelu(ins: list[Interval], attrs: dict[str, Any], ctx: Context) -> Interval:
    x = ins[0]
    approximate = attrs.get("approximate", "tanh")
    lo, hi = np.asarray(x.lo, np.float64), np.asarray(x.hi, np.float64)
    whole = _gelu_chain(Interval(lo, hi), approximate, ctx, False)
    floated = _gelu_chain(Interval(lo, hi), approximate, ctx, True)

    def at(p: Array) -> Interval:  # an enclosure of f(p) at each point p
        return _gelu_chain(Interval(p, p), approximate, ctx, False)

    a, b = _GELU_FALLING_TO, _GELU_RISING_FROM
    inf = np.inf
    falling = at(np.minimum(hi, a))  # f's least value on [l, min(u, a)] when l <= a
    rising = at(np.maximum(lo, b))  # f's least value on [max(l, b), u] when u >= b
    low = np.minimum(np.minimum(np.where(lo <= a, falling.lo, inf),
                                np.where(hi >= b, rising.lo, inf)),
                     np.where((lo <= b) & (hi >= a), _GELU_MIN[approximate], inf))
    high = np.maximum(at(lo).hi, at(hi).hi)
    with np.errstate(invalid="ignore"):  # NaN ends keep the chain's bounds
        out_lo = np.where(np.isnan(low), whole.lo, np.maximum(low, whole.lo))
        out_hi = np.where(np.isnan(high), whole.hi, np.minimum(high, whole.hi))
        eps = up(np.maximum(np.maximum(out_lo - floated.lo, floated.hi - out_hi), 0.0))
    return Interval(out_lo, out_hi, np.where(np.isnan(eps), np.inf, eps))


def rule_for(name: str) -> Rule | None:
    """The interval rule of primitive ``name`` (``None`` if it has none)."""
    return RULES.get(name)


def supported() -> Sequence[str]:
    """Primitive names with an interval rule, sorted."""
    return sorted(RULES)
