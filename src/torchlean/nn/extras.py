"""More of torch.nn's modules, each a thin wrapper of ``nn.functional`` or of a layer here.

Losses (``BCELoss``, ``KLDivLoss``), activations (``PReLU``, ``SELU``, ``CELU``, ``Mish``,
``Hardswish``, ``Hardsigmoid``, ``Softsign``, ``Softmin``, ``GLU``, ``Tanhshrink``,
``Threshold``), ``CosineSimilarity``/``PairwiseDistance``, ``Unflatten``, the 1-d layers
(``Conv1d``, ``BatchNorm1d``, ``MaxPool1d``, ``AvgPool1d``) and ``ParameterList`` /
``ParameterDict``. They compute with the functional forms, so gradients and errors are those
functions'.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.params import Param
from . import functional as TF
from .loss import _Loss
from .modules import BatchNorm2d, Module, _positive, _use, kaiming_uniform_bound, uniform_init


class BCELoss(_Loss):
    """``F.binary_cross_entropy`` as a module (inputs are probabilities)."""

    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("BCELoss", size_average, reduce, reduction)
        if weight is None:
            self.weight = None
        else:
            self.register_buffer("weight", np.asarray(weight, np.float64))

    def forward(self, input: Any, target: Any) -> Any:
        weight = None if self.weight is None else self.weight.numpy()
        return TF.binary_cross_entropy(input, target, weight=weight, reduction=self.reduction)


class KLDivLoss(_Loss):
    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                 log_target: bool = False) -> None:
        if reduction == "batchmean":
            super().__init__("KLDivLoss", size_average, reduce, "mean")
        else:
            super().__init__("KLDivLoss", size_average, reduce, reduction)
        self.reduction = reduction
        self.log_target = bool(log_target)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


def _simple(name: str, fn: Any, doc: str) -> type[Module]:
    """A module with no parameters whose forward is ``fn(x)``."""

    def forward(self: Module, input: Any) -> Any:
        return fn(input)

    def init(self: Module, inplace: bool = False) -> None:
        Module.__init__(self)

    return type(name, (Module,), {"__init__": init, "forward": forward, "__doc__": doc})


Softsign = _simple("Softsign", TF.softsign, "x / (1 + |x|).")
Hardsigmoid = _simple("Hardsigmoid", TF.hardsigmoid, "clamp(x / 6 + 1 / 2, 0, 1).")
Hardswish = _simple("Hardswish", TF.hardswish, "x * clamp(x + 3, 0, 6) / 6.")
Mish = _simple("Mish", TF.mish, "x * tanh(softplus(x)).")
SELU = _simple("SELU", TF.selu, "scale * elu(x, alpha) with torch's constants.")
Tanhshrink = _simple("Tanhshrink", TF.tanhshrink, "x - tanh(x).")


class CELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, input: Any) -> Any:
        return TF.celu(input, self.alpha)


class Softmin(Module):
    def __init__(self, dim: Any = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return TF.softmin(input, dim=self.dim)


class GLU(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return TF.glu(input, self.dim)


class Threshold(Module):
    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value = float(threshold), float(value)

    def forward(self, input: Any) -> Any:
        return TF.threshold(input, self.threshold, self.value)


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)`` with a learned slope (one, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype: Any = "float32"
                 ) -> None:
        super().__init__()
        _positive("PReLU", num_parameters=num_parameters)
        self.num_parameters = int(num_parameters)
        self.weight = Param(np.full(self.num_parameters, init, np.dtype(dtype)), "weight")

    def forward(self, input: Any) -> Any:
        return TF.prelu(input, _use(input, self.weight))


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Any, x2: Any) -> Any:
        return TF.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Any, x2: Any) -> Any:
        return TF.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim = int(dim)
        self.unflattened_size = tuple(int(s) for s in unflattened_size)

    def forward(self, input: Any) -> Any:
        shape = list(TF._shape(input))
        axis = TF._dim("Unflatten", self.dim, len(shape))
        return input.reshape(*shape[:axis], *self.unflattened_size, *shape[axis + 1:])


class Conv1d(Module):
    """1-D convolution over ``(C, L)`` or ``(N, C, L)``; weight ``(out, in / groups, k)``.
    ``padding_mode`` other than ``'zeros'`` pads the input with ``F.pad``'s mode first (as
    torch's ``_conv_forward``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype: Any = "float32", generator: Any = None
                 ) -> None:
        super().__init__()
        _positive("Conv1d", in_channels=in_channels, out_channels=out_channels, groups=groups)
        modes = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate",
                 "circular": "circular"}
        if padding_mode not in modes:
            raise TorchLeanError(f"Conv1d: padding_mode must be one of {tuple(modes)}, found "
                                 f"{padding_mode!r}")
        if in_channels % groups or out_channels % groups:
            raise TorchLeanError(f"Conv1d: in_channels ({in_channels}) and out_channels "
                                 f"({out_channels}) must be divisible by groups ({groups})")
        k = int(kernel_size[0] if isinstance(kernel_size, tuple | list) else kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = int(in_channels), \
            int(out_channels), (k,)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.groups, self.padding_mode = int(groups), padding_mode
        self._pad_mode = modes[padding_mode]
        bound = kaiming_uniform_bound(in_channels // groups * k)
        self.weight = Param(uniform_init((out_channels, in_channels // groups, k), bound, dtype,
                                         generator), "weight")
        self.bias = (Param(uniform_init((out_channels,), bound, dtype, generator), "bias")
                     if bias else None)

    def forward(self, x: Any) -> Any:
        bias = _use(x, self.bias) if self.bias is not None else None
        padding = self.padding
        if self.padding_mode != "zeros" and padding != "valid":
            d = self.dilation[0] if isinstance(self.dilation, tuple | list) else self.dilation
            if padding == "same":
                total = int(d) * (self.kernel_size[0] - 1)
                amounts = [total // 2, total - total // 2]
            else:
                p = int(padding[0] if isinstance(padding, tuple | list) else padding)
                amounts = [p, p]
            x = TF.pad(x, amounts, mode=self._pad_mode)
            padding = 0
        return TF.conv1d(x, _use(x, self.weight), bias, stride=self.stride, padding=padding,
                         dilation=self.dilation, groups=self.groups)


class BatchNorm1d(BatchNorm2d):
    """Batch normalisation over ``(N, C)`` or ``(N, C, L)`` per channel: ``BatchNorm2d`` on
    the input with one (or two) unit axes added."""

    def forward(self, x: Any) -> Any:
        shape = TF._shape(x)
        if len(shape) not in (2, 3) or shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm1d: expected (N, C) or (N, C, L) with C = "
                             f"{self.num_features}, found {shape}")
        four = x.reshape(*shape, 1, 1) if len(shape) == 2 else x.reshape(*shape, 1)
        return super().forward(four).reshape(*shape)


class MaxPool1d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, input: Any) -> Any:
        return TF.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                             self.ceil_mode, self.return_indices)


class AvgPool1d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input: Any) -> Any:
        return TF.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)


