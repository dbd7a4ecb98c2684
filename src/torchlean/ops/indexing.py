"""Indexing primitives: gathers, scatter-adds, concatenation and slicing along axis 0.

Every op here is linear in its float inputs (indices, starts and lengths are static attributes),
so each JVP is the op applied to the tangents and each VJP is the adjoint op:

- ``gather_scalar`` / ``gather_row`` (Fin-style, index checked when recorded) are adjoint to
  ``scatter_add_vec`` / ``scatter_add_row`` into zeros, and vice versa;
- ``gather_vec_nat`` / ``gather_rows_nat`` (Nat-style, out-of-range reads 0) are adjoint to
  ``scatter_add_nat``, which adds rows at the in-range indices (repeated indices accumulate);
- ``concat_vectors`` / ``concat_dim0`` are adjoint to two ``slice_range0`` calls, and
  ``slice_range0`` is adjoint to ``pad_range0`` (place a block inside zeros along axis 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, device_constant, register
from ..core.shape import Shape
from .array_api import copy, reshape, take0
from .samples import dim, normal


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _require_ndim(op: str, name: str, s: Shape, ndim: int) -> None:
    if len(s) != ndim:
        raise ShapeError(f"{op}: {name} must be {ndim}-D, found shape {s}")


def _fin_index(op: str, i: Any, n: int, what: str) -> int:
    """A Fin-style index: an int with 0 <= i < n, else ShapeError."""
    if not _is_int(i):
        raise ShapeError(f"{op}: index must be an int, found {i!r}")
    if not 0 <= i < n:
        raise ShapeError(f"{op}: index {i} out of range for {what} {n} (need 0 <= i < {n})")
    return int(i)


def _nat_index(op: str, i: Any) -> int:
    """A Nat-style index: any int >= 0 (out of range is allowed and reads 0)."""
    if not _is_int(i) or i < 0:
        raise ShapeError(f"{op}: index must be a non-negative int (Nat), found {i!r}")
    return int(i)


def _index_array(op: str, idx: Any) -> np.ndarray:
    """Nat-style index attribute as an int64 array (an int, a sequence or an int array)."""
    arr = np.asarray(idx)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ShapeError(f"{op}: indices must be ints, found dtype {arr.dtype}")
    if (arr < 0).any():
        raise ShapeError(f"{op}: indices must be non-negative (Nat); found {int(arr.min())}")
    return arr.astype(np.int64, copy=False)


# ---------------------------------------------------------------------------------------------
# Fin-style gathers and the scatter-adds that are their adjoints.


def _gather_scalar_infer(x: Shape, i: Any) -> Shape:
    _require_ndim("gather_scalar", "x", x, 1)
    _fin_index("gather_scalar", i, x[0], "length")
    return ()


def _gather_row_infer(x: Shape, i: Any) -> Shape:
    _require_ndim("gather_row", "x", x, 2)
    _fin_index("gather_row", i, x[0], "rows")
    return x[1:]


def _scatter_vec_infer(x: Shape, v: Shape, i: Any) -> Shape:
    _require_ndim("scatter_add_vec", "x", x, 1)
    if v != ():
        raise ShapeError(f"scatter_add_vec: v must be a scalar (), found shape {v} (x: {x})")
    _fin_index("scatter_add_vec", i, x[0], "length")
    return x


def _scatter_row_infer(x: Shape, v: Shape, i: Any) -> Shape:
    _require_ndim("scatter_add_row", "x", x, 2)
    if v != x[1:]:
        raise ShapeError(f"scatter_add_row: v must have shape {x[1:]} (a row of x {x}), "
                         f"found {v}")
    _fin_index("scatter_add_row", i, x[0], "rows")
    return x


def _row(x: Any, i: int) -> Any:
    # x[i, ...] is a view with the row's shape (a 0-d array for a vector), never a NumPy scalar.
    return copy(x[i, ...])


def _scatter_add(x: Any, v: Any, i: int) -> Any:
    out = copy(x)
    out[i, ...] += v
    return out


register(Primitive(
    "gather_scalar", ("x",), _gather_scalar_infer, _row, attrs=("i",),
    attr_kinds={"i": K.NON_NEGATIVE_INT}, linear=True,
    vjp=lambda ops, g, xs, out, i: (ops.scatter_add_vec(ops.zeros_like(xs[0]), g, i=i),),
    semantics="x[i] for a vector x and a Fin index 0 <= i < n (ShapeError otherwise, when "
              "recorded). VJP: g scattered into zeros at i.",
    samples=lambda rng: [Sample((normal(rng, 5),), {"i": 3}), Sample((normal(rng, 1),), {"i": 0})],
    torch_ref=lambda torch, x, i: x[i],
    error_inputs=[ErrorInput(((3,),), {"i": 3}, ShapeError,
                             r"index 3 out of range for length 3 \(need 0 <= i < 3\)"),
                  ErrorInput(((2, 3),), {"i": 0}, ShapeError, r"x must be 1-D, found shape"),
                  ErrorInput(((3,),), {"i": 1.0}, ShapeError, "i must be a non-negative int.*1.0")],
))

register(Primitive(
    "gather_row", ("x",), _gather_row_infer, _row, attrs=("i",),
    attr_kinds={"i": K.NON_NEGATIVE_INT}, linear=True,
    vjp=lambda ops, g, xs, out, i: (ops.scatter_add_row(ops.zeros_like(xs[0]), g, i=i),),
    semantics="Row x[i, :] of a matrix for a Fin index 0 <= i < rows (ShapeError otherwise). "
              "VJP: g scattered into a zero matrix at row i.",
    samples=lambda rng: [Sample((normal(rng, 4, 3),), {"i": 2}),
                         Sample((normal(rng, 1, 5),), {"i": 0})],
    torch_ref=lambda torch, x, i: x[i],
    error_inputs=[ErrorInput(((2, 3),), {"i": -1}, ShapeError, "i must be a non-negative int.*-1"),
                  ErrorInput(((3,),), {"i": 0}, ShapeError, "x must be 2-D")],
))

register(Primitive(
    "scatter_add_vec", ("x", "v"), _scatter_vec_infer, _scatter_add, attrs=("i",),
    attr_kinds={"i": K.NON_NEGATIVE_INT}, linear=True,
    vjp=lambda ops, g, xs, out, i: (g, ops.gather_scalar(g, i=i)),
    semantics="A copy of vector x with x[i] += v (v a scalar, i a Fin index). VJP: (g, g[i]).",
    samples=lambda rng: [Sample((normal(rng, 5), normal(rng)), {"i": 1})],
    torch_ref=lambda torch, x, v, i: x.index_add(0, torch.tensor([i]), v.reshape(1)),
    error_inputs=[ErrorInput(((3,), (2,)), {"i": 0}, ShapeError,
                             r"v must be a scalar \(\), found shape \(2,\)"),
                  ErrorInput(((3,), ()), {"i": 5}, ShapeError, "index 5 out of range")],
))

register(Primitive(
    "scatter_add_row", ("x", "v"), _scatter_row_infer, _scatter_add, attrs=("i",),
    attr_kinds={"i": K.NON_NEGATIVE_INT}, linear=True,
    vjp=lambda ops, g, xs, out, i: (g, ops.gather_row(g, i=i)),
    semantics="A copy of matrix x with x[i, :] += v (v a row, i a Fin index). "
              "VJP: (g, g[i, :]).",
    samples=lambda rng: [Sample((normal(rng, 3, 4), normal(rng, 4)), {"i": 2})],
    torch_ref=lambda torch, x, v, i: x.index_add(0, torch.tensor([i]), v.reshape(1, -1)),
    error_inputs=[ErrorInput(((2, 3), (2,)), {"i": 0}, ShapeError,
                             r"v must have shape \(3,\) \(a row of x \(2, 3\)\), found \(2,\)")],
))

# ---------------------------------------------------------------------------------------------
# Nat-style gathers: out-of-range reads 0 and receives nothing; repeats accumulate.


def _gather_nat_scalar_infer(x: Shape, i: Any) -> Shape:
    _require_ndim("gather_scalar_nat", "x", x, 1)
    _nat_index("gather_scalar_nat", i)
    return ()


def _gather_scalar_nat(x: Any, i: int) -> Any:
    if i < x.shape[0]:
        return copy(x[i, ...])
    return namespace_of(x).zeros((), dtype=x.dtype)


def _gather_scalar_nat_vjp(ops: Any, g: Any, xs: Any, out: Any, i: int) -> tuple[Any]:
    x = xs[0]
    if i >= x.shape[0]:
        return (None,)  # an out-of-range read is the constant 0: x receives nothing
    return (ops.scatter_add_vec(ops.zeros_like(x), g, i=i),)


def _gather_nat_infer(op: str, ndim: int) -> Any:
    def infer(x: Shape, idx: Any) -> Shape:
        _require_ndim(op, "x", x, ndim)
        return _index_array(op, idx).shape + x[1:]

    return infer


def _gather_nat(x: Any, idx: Any) -> Any:
    """x[idx] along axis 0, with zeros (rows of zeros) where idx >= len(x)."""
    xp = namespace_of(x)
    index = np.asarray(idx, dtype=np.int64)
    n = x.shape[0]
    if n == 0:
        return xp.zeros(index.shape + x.shape[1:], dtype=x.dtype)
    flat = index.reshape(-1)
    # The indices are a static attribute: clipped and masked on the host, uploaded once.
    safe = device_constant(idx, xp, lambda _: np.where(flat < n, flat, 0), f"gather {n}")
    out = take0(x, safe)  # a gather copies; never a NumPy scalar
    valid = flat < n
    if not valid.all():
        # On a device the out-of-range rows are zeroed through their integer positions: CuPy's
        # boolean-mask assignment reads the mask's true count back to the host (a
        # synchronisation, which also makes a CUDA graph capture of the step fail).
        invalid = (lambda _: ~valid) if xp is np else (lambda _: np.flatnonzero(~valid))
        out[device_constant(idx, xp, invalid, f"invalid {n}")] = 0
    return reshape(out, index.shape + x.shape[1:])


def _scatter_nat_infer(g: Shape, idx: Any, n: Any) -> Shape:
    index = _index_array("scatter_add_nat", idx)
    if not _is_int(n) or n < 0:
        raise ShapeError(f"scatter_add_nat: n must be a non-negative int, found {n!r}")
    k = len(index.shape)
    if g[:k] != index.shape or len(g) - k > 1:
        raise ShapeError(f"scatter_add_nat: values must have shape idx.shape {index.shape} "
                         f"followed by at most one row axis, found {g}")
    return (int(n),) + g[k:]


def _scatter_nat(g: Any, idx: Any, n: int) -> Any:
    """Zeros of shape (n, *row), with g's rows added at the in-range indices (repeats add up)."""
    xp = namespace_of(g)
    index = np.asarray(idx, dtype=np.int64)
    row = g.shape[index.ndim:]
    out = xp.zeros((n,) + row, dtype=g.dtype)
    flat = index.reshape(-1)
    rows = g.reshape((flat.size,) + row)
    valid = flat < n
    if xp is np:
        np.add.at(out, flat[valid], rows[valid])
        return out
    # On a device: the in-range positions and their targets, uploaded once per attribute.
    keep = device_constant(idx, xp, lambda _: np.flatnonzero(valid), f"keep {n}")
    target = device_constant(idx, xp, lambda _: flat[valid], f"target {n}")
    xp.add.at(out, target, rows[keep])
    return out


