"""torchlean: TorchLean for Python.

A shape-checked autodiff runtime whose eager tape, compiled graph and derivative rules are held to
one op registry. This module only re-exports the public names.
"""

from .errors import (
    CheckpointError,
    DeviceError,
    DomainError,
    ShapeError,
    TapeError,
    TorchLeanError,
    TraceError,
    UnsupportedJvpError,
)
from .tape import Node, Tape

__all__ = [
    "CheckpointError", "DeviceError", "DomainError", "ShapeError", "TapeError",
    "TorchLeanError", "TraceError", "UnsupportedJvpError", "Node", "Tape",
]
__version__ = "0.1.0"
