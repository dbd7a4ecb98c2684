"""torchlean: TorchLean for Python.

A shape-checked autodiff runtime whose eager tape, compiled graph and derivative rules are held to
one op registry. This module only re-exports the public names; importing it changes nothing
process-wide (no allocator or thread settings: the ``torchlean`` command makes those).

The package is layered, each layer importing only those below it (``tests/test_layers.py``
checks it): ``core`` < ``ops`` < ``engine`` < ``nn``, ``optim``, ``checkpoint``, ``data`` <
``training`` < ``spec``, ``verify``, ``bounds``, ``onnx``, ``attack``, ``zoo`` < ``cli``,
``bench``. The heavier subpackages (``onnx``, ``bounds``, ``verify``, ``distributed``, ``zoo``,
``attack``, ``spec``) are imported on first attribute access, as ``torch.onnx`` is there after
``import torch``.
"""

import importlib as _importlib
from typing import Any as _Any

from . import accelerator, amp, autograd, cuda, distributions, nn, optim, train, utils
from .checkpoint import load, read_metadata, save
from .core.errors import (
    CheckpointError,
    DeviceError,
    DomainError,
    DTypeError,
    IndexRangeError,
    ShapeError,
    SignatureError,
    TapeError,
    TorchLeanError,
    TraceError,
    UnknownOpError,
    UnsupportedJvpError,
)
from .core.registry import fast_kernels, set_tensor_kernels
from .core.rng import Generator, default_generator
from .data import Dataset
from .engine.graph import Graph, GraphError
from .engine.params import Param, Parameter
from .engine.session import NatRef, Options, StaleSessionError, TensorRef
from .engine.tape import Node, Tape
from .engine.tensor import (
    Size,
    Tensor,
    arange,
    as_tensor,
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
from .engine.torch_api import *  # noqa: F403  (torch's top-level names: dtypes, sin, ...)
from .engine.torch_api import missing_torch_name as _missing_torch_name
from .engine.transforms import Compiled, compile, grad, hessian, hvp, jvp, value_and_grad, vjp
from .optim import OptimizerError
from .training.trainers import ParamList, ScalarTrainer, Session

__all__ = [
    "CheckpointError", "DeviceError", "DomainError", "DTypeError", "IndexRangeError", "ShapeError",
    "SignatureError", "TapeError", "TorchLeanError", "TraceError", "UnknownOpError",
    "UnsupportedJvpError", "Node", "Tape", "Graph", "GraphError",
    "Param", "Options", "Session", "TensorRef", "NatRef", "ParamList", "ScalarTrainer", "Dataset",
    "optim", "train", "nn", "accelerator", "amp", "cuda", "utils", "distributions", "manual_seed",
    "save", "load", "read_metadata",
    "OptimizerError",
    "Compiled", "compile", "grad", "hessian", "hvp", "jvp", "value_and_grad", "vjp",
    "Tensor", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "zeros_like",
    "ones_like", "arange", "rand", "randn", "Generator", "default_generator", "no_grad",
    "enable_grad", "is_grad_enabled", "autograd", "cat", "stack", "float32", "float64", "int64",
    "bool_", "StaleSessionError", "Parameter", "Size", "fast_kernels", "set_tensor_kernels",
]
__version__ = "0.1.0"

# Imported when first named (tl.onnx.load, tl.bounds.compute_bounds, ...): they load optional
# libraries (onnx, sympy, mpi4py) or much code that most programs never use.
_LAZY = {"onnx": "onnx", "bounds": "bounds", "verify": "verify", "spec": "spec", "zoo": "zoo",
         "attack": "attack", "distributed": "training.distributed", "func": "func", "jit": "jit"}
# torch's top-level names for functions of those modules (``torch.vmap`` is ``torch.func.vmap``).
_LAZY_NAMES = {"vmap": ("func", "vmap"), "autocast": ("amp", "autocast")}


def __getattr__(name: str) -> _Any:
    if name in _LAZY_NAMES:
        home, attr = _LAZY_NAMES[name]
        return getattr(_importlib.import_module(f"{__name__}.{home}"), attr)
    target = _LAZY.get(name)
    if target is None:
        return _missing_torch_name(name)  # a TorchLeanError that is also an AttributeError
    module = _importlib.import_module(f"{__name__}.{target}")
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_LAZY_NAMES])
