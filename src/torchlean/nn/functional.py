"""``torchlean.nn.functional``: PyTorch's functional signatures over torchlean's primitives.

Every function here takes its arguments in ``torch.nn.functional``'s order and with its keyword
names (``linear(input, weight, bias=None)``, ``conv2d(input, weight, bias, stride, padding)``,
``cross_entropy(input, target, reduction=...)``) and is built only from primitives and derived
ops of ``torchlean.engine.ops_interface`` (which keeps the seed's order, e.g.
``linear(w, b, x)``): no new kernels, so each derivative is whatever the primitives' rules
compose to. Inputs may be refs of
any owner (``Session`` refs, ``tl.Tensor``, graph variables) or plain arrays (then the value is
computed directly, without autodiff).

Arguments torch accepts but torchlean cannot honour (a pooling ``dilation``, ``inplace=True``
on session refs, ``max_norm``, ...) are refused with an ``UnsupportedArgumentError`` naming the
function and the argument, never silently ignored. Bad shapes raise ``ShapeError``, bad values
``TorchLeanError`` subclasses, each naming the function.

Plain device arrays (CuPy) are computed on their device: constants the functions make (zero
biases, one-hot rows, loss weights) are uploaded explicitly next to them, and class-index values
that a check needs are read back explicitly; refs' constants become const leaves of their owner,
which places them.

Known differences from torch: ``mse_loss``/``l1_loss`` require equal shapes (torch broadcasts
with a warning); integer class targets given as refs whose values are unknown while tracing a
graph cannot be range-checked and then give no ``ignore_index``/``weight`` support; dropout on
plain arrays needs ``training=False`` (the random mask comes from a session's seeded stream).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.backend import namespace_of, on_host, to_device, to_host
from ..core.errors import (
    IndexRangeError,
    ShapeError,
    TorchLeanError,
    TraceError,
    UnsupportedArgumentError,
)
from ..core.registry import REGISTRY
from ..engine import ops_interface as F
from ..engine.ops_interface import Ref
from ..engine.tensor import Tensor, record_floats, tensor
from ..engine.torch_methods import apply_inplace
from .bags import dropout1d, dropout2d, dropout3d, embedding_bag
from .sampling import affine_grid, grid_sample, linear_resize

__all__ = [
    "UnsupportedArgumentError",
    "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm",
    "binary_cross_entropy_with_logits", "conv1d", "conv2d", "conv3d", "conv_transpose2d",
    "cross_entropy", "dropout", "elu", "embedding", "gelu", "hardtanh", "huber_loss", "l1_loss",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "masked_fill",
    "max_pool1d", "max_pool2d", "max_pool3d", "mse_loss", "nll_loss", "one_hot", "pad", "relu",
    "relu6",
    "sigmoid", "silu", "smooth_l1_loss", "softmax", "softplus", "tanh",
]

_REDUCTIONS = ("mean", "sum", "none")


# ---------------------------------------------------------------------------------------------
# Argument checks


_LINEAR = REGISTRY["linear"]
_LAYER_NORM = REGISTRY["layer_norm"]


def _tensor(fn: str, name: str, x: Any) -> Any:
    """``x`` as a ref (unchanged) or a numeric NumPy array; anything else is refused."""
    if isinstance(x, Ref):
        return x
    if x is None or isinstance(x, str | bytes | dict | set):
        raise ShapeError(f"{fn}: {name} must be a tensor (a ref or a numeric array), found "
                         f"{type(x).__name__}")
    if hasattr(x, "__array_namespace__") and not on_host(x):  # a device array stays there
        if x.dtype.kind not in "fiub":
            raise ShapeError(f"{fn}: {name} must be numeric, found dtype {x.dtype}")
        return x
    try:
        arr = np.asarray(to_host(x))
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{fn}: {name} must be a rectangular numeric array, found "
                         f"{type(x).__name__} ({exc})") from None
    if arr.dtype.kind not in "fiub":
        raise ShapeError(f"{fn}: {name} must be numeric, found dtype {arr.dtype}")
    return arr


def _float_tensor(fn: str, name: str, x: Any) -> Any:
    """A tensor argument that carries values (integer data becomes float64, as torch refuses
    integer inputs to these ops but NumPy users often pass them)."""
    x = _tensor(fn, name, x)
    if not isinstance(x, Ref) and x.dtype.kind != "f":
        x = x.astype(np.float64)
    return x


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))


def _dtype(x: Any) -> np.dtype:
    return np.dtype(x.dtype)


def _const(like: Any, array: Any) -> Any:
    """A constant array in ``like``'s dtype: a host array next to a ref (F turns it into a const
    leaf of the owner) or a host array, uploaded explicitly next to a plain device array."""
    arr = np.asarray(array, dtype=_dtype(like))
    if isinstance(like, Ref) or isinstance(like, np.ndarray) or on_host(like):
        return arr
    return to_device(arr, namespace_of(like))


def _reduction(fn: str, reduction: Any) -> str:
    if reduction not in _REDUCTIONS:
        raise TorchLeanError(f"{fn}: reduction must be one of {_REDUCTIONS}, found {reduction!r}")
    return str(reduction)


def _legacy_reduction(fn: str, size_average: Any, reduce: Any, reduction: Any) -> Any:
    """``reduction``, or what torch's deprecated ``size_average``/``reduce`` say when either is
    given (torch's ``legacy_get_string``: ``reduce=False`` is 'none', else ``size_average``
    False is 'sum', else 'mean')."""
    if size_average is None and reduce is None:
        return reduction
    for name, value in (("size_average", size_average), ("reduce", reduce)):
        if value is not None and not isinstance(value, bool):
            raise TorchLeanError(f"{fn}: {name} must be a bool or None, found {value!r}")
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _int(fn: str, name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TorchLeanError(f"{fn}: {name} must be an int, found {value!r}")
    if minimum is not None and value < minimum:
        raise TorchLeanError(f"{fn}: {name} must be >= {minimum}, found {value}")
    return int(value)


def _pair(fn: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (torch's ``_pair``), each >= minimum."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        pair: tuple[Any, ...] = (value, value)
    elif isinstance(value, tuple | list):
        pair = tuple(value)
    else:
        pair = ()
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int | np.integer)
                             for v in pair):
        raise TorchLeanError(f"{fn}: {name} must be an int or a pair of ints, found {value!r}")
    if min(pair) < minimum:
        raise TorchLeanError(f"{fn}: {name} must be >= {minimum}, found {value!r}")
    return int(pair[0]), int(pair[1])


def _require(fn: str, name: str, value: Any, allowed: Any) -> None:
    """Refuse a torch argument whose only supported value is ``allowed``."""
    ok = value == allowed if not isinstance(allowed, tuple) else value in allowed
    if isinstance(value, tuple | list) and not isinstance(allowed, tuple):
        ok = all(v == allowed for v in value)
    if not ok:
        raise UnsupportedArgumentError(f"{fn}: {name}={value!r} is not supported (only "
                                       f"{allowed!r})")


def _dim(fn: str, dim: Any, ndim: int) -> int:
    if dim is None:
        raise TorchLeanError(f"{fn}: give dim explicitly (torch's implicit dim choice is "
                             "deprecated)")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise TorchLeanError(f"{fn}: dim must be an int, found {dim!r}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise ShapeError(f"{fn}: dim {dim} out of range for a {ndim}-D input")
    return int(dim) % max(ndim, 1)


def _values(fn: str, name: str, x: Any) -> np.ndarray | None:
    """The values of ``x`` when they are known (arrays, eager refs); None while tracing."""
    if not isinstance(x, Ref):
        return np.asarray(to_host(x))  # a device array's values: one explicit readback
    try:
        return np.asarray(to_host(x.owner.value(x)))
    except TraceError:
        return None
    except (AttributeError, NotImplementedError):
        return None


def _move_last(x: Any, dim: int) -> tuple[Any, tuple[int, ...] | None]:
    """``x`` with axis ``dim`` moved last, and the permutation that moves it back (or None)."""
    n = len(_shape(x))
    if dim == n - 1:
        return x, None
    perm = tuple(i for i in range(n) if i != dim) + (dim,)
    back = tuple(int(i) for i in np.argsort(perm))
    return F.apply("permute", x, perm=perm), back


def _restore(x: Any, back: tuple[int, ...] | None) -> Any:
    return x if back is None else F.apply("permute", x, perm=back)


# ---------------------------------------------------------------------------------------------
# Linear and convolution layers


def linear(input: Any, weight: Any, bias: Any = None) -> Any:
    """``input @ weight.T + bias`` for ``input (..., in)``, ``weight (out, in)``, ``bias (out,)``.
    """
    if isinstance(input, Tensor) and isinstance(weight, Tensor) and isinstance(bias, Tensor):
        # The common call (a layer's tensors): one float dtype on the host, shapes that fit.
        ws, xs = weight.shape, input.shape
        if len(ws) == 2 and xs and xs[-1] == ws[1] and bias.shape == (ws[0],):
            out = record_floats(_LINEAR, (weight, bias, input))
            if out is not None:
                return out
    x = _float_tensor("linear", "input", input)
    w = _float_tensor("linear", "weight", weight)
    ws, xs = _shape(w), _shape(x)
    if len(ws) != 2:
        raise ShapeError(f"linear: weight must be 2-D (out_features, in_features), found {ws}; "
                         "torch's order is linear(input, weight, bias)")
    if not xs or xs[-1] != ws[1]:
        raise ShapeError(f"linear: input's last axis must be in_features = {ws[1]} (weight "
                         f"{ws}), found input {xs}; torch's order is linear(input, weight, bias)")
    b = (_const(w, np.zeros(ws[0])) if bias is None
         else _float_tensor("linear", "bias", bias))
    if _shape(b) != (ws[0],):
        raise ShapeError(f"linear: bias must have shape ({ws[0]},), found {_shape(b)}")
    return F.apply("linear", w, b, x)


def _ntuple(fn: str, name: str, value: Any, d: int, minimum: int) -> tuple[int, ...]:
    """An int or ``d`` ints (torch's ``_single`` / ``_pair`` / ``_triple``), each >= minimum."""
    if d == 2:
        return _pair(fn, name, value, minimum)
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        values: tuple[Any, ...] = (value,) * d
    elif isinstance(value, tuple | list):
        values = tuple(value)
    else:
        values = ()
    if len(values) != d or any(isinstance(v, bool) or not isinstance(v, int | np.integer)
                               for v in values):
        raise TorchLeanError(f"{fn}: {name} must be an int or {d} ints, found {value!r}")
    if min(values) < minimum:
        raise TorchLeanError(f"{fn}: {name} must be >= {minimum}, found {value!r}")
    return tuple(int(v) for v in values)


def _conv_padding(fn: str, padding: Any, kernel: tuple[int, ...], stride: tuple[int, ...],
                  dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The (before, after) zero padding of each spatial axis; ``'same'`` pads the extra entry
    of an odd total after, as torch does (stride 1 only, as torch)."""
    if padding == "valid":
        return ((0, 0),) * len(kernel)
    if padding == "same":
        if any(v != 1 for v in stride):
            raise TorchLeanError(f"{fn}: padding='same' is not supported for strided "
                                 f"convolutions, found stride {stride}")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in _ntuple(fn, "padding", padding, len(kernel), 0))


def _dilate(w: Any, dilation: tuple[int, ...]) -> Any:
    """The weight with ``dilation - 1`` zero taps between its taps on each spatial axis (a
    dilated convolution is the ordinary one with this kernel): a zero slice is appended to the
    axis and the taps gathered from it, so the gradient reaches the real taps only."""
    ws = _shape(w)
    for i, r in enumerate(dilation):
        if r == 1:
            continue
        axis, k = 2 + i, ws[2 + i]
        amounts = [0] * (2 * (len(ws) - 1 - axis)) + [0, 1]
        extended = pad(w, amounts)
        taps = np.arange((k - 1) * r + 1)
        source = np.where(taps % r == 0, taps // r, k)
        w = extended[(slice(None),) * axis + (source,)]
    return w


def _groups(fn: str, groups: Any, c_in: int, c_out: int) -> int:
    g = _int(fn, "groups", groups, 1)
    if c_in % g or c_out % g:
        raise ShapeError(f"{fn}: in_channels ({c_in}) and out_channels ({c_out}) must both be "
                         f"divisible by groups ({g})")
    return g


_LAYOUTS = {1: "(C, L) or (N, C, L)", 2: "(C, H, W) or (N, C, H, W)",
            3: "(C, D, H, W) or (N, C, D, H, W)"}


def _conv_args(fn: str, d: int, input: Any, weight: Any, bias: Any, out_axis: int
               ) -> tuple[Any, Any, Any]:
    x = _float_tensor(fn, "input", input)
    w = _float_tensor(fn, "weight", weight)
    xs, ws = _shape(x), _shape(w)
    if len(ws) != d + 2:
        raise ShapeError(f"{fn}: weight must be {d + 2}-D, found {ws}; torch's order is "
                         f"{fn}(input, weight, bias, ...)")
    if len(xs) not in (d + 1, d + 2):
        raise ShapeError(f"{fn}: input must be {_LAYOUTS[d]}, found {xs}; torch's order is "
                         f"{fn}(input, weight, bias, ...)")
    out_channels = ws[out_axis]
    b = (_const(w, np.zeros(out_channels)) if bias is None
         else _float_tensor(fn, "bias", bias))
    if _shape(b) != (out_channels,):
        raise ShapeError(f"{fn}: bias must have shape ({out_channels},), found {_shape(b)}")
    return x, w, b


def _conv(fn: str, d: int, input: Any, weight: Any, bias: Any, stride: Any, padding: Any,
          dilation: Any, groups: Any) -> Any:
    x, w, b = _conv_args(fn, d, input, weight, bias, 0)
    s = _ntuple(fn, "stride", stride, d, 1)
    dil = _ntuple(fn, "dilation", dilation, d, 1)
    xs, ws = _shape(x), _shape(w)
    channel = len(xs) - d - 1
    g = _groups(fn, groups, xs[channel], ws[0])
    if ws[1] * g != xs[channel]:
        raise ShapeError(f"{fn}: weight {ws} with groups={g} expects {ws[1] * g} input "
                         f"channels, found input {xs}")
    amounts = _conv_padding(fn, padding, ws[2:], s, dil)
    if any(a != b for a, b in amounts):  # uneven ('same' with an even extent): pad explicitly
        x = pad(x, [v for pair in reversed(amounts) for v in pair])
        amounts = ((0, 0),) * d
    p = tuple(a for a, _ in amounts)
    w = _dilate(w, dil)
    op = "conv2d" if d == 2 else "conv"
    if g == 1:
        return F.apply(op, w, b, x, stride=s, padding=p)
    # groups: each group of input channels convolved with its block of filters, then joined
    ci, co = xs[channel] // g, ws[0] // g
    outs = []
    for k in range(g):
        xk = x[(slice(None),) * channel + (slice(k * ci, (k + 1) * ci),)]
        outs.append(F.apply(op, w[k * co:(k + 1) * co], b[k * co:(k + 1) * co], xk, stride=s,
                            padding=p))
    return F.cat(outs, channel)


def conv1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Any:
    """1-D cross-correlation over ``(N, C_in, L)`` or ``(C_in, L)``; weight ``(C_out, C_in, k)``.
    """
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Any:
    """2-D cross-correlation: ``input (N, C_in, H, W)`` or ``(C_in, H, W)``, ``weight (C_out,
    C_in / groups, kH, kW)``; ``padding`` an int, a pair, ``'valid'`` or ``'same'`` (stride 1;
    an odd total pads its extra entry after, as torch); ``dilation`` and ``groups`` as torch.
    """
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Any:
    """3-D cross-correlation over ``(N, C_in, D, H, W)``; weight ``(C_out, C_in, kD, kH, kW)``."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Any:
    """2-D transposed convolution; ``weight (C_in, C_out / groups, kH, kW)`` as in torch.
    ``dilation`` spreads the kernel's taps (zeros between them); ``groups`` splits the input
    channels and the weight's first axis into that many independent convolutions."""
    fn = "conv_transpose2d"
    x, w, _ = _conv_args(fn, 2, input, weight, None, 1)
    xs, ws = _shape(x), _shape(w)
    channel = len(xs) - 3
    g = _int(fn, "groups", groups, 1)
    if ws[0] != xs[channel] or ws[0] % g:
        raise ShapeError(f"{fn}: weight {ws} with groups={g} expects {ws[0]} input channels "
                         f"(divisible by groups), found input {xs}")
    out_channels = ws[1] * g
    b = (_const(w, np.zeros(out_channels)) if bias is None
         else _float_tensor(fn, "bias", bias))
    if _shape(b) != (out_channels,):
        raise ShapeError(f"{fn}: bias must have shape ({out_channels},), found {_shape(b)}")
    s = _pair(fn, "stride", stride, 1)
    p = _pair(fn, "padding", padding, 0)
    op = _pair(fn, "output_padding", output_padding, 0)
    w = _dilate(w, _pair(fn, "dilation", dilation, 1))
    if g == 1:
        return F.apply("conv_transpose2d", w, b, x, stride=s, padding=p, output_padding=op)
    ci, co = ws[0] // g, ws[1]
    outs = [F.apply("conv_transpose2d", w[k * ci:(k + 1) * ci], b[k * co:(k + 1) * co],
                    x[(slice(None),) * channel + (slice(k * ci, (k + 1) * ci),)], stride=s,
                    padding=p, output_padding=op) for k in range(g)]
    return F.cat(outs, channel)


# ---------------------------------------------------------------------------------------------
# Pooling


def _pool_args(fn: str, d: int, input: Any, kernel_size: Any, stride: Any, padding: Any
               ) -> tuple[Any, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    x = _float_tensor(fn, "input", input)
    if len(_shape(x)) not in (d + 1, d + 2):
        raise ShapeError(f"{fn}: input must be {_LAYOUTS[d]}, found {_shape(x)}")
    k = _ntuple(fn, "kernel_size", kernel_size, d, 1)
    s = k if stride is None or (isinstance(stride, tuple | list) and not stride) else _ntuple(
        fn, "stride", stride, d, 1)
    p = _ntuple(fn, "padding", padding, d, 0)
    if any(pi > ki // 2 for pi, ki in zip(p, k, strict=True)):
        raise ShapeError(f"{fn}: padding {p} must be at most half the kernel size {k} (as torch)")
    return x, k, s, p


def _pool_sizes(fn: str, spatial: tuple[int, ...], k: tuple[int, ...], s: tuple[int, ...],
                p: tuple[int, ...], ceil_mode: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """torch's output sizes (``pooling_output_shape``) and the extra padding after each axis
    that ``ceil_mode`` needs for its last, partial window."""
    if not isinstance(ceil_mode, bool | np.bool_):
        raise TorchLeanError(f"{fn}: ceil_mode must be a bool, found {ceil_mode!r}")
    sizes, extra = [], []
    for n, ki, si, pi in zip(spatial, k, s, p, strict=True):
        out = (n + 2 * pi - ki + (si - 1 if ceil_mode else 0)) // si + 1
        if ceil_mode and (out - 1) * si >= n + pi:
            out -= 1  # the last window must start inside the input or its left padding
        if out < 1:
            raise ShapeError(f"{fn}: kernel {k} with padding {p} is larger than the input's "
                             f"spatial size {spatial}")
        sizes.append(out)
        extra.append(max(0, (out - 1) * si + ki - (n + 2 * pi)))
    return tuple(sizes), tuple(extra)


def _padded(x: Any, p: tuple[int, ...], extra: tuple[int, ...], fill: float) -> Any:
    """``x`` padded by ``p`` before and ``p + extra`` after each spatial axis with ``fill``."""
    amounts = [v for pi, e in zip(reversed(p), reversed(extra), strict=True)
               for v in (pi, pi + e)]
    return x if not any(amounts) else pad(x, amounts, value=fill)


def _max_indices(fn: str, x: Any, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...],
                 extra: tuple[int, ...]) -> Any:
    """torch's ``return_indices``: per output, the flat spatial index (into the unpadded
    input) of its window's first maximum, from the input's values."""
    values = _values(fn, "input", x)
    if values is None:
        raise UnsupportedArgumentError(f"{fn}: return_indices=True needs the input's values, "
                                       "which a traced graph does not have")
    d = len(k)
    spatial = values.shape[-d:]
    widths = [(0, 0)] * (values.ndim - d) + [(pi, pi + e) for pi, e in zip(p, extra,
                                                                              strict=True)]
    full = np.pad(values.astype(np.float64), widths, constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(full, k, axis=tuple(range(-d, 0)))
    windows = windows[(Ellipsis,) + tuple(slice(None, None, si) for si in s)
                      + (slice(None),) * d]
    lead = windows.shape[:values.ndim]
    local = np.argmax(windows.reshape(lead + (-1,)), axis=-1)  # the first maximum (NaN wins)
    offsets = np.unravel_index(local, k)
    flat = np.zeros(lead, dtype=np.int64)
    for axis in range(d):
        starts = np.arange(lead[values.ndim - d + axis]) * s[axis] - p[axis]
        shape = [1] * len(lead)
        shape[values.ndim - d + axis] = -1
        flat = flat * spatial[axis] + starts.reshape(shape) + offsets[axis]
    return tensor(flat) if isinstance(x, Tensor) else flat


def _max_pool(fn: str, d: int, input: Any, kernel_size: Any, stride: Any, padding: Any,
              dilation: Any, ceil_mode: Any, return_indices: Any) -> Any:
    _require(fn, "dilation", dilation, 1)
    x, k, s, p = _pool_args(fn, d, input, kernel_size, stride, padding)
    _, extra = _pool_sizes(fn, _shape(x)[-d:], k, s, p, ceil_mode)
    if any(extra):
        # the partial windows of ceil_mode: pad with the lowest finite value, which never wins
        # a window (each holds an input entry); NaN-free, unlike -inf * 0 in a padded sum
        out = F.apply("max_pool2d" if d == 2 else "max_pool",
                      _padded(x, p, extra, float(np.finfo(_dtype(x)).min)), kernel_size=k,
                      stride=s, **({} if d == 2 else {"padding": (0,) * d}))
    elif d != 2:
        out = F.apply("max_pool", x, kernel_size=k, stride=s, padding=p)
    elif p == (0, 0):
        out = F.apply("max_pool2d", x, kernel_size=k, stride=s)
    else:
        out = F.apply("max_pool2d_pad", x, kernel_size=k, stride=s, padding=p)
    if return_indices:
        return out, _max_indices(fn, x, k, s, p, extra)
    return out


def _avg_divisors(spatial: tuple[int, ...], sizes: tuple[int, ...], k: tuple[int, ...],
                  s: tuple[int, ...], p: tuple[int, ...], count_include_pad: bool
                  ) -> np.ndarray:
    """torch's divisor of each output of an average pool: the window clipped to the padded
    input (``count_include_pad``) or to the input itself, per axis, multiplied."""
    divisor = np.ones(sizes)
    for axis, (n, o, ki, si, pi) in enumerate(zip(spatial, sizes, k, s, p, strict=True)):
        start = np.arange(o) * si - pi
        end = np.minimum(start + ki, n + pi)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        shape = [1] * len(sizes)
        shape[axis] = o
        divisor = divisor * (end - start).reshape(shape)
    return divisor


def _avg_pool(fn: str, d: int, input: Any, kernel_size: Any, stride: Any, padding: Any,
              ceil_mode: Any, count_include_pad: Any, divisor_override: Any = None) -> Any:
    x, k, s, p = _pool_args(fn, d, input, kernel_size, stride, padding)
    spatial = _shape(x)[-d:]
    sizes, extra = _pool_sizes(fn, spatial, k, s, p, ceil_mode)
    if divisor_override is not None:
        divisor_override = _int(fn, "divisor_override", divisor_override, 1)
    if not any(extra) and count_include_pad and divisor_override is None:
        if d != 2:
            return F.apply("avg_pool", x, kernel_size=k, stride=s, padding=p)
        if p == (0, 0):
            return F.apply("avg_pool2d", x, kernel_size=k, stride=s)
        return F.apply("avg_pool2d_pad", x, kernel_size=k, stride=s, padding=p)
    # The window sums (a mean over the zero-padded full windows), rescaled per output by
    # torch's divisor for that window.
    padded = _padded(x, p, extra, 0.0)
    if d == 2:
        means = F.apply("avg_pool2d", padded, kernel_size=k, stride=s)
    else:
        means = F.apply("avg_pool", padded, kernel_size=k, stride=s, padding=(0,) * d)
    divisor = (np.full(sizes, float(divisor_override)) if divisor_override is not None
               else _avg_divisors(spatial, sizes, k, s, p, bool(count_include_pad)))
    factor = np.broadcast_to(float(np.prod(k)) / divisor, _shape(means))
    return F.apply("mul", means, _const(means, factor))


def max_pool1d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """1-D max pooling; ``stride`` defaults to ``kernel_size``; padded cells never win."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """2-D max pooling; ``stride`` defaults to ``kernel_size``; padded cells never win."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool3d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """3-D max pooling; ``stride`` defaults to ``kernel_size``; padded cells never win."""
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def avg_pool1d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Any:
    """1-D average pooling; zero padding counts in the divisor (``count_include_pad=True``)."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad)


def avg_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Any = None) -> Any:
    """2-D average pooling; zero padding counts in the divisor (``count_include_pad=True``)."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def avg_pool3d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Any = None) -> Any:
    """3-D average pooling; zero padding counts in the divisor (``count_include_pad=True``)."""
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _adaptive_args(fn: str, input: Any, output_size: Any) -> tuple[Any, tuple[int, int]]:
    x = _float_tensor(fn, "input", input)
    xs = _shape(x)
    if len(xs) not in (3, 4):
        raise ShapeError(f"{fn}: input must be {_LAYOUTS[2]}, found {xs}")
    size = (output_size, output_size) if not isinstance(output_size, tuple | list) else tuple(
        xs[-2 + i] if v is None else v for i, v in enumerate(output_size))
    return x, _pair(fn, "output_size", size, 1)


def _adaptive_windows(n: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive windows: ``[floor(i n / out), ceil((i + 1) n / out))``."""
    return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Any:
    """Adaptive average pooling to ``output_size`` (an int, a pair, ``None`` keeping an axis):
    an ordinary average pool when the size divides the spatial size (equal, disjoint
    windows), else torch's overlapping windows as two constant averaging matrices."""
    fn = "adaptive_avg_pool2d"
    x, out = _adaptive_args(fn, input, output_size)
    xs = _shape(x)
    if not xs[-2] % out[0] and not xs[-1] % out[1]:
        k = (xs[-2] // out[0], xs[-1] // out[1])
        return F.apply("avg_pool2d", x, kernel_size=k, stride=k)
    if not isinstance(x, Tensor):
        raise UnsupportedArgumentError(f"{fn}: output_size {out} that does not divide the "
                                       f"spatial size {xs[-2:]} needs a tensor input, found "
                                       f"{type(x).__name__}")
    rows, cols = (np.zeros((o, n), dtype=_dtype(x)) for o, n in zip(out, xs[-2:], strict=True))
    for matrix, n, o in ((rows, xs[-2], out[0]), (cols, xs[-1], out[1])):
        for i, (a, b) in enumerate(_adaptive_windows(n, o)):
            matrix[i, a:b] = 1.0 / (b - a)
    return tensor(rows) @ x @ tensor(np.ascontiguousarray(cols.T))


def adaptive_max_pool2d(input: Any, output_size: Any, return_indices: bool = False) -> Any:
    """Adaptive max pooling: an ordinary max pool when ``output_size`` divides the spatial
    size, else the maximum of each of torch's overlapping windows (tensors)."""
    fn = "adaptive_max_pool2d"
    x, out = _adaptive_args(fn, input, output_size)
    xs = _shape(x)
    if not xs[-2] % out[0] and not xs[-1] % out[1]:
        k = (xs[-2] // out[0], xs[-1] // out[1])
        return _max_pool(fn, 2, x, k, k, 0, 1, False, return_indices)
    _require(fn, "return_indices", return_indices, False)
    if not isinstance(x, Tensor):
        raise UnsupportedArgumentError(f"{fn}: output_size {out} that does not divide the "
                                       f"spatial size {xs[-2:]} needs a tensor input, found "
                                       f"{type(x).__name__}")
    rows = [F.stack([x[..., a:b, c:e].amax(dim=(-2, -1))
                     for c, e in _adaptive_windows(xs[-1], out[1])], -1)
            for a, b in _adaptive_windows(xs[-2], out[0])]
    return F.stack(rows, -2)


# ---------------------------------------------------------------------------------------------
# Activations


def _no_inplace(fn: str, inplace: Any) -> None:
    if inplace:
        raise UnsupportedArgumentError(f"{fn}: inplace=True is not supported (values are "
                                       "immutable); use the returned tensor")


def _in_place(fn: str, input: Any, compute: Any) -> Any:
    """``inplace=True``: a tensor is overwritten with ``compute(input)`` (one recorded in-place
    op, as torch's); refs of sessions and graphs, whose values are immutable, refuse it."""
    if not isinstance(input, Tensor):
        _no_inplace(fn, True)
    return apply_inplace(input, f"{fn}_", compute)


def relu(input: Any, inplace: bool = False) -> Any:
    if inplace:
        return _in_place("relu", input, relu)
    return F.apply("relu", _float_tensor("relu", "input", input))


def _negative_part(x: Any) -> tuple[Any, Any]:
    """``(relu(x), x - relu(x))``: the second is ``min(x, 0)`` exactly, and its derivative at 0
    is 1 (relu's is 0 there), so a function built on it takes torch's ``x > 0 ? 1 : f'(x)``
    subgradient at the kink."""
    positive = F.apply("relu", x)
    return positive, F.apply("sub", x, positive)


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> Any:
    """``relu(x) + negative_slope * min(x, 0)`` (derivative ``negative_slope`` at 0, as
    torch's)."""
    if inplace:
        return _in_place("leaky_relu", input, lambda a: leaky_relu(a, negative_slope))
    if not isinstance(negative_slope, int | float) or isinstance(negative_slope, bool):
        raise TorchLeanError(f"leaky_relu: negative_slope must be a number, found "
                             f"{negative_slope!r}")
    positive, negative = _negative_part(_float_tensor("leaky_relu", "input", input))
    return F.apply("add", positive, F.apply("scale", negative, c=float(negative_slope)))


def _number(fn: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TorchLeanError(f"{fn}: {name} must be a number, found {value!r}")
    return float(value)


def hardtanh(input: Any, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Any:
    """``clamp(x, min_val, max_val)`` (the clamp primitive: derivative 0 at the bounds)."""
    if inplace:
        return _in_place("hardtanh", input, lambda a: hardtanh(a, min_val, max_val))
    lo, hi = _number("hardtanh", "min_val", min_val), _number("hardtanh", "max_val", max_val)
    if lo > hi:
        raise TorchLeanError(f"hardtanh: min_val {lo} must be <= max_val {hi}")
    return F.apply("clamp", _float_tensor("hardtanh", "input", input), lo=lo, hi=hi)


def relu6(input: Any, inplace: bool = False) -> Any:
    """``clamp(x, 0, 6)``."""
    if inplace:
        return _in_place("relu6", input, relu6)
    return F.apply("clamp", _float_tensor("relu6", "input", input), lo=0.0, hi=6.0)


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Any:
    """``relu(x) + alpha * (exp(min(x, 0)) - 1)``: x above 0, ``alpha (exp(x) - 1)`` below.
    At exactly 0 the derivative is alpha, as torch's."""
    if inplace:
        return _in_place("elu", input, lambda a: elu(a, alpha))
    a = _number("elu", "alpha", alpha)
    positive, negative = _negative_part(_float_tensor("elu", "input", input))
    below = F.apply("scale", F.apply("add_scalar", F.apply("exp", negative), c=-1.0), c=a)
    return F.apply("add", positive, below)


def logsigmoid(input: Any) -> Any:
    """``log(sigmoid(x)) = -softplus(-x)`` (stable for large |x|)."""
    x = _float_tensor("logsigmoid", "input", input)
    return F.apply("scale", F.apply("softplus", F.apply("scale", x, c=-1.0)), c=-1.0)


def gelu(input: Any, approximate: str = "none") -> Any:
    """GELU: exact ``0.5 x (1 + erf(x / sqrt 2))`` (torch's default), or ``approximate='tanh'``.
    """
    x = _float_tensor("gelu", "input", input)
    if approximate not in ("none", "tanh"):
        raise TorchLeanError(f"gelu: approximate must be 'none' or 'tanh', found "
                             f"{approximate!r}")
    return F.gelu(x, approximate=approximate)


def silu(input: Any, inplace: bool = False) -> Any:
    if inplace:
        return _in_place("silu", input, silu)
    return F.silu(_float_tensor("silu", "input", input))


def tanh(input: Any) -> Any:
    return F.apply("tanh", _float_tensor("tanh", "input", input))


def sigmoid(input: Any) -> Any:
    return F.apply("sigmoid", _float_tensor("sigmoid", "input", input))


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    """``log(1 + exp(beta x)) / beta``, and ``x`` itself where ``beta x > threshold`` (torch's
    linear region). With the default threshold the two differ by less than ``exp(-20)``, so
    the stable primitive alone is used; another threshold selects by the input's values
    (refused while tracing, where they are unknown)."""
    if not isinstance(beta, int | float) or isinstance(beta, bool) or beta <= 0:
        raise TorchLeanError(f"softplus: beta must be a positive number, found {beta!r}")
    t = _number("softplus", "threshold", threshold)
    x = _float_tensor("softplus", "input", input)
    if beta == 1:
        smooth = F.apply("softplus", x)
    else:
        smooth = F.apply("scale", F.apply("softplus", F.apply("scale", x, c=float(beta))),
                         c=1.0 / float(beta))
    if t >= 20.0:
        return smooth
    values = _values("softplus", "input", x)
    if values is None:
        raise UnsupportedArgumentError(f"softplus: threshold={threshold!r} needs the input's "
                                       "values, which a traced graph does not have (only the "
                                       "default 20 is supported there)")
    linear = np.asarray(values) * beta > t
    if not linear.any():
        return smooth
    keep = _const(x, linear)
    return F.apply("add", F.apply("mul", x, keep),
                   F.apply("mul", smooth, _const(x, ~linear)))


def _along(fn: str, prim: str, input: Any, dim: Any, dtype: Any) -> Any:
    x = _float_tensor(fn, "input", input)
    if dtype is not None:  # torch casts the input first (to compute in a wider type)
        if not isinstance(x, Tensor):
            raise UnsupportedArgumentError(f"{fn}: dtype={dtype!r} needs a tensor input, found "
                                           f"{type(x).__name__}")
        x = x.to(dtype)
    shape = _shape(x)
    if not shape:
        raise ShapeError(f"{fn}: input must have at least one axis, found a scalar")
    moved, back = _move_last(x, _dim(fn, dim, len(shape)))
    return _restore(F.apply(prim, moved), back)


def softmax(input: Any, dim: Any = None, dtype: Any = None) -> Any:
    """Softmax along ``dim`` (any axis: it is moved last, normalised, and moved back)."""
    return _along("softmax", "softmax", input, dim, dtype)


def log_softmax(input: Any, dim: Any = None, dtype: Any = None) -> Any:
    """log(softmax) along ``dim`` in the stable max-shifted form."""
    return _along("log_softmax", "log_softmax", input, dim, dtype)


# ---------------------------------------------------------------------------------------------
# Normalisation, dropout, embedding


def layer_norm(input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Any:
    """Normalise over the trailing ``normalized_shape`` axes (population variance), then
    ``* weight + bias``; several trailing axes are flattened into one for the primitive."""
    if (isinstance(input, Tensor) and isinstance(weight, Tensor) and isinstance(bias, Tensor)
            and type(eps) is float and eps > 0 and input.shape):
        # The common call (a layer's tensors over the last axis): checked here in few steps.
        d = input.shape[-1]
        ns = normalized_shape
        if type(ns) in (tuple, list) and len(ns) == 1:
            ns = ns[0]
        if type(ns) is int and ns == d and weight.shape == (d,) and bias.shape == (d,):
            out = record_floats(_LAYER_NORM, (input, weight, bias), {"eps": eps})
            if out is not None:
                return out
    x = _float_tensor("layer_norm", "input", input)
    norm = ((normalized_shape,) if isinstance(normalized_shape, int | np.integer)
            else tuple(normalized_shape) if isinstance(normalized_shape, tuple | list) else None)
    xs = _shape(x)
    if not norm or any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in norm):
        raise TorchLeanError(f"layer_norm: normalized_shape must be an int or a non-empty tuple "
                             f"of ints, found {normalized_shape!r}")
    norm = tuple(int(d) for d in norm)
    if len(norm) > len(xs) or xs[len(xs) - len(norm):] != norm:
        raise ShapeError(f"layer_norm: normalized_shape {norm} must be the trailing axes of the "
                         f"input, found input {xs}")
    if not isinstance(eps, int | float) or isinstance(eps, bool) or eps <= 0:
        raise TorchLeanError(f"layer_norm: eps must be a positive number, found {eps!r}")
    d = int(np.prod(norm))
    params = []
    for name, value, default in (("weight", weight, 1.0), ("bias", bias, 0.0)):
        if value is None:
            params.append(_const(x, np.full(d, default)))
            continue
        v = _float_tensor("layer_norm", name, value)
        if _shape(v) != norm:
            raise ShapeError(f"layer_norm: {name} must have shape {norm}, found {_shape(v)}")
        params.append(v if len(norm) == 1 else F.apply("reshape", v, shape=(d,)))
    flat = x if len(norm) == 1 else F.apply("reshape", x, shape=xs[:len(xs) - len(norm)] + (d,))
    out = F.apply("layer_norm", flat, params[0], params[1], eps=float(eps))
    return out if len(norm) == 1 else F.apply("reshape", out, shape=xs)


def batch_norm(input: Any, running_mean: Any, running_var: Any, weight: Any = None,
               bias: Any = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Any:
    """Per-channel batch normalisation of ``(N, C)``, ``(N, C, L)`` or ``(N, C, H, W)``.

    ``training=True`` normalises with the batch statistics (population variance) and, when
    ``running_mean`` / ``running_var`` are NumPy arrays, updates them in place with
    ``momentum`` (unbiased variance, as torch); that update needs the batch's values, so it is
    refused while tracing. ``training=False`` uses the running statistics (arrays, required).
    Refused: ``momentum=None`` (cumulative average), running statistics given as refs.
    """
    fn = "batch_norm"
    x = _float_tensor(fn, "input", input)
    xs = _shape(x)
    if len(xs) not in (2, 3, 4):
        raise ShapeError(f"{fn}: input must be (N, C), (N, C, L) or (N, C, H, W), found {xs}")
    c = xs[1]
    if momentum is None or not isinstance(momentum, int | float) or isinstance(momentum, bool):
        raise UnsupportedArgumentError(f"{fn}: momentum must be a number (the cumulative "
                                       f"average momentum=None is not supported), found "
                                       f"{momentum!r}")
    if not isinstance(eps, int | float) or isinstance(eps, bool) or eps <= 0:
        raise TorchLeanError(f"{fn}: eps must be a positive number, found {eps!r}")
    stats: list[np.ndarray | None] = []
    for name, value in (("running_mean", running_mean), ("running_var", running_var)):
        if value is None:
            stats.append(None)
            continue
        if isinstance(value, Tensor) and not value.requires_grad and value.device == "cpu":
            value = value.numpy()  # a buffer tensor: its own storage, updated in place
        if isinstance(value, Ref):
            raise UnsupportedArgumentError(f"{fn}: {name} must be a NumPy array (it is state, "
                                           f"updated in place), found {type(value).__name__}")
        if not isinstance(value, np.ndarray) or value.shape != (c,) or value.dtype.kind != "f":
            raise ShapeError(f"{fn}: {name} must be a float NumPy array of shape ({c},), found "
                             f"{getattr(value, 'dtype', type(value).__name__)} "
                             f"{np.shape(value)}")
        stats.append(value)
    gamma, beta = [
        _const(x, np.full(c, default)) if value is None else _float_tensor(fn, name, value)
        for name, value, default in (("weight", weight, 1.0), ("bias", bias, 0.0))]
    for name, v in (("weight", gamma), ("bias", beta)):
        if _shape(v) != (c,):
            raise ShapeError(f"{fn}: {name} must have shape ({c},), found {_shape(v)}")
    per_channel = (c,) + (1,) * (len(xs) - 2)
    if training:
        if xs[0] * int(np.prod(xs[2:], dtype=np.int64)) < 2:
            raise ShapeError(f"{fn}: training needs more than one value per channel, found "
                             f"input shape {xs}")
        update = stats[0] is not None or stats[1] is not None
        batch = None
        if update:
            batch = _values(fn, "input", x)
            if batch is None:
                raise TraceError(f"{fn}: training=True with running statistics needs the "
                                 "batch's values, which a traced graph does not have")
        # The primitive takes (N, C, H, W): (N, C) and (N, C, L) gain unit spatial axes.
        x4 = x if len(xs) == 4 else F.apply("reshape", x, shape=xs + (1,) * (4 - len(xs)))
        out = F.apply("batch_norm", x4, gamma, beta, eps=float(eps))
        out = out if len(xs) == 4 else F.apply("reshape", out, shape=xs)
        if batch is not None:  # after the op succeeded: a failure leaves the statistics alone
            axes = (0,) + tuple(range(2, len(xs)))
            values = batch.astype(np.float64)
            for array, new in ((stats[0], values.mean(axis=axes)),
                               (stats[1], values.var(axis=axes, ddof=1))):
                if array is not None:
                    array[...] = (1 - momentum) * array + momentum * new
        return out
    mean, var = stats
    if mean is None or var is None:
        raise TorchLeanError(f"{fn}: training=False needs running_mean and running_var")
    inv_std = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    centred = F.apply("sub", x, _const(x, mean.reshape(per_channel)))
    normalised = F.apply("mul", centred, _const(x, inv_std.reshape(per_channel)))
    scaled = F.apply("mul", normalised, F.apply("reshape", gamma, shape=per_channel))
    return F.apply("add", scaled, F.apply("reshape", beta, shape=per_channel))


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> Any:
    """``softmax(q k^T * scale + mask) v`` over the last two axes (torch's reference
    formula): a bool ``attn_mask`` keeps the True entries, a float one is added; ``is_causal``
    masks the future; ``dropout_p`` drops attention weights (tensors only)."""
    fn = "scaled_dot_product_attention"
    q = _float_tensor(fn, "query", query)
    k = _float_tensor(fn, "key", key)
    v = _float_tensor(fn, "value", value)
    qs, ks = _shape(q), _shape(k)
    if len(qs) < 2 or qs[-1] != ks[-1]:
        raise ShapeError(f"{fn}: query and key must end in the same embedding size, found "
                         f"{qs} and {ks}")
    if is_causal and attn_mask is not None:
        raise TorchLeanError(f"{fn}: give attn_mask or is_causal, not both")
    if enable_gqa:
        raise UnsupportedArgumentError(f"{fn}: enable_gqa=True is not supported")
    factor = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * factor
    if is_causal:
        keep = np.tril(np.ones((qs[-2], ks[-2]), dtype=bool))
        scores = masked_fill(scores, ~keep, float("-inf"))
    elif attn_mask is not None:
        mask_values = attn_mask.numpy() if isinstance(attn_mask, Tensor) else attn_mask
        if isinstance(mask_values, np.ndarray) and mask_values.dtype == np.bool_:
            scores = masked_fill(scores, ~mask_values, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ v


def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    """Inverted dropout with the owner's seeded mask when ``training``; identity otherwise."""
    _no_inplace("dropout", inplace)
    if isinstance(p, bool) or not isinstance(p, int | float | np.integer | np.floating) \
            or not 0 <= p < 1:
        raise TorchLeanError(f"dropout: p must be a number in [0, 1), found {p!r} (p = 1 would "
                             "zero everything)")
    x = _float_tensor("dropout", "input", input)
    if isinstance(x, Ref):
        return x.owner.dropout(x, float(p), bool(training))
    if training and p > 0:
        raise TorchLeanError("dropout: training-mode dropout of a plain array needs a seeded "
                             "random stream: pass a session ref or tl.Tensor, or training=False")
    return x


def _class_indices(fn: str, name: str, target: Any, num_classes: int | None
                   ) -> np.ndarray | None:
    """Integer class indices when their values are known (checked), else None."""
    values = _values(fn, name, target)
    if values is None:
        return None
    if values.dtype.kind == "f":
        if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
            raise TorchLeanError(f"{fn}: {name} must hold integer class indices, found "
                                 "non-integer values")
    elif values.dtype.kind not in "iu":
        raise TorchLeanError(f"{fn}: {name} must hold integer class indices, found dtype "
                             f"{values.dtype}")
    return values.astype(np.int64)


def embedding(input: Any, weight: Any, padding_idx: Any = None, max_norm: Any = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Any:
    """Rows of ``weight (num_embeddings, dim)`` picked by integer indices of any shape;
    ``padding_idx``'s row takes no gradient.

    Indices whose values are known (arrays, tensors, eager refs) are checked as torch checks
    them (integers in ``[0, num_embeddings)``, else ``IndexRangeError``) and the rows are
    gathered (``gather_rows_nat``; the weight's gradient is the scatter-add of the upstream
    rows), so a NaN or inf in one row reaches only the lookups of that row. Indices traced into
    a graph (their values unknown until it runs) are an input of the ``embedding`` primitive,
    which gathers the same way and checks them when the graph runs (``IndexRangeError`` for an
    index outside the range, negative or not an integer)."""
    fn = "embedding"
    _require(fn, "max_norm", max_norm, None)
    _require(fn, "scale_grad_by_freq", scale_grad_by_freq, False)
    _require(fn, "sparse", sparse, False)
    w = _float_tensor(fn, "weight", weight)
    ws = _shape(w)
    if len(ws) != 2:
        raise ShapeError(f"{fn}: weight must be 2-D (num_embeddings, dim), found {ws}; torch's "
                         "order is embedding(input, weight)")
    n = ws[0]
    if padding_idx is not None:
        padding_idx = _int(fn, "padding_idx", padding_idx)
        if not -n <= padding_idx < n:
            raise IndexRangeError(f"{fn}: padding_idx {padding_idx} out of range for {n} rows")
        padding_idx %= n
    ids = _tensor(fn, "input", input)
    known = _class_indices(fn, "input", ids, n)
    if known is not None:
        if known.size and (known.min() < 0 or known.max() >= n):
            raise IndexRangeError(f"{fn}: indices must lie in [0, {n}), found range "
                                  f"[{known.min()}, {known.max()}]")
    table = w
    if padding_idx is not None:
        # The padding row is read through detach, so its gradient is zero (torch's padding_idx).
        keep = np.ones((n, 1), dtype=_dtype(w))
        keep[padding_idx] = 0.0
        live = F.apply("mul", w, _const(w, keep))
        frozen = F.apply("mul", F.apply("detach", w), _const(w, 1.0 - keep))
        table = F.apply("add", live, frozen)
    if known is not None:
        return F.apply("gather_rows_nat", table, idx=known)
    return F.apply("embedding", table, ids)


def one_hot(tensor: Any, num_classes: int = -1) -> Any:
    """One-hot rows along a new last axis. Integer arrays give an int64 array (as torch); refs
    give float refs (the ``one_hot`` primitive). ``num_classes=-1`` means max + 1 (needs the
    values)."""
    fn = "one_hot"
    x = _tensor(fn, "tensor", tensor)
    num_classes = _int(fn, "num_classes", num_classes, -1)
    known = _class_indices(fn, "tensor", x, None)
    if num_classes == -1:
        if known is None:
            raise TorchLeanError(f"{fn}: num_classes=-1 needs the values of the indices, which a "
                                 "traced graph does not have; give num_classes")
        num_classes = int(known.max()) + 1 if known.size else 0
    if num_classes == 0:
        raise TorchLeanError(f"{fn}: num_classes must be positive")
    if known is not None and known.size and (known.min() < 0 or known.max() >= num_classes):
        raise IndexRangeError(f"{fn}: class values must lie in [0, {num_classes}), found range "
                              f"[{known.min()}, {known.max()}]")
    if not isinstance(x, Ref):
        hot = np.eye(num_classes, dtype=np.int64)[known]
        return hot if on_host(x) else to_device(hot, namespace_of(x))
    return F.apply("one_hot", x, num_classes=num_classes)


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_index(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """The source positions of a ``mode`` padding of an axis of ``n`` entries."""
    i = np.arange(-before, n + after)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "circular":
        return i % n
    i = np.abs(i)  # reflect: mirrored about the first and the last entry, not repeating them
    return np.where(i > n - 1, 2 * (n - 1) - i, i)


def pad(input: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None
        ) -> Any:
    """Padding as torch: ``pad = (left_last, right_last, left_2nd_last, right_2nd_last, ...)``.
    ``mode='constant'`` fills with ``value`` (negative amounts crop), built from ``pad_range0``
    on each padded axis moved to the front; ``'reflect'``, ``'replicate'`` and ``'circular'``
    gather the source entries along each padded axis (so gradients sum back onto them)."""
    fn = "pad"
    if mode not in _PAD_MODES:
        raise UnsupportedArgumentError(f"{fn}: mode must be one of {_PAD_MODES}, found "
                                       f"{mode!r}")
    x = _float_tensor(fn, "input", input)
    xs = _shape(x)
    if not isinstance(pad, tuple | list) or len(pad) % 2 or len(pad) // 2 > len(xs) or any(
            isinstance(v, bool) or not isinstance(v, int | np.integer) for v in pad):
        raise TorchLeanError(f"{fn}: pad must be an even-length sequence of ints covering at "
                             f"most {len(xs)} axes, found {pad!r}")
    if mode != "constant":
        if value is not None and value != 0:
            raise TorchLeanError(f"{fn}: padding mode {mode!r} doesn't take in value argument")
        if any(v < 0 for v in pad):
            raise UnsupportedArgumentError(f"{fn}: negative padding (cropping) is supported in "
                                           f"mode 'constant' only, found {tuple(pad)}")
        out = x
        for k in range(len(pad) // 2):
            before, after, axis = int(pad[2 * k]), int(pad[2 * k + 1]), len(xs) - 1 - k
            n = xs[axis]
            if before == after == 0:
                continue
            limit = n - 1 if mode == "reflect" else n
            if max(before, after) > limit:
                raise ShapeError(f"{fn}: {mode} padding ({before}, {after}) must be at most "
                                 f"{limit} for dimension {axis} of size {n}")
            out = out[(slice(None),) * axis + (_pad_index(n, before, after, mode),)]
        return out
    if any(v < 0 for v in pad):  # crop first, then pad what is positive
        crop = [slice(None)] * len(xs)
        for k in range(len(pad) // 2):
            axis = len(xs) - 1 - k
            before, after = int(pad[2 * k]), int(pad[2 * k + 1])
            crop[axis] = slice(max(-before, 0), xs[axis] - max(-after, 0))
        if any(sl.start is not None and sl.start >= sl.stop for sl in crop):
            raise ShapeError(f"{fn}: padding {tuple(pad)} crops away all of input {xs}")
        x = x[tuple(crop)]
        xs = _shape(x)
        pad = [max(int(v), 0) for v in pad]
    fill = 0.0 if value is None else value
    if not isinstance(fill, int | float) or isinstance(fill, bool):
        raise TorchLeanError(f"{fn}: value must be a number, found {value!r}")
    out = x
    shape = list(xs)
    for k in range(len(pad) // 2):
        before, after = int(pad[2 * k]), int(pad[2 * k + 1])
        if before == after == 0:
            continue
        axis = len(xs) - 1 - k
        perm = (axis,) + tuple(i for i in range(len(xs)) if i != axis)
        back = tuple(int(i) for i in np.argsort(perm))
        moved = out if axis == 0 else F.apply("permute", out, perm=perm)
        moved = F.apply("pad_range0", moved, start=before, total=shape[axis] + before + after)
        out = moved if axis == 0 else F.apply("permute", moved, perm=back)
        shape[axis] += before + after
    if fill != 0.0:
        inside = np.zeros(shape)
        window = []
        for axis, n in enumerate(xs):
            k = len(xs) - 1 - axis  # pad pairs count from the last axis
            window.append(slice(pad[2 * k], pad[2 * k] + n) if k < len(pad) // 2 else slice(None))
        inside[tuple(window)] = 1.0
        out = F.apply("add", out, _const(x, (1.0 - inside) * fill))
    return out


def masked_fill(input: Any, mask: Any, value: float) -> Any:
    """``input`` with the entries where ``mask`` is true replaced by ``value`` (torch's
    ``Tensor.masked_fill``); ``mask`` is a boolean tensor or array broadcastable to ``input``'s
    shape, and is a constant (its values must be known: not a traced graph variable).

    Computed as ``input * keep + filled``, with ``keep`` the mask's complement and ``filled``
    ``value`` where masked, 0 elsewhere: ``value`` may be ``-inf`` (attention masks) without
    producing NaN, and the gradient is ``keep`` (zero where filled), as torch's. An infinite
    entry of ``input`` under the mask would still give NaN (inf * 0)."""
    fn = "masked_fill"
    x = _float_tensor(fn, "input", input)
    known = _values(fn, "mask", mask)
    if known is None:
        raise TraceError(f"{fn}: the mask's values must be known (a constant), not a traced "
                         "graph variable")
    if known.dtype != np.bool_:
        raise TorchLeanError(f"{fn}: expected a boolean mask, found dtype {known.dtype}")
    fill = value.item() if hasattr(value, "item") and not isinstance(value, float) else value
    if isinstance(fill, bool) or not isinstance(fill, int | float | np.integer | np.floating):
        raise TorchLeanError(f"{fn}: value must be a number, found {value!r}")
    shape = _shape(x)
    try:
        out_shape = np.broadcast_shapes(known.shape, shape)
    except ValueError:
        out_shape = None
    if out_shape != shape:
        raise ShapeError(f"{fn}: the mask of shape {known.shape} does not broadcast to the "
                         f"input's shape {shape}")
    keep = np.broadcast_to(~known, shape)
    filled = np.where(keep, 0.0, float(fill))
    return x * _const(x, keep) + _const(x, filled)


# ---------------------------------------------------------------------------------------------
# Losses


def _reduce(fn: str, per_item: Any, reduction: str, denominator: Any = None) -> Any:
    """Apply ``reduction`` to per-item losses; 'mean' divides by ``denominator`` (default the
    item count)."""
    if reduction == "none":
        return per_item
    total = F.apply("sum", per_item)
    if reduction == "sum":
        return total
    count = int(np.prod(_shape(per_item), dtype=np.int64)) if denominator is None else denominator
    if count == 0:
        # torch's mean over no items (or all ignored): the value nan, the gradient zero
        return F.apply("add", F.apply("scale", total, c=0.0), _const(total, np.nan))
    return F.apply("scale", total, c=1.0 / float(count))


def _class_weights(fn: str, weight: Any, c: int) -> np.ndarray | None:
    if weight is None:
        return None
    if isinstance(weight, Ref) and getattr(weight, "requires_grad", True):
        raise UnsupportedArgumentError(f"{fn}: weight must be a constant array of {c} class "
                                       f"weights, found a {type(weight).__name__}")
    w = np.asarray(to_host(weight), dtype=np.float64)
    if w.shape != (c,):
        raise ShapeError(f"{fn}: weight must have shape ({c},) (one per class), found {w.shape}")
    return w


class _TargetPlan:
    """How a classification loss uses its target, decided before anything is recorded.

    ``kind`` is ``"known"`` (class indices with known values: ``q`` is the constant matrix with
    smoothing, class weights and ignored items folded in, ``denominator`` the mean's divisor),
    ``"traced"`` (float class indices whose values are unknown: one_hot at run time) or
    ``"probabilities"`` (a target of the input's shape).
    """

    def __init__(self, kind: str, q: Any = None, denominator: float | None = None) -> None:
        self.kind, self.q, self.denominator = kind, q, denominator


def _plan_target(fn: str, shape: tuple[int, ...], target: Any, weight: Any, ignore_index: Any,
                 label_smoothing: float) -> tuple[_TargetPlan, np.ndarray | None]:
    """Check ``target`` against scores of ``shape`` (classes last) without recording."""
    c = shape[-1]
    lead = shape[:-1]
    w = _class_weights(fn, weight, c)
    ignore_index = _int(fn, "ignore_index", ignore_index)
    t_shape = _shape(target)
    if t_shape == shape and np.dtype(target.dtype).kind == "f":
        if fn == "nll_loss":
            raise ShapeError(f"{fn}: target must be class indices of shape {lead}, found "
                             f"probabilities of shape {t_shape}")
        return _TargetPlan("probabilities"), w
    if t_shape != lead:
        raise ShapeError(f"{fn}: target must be class indices of shape {lead} or (for "
                         f"cross_entropy) probabilities of shape {shape}, found {t_shape}")
    known = _class_indices(fn, "target", target, c)
    if known is None:
        if w is not None:
            raise UnsupportedArgumentError(f"{fn}: class weights need the target's values, "
                                           "which a traced graph does not have")
        return _TargetPlan("traced"), w
    ignored = known == ignore_index
    if w is None and not label_smoothing and not ignored.any():
        # The common case (every item counts, weight 1, no smoothing) in a few passes: ``q``
        # is the one-hot rows, 1.0 * row * 1.0 below, and the divisor the item count.
        if known.size and not (0 <= known.min() and known.max() < c):
            _out_of_range(fn, c, ignore_index, known, ignored)
        return _TargetPlan("known", _eye(c)[known], float(known.size)), w
    bad = ~ignored & ((known < 0) | (known >= c))
    if np.any(bad):
        _out_of_range(fn, c, ignore_index, known, ignored)
    safe = np.where(ignored, 0, known)
    wc = np.ones(c) if w is None else w
    item_weight = np.where(ignored, 0.0, wc[safe])
    q = (1.0 - label_smoothing) * np.eye(c)[safe] * item_weight[..., None]
    if label_smoothing:
        q = q + (label_smoothing / c) * wc * (~ignored)[..., None]
    return _TargetPlan("known", q, float(item_weight.sum())), w


def _out_of_range(fn: str, c: int, ignore_index: int, known: np.ndarray,
                  ignored: np.ndarray) -> None:
    bad = ~ignored & ((known < 0) | (known >= c))
    raise IndexRangeError(f"{fn}: target class indices must lie in [0, {c}) (or equal "
                          f"ignore_index={ignore_index}), found {known[bad].flat[0]}")


@functools.lru_cache(maxsize=16)
def _eye(c: int) -> np.ndarray:
    """The float64 identity of ``c`` classes (read only: rows of it are gathered per call)."""
    eye = np.eye(c)
    eye.flags.writeable = False
    return eye


def _plan_loss(fn: str, log_probs: Any, target: Any, plan: _TargetPlan, w: np.ndarray | None,
               reduction: str, label_smoothing: float) -> Any:
    """``-sum_k q[..., k] log_probs[..., k]`` per item, reduced; ``q`` as ``plan`` says."""
    c = _shape(log_probs)[-1]
    q: Any
    if plan.kind == "known":
        q = _const(log_probs, plan.q)
    else:
        q = target if plan.kind == "probabilities" else F.apply("one_hot", target, num_classes=c)
        if label_smoothing:
            q = F.apply("add_scalar", F.apply("scale", q, c=1.0 - label_smoothing),
                        c=label_smoothing / c)
        if w is not None:
            q = F.apply("mul", q, _const(log_probs, w))
    products = F.apply("mul", log_probs, q)
    summed = (F.apply("sum", products) if len(_shape(products)) == 1
              else F.apply("reduce_sum", products, axis=-1))
    per_item = F.apply("scale", summed, c=-1.0)
    return _reduce(fn, per_item, reduction, denominator=plan.denominator)


def _classes_last_shape(fn: str, input: Any) -> tuple[int, ...]:
    """torch puts classes on axis 1 of ``(N, C, d1, ...)`` (axis 0 of an unbatched ``(C,)``);
    the last-axis primitives want them last: the shape after that move."""
    xs = _shape(input)
    if not xs:
        raise ShapeError(f"{fn}: input must be (C,), (N, C) or (N, C, d1, ...), found a scalar")
    return xs if len(xs) <= 2 else (xs[0],) + xs[2:] + (xs[1],)


def _classes_last(x: Any) -> Any:
    n = len(_shape(x))
    return x if n <= 2 else F.apply("permute", x, perm=(0,) + tuple(range(2, n)) + (1,))


def _classification(fn: str, input: Any, target: Any, weight: Any, ignore_index: Any,
                    reduction: str, label_smoothing: float, take_log_softmax: bool) -> Any:
    x = _float_tensor(fn, "input", input)
    target = _tensor(fn, "target", target)
    shape = _classes_last_shape(fn, x)
    moved_target = target
    if _shape(target) == _shape(x) and len(_shape(x)) > 2:
        # probabilities (N, C, d1, ...): checked in the classes-last layout
        perm = (0,) + tuple(range(2, len(_shape(x)))) + (1,)
        moved_target = (F.apply("permute", target, perm=perm) if isinstance(target, Ref)
                        else target.transpose(perm))
    plan, w = _plan_target(fn, shape, moved_target, weight, ignore_index, label_smoothing)
    scores = _classes_last(x)
    log_probs = F.apply("log_softmax", scores) if take_log_softmax else scores
    return _plan_loss(fn, log_probs, moved_target, plan, w, reduction, label_smoothing)


def cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None,
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Any:
    """Softmax cross-entropy of logits ``(N, C)`` (classes on axis 1, as torch, also for
    ``(N, C, d1, ...)``; ``(C,)`` unbatched) against integer class indices ``(N, d1, ...)`` or
    class probabilities of the input's shape. ``weight``, ``ignore_index`` and
    ``label_smoothing`` follow torch's formulas (a weighted mean divides by the summed weights of
    the targets; with probability targets the mean divides by the item count)."""
    fn = "cross_entropy"
    reduction = _legacy_reduction(fn, size_average, reduce, reduction)
    reduction = _reduction(fn, reduction)
    if not isinstance(label_smoothing, int | float) or isinstance(label_smoothing, bool) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise TorchLeanError(f"{fn}: label_smoothing must be in [0, 1], found "
                             f"{label_smoothing!r}")
    return _classification(fn, input, target, weight, ignore_index, reduction,
                           float(label_smoothing), take_log_softmax=True)


def nll_loss(input: Any, target: Any, weight: Any = None, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Any:
    """Negative log-likelihood of log-probabilities ``(N, C)`` (or ``(N, C, d1, ...)``, or
    ``(C,)``) at integer class indices; ``weight`` and ``ignore_index`` as torch."""
    fn = "nll_loss"
    reduction = _legacy_reduction(fn, size_average, reduce, reduction)
    reduction = _reduction(fn, reduction)
    return _classification(fn, input, target, weight, ignore_index, reduction, 0.0,
                           take_log_softmax=False)


def _same_shape(fn: str, input: Any, target: Any) -> tuple[Any, Any]:
    x = _float_tensor(fn, "input", input)
    t = _float_tensor(fn, "target", target)
    if _shape(x) != _shape(t):
        raise ShapeError(f"{fn}: input and target must have the same shape (torch would "
                         f"broadcast with a warning), found {_shape(x)} and {_shape(t)}")
    return x, t


def mse_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Any:
    """Squared error ``(input - target)^2``, reduced by ``reduction``."""
    reduction = _legacy_reduction("mse_loss", size_average, reduce, reduction)
    reduction = _reduction("mse_loss", reduction)
    x, t = _same_shape("mse_loss", input, target)
    return _reduce("mse_loss", F.apply("square", F.apply("sub", x, t)), reduction)


def l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Any:
    """Absolute error ``|input - target|``, reduced by ``reduction`` (gradient sign(0) = 0)."""
    reduction = _legacy_reduction("l1_loss", size_average, reduce, reduction)
    reduction = _reduction("l1_loss", reduction)
    x, t = _same_shape("l1_loss", input, target)
    return _reduce("l1_loss", F.apply("abs", F.apply("sub", x, t)), reduction)


def _huber(fn: str, input: Any, target: Any, delta: float, reduction: str) -> Any:
    """``0.5 m^2 + delta (|d| - m)`` with ``m = min(|d|, delta)``: quadratic inside, linear
    outside, and no branch (the two pieces meet with equal slopes at ``|d| = delta``)."""
    x, t = _same_shape(fn, input, target)
    size = F.apply("abs", F.apply("sub", x, t))
    inner = F.apply("clamp", size, lo=0.0, hi=delta)
    per_item = F.apply("add", F.apply("scale", F.apply("square", inner), c=0.5),
                       F.apply("scale", F.apply("sub", size, inner), c=delta))
    return _reduce(fn, per_item, reduction)


def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0) -> Any:
    """Huber loss: ``0.5 d^2`` for ``|d| <= delta``, ``delta (|d| - delta / 2)`` beyond."""
    reduction = _reduction("huber_loss", reduction)
    d = _number("huber_loss", "delta", delta)
    if d <= 0:
        raise TorchLeanError(f"huber_loss: delta must be positive, found {delta!r}")
    return _huber("huber_loss", input, target, d, reduction)


def smooth_l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                   reduction: str = "mean", beta: float = 1.0) -> Any:
    """Smooth L1: ``0.5 d^2 / beta`` for ``|d| < beta``, ``|d| - beta / 2`` beyond
    (= ``huber_loss(delta=beta) / beta``)."""
    reduction = _legacy_reduction("smooth_l1_loss", size_average, reduce, reduction)
    reduction = _reduction("smooth_l1_loss", reduction)
    b = _number("smooth_l1_loss", "beta", beta)
    if b < 0:
        raise TorchLeanError(f"smooth_l1_loss: beta must be >= 0, found {beta!r}")
    if b == 0:  # torch: beta = 0 is exactly l1_loss
        x, t = _same_shape("smooth_l1_loss", input, target)
        return _reduce("smooth_l1_loss", F.apply("abs", F.apply("sub", x, t)), reduction)
    return F.apply("scale", _huber("smooth_l1_loss", input, target, b, reduction), c=1.0 / b)


def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None,
                                     size_average: Any = None, reduce: Any = None,
                                     reduction: str = "mean", pos_weight: Any = None) -> Any:
    """``softplus(x) - target * x`` per entry (the stable form of BCE on sigmoid(x)); with
    ``pos_weight`` (broadcast along the last axis, as torch), ``(1 - t) x + (1 + (pw - 1) t)
    softplus(-x)``: the positive term ``-t log sigmoid(x)`` weighted by ``pw``."""
    fn = "binary_cross_entropy_with_logits"
    reduction = _legacy_reduction(fn, size_average, reduce, reduction)
    reduction = _reduction(fn, reduction)
    x, t = _same_shape(fn, input, target)
    if pos_weight is None:
        per_item = F.apply("sub", F.apply("softplus", x), F.apply("mul", t, x))
    else:
        pw = _float_tensor(fn, "pos_weight", pos_weight)
        pw = pw if isinstance(pw, Ref) else _const(x, pw)
        try:
            np.broadcast_shapes(_shape(pw), _shape(x))
        except ValueError:
            raise ShapeError(f"{fn}: pos_weight of shape {_shape(pw)} does not broadcast to "
                             f"the input's shape {_shape(x)}") from None
        scale = t * (pw - 1.0) + 1.0
        per_item = (1.0 - t) * x + scale * F.apply("softplus", F.apply("scale", x, c=-1.0))
    if weight is not None:
        w = _float_tensor(fn, "weight", weight)
        # a constant weight takes the input's dtype (plain float32 and float64 do not mix)
        per_item = F.apply("mul", per_item, w if isinstance(w, Ref) else _const(x, w))
    return _reduce(fn, per_item, reduction)


# ---------------------------------------------------------------------------------------------
# torch's composite functions: built from the ref methods above (sum, log, exp, clamp, the
# operators), so they record on any owner and differentiate through the primitives' rules.


def binary_cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Any:
    """``-(t log x + (1 - t) log(1 - x))`` with each log clamped at -100, as torch does (so a
    probability of exactly 0 or 1 gives a finite loss)."""
    fn = "binary_cross_entropy"
    reduction = _legacy_reduction(fn, size_average, reduce, reduction)
    reduction = _reduction(fn, reduction)
    x, t = _same_shape(fn, input, target)
    values = _values(fn, "input", x)
    if values is not None and ((values < 0) | (values > 1)).any():
        raise TorchLeanError(f"{fn}: all elements of input should be between 0 and 1")
    per_item = -(t * x.log().clamp(min=-100.0) + (1.0 - t) * (1.0 - x).log().clamp(min=-100.0))
    if weight is not None:
        w = _float_tensor(fn, "weight", weight)
        per_item = per_item * (w if isinstance(w, Ref) else _const(x, w))
    return _reduce(fn, per_item, reduction)


def kl_div(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
           reduction: str = "mean", log_target: bool = False) -> Any:
    """``target * (log target - input)`` (input holds log-probabilities); ``batchmean``
    divides the sum by the batch size."""
    fn = "kl_div"
    reduction = _legacy_reduction(fn, size_average, reduce, reduction)
    if reduction not in ("mean", "sum", "none", "batchmean"):
        raise TorchLeanError(f"{fn}: reduction must be one of mean, sum, none, batchmean, found "
                             f"{reduction!r}")
    x, t = _same_shape(fn, input, target)
    if log_target:
        per_item = t.exp() * (t - x)
    else:
        tv = _values(fn, "target", t)
        if tv is not None and (tv <= 0).any():  # 0 * log 0 = 0, as torch's xlogy
            safe = _const(x, np.where(tv > 0, tv, 1.0).astype(_dtype(x)))
            per_item = t * (safe.log() - x)
        else:
            per_item = t * (t.log() - x)
    if reduction == "batchmean":
        shape = _shape(x)
        return F.apply("scale", F.apply("sum", per_item), c=1.0 / (shape[0] if shape else 1))
    return _reduce(fn, per_item, reduction)


def normalize(input: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None
              ) -> Any:
    """``input / max(||input||_p, eps)`` along ``dim``."""
    x = _float_tensor("normalize", "input", input)
    if p == 2.0:
        norm = (x * x).sum(dim, keepdim=True).sqrt()
    else:
        norm = (x.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return x / norm.clamp(min=eps)


def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Any:
    a = _float_tensor("cosine_similarity", "x1", x1)
    b = _float_tensor("cosine_similarity", "x2", x2)
    na = (a * a).sum(dim).sqrt().clamp(min=eps)
    nb = (b * b).sum(dim).sqrt().clamp(min=eps)
    return (a * b).sum(dim) / (na * nb)


def pairwise_distance(x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Any:
    d = _float_tensor("pairwise_distance", "x1", x1) - \
        _float_tensor("pairwise_distance", "x2", x2) + eps
    if p == 2.0:
        return (d * d).sum(-1, keepdim=keepdim).sqrt()
    return (d.abs() ** p).sum(-1, keepdim=keepdim) ** (1.0 / p)


def softmin(input: Any, dim: Any = None, dtype: Any = None) -> Any:
    return softmax(-_float_tensor("softmin", "input", input), dim=dim, dtype=dtype)


def softsign(input: Any) -> Any:
    x = _float_tensor("softsign", "input", input)
    return x / (x.abs() + 1.0)


def hardsigmoid(input: Any, inplace: bool = False) -> Any:
    _no_inplace("hardsigmoid", inplace)
    x = _float_tensor("hardsigmoid", "input", input)
    return (x / 6.0 + 0.5).clamp(0.0, 1.0)


def hardswish(input: Any, inplace: bool = False) -> Any:
    _no_inplace("hardswish", inplace)
    x = _float_tensor("hardswish", "input", input)
    return x * (x + 3.0).clamp(0.0, 6.0) / 6.0


def mish(input: Any, inplace: bool = False) -> Any:
    _no_inplace("mish", inplace)
    x = _float_tensor("mish", "input", input)
    return x * F.apply("tanh", F.apply("softplus", x))


def selu(input: Any, inplace: bool = False) -> Any:
    _no_inplace("selu", inplace)
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return F.apply("scale", elu(input, alpha=alpha), c=scale)


def celu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Any:
    _no_inplace("celu", inplace)
    x = _float_tensor("celu", "input", input)
    return x.clamp(min=0.0) + ((x / alpha).clamp(max=0.0).exp() - 1.0) * alpha


def tanhshrink(input: Any) -> Any:
    x = _float_tensor("tanhshrink", "input", input)
    return x - F.apply("tanh", x)


def threshold(input: Any, threshold: float, value: float, inplace: bool = False) -> Any:
    _no_inplace("threshold", inplace)
    x = _float_tensor("threshold", "input", input)
    keep = _values("threshold", "input", x)
    if keep is None:
        raise TorchLeanError("threshold: needs the input's values (not available while tracing)")
    mask = _const(x, (keep > threshold).astype(_dtype(x)))
    return x * mask + (1.0 - mask) * value


def glu(input: Any, dim: int = -1) -> Any:
    x = _float_tensor("glu", "input", input)
    shape = _shape(x)
    axis = _dim("glu", dim, len(shape))
    if shape[axis] % 2:
        raise ShapeError(f"glu: halving dimension must be even, but dimension {axis} is size "
                         f"{shape[axis]}")
    half = shape[axis] // 2
    index_a = tuple(slice(0, half) if d == axis else slice(None) for d in range(len(shape)))
    index_b = tuple(slice(half, None) if d == axis else slice(None) for d in range(len(shape)))
    return x[index_a] * F.apply("sigmoid", x[index_b])


def prelu(input: Any, weight: Any) -> Any:
    x = _float_tensor("prelu", "input", input)
    w = _float_tensor("prelu", "weight", weight)
    shape = _shape(x)
    if _shape(w) not in ((), (1,)) and len(shape) >= 2:
        w = w.reshape(*([1, -1] + [1] * (len(shape) - 2)))
    return x.clamp(min=0.0) + w * x.clamp(max=0.0)


def relu_(input: Any) -> Any:
    """In-place relu on a tensor (torch's ``F.relu_``)."""
    return input.relu_()


__all__ += [
    "binary_cross_entropy", "kl_div", "normalize", "cosine_similarity", "pairwise_distance",
    "softmin", "softsign", "hardsigmoid", "hardswish", "mish", "selu", "celu", "tanhshrink",
    "threshold", "glu", "prelu", "relu_", "scaled_dot_product_attention",
]


def interpolate(input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: Any = None, recompute_scale_factor: Any = None,
                antialias: bool = False) -> Any:
    """Resizing of ``(N, C, L)`` / ``(N, C, H, W)`` / ``(N, C, D, H, W)``: ``mode="nearest"``
    or ``"nearest-exact"`` (each output entry copies its source entry, so gradients sum back)
    or the linear modes
    (``linear``, ``bilinear``, ``trilinear``: ``nn.sampling.linear_resize``, torch's
    coordinate rules with ``align_corners`` either way); other modes are refused."""
    fn = "interpolate"
    linear_modes = {"linear": 1, "bilinear": 2, "trilinear": 3}
    nearest = mode in ("nearest", "nearest-exact")
    if (not nearest and mode not in linear_modes) or antialias:
        raise UnsupportedArgumentError(f"{fn}: mode must be 'nearest', 'nearest-exact', "
                                       f"'linear', 'bilinear' or 'trilinear' (without "
                                       f"antialias), found mode={mode!r}")
    if nearest and align_corners is not None:
        raise TorchLeanError(f"{fn}: align_corners option can only be set with the "
                             "interpolating modes: linear | bilinear | bicubic | trilinear")
    x = _float_tensor(fn, "input", input)
    shape = _shape(x)
    spatial = shape[2:]
    if not spatial:
        raise ShapeError(f"{fn}: expected (N, C, ...) with spatial dimensions, found {shape}")
    if mode in linear_modes and linear_modes[mode] != len(spatial):
        raise ShapeError(f"{fn}: mode {mode!r} needs {linear_modes[mode] + 2}-D input, found "
                         f"{shape}")
    if (size is None) == (scale_factor is None):
        raise TorchLeanError(f"{fn}: give exactly one of size and scale_factor")
    factors = None
    if size is not None:
        target = [int(size)] * len(spatial) if isinstance(size, int) else [int(s) for s in size]
    else:
        factors = [float(scale_factor)] * len(spatial) \
            if isinstance(scale_factor, int | float) else [float(f) for f in scale_factor]
        target = [int(math.floor(n * f)) for n, f in zip(spatial, factors, strict=True)]
        if recompute_scale_factor:
            factors = None
    if len(target) != len(spatial):
        raise ShapeError(f"{fn}: size/scale_factor has {len(target)} entries for "
                         f"{len(spatial)} spatial dimensions")
    if not nearest:
        if not isinstance(x, Tensor):
            raise TorchLeanError(f"{fn}: mode {mode!r} needs a tensor input, found "
                                 f"{type(x).__name__}")
        return linear_resize(x, target, bool(align_corners), factors)
    out = x
    for axis, (n, m) in enumerate(zip(spatial, target, strict=True), start=2):
        scale = n / m if factors is None else 1.0 / factors[axis - 2]
        # 'nearest' takes floor(i * scale) (torch's legacy rule), 'nearest-exact' the source
        # entry whose centre is nearest: floor((i + 0.5) * scale)
        offset = 0.5 if mode == "nearest-exact" else 0.0
        index = np.minimum(np.floor((np.arange(m) + offset) * scale).astype(np.int64), n - 1)
        out = out[(slice(None),) * axis + (index,)]
    return out


def pixel_shuffle(input: Any, upscale_factor: int) -> Any:
    """``(N, C r^2, H, W)`` -> ``(N, C, H r, W r)``."""
    x = _float_tensor("pixel_shuffle", "input", input)
    n, c, h, w = _shape(x)
    r = int(upscale_factor)
    if c % (r * r):
        raise ShapeError(f"pixel_shuffle: channels {c} are not divisible by {r * r}")
    out = x.reshape(n, c // (r * r), r, r, h, w).permute(0, 1, 4, 2, 5, 3)
    return out.reshape(n, c // (r * r), h * r, w * r)


def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Any:
    """Normalise each sample's channel groups to mean 0, variance 1 (biased), then scale and
    shift per channel."""
    x = _float_tensor("group_norm", "input", input)
    shape = _shape(x)
    n, c = shape[0], shape[1]
    if c % num_groups:
        raise ShapeError(f"group_norm: {c} channels are not divisible into {num_groups} groups")
    g = x.reshape(n, num_groups, -1)
    mean = g.mean(-1, keepdim=True)
    centred = g - mean
    var = (centred * centred).mean(-1, keepdim=True)
    out = (centred / (var + eps).sqrt()).reshape(*shape)
    per_channel = (1, c) + (1,) * (len(shape) - 2)
    if weight is not None:
        out = out * weight.reshape(*per_channel)
    if bias is not None:
        out = out + bias.reshape(*per_channel)
    return out


def instance_norm(input: Any, running_mean: Any = None, running_var: Any = None,
                  weight: Any = None, bias: Any = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Any:
    """Each sample's channels normalised over their spatial entries (group norm with one
    channel per group); running statistics are not supported."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise UnsupportedArgumentError("instance_norm: running statistics are not supported")
    shape = _shape(input)
    return group_norm(input, shape[1], weight, bias, eps)


__all__ += ["adaptive_max_pool2d", "interpolate", "pixel_shuffle", "group_norm", "instance_norm",
            "affine_grid", "grid_sample", "embedding_bag", "dropout1d", "dropout2d", "dropout3d"]
