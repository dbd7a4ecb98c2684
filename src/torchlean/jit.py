"""``torch.jit``'s decorators and entry points, for programs that script or trace a model.

TorchScript compiles a model to a serialisable program; torchlean's compiled form is
``tl.compile`` (a traced graph the verifier reads). Here ``script`` and ``trace`` return the
module or function itself, so it runs eagerly with the same values and gradients (what scripting
guarantees), and the annotation decorators (``ignore``, ``unused``, ``export``) return what they
decorate. ``jit.save`` / ``jit.load`` are refused: a TorchScript archive is code, and torchlean
loads no code from files (``tl.save`` / ``tl.load`` keep weights).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .core.errors import TorchLeanError, UnsupportedArgumentError

__all__ = ["Final", "export", "ignore", "is_scripting", "is_tracing", "load", "save", "script",
           "trace", "unused"]

T = TypeVar("T")
Final = TypeVar("Final")  # torch.jit.Final[int] annotations: any subscript works on a TypeVar


def script(obj: T, optimize: Any = None, _frames_up: int = 0, _rcb: Any = None,
           example_inputs: Any = None) -> T:
    """The module or function itself (see the module docstring)."""
    if not callable(obj):
        raise TorchLeanError(f"jit.script: expected a module or a function, found "
                             f"{type(obj).__name__}")
    return obj


def trace(func: T, example_inputs: Any = None, *args: Any, **kwargs: Any) -> T:
    """The module or function itself; ``example_inputs`` are checked to run through it."""
    if not callable(func):
        raise TorchLeanError(f"jit.trace: expected a module or a function, found "
                             f"{type(func).__name__}")
    if example_inputs is not None:
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        func(*inputs)  # as torch's trace, the example must run
    return func


def _identity_decorator(fn: Any = None, **kwargs: Any) -> Any:
    if fn is None:
        return lambda f: f
    return fn


ignore: Callable[..., Any] = _identity_decorator
unused: Callable[..., Any] = _identity_decorator
export: Callable[..., Any] = _identity_decorator


def is_scripting() -> bool:
    return False


def is_tracing() -> bool:
    return False


def save(m: Any, f: Any, _extra_files: Any = None) -> None:
    raise UnsupportedArgumentError("jit.save: TorchScript archives are programs, which torchlean "
                                   "neither writes nor loads; save the weights with "
                                   "torchlean.save(model.state_dict(), path)")


def load(f: Any, map_location: Any = None, _extra_files: Any = None) -> Any:
    raise UnsupportedArgumentError("jit.load: a TorchScript archive is a program, and torchlean "
                                   "loads no code from files; load weights with torchlean.load")
