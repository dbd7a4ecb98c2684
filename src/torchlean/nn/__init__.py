"""``tl.nn``: PyTorch-style modules, losses and ``torchlean.nn.functional``.

The layers and the ``Module`` base live in ``modules``; the loss modules and the extra
activation and pooling modules (``Softmax``, ``ELU``, ``AdaptiveAvgPool2d``, ...) in ``loss``;
PyTorch's functional signatures in ``functional`` (``import torchlean.nn.functional as TF``).
Recurrent layers are in ``rnn``, ``ModuleList``/``ModuleDict`` in ``containers``, and
``nn.init`` and ``nn.utils`` are torch's initialisers and gradient clipping. This file only
re-exports, so ``torchlean.nn.Linear`` and ``from torchlean.nn import ...`` keep
working.
"""

from ..engine.params import Parameter
from . import functional, init, utils
from .containers import ModuleDict, ModuleList
from .extras import (
    CELU,
    GLU,
    SELU,
    AvgPool1d,
    BatchNorm1d,
    BCELoss,
    Conv1d,
    CosineSimilarity,
    GroupNorm,
    Hardsigmoid,
    Hardswish,
    InstanceNorm1d,
    InstanceNorm2d,
    KLDivLoss,
    MaxPool1d,
    Mish,
    PairwiseDistance,
    ParameterDict,
    ParameterList,
    PixelShuffle,
    PReLU,
    Softmin,
    Softsign,
    Tanhshrink,
    Threshold,
    Unflatten,
    Upsample,
    ZeroPad2d,
)
from .loss import (
    ELU,
    AdaptiveAvgPool2d,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Hardtanh,
    HuberLoss,
    Identity,
    L1Loss,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    MSELoss,
    NLLLoss,
    ReLU6,
    SmoothL1Loss,
    Softmax,
    Softplus,
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
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .sparse import Dropout1d, Dropout2d, Dropout3d, EmbeddingBag
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "Parameter",
    "AdaptiveAvgPool2d", "AvgPool2d", "BCEWithLogitsLoss", "BatchNorm2d", "Conv2d",
    "ConvTranspose2d", "CrossEntropyLoss", "Dropout", "ELU", "Embedding", "Flatten", "GELU",
    "Hardtanh", "HuberLoss", "Identity", "L1Loss", "LayerNorm", "LeakyReLU", "Linear",
    "LoadResult", "LogSigmoid", "LogSoftmax", "MSELoss", "MaxPool2d", "Module",
    "MultiheadAttention", "NLLLoss", "ReLU", "ReLU6", "Sequential", "SiLU", "Sigmoid",
    "SmoothL1Loss", "Softmax", "Softplus", "Tanh", "functional", "initial_seed",
    "kaiming_uniform_bound", "manual_seed", "normal_init", "uniform_init",
    "GRU", "GRUCell", "LSTM", "LSTMCell", "ModuleDict", "ModuleList", "RNN", "RNNCell", "init",
    "utils", "CELU", "GLU", "SELU", "AvgPool1d", "BatchNorm1d", "BCELoss", "Conv1d",
    "CosineSimilarity", "Hardsigmoid", "Hardswish", "KLDivLoss", "MaxPool1d", "Mish",
    "PairwiseDistance", "ParameterDict", "ParameterList", "PReLU", "Softmin", "Softsign",
    "Tanhshrink", "Threshold", "Unflatten", "Upsample", "PixelShuffle", "GroupNorm",
    "InstanceNorm1d", "InstanceNorm2d", "ZeroPad2d", "Transformer", "TransformerDecoder",
    "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer", "Dropout1d",
    "Dropout2d", "Dropout3d", "EmbeddingBag",
]
