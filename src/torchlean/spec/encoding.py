"""Reference definition of the encoding primitive ``one_hot`` (``torchlean.ops.encoding``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import empty, prepare
from .defs import define
from .scalar import constant, select


@define("one_hot", rational=True)
def one_hot(labels: Any, num_classes: int) -> np.ndarray:
    """out[..., c] = 1 if labels[...] == c else 0, for c = 0 .. num_classes - 1 (a new last axis).

    Labels are class indices stored as numbers. A label outside [0, num_classes), or one that is
    not an integer, equals no c and gives a row of zeros.
    """
    (labels,) = prepare("one_hot", labels, num_classes=num_classes)
    out = empty(labels.shape + (num_classes,))
    for i in np.ndindex(labels.shape):
        label = labels[i]
        for c in range(num_classes):
            # label == c, as two inequalities: a symbolic label then gives a relation sympy can
            # decide later, where Python's == would compare the expressions structurally.
            one, zero = constant(1, label), constant(0, label)
            out[i + (c,)] = select(label >= c, select(label <= c, one, zero), zero)
    return out
