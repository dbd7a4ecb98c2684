"""The side table of reference definitions: ``SPECS`` (primitive name -> ``SpecEntry``) and the
``define`` decorator the spec modules register with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.registry import REGISTRY


@dataclass(frozen=True)
class SpecEntry:
    """One reference definition and what it promises."""

    name: str
    fn: Callable[..., Any]
    rational: bool


SPECS: dict[str, SpecEntry] = {}


def define(name: str, *, rational: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as the reference definition of primitive ``name``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name not in REGISTRY:
            raise TypeError(f"spec for {name!r}: no such primitive is registered")
        if name in SPECS:
            raise TypeError(f"spec for {name!r} defined twice")
        SPECS[name] = SpecEntry(name, fn, rational)
        return fn

    return register


def get_spec(name: str) -> SpecEntry | None:
    """The reference definition of primitive ``name``, or ``None`` if it has none yet."""
    return SPECS.get(name)
