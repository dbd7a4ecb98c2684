"""Layout primitives: reshape, flatten, transposes and permutes, broadcast_to and sum_to.

All are linear, so their JVP is the op applied to the tangent; each VJP is the adjoint layout op.
``broadcast_to`` and ``sum_to`` are each other's adjoints; ``sum_to`` is also where every
broadcasting op's cotangent is reduced back to its input's shape.
"""

from __future__ import annotations

from typing import Any

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, arity_error, register
from ..core.shape import Shape, as_shape, can_broadcast_to, size
from .array_api import asum, permute_dims, reshape, swapaxes
from .samples import normal


def _reshape_infer(shape: Shape, shape_to: Any = None, *, op: str = "reshape") -> Shape:
    target = as_shape(op, shape_to)
    if size(target) != size(shape):
        raise ShapeError(f"{op}: cannot reshape {shape} ({size(shape)} entries) to {target} "
                         f"({size(target)} entries)")
    return target


register(Primitive(
    "reshape", ("x",), lambda s, shape: _reshape_infer(s, shape),
    reshape, attrs=("shape",), attr_kinds={"shape": K.SHAPE},
    vjp=lambda ops, g, xs, out, shape: (ops.reshape(g, shape=xs[0].shape),), linear=True,
    semantics="Same entries in row-major order, new shape; sizes must be equal (ShapeError "
              "otherwise). VJP: reshape back.",
    samples=lambda rng: [Sample((normal(rng, 2, 6),), {"shape": (3, 4)}),
                         Sample((normal(rng, 6),), {"shape": (1, 2, 3)})],
    torch_ref=lambda torch, x, shape: x.reshape(shape),
    error_inputs=[ErrorInput(((2, 3),), {"shape": (4, 2)}, ShapeError,
                             r"cannot reshape \(2, 3\) \(6 entries\) to \(4, 2\)"),
                  ErrorInput(((2, 3),), {"shape": (3, -2)}, ShapeError,
                             r"shape (entries )?must be .*non-negative ints")],
))

register(Primitive(
    "flatten", ("x",), lambda s: (size(s),), lambda x: reshape(x, (-1,)),
    vjp=lambda ops, g, xs, out: (ops.reshape(g, shape=xs[0].shape),), linear=True,
    semantics="Row-major flatten to a vector of all entries (torch.flatten, start_dim=0).",
    samples=lambda rng: [Sample((normal(rng, 2, 3, 2),)), Sample((normal(rng, 4),))],
    torch_ref=lambda torch, x: torch.flatten(x),
    error_inputs=[arity_error(("x",))],
))


def _perm_infer(op: str, ndim: int, perm: tuple[int, ...]) -> Any:
    def infer(s: Shape) -> Shape:
        if len(s) != ndim:
            raise ShapeError(f"{op}: expected a {ndim}-D tensor, found shape {s}")
        return tuple(s[p] for p in perm)

    return infer


def _permutation(name: str, perm: tuple[int, ...], inverse: str, torch_perm: str) -> None:
    register(Primitive(
        name, ("x",), _perm_infer(name, len(perm), perm),
        lambda x: permute_dims(x, perm),
        vjp=lambda ops, g, xs, out: (getattr(ops, inverse)(g),), linear=True,
        semantics=f"Permute axes {perm} (PyTorch: {torch_perm}). VJP: the inverse permutation.",
        samples=lambda rng: [Sample((normal(rng, *range(2, 2 + len(perm))),))],
        torch_ref=lambda torch, x: x.permute(*perm),
        error_inputs=[ErrorInput(((2,) * (len(perm) + 1),), {}, ShapeError,
                                 f"expected a {len(perm)}-D tensor")],
    ))


_permutation("transpose2d", (1, 0), "transpose2d", "x.t()")
_permutation("transpose3d_first_to_last", (1, 2, 0), "transpose3d_last_to_first",
             "x.permute(1, 2, 0): (a,b,c) -> (b,c,a)")
_permutation("transpose3d_last_to_first", (2, 0, 1), "transpose3d_first_to_last",
             "x.permute(2, 0, 1): (a,b,c) -> (c,a,b)")
_permutation("transpose3d_last_two", (0, 2, 1), "transpose3d_last_two",
             "x.transpose(1, 2): (a,b,c) -> (a,c,b)")


