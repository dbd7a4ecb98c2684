"""Elementwise primitives: arithmetic, activations, and the masks their derivatives need.

Binary arithmetic broadcasts like NumPy inside one node; the registry undoes broadcasting of
cotangents centrally. Each unary op is declared from its forward and its derivative, which gives
both the VJP (``g * f'``) and the JVP (``t * f'``). Derivatives are written with registered
primitives so they can be differentiated again; the masks (``sign``, ``positive_mask``,
``interval_mask``, ``max_weight``) are piecewise constant and carry zero derivatives.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of, to_host
from ..core.errors import DomainError, ShapeError, SignatureError
from ..core.registry import (
    ErrorInput,
    Primitive,
    Sample,
    arity_error,
    bilinear,
    elementwise_unary,
    register,
    same_shape,
)
from ..core.shape import broadcast_shapes
from .array_api import astype
from .general import _erf as erf_kernel
from .samples import away_from_zero, binary_samples, dim, normal, positive, unary_samples


def _check_real(op: str, name: str, value: Any) -> None:
    """A scalar attribute must be a real number (not a string, bool, None or array)."""
    if type(value) is float:  # the common case, checked on every recorded scale
        return
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ShapeError(f"{op}: {name} must be a real number, found {value!r}")


def _scalar_attr_infer(op: str, name: str) -> Any:
    def infer(shape: tuple[int, ...], **attrs: Any) -> tuple[int, ...]:
        _check_real(op, name, attrs[name])
        return shape

    return infer


def _binary_infer(name: str) -> Any:
    def infer(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        return broadcast_shapes(name, a, b)

    return infer


def _expand(ops: Any, t: Any, shape: tuple[int, ...]) -> Any:
    """A tangent of a broadcast input, expanded to the output shape."""
    return t if t.shape == shape else ops.broadcast_to(t, shape=shape)


def _sum_tangents(ops: Any, a: Any, b: Any, shape: tuple[int, ...]) -> Any:
    if a is None:
        return _expand(ops, b, shape)
    if b is None:
        return _expand(ops, a, shape)
    return _expand(ops, ops.add(a, b), shape)


def _ufunc(name: str) -> Any:
    """The forward ``f(x)`` of NumPy's ufunc ``name`` on any namespace: the ufunc itself for a
    NumPy array (no extra lookup on the host path), ``namespace_of(x).name`` otherwise."""
    host = getattr(np, name)

    def forward(x: Any) -> Any:
        if type(x) is np.ndarray:
            return host(x)
        return getattr(namespace_of(x), name)(x)

    forward.__name__ = name
    return forward


def _namespace2(a: Any, b: Any) -> Any:
    """The namespace of a binary op's operands (a device one if either is on a device)."""
    xp = namespace_of(a)
    return namespace_of(b) if xp is np else xp


# ---------------------------------------------------------------------------------------------
# Binary arithmetic. Forwards are operators, so they run on whatever array type arrives (NumPy
# or a device); NumPy's operators are its ufuncs, bit for bit.

_NO_BROADCAST = (ErrorInput(((2, 3), (4,)), {}, ShapeError,
                            r"shapes do not broadcast: \(2, 3\) and \(4,\)"),)

register(Primitive(
    "add", ("a", "b"), _binary_infer("add"), lambda a, b: a + b,
    vjp=lambda ops, g, xs, out: (g, g),
    jvp=lambda ops, ts, xs, out: _sum_tangents(ops, ts[0], ts[1], out.shape),
    broadcasting=True,
    semantics="a + b elementwise, NumPy broadcasting. VJP: (g, g), each summed to its input's "
              "shape.",
    samples=binary_samples(), torch_ref=lambda torch, a, b: a + b,
    error_inputs=_NO_BROADCAST,
))

register(Primitive(
    "sub", ("a", "b"), _binary_infer("sub"), lambda a, b: a - b,
    vjp=lambda ops, g, xs, out: (g, ops.scale(g, c=-1.0)),
    jvp=lambda ops, ts, xs, out: _sum_tangents(
        ops, ts[0], None if ts[1] is None else ops.scale(ts[1], c=-1.0), out.shape),
    broadcasting=True,
    semantics="a - b elementwise, NumPy broadcasting. VJP: (g, -g).",
    samples=binary_samples(), torch_ref=lambda torch, a, b: a - b,
    error_inputs=_NO_BROADCAST,
))


