"""torchlean.utils.data: datasets, default_collate and DataLoader against torch.utils.data."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import IndexRangeError, ShapeError, TorchLeanError
from torchlean.utils.data import (
    DataLoader,
    Dataset,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)

torch = pytest.importorskip("torch")
tdata = torch.utils.data

Pair = namedtuple("Pair", ["x", "y"])


def _same(ours, theirs):
    """Structure, dtypes and values of a collated batch equal torch's."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tl.Tensor), type(ours)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for k in theirs:
            _same(ours[k], theirs[k])
    elif isinstance(theirs, list | tuple):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _same(a, b)
    else:
        assert ours == theirs


def _examples(kind: str, lib):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    if kind == "tensors":
        return [lib.from_numpy(x[i].copy()) for i in range(4)]
    if kind == "arrays":
        return [x[i] for i in range(4)]
    if kind == "ints":
        return [3, 1, 4, 1]
    if kind == "floats":
        return [0.5, 1.5, -2.0, 3.25]
    if kind == "bools":
        return [True, False, True, True]
    if kind == "tuples":
        return [(lib.from_numpy(x[i].copy()), i) for i in range(4)]
    if kind == "dicts":
        return [{"image": lib.from_numpy(x[i].copy()), "label": i, "name": f"n{i}"}
                for i in range(4)]
    if kind == "namedtuples":
        return [Pair(lib.from_numpy(x[i].copy()), float(i)) for i in range(4)]
    return [[i, float(i)] for i in range(4)]  # lists


@pytest.mark.parametrize("kind", ["tensors", "arrays", "ints", "floats", "bools", "tuples",
                                  "dicts", "namedtuples", "lists"])
def test_default_collate_matches_torch(kind):
    _same(default_collate(_examples(kind, tl)), tdata.default_collate(_examples(kind, torch)))


def test_default_collate_refuses_ragged_and_unknown():
    with pytest.raises(ShapeError, match="different shapes"):
        default_collate([tl.zeros(2), tl.zeros(3)])
    with pytest.raises(ShapeError, match="same number of fields"):
        default_collate([(1, 2), (1,)])
    with pytest.raises(TorchLeanError, match="found object"):
        default_collate([object(), object()])
    with pytest.raises(TorchLeanError, match="non-empty"):
        default_collate([])


@pytest.mark.parametrize(("n", "batch", "drop_last"), [(10, 3, False), (10, 3, True),
                                                       (9, 3, True), (5, 8, False)])
def test_batches_in_order_match_torch(n, batch, drop_last):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n)
    ours = DataLoader(TensorDataset(tl.from_numpy(x), tl.from_numpy(y)), batch_size=batch,
                      drop_last=drop_last)
    theirs = tdata.DataLoader(tdata.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                              batch_size=batch, drop_last=drop_last)
    assert len(ours) == len(theirs)
    batches = list(ours)
    assert len(batches) == len(list(theirs))
    for (a, b), (ta, tb) in zip(batches, theirs, strict=True):
        _same([a, b], [ta, tb])


def test_shuffle_is_a_seeded_permutation_per_epoch():
    ds = TensorDataset(tl.arange(50))
    loader = DataLoader(ds, batch_size=7, shuffle=True, generator=tl.Generator(3))
    first = [int(v) for (b,) in loader for v in b.tolist()]
    second = [int(v) for (b,) in loader for v in b.tolist()]
    assert sorted(first) == list(range(50)) and sorted(second) == list(range(50))
    assert first != list(range(50)) and first != second  # shuffled, anew each epoch
    again = DataLoader(ds, batch_size=7, shuffle=True, generator=tl.Generator(3))
    assert [int(v) for (b,) in again for v in b.tolist()] == first  # the seed fixes the order
    tl.manual_seed(5)
    default_a = [int(v) for (b,) in DataLoader(ds, batch_size=50, shuffle=True)
                 for v in b.tolist()]
    tl.manual_seed(5)
    default_b = [int(v) for (b,) in DataLoader(ds, batch_size=50, shuffle=True)
                 for v in b.tolist()]
    assert default_a == default_b  # without a generator: tl.manual_seed's default generator


class Squares(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {"x": float(i), "y": i * i}


def test_custom_dataset_sampler_collate_fn_and_batch_none():
    loader = DataLoader(Squares(), batch_size=4)
    batches = list(loader)
    assert [b["y"].tolist() for b in batches] == [[0, 1, 4, 9], [16, 25]]
    assert batches[0]["x"].dtype == np.float64  # Python floats collate to float64, as torch
    assert [b["y"].tolist() for b in DataLoader(Squares(), batch_size=2, sampler=[5, 0, 3])] \
        == [[25, 0], [9]]
    seen = DataLoader(Squares(), batch_size=3, collate_fn=lambda items: len(items))
    assert list(seen) == [3, 3]
    assert list(DataLoader(Squares(), batch_size=None))[2] == {"x": 2.0, "y": 4}


def test_subset_and_random_split():
    ds = Squares()
    sub = Subset(ds, [4, 1])
    assert len(sub) == 2 and sub[0]["y"] == 16
    parts = random_split(ds, [4, 2], generator=tl.Generator(0))
    assert [len(p) for p in parts] == [4, 2]
    assert sorted(parts[0].indices + parts[1].indices) == list(range(6))
    fractions = random_split(TensorDataset(tl.arange(10)), [0.85, 0.15],
                             generator=tl.Generator(1))
    theirs = tdata.random_split(tdata.TensorDataset(torch.arange(10)), [0.85, 0.15])
    assert [len(p) for p in fractions] == [len(p) for p in theirs]
    with pytest.raises(TorchLeanError, match="sum"):
        random_split(ds, [4, 1])
    with pytest.raises(IndexRangeError):
        Subset(ds, [6])


def test_loader_checks_arguments():
    ds = TensorDataset(tl.zeros(4, 2))
    with pytest.raises(TorchLeanError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(TorchLeanError, match="mutually exclusive"):
        DataLoader(ds, shuffle=True, sampler=[0, 1])
    with pytest.raises(TorchLeanError, match="map-style"):
        DataLoader(iter([1, 2]))
    with pytest.raises(TorchLeanError, match="generator"):
        DataLoader(ds, shuffle=True, generator=np.random.default_rng(0))
    with pytest.raises(TorchLeanError, match="unexpected keyword"):
        DataLoader(ds, batchsize=2)
    with pytest.raises(ShapeError, match="size mismatch"):
        TensorDataset(tl.zeros(4, 2), tl.zeros(3))
