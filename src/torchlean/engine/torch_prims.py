"""Tensor-only primitives for torch names the op registry does not have (sin, cos, a general
power, where, casts, indexed assignment).

They are ``Primitive`` objects recorded on tensors like any other, with their own VJP, but they
are *not* registered: the registry's ops are the ones torchlean can trace, compile, bound and
export, and these cannot be (a graph holding one is refused by ``compile``/``verify``/ONNX export,
which look every op up in the registry). Each VJP works on both interpreters of the reverse
driver: on arrays (``ARRAY_OPS``, first order) and on recorded tensors (``create_graph``), where
it records these same primitives again, so higher derivatives work too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.backend import namespace_of
from ..core.registry import ARRAY_OPS, Primitive


def call(ops: Any, prim: Primitive, *inputs: Any) -> Any:
    """``prim`` on ``inputs`` in the interpreter ``ops``: computed on arrays, recorded on
    tensors (the owner of a recording interpreter)."""
    if ops is ARRAY_OPS:
        return prim.forward(*inputs)
    return ops._owner.record(prim, inputs, {})


def sum_to(ops: Any, g: Any, shape: tuple[int, ...]) -> Any:
    """``g`` summed over the axes it was broadcast along to reach ``shape``."""
    if tuple(g.shape) == tuple(shape):
        return g
    return ops.sum_to(g, shape=tuple(shape))


def _same(shape: Any) -> Any:
    return shape


def _no_samples(rng: np.random.Generator) -> list[Any]:
    return []


def _ufunc(name: str) -> Callable[[Any], Any]:
    def forward(x: Any) -> Any:
        with np.errstate(all="ignore"):
            return getattr(namespace_of(x), name)(x)

    return forward


def _sin_vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
    return (ops.mul(g, call(ops, COS, inputs[0])),)


def _cos_vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
    return (ops.scale(ops.mul(g, call(ops, SIN, inputs[0])), c=-1.0),)


SIN = Primitive("sin", ("x",), _same, _ufunc("sin"), vjp=_sin_vjp, reverse_only=True,
                semantics="Elementwise sine (tensor-only).", samples=_no_samples)
COS = Primitive("cos", ("x",), _same, _ufunc("cos"), vjp=_cos_vjp, reverse_only=True,
                semantics="Elementwise cosine (tensor-only).", samples=_no_samples)


def _broadcast_shape(a: Any, b: Any) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))


def _pow_forward(x: Any, y: Any) -> Any:
    with np.errstate(all="ignore"):
        return namespace_of(x).power(x, y)


def _log_forward(x: Any) -> Any:
    with np.errstate(all="ignore"):
        return namespace_of(x).log(x)


def _sqrt_vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
    return (ops.mul(g, call(ops, scale_any(0.5), call(ops, RECIPROCAL, out))),)


def _reciprocal_forward(x: Any) -> Any:
    with np.errstate(all="ignore"):
        return (1 / x).astype(x.dtype)


RECIPROCAL = Primitive("reciprocal", ("x",), _same, _reciprocal_forward,
                       vjp=lambda ops, g, i, o: (ops.scale(ops.mul(g, ops.square(o)), c=-1.0),),
                       reverse_only=True, semantics="1 / x, inf at 0 as in torch (tensor-only).",
                       samples=_no_samples)
SQRT = Primitive("sqrt_nan", ("x",), _same, _ufunc("sqrt"), vjp=_sqrt_vjp, reverse_only=True,
                 semantics="sqrt(x), NaN for x < 0 as in torch (the registry's sqrt is "
                 "totalised to sqrt(max(x, 0))) (tensor-only).", samples=_no_samples)
LOG = Primitive("log_nan", ("x",), _same, _log_forward, vjp=lambda ops, g, i, o: (
    ops.mul(g, ops.inv(i[0])),), reverse_only=True, semantics="Natural log, NaN/-inf outside "
    "the domain as in torch (tensor-only).", samples=_no_samples)


def _pow_vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
    """d(x**y) = y x**(y-1) dx + x**y log(x) dy (the log term only where x > 0, as torch
    gives 0 for x == 0 and y >= 0)."""
    x, y = inputs
    ym1 = ops.add_scalar(y, c=-1.0)
    gx = ops.mul(g, ops.mul(y, call(ops, POW, x, ym1)))
    gy = ops.mul(g, ops.mul(out, call(ops, SAFE_LOG, x)))
    return sum_to(ops, gx, x.shape), sum_to(ops, gy, y.shape)


def _safe_log_forward(x: Any) -> Any:
    xp = namespace_of(x)
    with np.errstate(all="ignore"):
        return xp.where(x > 0, xp.log(xp.where(x > 0, x, 1)), 0).astype(x.dtype)


SAFE_LOG = Primitive("log_where_positive", ("x",), _same, _safe_log_forward,
                     vjp=lambda ops, g, i, o: (ops.scale(g, c=0.0),), reverse_only=True,
                     semantics="log(x) where x > 0, else 0 (the power rule's log term).",
                     samples=_no_samples)
POW = Primitive("pow", ("x", "y"), _broadcast_shape, _pow_forward, vjp=_pow_vjp,
                reverse_only=True, broadcasting=True, semantics="x ** y elementwise with "
                "broadcasting, NaN outside the real domain as in torch (tensor-only).",
                samples=_no_samples)


def extremum_all(mask: Any, largest: bool) -> Primitive:
    """The largest (or smallest) entry of a tensor, whose ties (``mask``: the entries equal to
    it, NaN matching NaN) share the gradient evenly, as torch's ``max()`` / ``min()`` do."""
    ties = int(mask.sum())

    def forward(x: Any) -> Any:
        xp = namespace_of(x)
        return xp.max(x) if largest else xp.min(x)

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        spread = ops.broadcast_to(g, shape=tuple(inputs[0].shape))
        # the other entries get an exact zero (not g * 0: a NaN extremum's g is NaN)
        return (call(ops, where(mask), ops.scale(spread, c=1.0 / ties),
                     ops.zeros_like(spread)),)

    return Primitive("max_all" if largest else "min_all", ("x",), lambda s: (), forward,
                     vjp=vjp, reverse_only=True, samples=_no_samples,
                     semantics="The extremum of all entries; ties share the gradient evenly "
                               "(tensor-only).")


