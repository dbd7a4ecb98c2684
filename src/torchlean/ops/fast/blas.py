"""SciPy's BLAS wrappers for the fast kernels that need a BLAS call NumPy does not expose (axpy,
a GEMM with ``beta``), loaded once on first use and never required.

``import torchlean`` does not import SciPy (``scipy.linalg`` costs about 0.2 s of CPU); the first
fast kernel that asks does. Without SciPy, ``scipy_blas()`` is None and every caller runs its
reference.

SciPy's OpenBLAS is usually a second library with a thread pool of its own, and two OpenBLAS
pools must not both run workers: an OpenBLAS worker spins for about 0.1 s after each call before
it sleeps, so on a machine with as many cores as threads each library's calls wait for the other
library's spinning workers. Measured (W2's compiled SGD step, 2-core Zen 3, NumPy's BLAS at 2
threads, wall time): SciPy's pool at 2 threads too 19.3 ms a step, at 1 thread 4.75 ms (the
whole step at 1 thread: 6.2 ms). So at load SciPy's own pool is set to one thread (threadpoolctl;
without it SciPy's BLAS is not used: its pool could not be sized), and every call checks that it
still is (``serial()``, about 1 us; a thread limit set later through threadpoolctl reaches both
libraries): otherwise the caller runs its reference, on NumPy's pool alone. A SciPy that shares
NumPy's BLAS has no pool of its own and is used at any thread count.

Which BLAS (measured for issue 26, ``benchmarks/bench_gemm.py``: W2's five large products, W3's
and W5's largest, one thread, CPU time, interleaved with ``torch.mm``, which calls PyTorch's
oneMKL; 2-core AMD EPYC Zen 4 shared with other jobs, load about 10): no other library's GEMM
is clearly faster than the ones used now (SciPy's OpenBLAS for ``linear``'s forward, NumPy's
for every other product), so this stays the one. W2's five GEMMs summed, 15 rounds: the current
choice 4.34 ms, PyTorch 4.64 ms (0.94x); Intel oneMKL 2026.2 from PyPI (``cblas_sgemm`` of
``libmkl_rt``, sequential layer) 4.59 ms, 6% slower: on an AMD CPU MKL loads its generic
``libmkl_def`` code path whatever ``MKL_ENABLE_INSTRUCTIONS`` / ``MKL_CBWR`` say, and its wheels
are 221 MB to download, about 690 MB installed; in the W2 step it was 3.6-5.1% slower than
the current kernels. BLIS (``blis`` 1.3.4, explosion's, BLIS 0.7) is 2.3-3.5x slower: its runtime
does not know a Zen 4 and picks its ``generic`` kernels, with no override. OpenBLAS 0.3.34
(``scipy-openblas32``) on its own SkylakeX kernels is level with the current choice; loaded with
``OPENBLAS_CORETYPE=Haswell`` (set only while it loads) it is the best found, 3.5% faster on
W2's GEMMs (4.19 ms) and 3.5% on the whole W2 step, 3.5-4.7% on W4's hvp: under the 8% that would
pay for a second OpenBLAS, an environment trick and a per-CPU choice. SciPy's two operand orders
(``C^T = B^T A^T``, a C-ordered result, against ``C = A B``, an F-ordered one) differ by at most
3-4% at these shapes, not consistently.
"""

from __future__ import annotations

from typing import Any

_UNLOADED = object()
_blas: Any = _UNLOADED
# threadpoolctl controllers of NumPy's BLAS and of SciPy's own (empty where SciPy shares NumPy's).
_numpy_pools: list[Any] = []
_scipy_pools: list[Any] = []


def _load() -> Any:
    """``scipy.linalg.blas`` with its own thread pool (if any) at one thread, or None."""
    try:
        from scipy.linalg import blas
    except ImportError:
        return None
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None  # (its pool could neither be sized nor checked: see the module docstring)
    controller = ThreadpoolController()
    numpy_blas = [c for c in controller.lib_controllers
                  if c.user_api == "blas" and "numpy" in c.filepath]
    scipy_blas = [c for c in controller.lib_controllers
                  if c.user_api == "blas" and "scipy" in c.filepath and c not in numpy_blas]
    _numpy_pools[:] = numpy_blas
    _scipy_pools[:] = scipy_blas
    hold_serial()
    return blas


def hold_serial() -> None:
    """Set SciPy's own BLAS pool (once loaded) back to one thread: for a caller that has just
    limited every BLAS library's threads through threadpoolctl (``torchlean bench``)."""
    for c in _scipy_pools:
        if c.get_num_threads() != 1:
            c.set_num_threads(1)


