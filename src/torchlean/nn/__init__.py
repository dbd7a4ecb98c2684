"""``tl.nn``: PyTorch-style modules, losses and ``torchlean.nn.functional``.

The layers and the ``Module`` base live in ``modules``, the loss modules and the extra
activations (``Softmax``, ``LogSoftmax``, ``Identity``) in ``loss``, and PyTorch's functional
signatures in ``functional`` (``import torchlean.nn.functional as TF``). This file only
re-exports, so ``torchlean.nn.Linear`` and ``from torchlean.nn import ...`` keep working.
"""

from . import functional
from .loss import (
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Identity,
    L1Loss,
    LogSoftmax,
    MSELoss,
    NLLLoss,
    Softmax,
)
from .modules import (
    GELU,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    LoadResult,
    MaxPool2d,
    Module,
    MultiheadAttention,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Tanh,
    initial_seed,
    kaiming_uniform_bound,
    manual_seed,
    normal_init,
    uniform_init,
)

__all__ = [
    "AvgPool2d", "BCEWithLogitsLoss", "BatchNorm2d", "Conv2d", "ConvTranspose2d",
    "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU", "Identity", "L1Loss",
    "LayerNorm", "Linear", "LoadResult", "LogSoftmax", "MSELoss", "MaxPool2d", "Module",
    "MultiheadAttention", "NLLLoss", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh",
    "functional", "initial_seed", "kaiming_uniform_bound", "manual_seed", "normal_init",
    "uniform_init",
]
