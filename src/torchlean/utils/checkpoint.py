"""``torch.utils.checkpoint``: activation checkpointing's call forms.

``checkpoint(fn, *args)`` and ``checkpoint_sequential(functions, segments, input)`` run the
function and keep its graph: the values and gradients are those of the plain call (what
checkpointing guarantees), without the memory saving of recomputing the forward during the
backward pass, which torchlean does not do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import TorchLeanError

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               context_fn: Any = None, determinism_check: str = "default",
               debug: bool = False, preserve_rng_state: bool = True, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` (see the module docstring)."""
    if not callable(function):
        raise TorchLeanError(f"checkpoint: expected a callable, found {type(function).__name__}")
    return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any,  # noqa: A002
                          use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    """The functions (a list or a ``Sequential``) applied in order to ``input``."""
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise TorchLeanError(f"checkpoint_sequential: segments must be a positive int, found "
                             f"{segments!r}")
    items: Sequence[Any] = list(functions.children()) if hasattr(functions, "children") \
        else list(functions)
    for f in items:
        input = f(input)
    return input
