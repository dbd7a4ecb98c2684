"""GEMM libraries at the bench workloads' product shapes (issue 26: which GEMM the fast kernels
should call).

Each row is one row-major product ``C = op(A) op(B)`` the W2 step runs (the forward
``x @ W^T`` of two layers, the weight gradients ``g^T @ x`` and the input gradient ``g @ W``;
W4's hvp runs the same shapes, twice over), and W3's and W5's largest products. Each library
computes it from the same NumPy buffers with no copy (transposition by flags):

- ``torch.mm`` (the peer: PyTorch's CPU build calls oneMKL) and NumPy's matmul (the reference
  kernels' product);
- SciPy's BLAS ``?gemm`` in both orders column-major BLAS allows without a copy: ``C^T = B^T
  A^T`` (a C-ordered result, what ``ops.fast.linalg`` calls) and ``C = A B`` (an F-ordered
  result);
- where installed (none is a torchlean dependency): Intel oneMKL from PyPI (``pip install
  mkl``; ``cblas_?gemm`` of ``libmkl_rt`` through ctypes, its sequential layer at one thread,
  its GNU OpenMP layer above; the row says which code path MKL loaded: on AMD CPUs it takes its
  generic ``libmkl_def``), BLIS (``pip install blis``, explosion's cython-blis; its 0.7 runtime
  picks the ``generic`` kernels on a Zen 4), and OpenBLAS from ``pip install scipy-openblas32``
  through ctypes, loaded once with its own core choice and once (a copy of the file) with
  ``OPENBLAS_CORETYPE=Haswell`` set only while it loads.

CPU time (``time.process_time``, so a shared machine's load swells no side more than another),
rounds interleaved in shuffled order, medians and the ratio to ``torch.mm``. Run:
``python benchmarks/bench_gemm.py [--threads 1] [--rounds 15] [--shapes W2,W3,W5] [--dtype
float32]``; the optional libraries go in a scratch environment, e.g. ``python -m venv /tmp/g
--system-site-packages && /tmp/g/bin/pip install mkl blis scipy-openblas32`` (about 1.1 GB
installed, nearly all of it oneMKL's), then ``/tmp/g/bin/python benchmarks/bench_gemm.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from scipy.linalg import blas  # before the threads are pinned: threadpoolctl pins loaded libraries

from torchlean.bench import harness

# (label, M, N, K, transA, transB): A is stored (K, M) when transA else (M, K); B is stored
# (N, K) when transB else (K, N); every operand and C are C-contiguous.
SHAPES = [
    ("W2 fwd1 x@W1^T", 128, 512, 784, 0, 1),
    ("W2 fwd2 h@W2^T", 128, 512, 512, 0, 1),
    ("W2 gW1 g^T@x", 512, 784, 128, 1, 0),
    ("W2 gW2 g^T@h", 512, 512, 128, 1, 0),
    ("W2 gx2 g@W2", 128, 512, 512, 0, 0),
    ("W3 conv2 cols@W^T", 6272, 32, 145, 0, 1),
    ("W3 conv2 dW g^T@cols", 32, 145, 6272, 1, 0),
    ("W3 conv1 cols@W^T", 25088, 16, 10, 0, 1),
    ("W5 mlp-in x@W^T", 256, 256, 64, 0, 1),
    ("W5 mlp-out h@W^T", 256, 64, 256, 0, 1),
    ("W5 gW g^T@x", 256, 64, 256, 1, 0),
]
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

Gemm = Callable[[np.ndarray, np.ndarray, np.ndarray, int, int], None]


def _cblas(fn: Any, real: Any) -> Gemm:
    """A row-major ``cblas_?gemm`` (C = op(A) op(B), beta 0) over NumPy buffers."""
    fn.argtypes = [ctypes.c_int] * 6 + [real, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_int, real, ctypes.c_void_p, ctypes.c_int]
    fn.restype = None

    def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, ta: int, tb: int) -> None:
        m, n = c.shape
        k = a.shape[0] if ta else a.shape[1]
        fn(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, 1.0,
           a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], 0.0, c.ctypes.data, n)

    return gemm


def _dist_file(dist: str, prefix: str) -> str | None:
    """The installed path of ``dist``'s first file whose name starts with ``prefix``."""
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if os.path.basename(str(f)).startswith(prefix):
            return str(f.locate())
    return None


def _loaded(word: str) -> list[str]:
    """Names of this process's mapped libraries containing ``word`` (Linux only)."""
    try:
        with open("/proc/self/maps") as maps:
            return sorted({os.path.basename(line.split()[-1]) for line in maps
                           if word in line and "/" in line})
    except OSError:
        return []


def mkl_gemm(dtype: Any, threads: int, path: str | None
             ) -> tuple[Gemm, Callable[[], str]] | None:
    path = path or _dist_file("mkl", "libmkl_rt.so")
    if path is None:
        return None
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    lib.MKL_Set_Threading_Layer(1 if threads == 1 else 2)  # sequential / GNU OpenMP
    lib.MKL_Set_Num_Threads(threads)
    fn, real = ((lib.cblas_sgemm, ctypes.c_float) if dtype == np.float32
                else (lib.cblas_dgemm, ctypes.c_double))
    return _cblas(fn, real), lambda: ", ".join(n for n in _loaded("libmkl_")
                                               if "core" not in n and "rt" not in n)