def _mul_jvp(ops: Any, ts: Any, xs: Any, out: Any) -> Any:
    return _expand(ops, bilinear(ops, ops.mul, xs[0], xs[1], ts[0], ts[1]), out.shape)


register(Primitive(
    "mul", ("a", "b"), _binary_infer("mul"), lambda a, b: a * b,
    vjp=lambda ops, g, xs, out: (ops.mul(g, xs[1]), ops.mul(g, xs[0])),
    jvp=_mul_jvp, broadcasting=True,
    semantics="a * b elementwise, NumPy broadcasting. VJP: (g * b, g * a).",
    samples=binary_samples(), torch_ref=lambda torch, a, b: a * b,
    error_inputs=_NO_BROADCAST,
))


def max_weight(a: Any, b: Any) -> Any:
    """1 where a > b, 0.5 where a == b, 0 where a < b (in a's dtype)."""
    dtype = a.dtype if a.dtype == b.dtype else _namespace2(a, b).result_type(a.dtype, b.dtype)
    return astype(a > b, dtype) + 0.5 * astype(a == b, dtype)


register(Primitive(
    "max_weight", ("a", "b"), _binary_infer("max_weight"), max_weight, nondiff=True,
    semantics="1 where a > b, 0.5 where a == b, 0 where a < b. The tie-splitting weight of max "
              "and min; piecewise constant, so its derivatives are zero.",
    samples=binary_samples(),
    error_inputs=_NO_BROADCAST,
))


def _minmax(name: str, forward: Any, pick_first: Any) -> Primitive:
    def vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any, Any]:
        ga = ops.mul(g, pick_first(ops, xs[0], xs[1]))
        return ga, ops.sub(g, ga)

    def jvp(ops: Any, ts: Any, xs: Any, out: Any) -> Any:
        w = pick_first(ops, xs[0], xs[1])
        ta = None if ts[0] is None else ops.mul(ts[0], w)
        tb = None if ts[1] is None else ops.sub(ts[1], ops.mul(ts[1], w))
        return _sum_tangents(ops, ta, tb, out.shape)

    return register(Primitive(
        name, ("a", "b"), _binary_infer(name), forward, vjp=vjp, jvp=jvp, broadcasting=True,
        semantics=f"Elementwise {name}imum, NumPy broadcasting. At a tie (a == b) the upstream "
                  "gradient is split 0.5 / 0.5 between the inputs, in reverse and forward mode "
                  "alike (PyTorch also splits ties evenly for maximum/minimum).",
        samples=binary_samples(away_from_zero),
        torch_ref=lambda torch, a, b: getattr(torch, f"{name}imum")(a, b),
        error_inputs=_NO_BROADCAST,
    ))


_minmax("max", lambda a, b: _namespace2(a, b).maximum(a, b),
        lambda ops, a, b: ops.max_weight(a, b))
_minmax("min", lambda a, b: _namespace2(a, b).minimum(a, b),
        lambda ops, a, b: ops.max_weight(b, a))

# ---------------------------------------------------------------------------------------------
# Scalar-attribute arithmetic.

register(Primitive(
    "scale", ("x",), _scalar_attr_infer("scale", "c"), lambda x, c: x * c, attrs=("c",),
    attr_kinds={"c": K.FINITE_REAL},
    vjp=lambda ops, g, xs, out, c: (ops.scale(g, c=c),), linear=True,
    semantics="x * c for a Python scalar c. Linear: VJP g * c.",
    samples=lambda rng: [Sample((normal(rng, 4),), {"c": 2.5}),
                         Sample((normal(rng, 2, 3),), {"c": -0.5})],
    torch_ref=lambda torch, x, c: x * c,
    error_inputs=[ErrorInput(((3,),), {"c": "2"}, ShapeError, "c must be a real number.*'2'"),
                  ErrorInput(((3,),), {}, SignatureError, "missing attribute 'c'")],
))

