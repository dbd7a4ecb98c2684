"""A fast ``linear`` forward: ``x @ w.T + b`` as one BLAS GEMM with the bias as its ``C``
(``beta = 1``), through SciPy's BLAS (``ops.fast.blas``).

The reference (``ops.linalg._linear``) is NumPy's matmul, then the bias added in place. Here the
output is first filled with the bias and one ``?gemm`` call accumulates the product into it,
written for column-major BLAS on transposed views (``C^T = W X^T``: no operand is copied).
Besides the bias pass it saves, OpenBLAS runs this call faster than NumPy's matmul does on this
machine's shapes: measured on the 2-core AMD EPYC (Zen 4; NumPy's OpenBLAS 0.3.31 and SciPy's
0.3.30 both on their SkylakeX kernels), one thread, CPU time, interleaved, load about 13:
(128, 784) -> 512 (W2 layer 1) 1311 -> 1220 us, (128, 512) -> 512 802 -> 743 us, (64, 512) ->
512 539 -> 441 us, W5's (256, 64) -> 256 107 -> 93 us; below about 2M multiply-adds the f2py
call costs what it saves ((128, 512) -> 10: 33 -> 36 us), so those keep the reference.

It differs from the reference by rounding only: OpenBLAS adds ``C`` (the bias) to the product
of each block of the inner dimension in turn, so past one block (a few hundred inputs) the bias
enters before the last block instead of after the whole sum (with one block the bits are the
reference's). The tests check it within ``registry.FAST_RTOL`` with verify's fast-column check
(``linear``'s registry samples are below ``MIN_WORK``, so ``torchlean verify`` itself sees the
fallback there; a sample above it makes the other verify columns take minutes). Other
cases (a 1-D or stacked input, mixed dtypes, non-contiguous operands, no SciPy) run the
reference.

Only on the OpenBLAS cores where this was measured faster (``ops.fast.blas.GEMM_CORES``, the
AVX-512 ones): on the AVX2 ``Haswell`` kernels SciPy's OpenBLAS 0.3.30 GEMM is 5-15% slower than
NumPy's 0.3.31 at these shapes, bias or not, so there the reference runs (its bits too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ..linalg import _linear as reference
from .blas import gemm_now, scipy_blas

# Multiply-adds from which the GEMM call pays for itself (see the module docstring).
MIN_WORK = 1 << 21


def linear(w: Any, b: Any, x: Any) -> Any:
    dtype = x.dtype
    if (x.ndim != 2 or w.ndim != 2 or b.ndim != 1 or type(w) is not np.ndarray
            or type(b) is not np.ndarray or w.dtype != dtype or b.dtype != dtype
            or dtype not in (np.float32, np.float64)
            or x.shape[0] * w.shape[0] * w.shape[1] < MIN_WORK
            or not x.flags.c_contiguous or not w.flags.c_contiguous):
        return reference(w, b, x)
    if not gemm_now():  # (SciPy absent, its GEMM slower on this core, or NumPy's threads)
        return reference(w, b, x)
    blas = scipy_blas()
    gemm = blas.sgemm if dtype == np.float32 else blas.dgemm
    out = np.empty((x.shape[0], w.shape[0]), dtype)
    out[...] = b
    # Column-major: out^T (out_f, rows) = w (out_f, in) @ x^T (in, rows), with w stored as the
    # column-major (in, out_f) matrix w.T (so transposed) and x^T as the column-major x.T.
    got = gemm(1.0, w.T, x.T, beta=1.0, c=out.T, trans_a=1, overwrite_c=1)
    if got.base is not out:  # (f2py writes a fitting ``c`` in place and returns that view)
        out[...] = got.T
    return out


attach_fast("linear", forward=linear)