def _scatter_nat_vjp(ops: Any, g: Any, xs: Any, out: Any, idx: Any, n: int) -> tuple[Any]:
    gather = ops.gather_vec_nat if len(g.shape) == 1 else ops.gather_rows_nat
    return (gather(g, idx=idx),)


def _idx_samples(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """In-range indices with at least one repeat (so scatter-add accumulation is exercised)."""
    idx = rng.integers(0, n, size=k)
    if k >= 2:
        idx[-1] = idx[0]
    return idx


def _gather_vec_samples(rng: np.random.Generator) -> list[Sample]:
    n, k = dim(rng, 2, 6), dim(rng, 2, 5)
    return [
        Sample((normal(rng, n),), {"idx": _idx_samples(rng, n, k)}, note="repeated index"),
        Sample((normal(rng, 4),), {"idx": [0, 7, 3, 4, 0]}, note="out of range"),
        Sample((normal(rng, 3),), {"idx": 2}, note="int index"),
    ]


def _gather_rows_samples(rng: np.random.Generator) -> list[Sample]:
    n, c, k = dim(rng, 2, 5), dim(rng, 1, 5), dim(rng, 2, 5)
    return [
        Sample((normal(rng, n, c),), {"idx": _idx_samples(rng, n, k)}, note="repeated index"),
        Sample((normal(rng, 3, 2),), {"idx": np.array([5, 1, 3, 1])}, note="out of range"),
    ]


register(Primitive(
    "gather_scalar_nat", ("x",), _gather_nat_scalar_infer, _gather_scalar_nat, attrs=("i",),
    attr_kinds={"i": K.NON_NEGATIVE_INT},
    linear=True, vjp=_gather_scalar_nat_vjp,
    semantics="x[i] for a vector and a Nat index i >= 0; i >= n reads 0 and x receives no "
              "gradient (PyTorch would raise: an intended difference).",
    samples=lambda rng: [Sample((normal(rng, 4),), {"i": 2}),
                         Sample((normal(rng, 3),), {"i": 3}, note="out of range")],
    torch_ref=lambda torch, x, i: x[i],
    error_inputs=[ErrorInput(((3,),), {"i": -1}, ShapeError,
                             "i must be a non-negative int, found -1")],
))

def _gather_nat_vjp(ops: Any, g: Any, xs: Any, out: Any, idx: Any) -> tuple[Any]:
    """Scatter-add g back at the in-range indices (repeats accumulate, out of range drops)."""
    return (ops.scatter_add_nat(g, idx=idx, n=xs[0].shape[0]),)


register(Primitive(
    "gather_vec_nat", ("x",), _gather_nat_infer("gather_vec_nat", 1), _gather_nat,
    attrs=("idx",), attr_kinds={"idx": K.NAT_INDICES}, linear=True,
    vjp=_gather_nat_vjp,
    semantics="x[idx] for a vector x and static Nat indices idx (an int, sequence or int array; "
              "output shape idx.shape). Out-of-range indices read 0 and receive nothing; "
              "repeated indices accumulate their gradients (scatter-add).",
    samples=_gather_vec_samples,
    torch_ref=lambda torch, x, idx: x[torch.as_tensor(np.asarray(idx))],
    error_inputs=[ErrorInput(((3,),), {"idx": [0, -2]}, ShapeError,
                             r"idx must be non-negative int indices, found \[0, -2\]"),
                  ErrorInput(((3,),), {"idx": [0.5]}, ShapeError,
                             "idx must be non-negative int indices")],
))

register(Primitive(
    "gather_rows_nat", ("x",), _gather_nat_infer("gather_rows_nat", 2), _gather_nat,
    attrs=("idx",), attr_kinds={"idx": K.NAT_INDICES}, linear=True,
    vjp=_gather_nat_vjp,
    semantics="Rows x[idx, :] of a matrix for static Nat indices idx (output idx.shape + "
              "(cols,)). Out-of-range indices read zero rows and receive nothing; repeated "
              "indices accumulate (scatter-add).",
    samples=_gather_rows_samples,
    torch_ref=lambda torch, x, idx: x[torch.as_tensor(np.asarray(idx))],
    error_inputs=[ErrorInput(((3,),), {"idx": [0]}, ShapeError, "x must be 2-D, found shape")],
))


def _torch_scatter_nat(torch: Any, g: Any, idx: Any, n: int) -> Any:
    index = torch.as_tensor(np.asarray(idx, dtype=np.int64))
    keep = index < n
    rows = g.reshape((-1,) + tuple(g.shape[index.dim():]))[keep.reshape(-1)]
    out = torch.zeros((n,) + tuple(g.shape[index.dim():]), dtype=g.dtype)
    return out.index_add(0, index.reshape(-1)[keep.reshape(-1)], rows)


register(Primitive(
    "scatter_add_nat", ("g",), _scatter_nat_infer, _scatter_nat, attrs=("idx", "n"),
    attr_kinds={"idx": K.NAT_INDICES, "n": K.NON_NEGATIVE_INT},
    linear=True, vjp=_scatter_nat_vjp,
    semantics="Zeros of shape (n, *row) with g[j] added at row idx[j] for every in-range index "
              "(repeats accumulate, idx >= n dropped): the adjoint of gather_vec_nat (row = ()) "
              "and gather_rows_nat (row = (cols,)), whose VJP it is.",
    samples=lambda rng: [
        Sample((normal(rng, 4),), {"idx": np.array([1, 1, 6, 0]), "n": 3}),
        Sample((normal(rng, 3, 2),), {"idx": [2, 0, 2], "n": 4}),
    ],
    torch_ref=_torch_scatter_nat,
    error_inputs=[ErrorInput(((3,),), {"idx": [0, 1], "n": 2}, ShapeError,
                             r"values must have shape idx.shape \(2,\)"),
                  ErrorInput(((2,),), {"idx": [0, 1], "n": -1}, ShapeError,
                             "n must be a non-negative int, found -1")],
))

# ---------------------------------------------------------------------------------------------
# Concatenation and slicing along axis 0.


def _concat_vectors_infer(a: Shape, b: Shape) -> Shape:
    if len(a) != 1 or len(b) != 1:
        raise ShapeError(f"concat_vectors: both inputs must be vectors, found {a} and {b}")
    return (a[0] + b[0],)


def _concat_dim0_infer(a: Shape, b: Shape) -> Shape:
    if len(a) == 0 or len(b) == 0 or a[1:] != b[1:]:
        raise ShapeError(f"concat_dim0: shapes must agree after axis 0 and have an axis 0, "
                         f"found {a} and {b}")
    return (a[0] + b[0],) + a[1:]


def _concatenate(a: Any, b: Any) -> Any:
    return namespace_of(a).concat((a, b), axis=0)


def _concat_vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any, Any]:
    n, m = xs[0].shape[0], xs[1].shape[0]
    return (ops.slice_range0(g, start=0, length=n), ops.slice_range0(g, start=n, length=m))