def where(cond: Any) -> Primitive:
    """``where(cond, a, b)`` for a fixed bool array ``cond`` (broadcast to a and b)."""

    def forward(a: Any, b: Any) -> Any:
        return namespace_of(a).where(cond, a, b)

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        zero = ops.scale(g, c=0.0)
        sel = where(cond)
        return (sum_to(ops, call(ops, sel, g, zero), inputs[0].shape),
                sum_to(ops, call(ops, sel, zero, g), inputs[1].shape))

    return Primitive("where", ("a", "b"), lambda a, b: tuple(np.broadcast_shapes(
        tuple(cond.shape), tuple(a), tuple(b))), forward, vjp=vjp, reverse_only=True,
        semantics="where(cond, a, b) for a fixed mask (tensor-only).", samples=_no_samples)


def scale_any(c: float) -> Primitive:
    """``x * c`` for any float c, infinities included (``x / 0``: inf, -inf or NaN, as torch's
    division gives; the registry's ``scale`` takes finite constants only)."""

    def forward(x: Any) -> Any:
        with np.errstate(all="ignore"):
            return (x * c).astype(x.dtype)

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        return (call(ops, scale_any(c), g),)

    return Primitive("scale_any", ("x",), _same, forward, vjp=vjp, reverse_only=True,
                     semantics=f"x * {c} (tensor-only).", samples=_no_samples)


def cast(source: np.dtype, target: np.dtype) -> Primitive:
    """A float-to-float dtype conversion whose gradient converts back."""

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        return (call(ops, cast(target, source), g),)

    return Primitive("to_dtype", ("x",), _same, lambda x: x.astype(target), vjp=vjp,
                     reverse_only=True, semantics=f"Conversion {source.name} -> {target.name} "
                     "(tensor-only).", samples=_no_samples)


def setitem(index: tuple[Any, ...], shape: tuple[int, ...]) -> Primitive:
    """``out = x.copy(); out[index] = v`` (NumPy index on an array of ``shape``; ``v`` broadcast
    to the indexed shape). Cotangents: ``g`` with the written entries zeroed for x; the written
    entries of ``g``, summed to v's shape, for v."""

    def forward(x: Any, v: Any) -> Any:
        out = x.copy()
        out[index] = v
        return out

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        if ops is not ARRAY_OPS:
            from_zero = call(ops, setitem(index, shape), g, ops.scale(call(ops, TAKE(index), g),
                                                                    c=0.0))
            return (from_zero, sum_to(ops, call(ops, TAKE(index), g), inputs[1].shape))
        gx = g.copy()
        gx[index] = 0
        gv = g[index]
        v_shape = tuple(inputs[1].shape)
        lead = gv.ndim - len(v_shape)
        if lead > 0:
            gv = gv.sum(axis=tuple(range(lead)))
        axes = tuple(k for k, n in enumerate(v_shape) if n == 1 and gv.shape[k] != 1)
        if axes:
            gv = gv.sum(axis=axes, keepdims=True)
        return gx, gv.reshape(v_shape)

    return Primitive("setitem", ("x", "v"), lambda x, v: tuple(x), forward, vjp=vjp,
                     reverse_only=True, semantics="Indexed assignment into a copy "
                     "(tensor-only).", samples=_no_samples)


def TAKE(index: tuple[Any, ...]) -> Primitive:  # noqa: N802  (a primitive factory)
    """``x[index]`` for the create_graph path of ``setitem`` (VJP: setitem of g into zeros)."""

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        x = inputs[0]
        zeros = ops.scale(x, c=0.0)
        return (call(ops, setitem(index, tuple(x.shape)), zeros, g),)

    def infer(x: Any) -> tuple[int, ...]:
        return tuple(np.broadcast_to(np.empty(()), x)[index].shape)

    return Primitive("take_index", ("x",), infer, lambda x: x[index], vjp=vjp, reverse_only=True,
                     semantics="x[index] (tensor-only).", samples=_no_samples)


ONE_OFF = frozenset({"reciprocal", "sqrt_nan", "scale_any", "sin", "cos", "pow", "log_nan",
                     "log_where_positive", "where", "to_dtype", "setitem", "take_index"})
