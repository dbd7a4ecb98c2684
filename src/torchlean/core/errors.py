"""The exceptions torchlean raises for bad input.

Every user-facing error is a ``TorchLeanError`` (itself a ``ValueError``, so generic handlers still
catch it). Messages name the op or file first, then what was expected and what was found.
"""


import functools
import inspect
from collections.abc import Callable
from typing import Any


class TorchLeanError(ValueError):
    """Base class of every error torchlean raises for bad input."""


class ShapeError(TorchLeanError):
    """Shapes, axes, indices or dtypes that an op cannot accept."""


class DTypeError(ShapeError):
    """Inputs of one op in different float dtypes (float32 data into a float64 model, ...)."""


def dtypes_differ(op: str, dtypes: list[object]) -> DTypeError:
    """The error for mixed float dtypes, saying how to fix it (torchlean never casts silently)."""
    shown = ", ".join(str(d) for d in dtypes)
    return DTypeError(f"{op}: dtypes differ: {shown}; convert the data to the model's dtype "
                      "first (e.g. x.astype(np.float32), or tl.tensor(x, dtype='float32'))")


class TapeError(TorchLeanError):
    """Invalid node ids, seeds or backward requests on a tape or graph."""


class UnsupportedJvpError(TorchLeanError):
    """Forward mode asked of an op that declares itself reverse-only."""


class DeviceError(TorchLeanError):
    """Unknown device, or CUDA asked for where CuPy or a GPU is missing."""


class CheckpointError(TorchLeanError):
    """A checkpoint that cannot be written, read, or does not fit its target."""


class TraceError(TorchLeanError):
    """A function that cannot be traced into a graph (non-ref result, control flow on values)."""


class DomainError(TorchLeanError):
    """Values outside an op's domain (log of non-positive entries, non-finite values)."""


class SignatureError(TorchLeanError, TypeError):
    """An op called with the wrong number or names of arguments (also a ``TypeError``)."""


class UnsupportedArgumentError(TorchLeanError):
    """A torch argument (a keyword, or one of its values) that torchlean does not implement."""


class UnsupportedKeywordError(UnsupportedArgumentError, TypeError):
    """A torch keyword a torchlean constructor does not take (also a ``TypeError``, what Python
    raises for an unknown keyword)."""


def checked_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """A constructor that refuses a keyword it does not take with ``UnsupportedKeywordError``
    naming the class, the keyword and the keywords it takes, before it runs (so nothing has
    changed: no parameter drawn, no state made). Python would raise a bare ``TypeError``."""
    params = list(inspect.signature(init).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return init
    named = [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)]
    known = frozenset(named)

    @functools.wraps(init)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in known:
                owner = type(self).__name__
                raise UnsupportedKeywordError(
                    f"{owner}: keyword argument {key!r} is not supported by torchlean's "
                    f"{owner} (it takes {', '.join(named) or 'no keywords'})")
        init(self, *args, **kwargs)

    return wrapped


class UnknownOpError(TorchLeanError, KeyError):
    """An op name that no registered primitive has (also a ``KeyError``)."""

    __str__ = Exception.__str__  # KeyError would quote the whole message


class IndexRangeError(ShapeError, IndexError):
    """An index outside its valid range (also an ``IndexError``, as Python indexing expects)."""


def device_mismatch(op: str, found: str, expected: str, what: str = "an array") -> DeviceError:
    """The error for data on one device given to a computation on another: PyTorch refuses to
    mix devices in one op, and so does torchlean (never a silent copy)."""
    return DeviceError(f"{op}: expected all data on device '{expected}', found {what} on "
                       f"'{found}'; move it explicitly first (tensor.to(device), "
                       "backend.to_device / backend.to_host)")
