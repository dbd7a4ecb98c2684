"""Reductions and normalised exponentials: reduce_sum, reduce_mean, sum, softmax, log_softmax,
mse_loss.

softmax and log_softmax act on the last axis; their rules use the output, never a Jacobian
matrix: softmax VJP ``y * (g - sum(g * y))``, log_softmax VJP ``g - softmax(x) * sum(g)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, arity_error, register
from ..core.shape import Shape, check_axis, size
from .array_api import amax, amean, asum
from .samples import dims, normal


def _reduce_infer(op: str) -> Any:
    def infer(s: Shape, axis: int) -> Shape:
        a = check_axis(op, axis, s)
        return s[:a] + s[a + 1:]

    return infer


def _keep_axis(ops: Any, g: Any, shape: Shape, axis: int) -> Any:
    """Broadcast a reduced cotangent back over the reduced axis."""
    a = axis % len(shape)
    kept = ops.reshape(g, shape=shape[:a] + (1,) + shape[a + 1:])
    return ops.broadcast_to(kept, shape=shape)


def _reduce_samples(rng: np.random.Generator) -> list[Sample]:
    a, b, c = dims(rng, 3)
    return [Sample((normal(rng, a, b),), {"axis": 0}),
            Sample((normal(rng, a, b, c),), {"axis": -1}),
            Sample((normal(rng, c),), {"axis": 0}),
            Sample((normal(rng, a, b, c),), {"axis": 1})]


register(Primitive(
    "reduce_sum", ("x",), _reduce_infer("reduce_sum"), lambda x, axis: asum(x, axis),
    attrs=("axis",), attr_kinds={"axis": K.AXIS}, linear=True,
    vjp=lambda ops, g, xs, out, axis: (_keep_axis(ops, g, xs[0].shape, axis),),
    semantics="Sum along one axis, which is removed (torch.sum(x, dim=axis)). VJP: broadcast g "
              "back along the axis. Axis out of range is a ShapeError.",
    samples=_reduce_samples, torch_ref=lambda torch, x, axis: x.sum(dim=axis),
    error_inputs=[ErrorInput(((2, 3),), {"axis": 2}, ShapeError,
                             r"axis 2 out of range for shape \(2, 3\)"),
                  ErrorInput(((2, 3),), {"axis": 1.0}, ShapeError, "axis must be an int")],
))


def _mean_vjp(ops: Any, g: Any, xs: Any, out: Any, axis: int) -> tuple[Any]:
    n = xs[0].shape[axis]
    return (ops.scale(_keep_axis(ops, g, xs[0].shape, axis), c=1.0 / n),)


def _mean_infer(s: Shape, axis: int) -> Shape:
    out = _reduce_infer("reduce_mean")(s, axis)
    if s[axis] == 0:
        raise ShapeError(f"reduce_mean: axis {axis} of shape {s} is empty")
    return out


register(Primitive(
    "reduce_mean", ("x",), _mean_infer, lambda x, axis: amean(x, axis),
    attrs=("axis",), attr_kinds={"axis": K.AXIS}, linear=True, vjp=_mean_vjp,
    semantics="Mean along one axis, which is removed. VJP: broadcast g back and divide by the "
              "axis length.",
    samples=_reduce_samples, torch_ref=lambda torch, x, axis: x.mean(dim=axis),
    error_inputs=[ErrorInput(((2, 0),), {"axis": 1}, ShapeError,
                             r"axis 1 of shape \(2, 0\) is empty"),
                  ErrorInput(((2, 3),), {"axis": -3}, ShapeError, "axis -3 out of range")],
))

register(Primitive(
    "sum", ("x",), lambda s: (), asum, linear=True,
    vjp=lambda ops, g, xs, out: (ops.broadcast_to(g, shape=xs[0].shape),),
    semantics="Sum of all entries, a scalar (torch.sum(x)). VJP: g replicated to every entry.",
    samples=lambda rng: [Sample((normal(rng, 3, 4),)), Sample((normal(rng, 7),))],
    torch_ref=lambda torch, x: x.sum(),
    error_inputs=[arity_error(("x",))],
))


def _last_axis_infer(op: str) -> Any:
    def infer(s: Shape) -> Shape:
        if len(s) == 0 or s[-1] == 0:
            raise ShapeError(f"{op}: needs a non-empty last axis, found shape {s}")
        return s

    return infer


def _softmax(x: Any) -> Any:
    e = namespace_of(x).exp(x - amax(x, -1, True))
    return e / asum(e, -1, True)


def _log_softmax(x: Any) -> Any:
    xp = namespace_of(x)
    shifted = x - amax(x, -1, True)
    return shifted - xp.log(asum(xp.exp(shifted), -1, True))


def _sum_last_keep(ops: Any, v: Any) -> Any:
    s = ops.reduce_sum(v, axis=-1)
    return ops.reshape(s, shape=s.shape + (1,))


def _softmax_rule(ops: Any, g: Any, y: Any) -> Any:
    # J = diag(y) - y y^T is symmetric, so VJP and JVP share one formula.
    return ops.mul(y, ops.sub(g, _sum_last_keep(ops, ops.mul(g, y))))


def _log_softmax_vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any]:
    return (ops.sub(g, ops.mul(ops.exp(out), _sum_last_keep(ops, g))),)


def _log_softmax_jvp(ops: Any, ts: Any, xs: Any, out: Any) -> Any:
    return ops.sub(ts[0], _sum_last_keep(ops, ops.mul(ops.exp(out), ts[0])))


def _softmax_samples(rng: np.random.Generator) -> list[Sample]:
    a, b, c = dims(rng, 3)
    return [Sample((normal(rng, c),)), Sample((normal(rng, a, c),)),
            Sample((normal(rng, a, b, c),))]


register(Primitive(
    "softmax", ("x",), _last_axis_infer("softmax"), _softmax,
    vjp=lambda ops, g, xs, out: (_softmax_rule(ops, g, out),),
    jvp=lambda ops, ts, xs, out: _softmax_rule(ops, ts[0], out),
    semantics="Softmax along the last axis, max-shifted. VJP: y * (g - sum(g * y)) (no Jacobian "
              "is formed).",
    samples=_softmax_samples, torch_ref=lambda torch, x: torch.softmax(x, dim=-1),
    error_inputs=[ErrorInput(((),), {}, ShapeError, "needs a non-empty last axis"),
                  ErrorInput(((2, 0),), {}, ShapeError, "needs a non-empty last axis")],
))

register(Primitive(
    "log_softmax", ("x",), _last_axis_infer("log_softmax"), _log_softmax,
    vjp=_log_softmax_vjp, jvp=_log_softmax_jvp,
    semantics="log(softmax(x)) on the last axis in the max-shifted stable form "
              "x - m - log(sum(exp(x - m))). VJP: g - softmax(x) * sum(g).",
    samples=_softmax_samples, torch_ref=lambda torch, x: torch.log_softmax(x, dim=-1),
    error_inputs=[ErrorInput(((3, 0),), {}, ShapeError, "needs a non-empty last axis")],
))


def _mse_infer(a: Shape, b: Shape) -> Shape:
    if a != b:
        raise ShapeError(f"mse_loss: prediction and target shapes differ: {a} and {b}")
    if size(a) == 0:
        raise ShapeError(f"mse_loss: needs at least one entry, found shape {a}")
    return ()


def _mse_forward(yhat: Any, target: Any) -> Any:
    d = yhat - target
    return asum(d * d) / d.size


def _mse_vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any, Any]:
    yhat, target = xs
    grad = ops.mul(g, ops.scale(ops.sub(yhat, target), c=2.0 / _size(yhat.shape)))
    return grad, ops.scale(grad, c=-1.0)


def _mse_jvp(ops: Any, ts: Any, xs: Any, out: Any) -> Any:
    yhat, target = xs
    ta, tb = ts
    dt = ta if tb is None else (ops.scale(tb, c=-1.0) if ta is None else ops.sub(ta, tb))
    return ops.sum(ops.mul(ops.scale(ops.sub(yhat, target), c=2.0 / _size(yhat.shape)), dt))


def _size(shape: Shape) -> int:
    return size(tuple(shape))


register(Primitive(
    "mse_loss", ("yhat", "target"), _mse_infer, _mse_forward, vjp=_mse_vjp, jvp=_mse_jvp,
    semantics="Mean squared error over all entries, a scalar (reduction='mean'). VJP: "
              "(2/N)(yhat - target) g to the prediction and its negative to the target.",
    samples=lambda rng: [Sample((normal(rng, 4), normal(rng, 4))),
                         Sample((normal(rng, 2, 3), normal(rng, 2, 3)))],
    torch_ref=lambda torch, a, b: torch.nn.functional.mse_loss(a, b),
    error_inputs=[ErrorInput(((3,), (4,)), {}, ShapeError,
                             r"prediction and target shapes differ: \(3,\) and \(4,\)"),
                  ErrorInput(((0,), (0,)), {}, ShapeError, "needs at least one entry")],
))
