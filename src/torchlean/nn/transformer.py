"""``nn.TransformerEncoderLayer``, ``TransformerEncoder``, the decoder pair and ``Transformer``.

torch's constructors, sub-module names (so a torch state dict loads: ``self_attn.in_proj_weight``,
``linear1.weight``, ``norm1.bias``, ``layers.0...``), forward signatures and formulas: post-norm
``x = norm1(x + sa(x)); x = norm2(x + ff(x))`` or, with ``norm_first=True``, pre-norm
``x = x + sa(norm1(x)); x = x + ff(norm2(x))``; dropout after the attention, inside and after
the feed-forward block; masks as ``nn.MultiheadAttention`` takes them. ``TransformerEncoder``
and ``TransformerDecoder`` hold deep copies of the given layer, as torch's do. Built from
``Linear``, ``LayerNorm``, ``Dropout`` and torch-style attention, so gradients are the
primitives'.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..engine.tensor import Tensor, tensor
from . import functional, init
from .containers import ModuleList
from .modules import Dropout, LayerNorm, Linear, Module, MultiheadAttention

__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]


def _activation(layer: str, activation: Any) -> Callable[[Any], Any]:
    if activation == "relu":
        return functional.relu
    if activation == "gelu":
        return functional.gelu
    if callable(activation):
        return activation  # type: ignore[no-any-return]
    raise TorchLeanError(f"{layer}: activation should be relu/gelu or a callable, found "
                         f"{activation!r}")


def _sizes(layer: str, d_model: Any, nhead: Any, dim_feedforward: Any) -> None:
    for name, value in (("d_model", d_model), ("nhead", nhead),
                        ("dim_feedforward", dim_feedforward)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
            raise TorchLeanError(f"{layer}: {name} must be a positive int, found {value!r}")


def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
    """The ``(sz, sz)`` float causal mask: ``-inf`` above the diagonal, 0 on and below."""
    if isinstance(sz, bool) or not isinstance(sz, int | np.integer) or sz < 0:
        raise TorchLeanError(f"generate_square_subsequent_mask: sz must be a non-negative int, "
                             f"found {sz!r}")
    dt = np.dtype(np.float32 if dtype is None else dtype)
    return tensor(np.triu(np.full((sz, sz), -np.inf, dt), 1))


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual and a layer norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Any = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _sizes("TransformerEncoderLayer", d_model, nhead, dim_feedforward)
        dt = "float32" if dtype is None else dtype
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, device=device, dtype=dt)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dt)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dt)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dt)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dt)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation("TransformerEncoderLayer", activation)
        self.batch_first = bool(batch_first)

    def _sa_block(self, x: Any, attn_mask: Any, key_padding_mask: Any, is_causal: bool) -> Any:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Any) -> Any:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Any:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's memory and a feed-forward block."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Any = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _sizes("TransformerDecoderLayer", d_model, nhead, dim_feedforward)
        dt = "float32" if dtype is None else dtype
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, device=device, dtype=dt)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, device=device,
                                                 dtype=dt)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dt)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dt)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dt)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dt)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dt)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation("TransformerDecoderLayer", activation)
        self.batch_first = bool(batch_first)

    def _sa_block(self, x: Any, attn_mask: Any, key_padding_mask: Any, is_causal: bool) -> Any:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _mha_block(self, x: Any, mem: Any, attn_mask: Any, key_padding_mask: Any,
                   is_causal: bool) -> Any:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, need_weights=False,
                                is_causal=is_causal)[0]
        return self.dropout2(x)

    def _ff_block(self, x: Any) -> Any:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Any:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                           memory_is_causal))
        return self.norm3(x + self._ff_block(x))


def _clones(owner: str, layer: Module, num_layers: Any, kind: type) -> ModuleList:
    if not isinstance(layer, kind):
        raise TorchLeanError(f"{owner}: expected a {kind.__name__}, found {type(layer).__name__}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int | np.integer) \
            or num_layers <= 0:
        raise TorchLeanError(f"{owner}: num_layers must be a positive int, found {num_layers!r}")
    copies: list[Module] = [copy.deepcopy(layer) for _ in range(int(num_layers))]
    return ModuleList(copies)


class TransformerEncoder(Module):
    """``num_layers`` copies of an encoder layer, then an optional final norm."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Any = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _clones("TransformerEncoder", encoder_layer, num_layers,
                              TransformerEncoderLayer)
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(self, src: Any, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Any:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """``num_layers`` copies of a decoder layer, then an optional final norm."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Any = None) -> None:
        super().__init__()
        self.layers = _clones("TransformerDecoder", decoder_layer, num_layers,
                              TransformerDecoderLayer)
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Any:
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """torch's encoder-decoder ``nn.Transformer``: an encoder and a decoder (each with a final
    layer norm), every matrix parameter re-initialised with ``xavier_uniform_``."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Any = "relu", custom_encoder: Any = None,
                 custom_decoder: Any = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        dt = "float32" if dtype is None else dtype
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias,
                                            device, dtype)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, dtype=dt))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            dec = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                          layer_norm_eps, batch_first, norm_first, bias, device,
                                          dtype)
            self.decoder = TransformerDecoder(dec, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, dtype=dt))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = int(d_model), int(nhead), bool(batch_first)

    def forward(self, src: Any, tgt: Any, src_mask: Any = None, tgt_mask: Any = None,
                memory_mask: Any = None, src_key_padding_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Any:
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise TorchLeanError(f"Transformer: the batch number of src and tgt must be equal, "
                                 f"found {tuple(src.shape)} and {tuple(tgt.shape)}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