register(Primitive(
    "add_scalar", ("x",), _scalar_attr_infer("add_scalar", "c"), lambda x, c: x + c, attrs=("c",),
    attr_kinds={"c": K.FINITE_REAL},
    vjp=lambda ops, g, xs, out, c: (g,),
    jvp=lambda ops, ts, xs, out, c: ts[0],
    semantics="x + c for a Python scalar c. VJP: g.",
    samples=lambda rng: [Sample((normal(rng, 4),), {"c": 1.5})],
    torch_ref=lambda torch, x, c: x + c,
    error_inputs=[ErrorInput(((3,),), {"c": None}, ShapeError, "c must be a real number")],
))

# ---------------------------------------------------------------------------------------------
# Piecewise-constant masks used by derivative rules.


def _mask_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((away_from_zero(rng, 6),))]


register(Primitive(
    "sign", ("x",), same_shape, _ufunc("sign"), nondiff=True,
    semantics="sign(x): -1, 0 or 1; the subgradient of abs (0 at 0). Zero derivative.",
    samples=_mask_samples, torch_ref=lambda torch, x: torch.sign(x),
    error_inputs=[arity_error(("x",))],
))

register(Primitive(
    "positive_mask", ("x",), same_shape, lambda x: astype(x > 0, x.dtype), nondiff=True,
    semantics="1 where x > 0, else 0 (so relu has derivative 0 at 0). Zero derivative.",
    samples=_mask_samples, torch_ref=lambda torch, x: (x > 0).to(x.dtype),
    error_inputs=[arity_error(("x",))],
))


def _interval_mask(x: Any, lo: float, hi: float) -> Any:
    return astype((x > lo) & (x < hi), x.dtype)


register(Primitive(
    "interval_mask", ("x",), same_shape, _interval_mask, attrs=("lo", "hi"),
    attr_kinds={"lo": K.NOT_NAN_REAL, "hi": K.NOT_NAN_REAL}, nondiff=True,
    semantics="1 where lo < x < hi (open interval), else 0: clamp's derivative, 0 at the "
              "boundaries. Zero derivative.",
    samples=lambda rng: [Sample((away_from_zero(rng, 6),), {"lo": -0.5, "hi": 0.5})],
    torch_ref=lambda torch, x, lo, hi: ((x > lo) & (x < hi)).to(x.dtype),
    error_inputs=[ErrorInput(((3,),), {"lo": 0.0}, SignatureError, "missing attribute 'hi'"),
                  ErrorInput(((3,),), {"lo": 0.0, "hi": 1.0, "mid": 0.5}, SignatureError,
                             r"unknown attribute 'mid'; expected one of \['lo', 'hi'\]")],
))

register(Primitive(
    "zeros_like", ("x",), same_shape, _ufunc("zeros_like"), nondiff=True,
    semantics="Zeros of x's shape and dtype (the zero cotangent / tangent). Zero derivative.",
    samples=unary_samples(), torch_ref=lambda torch, x: torch.zeros_like(x),
    error_inputs=[arity_error(("x",))],
))

register(Primitive(
    "detach", ("x",), same_shape, lambda x: x, nondiff=True,
    semantics="Identity forward; receives and passes no gradient (torch.Tensor.detach).",
    samples=unary_samples(), torch_ref=lambda torch, x: x.detach(),
    error_inputs=[arity_error(("x",))],
))

# ---------------------------------------------------------------------------------------------
# Unary ops declared by forward and derivative.

elementwise_unary(
    "square", _ufunc("square"), lambda ops, x, y: ops.scale(x, c=2.0),
    semantics="x * x. Derivative 2x.",
    samples=unary_samples(), torch_ref=lambda torch, x: x * x,
)

elementwise_unary(
    "abs", _ufunc("abs"), lambda ops, x, y: ops.sign(x),
    semantics="|x|. Subgradient sign(x), which is 0 at 0 (PyTorch agrees).",
    samples=unary_samples(away_from_zero), torch_ref=lambda torch, x: torch.abs(x),
)

_HOST_ZERO: dict[Any, np.ndarray] = {np.dtype(np.float32): np.zeros((), np.float32),
                                      np.dtype(np.float64): np.zeros((), np.float64)}


