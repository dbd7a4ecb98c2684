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
very entries. From the second such pass on it runs them as one generated straight-line function
(``emit_reverse``, made once per kept sequence) instead of ``autodiff.run_reverse``'s loop: the
same rules, called in the same order on the same arrays, summed in the same order (the same
bits); only the loop's per-node lookups (the step's fields, the exact-rule lookup, the arity
branches) are done once, at emission.

What is never cached: anything that reads values (the forward kernels themselves, their index
checks, ``check_finite``, a parameter's version, which every read and backward checks), and
attributes that are not plain data (arrays, objects): an op carrying one is a miss every time.
The allocation limit (``attr_kinds.max_elements``) is part of the key: changing it drops the
cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.attr_kinds import max_elements
from ..core.autodiff import ARRAY_RULES
from ..core.node import Node
from ..core.registry import ARRAY_OPS

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

    __slots__ = ("emitted", "entries", "key", "reverse")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.key: tuple[Any, ...] = ()
        # The reverse steps the last pass ran (``Tape._reverse``), with what they were made
        # for: a pass that repeated every cached node runs them again as they are.
        self.reverse: tuple[Any, ...] | None = None
        # ``reverse``'s steps as one generated function (``emit_reverse``), with the number of
        # exact array rules registered when it was made; ``None`` until a pass reruns them.
        self.emitted: tuple[int, Callable[..., list[Any]] | None] | None = None

    def keep_reverse(self, entries: list[Entry], key: tuple[Any, ...], run: list[Any]) -> None:
        """Keep the reverse steps ``run`` a repeated pass ran (``reverse``); drops the function
        emitted for the steps kept before."""
        self.reverse = (entries, key, run)
        self.emitted = None

    def reverse_function(self) -> Callable[..., list[Any]] | None:
        """The kept reverse steps as one generated function ``f(values, seed, on_leaf)``,
        emitted on the first call (``None`` for a pass too long to emit: the caller runs the
        steps with ``autodiff.run_reverse``). Emitted again if an exact array rule was
        registered since (``run_reverse`` looks them up on every pass)."""
        emitted = self.emitted
        if emitted is None or emitted[0] != len(ARRAY_RULES):
            assert self.reverse is not None
            _, (n, out, _), run = self.reverse
            fn = emit_reverse(run, out, n) if n <= MAX_EMITTED_NODES else None
            emitted = self.emitted = (len(ARRAY_RULES), fn)
        return emitted[1]

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
            self.emitted = None
        return self.entries


# Longer passes keep ``run_reverse``'s loop: compiling the function would cost more than the
# steps it saves on a pass this long, and its source grows with the tape.
MAX_EMITTED_NODES = 2000


def emit_reverse(run: Sequence[Any], out: int, n: int) -> Callable[..., list[Any]]:
    """``autodiff.run_reverse(run, values, out, seed, True, ARRAY_OPS, on_leaf)`` as one
    straight-line function ``f(values, seed, on_leaf)`` for a tape of ``n`` nodes.

    The same walk, unrolled: node ``i`` (from ``out`` down to 0) runs its step when its
    cotangent is not ``None`` (tested at run time, as the loop does: a rule may return
    ``None``), calls the rule ``ARRAY_RULES`` maps it to with the same arguments, checks the
    number of cotangents returned, and adds each target's contribution to that parent's
    cotangent in the same order with the same ``add`` (a parent's first possible contribution
    is assigned: its cotangent is ``None`` until then); a leaf reports its cotangent to
    ``on_leaf``. Nodes no step can reach are left out (their cotangent is ``None`` in the loop
    too). Cotangents live in local variables; the result is the dense list."""
    add = ARRAY_RULES.get(ARRAY_OPS.add, ARRAY_OPS.add)
    glob: dict[str, Any] = {"ops": ARRAY_OPS, "add": add}
    reached = [False] * n
    reached[out] = True
    body: list[str] = []
    for i in range(out, -1, -1):
        if not reached[i]:
            continue
        step = run[i]
        if step is None:
            body.append(f"    if g{i} is not None and on_leaf is not None:")
            body.append(f"        on_leaf({i}, g{i})")
            continue
        _, rule, kwargs, parents, targets = step
        glob[f"r{i}"] = ARRAY_RULES.get(rule, rule)
        ins = ", ".join(f"values[{p}]" for p in parents)
        extra = ""
        if kwargs:
            glob[f"k{i}"] = kwargs
            extra = f", **k{i}"
        arity = len(parents)
        body.append(f"    if g{i} is not None:")
        body.append(f"        c = r{i}(ops, g{i}, [{ins}], values[{i}]{extra})")
        body.append(f"        if len(c) != {arity}:")
        body.append(f"            raise TypeError(f'node {i}: vjp rule returned {{len(c)}} "
                    f"cotangents for {arity} inputs')")
        for k in targets:
            p = parents[k]
            if not reached[p]:  # the first contribution: g{p} is None, so this is the loop's
                reached[p] = True  # ``c if prev is None else ...`` (a None stays None)
                body.append(f"        g{p} = c[{k}]")
                continue
            body.append(f"        t = c[{k}]")
            body.append("        if t is not None:")
            body.append(f"            g{p} = t if g{p} is None else add(g{p}, t)")
    lines = ["def reverse(values, seed, on_leaf):"]
    lines += [f"    g{i} = None" for i in range(out) if reached[i]]
    lines.append(f"    g{out} = seed")
    lines += body
    dense = ", ".join(f"g{i}" if i <= out and reached[i] else "None" for i in range(n))
    lines.append(f"    return [{dense}]")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<torchlean replay reverse>", "exec"), glob)  # noqa: S102  (our own source)
    fn: Callable[..., list[Any]] = glob["reverse"]
    fn.source = source  # type: ignore[attr-defined]
    return fn