class ParameterList(Module):
    """A list of parameters registered under ``"0"``, ``"1"``, ... (torch's names)."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value: Any) -> ParameterList:
        if not isinstance(value, Param):
            raise TorchLeanError(f"ParameterList: expected an nn.Parameter, found "
                                 f"{type(value).__name__}")
        setattr(self, str(len(self)), value)
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Param]:
        return iter(list(self._parameters.values()))

    def __getitem__(self, i: int) -> Param:
        return list(self._parameters.values())[i]


class ParameterDict(Module):
    """A dict of parameters registered under their keys."""

    def __init__(self, parameters: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        for k, v in (parameters or {}).items():
            self[k] = v

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(value, Param):
            raise TorchLeanError(f"ParameterDict: expected an nn.Parameter, found "
                                 f"{type(value).__name__}")
        setattr(self, key, value)

    def __getitem__(self, key: str) -> Param:
        return self._parameters[key]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._parameters))

    def __contains__(self, key: object) -> bool:
        return key in self._parameters

    def keys(self) -> Any:
        return self._parameters.keys()

    def values(self) -> Any:
        return self._parameters.values()

    def items(self) -> Any:
        return self._parameters.items()



class Upsample(Module):
    """``F.interpolate`` as a module (nearest or the linear modes)."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: Any = None, recompute_scale_factor: Any = None) -> None:
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners = align_corners

    def forward(self, input: Any) -> Any:
        return TF.interpolate(input, self.size, self.scale_factor, self.mode,
                              self.align_corners)

    def extra_repr(self) -> str:
        info = (f"size={self.size}" if self.size is not None
                else f"scale_factor={float(self.scale_factor)}")
        return f"{info}, mode='{self.mode}'"


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, input: Any) -> Any:
        return TF.pixel_shuffle(input, self.upscale_factor)


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, dtype: Any = "float32") -> None:
        super().__init__()
        _positive("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise TorchLeanError("GroupNorm: num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Param | None
        self.bias: Param | None
        if affine:
            self.weight = Param(np.ones(num_channels, np.dtype(dtype)), "weight")
            self.bias = Param(np.zeros(num_channels, np.dtype(dtype)), "bias")
        else:
            self.weight, self.bias = None, None

    def forward(self, input: Any) -> Any:
        w = None if self.weight is None else _use(input, self.weight)
        b = None if self.bias is None else _use(input, self.bias)
        return TF.group_norm(input, self.num_groups, w, b, self.eps)


class InstanceNorm2d(Module):
    """Per-sample, per-channel normalisation (torch's defaults: no affine parameters, no
    running statistics; ``track_running_stats=True`` is refused)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False,
                 dtype: Any = "float32") -> None:
        super().__init__()
        if track_running_stats:
            raise TF.UnsupportedArgumentError("InstanceNorm: track_running_stats=True is not "
                                              "supported")
        self.num_features, self.eps = int(num_features), eps
        self.weight: Param | None
        self.bias: Param | None
        if affine:
            self.weight = Param(np.ones(num_features, np.dtype(dtype)), "weight")
            self.bias = Param(np.zeros(num_features, np.dtype(dtype)), "bias")
        else:
            self.weight, self.bias = None, None

    def forward(self, input: Any) -> Any:
        w = None if self.weight is None else _use(input, self.weight)
        b = None if self.bias is None else _use(input, self.bias)
        return TF.instance_norm(input, weight=w, bias=b, eps=self.eps)


InstanceNorm1d = InstanceNorm2d


class ZeroPad2d(Module):
    """``F.pad`` with zeros: one int (all sides) or (left, right, top, bottom)."""

    def __init__(self, padding: Any) -> None:
        super().__init__()
        self.padding = (padding,) * 4 if isinstance(padding, int) else tuple(padding)

    def forward(self, input: Any) -> Any:
        return TF.pad(input, self.padding)
