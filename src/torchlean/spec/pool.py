"""Reference definitions of the pooling primitives: max, average and smooth max pooling, and the
window helpers (max_pool_backward / max_pool_gather, pool_unfold / pool_fold) their rules use.

Geometry (every definition below): the input is ``(C, n...)`` or ``(N, C, n...)``, ``lead`` its
leading (non-spatial) index; window ``i`` reads input positions ``i * s + q - p`` for the kernel
offsets ``q`` in row-major order (``_calls.window_cells``); a position outside ``[0, n)`` is a
padded cell. There are ``(n + 2p - k) // s + 1`` windows per axis. Stride ``None`` means stride =
kernel size. An int ``kernel_size`` of an N-D op means 1-D pooling for a 2-D input, 2-D for 3-D
and 4-D inputs, 3-D for a 5-D input (pass a tuple to choose); the ``*2d`` ops are always 2-D.

What a padded cell means differs by op, as in PyTorch: max pooling ignores it (it never wins;
padding <= kernel // 2 so every window has a real cell), average pooling counts it as a zero in
the divisor (count_include_pad), smooth max pooling enters it as a 0 in the log-sum-exp.

"First maximum": within a window, the real cell ``j`` whose value is strictly greater than every
earlier real cell and at least every later one (row-major order), so ties go to the earliest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import sample_entry
from ._calls import (
    Index,
    checked,
    inside,
    per_axis,
    signature_checked,
    window_cells,
    window_out_size,
)
from .defs import define
from .reductions import _shift as exp_shift
from .scalar import constant, exp, log, select

Geometry = tuple[Index, Index, Index]  # kernel, stride, padding


def _geometry(ndim: int, kernel_size: Any, stride: Any, padding: Any,
              only: int | None) -> Geometry:
    """Kernel, stride and padding as per-axis tuples (see the module docstring for ``d``)."""
    if only is not None:
        d = only
    elif isinstance(kernel_size, int | np.integer):
        d = {2: 1, 3: 2, 4: 2, 5: 3}.get(ndim, 2)
    else:
        d = len(kernel_size)
    k = per_axis(kernel_size, d)
    s = k if stride is None else per_axis(stride, d)
    return k, s, per_axis(padding, d)


def _out_shape(shape: Index, geom: Geometry) -> Index:
    k, s, p = geom
    d = len(k)
    spatial = shape[len(shape) - d:]
    return shape[: len(shape) - d] + tuple(
        window_out_size(n, kk, ss, pp) for n, kk, ss, pp in zip(spatial, k, s, p, strict=True))


def _windows(shape: Index, geom: Geometry) -> Any:
    """Each window as ``(out_index, lead, [(q, pos, real)...])`` in row-major order."""
    k, s, p = geom
    d = len(k)
    spatial = shape[len(shape) - d:]
    for idx in np.ndindex(*_out_shape(shape, geom)):
        lead, i = idx[: len(idx) - d], idx[len(idx) - d:]
        cells = [(q, pos, inside(pos, spatial)) for q, pos in window_cells(i, k, s, p)]
        yield idx, lead, cells


def _first_max_flags(values: list[Any]) -> list[Any]:
    """1 for the first maximum of ``values`` and 0 for every other entry: entry ``j`` is the
    first maximum when it is > every earlier entry and >= every later one. On symbolic values
    each flag is a product of ``Piecewise`` indicators."""
    flags = []
    for j, v in enumerate(values):
        flag: Any = 1
        for i, u in enumerate(values):
            if i < j:
                flag = flag * select(v > u, 1, 0)
            elif i > j:
                flag = flag * select(v >= u, 1, 0)
        flags.append(flag)
    return flags


def _max_pool(x: np.ndarray, geom: Geometry) -> np.ndarray:
    out = np.empty(_out_shape(x.shape, geom), dtype=object)
    for idx, lead, cells in _windows(x.shape, geom):
        values = [x[lead + pos] for _, pos, real in cells if real]  # padded cells never win
        # The value at the first maximum, as sum_j flag_j * v_j: exactly one flag is 1 on
        # numbers, and on symbols this stays a flat sum of Piecewise products (a chain of
        # nested selects grows much larger in sympy).
        flags = _first_max_flags(values)
        best = flags[0] * values[0]
        for flag, v in zip(flags[1:], values[1:], strict=True):
            best = best + flag * v
        out[idx] = best
    return out


def _avg_pool(x: np.ndarray, geom: Geometry) -> np.ndarray:
    count = 1
    for kk in geom[0]:
        count *= kk
    zero = constant(0, sample_entry(x))
    out = np.empty(_out_shape(x.shape, geom), dtype=object)
    for idx, lead, cells in _windows(x.shape, geom):
        total = zero
        for _, pos, real in cells:
            if real:  # a padded cell is a zero in the sum, but still counted in the divisor
                total = total + x[lead + pos]
        out[idx] = total / count
    return out


def _smooth_max_pool(x: np.ndarray, beta: Any, geom: Geometry) -> np.ndarray:
    b, zero = constant(beta, sample_entry(x)), constant(0, sample_entry(x))
    out = np.empty(_out_shape(x.shape, geom), dtype=object)
    for idx, lead, cells in _windows(x.shape, geom):
        values = [x[lead + pos] if real else zero for _, pos, real in cells]
        # (1/b) log sum exp(b v) = m + (1/b) log sum exp(b (v - m)) for any m: the window's max
        # on numbers (no overflow for large b v), 0 on symbols.
        m = exp_shift(values)
        total = zero
        for v in values:
            total = total + exp(b * (v - m))
        out[idx] = m + log(total) / b
    return out


def _declare(name: str, kind: str, only: int | None, padded: bool) -> None:
    dims = "N-D" if only is None else "2-D"
    has_padding = only is None or padded

    def spec(x: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        (xs,), attrs = checked(name, (x,) + args, kwargs)
        geom = _geometry(xs.ndim, attrs["kernel_size"], attrs["stride"],
                         attrs.get("padding", 0), only)
        if kind == "max_pool":
            return _max_pool(xs, geom)
        if kind == "avg_pool":
            return _avg_pool(xs, geom)
        return _smooth_max_pool(xs, attrs["beta"], geom)

    signature = ("beta, " if kind == "smooth_max_pool" else "") + "kernel_size, stride" + (
        ", padding" if has_padding else "")
    meaning = {
        "max_pool": "out[lead, i] = the largest value over the window's real cells (padded "
                    "cells are ignored; padding <= kernel // 2).",
        "avg_pool": "out[lead, i] = (sum of the window's real cells) / prod(kernel): a padded "
                    "cell counts as 0 in the sum and as a cell in the divisor.",
        "smooth_max_pool": "out[lead, i] = (1/beta) * log(sum over the window's cells of "
                           "exp(beta * v)), a padded cell entering with v = 0; beta > 0 (evaluated "
                           "shifted by the window's max on numbers, so it never overflows).",
    }[kind]
    spec.__name__ = spec.__qualname__ = name
    spec.__doc__ = f"{dims} {kind.replace('_', ' ')}, {name}(x, {signature}): {meaning}"
    define(name, rational=kind != "smooth_max_pool")(spec)


_declare("max_pool", "max_pool", None, True)
_declare("max_pool2d", "max_pool", 2, False)
_declare("max_pool2d_pad", "max_pool", 2, True)
_declare("avg_pool", "avg_pool", None, True)
_declare("avg_pool2d", "avg_pool", 2, False)
_declare("avg_pool2d_pad", "avg_pool", 2, True)
_declare("smooth_max_pool", "smooth_max_pool", None, True)
_declare("smooth_max_pool2d", "smooth_max_pool", 2, False)


# ---------------------------------------------------------------------------------------------
# Helper primitives (kernel_size, stride, padding are per-axis tuples; d = len(kernel_size)).


def _helper_geometry(kernel_size: Any, stride: Any, padding: Any) -> Geometry:
    return _geometry(0, tuple(kernel_size), stride, padding, len(tuple(kernel_size)))


@define("max_pool_backward", rational=True)
@signature_checked
def max_pool_backward(x: Any, g: Any, kernel_size: Any, stride: Any, padding: Any
                      ) -> np.ndarray:
    """Max pooling's VJP: ``out[lead, t] = sum of g[lead, i] over the windows i whose first
    maximum of x (real cells only) is at position t``; 0 where no window's maximum lies. Shape of
    ``x``. Linear in ``g``; ``x`` only selects positions."""
    (x, g), _ = checked("max_pool_backward", (x, g),
                        {"kernel_size": kernel_size, "stride": stride, "padding": padding})
    out = np.full(x.shape, constant(0, sample_entry(x, g)), dtype=object)
    for idx, lead, cells in _windows(x.shape, _helper_geometry(kernel_size, stride, padding)):
        real = [pos for _, pos, is_real in cells if is_real]
        for pos, flag in zip(real, _first_max_flags([x[lead + pos] for pos in real]),
                             strict=True):
            out[lead + pos] = out[lead + pos] + flag * g[idx]
    return out


@define("max_pool_gather", rational=True)
@signature_checked
def max_pool_gather(x: Any, h: Any, kernel_size: Any, stride: Any, padding: Any) -> np.ndarray:
    """``out[lead, i] = h[lead, t]`` where ``t`` is window i's first maximum of x (real cells
    only), written as ``sum_j flag_j * h[lead, pos_j]`` with the 0/1 first-maximum flags.
    Max pooling's JVP and the adjoint of max_pool_backward in g."""
    (x, h), _ = checked("max_pool_gather", (x, h),
                        {"kernel_size": kernel_size, "stride": stride, "padding": padding})
    geom = _helper_geometry(kernel_size, stride, padding)
    out = np.empty(_out_shape(x.shape, geom), dtype=object)
    for idx, lead, cells in _windows(x.shape, geom):
        real = [pos for _, pos, is_real in cells if is_real]
        flags = _first_max_flags([x[lead + pos] for pos in real])
        total = constant(0, sample_entry(h))
        for pos, flag in zip(real, flags, strict=True):
            total = total + flag * h[lead + pos]
        out[idx] = total
    return out


