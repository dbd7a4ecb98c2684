"""Dataset: pairing, indexing, seeded shuffles, batching and splits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchlean.core.errors import ShapeError
from torchlean.data import Dataset


def make(n: int = 10) -> Dataset:
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n) * 10
    return Dataset(x, y)


def test_construction_len_and_indexing():
    ds = make(10)
    assert len(ds) == 10
    x, y = ds[3]
    assert np.array_equal(x, [9, 10, 11]) and y == 30
    x, y = ds[-1]
    assert y == 90
    sub = ds[2:5]
    assert isinstance(sub, Dataset) and len(sub) == 3 and np.array_equal(sub.targets, [20, 30, 40])
    picked = ds[np.array([4, 0])]
    assert np.array_equal(picked.targets, [40, 0]) and np.array_equal(picked.inputs[1], [0, 1, 2])
    masked = ds[ds.targets > 60]
    assert np.array_equal(masked.targets, [70, 80, 90])
    assert [int(y) for _, y in ds] == list(range(0, 100, 10))
    with pytest.raises(IndexError):
        ds[10]
    with pytest.raises(IndexError):
        ds[np.array([0, 12])]
    assert "10 examples" in repr(ds)


def test_mismatched_or_scalar_arrays_raise():
    with pytest.raises(ShapeError, match=r"first dimension: \(4, 2\) vs \(5,\)"):
        Dataset(np.zeros((4, 2)), np.zeros(5))
    with pytest.raises(ShapeError, match="first"):
        Dataset(np.zeros(()), np.zeros(()))
    with pytest.raises(ShapeError, match="mask of length 3"):
        make(4)[np.array([True, False, True])]
    with pytest.raises(ShapeError):
        make(4)[np.array([[0, 1]])]


def test_shuffle_is_the_documented_seeded_permutation():
    ds = make(20)
    shuffled = ds.shuffle(7)
    perm = np.random.default_rng(7).permutation(20)
    assert np.array_equal(shuffled.targets, ds.targets[perm])
    assert np.array_equal(shuffled.inputs, ds.inputs[perm])  # pairs stay together
    assert np.array_equal(ds.shuffle(7).targets, shuffled.targets)
    assert not np.array_equal(ds.shuffle(8).targets, shuffled.targets)
    assert np.array_equal(ds.targets, np.arange(20) * 10)  # the original is untouched
    with pytest.raises(ShapeError):
        ds.shuffle(0.5)


def test_batches_in_order_with_and_without_drop_last():
    ds = make(10)
    batches = list(ds.batches(4))
    assert [len(y) for _, y in batches] == [4, 4, 2]
    assert np.array_equal(np.concatenate([y for _, y in batches]), ds.targets)
    assert all(x.shape == (len(y), 3) for x, y in batches)
    assert [len(y) for _, y in ds.batches(4, drop_last=True)] == [4, 4]
    assert [len(y) for _, y in ds.batches(5, drop_last=True)] == [5, 5]
    assert [len(y) for _, y in ds.batches(20)] == [10]
    assert list(ds.batches(20, drop_last=True)) == []
    assert ds.num_batches(4) == 3 and ds.num_batches(4, drop_last=True) == 2
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ShapeError):
            list(ds.batches(bad))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), size=st.integers(1, 12), drop_last=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_shuffled_batches_cover_every_example_once(n, size, drop_last, seed):
    ds = make(n).shuffle(seed)
    ys = [y for _, y in ds.batches(size, drop_last=drop_last)]
    assert len(ys) == ds.num_batches(size, drop_last)
    seen = np.concatenate(ys) if ys else np.zeros(0, dtype=int)
    expected = n - n % size if drop_last else n
    assert len(seen) == expected
    assert np.array_equal(seen, ds.targets[:expected])
    assert len(set(seen.tolist())) == expected


def test_split():
    ds = make(10)
    train, test = ds.split(0.8, seed=3)
    assert len(train) == 8 and len(test) == 2
    together = np.concatenate([train.targets, test.targets])
    assert np.array_equal(together, ds.shuffle(3).targets)
    assert sorted(together.tolist()) == ds.targets.tolist()
    train2, _ = ds.split(0.8, seed=3)
    assert np.array_equal(train.targets, train2.targets)
    assert len(make(5).split(0.5, seed=0)[0]) == 3  # halves round up
    assert len(ds.split(0.0, seed=0)[0]) == 0 and len(ds.split(1.0, seed=0)[1]) == 0
    for bad in (-0.1, 1.5, "0.5"):
        with pytest.raises(ShapeError):
            ds.split(bad, seed=0)
