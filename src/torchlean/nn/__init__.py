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
from . import functional, functional_more, init, losses_more, utils
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
from .layers_more import (
    AdaptiveAvgPool1d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AlphaDropout,
    Bilinear,
    ChannelShuffle,
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ConvTranspose1d,
    FeatureAlphaDropout,
    Fold,
    Hardshrink,
    LazyConv1d,
    LazyConv2d,
    LazyLinear,
    LocalResponseNorm,
    LPPool1d,
    LPPool2d,
    MaxUnpool1d,
    MaxUnpool2d,
    PixelUnshuffle,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    RMSNorm,
    RReLU,
    Softmax2d,
    Softshrink,
    Unfold,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
    ZeroPad1d,
    ZeroPad3d,
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
from .losses_more import (
    CosineEmbeddingLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    MarginRankingLoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    PoissonNLLLoss,
    SoftMarginLoss,
    TripletMarginLoss,
    TripletMarginWithDistanceLoss,
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
__all__ += [  # layers_more, losses_more
    "AdaptiveAvgPool1d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AlphaDropout", "Bilinear",
    "ChannelShuffle", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
    "ConstantPad2d", "ConstantPad3d", "ConvTranspose1d", "FeatureAlphaDropout", "Fold",
    "Hardshrink", "LPPool1d", "LPPool2d", "LazyConv1d", "LazyConv2d", "LazyLinear",
    "LocalResponseNorm", "MaxUnpool1d", "MaxUnpool2d", "PixelUnshuffle", "RMSNorm", "RReLU",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d",
    "ReplicationPad2d", "ReplicationPad3d", "Softmax2d", "Softshrink", "Unfold",
    "UpsamplingBilinear2d", "UpsamplingNearest2d", "ZeroPad1d", "ZeroPad3d",
    "CosineEmbeddingLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "MarginRankingLoss",
    "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "PoissonNLLLoss",
    "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
]

# torch's other functional names live in functional_more / losses_more (which build on
# functional, so functional cannot import them back): they join torchlean.nn.functional here,
# where the package is assembled
for _mod in (functional_more, losses_more):
    for _name in _mod.__all__:
        if _name[0].islower():
            setattr(functional, _name, getattr(_mod, _name))
            functional.__all__.append(_name)
del _mod, _name
