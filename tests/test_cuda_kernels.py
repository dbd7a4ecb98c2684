"""The CuPy-only col2im kernel's generated source, compiled as plain C++ on the CPU, gives the
same bits as the shared NumPy col2im (windows.scatter_windows) for every layout and rank.
(Checks the index arithmetic without a GPU; skipped only when no C++ compiler is present.)"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchlean.ops import cuda_kernels
from torchlean.ops.windows import scatter_windows

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler to build the CPU harness")


def _lib(tmp_path: Path, nl: int, d: int) -> ctypes.CDLL:
    src = tmp_path / f"col2im_{nl}_{d}.cpp"
    so = tmp_path / f"col2im_{nl}_{d}.so"
    src.write_text(cuda_kernels.col2im_harness_source(nl, d))
    assert CXX is not None
    subprocess.run([CXX, "-O1", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.col2im.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p]
    return lib


CASES = [
    # lead, full, kernel, stride, kernel_first
    ((2, 3), (7, 6), (3, 3), (1, 1), True),
    ((2, 3), (9, 8), (3, 2), (2, 3), True),
    ((4,), (11,), (3,), (2,), False),
    ((1, 2), (6, 5, 7), (2, 2, 3), (1, 2, 2), False),
    ((3,), (5, 5), (2, 2), (3, 3), True),   # gaps: stride > kernel
    ((2, 2), (10,), (4,), (1,), True),
]


@pytest.mark.parametrize("case", CASES)
def test_generated_col2im_matches_the_shared_path(tmp_path: Path, case: tuple[Any, ...]) -> None:
    lead, full, kernel, stride, kernel_first = case
    d = len(full)
    out = tuple((n - k) // s + 1 for n, k, s in zip(full, kernel, stride, strict=True))
    shape = lead + (kernel + out if kernel_first else out + kernel)
    rng = np.random.default_rng(len(lead) * 10 + d)
    # A non-contiguous view, as conv_transpose_core passes (moveaxis of a GEMM result).
    base = rng.standard_normal(shape[::-1])
    cols = base.transpose(tuple(range(len(shape)))[::-1])
    assert not cols.flags.c_contiguous
    want = scatter_windows(cols, full, stride, kernel_first)
    params = cuda_kernels.col2im_params(cols, len(lead), full, kernel, out, stride, kernel_first)
    assert params is not None
    got = np.empty(lead + full)
    p = (ctypes.c_longlong * len(params))(*params)
    _lib(tmp_path, len(lead), d).col2im(cols.ctypes.data, got.ctypes.data, got.size, p)
    np.testing.assert_array_equal(got, want)
    # The shared path's answer is not trivially zero where windows reach.
    assert np.count_nonzero(want) > 0
