"""SGD's update ``p += (-lr) * step`` as one in-place BLAS axpy: a fast kernel of the optimisers.

``step`` is the gradient, or the momentum buffer / decayed gradient SGD made from it first. The
reference update (``optimizers.SGD.apply_single``) is NumPy's product and add: two passes
over the parameter's size and a temporary as large as the parameter. BLAS ``?axpy`` does it in
one pass with no temporary. It runs inside ``registry.fast_kernels(True)`` (training steps with
``Options(fast_kernels=True)``, the default) and outside any block where ``tl.Tensor`` code runs
the fast kernels (``KERNELS.tensors``, on by default: a PyTorch-style ``opt.step()``), never inside
``fast_kernels(False)``; on host float32/float64 arrays of at least
``MIN_SIZE`` entries, contiguous, of one dtype; everything else keeps the reference. OpenBLAS's
axpy kernels use fused multiply-adds, so a result may differ from the reference by one rounding
(one ulp of the product's magnitude; about 9% of float32 entries on random data): the tests
check it within ``registry.FAST_RTOL`` and bitwise where the product is exact.

NumPy does not expose its BLAS's axpy, so it comes from SciPy (``ops.fast.blas``: imported on
the first fast step only, its own thread pool held at one thread so that it never competes with
NumPy's) and is never required: without SciPy, or with SciPy's pool raised above one thread
since, the reference runs.

Measured (W2 of ``torchlean bench``: SGD on 784-512-512-10, 1 thread, CPU time, interleaved in
one process, load 7-10): the six parameters' update 155-165 us -> 70 us with the arrays hot, and
the compiled step 6.11 -> 5.90 ms and 5.81 -> 5.70 ms in two A/B runs (about 2-3%). Chunked NumPy
(product into a cache-sized scratch, then the add) lost: 5.85-6.00 ms.
"""

from __future__ import annotations

from typing import Any

from ..core.registry import KERNELS
from ..ops.fast.sgd import MIN_SIZE, axpy


def sgd_update(p: Any, grad: Any, lr: float) -> bool:
    """``p += (-lr) * grad`` in place by BLAS axpy where the fast kernels are chosen
    (``KERNELS.tensors``: inside a fast block, or outside any block by default) and the arrays
    allow it (``ops.fast.sgd.axpy``); returns False (nothing done) where the reference update
    must run."""
    return KERNELS.tensors and axpy(p, grad, lr)


__all__ = ["MIN_SIZE", "sgd_update"]
