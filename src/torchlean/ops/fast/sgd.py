"""Plain SGD's update as fast kernels: ``p += (-lr) * g`` as one in-place BLAS axpy, and, for a
gradient that is one product ``G^T H`` (a linear layer's weight), ``p += (-lr) * G^T H`` as one
GEMM accumulating into ``p``, so that the gradient never exists.

The reference update is NumPy's product and add (``optim.SGD.apply_single``): two passes over
the parameter and a temporary as large. ``axpy`` makes one pass (``optim.fast_update`` calls it
for every plain SGD step under the fast kernels). ``gemm_step`` is called only from the
generated plan of a whole compiled SGD step (``engine.codegen.emit_sgd_step``): the weight
gradient's GEMM with ``alpha = -lr`` and ``beta = 1`` adds the update into ``p`` as it writes
its result, which saves the gradient's zeroing and the axpy's pass. Measured (W2 of ``torchlean
bench``: 784-512-512-10, batch 128; the hand-written NumPy step, one thread, CPU time,
interleaved in one process, 2-core Zen 3): 6.37 -> 6.05 ms and 5.80 -> 5.55 ms a step (4-5%).

Both round differently from the reference: OpenBLAS's axpy and its GEMM's ``beta = 1`` write-back
use fused multiply-adds (one rounding of ``p + (-lr) * g`` instead of two), and a GEMM whose
inner dimension (the batch) spans several blocks adds ``p`` in before the last block instead of
after the whole sum. Within one block, the GEMM's bits are the axpy's (measured: W2's parameters
equal bit for bit after 5 steps). The tests check both within ``registry.FAST_RTOL``.

SciPy provides the BLAS calls (``ops.fast.blas``: its own pool held at one thread); without
SciPy, or while that pool runs more threads, ``axpy`` declines and the caller runs the
reference (``gemm_step`` is never emitted then: ``engine.transforms.Compiled.sgd_step``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blas import scipy_blas, serial

# Below this many entries the f2py call costs more than the pass it saves.
MIN_SIZE = 4096


def axpy(p: Any, grad: Any, lr: float) -> bool:
    """``p += (-lr) * grad`` in place by BLAS axpy where the arrays allow it; returns False
    (nothing done) where the reference update must run."""
    if type(p) is not np.ndarray or type(grad) is not np.ndarray:
        return False
    dtype = p.dtype
    if (grad.dtype != dtype or p.size < MIN_SIZE or p.shape != grad.shape
            or not p.flags.c_contiguous or not p.flags.writeable
            or not grad.flags.c_contiguous):
        return False
    if dtype == np.float32:
        name = "saxpy"
    elif dtype == np.float64:
        name = "daxpy"
    else:
        return False
    blas = scipy_blas()
    if blas is None or not serial():  # (a second pool of spinning workers: ops.fast.blas)
        return False
    flat = p.reshape(-1)
    out = getattr(blas, name)(grad.reshape(-1), flat, a=-lr)
    if out is not flat:  # (f2py updates a contiguous array of the right dtype in place)
        flat[...] = out
    return True


def update_step(p: Any, grad: Any, lr: float) -> None:
    """A generated SGD plan's update of one parameter: ``axpy``, else the reference."""
    if not axpy(p, grad, lr):
        p += (-lr) * grad


def gemm_fits(p: Any, g: Any, h: Any) -> bool:
    """Whether ``gemm_step(p, g, h, lr)`` applies: 2-D host arrays of one float dtype, ``p``
    C-ordered and writeable with ``p.shape == (g.shape[1], h.shape[1])``, ``g`` and ``h``
    C-ordered with one row per sample, and SciPy's BLAS there."""
    arrays = (p, g, h)
    if any(type(a) is not np.ndarray or a.ndim != 2 for a in arrays):
        return False
    if p.dtype not in (np.float32, np.float64) or g.dtype != p.dtype or h.dtype != p.dtype:
        return False
    if p.shape != (g.shape[1], h.shape[1]) or g.shape[0] != h.shape[0]:
        return False
    return (all(a.flags.c_contiguous for a in arrays) and p.flags.writeable
            and scipy_blas() is not None)


def gemm_step(p: Any, g: Any, h: Any, lr: float) -> None:
    """``p += (-lr) * g.T @ h`` in place as one GEMM (``gemm_fits`` checked when the plan was
    emitted). Column-major: ``p.T (in, out) = -lr * h.T (in, n) @ g (n, out) + p.T``, with
    ``h.T`` and ``g.T`` the column-major forms of the C-ordered ``h`` and ``g`` (no copies)."""
    blas = scipy_blas()
    gemm = blas.sgemm if p.dtype == np.float32 else blas.dgemm
    got = gemm(-lr, h.T, g.T, beta=1.0, c=p.T, trans_b=1, overwrite_c=1)
    if not np.shares_memory(got, p):  # (f2py writes a fitting ``c`` in place)
        p[...] = got.T


__all__ = ["MIN_SIZE", "axpy", "gemm_fits", "gemm_step", "update_step"]
