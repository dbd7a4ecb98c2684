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

from ..core import attr_kinds as K
from ..core.backend import is_cupy, namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, bilinear_jvp, elementwise_unary, register
from ..core.shape import Shape, broadcast_shapes
from .array_api import contiguous, permute_dims
from .samples import dim, normal

# ---------------------------------------------------------------------------------------------
# permute(x, perm): out[i_0, ..., i_{k-1}] = x[j] with j[perm[a]] = i_a


def check_perm(op: str, perm: Any, ndim: int) -> tuple[int, ...]:
    """``perm`` as a tuple of ints, checked to be a permutation of ``range(ndim)``."""
    if type(perm) is tuple and len(perm) == ndim and all(type(a) is int for a in perm) \
            and sorted(perm) == list(range(ndim)):
        return perm  # (the per-op path: already a tuple of ints)
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
    lambda x, perm: contiguous(permute_dims(x, tuple(perm))),
    attrs=("perm",), attr_kinds={"perm": K.PERM},
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
    "matmul_nd", ("a", "b"), _matmul_nd_infer, lambda a, b: a @ b,
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
    # On the host, math.erf (the C library's erf) entry by entry; NumPy has no erf of its own.
    # Computing in float64 and rounding once keeps float32 results within half an ulp of the
    # true value. On CuPy, cupyx's erf kernel; on any other device namespace, the same
    # algorithm as the C library's (fdlibm) written with array operations.
    xp = namespace_of(x)
    if xp is np:
        arr = np.asarray(x)
        return np.asarray(_ERF(arr.astype(np.float64)), dtype=np.float64).astype(arr.dtype)
    if is_cupy(xp):
        from cupyx.scipy.special import erf  # type: ignore[import-not-found]

        return erf(x.astype(np.float64)).astype(x.dtype)
    return erf_array(x.astype(np.float64)).astype(x.dtype)


# fdlibm's erf (Sun Microsystems, 1993; the C library's erf is this algorithm): rational
# approximations on |x| < 0.84375, [0.84375, 1.25) and [1.25, 6), and +-1 beyond. The
# polynomials are evaluated in the grouped order of glibc's implementation (pairs, then powers
# of the argument), which is what makes the results agree with math.erf bit for bit; exp is
# the namespace's, so entries in [1.25, 6) can differ from the C library's in the last bit
# where the two exps do.
_ERX = 8.45062911510467529297e-01
_EFX = 1.28379167095512586316e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)
# |x| below this (high word 0x4006DB6E, about 1/0.35) uses (_RA, _SA), else (_RB, _SB).
_TAIL_SPLIT = float(np.array(0x4006DB6E00000000, dtype=np.uint64).view(np.float64))


def _grouped_poly(powers: tuple[Any, ...], z: Any, coefs: tuple[float, ...]) -> Any:
    """sum c_k z^k as (c0 + z c1) + z^2 (c2 + z c3) + z^4 (c4 + z c5) + ..., added left to
    right (a lone last coefficient times its power); ``powers`` is (z^2, z^4, z^6, z^8)."""
    total = coefs[0] + z * coefs[1]
    for k in range(2, len(coefs), 2):
        term = coefs[k] if k + 1 == len(coefs) else coefs[k] + z * coefs[k + 1]
        total = total + powers[k // 2 - 1] * term
    return total


def _powers(z: Any) -> tuple[Any, ...]:
    z2 = z * z
    z4 = z2 * z2
    return z2, z4, z4 * z2, z4 * z4


def erf_array(x: Any) -> Any:
    """erf of a float64 array of any namespace (fdlibm's algorithm with the namespace's exp)."""
    with np.errstate(all="ignore"):  # every branch is evaluated everywhere, then selected
        return _erf_branches(namespace_of(x), x)


def _erf_branches(xp: Any, x: Any) -> Any:
    a = xp.abs(x)
    negative = x < 0
    # |x| < 0.84375: x + x R(x^2)/S(x^2); below 2**-28, x + efx x (scaled below the normals).
    z = x * x
    zp = _powers(z)
    small = x + x * (_grouped_poly(zp, z, _PP) / _grouped_poly(zp, z, _QQ))
    tiny = xp.where(a < 2.0 ** -1022, 0.0625 * (16.0 * x + (16.0 * _EFX) * x), x + _EFX * x)
    small = xp.where(a < 2.0 ** -28, tiny, small)
    # 0.84375 <= |x| < 1.25: +-(erx + P(s)/Q(s)), s = |x| - 1.
    s = a - 1.0
    sp = _powers(s)
    pq = _grouped_poly(sp, s, _PA) / _grouped_poly(sp, s, _QA)
    mid = xp.where(negative, -_ERX - pq, _ERX + pq)
    # 1.25 <= |x| < 6: +-(1 - exp(-z^2 - 0.5625) exp((z - |x|)(z + |x|) + R/S) / |x|), with z
    # |x| cut to its high 32 bits and R, S rational in 1/x^2.
    t = 1.0 / (a * a)
    tp = _powers(t)
    ratio = xp.where(a < _TAIL_SPLIT, _grouped_poly(tp, t, _RA) / _grouped_poly(tp, t, _SA),
                     _grouped_poly(tp, t, _RB) / _grouped_poly(tp, t, _SB))
    zc = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    r = xp.exp(-zc * zc - 0.5625) * xp.exp((zc - a) * (zc + a) + ratio)
    q = r / a
    tail = xp.where(negative, q - 1.0, 1.0 - q)
    out = xp.where(a < 6.0, tail, xp.where(negative, -1.0, 1.0))
    out = xp.where(a < 1.25, mid, out)
    out = xp.where(a < 0.84375, small, out)
    return xp.where(x != x, x, out)


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
