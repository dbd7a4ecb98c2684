"""Fast softmax over a short last axis (NumPy only; see ``ops.fast``).

The reference (``ops.reductions._softmax``) is ``e = exp(x - max(x)); e / sum(e)`` with NumPy's
reductions over the last axis, and its VJP ``y * (g - sum(g * y))`` with the same reduction.
NumPy reduces a short contiguous last axis row by row, one inner loop per row: on an
attention's scores (W5: 8 x 4 x 32 x 32, rows of 32) the max takes 55 us and the sum 27 us of a
115-147 us forward (PyTorch's fused kernel: 32-40 us). Here, for rows of at most ``SHORT``
entries and at least ``MIN_SIZE`` entries in all:

- the shift is the maximum of the *whole* array (one contiguous reduction, 2.6 us), not each
  row's (``exp_rows``): softmax does not depend on the shift, and no term can overflow. A row
  whose entries all lie far below that maximum would lose its terms to underflow, so where
  any row's sum falls below ``_FLOOR`` (every term of such a row is under ``_FLOOR`` itself,
  its largest over 60 below the shift in float32), or the maximum is not finite (an infinity
  or a NaN anywhere), the rows are shifted by their own maxima instead: a maximum over the
  *columns* of a transposed copy (``n`` contiguous vectors of one entry per row: 20-28 us
  with the copy, the copy most of it). Measured (one thread, CPU time, loaded 2-core Zen 4):
  W5's scores forward 67-74 -> 37-40 us. The larger shift rounds ``x - shift`` with the
  larger magnitude's ulp: a relative error of ``|x - shift|`` ulps at most in each term, under
  ``60 * 2**-24 = 4e-6`` in float32 where the global shift is taken;
- the row sums are one BLAS matrix-vector product with a vector of ones (9 us), and the VJP's
  ``sum(g * y)`` one ``einsum`` pass; those sums add in another order than NumPy's pairwise
  reduction, so results differ from the reference by rounding only (``registry.FAST_RTOL``,
  checked by ``torchlean verify``'s fast column and the tests);
- the division and the VJP's ``(g - s) y`` are the reference's operations, in place.

Longer rows (NumPy reduces those well), small inputs, other dtypes and device arrays run the
reference. Measured on the 2-core AMD EPYC (Zen 4), one thread, warm caches: W5's scores
forward 115 -> 66 us (row maxima), VJP 45 -> 23 us; (512, 64) 79 -> 62 and 33 -> 20 us.
``exp_rows`` serves the fast attention's softmax too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ..reductions import _softmax as reference
from ..reductions import _softmax_rule

# Rows longer than this keep NumPy's row reduction (at 1,000 entries a row it is the faster).
SHORT = 64
# Entries below which the extra calls cost what they save ((128, 10): 17 -> 23 us).
MIN_SIZE = 4096

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@contextmanager
def every_size() -> Iterator[None]:
    """Inside: the fast path runs at every size, so that small samples exercise it
    (``torchlean verify``'s fast column)."""
    global MIN_SIZE
    before, MIN_SIZE = MIN_SIZE, 0
    try:
        yield
    finally:
        MIN_SIZE = before


def _applies(x: Any) -> bool:
    return (type(x) is np.ndarray and x.dtype in _FLOATS and x.ndim >= 2
            and 0 < x.shape[-1] <= SHORT and x.size >= MIN_SIZE)


def _rows(x: Any) -> Any:
    """``x`` as a C-contiguous (rows, n) matrix (a view when it already is one)."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


# The smallest row sum of ``exp(x - max(all of x))`` for which the global shift is kept
# (``exp_rows``): exp(-60) in float32, exp(-575) in float64.
_FLOOR = {np.dtype(np.float32): 1e-26, np.dtype(np.float64): 1e-250}


def exp_rows(x2: Any) -> tuple[Any, Any]:
    """``e = exp(x2 - shift)`` (a new array) and its row sums, for a C-contiguous float matrix
    ``x2``: the shift is the maximum of all of ``x2`` where that keeps every row's sum at least
    ``_FLOOR``, else each row's own maximum (the module docstring; another float dtype always
    takes the rows' own)."""
    n = x2.shape[1]
    ones = np.ones(n, x2.dtype)
    floor = _FLOOR.get(x2.dtype)
    top = np.maximum.reduce(x2.reshape(-1)) if x2.size else 0
    if floor is not None and np.isfinite(top):
        e = x2 - top
        np.exp(e, out=e)
        r = e @ ones
        if r.min(initial=np.inf) >= floor:
            return e, r
    rows = np.maximum.reduce(np.ascontiguousarray(x2.T), axis=0)
    e = x2 - rows[:, None]
    np.exp(e, out=e)
    return e, e @ ones


def forward(x: Any) -> Any:
    """Fast ``softmax`` forward on the last axis."""
    if not _applies(x):
        return reference(x)
    e, r = exp_rows(_rows(x))
    e /= r[:, None]
    return e.reshape(x.shape)


def vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any]:
    """Fast ``softmax`` VJP ``(g - sum(g y)) y`` from the output ``y``."""
    if not _applies(out) or type(g) is not np.ndarray or g.dtype != out.dtype:
        return (_softmax_rule(ops, g, out),)
    y2 = _rows(out)
    g2 = _rows(g)
    d = g2 - np.einsum("ij,ij->i", g2, y2)[:, None]
    d *= y2
    return (d.reshape(out.shape),)


attach_fast("softmax", forward=forward, vjp=vjp)