register(Primitive(
    "concat_vectors", ("a", "b"), _concat_vectors_infer, _concatenate, linear=True,
    vjp=_concat_vjp,
    semantics="Concatenate two vectors (torch.cat((a, b))). VJP: the two slices of g.",
    samples=lambda rng: [Sample((normal(rng, dim(rng, 1, 5)), normal(rng, dim(rng, 1, 5))))],
    torch_ref=lambda torch, a, b: torch.cat((a, b)),
    error_inputs=[ErrorInput(((2, 3), (2,)), {}, ShapeError, "both inputs must be vectors")],
))

register(Primitive(
    "concat_dim0", ("a", "b"), _concat_dim0_infer, _concatenate, linear=True,
    vjp=_concat_vjp,
    semantics="Concatenate along axis 0; the other axes must agree (torch.cat(dim=0)). "
              "VJP: the two slices of g.",
    samples=lambda rng: [Sample((normal(rng, 2, 3), normal(rng, 1, 3))),
                         Sample((normal(rng, 2, 2, 2), normal(rng, 3, 2, 2))),
                         Sample((normal(rng, 3), normal(rng, 2)))],
    torch_ref=lambda torch, a, b: torch.cat((a, b), dim=0),
    error_inputs=[ErrorInput(((2, 3), (2, 4)), {}, ShapeError,
                             "shapes must agree after axis 0"),
                  ErrorInput(((), ()), {}, ShapeError, "have an axis 0")],
))


