"""Reference definitions of the convolution primitives, as explicit sums over kernel offsets.

Notation (every definition below): ``d`` spatial axes; an input is ``(C, n...)`` or
``(N, C, n...)`` and ``lead`` is its batch index (empty for an unbatched input); stride ``s`` and
padding ``p`` are per axis. ``xpad`` is ``x`` padded with ``p`` zeros at both ends of each spatial
axis: ``xpad[lead, c, t] = x[lead, c, t - p]`` when ``0 <= t - p < n`` and ``0`` otherwise, so a
padded cell adds nothing to a sum. Windows: output position ``i`` reads ``xpad`` at ``i * s + q``
for the kernel offsets ``q`` (see ``_calls.window_cells``). All definitions use only ``+`` and
``*``, so they are exact over ``Fraction``.
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
from .scalar import constant


def _correlate(w: np.ndarray, x: np.ndarray, b: np.ndarray | None, stride: Any,
               padding: Any) -> np.ndarray:
    """``out[lead, o, i] = sum_{c, q} w[o, c, q] * xpad[lead, c, i*s + q]`` (+ ``b[o]``)."""
    d = w.ndim - 2
    s, p = per_axis(stride, d), per_axis(padding, d)
    kernel: Index = tuple(w.shape[2:])
    nlead = x.ndim - d - 1
    spatial: Index = tuple(x.shape[nlead + 1:])
    out_spatial = tuple(window_out_size(n, k, ss, pp)
                        for n, k, ss, pp in zip(spatial, kernel, s, p, strict=True))
    zero = constant(0, sample_entry(w, x))
    out = np.empty(x.shape[:nlead] + (w.shape[0],) + out_spatial, dtype=object)
    for idx in np.ndindex(*out.shape):
        lead, o, i = idx[:nlead], idx[nlead], idx[nlead + 1:]
        total = zero
        for c in range(w.shape[1]):
            for q, pos in window_cells(i, kernel, s, p):
                if inside(pos, spatial):  # a padded cell is zero: it adds nothing
                    total = total + w[(o, c) + q] * x[lead + (c,) + pos]
        out[idx] = total if b is None else total + b[o]
    return out


def _scatter_transpose(w: np.ndarray, x: np.ndarray, b: np.ndarray | None, stride: Any,
                       padding: Any, output_padding: Any) -> np.ndarray:
    """Each input cell ``x[lead, c, i]`` adds ``w[c, o, q] * x[lead, c, i]`` to output position
    ``i*s + q - p`` of channel ``o`` (dropped when outside the output), then ``+ b[o]``."""
    d = w.ndim - 2
    s, p, extra = per_axis(stride, d), per_axis(padding, d), per_axis(output_padding, d)
    kernel: Index = tuple(w.shape[2:])
    nlead = x.ndim - d - 1
    spatial: Index = tuple(x.shape[nlead + 1:])
    # The full scatter covers (n - 1)*s + k cells (+ output_padding at the far end); the output
    # is that range with p cells cropped from each end.
    out_spatial = tuple((n - 1) * ss - 2 * pp + k + e
                        for n, ss, pp, k, e in zip(spatial, s, p, kernel, extra, strict=True))
    zero = constant(0, sample_entry(w, x))
    out = np.full(x.shape[:nlead] + (w.shape[1],) + out_spatial, zero, dtype=object)
    for idx in np.ndindex(*x.shape):
        lead, c, i = idx[:nlead], idx[nlead], idx[nlead + 1:]
        for o in range(w.shape[1]):
            for q, pos in window_cells(i, kernel, s, p):
                if inside(pos, out_spatial):  # positions in the cropped margin are dropped
                    target = lead + (o,) + pos
                    out[target] = out[target] + w[(c, o) + q] * x[idx]
    if b is not None:
        for idx in np.ndindex(*out.shape):
            out[idx] = out[idx] + b[idx[nlead]]
    return out


@define("conv_core", rational=True)
@signature_checked
def conv_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0) -> np.ndarray:
    """Bias-free cross-correlation, kernel ``w: (outC, inC, k...)``:
    ``out[lead, o, i] = sum_{c, q} w[o, c, q] * xpad[lead, c, i*s + q]`` with zero padding;
    ``out`` has ``(n + 2p - k) // s + 1`` positions per axis (windows that would run past the
    padded input are not taken)."""
    (w, x), _ = checked("conv_core", (w, x), {"stride": stride, "padding": padding})
    return _correlate(w, x, None, stride, padding)


@define("conv_transpose_core", rational=True)
@signature_checked
def conv_transpose_core(w: Any, x: Any, stride: Any = 1, padding: Any = 0,
                        output_padding: Any = 0) -> np.ndarray:
    """Bias-free transposed convolution, kernel ``w: (inC, outC, k...)``, as a scatter: every
    input cell ``x[lead, c, i]`` adds ``w[c, o, q] * x[lead, c, i]`` to ``out[lead, o, i*s + q -
    p]``. ``out`` has ``(n - 1)*s - 2p + k + output_padding`` positions per axis; contributions
    landing in the first ``p`` cells or past the end are dropped (output_padding < s extends
    the far end). This is the adjoint of ``conv_core`` in ``x``."""
    (w, x), _ = checked("conv_transpose_core", (w, x),
                        {"stride": stride, "padding": padding, "output_padding": output_padding})
    return _scatter_transpose(w, x, None, stride, padding, output_padding)


@define("conv_weight_grad", rational=True)
@signature_checked
def conv_weight_grad(a: Any, b: Any, kernel: Any = (1, 1), stride: Any = 1,
                     padding: Any = 0) -> np.ndarray:
    """The adjoint of ``conv_core`` in its kernel, for ``a`` shaped like conv's output and ``b``
    like its input: ``dW[o, c, q] = sum_{lead, i} a[lead, o, i] * bpad[lead, c, i*s + q]``
    (summed over the batch too); shape ``(a channels, b channels) + kernel``."""
    (a, b), attrs = checked("conv_weight_grad", (a, b),
                            {"kernel": kernel, "stride": stride, "padding": padding})
    k: Index = tuple(attrs["kernel"])
    d = len(k)
    s, p = per_axis(stride, d), per_axis(padding, d)
    nlead = a.ndim - d - 1
    spatial: Index = tuple(b.shape[nlead + 1:])
    zero = constant(0, sample_entry(a, b))
    out = np.empty((a.shape[nlead], b.shape[nlead]) + k, dtype=object)
    for o, c in np.ndindex(a.shape[nlead], b.shape[nlead]):
        for q in np.ndindex(*k):
            total = zero
            for idx in np.ndindex(*a.shape[:nlead], *a.shape[nlead + 1:]):
                lead, i = idx[:nlead], idx[nlead:]
                pos = tuple(ii * ss + qq - pp for ii, ss, qq, pp in zip(i, s, q, p, strict=True))
                if inside(pos, spatial):
                    total = total + a[lead + (o,) + i] * b[lead + (c,) + pos]
            out[(o, c) + q] = total
    return out


def _conv(name: str) -> Any:
    def conv(w: Any, b: Any, x: Any, stride: Any = 1, padding: Any = 0) -> np.ndarray:
        (w, b, x), _ = checked(name, (w, b, x), {"stride": stride, "padding": padding})
        return _correlate(w, x, b, stride, padding)

    conv.__name__ = conv.__qualname__ = name
    conv.__doc__ = (
        "Cross-correlation plus bias, kernel ``w: (outC, inC, k...)``, bias ``b: (outC,)``: "
        "``out[lead, o, i] = b[o] + sum_{c, q} w[o, c, q] * xpad[lead, c, i*s + q]`` with zero "
        "padding and ``(n + 2p - k) // s + 1`` positions per axis"
        + (" (2-D kernels only)." if name == "conv2d" else ".")
    )
    return define(name, rational=True)(signature_checked(conv))


def _conv_transpose(name: str) -> Any:
    def conv_transpose(w: Any, b: Any, x: Any, stride: Any = 1, padding: Any = 0,
                       output_padding: Any = 0) -> np.ndarray:
        (w, b, x), _ = checked(name, (w, b, x), {"stride": stride, "padding": padding,
                                                 "output_padding": output_padding})
        return _scatter_transpose(w, x, b, stride, padding, output_padding)

    conv_transpose.__name__ = conv_transpose.__qualname__ = name
    conv_transpose.__doc__ = (
        "Transposed convolution plus bias, kernel ``w: (inC, outC, k...)``, bias ``b: (outC,)``: "
        "every input cell ``x[lead, c, i]`` adds ``w[c, o, q] * x[lead, c, i]`` to "
        "``out[lead, o, i*s + q - p]`` (dropped outside the output), then ``b[o]`` is added "
        "everywhere; ``(n - 1)*s - 2p + k + output_padding`` positions per axis"
        + (" (2-D kernels only)." if name == "conv_transpose2d" else ".")
    )
    return define(name, rational=True)(signature_checked(conv_transpose))


conv = _conv("conv")
conv2d = _conv("conv2d")
conv_transpose = _conv_transpose("conv_transpose")
conv_transpose2d = _conv_transpose("conv_transpose2d")
