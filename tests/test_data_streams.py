"""``torchlean.utils.data``'s stream datasets and distributed sampler against torch's:
IterableDataset batching (with and without ``drop_last``, ``batch_size=None``), ``a + b``
chains, ``StackDataset``, ``DistributedSampler`` shares, and the refusals torch makes too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from differential import agree

import torchlean as tl

torch = pytest.importorskip("torch")


def _stream(m: Any, n: int) -> Any:
    class Stream(m.utils.data.IterableDataset):
        def __iter__(self) -> Any:
            for i in range(n):
                yield m.tensor([float(i), float(i * i)]), i % 3

    return Stream()


@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_dataset_batches_as_torch(drop_last: bool) -> None:
    def program(m: Any) -> Any:
        loader = m.utils.data.DataLoader(_stream(m, 7), batch_size=3, drop_last=drop_last)
        single = list(m.utils.data.DataLoader(_stream(m, 2), batch_size=None))
        chained = list(m.utils.data.DataLoader(_stream(m, 2) + _stream(m, 3), batch_size=2))
        return [list(loader), single, chained]
    agree(program, 0, 0)


def test_stack_dataset_and_default_convert() -> None:
    def program(m: Any) -> Any:
        d = m.utils.data
        xs = d.TensorDataset(m.arange(4.0))
        ys = d.TensorDataset(m.arange(4.0) * 10)
        pos, kw = d.StackDataset(xs, ys), d.StackDataset(a=xs, b=ys)
        return [len(pos), pos[2], kw[3], list(d.DataLoader(kw, batch_size=3)),
                d.default_convert((np.ones(2, np.float32), 3)), d.get_worker_info()]
    agree(program, 0, 0)


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (9, 3, False),
                                                   (5, 4, False)])
def test_distributed_sampler_shares(n: int, replicas: int, drop_last: bool) -> None:
    def program(m: Any) -> Any:
        ds = list(range(n))
        plain = [list(m.utils.data.DistributedSampler(ds, replicas, r, shuffle=False,
                                                      drop_last=drop_last))
                 for r in range(replicas)]
        return [plain, [len(m.utils.data.DistributedSampler(ds, replicas, r, drop_last=drop_last))
                        for r in range(replicas)]]
    agree(program, 0, 0)
    # shuffled: another order than torch's (another random stream), the same partition rules
    shares = []
    for epoch in (0, 1):
        per_rank = []
        for r in range(replicas):
            s = tl.utils.data.DistributedSampler(list(range(n)), replicas, r, seed=3,
                                                 drop_last=drop_last)
            s.set_epoch(epoch)
            per_rank.append(list(s))
        shares.append(per_rank)
        flat = [i for share in per_rank for i in share]
        assert len({len(share) for share in per_rank}) == 1
        assert set(flat) <= set(range(n))
        if not drop_last:
            assert set(flat) == set(range(n))
        else:
            assert len(set(flat)) == len(flat)
    assert shares[0] != shares[1]  # set_epoch reshuffles


def test_stream_refusals() -> None:
    d = tl.utils.data
    with pytest.raises(tl.TorchLeanError, match="own order"):
        d.DataLoader(_stream(tl, 3), shuffle=True)
    with pytest.raises(TypeError, match="no __len__"):
        len(d.DataLoader(_stream(tl, 3)))
    with pytest.raises(tl.ShapeError, match="different lengths"):
        d.StackDataset(d.TensorDataset(tl.ones(2)), d.TensorDataset(tl.ones(3)))
    with pytest.raises(tl.TorchLeanError, match="rank must be"):
        d.DistributedSampler(list(range(4)), 2, 2)
