"""``torchlean.utils.data``: torch.utils.data's map-style datasets and ``DataLoader``.

A map-style dataset is anything with ``__len__`` and ``__getitem__(i)``; ``Dataset`` is the base
class user datasets derive from (as in torch), ``TensorDataset`` pairs tensors along their first
dimension, ``Subset`` and ``random_split`` pick examples by index. ``DataLoader`` walks indices in
order or shuffled, groups them into batches (``batch_size``, ``drop_last``) and merges each batch
with ``collate_fn`` (``default_collate`` unless given: tensors, NumPy arrays and numbers are
stacked, tuples, lists and dicts are collated field by field, as torch does).

Randomness is seeded, never global state a caller cannot control: a shuffled loader draws each
epoch's order from ``generator`` (a ``tl.Generator``), or from the default generator that
``tl.manual_seed`` seeds. The order is the ranks of one uniform draw per example, so a seed gives
the same order on every machine (not torch's order: the two frameworks' random streams differ).

Batches are produced in this process: ``num_workers`` is accepted for source compatibility and
only checked (torch's worker processes change speed, not results, for map-style datasets).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import IndexRangeError, ShapeError, TorchLeanError
from ..core.rng import Generator, check_generator
from ..engine.tensor import Tensor, stack, tensor

__all__ = [
    "DataLoader", "Dataset", "Subset", "TensorDataset", "default_collate", "random_split",
]


class Dataset:
    """Base class of map-style datasets: subclasses define ``__getitem__`` and ``__len__``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.__getitem__ is not implemented")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.__len__ is not implemented")


def _length(op: str, obj: Any, name: str) -> int:
    try:
        n = len(obj)
    except TypeError:
        raise TorchLeanError(f"{op}: {name} must have a length (a map-style dataset with "
                             f"__len__ and __getitem__), found {type(obj).__name__}") from None
    except NotImplementedError as exc:
        raise TorchLeanError(f"{op}: {name} has no length ({exc})") from None
    return int(n)


class TensorDataset(Dataset):
    """Example ``i`` is ``tuple(t[i] for t in tensors)``; all tensors share their first size."""

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ShapeError("TensorDataset: expected at least one tensor")
        sizes = []
        for k, t in enumerate(tensors):
            shape = getattr(t, "shape", None)
            if shape is None or len(shape) == 0:
                raise ShapeError(f"TensorDataset: tensor {k} needs a first (example) dimension, "
                                 f"found {type(t).__name__} of shape {shape}")
            sizes.append(int(shape[0]))
        if len(set(sizes)) != 1:
            raise ShapeError(f"TensorDataset: size mismatch between tensors: first dimensions "
                             f"{sizes}")
        self.tensors = tuple(tensors)

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])


