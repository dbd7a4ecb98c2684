"""General N-D primitives: ``permute`` (any axis order), ``matmul_nd`` (batched, broadcasting
matrix product) and ``erf`` (the error function, for exact GELU).

The older layout and linear-algebra ops fix their rank (``transpose2d``, ``bmm`` on 3-D only);
models written elsewhere (ONNX files from PyTorch, in particular) permute 4-D attention tensors
and multiply ``(B, H, n, d) @ (B, H, d, n)``, so these generalise them. Rules follow the registry
conventions: ``permute`` is linear with the inverse permutation as adjoint, ``matmul_nd`` is
bilinear with its batch broadcasting undone by the registry's central ``sum_to``, and ``erf`` is
declared from its derivative ``2/sqrt(pi) exp(-x^2)``, written with primitives so it
differentiates again.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ShapeError
from ..shape import Shape, broadcast_shapes
from .registry import ErrorInput, Primitive, Sample, bilinear_jvp, elementwise_unary, register
from .samples import dim, normal

# ---------------------------------------------------------------------------------------------
# permute(x, perm): out[i_0, ..., i_{k-1}] = x[j] with j[perm[a]] = i_a


def check_perm(op: str, perm: Any, ndim: int) -> tuple[int, ...]:
    """``perm`` as a tuple of ints, checked to be a permutation of ``range(ndim)``."""
    if isinstance(perm, str | bytes) or not hasattr(perm, "__iter__"):
        raise ShapeError(f"{op}: perm must be a sequence of axes, found {perm!r}")
    axes = tuple(perm)
    if any(isinstance(a, bool) or not isinstance(a, int | np.integer) for a in axes):
        raise ShapeError(f"{op}: perm must hold ints, found {perm!r}")
    axes = tuple(int(a) for a in axes)
    if sorted(axes) != list(range(ndim)):
        raise ShapeError(f"{op}: perm {axes} is not a permutation of the {ndim} axes "
                         f"0..{ndim - 1}")
    return axes


def inverse_perm(perm: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes ``perm``."""
    inverse = [0] * len(perm)
    for k, p in enumerate(perm):
        inverse[p] = k
    return tuple(inverse)


def _permute_infer(s: Shape, perm: Any) -> Shape:
    axes = check_perm("permute", perm, len(s))
    return tuple(s[p] for p in axes)


def _permute_samples(rng: np.random.Generator) -> list[Sample]:
    shape4 = tuple(dim(rng, 1, 3) for _ in range(4))
    order = tuple(int(a) for a in rng.permutation(4))
    return [
        Sample((normal(rng, *shape4),), {"perm": order}, note="random 4-D order"),
        Sample((normal(rng, 2, 3, 4),), {"perm": (2, 0, 1)}),
        Sample((normal(rng, 2, 3),), {"perm": (1, 0)}),
        Sample((normal(rng, 3),), {"perm": (0,)}, note="identity"),
    ]


register(Primitive(
    "permute", ("x",), _permute_infer,
    lambda x, perm: np.ascontiguousarray(np.transpose(x, tuple(perm))), attrs=("perm",),
    vjp=lambda ops, g, xs, out, perm: (ops.permute(g, perm=inverse_perm(tuple(perm))),),
    linear=True,
    semantics="Reorder the axes: output axis k is input axis perm[k] (torch.permute, "
              "numpy.transpose, ONNX Transpose). perm must be a permutation of all axes "
              "(ShapeError otherwise). VJP: permute by the inverse permutation.",
    samples=_permute_samples,
    torch_ref=lambda torch, x, perm: x.permute(*perm),
    error_inputs=[ErrorInput(((2, 3),), {"perm": (0, 0)}, ShapeError,
                             r"perm \(0, 0\) is not a permutation of the 2 axes"),
                  ErrorInput(((2, 3),), {"perm": 1}, ShapeError,
                             "perm must be a tuple of int axes, found 1")],
))


# ---------------------------------------------------------------------------------------------
# matmul_nd(a, b): (..., m, n) @ (..., n, p) with the batch axes broadcast