@define("pool_unfold", rational=True)
@signature_checked
def pool_unfold(x: Any, kernel_size: Any, stride: Any, padding: Any) -> np.ndarray:
    """The windows of zero-padded x: ``out[lead, i, j] = xpad[lead, i*s + q_j]`` where ``q_j`` is
    the j-th kernel offset in row-major order and a padded cell reads 0. Shape ``lead + windows
    + (prod(kernel),)``."""
    (x,), _ = checked("pool_unfold", (x,),
                      {"kernel_size": kernel_size, "stride": stride, "padding": padding})
    geom = _helper_geometry(kernel_size, stride, padding)
    count = 1
    for kk in geom[0]:
        count *= kk
    zero = constant(0, sample_entry(x))
    out = np.empty(_out_shape(x.shape, geom) + (count,), dtype=object)
    for idx, lead, cells in _windows(x.shape, geom):
        for j, (_, pos, real) in enumerate(cells):
            out[idx + (j,)] = x[lead + pos] if real else zero
    return out


@define("pool_fold", rational=True)
@signature_checked
def pool_fold(c: Any, spatial: Any, kernel_size: Any, stride: Any, padding: Any) -> np.ndarray:
    """The adjoint of pool_unfold (col2im): ``out[lead, t] = sum of c[lead, i, j] over the
    windows i and offsets j with i*s + q_j - p = t``; entries that fall on padded cells are
    dropped. Shape ``lead + spatial``."""
    (c,), _ = checked("pool_fold", (c,), {"spatial": spatial, "kernel_size": kernel_size,
                                          "stride": stride, "padding": padding})
    k, s, p = _helper_geometry(kernel_size, stride, padding)
    d = len(k)
    size = tuple(int(n) for n in spatial)
    nlead = c.ndim - d - 1
    out = np.full(c.shape[:nlead] + size, constant(0, sample_entry(c)), dtype=object)
    offsets = list(np.ndindex(*k))
    for idx in np.ndindex(*c.shape):
        lead, i, j = idx[:nlead], idx[nlead: nlead + d], idx[-1]
        pos = tuple(ii * ss + qq - pp for ii, ss, qq, pp in zip(i, s, offsets[j], p,
                                                                 strict=True))
        if inside(pos, size):
            out[lead + pos] = out[lead + pos] + c[idx]
    return out
