"""``F.embedding_bag`` and channel dropout (``F.dropout1d/2d/3d``) over tensors.

An embedding bag reduces the embedding rows of each bag (a row of a 2-D index tensor, or a
slice of a 1-D one between ``offsets``) by ``sum``, ``mean`` or ``max``. The rows are gathered
by indexing the weight (the gradient is the scatter-add of the upstream rows); ``sum``/``mean``
are one matrix product with a constant ``(bags, indices)`` weighting (so an empty bag is a zero
row, as torch's), ``max`` a per-bag ``max``. Channel dropout zeroes whole channels with the
seeded stream (``torch.manual_seed``) and scales the rest by ``1 / (1 - p)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import IndexRangeError, ShapeError, TorchLeanError
from ..engine.tensor import Tensor, rand, stack, tensor, zeros

__all__ = ["dropout1d", "dropout2d", "dropout3d", "embedding_bag"]


def _indices(fn: str, name: str, x: Any) -> np.ndarray:
    values = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    if values.dtype.kind not in "iu":
        raise TorchLeanError(f"{fn}: {name} must be an integer tensor, found {values.dtype}")
    return values.astype(np.int64)


def embedding_bag(input: Any, weight: Any, offsets: Any = None, max_norm: Any = None,
                  norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights: Any = None,
                  include_last_offset: bool = False, padding_idx: Any = None) -> Any:
    """torch's ``F.embedding_bag``: ``(bags, dim)``, each bag's rows reduced by ``mode``."""
    fn = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise TorchLeanError(f"{fn}: mode must be 'sum', 'mean' or 'max', found {mode!r}")
    if max_norm is not None or scale_grad_by_freq:
        raise TorchLeanError(f"{fn}: max_norm and scale_grad_by_freq are not supported")
    ids = _indices(fn, "input", input)
    if ids.ndim == 2:
        if offsets is not None:
            raise ShapeError(f"{fn}: offsets must be None for a 2-D input (each row is a bag)")
        bags, width = ids.shape
        starts = np.arange(bags, dtype=np.int64) * width
        flat = ids.reshape(-1)
    elif ids.ndim == 1:
        if offsets is None:
            raise ShapeError(f"{fn}: a 1-D input needs offsets (where each bag starts)")
        starts = _indices(fn, "offsets", offsets).reshape(-1)
        flat = ids
        if starts.size == 0 or starts[0] != 0 or np.any(np.diff(starts) < 0) \
                or starts[-1] > flat.size:
            raise ShapeError(f"{fn}: offsets must start at 0 and not decrease up to the input "
                             f"length {flat.size}, found {starts.tolist()}")
        if include_last_offset:
            starts = starts[:-1]
            flat = flat[:int(_indices(fn, "offsets", offsets).reshape(-1)[-1])]
    else:
        raise ShapeError(f"{fn}: input must be 1-D (with offsets) or 2-D, found {ids.shape}")
    ends = np.append(starts[1:], flat.size)
    keep = np.ones(flat.size, bool)
    if padding_idx is not None:
        keep = flat != int(padding_idx) % weight.shape[0]
    if flat.size and (flat.min() < 0 or flat.max() >= weight.shape[0]):
        raise IndexRangeError(f"{fn}: indices must lie in [0, {weight.shape[0]}), found range "
                              f"[{flat.min()}, {flat.max()}]")
    rows = weight[tensor(flat)]
    if per_sample_weights is not None:
        if mode != "sum":
            raise TorchLeanError(f"{fn}: per_sample_weights are only supported with mode='sum'")
        psw = per_sample_weights.reshape(-1)
        rows = rows * psw.unsqueeze(1)
    if mode == "max":
        out = [rows[int(a):int(b)][keep[a:b]].max(0)[0] if keep[a:b].any()
               else zeros(weight.shape[1], dtype=weight.dtype)
               for a, b in zip(starts, ends, strict=True)]
        return stack(out)
    weighting = np.zeros((starts.size, flat.size), dtype=np.dtype(weight.dtype))
    for b, (a, e) in enumerate(zip(starts, ends, strict=True)):
        members = np.arange(a, e)[keep[a:e]]
        if members.size:
            weighting[b, members] = 1.0 / members.size if mode == "mean" else 1.0
    return tensor(weighting) @ rows


def _channel_dropout(fn: str, spatial: int, input: Any, p: float, training: bool) -> Any:
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
        raise TorchLeanError(f"{fn}: p must be a number in [0, 1], found {p!r}")
    if not isinstance(input, Tensor):
        raise TorchLeanError(f"{fn}: expected a tensor, found {type(input).__name__}")
    if input.ndim not in (spatial + 1, spatial + 2):
        raise ShapeError(f"{fn}: expected a {spatial + 1}-D or {spatial + 2}-D input, found "
                         f"{tuple(input.shape)}")
    if not training or p == 0:
        return input
    channels = input.shape[:input.ndim - spatial]
    if p == 1:
        return input * 0.0
    keep = (rand(*channels, dtype=input.dtype) >= p).to(input.dtype) * (1.0 / (1.0 - p))
    return input * keep.reshape(*channels, *([1] * spatial))


def dropout1d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    return _channel_dropout("dropout1d", 1, input, p, training)


def dropout2d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    return _channel_dropout("dropout2d", 2, input, p, training)


def dropout3d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    return _channel_dropout("dropout3d", 3, input, p, training)
