"""Encoding primitives: ``one_hot`` of class indices stored as floats.

Labels travel as float leaves (class indices as integer-valued floats) so that one compiled graph
serves every batch: the labels are an input, not a constant baked into the graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError, SignatureError
from ..core.registry import ErrorInput, Primitive, Sample, register
from ..core.shape import Shape
from .array_api import astype


def _one_hot(labels: Any, num_classes: int) -> Any:
    classes = namespace_of(labels).arange(num_classes, dtype=labels.dtype)
    return astype(labels[..., None] == classes, labels.dtype)


def _one_hot_infer(s: Shape, num_classes: int) -> Shape:
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ShapeError(f"one_hot: num_classes must be a positive int, found {num_classes!r}")
    return s + (num_classes,)


register(Primitive(
    "one_hot", ("labels",), _one_hot_infer, _one_hot, attrs=("num_classes",),
    attr_kinds={"num_classes": K.POSITIVE_INT}, nondiff=True,
    semantics="Class indices (integer-valued floats) to one-hot rows along a new last axis. An "
              "index outside [0, num_classes) gives a zero row. Zero derivative.",
    samples=lambda rng: [Sample((rng.integers(0, 4, size=5).astype(np.float64),),
                                {"num_classes": 4})],
    torch_ref=lambda torch, labels, num_classes: torch.nn.functional.one_hot(
        labels.long(), num_classes).to(labels.dtype),
    error_inputs=[ErrorInput(((3,),), {"num_classes": 0}, ShapeError,
                             "num_classes must be a positive int, found 0"),
                  ErrorInput(((3,),), {}, SignatureError, "missing attribute 'num_classes'")],
))
