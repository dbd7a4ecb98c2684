"""Linear algebra primitives: linear (affine layer), matmul and bmm.

All three are bilinear (linear is affine: bilinear in (w, x) plus b), so each JVP is the sum of the
op applied with one tangent at a time, and each VJP is made of matmuls with transposed operands.
``linear`` over a batch ``(..., in)`` flattens the leading axes so its forward and each cotangent
is a single GEMM, never a Python loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, bilinear, bilinear_jvp, register
from ..core.shape import Shape, size
from .array_api import reshape
from .samples import dim, normal

# ---------------------------------------------------------------------------------------------
# linear(w, b, x) = x @ w.T + b


def _linear_infer(w: Shape, b: Shape, x: Shape) -> Shape:
    if len(w) != 2:
        raise ShapeError(f"linear: weight must be 2-D (out, in), found {w}")
    out_f, in_f = w
    if b != (out_f,):
        raise ShapeError(f"linear: bias must have shape ({out_f},) for weight {w}, found {b}")
    if len(x) == 0 or x[-1] != in_f:
        raise ShapeError(f"linear: input must have shape (..., {in_f}) for weight {w}, "
                         f"found {x}")
    return x[:-1] + (out_f,)


def _linear(w: Any, b: Any, x: Any) -> Any:
    # The GEMM's result is fresh: adding the bias in place saves one output-sized allocation
    # (and its page faults) per call; the sums are the same float32 additions, bit for bit.
    if x.ndim == 1:
        y = w @ x
    elif x.ndim == 2:
        y = x @ w.T
    else:
        # A stacked input as one (rows, in) GEMM, as the VJP already flattens it: NumPy's
        # matmul runs one GEMM per leading index of a 3-D operand (W5's (8, 32, 64) input:
        # 184 -> 100 us a call, one thread).
        lead = tuple(x.shape[:-1])
        y = reshape(reshape(x, (size(lead), x.shape[-1])) @ w.T, lead + (w.shape[0],))
    if y.ndim == 0 or (b.dtype != y.dtype
                       and y.dtype != namespace_of(y).result_type(y.dtype, b.dtype)):
        return y + b  # a 0-d result is a scalar, and mixed dtypes must promote as before
    y += b
    return y


def _linear_vjp(ops: Any, g: Any, xs: Any, out: Any,
                needed: tuple[bool, ...] = (True, True, True)) -> tuple[Any, Any, Any]:
    w, b, x = xs
    out_f, in_f = w.shape
    rows = size(tuple(x.shape[:-1]))
    g2 = ops.reshape(g, shape=(rows, out_f))  # (N, out): one GEMM per cotangent
    gw = gb = gx = None
    if needed[0]:
        gw = ops.matmul(ops.transpose2d(g2), ops.reshape(x, shape=(rows, in_f)))
    if needed[1]:
        gb = g if len(x.shape) == 1 else ops.reduce_sum(g2, axis=0)
    if needed[2]:
        gx = ops.reshape(ops.matmul(g2, w), shape=x.shape)
    return gw, gb, gx


def _linear_jvp(ops: Any, ts: Any, xs: Any, out: Any) -> Any:
    # linear(w, b, x) = w x + b * 1 is bilinear in ((w, b), (x, 1)); the tangent of (x, 1) is
    # (tx, 0), so the second term is linear(w, 0, tx).
    w, b, x = xs
    tw, tb, tx = ts

    def f(params: tuple[Any, Any], v: tuple[Any, bool]) -> Any:
        (pw, pb), (vx, with_bias) = params, v
        if with_bias or len(vx.shape) == 1:
            return ops.linear(pw, pb if with_bias else ops.zeros_like(pb), vx)
        # w tx without a bias: the product ``linear`` computes (x @ w.T, the transpose a view),
        # minus a zero bias made and added per call (forward-over-reverse: one per layer).
        rows = size(tuple(vx.shape[:-1]))
        flat = vx if len(vx.shape) == 2 else ops.reshape(vx, shape=(rows, vx.shape[-1]))
        prod = ops.matmul(flat, ops.transpose2d(pw))
        return prod if len(vx.shape) == 2 else ops.reshape(
            prod, shape=tuple(vx.shape[:-1]) + (pw.shape[0],))

    t_params = None
    if tw is not None or tb is not None:
        t_params = (ops.zeros_like(w) if tw is None else tw,
                    ops.zeros_like(b) if tb is None else tb)
    return bilinear(ops, f, (w, b), (x, True), t_params, None if tx is None else (tx, False))


def _linear_samples(rng: np.random.Generator) -> list[Sample]:
    o, i = dim(rng), dim(rng)
    return [
        Sample((normal(rng, o, i), normal(rng, o), normal(rng, i)), note="matvec"),
        Sample((normal(rng, o, i), normal(rng, o), normal(rng, dim(rng), i)), note="batch"),
        Sample((normal(rng, 3, 2), normal(rng, 3), normal(rng, 2, dim(rng), 2)),
               note="two batch axes"),
    ]


register(Primitive(
    "linear", ("w", "b", "x"), _linear_infer, _linear, vjp=_linear_vjp, jvp=_linear_jvp,
    selective=True,
    semantics="w @ x + b for w (out, in), b (out,), x (in,); over x (..., in) it is "
              "x @ w.T + b -> (..., out) (torch.nn.functional.linear). VJP: g x^T (summed over "
              "the batch), sum of g, and g @ w, each one GEMM.",
    samples=_linear_samples,
    torch_ref=lambda torch, w, b, x: torch.nn.functional.linear(x, w, b),
    error_inputs=[ErrorInput(((3, 2), (3,), (4,)), {}, ShapeError,
                             r"input must have shape \(\.\.\., 2\)"),
                  ErrorInput(((3, 2), (2,), (2,)), {}, ShapeError,
                             r"bias must have shape \(3,\)")],
))

# ---------------------------------------------------------------------------------------------
# matmul and bmm


def _matmul_infer(a: Shape, b: Shape) -> Shape:
    if len(a) != 2 or len(b) != 2:
        raise ShapeError(f"matmul: both inputs must be 2-D, found {a} @ {b}")
    if a[1] != b[0]:
        raise ShapeError(f"matmul: inner dimensions differ: {a} @ {b}")
    return (a[0], b[1])


def _bmm_infer(a: Shape, b: Shape) -> Shape:
    if len(a) != 3 or len(b) != 3:
        raise ShapeError(f"bmm: both inputs must be 3-D (batch, m, n), found {a} @ {b}")
    if a[0] != b[0]:
        raise ShapeError(f"bmm: batch sizes differ: {a} @ {b}")
    if a[2] != b[1]:
        raise ShapeError(f"bmm: inner dimensions differ: {a} @ {b}")
    return (a[0], a[1], b[2])


def _product_vjp(name: str, transpose: str) -> Any:
    """VJP of a matrix product ``a @ b``: ``(g b^T, a^T g)``, each only where needed."""

    def vjp(ops: Any, g: Any, xs: Any, out: Any, needed: tuple[bool, ...] = (True, True)
            ) -> tuple[Any, Any]:
        product, t = getattr(ops, name), getattr(ops, transpose)
        return (product(g, t(xs[1])) if needed[0] else None,
                product(t(xs[0]), g) if needed[1] else None)

    return vjp


register(Primitive(
    "matmul", ("a", "b"), _matmul_infer, lambda a, b: a @ b,
    vjp=_product_vjp("matmul", "transpose2d"), jvp=bilinear_jvp("matmul"), selective=True,
    semantics="Matrix product (m, n) @ (n, p) -> (m, p). VJP: (g b^T, a^T g). JVP: "
              "ta b + a tb.",
    samples=lambda rng: [Sample((normal(rng, dim(rng), 3), normal(rng, 3, dim(rng)))),
                         Sample((normal(rng, 1, 4), normal(rng, 4, 1)))],
    torch_ref=lambda torch, a, b: a @ b,
    error_inputs=[ErrorInput(((2, 3), (4, 5)), {}, ShapeError, "inner dimensions differ"),
                  ErrorInput(((3,), (3, 2)), {}, ShapeError, "both inputs must be 2-D")],
))

register(Primitive(
    "bmm", ("a", "b"), _bmm_infer, lambda a, b: a @ b,
    vjp=_product_vjp("bmm", "transpose3d_last_two"), jvp=bilinear_jvp("bmm"), selective=True,
    semantics="Batched matrix product (B, m, n) @ (B, n, p) -> (B, m, p) (torch.bmm). "
              "VJP: per batch (g b^T, a^T g). JVP: ta b + a tb.",
    samples=lambda rng: [Sample((normal(rng, 2, dim(rng), 3), normal(rng, 2, 3, dim(rng))))],
    torch_ref=lambda torch, a, b: torch.bmm(a, b),
    error_inputs=[ErrorInput(((2, 2, 3), (3, 3, 2)), {}, ShapeError, "batch sizes differ")],
))
