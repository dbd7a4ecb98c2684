"""More of ``torch.nn.functional`` (non-loss forms), composed from tensor ops.

``bilinear``, ``rms_norm``, ``local_response_norm``, ``pixel_unshuffle``, ``channel_shuffle``,
``hardshrink``/``softshrink``, the random ``rrelu``/``alpha_dropout``/``feature_alpha_dropout``/
``gumbel_softmax`` (drawn from torchlean's seeded stream, ``torch.manual_seed``), ``lp_pool``,
adaptive pools of any output size with indices, ``max_unpool``, ``fold``/``unfold``,
``conv_transpose1d``, the ``upsample`` aliases and ``pdist``. Each is written with ``tl.Tensor``
operations, so autograd, devices and dtypes come from those; index bookkeeping (which entry
goes where) is worked out once in NumPy and applied with ``index_select``/``gather``, whose
gradients are known.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.ops_interface import Ref
from ..engine.tensor import Tensor, rand, stack, tensor
from ..engine.torch_api import where
from . import functional as TF

__all__ = [
    "adaptive_avg_pool1d", "adaptive_max_pool1d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "alpha_dropout", "bilinear", "channel_shuffle",
    "conv_transpose1d", "feature_alpha_dropout", "fold", "gumbel_softmax", "hardshrink",
    "local_response_norm", "lp_pool1d", "lp_pool2d", "max_pool1d_with_indices",
    "max_pool2d_with_indices", "max_unpool1d", "max_unpool2d", "pdist", "pixel_unshuffle",
    "rms_norm", "rrelu", "softshrink", "unfold", "upsample", "upsample_bilinear",
    "upsample_nearest",
]


def _t(fn: str, name: str, x: Any) -> Any:
    """``x`` as a tensor: refs unchanged, arrays and numbers converted (floats kept)."""
    if isinstance(x, Ref):
        return x
    return tensor(TF._float_tensor(fn, name, x))


def _prob(fn: str, p: Any, top: float = 1.0) -> float:
    if isinstance(p, bool) or not isinstance(p, int | float | np.integer | np.floating) \
            or not 0 <= p <= top:
        raise TorchLeanError(f"{fn}: p must be a number in [0, {top}], found {p!r}")
    return float(p)


def _ndim_in(fn: str, x: Any, allowed: tuple[int, ...], layout: str) -> tuple[int, ...]:
    shape = tuple(x.shape)
    if len(shape) not in allowed:
        raise ShapeError(f"{fn}: expected input {layout}, found shape {shape}")
    return shape


# --- linear-algebra and normalisation ---------------------------------------------------------


def bilinear(input1: Any, input2: Any, weight: Any, bias: Any = None) -> Any:
    """``y[..., o] = x1 @ weight[o] @ x2 + bias[o]``; weight ``(out, in1, in2)``."""
    fn = "bilinear"
    a, b, w = _t(fn, "input1", input1), _t(fn, "input2", input2), _t(fn, "weight", weight)
    if w.ndim != 3 or a.shape[-1] != w.shape[1] or b.shape[-1] != w.shape[2] \
            or tuple(a.shape[:-1]) != tuple(b.shape[:-1]):
        raise ShapeError(f"{fn}: expected input1 (..., {w.shape[1] if w.ndim == 3 else 'in1'}), "
                         f"input2 (..., in2) with the same leading shape and weight (out, in1, "
                         f"in2), found {tuple(a.shape)}, {tuple(b.shape)}, {tuple(w.shape)}")
    out, n1, n2 = w.shape
    # x1 @ W viewed (in1, out * in2): one matrix product, then a dot with x2 per output
    mixed = (a @ w.permute(1, 0, 2).reshape(n1, out * n2)).reshape(*a.shape[:-1], out, n2)
    y = (mixed * b.unsqueeze(-2)).sum(-1)
    return y if bias is None else y + bias


def rms_norm(input: Any, normalized_shape: Any, weight: Any = None, eps: Any = None) -> Any:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` axes;
    ``eps=None`` is the dtype's machine epsilon (torch's)."""
    fn = "rms_norm"
    x = _t(fn, "input", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int | np.integer) \
        else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != tuple(int(s) for s in shape):
        raise ShapeError(f"{fn}: normalized_shape {shape} does not match the trailing axes of "
                         f"input {tuple(x.shape)}")
    e = float(np.finfo(np.dtype(x.dtype)).eps) if eps is None else float(eps)
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    out = x * ((x * x).mean(dim=dims, keepdim=True) + e).rsqrt()
    return out if weight is None else out * weight


