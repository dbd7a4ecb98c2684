"""Embedding lookups with run-time ids: ``embedding`` and its adjoint ``embedding_scatter``.

``embedding(weight, ids)`` reads rows ``weight[ids]``; ``ids`` is an *input* holding integer
class indices as integer-valued floats (as labels travel, see ``encoding.one_hot``), so one
compiled graph serves every batch of token ids. Unlike ``one_hot(ids) @ weight`` it gathers: a
NaN or inf in one row reaches only the lookups of that row, and an id outside ``[0, rows)``,
negative, non-integer or NaN is refused when the kernel runs (``IndexRangeError``), as torch
refuses it, never read as a zero row. The static-index gathers (``gather_rows_nat``) stay for
ids whose values are known when recorded.

Both ops are linear in their float operand and give the ids no cotangent (``index_inputs``):
the VJP of ``embedding`` is ``embedding_scatter`` (the upstream rows added at their ids,
repeats accumulating) and the VJP of ``embedding_scatter`` is ``embedding``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of, to_host
from ..core.errors import IndexRangeError, ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, register
from ..core.shape import Shape
from .array_api import astype, reshape, take0
from .samples import dim, normal


def checked_ids(op: str, ids: Any, rows: int) -> Any:
    """``ids`` flattened to an int64 array of its namespace, after checking on the run-time
    values that each is an integer in ``[0, rows)`` (``IndexRangeError`` naming how many are
    not, and the first). On a device the check reads one count back to the host."""
    xp = namespace_of(ids)
    flat = reshape(ids, (-1,))
    # NaN fails every comparison, so it is caught by ``flat != floor(flat)`` being true.
    ok = (flat >= 0) & (flat < rows) & (flat == xp.floor(flat))
    bad = int(to_host(xp.count_nonzero(~ok))) if flat.shape[0] else 0
    if bad:
        first = float(to_host(flat[xp.argmax(astype(~ok, xp.int8))]))
        raise IndexRangeError(f"{op}: ids must be integers in [0, {rows}) (the table's rows); "
                              f"{bad} of {flat.shape[0]} are not, the first is {first!r}")
    return astype(flat, xp.int64)


def _embedding_infer(weight: Shape, ids: Shape) -> Shape:
    if len(weight) != 2:
        raise ShapeError(f"embedding: weight must be 2-D (rows, dim), found shape {weight}")
    return tuple(ids) + weight[1:]


def _embedding(weight: Any, ids: Any) -> Any:
    index = checked_ids("embedding", ids, weight.shape[0])
    return reshape(take0(weight, index), tuple(ids.shape) + tuple(weight.shape[1:]))


def _scatter_infer(g: Shape, ids: Shape, rows: Any) -> Shape:
    k = len(ids)
    if len(g) != k + 1 or tuple(g[:k]) != tuple(ids):
        raise ShapeError(f"embedding_scatter: g must have shape ids.shape + (dim,) = "
                         f"{tuple(ids)} + (dim,), found {g}")
    return (int(rows), g[-1])


def _scatter(g: Any, ids: Any, rows: int) -> Any:
    xp = namespace_of(g)
    index = checked_ids("embedding_scatter", ids, rows)
    width = g.shape[-1]
    flat = reshape(g, (index.shape[0], width))  # explicit sizes: -1 is ambiguous when dim is 0
    if xp is np:
        # One bincount over (row, column) cells: several times faster than ufunc add.at, and
        # it sums in float64 (then rounds once to g's dtype). Repeated ids accumulate.
        cells = (index[:, None] * width + np.arange(width)).reshape(-1)
        sums = np.bincount(cells, weights=flat.reshape(-1), minlength=rows * width)
        return sums.reshape(rows, width).astype(g.dtype, copy=False)
    out = xp.zeros((rows, width), dtype=g.dtype)
    xp.add.at(out, index, flat)  # repeated ids accumulate
    return out


def _embedding_jvp(ops: Any, tangents: Any, inputs: Any, out: Any) -> Any:
    tw = tangents[0]
    return None if tw is None else ops.embedding(tw, inputs[1])


def _scatter_jvp(ops: Any, tangents: Any, inputs: Any, out: Any, rows: int) -> Any:
    tg = tangents[0]
    return None if tg is None else ops.embedding_scatter(tg, inputs[1], rows=rows)


def _ids(rng: np.random.Generator, rows: int, *shape: int) -> np.ndarray:
    """In-range ids as integer-valued float64, with a repeat (scatter-add accumulation)."""
    ids = rng.integers(0, rows, size=shape).astype(np.float64)
    if ids.size >= 2:
        ids.reshape(-1)[-1] = ids.reshape(-1)[0]
    return ids


def _embedding_samples(rng: np.random.Generator) -> list[Sample]:
    rows, width = dim(rng, 2, 6), dim(rng, 1, 4)
    return [
        Sample((normal(rng, rows, width), _ids(rng, rows, dim(rng, 2, 5))), note="repeated id"),
        Sample((normal(rng, 4, 3), _ids(rng, 4, 2, 3)), note="a batch of sequences"),
        Sample((normal(rng, 3, 2), np.array(2.0)), note="one id (0-d)"),
    ]


def _scatter_samples(rng: np.random.Generator) -> list[Sample]:
    rows, width, k = dim(rng, 2, 6), dim(rng, 1, 4), dim(rng, 2, 5)
    return [
        Sample((normal(rng, k, width), _ids(rng, rows, k)), {"rows": rows}, note="repeated id"),
        Sample((normal(rng, 2, 3, 2), _ids(rng, 5, 2, 3)), {"rows": 5}, note="2-D ids"),
    ]


def _torch_scatter(torch: Any, g: Any, ids: Any, rows: int) -> Any:
    out = torch.zeros((rows, g.shape[-1]), dtype=g.dtype)
    return out.index_add(0, ids.reshape(-1).long(), g.reshape(-1, g.shape[-1]))


_BAD_IDS = r"ids must be integers in \[0, 3\) \(the table's rows\)"

register(Primitive(
    "embedding", ("weight", "ids"), _embedding_infer, _embedding, index_inputs=("ids",),
    vjp=lambda ops, g, xs, out: (
        ops.embedding_scatter(g, xs[1], rows=xs[0].shape[0]), None),
    jvp=_embedding_jvp,
    semantics="Rows weight[ids] of a table (rows, dim) for run-time ids of any shape (output "
              "ids.shape + (dim,)), given as integer-valued floats. An id that is negative, "
              ">= rows, non-integer or NaN raises IndexRangeError when the kernel runs (torch "
              "raises too). The ids get no gradient; the table's VJP scatter-adds the upstream "
              "rows at their ids (embedding_scatter).",
    samples=_embedding_samples,
    torch_ref=lambda torch, weight, ids: torch.nn.functional.embedding(ids.long(), weight),
    error_inputs=[
        ErrorInput(((3,), (2,)), {}, ShapeError, r"weight must be 2-D \(rows, dim\)"),
        ErrorInput((np.zeros((3, 2)), np.array([0.0, 3.0])), {}, IndexRangeError,
                   _BAD_IDS + "; 1 of 2 are not, the first is 3.0", at_run=True),
        ErrorInput((np.zeros((3, 2)), np.array([-1.0, 1.0, 0.5])), {}, IndexRangeError,
                   _BAD_IDS + "; 2 of 3 are not, the first is -1.0", at_run=True),
        ErrorInput((np.zeros((3, 2)), np.array([np.nan])), {}, IndexRangeError,
                   _BAD_IDS + "; 1 of 1 are not, the first is nan", at_run=True),
    ],
))

register(Primitive(
    "embedding_scatter", ("g", "ids"), _scatter_infer, _scatter, attrs=("rows",),
    attr_kinds={"rows": K.NON_NEGATIVE_INT}, index_inputs=("ids",),
    vjp=lambda ops, g, xs, out, rows: (ops.embedding(g, xs[1]), None),
    jvp=_scatter_jvp,
    semantics="Zeros (rows, dim) with g[j] added at row ids[j] for every j (repeated ids add "
              "up): the adjoint of embedding, whose VJP it is. The ids are checked as embedding "
              "checks them (IndexRangeError at run time) and get no gradient.",
    samples=_scatter_samples,
    torch_ref=_torch_scatter,
    error_inputs=[
        ErrorInput(((2, 3), (3,)), {"rows": 4}, ShapeError,
                   r"g must have shape ids.shape \+ \(dim,\) = \(3,\) \+ \(dim,\)"),
        ErrorInput((np.zeros((2, 2)), np.array([0.0, 3.0])), {"rows": 3}, IndexRangeError,
                   "embedding_scatter: " + _BAD_IDS, at_run=True),
        ErrorInput(((2, 2), (2,)), {"rows": -1}, ShapeError,
                   "rows must be a non-negative int, found -1"),
    ],
))
