"""What a fast forward keeps for its backward (a residual), keyed by an array's identity.

A fast forward computes something its VJP needs anyway (an im2col matrix, softmax
probabilities) and saves it here against one of its arrays (its input or its output) with a key
of the static facts it depends on (shapes, attributes). The backward asks for it with the same
array and key; a miss (no saved value, another array, another key) means "recompute", never a
wrong value: every fast backward computes the residual the same way when it is missing, so a
hit and a miss give the same bits.

Entries live exactly as long as the array they are keyed by (a weak reference drops them), so
a tape or a compiled step holds its residuals while it holds its values, and nothing leaks when
only the forward runs. Arrays are never mutated between a forward and its backward in a
recorded pass (every op makes a new array), which is what makes identity a sound key.
"""

from __future__ import annotations

import weakref
from typing import Any

_STORE: dict[tuple[int, str], tuple[Any, Any, Any]] = {}


def save(owner: Any, tag: str, key: Any, value: Any) -> None:
    """Keep ``value`` for as long as ``owner`` lives, under ``tag`` and ``key``."""
    slot = (id(owner), tag)
    _STORE[slot] = (weakref.ref(owner, _dropper(slot)), key, value)


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


def size() -> int:
    """How many residuals are held (for tests: they go when their arrays go)."""
    return len(_STORE)