def local_response_norm(input: Any, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Any:
    """``x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta`` (torch's
    window: ``size // 2`` channels before, ``(size - 1) // 2`` after, zero-padded)."""
    fn = "local_response_norm"
    x = _t(fn, "input", input)
    if x.ndim < 3:
        raise ShapeError(f"{fn}: expected 3-D or higher input (N, C, ...), found "
                         f"{tuple(x.shape)}")
    size = TF._int(fn, "size", size, 1)
    c = x.shape[1]
    sq = x * x
    pad = [0, 0] * (x.ndim - 2) + [size // 2, (size - 1) // 2]
    padded = TF.pad(sq, pad)
    window = padded[:, 0:c]
    for s in range(1, size):
        window = window + padded[:, s:s + c]
    div = (window * (float(alpha) / size) + float(k)) ** float(beta)
    return x / div


def pixel_unshuffle(input: Any, downscale_factor: int) -> Any:
    """``(*, C, H r, W r)`` -> ``(*, C r^2, H, W)`` (the inverse of ``pixel_shuffle``)."""
    fn = "pixel_unshuffle"
    x = _t(fn, "input", input)
    r = TF._int(fn, "downscale_factor", downscale_factor, 1)
    if x.ndim < 3 or x.shape[-1] % r or x.shape[-2] % r:
        raise ShapeError(f"{fn}: expected (*, C, H, W) with H and W divisible by {r}, found "
                         f"{tuple(x.shape)}")
    *lead, c, h, w = x.shape
    n = len(lead)
    out = x.reshape(*lead, c, h // r, r, w // r, r)
    out = out.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return out.reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(input: Any, groups: int) -> Any:
    """``(N, C, *)``: channels regrouped as ``(groups, C / groups)`` and transposed."""
    fn = "channel_shuffle"
    x = _t(fn, "input", input)
    g = TF._int(fn, "groups", groups, 1)
    if x.ndim < 3 or x.shape[1] % g:
        raise ShapeError(f"{fn}: expected (N, C, *) with C divisible by groups={g}, found "
                         f"{tuple(x.shape)}")
    n, c, *rest = x.shape
    return x.reshape(n, g, c // g, *rest).transpose(1, 2).reshape(n, c, *rest)


# --- activations ----------------------------------------------------------------------------


def hardshrink(input: Any, lambd: float = 0.5) -> Any:
    """``x`` where ``|x| > lambd``, else 0."""
    x = _t("hardshrink", "input", input)
    return x * (x.abs() > float(lambd)).to(x.dtype)


def softshrink(input: Any, lambd: float = 0.5) -> Any:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    x = _t("softshrink", "input", input)
    lam = TF._number("softshrink", "lambd", lambd)
    if lam < 0:
        raise TorchLeanError(f"softshrink: lambd must be >= 0, found {lambd}")
    return x - x.clamp(-lam, lam)


def rrelu(input: Any, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Any:
    """Leaky relu whose negative slope is drawn from U(lower, upper) per entry in training
    (the seeded stream), and is ``(lower + upper) / 2`` otherwise."""
    fn = "rrelu"
    x = _t(fn, "input", input)
    lo, hi = TF._number(fn, "lower", lower), TF._number(fn, "upper", upper)
    if lo > hi:
        raise TorchLeanError(f"{fn}: lower ({lo}) must be <= upper ({hi})")
    if not training:
        return TF.leaky_relu(x, (lo + hi) / 2.0)
    slope = rand(*x.shape, dtype=x.dtype) * (hi - lo) + lo
    return where(x >= 0, x, x * slope)


_SELU_ALPHA_PRIME = 1.7580993408473766  # -scale * alpha of SELU, torch's constant


def _alpha_dropout(fn: str, input: Any, p: float, training: bool, feature: bool) -> Any:
    x = _t(fn, "input", input)
    p = _prob(fn, p)
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    noise_shape = (x.shape[0], x.shape[1]) + (1,) * (x.ndim - 2) if feature else tuple(x.shape)
    keep = (rand(*noise_shape, dtype=x.dtype) >= p).to(x.dtype)
    alpha = _SELU_ALPHA_PRIME
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    # torch's: x * keep * a + (keep - 1) * alpha * a + alpha * a * p
    return x * (keep * a) + (keep - 1.0) * (alpha * a) + alpha * a * p


def alpha_dropout(input: Any, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> Any:
    """Dropout that keeps SELU's mean and variance: dropped entries take SELU's saturation
    value and the result is rescaled (identity unless ``training``)."""
    return _alpha_dropout("alpha_dropout", input, p, training, False)


def feature_alpha_dropout(input: Any, p: float = 0.5, training: bool = False,
                          inplace: bool = False) -> Any:
    """``alpha_dropout`` of whole channels of ``(N, C, *)``."""
    return _alpha_dropout("feature_alpha_dropout", input, p, training, True)


def gumbel_softmax(logits: Any, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Any:
    """``softmax((logits + g) / tau)`` with Gumbel noise ``g = -log(E)``, ``E ~ Exp(1)``;
    ``hard``: the one-hot argmax in the forward pass, the soft sample's gradient."""
    fn = "gumbel_softmax"
    x = _t(fn, "logits", logits)
    u = rand(*x.shape, dtype=x.dtype)
    gumbels = -(-(1.0 - u).log()).log()  # 1 - u lies in (0, 1]: -log of it is Exp(1)
    y_soft = TF.softmax((x + gumbels) / float(tau), dim=dim)
    if not hard:
        return y_soft
    axis = TF._dim(fn, dim, x.ndim)
    index = y_soft.detach().max(axis, keepdim=True)[1]
    positions = np.arange(x.shape[axis]).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    y_hard = (index == tensor(positions)).to(x.dtype)  # one-hot of the argmax along dim
    return y_hard - y_soft.detach() + y_soft


# --- pooling --------------------------------------------------------------------------------


def lp_pool2d(input: Any, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> Any:
    """``(sum over each window of x^p)^(1/p)`` (torch's: an average pool of ``x^p`` times the
    window size, negative sums clamped to 0)."""
    fn = "lp_pool2d"
    x = _t(fn, "input", input)
    kh, kw = TF._pair(fn, "kernel_size", kernel_size, 1)
    p = TF._number(fn, "norm_type", norm_type)
    out = TF.avg_pool2d(x ** p, (kh, kw), stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu() * float(kh * kw)) ** (1.0 / p)


def lp_pool1d(input: Any, norm_type: float, kernel_size: int, stride: Any = None,
              ceil_mode: bool = False) -> Any:
    """1-D ``lp_pool2d`` over ``(N, C, L)`` / ``(C, L)``."""
    fn = "lp_pool1d"
    x = _t(fn, "input", input)
    k = TF._ntuple(fn, "kernel_size", kernel_size, 1, 1)[0]
    p = TF._number(fn, "norm_type", norm_type)
    out = TF.avg_pool1d(x ** p, k, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu() * float(k)) ** (1.0 / p)


def max_pool1d_with_indices(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = True) -> Any:
    return TF.max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = True) -> Any:
    return TF.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _adaptive_size(fn: str, output_size: Any, spatial: tuple[int, ...]) -> tuple[int, ...]:
    d = len(spatial)
    if isinstance(output_size, tuple | list):
        size = tuple(spatial[i] if v is None else v for i, v in enumerate(output_size))
    else:
        size = (output_size,) * d
    return TF._ntuple(fn, "output_size", size, d, 1)


def _adaptive_max(fn: str, d: int, input: Any, output_size: Any) -> tuple[Any, Any]:
    """Values and flat spatial indices of the maximum of each of torch's adaptive windows
    (``[floor(i n / out), ceil((i + 1) n / out))`` per axis)."""
    x = _t(fn, "input", input)
    if x.ndim not in (d + 1, d + 2):
        raise ShapeError(f"{fn}: expected a {d + 1}-D or {d + 2}-D input, found "
                         f"{tuple(x.shape)}")
    spatial = tuple(x.shape[x.ndim - d:])
    out = _adaptive_size(fn, output_size, spatial)
    windows = [TF._adaptive_windows(n, o) for n, o in zip(spatial, out, strict=True)]
    values, indices = [], []
    for cell in np.ndindex(*out):
        bounds = [windows[a][i] for a, i in enumerate(cell)]
        block = x[(Ellipsis,) + tuple(slice(lo, hi) for lo, hi in bounds)]
        v, local = block.reshape(*x.shape[:x.ndim - d], -1).max(-1)
        # a window-local flat index back to the input's flat spatial index
        widths = [hi - lo for lo, hi in bounds]
        coords = np.unravel_index(np.arange(int(np.prod(widths))), widths)
        flat = np.ravel_multi_index(tuple(c + lo for c, (lo, _) in
                                          zip(coords, bounds, strict=True)), spatial)
        values.append(v)
        indices.append(tensor(flat.astype(np.int64))[local])
    shape = tuple(x.shape[:x.ndim - d]) + out
    return stack(values, -1).reshape(*shape), stack(indices, -1).reshape(*shape)


def adaptive_max_pool1d_with_indices(input: Any, output_size: Any,
                                     return_indices: bool = True) -> Any:
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size)


def adaptive_max_pool1d(input: Any, output_size: Any, return_indices: bool = False) -> Any:
    """Adaptive max pooling of ``(N, C, L)`` / ``(C, L)``, any output size."""
    values, indices = _adaptive_max("adaptive_max_pool1d", 1, input, output_size)
    return (values, indices) if return_indices else values


def adaptive_max_pool2d_with_indices(input: Any, output_size: Any,
                                     return_indices: bool = True) -> Any:
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size)


def adaptive_avg_pool1d(input: Any, output_size: Any) -> Any:
    """Adaptive average pooling of ``(N, C, L)`` / ``(C, L)`` (``adaptive_avg_pool2d`` over a
    unit height)."""
    fn = "adaptive_avg_pool1d"
    x = _t(fn, "input", input)
    if x.ndim not in (2, 3):
        raise ShapeError(f"{fn}: expected (C, L) or (N, C, L), found {tuple(x.shape)}")
    (size,) = _adaptive_size(fn, output_size, (x.shape[-1],))
    return TF.adaptive_avg_pool2d(x.unsqueeze(-2), (1, size)).squeeze(-2)


def _max_unpool(fn: str, d: int, input: Any, indices: Any, kernel_size: Any, stride: Any,
                padding: Any, output_size: Any) -> Any:
    x = _t(fn, "input", input)
    if x.ndim not in (d + 1, d + 2):
        raise ShapeError(f"{fn}: expected a {d + 1}-D or {d + 2}-D input, found "
                         f"{tuple(x.shape)}")
    k = TF._ntuple(fn, "kernel_size", kernel_size, d, 1)
    s = k if stride is None else TF._ntuple(fn, "stride", stride, d, 1)
    p = TF._ntuple(fn, "padding", padding, d, 0)
    spatial = tuple(x.shape[x.ndim - d:])
    if output_size is None:
        out_size = tuple((n - 1) * si - 2 * pi + ki for n, si, pi, ki in zip(spatial, s, p, k,
                                                                        strict=True))
    else:
        out_size = tuple(int(v) for v in tuple(output_size)[-d:])
    idx = indices.numpy() if isinstance(indices, Tensor) else np.asarray(indices)
    if tuple(idx.shape) != tuple(x.shape) or idx.dtype.kind not in "iu":
        raise ShapeError(f"{fn}: indices must be an integer tensor shaped as the input "
                         f"{tuple(x.shape)}, found {idx.dtype} {tuple(idx.shape)}")
    total = int(np.prod(out_size))
    lead = tuple(x.shape[:x.ndim - d])
    flat_idx = idx.reshape(-1, int(np.prod(spatial))).astype(np.int64)
    if flat_idx.size and (flat_idx.min() < 0 or flat_idx.max() >= total):
        raise ShapeError(f"{fn}: indices must lie in [0, {total}) for output size {out_size}, "
                         f"found range [{flat_idx.min()}, {flat_idx.max()}]")
    # the inverse map: which input entries land on each output entry (overlapping pools can
    # send one maximum to the same index twice)
    n_rows, n_in = flat_idx.shape
    hits = np.zeros((n_rows, total), np.int64)
    np.add.at(hits, (np.repeat(np.arange(n_rows), n_in), flat_idx.reshape(-1)), 1)
    depth = max(1, int(hits.max(initial=0)))
    source = np.full((n_rows, total, depth), -1, np.int64)
    filled = np.zeros((n_rows, total), np.int64)
    for r in range(n_rows):
        for i, j in enumerate(flat_idx[r]):
            source[r, j, filled[r, j]] = i
            filled[r, j] += 1
    dt = np.dtype(x.dtype)
    gathered = x.reshape(n_rows, n_in).gather(
        1, tensor(np.maximum(source, 0).reshape(n_rows, -1))).reshape(n_rows, total, depth)
    summed = (gathered * tensor((source >= 0).astype(dt))).sum(-1)
    # the value: the mean of the entries sent there (torch keeps one of them; they are equal
    # when they come from one max pool); the gradient: each entry gets its index's (torch's
    # backward gathers)
    inverse = 1.0 / np.maximum(hits, 1).astype(dt)
    out = summed * tensor(inverse) + (summed - summed.detach()) * tensor(1.0 - inverse)
    return out.reshape(*lead, *out_size)


def max_unpool1d(input: Any, indices: Any, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> Any:
    """The inverse of ``max_pool1d``: each value back at its index, zeros elsewhere."""
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding,
                       output_size)


def max_unpool2d(input: Any, indices: Any, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> Any:
    """The inverse of ``max_pool2d``: each value back at its index, zeros elsewhere."""
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding,
                       output_size)


# --- fold / unfold ----------------------------------------------------------------------------


def _patch_map(fn: str, spatial: tuple[int, int], kernel_size: Any, dilation: Any,
               padding: Any, stride: Any) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """For each (kernel offset, block) pair, the flat index into the padded image; the padded
    size and the padding."""
    k = TF._pair(fn, "kernel_size", kernel_size, 1)
    dl = TF._pair(fn, "dilation", dilation, 1)
    p = TF._pair(fn, "padding", padding, 0)
    s = TF._pair(fn, "stride", stride, 1)
    padded = (spatial[0] + 2 * p[0], spatial[1] + 2 * p[1])
    blocks = tuple((padded[a] - dl[a] * (k[a] - 1) - 1) // s[a] + 1 for a in (0, 1))
    if min(blocks) < 1:
        raise ShapeError(f"{fn}: kernel_size {k} with dilation {dl} does not fit the padded "
                         f"size {padded}")
    ki, kj = np.meshgrid(np.arange(k[0]), np.arange(k[1]), indexing="ij")
    bi, bj = np.meshgrid(np.arange(blocks[0]), np.arange(blocks[1]), indexing="ij")
    rows = ki.reshape(-1, 1) * dl[0] + bi.reshape(1, -1) * s[0]
    cols = kj.reshape(-1, 1) * dl[1] + bj.reshape(1, -1) * s[1]
    return rows * padded[1] + cols, padded, p


def unfold(input: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
           stride: Any = 1) -> Any:
    """Sliding blocks: ``(N, C, H, W)`` -> ``(N, C kH kW, L)`` (torch's ``im2col``)."""
    fn = "unfold"
    x = _t(fn, "input", input)
    if x.ndim not in (3, 4):
        raise ShapeError(f"{fn}: expected (C, H, W) or (N, C, H, W), found {tuple(x.shape)}")
    index, padded, p = _patch_map(fn, tuple(x.shape[-2:]), kernel_size, dilation, padding,
                                  stride)
    xp = TF.pad(x, [p[1], p[1], p[0], p[0]]) if any(p) else x
    lead = tuple(x.shape[:-2])
    cols = xp.reshape(*lead, padded[0] * padded[1]).index_select(-1, tensor(index.reshape(-1)))
    return cols.reshape(*lead[:-1], lead[-1] * index.shape[0], index.shape[1])


def fold(input: Any, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
         stride: Any = 1) -> Any:
    """The adjoint of ``unfold``: ``(N, C kH kW, L)`` -> ``(N, C, H, W)``, overlapping blocks
    summed (each output entry gathers every block entry that lands on it)."""
    fn = "fold"
    x = _t(fn, "input", input)
    size = TF._pair(fn, "output_size", output_size, 1)
    if x.ndim not in (2, 3):
        raise ShapeError(f"{fn}: expected (C kH kW, L) or (N, C kH kW, L), found "
                         f"{tuple(x.shape)}")
    index, padded, p = _patch_map(fn, size, kernel_size, dilation, padding, stride)
    kk, blocks = index.shape
    if x.shape[-2] % kk or x.shape[-1] != blocks:
        raise ShapeError(f"{fn}: expected (N, C * {kk}, {blocks}) for output_size {size}, "
                         f"found {tuple(x.shape)}")
    c = x.shape[-2] // kk
    lead = tuple(x.shape[:-2]) + (c,)
    total = padded[0] * padded[1]
    hits = [[] for _ in range(total)]  # type: list[list[int]]
    for j, target in enumerate(index.reshape(-1)):
        hits[int(target)].append(j)
    depth = max(1, max(len(h) for h in hits))
    source = np.full((total, depth), -1, np.int64)
    for t, h in enumerate(hits):
        source[t, :len(h)] = h
    flat = x.reshape(*lead, kk * blocks).index_select(-1, tensor(np.maximum(source, 0)
                                                                  .reshape(-1)))
    mask = tensor((source >= 0).astype(np.dtype(x.dtype)).reshape(-1))
    out = (flat * mask).reshape(*lead, total, depth).sum(-1).reshape(*lead, *padded)
    return out[..., p[0]:padded[0] - p[0], p[1]:padded[1] - p[1]]


# --- convolution, resizing, distances -------------------------------------------------------


def conv_transpose1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Any:
    """1-D transposed convolution (``conv_transpose2d`` over a unit height); weight
    ``(C_in, C_out / groups, k)``."""
    fn = "conv_transpose1d"
    x, w = _t(fn, "input", input), _t(fn, "weight", weight)
    if x.ndim not in (2, 3) or w.ndim != 3:
        raise ShapeError(f"{fn}: expected input (C, L) or (N, C, L) and weight (C_in, C_out / "
                         f"groups, k), found {tuple(x.shape)} and {tuple(w.shape)}")
    one = [TF._ntuple(fn, name, v, 1, low)[0] for name, v, low in
           (("stride", stride, 1), ("padding", padding, 0),
            ("output_padding", output_padding, 0), ("dilation", dilation, 1))]
    out = TF.conv_transpose2d(x.unsqueeze(-2), w.unsqueeze(-2), bias, stride=(1, one[0]),
                              padding=(0, one[1]), output_padding=(0, one[2]), groups=groups,
                              dilation=(1, one[3]))
    return out.squeeze(-2)


def upsample(input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: Any = None) -> Any:
    """torch's deprecated alias of ``interpolate``."""
    return TF.interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Any, size: Any = None, scale_factor: Any = None) -> Any:
    return TF.interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input: Any, size: Any = None, scale_factor: Any = None) -> Any:
    """Bilinear resizing with ``align_corners=True`` (torch's deprecated alias)."""
    return TF.interpolate(input, size, scale_factor, "bilinear", True)


def pdist(input: Any, p: float = 2.0) -> Any:
    """The ``p``-norm distances between the rows of ``(N, M)``, pairs ``i < j`` in row-major
    order: ``N (N - 1) / 2`` values."""
    fn = "pdist"
    x = _t(fn, "input", input)
    if x.ndim != 2:
        raise ShapeError(f"{fn}: expected a 2-D input (N, M), found {tuple(x.shape)}")
    order = TF._number(fn, "p", p)
    if order < 0:
        raise TorchLeanError(f"{fn}: p must be >= 0, found {p}")
    i, j = np.triu_indices(x.shape[0], 1)
    diff = (x.index_select(0, tensor(i.astype(np.int64)))
            - x.index_select(0, tensor(j.astype(np.int64))))
    if order == 2.0:
        return (diff * diff).sum(-1).sqrt()
    if math.isinf(order):
        return diff.abs().amax(-1)
    if order == 0.0:
        return (diff != 0).to(x.dtype).sum(-1)
    return (diff.abs() ** order).sum(-1) ** (1.0 / order)
