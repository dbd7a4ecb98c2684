"""Reference definitions of the indexing primitives (``torchlean.ops.indexing``).

Two index conventions, as in TorchLean:

- *Fin* indices (``gather_scalar``, ``gather_row``, ``scatter_add_vec``, ``scatter_add_row``): an
  int with 0 <= i < n; anything else is a ``ShapeError`` (raised by the shape rule, before any
  value is read).
- *Nat* indices (``*_nat``): any int >= 0, given as an int, a sequence or an int array (static
  attributes, never float inputs). An index >= n reads 0 (a row of zeros) and a scatter drops it;
  repeated indices in a scatter add up.

Concatenation, slicing and padding work along axis 0 with static starts and lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import IndexRangeError
from ._arrays import empty, prepare, sample_entry
from .defs import define
from .scalar import constant


def _zero(*arrays: np.ndarray) -> Any:
    """0 in the inputs' scalar type (the fill of out-of-range reads and padding)."""
    return constant(0, sample_entry(*arrays))


def _nat_indices(idx: Any) -> np.ndarray:
    """A Nat index attribute (int, sequence or int array) as an int array (0-d for an int)."""
    return np.asarray(idx, dtype=np.int64)


# --- Fin-style gathers and scatter-adds -------------------------------------------------------


@define("gather_scalar", rational=True)
def gather_scalar(x: Any, i: int) -> np.ndarray:
    """out = x[i], a scalar, for a vector x (n,) and a Fin index 0 <= i < n."""
    (x,) = prepare("gather_scalar", x, i=i)
    out = empty(())
    out[()] = x[i]
    return out


@define("gather_row", rational=True)
def gather_row(x: Any, i: int) -> np.ndarray:
    """out[j] = x[i, j] for a matrix x (rows, cols) and a Fin index 0 <= i < rows."""
    (x,) = prepare("gather_row", x, i=i)
    out = empty(x.shape[1:])
    for j in range(x.shape[1]):
        out[j] = x[i, j]
    return out


@define("scatter_add_vec", rational=True)
def scatter_add_vec(x: Any, v: Any, i: int) -> np.ndarray:
    """out[k] = x[k] + v if k == i else x[k], for a vector x, a scalar v, a Fin index i."""
    x, v = prepare("scatter_add_vec", x, v, i=i)
    out = empty(x.shape)
    for k in range(x.shape[0]):
        out[k] = x[k] + v[()] if k == i else x[k]
    return out


@define("scatter_add_row", rational=True)
def scatter_add_row(x: Any, v: Any, i: int) -> np.ndarray:
    """out[k, j] = x[k, j] + v[j] if k == i else x[k, j], for a matrix x, a row v, a Fin i."""
    x, v = prepare("scatter_add_row", x, v, i=i)
    out = empty(x.shape)
    for k, j in np.ndindex(x.shape):
        out[k, j] = x[k, j] + v[j] if k == i else x[k, j]
    return out


# --- Nat-style gathers and their scatter-add ------------------------------------------------


@define("gather_scalar_nat", rational=True)
def gather_scalar_nat(x: Any, i: int) -> np.ndarray:
    """out = x[i] if i < n else 0, for a vector x (n,) and a Nat index i >= 0."""
    (x,) = prepare("gather_scalar_nat", x, i=i)
    out = empty(())
    out[()] = x[i] if i < x.shape[0] else _zero(x)
    return out


@define("gather_vec_nat", rational=True)
def gather_vec_nat(x: Any, idx: Any) -> np.ndarray:
    """out[j] = x[idx[j]] if idx[j] < n else 0, for a vector x (n,); out has idx's shape.

    j runs over the indices of idx (a 0-d idx, a plain int, gives a scalar output).
    """
    (x,) = prepare("gather_vec_nat", x, idx=idx)
    index = _nat_indices(idx)
    n = x.shape[0]
    out = empty(index.shape)
    for j in np.ndindex(index.shape):
        k = int(index[j])
        out[j] = x[k] if k < n else _zero(x)
    return out


@define("gather_rows_nat", rational=True)
def gather_rows_nat(x: Any, idx: Any) -> np.ndarray:
    """out[j, c] = x[idx[j], c] if idx[j] < rows else 0, for a matrix x (rows, cols).

    j runs over the indices of idx, so out has shape idx.shape + (cols,).
    """
    (x,) = prepare("gather_rows_nat", x, idx=idx)
    index = _nat_indices(idx)
    rows, cols = x.shape
    out = empty(index.shape + (cols,))
    for j in np.ndindex(index.shape):
        k = int(index[j])
        for c in range(cols):
            out[j + (c,)] = x[k, c] if k < rows else _zero(x)
    return out


