"""torchlean: TorchLean for Python.

A shape-checked autodiff runtime whose eager tape, compiled graph and derivative rules are held to
one op registry. This module only re-exports the public names.
"""

from . import nn, optim, train
from .checkpoint import load, read_metadata, save
from .data import Dataset
from .errors import (
    CheckpointError,
    DeviceError,
    DomainError,
    IndexRangeError,
    ShapeError,
    SignatureError,
    TapeError,
    TorchLeanError,
    TraceError,
    UnknownOpError,
    UnsupportedJvpError,
)
from .graph import Graph, GraphError
from .nn import manual_seed
from .optim import OptimizerError
from .params import Param
from .session import NatRef, Options, ParamList, ScalarTrainer, Session, TensorRef
from .tape import Node, Tape
from .transforms import Compiled, compile, grad, hessian, hvp, jvp, value_and_grad, vjp

__all__ = [
    "CheckpointError", "DeviceError", "DomainError", "IndexRangeError", "ShapeError",
    "SignatureError", "TapeError", "TorchLeanError", "TraceError", "UnknownOpError",
    "UnsupportedJvpError", "Node", "Tape", "Graph", "GraphError",
    "Param", "Options", "Session", "TensorRef", "NatRef", "ParamList", "ScalarTrainer", "Dataset",
    "optim", "train", "nn", "manual_seed", "save", "load", "read_metadata",
    "OptimizerError",
    "Compiled", "compile", "grad", "hessian", "hvp", "jvp", "value_and_grad", "vjp",
]
__version__ = "0.1.0"
