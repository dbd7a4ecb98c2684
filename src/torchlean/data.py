"""In-memory datasets: paired input and target arrays, shuffled and batched deterministically.

A ``Dataset`` holds two arrays whose first dimension indexes the examples. It is what
``torchlean.train.fit`` iterates over: ``shuffle(seed)`` gives a new dataset in a permuted
order (``numpy.random.default_rng(seed).permutation(len(ds))``, so the same seed gives the same
order on every machine and NumPy version that keeps that generator stable), and
``batches(size)`` yields ``(x, y)`` slices in order. Nothing here is random without a seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .core.backend import namespace_of
from .core.errors import IndexRangeError, ShapeError

__all__ = ["Dataset"]


def _as_array(x: Any) -> Any:
    if hasattr(x, "__array_namespace__"):
        return x
    try:
        return np.asarray(x)
    except ValueError as exc:  # ragged nested lists
        raise ShapeError(f"Dataset: expected rectangular arrays, found {type(x).__name__} "
                         f"({exc})") from None


def _index_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ShapeError(f"Dataset.{name}: expected an int, found {value!r}")
    return int(value)


class Dataset:
    """Inputs and targets with the same number of examples (their first dimension)."""

    __slots__ = ("inputs", "targets")

    def __init__(self, inputs: Any, targets: Any) -> None:
        inputs, targets = _as_array(inputs), _as_array(targets)
        if inputs.ndim == 0 or targets.ndim == 0:
            raise ShapeError(f"Dataset: inputs and targets need a first (example) dimension, "
                             f"found shapes {tuple(inputs.shape)} and {tuple(targets.shape)}")
        if inputs.shape[0] != targets.shape[0]:
            raise ShapeError(f"Dataset: inputs and targets differ in their first dimension: "
                             f"{tuple(inputs.shape)} vs {tuple(targets.shape)}")
        self.inputs = inputs
        self.targets = targets

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def __getitem__(self, index: Any) -> Any:
        """``ds[i]`` is the pair ``(x_i, y_i)``; a slice or an index array gives a ``Dataset``."""
        if isinstance(index, int | np.integer) and not isinstance(index, bool):
            n = len(self)
            i = int(index)
            if not -n <= i < n:
                raise IndexRangeError(f"Dataset: index {i} out of range for {n} examples")
            return self.inputs[i], self.targets[i]
        if isinstance(index, slice):
            return Dataset(self.inputs[index], self.targets[index])
        idx = np.asarray(index)
        if idx.ndim != 1 or idx.dtype.kind not in "iub":
            raise ShapeError(f"Dataset: index with an int, a slice, or a 1-d int or bool array; "
                             f"found {type(index).__name__} of shape {idx.shape}")
        if idx.dtype.kind == "b" and idx.shape[0] != len(self):
            raise ShapeError(f"Dataset: boolean mask of length {idx.shape[0]} for "
                             f"{len(self)} examples")
        if idx.dtype.kind != "b" and idx.size and not (-len(self) <= idx.min()
                                                       and idx.max() < len(self)):
            raise IndexRangeError(f"Dataset: indices out of range for {len(self)} examples")
        return self._take(idx)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for i in range(len(self)):
            yield self.inputs[i], self.targets[i]

    def _take(self, idx: np.ndarray) -> Dataset:
        xi = namespace_of(self.inputs).asarray(idx)
        yi = namespace_of(self.targets).asarray(idx)
        return Dataset(self.inputs[xi], self.targets[yi])

    def shuffle(self, seed: int) -> Dataset:
        """A new dataset in the order ``np.random.default_rng(seed).permutation(len(self))``."""
        seed = _index_count(seed, "shuffle")
        if seed < 0:
            raise ShapeError(f"Dataset.shuffle: seed must be non-negative, found {seed}")
        return self._take(np.random.default_rng(seed).permutation(len(self)))

    def batches(self, size: int, drop_last: bool = False) -> Iterator[tuple[Any, Any]]:
        """``(x, y)`` pairs of ``size`` consecutive examples, in order; the last one may be
        smaller unless ``drop_last``."""
        size = _index_count(size, "batches")
        if size <= 0:
            raise ShapeError(f"Dataset.batches: size must be positive, found {size}")
        n = len(self)
        stop = n - n % size if drop_last else n
        for start in range(0, stop, size):
            end = min(start + size, n)
            yield self.inputs[start:end], self.targets[start:end]

    def num_batches(self, size: int, drop_last: bool = False) -> int:
        """How many pairs ``batches(size, drop_last)`` yields."""
        size = _index_count(size, "num_batches")
        if size <= 0:
            raise ShapeError(f"Dataset.num_batches: size must be positive, found {size}")
        return len(self) // size if drop_last else -(-len(self) // size)

    def split(self, fraction: float, seed: int) -> tuple[Dataset, Dataset]:
        """``(train, test)``: shuffle with ``seed``, then the first ``round(fraction * len)``
        examples (halves rounded up) are the training set and the rest the test set."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float | np.floating):
            raise ShapeError(f"Dataset.split: fraction must be a number, found {fraction!r}")
        if not 0.0 <= float(fraction) <= 1.0:
            raise ShapeError(f"Dataset.split: fraction must be in [0, 1], found {fraction}")
        shuffled = self.shuffle(seed)
        n_train = int(np.floor(float(fraction) * len(self) + 0.5))
        return shuffled[:n_train], shuffled[n_train:]

    def __repr__(self) -> str:
        return (f"Dataset({len(self)} examples, inputs {tuple(self.inputs.shape[1:])} "
                f"{self.inputs.dtype}, targets {tuple(self.targets.shape[1:])} "
                f"{self.targets.dtype})")