def serial() -> bool:
    """Whether a SciPy BLAS call runs now without starting a second pool of workers: SciPy's own
    OpenBLAS is at one thread (a limit set through threadpoolctl after load may have raised it),
    or SciPy has none of its own."""
    return all(c.get_num_threads() == 1 for c in _scipy_pools)


def numpy_serial() -> bool:
    """Whether NumPy's BLAS runs one thread now (True where it was not found)."""
    return all(c.get_num_threads() == 1 for c in _numpy_pools)


def scipy_blas() -> Any:
    """SciPy's BLAS wrappers (``scipy.linalg.blas``, loaded once), or None without SciPy."""
    global _blas
    if _blas is _UNLOADED:
        _blas = _load()
    return _blas


# OpenBLAS core types (threadpoolctl's ``architecture``) on which ``linear``'s forward runs as
# SciPy's GEMM with the bias as its C (``ops.fast.linalg``): the AVX-512 kernels, where it was
# measured 7-9% faster than NumPy's matmul plus the bias (Zen 4, SkylakeX kernels, above). On
# the AVX2 ``Haswell`` kernels (a Zen 3 EPYC without AVX-512, both libraries on them, one
# thread, CPU time, interleaved, load about 4) SciPy's OpenBLAS 0.3.30 GEMM is the slower one:
# (128, 784) -> 512 1557 -> 1812 us (best of 15), (128, 512) -> 512 1028 -> 1138 us with no bias
# at all (so it is the library, not the bias trick), and the W2 compiled step's two large
# forward products cost 0.33 ms more than NumPy's matmul plus the bias in an interleaved line
# profile. A core not listed keeps the reference (NumPy's matmul), whose bits it also gives.
GEMM_CORES = frozenset({"SkylakeX", "Cooperlake", "SapphireRapids"})

# None: decide by the core (``gemm_pays``); True / False force the choice (tests, experiments).
FORCE_GEMM: bool | None = None
_gemm_core: Any = _UNLOADED


def _scipy_core() -> str | None:
    """The OpenBLAS core type SciPy's BLAS runs (threadpoolctl), None where unknown."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    found = [i for i in threadpool_info()
             if i.get("user_api") == "blas" and "scipy" in i.get("filepath", "")
             and "numpy" not in i.get("filepath", "")]
    return str(found[0].get("architecture")) if found else None


def gemm_pays() -> bool:
    """Whether ``linear``'s fast forward should call SciPy's GEMM here: SciPy is there and its
    OpenBLAS runs one of ``GEMM_CORES`` (or the core is unknown: threadpoolctl absent, the
    choice measured first). Decided once per process, so a run's bits never depend on timing."""
    global _gemm_core
    if FORCE_GEMM is not None:
        return FORCE_GEMM and scipy_blas() is not None
    if scipy_blas() is None:
        return False
    if _gemm_core is _UNLOADED:
        _gemm_core = _scipy_core()
    return _gemm_core is None or _gemm_core in GEMM_CORES


def gemm_now() -> bool:
    """Whether ``linear``'s fast forward calls SciPy's GEMM now: ``gemm_pays()``, and SciPy's
    BLAS runs as many threads as NumPy's (both one, or SciPy sharing NumPy's pool): with SciPy's
    own pool held at one thread, NumPy's multi-threaded matmul is the faster product."""
    if not gemm_pays():
        return False
    if FORCE_GEMM is not None:
        return True
    return not _scipy_pools or (serial() and numpy_serial())


def describe() -> str:
    """Which GEMM library the fast kernels loaded (``torchlean bench`` prints it), without
    loading one."""
    if _blas is _UNLOADED:
        return "SciPy's BLAS not loaded (no fast GEMM ran)"
    if _blas is None:
        return "SciPy absent: the fast kernels ran NumPy's matmul"
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "SciPy's BLAS (threadpoolctl not installed: library unknown)"
    found = [i for i in threadpool_info()
             if i.get("user_api") == "blas" and "scipy" in i.get("filepath", "")
             and "numpy" not in i.get("filepath", "")]
    if not found:
        return "SciPy's BLAS (library not found by threadpoolctl)"
    i = found[0]
    threads = i.get("num_threads")
    axpy = ("SciPy's BLAS for the SGD axpy" if serial() else
            "SGD's reference update (SciPy's pool raised above one thread)")
    used = ("its GEMM" if gemm_now() else
            f"NumPy's matmul (SciPy's GEMM only on {', '.join(sorted(GEMM_CORES))} cores "
            f"and where NumPy's BLAS runs one thread); {axpy}")
    return (f"SciPy's {i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
            f"({threads} thread{'' if threads == 1 else 's'}): {used}")


__all__ = ["GEMM_CORES", "describe", "gemm_now", "gemm_pays", "hold_serial", "numpy_serial",
           "scipy_blas", "serial"]
