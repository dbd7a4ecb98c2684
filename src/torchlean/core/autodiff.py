"""The one reverse driver and the one forward-tangent driver, shared by every engine.

The eager tape, the compiled graph, the linked tape (``Graph.to_tape``) and the recorded backward
graph (``grad_graph``, which makes hvp and hessian) all differentiate through these two functions.
Each engine is a list of nodes with ``op`` (a ``Primitive``, or ``None`` for a leaf),
``parents``, ``attrs``, ``shape`` and ``requires_grad``; values live beside it.

Reverse mode has two halves:

- ``reverse_plan`` decides, once per node, everything that does not depend on values: whether
  the node can pass gradient at all, which parents receive it (``targets``), and how its
  cotangents are computed (``Primitive.vjp_rule``: which inputs a selective rule must produce,
  whether broadcast cotangents are summed back). Shapes are static, so a compiled graph caches
  its plan and a tape extends its own as it grows.
- ``run_reverse`` walks a plan from the output back to 0, calling each bound rule and summing
  contributions in the order the children are visited (decreasing id).

Because the tape and the graph run the *same* plan builder and the *same* walk over the same
rules, ``to_tape(xs)`` + ``backward_dense_all`` equals ``backprop_all`` bitwise by construction
(TorchLean's LinkedSession theorem); a test keeps it as the witness.

The drivers are generic over the Ops interpreter: with ``ARRAY_OPS`` they compute numbers; with a
graph builder's interpreter they record the backward pass as new graph nodes. Traversal is a
plain loop over node ids (no recursion, so a chain of 100,000 ops works; no set or dict ordering,
so gradient sums never depend on object ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .errors import UnsupportedJvpError
from .registry import ARRAY_OPS, Primitive, Rule


class NodeLike(Protocol):
    op: Primitive | None
    parents: tuple[int, ...]
    attrs: dict[str, Any]
    requires_grad: bool

    @property
    def shape(self) -> tuple[int, ...]: ...


# One reverse step: (node id, bound rule, its kwargs, parent ids, the input indices whose
# parents receive gradient). ``None`` for nodes that pass no gradient. The indices of one or two
# inputs are the shared tuples below, so a step allocates only itself and its parent ids (a
# backward of n nodes allocates 2n tracked objects, not 4n: fewer garbage-collector passes).
Step = tuple[int, Rule, dict[str, Any], tuple[int, ...], tuple[int, ...]]
TARGETS_NONE: tuple[int, ...] = ()
TARGETS_0: tuple[int, ...] = (0,)
TARGETS_1: tuple[int, ...] = (1,)
TARGETS_01: tuple[int, ...] = (0, 1)


# Exact array rules: ``ARRAY_RULES[rule]`` computes what ``rule`` computes on the array
# interpreter, with the same operations in the same order (the same bits), in fewer Python frames
# and NumPy calls (``ops.fast.elementwise``: tanh's VJP in one frame and three calls, not six and
# four). ``run_reverse`` runs them in place of the bound rule whenever ``ops`` is ``ARRAY_OPS``;
# plans stay interpreter-independent, and every other interpreter (a graph builder, a tracer, an
# anomaly check) runs the reference rule. Each one falls back to its reference on arrays it does
# not handle (another dtype, a device array). The driver's own sum of two contributions,
# ``ops.add``, is looked up the same way (``add``'s forward is ``a + b``: ``operator.add``, with
# no Python frame per sum).
ARRAY_RULES: dict[Rule, Rule] = {}


def register_array_rule(reference: Rule, exact: Rule) -> None:
    """Run ``exact`` for the bound rule ``reference`` on the array interpreter (see above)."""
    if reference in ARRAY_RULES:
        raise TypeError(f"an exact array rule for {getattr(reference, '__qualname__', reference)}"
                        " is already registered")
    ARRAY_RULES[reference] = exact


_NO_RULES: dict[Rule, Rule] = {}


def reverse_step(nodes: Sequence[NodeLike], i: int) -> Step | None:
    """What the reverse pass does at node ``i`` (``None``: a leaf, or no gradient passes)."""
    node = nodes[i]
    op = node.op
    if op is None or op.nondiff or not node.requires_grad:
        return None
    parents = node.parents
    # Spelled out for one and two parents: this runs once per node of every reverse pass that
    # has no cached plan (a tensor graph, an eager pass's first step), on the per-op hot path.
    arity = len(parents)
    if arity == 1:
        a = nodes[parents[0]]
        needed: tuple[bool, ...] = (a.requires_grad,)
        targets = TARGETS_0 if a.requires_grad else TARGETS_NONE
        reduce = op.broadcasting and a.shape != node.shape
    elif arity == 2:
        p0, p1 = parents
        a, b = nodes[p0], nodes[p1]
        needed = (a.requires_grad, b.requires_grad)
        if a.requires_grad:
            targets = TARGETS_01 if b.requires_grad else TARGETS_0
        else:
            targets = TARGETS_1 if b.requires_grad else TARGETS_NONE
        reduce = op.broadcasting and (a.shape != node.shape or b.shape != node.shape)
    else:
        ins = [nodes[p] for p in parents]
        needed = tuple([n.requires_grad for n in ins])
        targets = tuple([k for k in range(arity) if needed[k]])
        reduce = False
        if op.broadcasting:
            shape = node.shape
            for n in ins:
                if n.shape != shape:
                    reduce = True
                    break
    rule, kwargs = op.vjp_rule(node.attrs, needed, bool(reduce))
    return (i, rule, kwargs, parents, targets)


def reverse_plan(nodes: Sequence[NodeLike], start: int = 0,
                 plan: list[Step | None] | None = None) -> list[Step | None]:
    """One step per node (``plan[i]`` for node ``i``), extending ``plan`` from node ``start``."""
    steps = [] if plan is None else plan
    for i in range(start, len(nodes)):
        steps.append(reverse_step(nodes, i))
    return steps


def run_reverse(plan: Sequence[Step | None], values: Sequence[Any], out_id: int, seed: Any,
                out_requires_grad: bool, ops: Any,
                on_leaf: Callable[[int, Any], None] | None = None,
                more_seeds: Sequence[tuple[int, Any]] = ()) -> list[Any]:
    """Cotangents for every node from ``out_id`` back to 0; ``None`` where none arrives.

    ``more_seeds``: ``(node, seed)`` pairs of further outputs below ``out_id``, seeded before
    the walk, so one pass gives the sum of every output's vector-Jacobian product (reverse
    mode is linear in its seeds), as ``autograd.grad`` of several outputs needs.

    A node used by several children receives the sum of their contributions, accumulated in the
    order the children are visited (decreasing id). Nodes without ``requires_grad`` neither
    receive nor pass gradient. ``on_leaf(i, g)`` is called as soon as leaf ``i``'s cotangent is
    final (every consumer has a larger id, so that is when the walk reaches ``i``): data-parallel
    training starts communicating a parameter's gradient there, while the walk goes on.
    """
    grads: list[Any] = [None] * len(values)
    if not out_requires_grad:
        return grads
    grads[out_id] = seed
    exact = ARRAY_RULES if ops is ARRAY_OPS else _NO_RULES
    add = exact.get(ops.add, ops.add)
    for j, more in more_seeds:
        prev = grads[j]
        grads[j] = more if prev is None else add(prev, more)
    # The per-node hot loop of every reverse pass: no comprehension (a call each in 3.11) for
    # the usual one or two parents, and no keyword expansion for rules without attributes.
    for i in range(out_id, -1, -1):
        g = grads[i]
        if g is None:
            continue
        step = plan[i]
        if step is None:
            if on_leaf is not None:
                on_leaf(i, g)
            continue
        _, rule, kwargs, parents, targets = step
        rule = exact.get(rule, rule)
        arity = len(parents)
        if arity == 1:
            ins = [values[parents[0]]]
        elif arity == 2:
            ins = [values[parents[0]], values[parents[1]]]
        else:
            ins = [values[p] for p in parents]
        if kwargs:
            contributions = rule(ops, g, ins, values[i], **kwargs)
        else:
            contributions = rule(ops, g, ins, values[i])
        if len(contributions) != arity:
            raise TypeError(f"node {i}: vjp rule returned {len(contributions)} cotangents for "
                            f"{len(parents)} inputs")
        for k in targets:
            c = contributions[k]
            if c is not None:
                p = parents[k]
                prev = grads[p]
                grads[p] = c if prev is None else add(prev, c)
    return grads


def reverse_pass(nodes: Sequence[NodeLike], values: Sequence[Any], out_id: int, seed: Any,
                 ops: Any) -> list[Any]:
    """``run_reverse`` over a fresh plan of ``nodes[: out_id + 1]`` (for one-off passes)."""
    plan = reverse_plan(nodes[: out_id + 1])
    return run_reverse(plan, values, out_id, seed, nodes[out_id].requires_grad, ops)


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