@define("scatter_add_nat", rational=True)
def scatter_add_nat(g: Any, idx: Any, n: int) -> np.ndarray:
    """out[r, ...] = sum of g[j, ...] over the j with idx[j] == r, for r = 0 .. n - 1.

    g has shape idx.shape + row with row = () or (cols,); out has shape (n,) + row. An index
    idx[j] >= n matches no r, so g[j] is dropped; a row no index hits is 0; repeated indices add
    up. This is the adjoint of gather_vec_nat / gather_rows_nat.
    """
    (g,) = prepare("scatter_add_nat", g, idx=idx, n=n)
    index = _nat_indices(idx)
    row = g.shape[index.ndim:]
    out = empty((n,) + row)
    for r in np.ndindex(out.shape):
        out[r] = _zero(g)
    for j in np.ndindex(index.shape):
        k = int(index[j])
        if k < n:
            for c in np.ndindex(row):
                out[(k,) + c] = out[(k,) + c] + g[j + c]
    return out


# --- Concatenation, slicing and padding along axis 0 -----------------------------------------


def _concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """out[k, ...] = a[k, ...] for k < len(a), else b[k - len(a), ...]."""
    n = a.shape[0]
    out = empty((n + b.shape[0],) + a.shape[1:])
    for index in np.ndindex(out.shape):
        k, rest = index[0], index[1:]
        out[index] = a[(k,) + rest] if k < n else b[(k - n,) + rest]
    return out


@define("concat_vectors", rational=True)
def concat_vectors(a: Any, b: Any) -> np.ndarray:
    """out[k] = a[k] for k < len(a), else b[k - len(a)]: two vectors joined, a first."""
    a, b = prepare("concat_vectors", a, b)
    return _concat(a, b)


@define("concat_dim0", rational=True)
def concat_dim0(a: Any, b: Any) -> np.ndarray:
    """out[k, ...] = a[k, ...] for k < len(a), else b[k - len(a), ...] (other axes must agree)."""
    a, b = prepare("concat_dim0", a, b)
    return _concat(a, b)


@define("slice_range0", rational=True)
def slice_range0(x: Any, start: int, length: int) -> np.ndarray:
    """out[k, ...] = x[start + k, ...] for 0 <= k < length; start + length <= len(x)."""
    (x,) = prepare("slice_range0", x, start=start, length=length)
    out = empty((length,) + x.shape[1:])
    for index in np.ndindex(out.shape):
        out[index] = x[(start + index[0],) + index[1:]]
    return out


@define("pad_range0", rational=True)
def pad_range0(x: Any, start: int, total: int) -> np.ndarray:
    """out[k, ...] = x[k - start, ...] if start <= k < start + len(x) else 0, for k < total.

    x is placed at ``start`` inside zeros of length ``total`` along axis 0 (start + len(x) must
    not exceed total): the adjoint of slice_range0.
    """
    (x,) = prepare("pad_range0", x, start=start, total=total)
    n = x.shape[0]
    out = empty((total,) + x.shape[1:])
    for index in np.ndindex(out.shape):
        k, rest = index[0], index[1:]
        out[index] = x[(k - start,) + rest] if start <= k < start + n else _zero(x)
    return out


# --- gathers with run-time ids (``torchlean.ops.embedding``) ---------------------------------


def _row_id(op: str, value: Any, rows: int) -> int:
    """An id read at run time: an integer-valued number in [0, rows), else IndexRangeError."""
    k = int(value)
    if k != value or not 0 <= k < rows:
        raise IndexRangeError(f"{op}: ids must be integers in [0, {rows}), found {value}")
    return k


@define("embedding", rational=True)
def embedding(weight: Any, ids: Any) -> np.ndarray:
    """out[j, c] = weight[ids[j], c] for a table weight (rows, dim) and ids of any shape.

    The ids are numbers read at run time; each must be an integer in [0, rows) (anything else
    is an IndexRangeError, never a row of zeros). out has shape ids.shape + (dim,).
    """
    weight, ids = prepare("embedding", weight, ids)
    rows, cols = weight.shape
    out = empty(ids.shape + (cols,))
    for j in np.ndindex(ids.shape):
        k = _row_id("embedding", ids[j], rows)
        for c in range(cols):
            out[j + (c,)] = weight[k, c]
    return out


@define("embedding_scatter", rational=True)
def embedding_scatter(g: Any, ids: Any, rows: int) -> np.ndarray:
    """out[r, c] = sum of g[j, c] over the j with ids[j] == r, for r = 0 .. rows - 1.

    g has shape ids.shape + (dim,); every id must be an integer in [0, rows). A row no id hits
    is 0; repeated ids add up. This is the adjoint of embedding.
    """
    g, ids = prepare("embedding_scatter", g, ids, rows=rows)
    out = empty((rows, g.shape[-1]))
    for r in np.ndindex(out.shape):
        out[r] = _zero(g)
    for j in np.ndindex(ids.shape):
        k = _row_id("embedding_scatter", ids[j], rows)
        for c in range(g.shape[-1]):
            out[k, c] = out[k, c] + g[j + (c,)]
    return out
