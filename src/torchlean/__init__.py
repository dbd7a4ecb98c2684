"""torchlean: TorchLean for Python.

A shape-checked autodiff runtime whose eager tape, compiled graph and derivative rules are held to
one op registry. This module only re-exports the public names.
"""

from . import alloc as _alloc  # noqa: F401  (pins malloc thresholds; see alloc.py)
from . import cuda, nn, optim, train
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
from .generators import Generator, default_generator
from .graph import Graph, GraphError
from .optim import OptimizerError
from .params import Param
from .session import (
    NatRef,
    Options,
    ParamList,
    ScalarTrainer,
    Session,
    StaleSessionError,
    TensorRef,
)
from .tape import Node, Tape
from .tensor import (
    Tensor,
    arange,
    as_tensor,
    autograd,
    bool_,
    cat,
    enable_grad,
    float32,
    float64,
    from_numpy,
    full,
    int64,
    is_grad_enabled,
    manual_seed,
    no_grad,
    ones,
    ones_like,
    rand,
    randn,
    stack,
    tensor,
    zeros,
    zeros_like,
)
from .transforms import Compiled, compile, grad, hessian, hvp, jvp, value_and_grad, vjp

__all__ = [
    "CheckpointError", "DeviceError", "DomainError", "IndexRangeError", "ShapeError",
    "SignatureError", "TapeError", "TorchLeanError", "TraceError", "UnknownOpError",
    "UnsupportedJvpError", "Node", "Tape", "Graph", "GraphError",
    "Param", "Options", "Session", "TensorRef", "NatRef", "ParamList", "ScalarTrainer", "Dataset",
    "optim", "train", "nn", "cuda", "manual_seed", "save", "load", "read_metadata",
    "OptimizerError",
    "Compiled", "compile", "grad", "hessian", "hvp", "jvp", "value_and_grad", "vjp",
    "Tensor", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "zeros_like",
    "ones_like", "arange", "rand", "randn", "Generator", "default_generator", "no_grad",
    "enable_grad", "is_grad_enabled", "autograd", "cat", "stack", "float32", "float64", "int64",
    "bool_", "StaleSessionError",
]
__version__ = "0.1.0"