@contextlib.contextmanager
def _coretype(core: str | None) -> Iterator[None]:
    """``OPENBLAS_CORETYPE`` set to ``core`` (None: unset) only inside the block."""
    saved = os.environ.pop("OPENBLAS_CORETYPE", None)
    if core is not None:
        os.environ["OPENBLAS_CORETYPE"] = core
    try:
        yield
    finally:
        os.environ.pop("OPENBLAS_CORETYPE", None)
        if saved is not None:
            os.environ["OPENBLAS_CORETYPE"] = saved


def openblas_gemms(dtype: Any, threads: int, scratch: str, path: str | None
                   ) -> dict[str, Gemm]:
    """scipy-openblas32's OpenBLAS, with its own core choice and (a copy) with Haswell's."""
    path = path or _dist_file("scipy-openblas32", "libscipy_openblas")
    if path is None:
        return {}
    out = {}
    for core in (None, "Haswell"):
        src = path
        if core is not None:  # a second load of the same file would share the first's state
            src = os.path.join(scratch, f"openblas_{core}.so")
            shutil.copyfile(path, src)
        with _coretype(core):
            lib = ctypes.CDLL(src, mode=os.RTLD_LOCAL)
        lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
        lib.scipy_openblas_get_config.restype = ctypes.c_char_p
        lib.scipy_openblas_set_num_threads(threads)
        version = lib.scipy_openblas_get_config().decode().split()[1]
        name = f"openblas {version} {lib.scipy_openblas_get_corename().decode()}"
        fn, real = ((lib.scipy_cblas_sgemm, ctypes.c_float) if dtype == np.float32
                    else (lib.scipy_cblas_dgemm, ctypes.c_double))
        out[name] = _cblas(fn, real)
    return out


def candidates(a: np.ndarray, b: np.ndarray, c: np.ndarray, ta: int, tb: int,
               extra: dict[str, Gemm], torch: Any) -> dict[str, Callable[[], Any]]:
    gemm = blas.sgemm if a.dtype == np.float32 else blas.dgemm
    c_f = np.asfortranarray(c)
    av, bv = (a.T if ta else a), (b.T if tb else b)
    tav, tbv, tc = torch.from_numpy(av), torch.from_numpy(bv), torch.from_numpy(c.copy())
    # each step returns its result (C, or C's F-ordered twin), checked before the timing
    steps: dict[str, Callable[[], Any]] = {
        "torch": lambda: torch.mm(tav, tbv, out=tc).numpy(),
        "numpy": lambda: np.matmul(av, bv, out=c),
        # column-major C^T = op(B)^T op(A)^T: each row-major operand is its transpose there
        "scipy C^T=B^T A^T": lambda: (gemm(1.0, b.T, a.T, trans_a=tb, trans_b=ta, c=c.T,
                                           overwrite_c=1, beta=0.0), c)[1],
        # column-major C = op(A) op(B): the result F-ordered
        "scipy C=A B (F)": lambda: gemm(1.0, a.T, b.T, trans_a=1 - ta, trans_b=1 - tb,
                                        c=c_f, overwrite_c=1, beta=0.0),
    }
    for name, fn in extra.items():
        steps[name] = lambda fn=fn: (fn(a, b, c, ta, tb), c)[1]
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shapes", default="W2,W3,W5", help="label prefixes to run")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--mkl-lib", help="libmkl_rt.so.3's path (default: the mkl wheel's)")
    ap.add_argument("--openblas-lib",
                    help="libscipy_openblas.so's path (default: the scipy-openblas32 wheel's)")
    args = ap.parse_args()
    import torch

    dtype = np.dtype(args.dtype).type
    limiter = harness.pin_threads(args.threads)
    extra: dict[str, Gemm] = {}
    mkl = mkl_gemm(dtype, args.threads, args.mkl_lib)
    with tempfile.TemporaryDirectory() as scratch:
        extra.update(openblas_gemms(dtype, args.threads, scratch, args.openblas_lib))
    try:
        import blis.py as blis_py  # type: ignore[import-not-found]
        if dtype == np.float32:
            extra["blis"] = lambda a, b, c, ta, tb: blis_py.gemm(
                a, b, out=c, trans1=bool(ta), trans2=bool(tb), beta=0.0)
    except ImportError:
        pass
    if mkl is not None:
        extra["mkl"] = mkl[0]
    print(f"threads {args.threads}, {args.dtype}, {args.rounds} rounds; "
          f"BLAS: {harness.blas_info()}")
    rng = np.random.default_rng(0)
    wanted = tuple(args.shapes.split(","))
    for label, m, n, k, ta, tb in SHAPES:
        if not label.startswith(wanted):
            continue
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        c = np.empty((m, n), dtype)
        steps = candidates(a, b, c, ta, tb, extra, torch)
        exact = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
        for name, fn in steps.items():
            c[...] = np.nan
            got = fn()
            assert np.abs(got - exact).max() <= 1e-4 * np.abs(exact).max(), (label, name)
        block = max(1, int(2e7 // (m * n * k)))
        times = harness.time_interleaved(steps, block, args.rounds, warmup=2, clock="cpu")
        print(harness.step_table(f"{label}: ({m}, {k}) x ({k}, {n}), CPU ms", times))
    if mkl is not None:
        print(f"MKL code path loaded: {mkl[1]()}")
    del limiter


if __name__ == "__main__":
    main()
