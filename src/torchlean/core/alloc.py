"""Pin glibc malloc's mmap and trim thresholds and its top pad, so freed step buffers are reused
(on the first repeated step, or by the command).

Why: with only NumPy in the process (``torchlean train``), glibc serves large arrays with mmap
and returns them to the OS when freed (its dynamic threshold adapts only up to 32 MiB, and
trimming gives back the top of the heap), so every training step faults the same pages back in:
measured about 1,800 minor page faults per CNN step and per transformer-block step (W3, W5 of
``torchlean bench --isolated``), the cost of zeroing those pages each step. PyTorch and JAX
pin their own allocators, which hid this in benchmarks that load them. Keeping freed memory in
the heap costs no more peak memory than the step itself needs.

Importing torchlean changes nothing process-wide. The ``torchlean`` command calls
``pin_thresholds()`` in its main; the library calls it (``repeated_step()``) the first time a
step repeats: an eager reverse pass that repeats its session's cached op sequence, a compiled
graph's second run of one plan (when its generated code is emitted), or the process's second
``Tensor.backward()`` (the PyTorch-shaped door keeps no op sequence to compare). Before, a library
user's NumPy-only training loop paid the faults the command avoided: measured in fresh processes
that load only NumPy (Intel Xeon, AVX-512, one BLAS thread), W3's CNN step faulted 3,018 pages a
step eager and 2,209 compiled (7.8 and 6.8 ms a step, against 4.7 and 4.6 ms with the thresholds
pinned), W5's eager step 312 (1.93 against 1.55 ms), W4's eager hvp 117, and a CNN trained
through ``torchlean.nn`` / ``optim`` / ``Tensor.backward()`` 2,835 (10.5 against 7.7 ms); in
most fresh processes, since glibc's dynamic threshold, raised by the sizes of earlier frees,
sometimes happens to cover a step. A process that only verifies, converts or runs single passes
is left alone.
``TORCHLEAN_MALLOPT=0`` leaves malloc alone;
``TORCHLEAN_MMAP_THRESHOLD`` (bytes, default 32 MiB, glibc's largest) and
``TORCHLEAN_TRIM_THRESHOLD`` (bytes, default 512 MiB) change the two values. The top pad (extra
memory the heap grows by when it must grow; ``TORCHLEAN_TOP_PAD``, default 64 MiB) keeps a pass
whose temporaries outgrow the heap from growing it page by page: on ACAS Xu branch and bound
(``torchlean vnn``, bound passes of megabytes each) it was measured with the two thresholds at
485k minor faults and 2.0 s of system time in 15 CPU-s (``3_3`` property 2) against 47k and
0.35 s.
Nothing happens off glibc (macOS, musl, Windows).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
DEFAULT_MMAP_THRESHOLD = 32 << 20
DEFAULT_TRIM_THRESHOLD = 512 << 20
DEFAULT_TOP_PAD = 64 << 20

applied: dict[str, int] = {}  # what was set (empty when nothing was), for reports and tests
_repeated = False  # whether ``repeated_step()`` has run (it tries once, whatever the outcome)
_passes = 0  # reverse passes counted by ``another_pass()`` before the thresholds were pinned


def _env_bytes(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        return default  # a malformed override must not break import; keep the default
    return value if value > 0 else default


def pin_thresholds() -> dict[str, int]:
    """Apply the thresholds once (idempotent); returns what was set."""
    if applied or os.environ.get("TORCHLEAN_MALLOPT", "1").strip() == "0":
        return applied
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return applied
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mmap = _env_bytes("TORCHLEAN_MMAP_THRESHOLD", DEFAULT_MMAP_THRESHOLD)
    trim = _env_bytes("TORCHLEAN_TRIM_THRESHOLD", DEFAULT_TRIM_THRESHOLD)
    # glibc refuses (returns 0) an mmap threshold above 32 MiB on 64-bit; then keep 32 MiB.
    for value in (mmap, DEFAULT_MMAP_THRESHOLD):
        if mallopt(M_MMAP_THRESHOLD, min(value, 2**31 - 1)) == 1:
            applied["mmap_threshold"] = value
            break
    if mallopt(M_TRIM_THRESHOLD, min(trim, 2**31 - 1)) == 1:
        applied["trim_threshold"] = trim
    pad = _env_bytes("TORCHLEAN_TOP_PAD", DEFAULT_TOP_PAD)
    if mallopt(M_TOP_PAD, min(pad, 2**31 - 1)) == 1:
        applied["top_pad"] = pad
    return applied


def repeated_step() -> None:
    """Called where a step repeats (see the module docstring): pins the thresholds once per
    process. After the first call it costs one global read (it is on every repeated pass)."""
    global _repeated
    if _repeated:
        return
    _repeated = True
    pin_thresholds()


def another_pass() -> None:
    """Called by each ``Tensor.backward()``: the second one in a process is a repeated step."""
    global _passes
    if _repeated:
        return
    _passes += 1
    if _passes >= 2:
        repeated_step()
