"""SciPy's BLAS wrappers for the fast kernels that need a BLAS call NumPy does not expose (axpy,
a GEMM with ``beta``), loaded once on first use and never required.

``import torchlean`` does not import SciPy (``scipy.linalg`` costs about 0.2 s of CPU); the first
fast kernel that asks does. SciPy's OpenBLAS is a second library with its own thread pool; at
load its thread count is set to the one NumPy's BLAS has then (threadpoolctl, where installed),
so a one-thread run stays one thread (a thread limit set earlier through threadpoolctl reached
only the libraries loaded then). Without SciPy, ``scipy_blas()`` is None and every caller runs
its reference.
"""

from __future__ import annotations

from typing import Any

_UNLOADED = object()
_blas: Any = _UNLOADED


def _load() -> Any:
    """``scipy.linalg.blas`` with its thread count matched to NumPy's BLAS, or None."""
    try:
        from scipy.linalg import blas
    except ImportError:
        return None
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return blas
    controller = ThreadpoolController()
    numpy_blas = [c for c in controller.lib_controllers
                  if c.user_api == "blas" and "numpy" in c.filepath]
    scipy_blas = [c for c in controller.lib_controllers
                  if c.user_api == "blas" and "scipy" in c.filepath and c not in numpy_blas]
    if numpy_blas:
        threads = numpy_blas[0].num_threads
        for c in scipy_blas:
            if c.num_threads != threads:
                c.set_num_threads(threads)
    return blas


def scipy_blas() -> Any:
    """SciPy's BLAS wrappers (``scipy.linalg.blas``, loaded once), or None without SciPy."""
    global _blas
    if _blas is _UNLOADED:
        _blas = _load()
    return _blas


__all__ = ["scipy_blas"]