def _relu(x: Any) -> Any:
    """max(x, 0). On a float host array the 0 is a 0-d array of x's dtype: the same comparison
    with the same zero as the Python int (which NumPy converts on every call, ~0.5 us)."""
    if type(x) is np.ndarray:
        zero = _HOST_ZERO.get(x.dtype)
        if zero is not None:
            return np.maximum(x, zero)
    return namespace_of(x).maximum(x, 0)


elementwise_unary(
    "relu", _relu, lambda ops, x, y: ops.positive_mask(x),
    semantics="max(x, 0). Derivative 1 for x > 0 and 0 for x <= 0 (0 at 0, as PyTorch).",
    samples=unary_samples(away_from_zero), torch_ref=lambda torch, x: torch.relu(x),
)


def _sqrt(x: Any) -> Any:
    xp = namespace_of(x)
    return xp.sqrt(xp.maximum(x, 0))


def _sqrt_deriv(x: Any) -> Any:
    """1 / (2 sqrt x) for x > 0, else 0, without dividing by zero."""
    xp = namespace_of(x)
    positive = x > 0
    safe = xp.where(positive, x, 1)
    return astype(xp.where(positive, 0.5 / xp.sqrt(safe), 0), x.dtype)


elementwise_unary(
    "sqrt_deriv", _sqrt_deriv,
    # d/dx (x^-1/2 / 2) = -x^-3/2 / 4 = -2 * d^3, and 0 where x <= 0 as d is.
    lambda ops, x, y: ops.scale(ops.mul(y, ops.square(y)), c=-2.0),
    semantics="1 / (2 sqrt x) for x > 0, else 0: the derivative of sqrt, as a primitive so that "
              "it can be differentiated again (its own derivative is -2 d^3).",
    samples=unary_samples(positive),
    torch_ref=lambda torch, x: 0.5 / torch.sqrt(x),
)

elementwise_unary(
    "sqrt", _sqrt, lambda ops, x, y: ops.sqrt_deriv(x),
    semantics="sqrt(max(x, 0)). Derivative 1 / (2 sqrt x) for x > 0 and 0 otherwise (PyTorch "
              "gives NaN/inf for x <= 0; TorchLean totalises to 0).",
    samples=unary_samples(positive), torch_ref=lambda torch, x: torch.sqrt(x),
)


def _clamp_infer(shape: tuple[int, ...], lo: float, hi: float) -> tuple[int, ...]:
    _check_real("clamp", "lo", lo)
    _check_real("clamp", "hi", hi)
    if not lo <= hi:
        raise ShapeError(f"clamp: lo must be <= hi, found lo={lo}, hi={hi}")
    return shape


elementwise_unary(
    "clamp", lambda x, lo, hi: namespace_of(x).clip(x, lo, hi),
    lambda ops, x, y, lo, hi: ops.interval_mask(x, lo=lo, hi=hi),
    attrs=("lo", "hi"), attr_kinds={"lo": K.NOT_NAN_REAL, "hi": K.NOT_NAN_REAL}, infer=_clamp_infer,
    semantics="min(max(x, lo), hi). Derivative: the indicator of the open interval (lo, hi), 0 at "
              "the boundaries (PyTorch passes gradient at the boundaries: an intended difference).",
    samples=lambda rng: [Sample((away_from_zero(rng, 8),), {"lo": -0.5, "hi": 0.75})],
    torch_ref=lambda torch, x, lo, hi: torch.clamp(x, lo, hi),
    error_inputs=[ErrorInput(((3,),), {"lo": 1.0, "hi": 0.0}, ShapeError,
                             "lo must be <= hi, found lo=1.0, hi=0.0"),
                  ErrorInput(((3,),), {"lo": "a", "hi": 0.0}, ShapeError,
                             "lo must be a real number")],
)


def _sigmoid(x: Any) -> Any:
    # exp(-|x|) never overflows; the two branches agree where both are finite.
    xp = namespace_of(x)
    e = xp.exp(-xp.abs(x))
    return astype(xp.where(x >= 0, 1 / (1 + e), e / (1 + e)), x.dtype)


