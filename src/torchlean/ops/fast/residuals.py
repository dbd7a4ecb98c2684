"""What a fast forward keeps for its backward (a residual), keyed by an array's identity.

A fast forward computes something its VJP needs anyway (an im2col matrix, softmax
probabilities) and saves it here against its *output* array (the ``out`` its VJP receives) with
a key of the static facts it depends on (shapes, attributes). Only fast VJP rules ask for it,
with the same array and key; a miss (no saved value, another array, another key) means
"recompute", never a wrong value: every fast VJP computes the residual the same way when it is
missing, so a hit and a miss give the same bits. Never keyed by an input: a generated plan may
reuse an input's buffer for a later value, while an output is a fresh array of the kernel's.

Entries live at most as long as the array they are keyed by (a weak reference drops them) and
never beyond the outermost ``fast_kernels(True)`` block that made them (the store is cleared
when such a block opens and when it closes: ``registry.FAST_BLOCK_HOOKS``). Within one block
(one training step) an op's output is never mutated between its forward and its VJP (every
recorded op makes a new array; optimisers update parameters after the block), which is what
makes identity a sound key; a VJP outside the block that recorded its forward simply misses.
``tl.Tensor`` code saves outside any block (``engine.tensor._fast_call``): there an entry lives
as long as its output array, is dropped at once for an op that records no history
(``discard``), and an output changed in place is either snapshotted (an in-place op with a
history: the VJP receives the copy and misses) or makes that backward run the reference kernels
(a change through an alias: ``tensor._graph_of``).

**Explicit residuals** (``EXPLICIT``): a fast kernel may also expose its two halves with the
residual passed by hand, ``forward_saving(*inputs, **attrs) -> (out, saved)`` and
``vjp_from(ops, g, inputs, out, saved, **attrs)``; its ``forward`` / ``vjp`` are then these
halves around ``save`` / ``load``. Generated code (``engine.codegen``) calls the halves and keeps
``saved`` in a local variable of the generated function, so its plans never depend on this
store; a kernel without them is called through the store there too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ...core.registry import FAST_BLOCK_HOOKS

_STORE: dict[tuple[int, str], tuple[Any, Any, Any]] = {}
_TAGS: set[str] = set()  # every tag ever saved under (a handful: one or two per fast kernel)


def save(owner: Any, tag: str, key: Any, value: Any) -> None:
    """Keep ``value`` for as long as ``owner`` lives, under ``tag`` and ``key``."""
    slot = (id(owner), tag)
    _STORE[slot] = (weakref.ref(owner, _dropper(slot)), key, value)
    _TAGS.add(tag)


def discard(owner: Any) -> None:
    """Drop whatever is saved for ``owner`` (an output no backward will reach)."""
    if not _STORE:
        return
    me = id(owner)
    for tag in _TAGS:
        entry = _STORE.get((me, tag))
        if entry is not None and entry[0]() is owner:
            del _STORE[(me, tag)]


def load(owner: Any, tag: str, key: Any) -> Any:
    """The value saved for ``owner`` under ``tag`` and ``key``, or ``None``."""
    hit = _STORE.get((id(owner), tag))
    if hit is None or hit[0]() is not owner or hit[1] != key:
        return None
    return hit[2]


def _dropper(slot: tuple[int, str]) -> Any:
    store = _STORE

    def drop(ref: Any) -> None:
        # Only this owner's entry: a newer array with a recycled id has a new reference.
        entry = store.get(slot)
        if entry is not None and entry[0] is ref:
            del store[slot]

    return drop


def clear() -> None:
    """Drop every residual (at the edges of the outermost fast block)."""
    _STORE.clear()


FAST_BLOCK_HOOKS.append(clear)


def size() -> int:
    """How many residuals are held (for tests: they go when their arrays go)."""
    return len(_STORE)


# name -> (forward_saving, vjp_from): the explicit halves of a fast kernel (module docstring).
EXPLICIT: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}


# Names whose ``vjp_from`` also takes ``needed`` (one bool per input) and then may skip, and
# return ``None`` for, the cotangents of inputs that receive none: generated code passes it (a
# data input's cotangent is never computed); the other cotangents are the same bits.
SKIPS: set[str] = set()


def explicit(name: str, forward_saving: Callable[..., Any], vjp_from: Callable[..., Any],
             skips: bool = False) -> None:
    """Declare the explicit halves of primitive ``name``'s fast kernel (once)."""
    if name in EXPLICIT:
        raise TypeError(f"primitive {name}: explicit residual halves declared twice")
    EXPLICIT[name] = (forward_saving, vjp_from)
    if skips:
        SKIPS.add(name)
