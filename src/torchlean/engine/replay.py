"""The cached step plan of the eager hot path: checks that cannot fail on a repeated step.

An eager training step records the same op sequence on the same shapes again and again. Each
op's checks (node ids, attribute kinds, the shape rule, one dtype for all inputs, a device
kernel) and its reverse step (``autodiff.reverse_step``: which parents receive gradient, the
bound VJP rule, whether cotangents are summed back) depend only on *static* facts: the op, its
parents' positions, its attributes, and its inputs' shapes, dtypes and ``requires_grad``. So a
session keeps what its last pass learned (``PlanCache``: one ``Entry`` per node, in order) and
the next pass's tape, recording node ``n``, compares the call with entry ``n``:

- a *hit* (the same primitive, the same parent positions, attributes equal value for value and
  type for type, the same leaf shape/dtype/requires_grad) runs the forward kernel and reuses the
  entry's checked attributes, output facts and reverse step. By induction every earlier node
  matched its entry, so the inputs have the shapes and dtypes the entry was checked with, and
  every check would pass again with the same conclusion;
- a *miss* cuts the cached sequence there: this node and every later one are recorded with all
  their checks, and become the cache for the next pass. A changed sequence falls back to
  recording, never to a wrong result (as TinyJit or CUDA-graph capture keyed by the sequence).

A pass whose every node was a hit, and no more nodes than the cache holds, also reruns the
reverse steps the last such pass ran for the same output (``PlanCache.reverse``: the entries'
steps, with training's relu/pooling fusion already applied), since they were made from these
very entries.

What is never cached: anything that reads values (the forward kernels themselves, their index
checks, ``check_finite``, a parameter's version, which every read and backward checks), and
attributes that are not plain data (arrays, objects): an op carrying one is a miss every time.
The allocation limit (``attr_kinds.max_elements``) is part of the key: changing it drops the
cache.
"""

from __future__ import annotations

from typing import Any

from ..core.attr_kinds import max_elements
from ..core.node import Node

# Attribute values compared by value (with their type): plain immutable data. Anything else
# (arrays, callables, objects) is compared by nothing: the op is re-checked every time.
_PLAIN = (int, float, bool, str, type(None))


def same_attrs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether ``a`` and ``b`` are the same attributes: the same keys, and values equal with
    equal types (``1``, ``1.0`` and ``True`` differ; a NaN never equals itself, so it misses),
    tuples and lists compared entry by entry, anything else never equal."""
    if a is b:
        return True
    if len(a) != len(b):
        return False
    for key, value in a.items():
        if key not in b or not _same_value(value, b[key]):
            return False
    return True


def _same_value(a: Any, b: Any) -> bool:
    t = type(a)
    if t is not type(b):
        return False
    if t in _PLAIN:
        return bool(a == b)
    if t is tuple or t is list:
        return len(a) == len(b) and all(map(_same_value, a, b))  # (no generator frame)
    return False


def snapshot(attrs: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``attrs`` that later edits of the caller's dict or lists cannot change."""
    return {key: _frozen(value) for key, value in attrs.items()} if attrs else {}


def _frozen(value: Any) -> Any:
    t = type(value)
    if t is list:
        return [_frozen(v) for v in value]
    if t is tuple:
        return tuple([_frozen(v) for v in value])
    return value


class Entry(Node):
    """One recorded node's static facts, shared by every pass that repeats it: the ``Node``
    fields (op, parents, checked attributes, requires_grad, shape, dtype, name; ``value`` stays
    ``None``: values live on each tape), the attributes as the caller gave them (``raw``,
    compared on the next pass) and the node's reverse step once computed (``step``)."""

    __slots__ = ("raw", "step")

    def __init__(self, op: Any, parents: tuple[int, ...], attrs: dict[str, Any],
                 requires_grad: bool, shape: tuple[int, ...], dtype: Any, name: str | None,
                 raw: dict[str, Any]) -> None:
        Node.__init__(self, op, parents, attrs, requires_grad, shape, dtype=dtype, name=name)
        self.raw = raw
        self.step: Any = UNSET


UNSET: Any = object()  # an entry whose reverse step is not computed yet


class PlanCache:
    """The entries of the last pass a session recorded (see the module docstring). A tape
    given a cache reads ``entries`` and writes back the list it records into."""

    __slots__ = ("entries", "key", "reverse")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.key: tuple[Any, ...] = ()
        # The reverse steps the last pass ran (``Tape._reverse``), with what they were made
        # for: a pass that repeated every cached node runs them again as they are.
        self.reverse: tuple[Any, ...] | None = None

    def current(self, xp: Any, dtype: Any) -> list[Entry]:
        """The cached entries for a tape of namespace ``xp`` and dtype ``dtype``; none when
        those or the allocation limit changed since they were checked (a hit skips the device
        kernel check, fills a nullary op's dtype as before, and skips the shape rule's size
        check)."""
        key = (xp, dtype, max_elements())
        if key != self.key:
            self.entries = []
            self.key = key
            self.reverse = None
        return self.entries
