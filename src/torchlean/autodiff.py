"""The reverse and forward passes shared by the eager tape and the compiled graph.

Both the tape and the graph are lists of nodes with ``op`` (a ``Primitive`` or ``None`` for a
leaf), ``parents``, ``attrs`` and ``requires_grad``. Running the *same* traversal over both is what
makes the seed-004 link hold bitwise: the tape's reverse pass equals the graph's backprop because
it is the same code visiting the same rules in the same order.

The passes are generic over the Ops interpreter: with ``ARRAY_OPS`` they compute numbers; with a
graph builder's interpreter they record the backward pass as new graph nodes.

Traversal is a plain loop over node ids in reverse (or forward) order: no recursion, so a chain of
100,000 ops works, and no set or dict ordering, so gradient sums never depend on object ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .errors import UnsupportedJvpError
from .ops.registry import Primitive


class NodeLike(Protocol):
    op: Primitive | None
    parents: tuple[int, ...]
    attrs: dict[str, Any]
    requires_grad: bool


def reverse_pass(
    nodes: Sequence[NodeLike],
    values: Sequence[Any],
    out_id: int,
    seed: Any,
    ops: Any,
) -> list[Any]:
    """Cotangents for every node from ``out_id`` back to 0; ``None`` where none arrives.

    A node used by several children receives the sum of their contributions, accumulated in the
    order the children are visited (decreasing id). Nodes with ``requires_grad`` false neither
    receive nor pass gradient.
    """
    grads: list[Any] = [None] * len(nodes)
    if nodes[out_id].requires_grad:
        grads[out_id] = seed
    for i in range(out_id, -1, -1):
        g = grads[i]
        if g is None:
            continue
        node = nodes[i]
        op = node.op
        if op is None:
            continue
        parents = node.parents
        needed = tuple(nodes[p].requires_grad for p in parents) if op.selective else None
        contributions = op.apply_vjp(ops, g, [values[p] for p in parents], values[i], node.attrs,
                                     needed)
        if len(contributions) != len(parents):
            raise TypeError(f"{op.name}: vjp rule returned {len(contributions)} cotangents for "
                            f"{len(parents)} inputs")
        for p, c in zip(parents, contributions):  # noqa: B905  (lengths checked just above)
            if c is None or not nodes[p].requires_grad:
                continue
            prev = grads[p]
            grads[p] = c if prev is None else ops.add(prev, c)
    return grads


def forward_tangents(
    nodes: Sequence[NodeLike],
    values: Sequence[Any],
    leaf_tangents: dict[int, Any],
    ops: Any,
    upto: int | None = None,
) -> list[Any]:
    """Forward-mode tangents of every node given tangents of some leaves (``None`` = zero).

    Raises ``UnsupportedJvpError`` naming the op when a reverse-only op lies on a path from a
    tangent to the output; never a silent zero tangent.
    """
    last = len(nodes) - 1 if upto is None else upto
    tangents: list[Any] = [None] * (last + 1)
    for i in range(last + 1):
        node = nodes[i]
        op = node.op
        if op is None:
            tangents[i] = leaf_tangents.get(i)
            continue
        ins = [tangents[p] for p in node.parents]
        if all(t is None for t in ins):
            continue
        try:
            tangents[i] = op.apply_jvp(
                ops, ins, [values[p] for p in node.parents], values[i], node.attrs
            )
        except UnsupportedJvpError as exc:
            raise UnsupportedJvpError(f"{exc} (node {i})") from None
    return tangents
