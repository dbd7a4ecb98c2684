"""Where torchlean deliberately differs from PyTorch (or agrees only by a convention), as data.

The op battery (test_op_battery.py) compares every primitive with PyTorch on its samples, except
the samples an entry here marks as ``skips``; tests/test_semantics.py tests every entry at the
exact points where the convention matters, against PyTorch where PyTorch has an answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from torchlean.ops.registry import Sample


def _never(sample: Sample) -> bool:
    return False


@dataclass(frozen=True)
class IntendedDifference:
    key: str
    ops: tuple[str, ...]
    torchlean: str
    pytorch: str
    # Samples of these ops that the PyTorch comparison must skip (the difference applies there).
    skips: Callable[[Sample], bool] = field(default=_never)


def _out_of_range_index(sample: Sample) -> bool:
    n = sample.inputs[0].shape[0]
    idx = sample.attrs.get("idx", sample.attrs.get("i"))
    return bool((np.asarray(idx) >= n).any())


INTENDED_DIFFERENCES: tuple[IntendedDifference, ...] = (
    IntendedDifference(
        "tie_split", ("max", "min"),
        torchlean="at a == b the upstream gradient is split 0.5 / 0.5",
        pytorch="torch.maximum / torch.minimum also split ties evenly (agreement, by convention)"),
    IntendedDifference(
        "clamp_boundary", ("clamp",),
        torchlean="gradient is the indicator of the open interval (lo, hi): 0 at x == lo or hi",
        pytorch="torch.clamp passes the gradient (1) at the boundaries"),
    IntendedDifference(
        "sqrt_nonpositive", ("sqrt",),
        torchlean="forward sqrt(max(x, 0)); gradient 0 for x <= 0",
        pytorch="torch.sqrt gives NaN forward for x < 0, and inf (x == 0) or NaN gradients"),
    IntendedDifference(
        "relu_at_zero", ("relu",),
        torchlean="gradient 0 at x == 0",
        pytorch="torch.relu also gives 0 at 0 (agreement, by convention)"),
    IntendedDifference(
        "abs_at_zero", ("abs",),
        torchlean="subgradient sign(0) = 0",
        pytorch="torch.abs also gives 0 at 0 (agreement, by convention)"),
    IntendedDifference(
        "nat_out_of_range", ("gather_scalar_nat", "gather_vec_nat", "gather_rows_nat"),
        torchlean="an index >= n reads 0 (a zero row) and receives no gradient",
        pytorch="indexing out of range raises IndexError",
        skips=_out_of_range_index),
)

BY_OP: dict[str, list[IntendedDifference]] = {}
for _d in INTENDED_DIFFERENCES:
    for _op in _d.ops:
        BY_OP.setdefault(_op, []).append(_d)


def torch_skips(op: str, sample: Sample) -> bool:
    """Whether the PyTorch comparison of this sample is replaced by an intended difference."""
    return any(d.skips(sample) for d in BY_OP.get(op, ()))
