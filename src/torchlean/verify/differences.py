"""Where torchlean deliberately differs from PyTorch, and its conventions at kinks, as data.

``INTENDED_DIFFERENCES`` lists each deliberate difference from PyTorch (the ``torch`` column skips
exactly the samples an entry's ``skips`` marks; ``tests/test_semantics.py`` pins each one down).
``KINKS`` says, per primitive, which derivative convention holds where the spec is not
differentiable (ties, relu/abs at 0, clamp boundaries, sqrt at 0, max-pool ties) and how to plant
such points in a sample, so the ``vjp``/``jvp`` columns assert the convention there.

A convention is one of: ``zero`` (the derivative at the kink is 0), ``mean`` (the mean of the two
one-sided directional derivatives, e.g. a tie split 0.5/0.5), ``right`` or ``left`` (a one-sided
derivative along the test direction), ``first`` (the whole derivative goes to one tied input, as
max pooling's first maximum, found by breaking ties toward earlier entries).

Fully masked attention rows are not kinks: the mask is a static attribute, so the spec's
definition of those rows (and their zero derivative) is checked like any other smooth value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..core.registry import Sample


def _never(sample: Sample) -> bool:
    return False


@dataclass(frozen=True)
class IntendedDifference:
    """One deliberate difference from PyTorch (or an agreement that holds only by convention)."""

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


# --- kinks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kink:
    """The convention(s) a primitive documents at its kinks, and how to plant kink points."""

    conventions: tuple[str, ...]
    plant: Callable[[Sample], Sample]
    where: str


def _with_input(sample: Sample, k: int, value: np.ndarray) -> Sample:
    inputs = list(sample.inputs)
    inputs[k] = value
    return replace(sample, inputs=tuple(inputs), note=(sample.note + " +kinks").strip())


def _zeros_at_every_third(sample: Sample) -> Sample:
    x = np.array(sample.inputs[0], dtype=np.float64)
    x.reshape(-1)[::3] = 0.0
    return _with_input(sample, 0, x)


def _sqrt_kinks(sample: Sample) -> Sample:
    x = np.abs(np.array(sample.inputs[0], dtype=np.float64)) + 0.5
    flat = x.reshape(-1)
    flat[::3] = 0.0
    return _with_input(sample, 0, x)


def _ties(sample: Sample) -> Sample:
    a, b = (np.array(x, dtype=np.float64) for x in sample.inputs)
    shared = np.broadcast_arrays(a, b)[0]
    if b.shape == shared.shape:
        b = b.copy()
        b.reshape(-1)[::2] = np.broadcast_to(a, shared.shape).reshape(-1)[::2]
    else:
        a = a.copy()
        a.reshape(-1)[::2] = np.broadcast_to(b, shared.shape).reshape(-1)[::2]
    return replace(sample, inputs=(a, b), note=(sample.note + " +ties").strip())


def _clamp_boundaries(sample: Sample) -> Sample:
    x = np.array(sample.inputs[0], dtype=np.float64)
    flat = x.reshape(-1)
    flat[0::4] = float(sample.attrs["lo"])
    flat[1::4] = float(sample.attrs["hi"])
    return _with_input(sample, 0, x)


def _pool_ties(sample: Sample) -> Sample:
    # Few distinct values: windows hold tied maxima (and smooth-max ties are harmless).
    x = np.array(sample.inputs[0], dtype=np.float64)
    return _with_input(sample, 0, np.round(np.clip(x, -1.0, 1.0)))


KINKS: dict[str, Kink] = {
    "relu": Kink(("zero",), _zeros_at_every_third, "x == 0"),
    "abs": Kink(("zero",), _zeros_at_every_third, "x == 0"),
    "sqrt": Kink(("zero",), _sqrt_kinks, "x == 0"),
    "max": Kink(("mean",), _ties, "a == b"),
    "min": Kink(("mean",), _ties, "a == b"),
    "clamp": Kink(("zero",), _clamp_boundaries, "x == lo or x == hi"),
    **{name: Kink(("first",), _pool_ties, "tied window maxima")
       for name in ("max_pool", "max_pool2d", "max_pool2d_pad")},
}