def _range_check(op: str, s: Shape, start: Any, length: Any) -> None:
    if len(s) == 0:
        raise ShapeError(f"{op}: needs a tensor with an axis 0, found shape {s}")
    if not _is_int(start) or not _is_int(length) or start < 0 or length < 0:
        raise ShapeError(f"{op}: start and length must be non-negative ints, found "
                         f"start={start!r}, length={length!r}")


def _slice_infer(s: Shape, start: Any, length: Any) -> Shape:
    _range_check("slice_range0", s, start, length)
    if start + length > s[0]:
        raise ShapeError(f"slice_range0: start + length = {start} + {length} exceeds axis 0 of "
                         f"shape {s}")
    return (int(length),) + s[1:]


def _pad_infer(s: Shape, start: Any, total: Any) -> Shape:
    _range_check("pad_range0", s, start, total)
    if start + s[0] > total:
        raise ShapeError(f"pad_range0: start + len = {start} + {s[0]} exceeds total {total} "
                         f"(shape {s})")
    return (int(total),) + s[1:]


def _pad(x: Any, start: int, total: int) -> Any:
    out = namespace_of(x).zeros((total,) + x.shape[1:], dtype=x.dtype)
    out[start:start + x.shape[0], ...] = x
    return out


register(Primitive(
    "slice_range0", ("x",), _slice_infer,
    lambda x, start, length: copy(x[start:start + length, ...]), attrs=("start", "length"),
    attr_kinds={"start": K.NON_NEGATIVE_INT, "length": K.NON_NEGATIVE_INT},
    linear=True,
    vjp=lambda ops, g, xs, out, start, length: (
        ops.pad_range0(g, start=start, total=xs[0].shape[0]),),
    semantics="x[start : start + length] along axis 0; start + length <= n (ShapeError "
              "otherwise). VJP: g placed at start inside zeros (pad_range0).",
    samples=lambda rng: [Sample((normal(rng, 5, 2),), {"start": 1, "length": 3}),
                         Sample((normal(rng, 4),), {"start": 0, "length": 4}),
                         Sample((normal(rng, 3),), {"start": 2, "length": 0})],
    torch_ref=lambda torch, x, start, length: x[start:start + length],
    error_inputs=[ErrorInput(((3,),), {"start": 2, "length": 2}, ShapeError,
                             r"start \+ length = 2 \+ 2 exceeds axis 0 of shape \(3,\)"),
                  ErrorInput(((3,),), {"start": -1, "length": 1}, ShapeError,
                             "start must be a non-negative int, found -1")],
))

register(Primitive(
    "pad_range0", ("x",), _pad_infer, _pad, attrs=("start", "total"),
    attr_kinds={"start": K.NON_NEGATIVE_INT, "total": K.NON_NEGATIVE_INT}, linear=True,
    vjp=lambda ops, g, xs, out, start, total: (
        ops.slice_range0(g, start=start, length=xs[0].shape[0]),),
    semantics="Zeros of length total along axis 0 with x placed at start (the adjoint of "
              "slice_range0). VJP: slice_range0.",
    samples=lambda rng: [Sample((normal(rng, 2, 3),), {"start": 1, "total": 4}),
                         Sample((normal(rng, 3),), {"start": 0, "total": 3})],
    torch_ref=lambda torch, x, start, total: torch.cat(
        (x.new_zeros((start,) + tuple(x.shape[1:])), x,
         x.new_zeros((total - start - x.shape[0],) + tuple(x.shape[1:])))),
    error_inputs=[ErrorInput(((3,),), {"start": 1, "total": 3}, ShapeError,
                             r"start \+ len = 1 \+ 3 exceeds total 3"),
                  ErrorInput(((),), {"start": 0, "total": 1}, ShapeError,
                             r"needs a tensor with an axis 0, found shape \(\)")],
))
