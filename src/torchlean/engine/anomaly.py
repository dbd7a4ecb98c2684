"""Anomaly detection: find and name the first NaN or infinite value of a training step.

``check_finite`` (PyTorch calls it ``detect_anomaly``) looks at three things, on the eager and the
compiled backend alike: forward values (the first op and node whose output is not finite),
gradients (the parameter, and the node whose cotangent first went bad in the reverse pass) and
optimiser updates (the first parameter a step made non-finite). The checks are cheap when all is
well: the compiled path tests the loss and the gradients only, and walks the graph's node values
to name the culprit only once something is wrong.

Every report is a ``NonFiniteError`` (a ``DomainError``), whose message names the op, the node and
where in the step it happened.

On a device each check reads back one reduced flag per array (an explicit ``to_host`` of a
0-d boolean), not the array; only a failing check reads the offending array back to count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..core.backend import namespace_of, to_host
from ..core.errors import DomainError

__all__ = ["NonFiniteError", "TrainingDiverged", "all_finite", "check_graph_run", "check_gradients",
           "check_parameters", "check_tape_grads", "check_tape_values", "restore", "snapshot"]


class NonFiniteError(DomainError):
    """A NaN or infinite value where a finite one was required (forward, gradient or update)."""


class TrainingDiverged(NonFiniteError):
    """``fit`` stopped because the loss (or, under ``check_finite``, a value, gradient or update)
    became NaN or infinite. ``history`` holds the epochs completed before it, ``epoch`` and
    ``batch`` say where it stopped; the model's parameters hold the last finite state."""

    def __init__(self, message: str, history: list[Any], epoch: int, batch: int,
                 unchecked: bool = False) -> None:
        super().__init__(message)
        self.unchecked = unchecked  # True: found by the loss alone, without check_finite
        self.history = history
        self.epoch = epoch
        self.batch = batch


def all_finite(value: Any) -> bool:
    """Whether every entry of ``value`` (an array or a number) is finite."""
    xp = namespace_of(value)
    if xp is not np:  # a device array: one reduced flag comes back, not the array
        if value.dtype.kind not in "fc":
            return True
        return bool(to_host(xp.isfinite(value).all()))
    arr = np.asarray(value)
    if arr.dtype.kind not in "fc":
        return True
    return bool(np.isfinite(arr).all())


def _count(value: Any) -> str:
    arr = to_host(value)  # the error path: one explicit readback on a device
    bad = int(arr.size - int(np.isfinite(arr).sum()))
    kinds = []
    if np.isnan(arr).any():
        kinds.append("NaN")
    if np.isinf(arr).any():
        kinds.append("infinite")
    return f"{bad} of {arr.size} entries {' and '.join(kinds)}"


def _node_name(graph: Any, i: int) -> str:
    node = graph.nodes[i]
    if node.kind == "op" and node.op is not None:
        return f"op {node.op.name} (node {i})"
    return f"{node.kind} node {i}"


def first_nonfinite_node(graph: Any, values: Sequence[Any]) -> int | None:
    """The id of the first node (in graph order) whose value is not finite, or ``None``."""
    for i, v in enumerate(values):
        if v is not None and not all_finite(v):
            return i
    return None


def check_graph_run(compiled: Any, xs: Sequence[Any], value: Any, grads: Sequence[Any],
                    where: str = "check_finite") -> None:
    """After a compiled ``value_and_backward``: raise ``NonFiniteError`` naming the first node
    whose forward value, or else whose cotangent, is not finite. Free when all is finite (only
    the loss and gradients are tested); on failure the graph is evaluated once more to find the
    culprit."""
    if all_finite(value) and all(g is None or all_finite(g) for g in grads):
        return
    graph = compiled.graph
    values = compiled._values(where, xs)
    bad = first_nonfinite_node(graph, values)
    if bad is not None:
        raise NonFiniteError(f"{where}: forward value of {_node_name(graph, bad)} has "
                             f"{_count(values[bad])}; first non-finite value of the compiled "
                             f"graph ({len(graph.nodes)} nodes)")
    seed = namespace_of(values[graph.output]).ones((), dtype=compiled.dtype)
    cotangents = graph.backprop(values, graph.output, seed)
    # The reverse pass runs from the last node to the first: the highest id with a non-finite
    # cotangent is the first to go bad, and the op named is the one that received it.
    for i in range(len(cotangents) - 1, -1, -1):
        g = cotangents[i]
        if g is not None and not all_finite(g):
            raise NonFiniteError(f"{where}: gradient (cotangent) of {_node_name(graph, i)} has "
                                 f"{_count(g)}{_made_by(graph.nodes, i, _node_name, graph)}; "
                                 "the first non-finite value of the reverse pass, though every "
                                 "forward value is finite")
    raise NonFiniteError(f"{where}: the loss or a gradient is not finite")  # pragma: no cover


def check_tape_values(tape: Any, where: str = "check_finite") -> None:
    """Raise ``NonFiniteError`` naming the first node of ``tape`` whose value is not finite (a
    compiled graph replayed on its linked tape)."""
    for i, node in enumerate(tape.nodes):
        if not all_finite(node.value):
            raise NonFiniteError(f"{where}: forward value of {node.op_name} (node {i}) has "
                                 f"{_count(node.value)}; first non-finite value of the pass")


def _made_by(nodes: Sequence[Any], i: int, name: Any, owner: Any) -> str:
    """", made by the VJP of <op> (node j)": the consumers of node ``i`` are the ops whose VJP
    rules produced its cotangent (the first of them, in graph order)."""
    for j in range(i + 1, len(nodes)):
        if i in nodes[j].parents:
            return f", made by the VJP of {name(owner, j)}"
    return ""


def _tape_node_name(tape: Any, i: int) -> str:
    node = tape.nodes[i]
    return f"leaf node {i}" if node.op is None else f"op {node.op.name} (node {i})"


def check_tape_grads(tape: Any, by_id: dict[int, Any], where: str = "check_finite") -> None:
    """After an eager backward pass: raise ``NonFiniteError`` naming the first node of the
    reverse pass (the highest id) whose cotangent is not finite, and the op whose VJP made it."""
    for i in sorted(by_id, reverse=True):
        g = by_id[i]
        if g is not None and not all_finite(g):
            raise NonFiniteError(f"{where}: gradient (cotangent) of {_tape_node_name(tape, i)} "
                                 f"has {_count(g)}{_made_by(tape.nodes, i, _tape_node_name, tape)}"
                                 "; the first non-finite value of the reverse pass")


def check_gradients(pairs: Iterable[tuple[Any, Any]], where: str = "check_finite") -> None:
    """Raise ``NonFiniteError`` naming the first parameter whose gradient is not finite."""
    for param, g in pairs:
        if g is not None and not all_finite(g):
            raise NonFiniteError(f"{where}: gradient of parameter {param.name!r} has "
                                 f"{_count(g)}")


def check_parameters(params: Iterable[Any], where: str) -> None:
    """Raise ``NonFiniteError`` naming the first parameter whose value is not finite."""
    for param in params:
        if not all_finite(param.array):
            raise NonFiniteError(f"{where}: parameter {param.name!r} has {_count(param.array)}")


def snapshot(params: Iterable[Any]) -> list[np.ndarray]:
    """Host copies of the parameters' values (to restore the last finite state; on a device
    this reuses each parameter's readback of its current version)."""
    return [np.array(p.value, copy=True) for p in params]


def restore(params: Iterable[Any], saved: Sequence[np.ndarray]) -> None:
    """Assign saved values back to the parameters (their versions count the change)."""
    for p, value in zip(params, saved, strict=True):
        p.assign(value)
