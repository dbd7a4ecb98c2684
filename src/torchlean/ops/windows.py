"""Strided sliding windows over trailing spatial axes: what convolution and pooling share.

Arrays are ``lead + spatial`` with ``d = len(spatial)`` in 1, 2, 3. ``window_view`` reads the
windows of an (already padded) array without copying; ``scatter_windows`` is its adjoint
(col2im); ``pad_spatial`` / ``crop_spatial`` add and remove symmetric padding; ``out_sizes`` is
the one output-size rule with its check. Nothing here knows about kernels' channels or
derivatives: conv.py and pool.py build their primitives on these.

Every helper works in the namespace of its input (``backend.namespace_of``): NumPy, CuPy (whose
``lib.stride_tricks.as_strided`` makes the same zero-copy views of device memory) or the tests'
stand-in device; nothing is copied between host and device.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..core.backend import is_cupy, namespace_of
from ..core.errors import ShapeError
from ..core.shape import Shape, conv_out_size
from . import cuda_kernels


def axes_tuple(value: int | Sequence[int], d: int) -> tuple[int, ...]:
    """An int or per-axis sequence as ``d`` ints (already validated by the shape rule)."""
    if isinstance(value, int | np.integer):
        return (int(value),) * d
    return tuple(int(v) for v in value)


def out_sizes(op: str, spatial: Shape, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], context: str) -> tuple[int, ...]:
    """Output size per axis, ``(n + 2p - k) // s + 1``; ``ShapeError`` where the kernel does
    not fit the padded input (``context``, the whole input's description, ends that message)."""
    for n, k, p in zip(spatial, kernel, padding, strict=True):
        if n + 2 * p < k:
            raise ShapeError(f"{op}: kernel {tuple(kernel)} larger than padded input "
                             f"{tuple(spatial)} with padding {tuple(padding)} ({context})")
    return tuple(conv_out_size(op, n, k, s, p)
                 for n, k, s, p in zip(spatial, kernel, stride, padding, strict=True))


def pad_spatial(x: Any, padding: tuple[int, ...], fill: float = 0.0) -> Any:
    """Pad the trailing ``len(padding)`` axes symmetrically with ``fill`` (no copy if no pad)."""
    if not any(padding):
        return x
    d = len(padding)
    lead = x.shape[: x.ndim - d]
    spatial = x.shape[x.ndim - d:]
    shape = lead + tuple(n + 2 * p for n, p in zip(spatial, padding, strict=True))
    xp = namespace_of(x)
    buf = xp.full(shape, fill, dtype=x.dtype) if fill else xp.zeros(shape, dtype=x.dtype)
    inner = (Ellipsis,) + tuple(slice(p, p + n) for n, p in zip(spatial, padding, strict=True))
    buf[inner] = x
    return buf


def crop_spatial(x: Any, padding: tuple[int, ...], out: tuple[int, ...]) -> Any:
    """The inner block ``[p : p + out]`` of the trailing axes (a view when nothing to crop)."""
    if not any(padding) and tuple(x.shape[x.ndim - len(out):]) == tuple(out):
        return x
    return x[(Ellipsis,) + tuple(slice(p, p + o) for p, o in zip(padding, out, strict=True))]


def window_view(padded: Any, kernel: tuple[int, ...], stride: tuple[int, ...],
                kernel_first: bool, writeable: bool = False) -> Any:
    """A strided view (read-only unless ``writeable``) of the sliding windows over the trailing
    ``d`` axes of ``padded``.

    Shape ``lead + kernel + out`` when ``kernel_first`` (im2col order) else ``lead + out +
    kernel`` (pooling order); ``out[i] = (n[i] - k[i]) // s[i] + 1``. No data is copied. On a
    device the view is the device namespace's ``as_strided`` (CuPy's takes no ``writeable``).
    Only non-overlapping windows (stride >= kernel) may be asked for ``writeable``.
    """
    d = len(kernel)
    lead = padded.shape[: padded.ndim - d]
    spatial = padded.shape[padded.ndim - d:]
    strides = padded.strides
    lead_st, sp_st = strides[: padded.ndim - d], strides[padded.ndim - d:]
    out = tuple((n - k) // s + 1 for n, k, s in zip(spatial, kernel, stride, strict=True))
    out_st = tuple(st * s for st, s in zip(sp_st, stride, strict=True))
    if kernel_first:
        shape, st = lead + kernel + out, lead_st + sp_st + out_st
    else:
        shape, st = lead + out + kernel, lead_st + out_st + sp_st
    xp = namespace_of(padded)
    if xp is np:
        return as_strided(padded, shape=shape, strides=st, writeable=writeable)
    return xp.lib.stride_tricks.as_strided(padded, shape=shape, strides=st)


def kernel_offsets(kernel: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Kernel offsets in row-major window order."""
    return list(itertools.product(*(range(k) for k in kernel)))


def scatter_windows(cols: Any, full: tuple[int, ...], stride: tuple[int, ...],
                    kernel_first: bool) -> Any:
    """col2im: sum window entries back into an array whose trailing axes have size ``full``.

    ``cols`` has shape ``lead + kernel + out`` (``kernel_first``) or ``lead + out + kernel``.
    Non-overlapping windows (stride == kernel) are written in one strided copy; otherwise one
    strided in-place add per kernel offset. On real CuPy the latter is one gather kernel
    (``cuda_kernels.scatter_windows``: each cell sums its windows' entries in the same order)
    instead of ``prod(kernel)`` launches.
    """
    d = len(full)
    if kernel_first:
        lead = cols.shape[: cols.ndim - 2 * d]
        kernel = cols.shape[cols.ndim - 2 * d: cols.ndim - d]
        out = cols.shape[cols.ndim - d:]
    else:
        lead = cols.shape[: cols.ndim - 2 * d]
        out = cols.shape[cols.ndim - 2 * d: cols.ndim - d]
        kernel = cols.shape[cols.ndim - d:]
    covered = tuple(o * k for o, k in zip(out, kernel, strict=True))
    xp = namespace_of(cols)
    tiled = tuple(stride) == tuple(kernel)
    if not tiled and is_cupy(xp):
        done = cuda_kernels.scatter_windows(xp, cols, lead, tuple(full), tuple(kernel), tuple(out),
                                            tuple(stride), kernel_first)
        if done is not None:
            return done
    buf = xp.zeros(lead + tuple(full), dtype=cols.dtype)
    if tiled:
        # Windows tile a leading block exactly: one strided copy into that block.
        region = buf[(Ellipsis,) + tuple(slice(0, c) for c in covered)]
        if xp is not np:
            # Through a writeable window view built from strides: a view on every backend,
            # where CuPy's reshape of a sliced block could silently copy (losing the write).
            window_view(region, tuple(kernel), tuple(stride), kernel_first,
                        writeable=True)[...] = cols
            return buf
        # NumPy: split each axis (n -> o, k), a view by NumPy's reshape rule, and cheaper for
        # small arrays than as_strided.
        nl = len(lead)
        split = region.reshape(lead + tuple(itertools.chain.from_iterable(zip(out, kernel,
                                                                              strict=True))))
        # split axes: lead, o0, k0, o1, k1, ...; bring them to the order of ``cols``.
        o_axes = tuple(nl + 2 * i for i in range(d))
        k_axes = tuple(nl + 2 * i + 1 for i in range(d))
        order = tuple(range(nl)) + (k_axes + o_axes if kernel_first else o_axes + k_axes)
        split.transpose(order)[...] = cols
        return buf
    for offset in kernel_offsets(kernel):
        target = (Ellipsis,) + tuple(
            slice(i, i + s * (o - 1) + 1, s) for i, s, o in zip(offset, stride, out, strict=True))
        if kernel_first:
            source = (Ellipsis,) + offset + (slice(None),) * d
        else:
            source = (Ellipsis,) + offset
        view = buf[target]
        xp.add(view, cols[source], out=view)  # in place: no write-back through __setitem__
    return buf