class Subset(Dataset):
    """The examples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        n = _length("Subset", dataset, "dataset")
        picked = [_index("Subset", i) for i in indices]
        bad = [i for i in picked if not -n <= i < n]
        if bad:
            raise IndexRangeError(f"Subset: indices {bad[:5]} out of range for a dataset of {n}")
        self.dataset = dataset
        self.indices = picked

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def _index(op: str, value: Any) -> int:
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TorchLeanError(f"{op}: indices must be ints, found {value!r}")
    return int(value)


def _permutation(n: int, generator: Generator) -> list[int]:
    """A uniformly random order of ``range(n)``: the ranks of one draw of n uniforms."""
    return [int(i) for i in np.argsort(generator.uniform((n,)), kind="stable")]


def random_split(dataset: Any, lengths: Sequence[Any],
                 generator: Generator | None = None) -> list[Subset]:
    """Disjoint random subsets of the given lengths (ints summing to ``len(dataset)``, or
    fractions summing to 1, whose remainders go round-robin to the first subsets, as torch)."""
    n = _length("random_split", dataset, "dataset")
    gen = check_generator("random_split", generator)
    sizes = list(lengths)
    if sizes and all(isinstance(v, float) for v in sizes) and math.isclose(sum(sizes), 1.0):
        if any(not 0.0 <= v <= 1.0 for v in sizes):
            raise TorchLeanError(f"random_split: fractions must lie in [0, 1], found {sizes}")
        counts = [int(math.floor(n * v)) for v in sizes]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        sizes = counts
    ints = [_index("random_split", v) for v in sizes]
    if any(v < 0 for v in ints) or sum(ints) != n:
        raise TorchLeanError(f"random_split: lengths {list(lengths)} must be non-negative and sum "
                             f"to the dataset's length {n} (or be fractions summing to 1)")
    order = _permutation(n, gen)
    out, start = [], 0
    for size in ints:
        out.append(Subset(dataset, order[start:start + size]))
        start += size
    return out


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of examples into a batch, as ``torch.utils.data.default_collate``:
    tensors and NumPy arrays are stacked along a new first axis (into a tensor), Python ints,
    floats and bools become int64, float64 and bool tensors, strings stay a list, and mappings,
    named tuples and sequences are collated field by field (a tuple of fields becomes a list,
    as torch returns it)."""
    if not isinstance(batch, Sequence) or isinstance(batch, str) or len(batch) == 0:
        raise TorchLeanError(f"default_collate: expected a non-empty list of examples, found "
                             f"{type(batch).__name__}")
    elem = batch[0]
    kinds = {type(b) for b in batch}
    if isinstance(elem, Tensor):
        if any(not isinstance(b, Tensor) for b in batch):
            raise TorchLeanError(f"default_collate: a batch mixes tensors with "
                                 f"{sorted(k.__name__ for k in kinds)}")
        shapes = {tuple(b.shape) for b in batch}
        if len(shapes) != 1:
            raise ShapeError(f"default_collate: tensors of different shapes {sorted(shapes)} "
                             "cannot be stacked; pass a collate_fn that pads them")
        if all(b.device == "cpu" and not b.requires_grad for b in batch):
            # Plain host data (the usual batch): one NumPy stack instead of a recorded op chain.
            return tensor(np.stack([b.numpy() for b in batch]))
        return stack(list(batch), 0)  # with a history (or on a device): recorded, as torch
    if isinstance(elem, np.ndarray):
        shapes = {np.shape(b) for b in batch}
        if len(shapes) != 1:
            raise ShapeError(f"default_collate: arrays of different shapes {sorted(shapes)} "
                             "cannot be stacked; pass a collate_fn that pads them")
        if elem.dtype.kind not in "biuf":
            raise TorchLeanError(f"default_collate: arrays of dtype {elem.dtype} are not numeric")
        return tensor(np.stack([np.asarray(b) for b in batch]))
    if isinstance(elem, bool | np.bool_):
        return tensor(np.asarray(batch, dtype=np.bool_))
    if isinstance(elem, numbers.Integral):
        return tensor(np.asarray(batch, dtype=np.int64))
    if isinstance(elem, numbers.Real):
        return tensor(np.asarray(batch, dtype=np.float64))
    if isinstance(elem, str | bytes):
        return list(batch)
    if isinstance(elem, Mapping):
        return {key: default_collate([b[key] for b in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple keeps its type
        return type(elem)(*(default_collate(list(f)) for f in zip(*batch, strict=True)))
    if isinstance(elem, Sequence):
        lengths = {len(b) for b in batch}
        if len(lengths) != 1:
            raise ShapeError(f"default_collate: each example in the batch should have the same "
                             f"number of fields, found {sorted(lengths)}")
        return [default_collate(list(f)) for f in zip(*batch, strict=True)]
    raise TorchLeanError(f"default_collate: batch must contain tensors, NumPy arrays, numbers, "
                         f"dicts or lists; found {type(elem).__name__}")


def _positive_int(op: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise TorchLeanError(f"{op}: {name} must be an int >= {minimum}, found {value!r}")
    return int(value)


class DataLoader:
    """Batches of a map-style dataset: ``for x, y in DataLoader(ds, batch_size=64, shuffle=True)``.

    ``batch_size=None`` yields single examples without collating (torch's convention);
    ``sampler`` (an iterable of indices, re-iterated each epoch) replaces the in-order or
    shuffled walk and excludes ``shuffle``; ``drop_last`` drops a final short batch.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False,
                 sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None,
                 pin_memory: bool = False, drop_last: bool = False,
                 generator: Generator | None = None, **unused: Any) -> None:
        op = "DataLoader"
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TorchLeanError(f"{op}: dataset must be map-style (define __len__ and "
                                 f"__getitem__), found {type(dataset).__name__}")
        allowed = {"timeout", "worker_init_fn", "prefetch_factor", "persistent_workers",
                   "multiprocessing_context", "pin_memory_device"}
        unknown = sorted(set(unused) - allowed)
        if unknown:
            raise TorchLeanError(f"{op}: unexpected keyword argument(s) {unknown}")
        if batch_size is not None:
            batch_size = _positive_int(op, "batch_size", batch_size, 1)
        if not isinstance(shuffle, bool | np.bool_):
            raise TorchLeanError(f"{op}: shuffle must be a bool, found {shuffle!r}")
        if sampler is not None and shuffle:
            raise TorchLeanError(f"{op}: sampler option is mutually exclusive with shuffle")
        _positive_int(op, "num_workers", num_workers, 0)
        if collate_fn is not None and not callable(collate_fn):
            raise TorchLeanError(f"{op}: collate_fn must be callable, found {collate_fn!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.sampler = sampler
        self.num_workers = int(num_workers)
        self.collate_fn = collate_fn if collate_fn is not None else default_collate
        self.pin_memory = bool(pin_memory)
        self.drop_last = bool(drop_last)
        self.generator = check_generator(op, generator) if generator is not None else None
        _length(op, dataset, "dataset")

    def _indices(self) -> list[int]:
        n = _length("DataLoader", self.dataset, "dataset")
        if self.sampler is not None:
            return [_index("DataLoader sampler", i) for i in self.sampler]
        if self.shuffle:
            return _permutation(n, check_generator("DataLoader", self.generator))
        return list(range(n))

    def __iter__(self) -> Iterator[Any]:
        indices = self._indices()
        if self.batch_size is None:
            for i in indices:
                yield self.dataset[i]
            return
        size = self.batch_size
        for start in range(0, len(indices), size):
            chunk = indices[start:start + size]
            if len(chunk) < size and self.drop_last:
                return
            yield self.collate_fn([self.dataset[i] for i in chunk])

    def __len__(self) -> int:
        n = (len(self.sampler) if self.sampler is not None and hasattr(self.sampler, "__len__")
             else _length("DataLoader", self.dataset, "dataset"))
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
