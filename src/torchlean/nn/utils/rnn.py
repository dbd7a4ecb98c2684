"""``torch.nn.utils.rnn``: ``pad_sequence`` and packed sequences.

A ``PackedSequence`` here keeps the padded, time-major batch and the lengths (torch keeps the
valid steps concatenated; its ``data`` and ``batch_sizes`` are computed from ours on request, in
torch's order). The recurrent layers take one and run every sequence only over its own steps:
past a sequence's end its state is held and its output is zero, so the final states are those
at each sequence's last step and the reverse direction starts there, as torch's packed kernels
give (the batch needs no sorting, so ``enforce_sorted`` only checks, as torch does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.errors import ShapeError, TorchLeanError
from ...engine.tensor import MissingTorchName, Tensor, cat, full, stack, tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pack_sequence", "pad_packed_sequence",
           "pad_sequence"]


class PackedSequence:
    """A batch of variable-length sequences: ``padded`` ``(L, B, *)`` and ``lengths``."""

    def __init__(self, padded: Any, lengths: np.ndarray) -> None:
        self.padded = padded
        self.lengths = np.asarray(lengths, dtype=np.int64)

    @property
    def batch_sizes(self) -> Tensor:
        steps = int(self.lengths.max())
        return tensor(np.array([(self.lengths > t).sum() for t in range(steps)], np.int64))

    def _order(self) -> np.ndarray:
        return np.argsort(-self.lengths, kind="stable")

    @property
    def data(self) -> Any:
        """The valid steps in torch's packed order (time-major, longest sequences first)."""
        order = self._order()
        ts, bs = [], []
        for t in range(int(self.lengths.max())):
            for b in order:
                if self.lengths[b] > t:
                    ts.append(t)
                    bs.append(b)
        return self.padded[tensor(np.array(ts)), tensor(np.array(bs))]

    @property
    def sorted_indices(self) -> Tensor:
        return tensor(self._order())

    @property
    def unsorted_indices(self) -> Tensor:
        return tensor(np.argsort(self._order(), kind="stable"))

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        return PackedSequence(self.padded.to(*args, **kwargs), self.lengths)

    def __repr__(self) -> str:
        return (f"PackedSequence(data={self.data!r}, batch_sizes={self.batch_sizes!r}, "
                f"sorted_indices={self.sorted_indices!r}, "
                f"unsorted_indices={self.unsorted_indices!r})")


def _lengths(op: str, lengths: Any, batch: int, steps: int) -> np.ndarray:
    values = lengths.numpy() if isinstance(lengths, Tensor) else np.asarray(lengths)
    if values.ndim != 1 or values.shape[0] != batch or values.dtype.kind not in "iu":
        raise ShapeError(f"{op}: lengths must be {batch} integers (one per sequence), found "
                         f"{values.tolist()}")
    if values.min() <= 0 or values.max() > steps:
        raise TorchLeanError(f"{op}: every length must be in [1, {steps}], found "
                             f"{values.tolist()}")
    return values.astype(np.int64)


def pack_padded_sequence(input: Any, lengths: Any, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:
    """A ``PackedSequence`` of the padded batch ``input`` (``(L, B, *)``, or ``(B, L, *)``
    with ``batch_first``) whose sequence ``b`` has ``lengths[b]`` valid steps."""
    if not isinstance(input, Tensor) or input.ndim < 2:
        raise ShapeError("pack_padded_sequence: expected a padded (L, B, *) tensor")
    padded = input.transpose(0, 1) if batch_first else input
    values = _lengths("pack_padded_sequence", lengths, padded.shape[1], padded.shape[0])
    if enforce_sorted and np.any(np.diff(values) > 0):
        raise TorchLeanError("pack_padded_sequence: `lengths` array must be sorted in "
                             "decreasing order when `enforce_sorted` is True. You can pass "
                             "`enforce_sorted=False` to pack_padded_sequence and/or "
                             "pack_sequence to sidestep this requirement if you do not need "
                             "ONNX exportability.")
    return PackedSequence(padded[:int(values.max())], values)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: Any = None
                        ) -> tuple[Any, Tensor]:
    """The padded batch and the lengths of a ``PackedSequence``."""
    if not isinstance(sequence, PackedSequence):
        raise TorchLeanError(f"pad_packed_sequence: expected a PackedSequence, found "
                             f"{type(sequence).__name__}")
    padded = sequence.padded
    steps = padded.shape[0]
    if padding_value != 0.0:
        valid = np.arange(steps)[:, None] < sequence.lengths[None, :]
        shape = valid.shape + (1,) * (padded.ndim - 2)
        padded = padded.masked_fill(tensor(~valid.reshape(shape)), padding_value)
    if total_length is not None:
        if total_length < steps:
            raise TorchLeanError(f"pad_packed_sequence: total_length {total_length} is less "
                                 f"than the longest sequence ({steps})")
        if total_length > steps:
            pad = full((total_length - steps, *padded.shape[1:]), padding_value,
                       dtype=padded.dtype)
            padded = cat([padded, pad], 0)
    return (padded.transpose(0, 1) if batch_first else padded), tensor(sequence.lengths)


def pack_sequence(sequences: Sequence[Any], enforce_sorted: bool = True) -> PackedSequence:
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


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
    raise MissingTorchName(f"torchlean has no torch.nn.utils.rnn.{name} (it is not "
                           "implemented)")
