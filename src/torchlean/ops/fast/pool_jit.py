"""Large 2-D max poolings as compiled loops (numba), bit for bit the NumPy fast kernels of
``ops.fast.pool``: the forward's window maxima and winner codes, the tiled VJP's routed gradient
(with or without the relu mask of ``pool.relu_vjp``).

Why: NumPy runs a channels-last pooling as one ufunc pass per kernel offset whose contiguous
runs are only C floats long (16 on W3's first layer), plus three contiguous passes per offset
for the winner code; the time goes to the ufunc loop's per-run overhead, not to memory. One
loop over the input in memory order, the channel loop innermost (vectorised by LLVM), does the
same work in one pass. Measured on W3's poolings (channels-last, 2x2, one thread, a NumPy-only
process with malloc pinned, 2-core AMD EPYC Zen 4): forward (32, 16, 28, 28) 420 -> 62 us,
(32, 32, 14, 14) 196 -> 25 us; VJP 369 -> 93 us and 172 -> 32 us.

Optional, and only where it pays: numba is an extra (``pip install torchlean[fast]``, part of
``examples`` and ``test``), never imported by ``import torchlean``: importing it and loading its
compiled cache costs about 0.3-0.7 s in a fresh process (the first process on a machine also
compiles, about 1.5 s, and writes numba's on-disk cache). So it is loaded by the first VJP of a
pooling of at least ``MIN_SIZE`` input entries (training a CNN of W3's size), after which the
forwards use the loops too; a forward alone (inference, evaluation) never loads it. Measured:
``torchlean train --model cnn --dataset digits`` trains on 32 x 16 x 8 x 8 poolings (below the
floor) but evaluates in batches of 256 (above it); loading numba there made the job 0.5 s
slower (2.6-2.9 -> 3.2-3.5 s), for poolings that save a few ms in all. ``TORCHLEAN_NUMBA=0``
turns the loops off.

Semantics, as the NumPy fast kernels (which the tests hold bitwise to the reference rules):

- the running maximum is NumPy's ``maximum(best, v)``: a NaN propagates (the first one met
  stays), and on equal values the later operand is taken (``maximum(+0.0, -0.0)`` is ``-0.0``
  in NumPy, strided or not);
- the winner code is the last offset that raised the running maximum strictly, in row-major
  offset order (the first maximum), or 255 where the window's maximum is NaN;
- the VJP multiplies ``g`` by the winner test as a float (``g * 0.0`` keeps the sign of zero
  and gives NaN for an infinite ``g``, as ``np.multiply(g, hit)`` does); with ``positive`` a cell
  routes only where its window's maximum is > 0.

Covered: 2x2 windows with stride 2 (the CNN pooling; a loop over general window offsets inside
the channel loop does not vectorise and measured 4-17x slower than the unrolled one, so other
geometries keep NumPy's kernels), no padding, on 4-D channels-last arrays (what the fast
convolution and relu leave), float32 or float64; the VJP only where the windows tile the input
(each cell written once). Everything else returns None and the caller runs its NumPy kernel.

Also here, because it shares the loading rule: ``relu`` of a large dense float array (any memory
order) as one loop, for ``ops.fast.elementwise``'s relu forward, once a pooling VJP has loaded
the loops (a relu never loads them itself); NumPy's float ``maximum`` is about 3x dearer.
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

# Below this many input entries the NumPy kernels run (see the module docstring).
MIN_SIZE = 65536
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_UNLOADED = object()
_kernels: Any = _UNLOADED


def _forward_loop(x: Any, relu: bool, best: Any, code: Any) -> None:
    """(N, H, W, C) -> 2x2 stride-2 window maxima and winner codes, both (N, Ho, Wo, C);
    with ``relu``, ``relu`` of each maximum (NumPy's ``maximum(b, 0)``), which is the maximum of
    the relu'd window. Written with selects only and the four offsets unrolled, so that LLVM
    vectorises the channel loop (a loop over the offsets inside it, or the window state kept in
    memory across offset loops, measured 4-17x slower)."""
    n_, ho, wo, c_ = best.shape
    for n in range(n_):
        for i in range(ho):
            for j in range(wo):
                for c in range(c_):
                    b = x[n, 2 * i, 2 * j, c]
                    k = 0
                    # offset o raises the maximum strictly: it is the first maximum so far; the
                    # running value is NumPy's maximum(b, v): b if b > v or b is NaN, else v
                    v = x[n, 2 * i, 2 * j + 1, c]
                    k = 1 if v > b else k
                    b = b if (b > v or b != b) else v
                    v = x[n, 2 * i + 1, 2 * j, c]
                    k = 2 if v > b else k
                    b = b if (b > v or b != b) else v
                    v = x[n, 2 * i + 1, 2 * j + 1, c]
                    k = 3 if v > b else k
                    b = b if (b > v or b != b) else v
                    if relu:
                        b = b if (b > 0 or b != b) else 0.0
                    best[n, i, j, c] = b
                    code[n, i, j, c] = 255 if b != b else k


def _backward_loop(g: Any, code: Any, best: Any, positive: bool, dx: Any) -> None:
    """The 2x2 stride-2 VJP: ``dx`` (N, 2 Ho, 2 Wo, C) written in memory order, each cell
    ``g * hit`` of its window (``hit``: the cell's offset is the code, and with ``positive``
    the window's maximum is > 0)."""
    n_, ho, wo, c_ = g.shape
    for n in range(n_):
        for i in range(ho):
            for di in range(2):
                for j in range(wo):
                    for dj in range(2):
                        off = 2 * di + dj
                        for c in range(c_):
                            hit = code[n, i, j, c] == off
                            if positive:
                                hit = hit and best[n, i, j, c] > 0
                            # (float32 * 1.0 or 0.0 in float64 rounds back exactly)
                            dx[n, 2 * i + di, 2 * j + dj, c] = g[n, i, j, c] * (
                                1.0 if hit else 0.0)


def _relu_loop(x: Any, zero: Any, out: Any) -> None:
    """``relu`` of a flat array, NumPy's ``maximum(x, 0)`` per entry: ``x`` where ``x > 0`` or
    ``x`` is NaN (its own bits, the sign and payload kept), else ``zero`` (a +0 of x's dtype, so
    that no entry passes through another float type)."""
    for i in range(x.size):
        v = x[i]
        out[i] = v if (v > 0 or v != v) else zero


def kernels(load: bool = True) -> Any:
    """The compiled loops ``(forward, backward, relu)``, or None without numba or with
    ``TORCHLEAN_NUMBA=0`` (loaded once; numba caches the machine code on disk); with ``load``
    False, None until something has loaded them."""
    global _kernels
    if _kernels is _UNLOADED:
        if not load:
            return None
        _kernels = None
        if not _turned_off():
            try:
                import numba
            except ImportError:
                return None
            try:
                _kernels = _compile(numba.njit(cache=True, nogil=True))
            except RuntimeError:  # no writable cache location (a read-only install):
                _kernels = _compile(numba.njit(nogil=True))  # compile in each process instead
    return _kernels


def _compile(jit: Any) -> tuple[Any, Any, Any]:
    return jit(_forward_loop), jit(_backward_loop), jit(_relu_loop)


def _turned_off() -> bool:
    return os.environ.get("TORCHLEAN_NUMBA", "1").strip() == "0"


def _run(which: int, *args: Any) -> bool:
    """Call loop ``which`` (0 forward, 1 VJP, 2 relu); False, with the loops switched off for
    the rest of the process and a warning, when numba cannot compile or run it (a numba that
    does not support this NumPy, say): the caller then runs NumPy's kernels, which give the
    same bits."""
    global _kernels
    try:
        _kernels[which](*args)
        return True
    except Exception as exc:  # noqa: BLE001  (numba's errors have no common base we can name)
        _kernels = None
        warnings.warn(f"torchlean: max pooling's numba loops switched off ({type(exc).__name__}: "
                      f"{exc}); NumPy's kernels run instead", RuntimeWarning, stacklevel=3)
        return False


def describe() -> str:
    """One line for reports (``torchlean bench``): whether the loops can run and have loaded,
    without importing numba."""
    if _turned_off():
        return "off (TORCHLEAN_NUMBA=0): NumPy's kernels"
    try:
        version = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return "numba not installed: NumPy's kernels"
    if _kernels is _UNLOADED:
        return f"numba {version}, not loaded (no pooling VJP of {MIN_SIZE}+ entries yet)"
    return f"numba {version}, " + ("loaded" if _kernels is not None else
                                   "switched off after a failure: NumPy's kernels")


@contextmanager
def every_size() -> Iterator[bool]:
    """Inside: the loops (loaded now, if numba is there) run at every size, so that small
    samples exercise them (``torchlean verify``'s fast column); yields whether they are
    available."""
    global MIN_SIZE
    before, MIN_SIZE = MIN_SIZE, 0
    try:
        yield kernels() is not None
    finally:
        MIN_SIZE = before


def _channels_last(a: Any) -> Any:
    """The (N, H, W, C) C-ordered view of a channels-last 4-D array, or None."""
    if not isinstance(a, np.ndarray) or a.ndim != 4:
        return None
    view = a.transpose(0, 2, 3, 1)
    return view if view.flags.c_contiguous else None


def _usable(x: Any, load: bool) -> Any:
    if not isinstance(x, np.ndarray) or x.dtype not in _DTYPES or x.size < MIN_SIZE:
        return None
    xl = _channels_last(x)
    return xl if xl is not None and kernels(load) is not None else None


def forward(x: Any, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...],
            relu: bool = False) -> tuple[Any, Any] | None:
    """``pool._forward``'s maxima and codes for a 2x2 stride-2 unpadded pooling (channels-last,
    as (N, C, Ho, Wo) views), or None where the loops do not apply. With ``relu``: the pooling
    of ``relu(x)`` for windows that tile ``x`` (``pool.relu_max_forward``): the same maxima;
    the codes differ from those of the relu'd input only in windows whose maximum is <= 0,
    which the relu-fused VJP (``pool.relu_vjp``, tiled: ``positive``) never routes."""
    if k != (2, 2) or s != (2, 2) or any(p):
        return None
    xl = _usable(x, load=False)  # (a forward alone never pays for loading numba)
    if xl is None:
        return None
    n, h, w, c = xl.shape
    if h < 2 or w < 2 or (relu and (h % 2 or w % 2)):
        return None
    best = np.empty((n, h // 2, w // 2, c), dtype=x.dtype)
    code = np.empty((n, h // 2, w // 2, c), dtype=np.uint8)
    if not _run(0, xl, relu, best, code):
        return None
    return best.transpose(0, 3, 1, 2), code.transpose(0, 3, 1, 2)


def backward(x: Any, g: Any, best: Any, code: Any, k: tuple[int, ...], positive: bool
             ) -> Any:
    """``pool._backward``'s result for 2x2 windows that tile ``x`` exactly (stride 2, no
    padding, even sizes: the caller checks the tiling), channels-last, or None where the loops
    do not apply. ``g`` must already be in ``best``'s layout."""
    if k != (2, 2) or code is None or g.dtype != x.dtype:
        return None
    xl = _usable(x, load=True)
    gl, bl, cl = _channels_last(g), _channels_last(best), _channels_last(code)
    if xl is None or gl is None or bl is None or cl is None or bl.dtype != x.dtype:
        return None
    dx = np.empty(xl.shape, dtype=x.dtype)
    if not _run(1, gl, cl, bl, positive, dx):
        return None
    return dx.transpose(0, 3, 1, 2)


def _dense(a: Any) -> tuple[Any, ...] | None:
    """The axis order in which ``a`` is dense (C order, or channels-last), else None."""
    if a.flags.c_contiguous:
        return None if a.ndim != 4 else (0, 1, 2, 3)
    if a.ndim == 4 and a.transpose(0, 2, 3, 1).flags.c_contiguous:
        return (0, 2, 3, 1)
    return ()


def relu(x: Any) -> Any:
    """``relu`` (NumPy's ``maximum(x, 0)``, the same bits) in one compiled pass over ``x``'s
    memory, the result in ``x``'s layout; None where the loops do not apply (not loaded: a relu
    never loads numba; small, strided or non-float input). Why: NumPy 2.4's float ``maximum``
    does not vectorise on this machine: on W3's first activation (32 x 16 x 28 x 28 float32,
    channels-last) it took 190-280 us against 40 us for an ``add`` of the same arrays; the loop
    63-65 us (one thread, CPU time, a loaded 2-core Zen 4)."""
    if (type(x) is not np.ndarray or x.dtype not in _DTYPES or x.size < MIN_SIZE
            or kernels(load=False) is None):
        return None
    order = _dense(x)
    if order == ():
        return None
    out = np.empty_like(x)  # (a dense input: the same strides)
    if order is None:  # C order, any rank
        flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    else:
        flat_x, flat_out = x.transpose(order), out.transpose(order)
        if not flat_out.flags.c_contiguous:
            return None
        flat_x, flat_out = flat_x.reshape(-1), flat_out.reshape(-1)
    if not _run(2, flat_x, x.dtype.type(0), flat_out):
        return None
    return out
