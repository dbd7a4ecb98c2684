"""``nn.EmbeddingBag`` and channel dropout modules (``Dropout1d``, ``Dropout2d``,
``Dropout3d``), computed by ``nn.bags``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..engine.params import Param
from ..engine.tensor import Tensor
from .bags import _channel_dropout, embedding_bag
from .modules import Module, _positive, normal_init

__all__ = ["Dropout1d", "Dropout2d", "Dropout3d", "EmbeddingBag"]


class EmbeddingBag(Module):
    """torch's ``nn.EmbeddingBag``: ``weight (num_embeddings, embedding_dim)`` drawn from
    N(0, 1); ``forward(input, offsets=None, per_sample_weights=None)``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: Any = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Any = None, include_last_offset: bool = False,
                 padding_idx: Any = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _positive("EmbeddingBag", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if mode not in ("sum", "mean", "max"):
            raise TorchLeanError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', found "
                                 f"{mode!r}")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.mode, self.include_last_offset = mode, bool(include_last_offset)
        self.padding_idx = padding_idx
        dt = "float32" if dtype is None else dtype
        values = normal_init((self.num_embeddings, self.embedding_dim), dt)
        if padding_idx is not None:
            values[int(padding_idx)] = 0.0
        if _weight is not None:
            values = np.asarray(_weight.numpy() if isinstance(_weight, Tensor) else _weight)
        self.weight = Param(values, "weight")

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Any = None) -> Any:
        return embedding_bag(input, self.weight, offsets, mode=self.mode,
                             per_sample_weights=per_sample_weights,
                             include_last_offset=self.include_last_offset,
                             padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'"


class _ChannelDropout(Module):
    _spatial = 2

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
            raise TorchLeanError(f"{type(self).__name__}: p must be in [0, 1], found {p!r}")
        self.p = float(p)

    def forward(self, input: Any) -> Any:
        return _channel_dropout(type(self).__name__, self._spatial, input, self.p,
                                self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"


class Dropout1d(_ChannelDropout):
    """Zero whole channels of ``(N, C, L)`` in training mode."""
    _spatial = 1


class Dropout2d(_ChannelDropout):
    """Zero whole channels of ``(N, C, H, W)`` in training mode."""
    _spatial = 2


class Dropout3d(_ChannelDropout):
    """Zero whole channels of ``(N, C, D, H, W)`` in training mode."""
    _spatial = 3
