"""``torch.nn.utils.rnn``: ``pad_sequence`` (variable-length sequences stacked with padding).

Packed sequences (``pack_padded_sequence``, ``pad_packed_sequence``, ``PackedSequence``) are not
provided: torchlean's recurrent layers run on padded tensors; naming them raises torchlean's
"has no torch.X" error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.errors import ShapeError, TorchLeanError
from ...engine.tensor import MissingTorchName, Tensor, cat, full, stack

__all__ = ["pad_sequence"]


def pad_sequence(sequences: Sequence[Any], batch_first: bool = False,
                 padding_value: float = 0.0, padding_side: str = "right") -> Tensor:
    """``(L_max, B, *)`` (or ``(B, L_max, *)`` with ``batch_first``) from ``B`` tensors of
    shape ``(L_i, *)``, padded with ``padding_value`` on ``padding_side``."""
    seqs = list(sequences)
    if not seqs or not all(isinstance(s, Tensor) for s in seqs):
        raise TorchLeanError("pad_sequence: expected a non-empty sequence of tensors")
    if padding_side not in ("right", "left"):
        raise TorchLeanError(f"pad_sequence: padding_side must be 'right' or 'left', found "
                             f"{padding_side!r}")
    trailing = tuple(seqs[0].shape[1:])
    if any(s.ndim == 0 or tuple(s.shape[1:]) != trailing for s in seqs):
        raise ShapeError("pad_sequence: every sequence must be (L_i, *) with the same trailing "
                         f"shape, found {[tuple(s.shape) for s in seqs]}")
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        missing = longest - s.shape[0]
        if missing:
            pad = full((missing, *trailing), padding_value, dtype=s.dtype)
            s = cat([s, pad] if padding_side == "right" else [pad, s], 0)
        padded.append(s)
    return stack(padded, 0 if batch_first else 1)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise MissingTorchName(f"torchlean has no torch.nn.utils.rnn.{name} (packed sequences are "
                           "not supported: pad the batch with pad_sequence instead)")