def _matmul_nd_infer(a: Shape, b: Shape) -> Shape:
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul_nd: both inputs need at least 2 axes (..., m, n) @ (..., n, p), "
                         f"found {a} @ {b}; reshape vectors to matrices first")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul_nd: inner dimensions differ: {a} @ {b}")
    batch = broadcast_shapes("matmul_nd batch axes", tuple(a[:-2]), tuple(b[:-2]))
    return tuple(batch) + (a[-2], b[-1])


def _swap_last(ops: Any, x: Any) -> Any:
    return ops.swap_adjacent_at_depth(x, depth=len(x.shape) - 2)


def _matmul_nd_vjp(ops: Any, g: Any, xs: Any, out: Any,
                   needed: tuple[bool, ...] = (True, True)) -> tuple[Any, Any]:
    # Cotangents have the broadcast batch shape; the registry sums them back (sum_to).
    a, b = xs
    return (ops.matmul_nd(g, _swap_last(ops, b)) if needed[0] else None,
            ops.matmul_nd(_swap_last(ops, a), g) if needed[1] else None)


def _matmul_nd_samples(rng: np.random.Generator) -> list[Sample]:
    m, n, p = dim(rng, 1, 3), dim(rng, 1, 3), dim(rng, 1, 3)
    return [
        Sample((normal(rng, 2, 3, m, n), normal(rng, 2, 3, n, p)), note="4-D, equal batch"),
        Sample((normal(rng, 2, 1, m, n), normal(rng, 3, n, p)), note="broadcast batch"),
        Sample((normal(rng, 2, m, n), normal(rng, n, p)), note="batched @ matrix"),
        Sample((normal(rng, m, n), normal(rng, n, p)), note="plain matrices"),
    ]


register(Primitive(
    "matmul_nd", ("a", "b"), _matmul_nd_infer, np.matmul,
    vjp=_matmul_nd_vjp, jvp=bilinear_jvp("matmul_nd"), selective=True, broadcasting=True,
    semantics="Batched matrix product (..., m, n) @ (..., n, p) -> (..., m, p) whose batch "
              "axes broadcast by NumPy's rule (torch.matmul / ONNX MatMul with both inputs at "
              "least 2-D). VJP: (g b^T, a^T g), each summed back over its broadcast batch axes. "
              "JVP: ta b + a tb.",
    samples=_matmul_nd_samples,
    torch_ref=lambda torch, a, b: torch.matmul(a, b),
    error_inputs=[ErrorInput(((2, 2, 3), (3, 3, 2)), {}, ShapeError,
                             r"batch axes: shapes do not broadcast: \(2,\) and \(3,\)"),
                  ErrorInput(((2, 3), (4, 2)), {}, ShapeError, "inner dimensions differ"),
                  ErrorInput(((3,), (3, 2)), {}, ShapeError, "need at least 2 axes")],
))


# ---------------------------------------------------------------------------------------------
# erf

_ERF = np.frompyfunc(math.erf, 1, 1)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf(x: Any) -> Any:
    # math.erf is correctly rounded in double precision; NumPy has no erf of its own. Computing in
    # float64 and rounding once keeps float32 results within half an ulp of the true value.
    arr = np.asarray(x)
    return np.asarray(_ERF(arr.astype(np.float64)), dtype=np.float64).astype(arr.dtype)


elementwise_unary(
    "erf", _erf,
    lambda ops, x, y: ops.scale(ops.exp(ops.scale(ops.square(x), c=-1.0)), c=_TWO_OVER_SQRT_PI),
    semantics="The error function erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt (torch.erf, "
              "ONNX Erf); exact GELU is 0.5 x (1 + erf(x / sqrt 2)). Derivative "
              "2/sqrt(pi) exp(-x^2).",
    samples=lambda rng: [Sample((normal(rng, dim(rng, 1, 4)),)),
                         Sample((normal(rng, dim(rng, 1, 3), dim(rng, 1, 3)),)),
                         Sample((3 * normal(rng, 2, dim(rng, 1, 3), 2),), note="tails")],
    torch_ref=lambda torch, x: torch.erf(x),
)
