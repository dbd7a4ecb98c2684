"""The one node type every recorder uses: a recorded value's op, parents and attributes.

The eager tape, the compiled graph, ``tl.Tensor``'s reverse pass and forward mode's seeded views
all hand ``autodiff`` a list of these (its ``NodeLike``): the op that made the value (``None`` for
a leaf), the parents' positions, the static attributes, whether it needs a gradient, and its
shape. What differs between recorders is only what they fill in: the tape keeps the ``value`` and
an optional ``name``; the graph keeps the ``kind`` ("input", "const" or "op"), the ``dtype`` and,
for inputs, their ``index``.
"""

from __future__ import annotations

from typing import Any

from .registry import Primitive


class Node:
    """One recorded value (see the module docstring)."""

    __slots__ = ("op", "parents", "attrs", "requires_grad", "shape", "dtype", "kind", "index",
                 "value", "name")

    def __init__(self, op: Primitive | None, parents: tuple[int, ...], attrs: dict[str, Any],
                 requires_grad: bool, shape: tuple[int, ...], *, dtype: Any = None,
                 kind: str | None = None, index: int = -1, value: Any = None,
                 name: str | None = None) -> None:
        self.op = op
        self.parents = parents
        self.attrs = attrs
        self.requires_grad = requires_grad
        self.shape = shape
        self.dtype = dtype
        self.kind = kind if kind is not None else ("leaf" if op is None else "op")
        self.index = index  # position among the graph's inputs, for input nodes
        self.value = value
        self.name = name

    @classmethod
    def leaf_view(cls, node: Node) -> Node:
        """``node`` seen as a leaf (no op, no parents): forward mode starts a tangent there."""
        return cls(None, (), {}, node.requires_grad, node.shape, dtype=node.dtype)

    @property
    def op_name(self) -> str:
        return "leaf" if self.op is None else self.op.name

    def __repr__(self) -> str:
        return (f"Node({self.op_name}, parents={self.parents}, shape={self.shape}, "
                f"requires_grad={self.requires_grad}, name={self.name!r})")