def _swap_infer(s: Shape, depth: int) -> Shape:
    if not isinstance(depth, int) or not 0 <= depth < len(s) - 1:
        raise ShapeError(f"swap_adjacent_at_depth: depth {depth!r} needs axes depth and depth+1 "
                         f"in shape {s} (0 <= depth < {len(s) - 1})")
    out = list(s)
    out[depth], out[depth + 1] = out[depth + 1], out[depth]
    return tuple(out)


register(Primitive(
    "swap_adjacent_at_depth", ("x",), _swap_infer,
    lambda x, depth: swapaxes(x, depth, depth + 1), attrs=("depth",),
    attr_kinds={"depth": K.NON_NEGATIVE_INT},
    vjp=lambda ops, g, xs, out, depth: (ops.swap_adjacent_at_depth(g, depth=depth),), linear=True,
    semantics="Swap axes depth and depth+1 (x.transpose(depth, depth+1)). Self-adjoint.",
    samples=lambda rng: [Sample((normal(rng, 2, 3, 4),), {"depth": 1}),
                         Sample((normal(rng, 2, 3),), {"depth": 0})],
    torch_ref=lambda torch, x, depth: x.transpose(depth, depth + 1),
    error_inputs=[ErrorInput(((2, 3),), {"depth": 1}, ShapeError,
                             r"depth 1 needs axes depth and depth\+1 in shape \(2, 3\)")],
))


def _broadcast_infer(s: Shape, shape: Any) -> Shape:
    target = as_shape("broadcast_to", shape)
    if not can_broadcast_to(s, target):
        raise ShapeError(f"broadcast_to: cannot broadcast {s} to {target}")
    return target


def _sum_to(x: Any, shape: Shape) -> Any:
    """Sum ``x`` over the axes that broadcasting from ``shape`` added or stretched."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1
    )
    out = asum(x, axes, True) if axes else x
    return reshape(out, shape)


def _sum_to_infer(s: Shape, shape: Any) -> Shape:
    target = as_shape("sum_to", shape)
    if not can_broadcast_to(target, s):
        raise ShapeError(f"sum_to: {target} does not broadcast to {s}, so {s} cannot be summed "
                         "to it")
    return target


register(Primitive(
    "broadcast_to", ("x",), _broadcast_infer,
    lambda x, shape: namespace_of(x).broadcast_to(x, shape), attrs=("shape",),
    attr_kinds={"shape": K.SHAPE},
    vjp=lambda ops, g, xs, out, shape: (ops.sum_to(g, shape=xs[0].shape),), linear=True,
    semantics="Broadcast to a shape by NumPy's rule (ShapeError otherwise). VJP: sum over the "
              "broadcast axes (sum_to).",
    samples=lambda rng: [Sample((normal(rng, 3),), {"shape": (2, 3)}),
                         Sample((normal(rng, 2, 1),), {"shape": (4, 2, 3)})],
    torch_ref=lambda torch, x, shape: x.expand(*shape),
    error_inputs=[ErrorInput(((3,),), {"shape": (2, 4)}, ShapeError,
                             r"cannot broadcast \(3,\) to \(2, 4\)")],
))

register(Primitive(
    "sum_to", ("x",), _sum_to_infer, _sum_to, attrs=("shape",), attr_kinds={"shape": K.SHAPE},
    vjp=lambda ops, g, xs, out, shape: (ops.broadcast_to(g, shape=xs[0].shape),), linear=True,
    semantics="Sum x down to a shape that broadcasts to x's (the adjoint of broadcast_to; how "
              "broadcast cotangents are reduced).",
    samples=lambda rng: [Sample((normal(rng, 2, 3),), {"shape": (3,)}),
                         Sample((normal(rng, 4, 2, 3),), {"shape": (2, 1)})],
    torch_ref=lambda torch, x, shape: _torch_sum_to(x, shape),
    error_inputs=[ErrorInput(((2, 3),), {"shape": (4,)}, ShapeError,
                             r"\(4,\) does not broadcast to \(2, 3\)")],
))


def _torch_sum_to(x: Any, shape: Shape) -> Any:
    # torch's sum(dim=()) sums everything, so drop the leading axes one explicit dim at a time.
    while x.dim() > len(shape):
        x = x.sum(dim=0)
    return x.sum_to_size(*shape) if shape else x