elementwise_unary(
    "sigmoid", _sigmoid,
    lambda ops, x, y: ops.mul(y, ops.add_scalar(ops.scale(y, c=-1.0), c=1.0)),
    semantics="1 / (1 + exp(-x)), computed without overflow. Derivative y (1 - y).",
    samples=unary_samples(), torch_ref=lambda torch, x: torch.sigmoid(x),
)

elementwise_unary(
    "tanh", _ufunc("tanh"),
    lambda ops, x, y: ops.add_scalar(ops.scale(ops.square(y), c=-1.0), c=1.0),
    semantics="tanh(x). Derivative 1 - y^2.",
    samples=unary_samples(), torch_ref=lambda torch, x: torch.tanh(x),
)

elementwise_unary(
    "exp", _ufunc("exp"), lambda ops, x, y: y,
    semantics="exp(x). Derivative exp(x) (the output itself).",
    samples=unary_samples(), torch_ref=lambda torch, x: torch.exp(x),
)


def _softplus(x: Any) -> Any:
    xp = namespace_of(x)
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


elementwise_unary(
    "softplus", _softplus, lambda ops, x, y: ops.sigmoid(x),
    semantics="log(1 + exp(x)) in the stable form max(x, 0) + log1p(exp(-|x|)). Derivative "
              "sigmoid(x).",
    samples=unary_samples(), torch_ref=lambda torch, x: torch.nn.functional.softplus(x),
)


def _log(x: Any) -> Any:
    xp = namespace_of(x)
    bad = ~(x > 0)
    # On a device the domain check is one explicit download of a 0-d count (a synchronisation,
    # as any value-dependent error needs); log stays total on nothing, as on the CPU.
    if xp is np:
        count = int(bad.sum()) if bad.any() else 0
    else:
        count = int(to_host(xp.count_nonzero(bad)))
    if count:
        raise DomainError(f"log: {count} of {x.size} entries are <= 0 or NaN; "
                          "log needs positive input (safe_log is total)")
    return xp.log(x)


elementwise_unary(
    "log", _log, lambda ops, x, y: ops.inv(x),
    semantics="Natural log. Raises DomainError naming how many entries are <= 0 or NaN. "
              "Derivative 1/x.",
    samples=unary_samples(positive), torch_ref=lambda torch, x: torch.log(x),
    error_inputs=[ErrorInput((np.array([1.0, -1.0, 0.0]),), {}, DomainError,
                             "2 of 3 entries are <= 0 or NaN", at_run=True),
                  arity_error(("x",))],
)

elementwise_unary(
    "inv", lambda x: 1 / x, lambda ops, x, y: ops.scale(ops.square(y), c=-1.0),
    semantics="1 / x. Derivative -1/x^2 (written -y^2).",
    samples=unary_samples(away_from_zero), torch_ref=lambda torch, x: 1 / x,
)


def _safe_log(x: Any, eps: float) -> Any:
    return namespace_of(x).log(_softplus(x) + eps)


elementwise_unary(
    "safe_log", _safe_log,
    lambda ops, x, y, eps: ops.mul(ops.sigmoid(x), ops.inv(ops.add_scalar(ops.softplus(x), c=eps))),
    attrs={"eps": 1e-6},
    attr_kinds={"eps": K.POSITIVE_REAL}, infer=_scalar_attr_infer("safe_log", "eps"),
    semantics="log(softplus(x) + eps), total on all reals (eps defaults to 1e-6). Derivative "
              "sigmoid(x) / (softplus(x) + eps).",
    samples=lambda rng: [Sample((normal(rng, 5),), {"eps": 1e-6})],
    torch_ref=lambda torch, x, eps: torch.log(torch.nn.functional.softplus(x) + eps),
    error_inputs=[ErrorInput(((3,),), {"eps": [1e-6]}, ShapeError,
                             r"eps must be a positive number.*found \[1e-06\]")],
)


