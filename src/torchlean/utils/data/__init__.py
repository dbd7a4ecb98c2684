"""``torchlean.utils.data``: torch.utils.data's datasets, samplers and ``DataLoader``.

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

An ``IterableDataset`` (a stream: ``__iter__`` only) is batched as it is read, in its own order
(``shuffle`` and samplers are refused, as torch refuses them); ``ChainDataset`` concatenates
streams, ``StackDataset`` zips datasets per index, ``DistributedSampler`` gives each of
``num_replicas`` ranks its share of the (optionally shuffled, per ``set_epoch``) indices.

Batches are produced in this process: ``num_workers`` is accepted for source compatibility and
only checked (torch's worker processes change speed, not results, for map-style datasets;
``get_worker_info()`` is None, as in torch's main process).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...core.errors import IndexRangeError, ShapeError, TorchLeanError
from ...core.rng import Generator, check_generator
from ...engine.tensor import Tensor, stack, tensor

__all__ = [
    "DataLoader", "Dataset", "Subset", "TensorDataset", "default_collate", "random_split",
    "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
    "WeightedRandomSampler", "BatchSampler", "ConcatDataset", "IterableDataset", "ChainDataset",
    "StackDataset", "DistributedSampler", "get_worker_info", "default_convert",
]


class Dataset:
    """Base class of map-style datasets: subclasses define ``__getitem__`` and ``__len__``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.__getitem__ is not implemented")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.__len__ is not implemented")


class IterableDataset(Dataset):
    """Base class of stream datasets: subclasses define ``__iter__`` (``__len__`` optional);
    ``a + b`` chains two streams."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__}.__iter__ is not implemented")

    def __add__(self, other: Any) -> ChainDataset:
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """Several iterable datasets read one after the other."""

    def __init__(self, datasets: Sequence[Any]) -> None:
        self.datasets = list(datasets)
        for d in self.datasets:
            if not hasattr(d, "__iter__"):
                raise TorchLeanError(f"ChainDataset: expected iterable datasets, found "
                                     f"{type(d).__name__}")

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            try:
                total += len(d)
            except (TypeError, NotImplementedError):
                raise TypeError(f"ChainDataset: {type(d).__name__} has no __len__") from None
        return total


class StackDataset(Dataset):
    """Datasets of one length zipped per index: a tuple (positional) or a dict (keywords)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise TorchLeanError("StackDataset: give datasets positionally or by keyword, not "
                                 "both")
        if not args and not kwargs:
            raise TorchLeanError("StackDataset: at least one dataset is required")
        self.datasets: Any = args if args else kwargs
        sizes = {_length("StackDataset", d, "each dataset")
                 for d in (args if args else kwargs.values())}
        if len(sizes) != 1:
            raise ShapeError(f"StackDataset: the datasets have different lengths "
                             f"{sorted(sizes)}")
        self._size = sizes.pop()

    def __getitem__(self, index: int) -> Any:
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._size


def get_worker_info() -> None:
    """None: batches are made in the calling process (torch's answer there too)."""
    return None


def default_convert(data: Any) -> Any:
    """NumPy arrays (and numbers inside containers) to tensors, without batching: what torch's
    loader applies when ``batch_size=None``."""
    if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
        return tensor(data)
    if isinstance(data, Mapping):
        return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(default_convert(v) for v in data)
    return data


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


class ConcatDataset(Dataset):
    """The examples of several datasets, one after the other."""

    def __init__(self, datasets: Sequence[Any]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise TorchLeanError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = list(np.cumsum([_length("ConcatDataset", d, "a dataset")
                                                for d in self.datasets]).tolist())

    def __len__(self) -> int:
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, index: int) -> Any:
        i = _index("ConcatDataset", index)
        n = len(self)
        if not -n <= i < n:
            raise IndexRangeError(f"ConcatDataset: index {i} out of range for {n} examples")
        i %= n
        k = int(np.searchsorted(self.cumulative_sizes, i, side="right"))
        start = self.cumulative_sizes[k - 1] if k else 0
        return self.datasets[k][i - start]


class Sampler:
    """Base class of samplers: iterables of dataset indices."""

    def __init__(self, data_source: Any = None) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__}.__iter__ is not implemented")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __iter__(self) -> Iterator[int]:
        return iter(range(_length("SequentialSampler", self.data_source, "data_source")))

    def __len__(self) -> int:
        return _length("SequentialSampler", self.data_source, "data_source")


class RandomSampler(Sampler):
    """A seeded random order of the dataset's indices each epoch (``replacement=True``:
    ``num_samples`` independent draws)."""

    def __init__(self, data_source: Any, replacement: bool = False,
                 num_samples: int | None = None, generator: Generator | None = None) -> None:
        super().__init__(data_source)
        self.replacement = bool(replacement)
        self._num_samples = None if num_samples is None else _positive_int(
            "RandomSampler", "num_samples", num_samples, 1)
        if self._num_samples is not None and not replacement:
            raise TorchLeanError("RandomSampler: num_samples needs replacement=True in "
                                 "torchlean")
        self.generator = check_generator("RandomSampler", generator) \
            if generator is not None else None

    @property
    def num_samples(self) -> int:
        return self._num_samples if self._num_samples is not None else _length(
            "RandomSampler", self.data_source, "data_source")

    def __iter__(self) -> Iterator[int]:
        n = _length("RandomSampler", self.data_source, "data_source")
        gen = check_generator("RandomSampler", self.generator)
        if self.replacement:
            draws = np.asarray(gen.uniform((self.num_samples,)))
            return iter(np.minimum((draws * n).astype(np.int64), n - 1).tolist())
        return iter(_permutation(n, gen))

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a seeded random order each epoch."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        super().__init__(None)
        self.indices = [_index("SubsetRandomSampler", i) for i in indices]
        self.generator = check_generator("SubsetRandomSampler", generator) \
            if generator is not None else None

    def __iter__(self) -> Iterator[int]:
        order = _permutation(len(self.indices), check_generator("SubsetRandomSampler",
                                                                self.generator))
        return iter([self.indices[i] for i in order])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Generator | None = None) -> None:
        super().__init__(None)
        w = np.asarray(weights.numpy() if isinstance(weights, Tensor) else weights, np.float64)
        if w.ndim != 1 or not len(w) or (w < 0).any() or not np.isfinite(w).all() \
                or w.sum() <= 0:
            raise TorchLeanError("WeightedRandomSampler: weights must be a non-empty 1-D "
                                 "sequence of non-negative finite numbers with a positive sum")
        if not replacement:
            raise TorchLeanError("WeightedRandomSampler: replacement=False is not supported "
                                 "by torchlean")
        self.weights = w
        self.num_samples = _positive_int("WeightedRandomSampler", "num_samples", num_samples, 1)
        self.generator = check_generator("WeightedRandomSampler", generator) \
            if generator is not None else None

    def __iter__(self) -> Iterator[int]:
        gen = check_generator("WeightedRandomSampler", self.generator)
        cdf = np.cumsum(self.weights / self.weights.sum())
        draws = np.asarray(gen.uniform((self.num_samples,)))
        return iter(np.minimum(np.searchsorted(cdf, draws, side="right"),
                               len(cdf) - 1).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool) -> None:
        super().__init__(None)
        self.sampler = sampler
        self.batch_size = _positive_int("BatchSampler", "batch_size", batch_size, 1)
        self.drop_last = bool(drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for i in self.sampler:
            batch.append(_index("BatchSampler", i))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler):
    """Rank ``rank``'s share of the indices among ``num_replicas`` (torchlean.distributed's
    rank and size when not given): the (optionally shuffled, seeded by ``seed + epoch``) order
    padded by wrapping (or cut, ``drop_last``) to a multiple of ``num_replicas``, then every
    ``num_replicas``-th index from ``rank``, as torch's."""

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        op = "DistributedSampler"
        if num_replicas is None or rank is None:
            raise TorchLeanError(f"{op}: give num_replicas and rank (torchlean's MPI ranks: "
                                 "torchlean.distributed)")
        self.num_replicas = _positive_int(op, "num_replicas", num_replicas, 1)
        self.rank = _positive_int(op, "rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise TorchLeanError(f"{op}: rank must be in [0, {self.num_replicas - 1}], found "
                                 f"{rank}")
        self.dataset, self.shuffle, self.seed = dataset, bool(shuffle), int(seed)
        self.drop_last, self.epoch = bool(drop_last), 0
        n = _length(op, dataset, "dataset")
        if self.drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """A new shuffle order for each epoch (the same on every rank)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        n = _length("DistributedSampler", self.dataset, "dataset")
        if self.shuffle:
            indices = _permutation(n, Generator(self.seed + self.epoch))
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            while pad > 0:
                indices += indices[:pad]
                pad = self.total_size - len(indices)
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples


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
                 generator: Generator | None = None, batch_sampler: Any = None,
                 **unused: Any) -> None:
        op = "DataLoader"
        self.batch_sampler = batch_sampler
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise TorchLeanError(f"{op}: batch_sampler option is mutually exclusive with "
                                     "batch_size, shuffle, sampler, and drop_last")
            batch_size = None
        self._stream = isinstance(dataset, IterableDataset)  # (torch decides by class too)
        if self._stream:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise TorchLeanError(f"{op}: an IterableDataset is read in its own order; "
                                     "shuffle, sampler and batch_sampler must be unset (as in "
                                     "torch)")
        elif not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TorchLeanError(f"{op}: dataset must be map-style (define __len__ and "
                                 f"__getitem__) or an IterableDataset, found "
                                 f"{type(dataset).__name__}")
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
        if not self._stream:
            _length(op, dataset, "dataset")

    def _indices(self) -> list[int]:
        n = _length("DataLoader", self.dataset, "dataset")
        if self.sampler is not None:
            return [_index("DataLoader sampler", i) for i in self.sampler]
        if self.shuffle:
            return _permutation(n, check_generator("DataLoader", self.generator))
        return list(range(n))

    def _read_stream(self) -> Iterator[Any]:
        if self.batch_size is None:
            for item in self.dataset:
                yield default_convert(item)
            return
        chunk: list[Any] = []
        for item in self.dataset:
            chunk.append(item)
            if len(chunk) == self.batch_size:
                yield self.collate_fn(chunk)
                chunk = []
        if chunk and not self.drop_last:
            yield self.collate_fn(chunk)

    def __iter__(self) -> Iterator[Any]:
        if self._stream:
            yield from self._read_stream()
            return
        if self.batch_sampler is not None:
            for chunk in self.batch_sampler:
                yield self.collate_fn([self.dataset[_index("DataLoader batch_sampler", i)]
                                       for i in chunk])
            return
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
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self._stream:
            # a TypeError, as torch's: list(loader) asks for a length hint and takes a
            # TypeError as "unknown"
            try:
                n = len(self.dataset)
            except (TypeError, NotImplementedError):
                raise TypeError(f"DataLoader: the IterableDataset "
                                f"{type(self.dataset).__name__} has no __len__") from None
        else:
            n = (len(self.sampler) if self.sampler is not None
                 and hasattr(self.sampler, "__len__")
                 else _length("DataLoader", self.dataset, "dataset"))
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