# ---------------------------------------------------------------------------------------------
# GELU, one primitive with an ``approximate`` attribute (torch's and ONNX's names): "tanh"
# (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the seed's F.gelu) or "none" (exact,
# 0.5 x (1 + erf(x / sqrt 2))). Until it was a primitive, GELU was recorded as the composite of
# 8-9 ops below; the reference kernel performs exactly those ops in the same order (so the same
# bits as the composite), and the interval rule is the composite's rules chained
# (``bounds.ibp``). One node instead of nine is what makes the eager step cheaper; the fast
# kernel (``ops.fast.elementwise``) also keeps tanh / erf for the VJP.

GELU_C = math.sqrt(2.0 / math.pi)
GELU_K = 0.044715
INV_SQRT2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _gelu_infer(shape: tuple[int, ...], approximate: str = "tanh") -> tuple[int, ...]:
    K.GELU_APPROXIMATE("gelu", "approximate", approximate)
    return shape


def _gelu(x: Any, approximate: str = "tanh") -> Any:
    # The composite's ops in its order: square, mul, scale, add, scale, tanh, add_scalar, mul,
    # scale (tanh form); scale, erf, add_scalar, mul, scale (exact form).
    if approximate == "tanh":
        inner = (x + ((x * x) * x) * GELU_K) * GELU_C
        return (x * (namespace_of(x).tanh(inner) + 1.0)) * 0.5
    return (x * (erf_kernel(x * INV_SQRT2) + 1.0)) * 0.5


def _gelu_derivative(ops: Any, x: Any, y: Any, approximate: str = "tanh") -> Any:
    if approximate == "tanh":
        # 0.5 (1 + t) + 0.5 x (1 - t^2) C (1 + 3 K x^2), t = tanh(C (x + K x^3))
        t = ops.tanh(ops.scale(ops.add(x, ops.scale(ops.mul(ops.square(x), x), c=GELU_K)),
                               c=GELU_C))
        sech2 = ops.add_scalar(ops.scale(ops.square(t), c=-1.0), c=1.0)
        slope = ops.scale(ops.add_scalar(ops.scale(ops.square(x), c=3.0 * GELU_K), c=1.0),
                          c=GELU_C)
        return ops.scale(ops.add(ops.add_scalar(t, c=1.0), ops.mul(x, ops.mul(sech2, slope))),
                         c=0.5)
    # Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
    cdf = ops.scale(ops.add_scalar(ops.erf(ops.scale(x, c=INV_SQRT2)), c=1.0), c=0.5)
    pdf = ops.scale(ops.exp(ops.scale(ops.square(x), c=-0.5)), c=INV_SQRT_2PI)
    return ops.add(cdf, ops.mul(x, pdf))


def _gelu_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((normal(rng, dim(rng, 1, 5)),), {"approximate": "tanh"}),
            Sample((2 * normal(rng, dim(rng, 1, 3), dim(rng, 1, 3)),), {"approximate": "none"}),
            Sample((3 * normal(rng, 2, dim(rng, 1, 3), 2),), {"approximate": "tanh"},
                   note="tails"),
            Sample((3 * normal(rng, 2, 3),), {"approximate": "none"}, note="tails")]


elementwise_unary(
    "gelu", _gelu, _gelu_derivative,
    attrs={"approximate": "tanh"}, attr_kinds={"approximate": K.GELU_APPROXIMATE},
    infer=_gelu_infer,
    semantics="GELU: approximate='tanh' (the default) 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 "
              "x^3))), computed as (x * (tanh((x + ((x * x) * x) * 0.044715) * sqrt(2/pi)) + "
              "1)) * 0.5; approximate='none' 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.functional."
              "gelu, ONNX Gelu). Derivative 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + "
              "3 * 0.044715 x^2) (tanh form), Phi(x) + x phi(x) (exact form).",
    samples=_gelu_samples,
    torch_ref=lambda torch, x, approximate="tanh": torch.nn.functional.gelu(
        x, approximate=approximate),
    error_inputs=[ErrorInput(((3,),), {"approximate": "erf"}, ShapeError,
                             "gelu: approximate must be 'tanh' or 'none', found 'erf'"),
                  ErrorInput(((3,),), {"approximate": True}, ShapeError,
                             "gelu: approximate must be 'tanh' or 'none', found True")],
)
