"""More of torch.nn's layers, each a ``Module`` over ``nn.functional`` / ``functional_more``.

``Bilinear``, ``RMSNorm``, ``LocalResponseNorm``, the padding layers (constant, zero,
reflection, replication, circular; 1-3 d), ``PixelUnshuffle``, ``ChannelShuffle``,
``Upsampling{Nearest,Bilinear}2d``, ``Softmax2d``, ``Hardshrink``/``Softshrink``, the random
``RReLU``/``AlphaDropout``/``FeatureAlphaDropout`` (torchlean's seeded stream in training
mode), adaptive and power-average pools, ``MaxUnpool1d/2d``, ``Fold``/``Unfold``,
``ConvTranspose1d`` and the lazy ``LazyLinear``/``LazyConv1d``/``LazyConv2d`` (which become
the plain layer on their first call, as torch's). Constructor signatures, parameter names and
shapes, initial distributions and ``extra_repr`` are torch's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.params import Param
from . import functional as TF
from . import functional_more as FM
from .extras import Conv1d, Upsample
from .modules import Conv2d, Linear, Module, _positive, _use, kaiming_uniform_bound, uniform_init

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AlphaDropout", "Bilinear",
    "ChannelShuffle", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
    "ConstantPad2d", "ConstantPad3d", "ConvTranspose1d", "FeatureAlphaDropout", "Fold",
    "Hardshrink", "LPPool1d", "LPPool2d", "LazyConv1d", "LazyConv2d", "LazyLinear",
    "LocalResponseNorm", "MaxUnpool1d", "MaxUnpool2d", "PixelUnshuffle", "RMSNorm", "RReLU",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d",
    "ReplicationPad2d", "ReplicationPad3d", "Softmax2d", "Softshrink", "Unfold",
    "UpsamplingBilinear2d", "UpsamplingNearest2d", "ZeroPad1d", "ZeroPad3d",
]


def _dtype(dtype: Any) -> Any:
    return "float32" if dtype is None else dtype


def _int_tuple(layer: str, name: str, value: Any, d: int, minimum: int) -> tuple[int, ...]:
    return TF._ntuple(layer, name, value, d, minimum)


# --- parametrised layers ----------------------------------------------------------------------


class Bilinear(Module):
    """``y = x1 @ weight[o] @ x2 + bias[o]``; weight ``(out, in1, in2)`` and bias drawn from
    U(-1/sqrt(in1), 1/sqrt(in1)), as torch's."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device: Any = None, dtype: Any = None,
                 generator: Any = None) -> None:
        super().__init__()
        _positive("Bilinear", in1_features=in1_features, in2_features=in2_features,
                   out_features=out_features)
        self.in1_features, self.in2_features = int(in1_features), int(in2_features)
        self.out_features = int(out_features)
        bound = 1.0 / math.sqrt(in1_features)
        dt = _dtype(dtype)
        self.weight = Param(uniform_init((out_features, in1_features, in2_features), bound, dt,
                                         generator), "weight")
        self.bias = (Param(uniform_init((out_features,), bound, dt, generator), "bias")
                     if bias else None)

    def forward(self, input1: Any, input2: Any) -> Any:
        bias = None if self.bias is None else _use(input1, self.bias)
        return FM.bilinear(input1, input2, _use(input1, self.weight), bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` axes;
    weight starts at ones."""

    def __init__(self, normalized_shape: Any, eps: Any = None, elementwise_affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int | np.integer) \
            else tuple(normalized_shape)
        _positive("RMSNorm", **{f"normalized_shape[{i}]": s for i, s in enumerate(shape)})
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps = eps
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = (Param(np.ones(self.normalized_shape, np.dtype(_dtype(dtype))), "weight")
                       if elementwise_affine else None)

    def forward(self, x: Any) -> Any:
        weight = None if self.weight is None else _use(x, self.weight)
        return FM.rms_norm(x, self.normalized_shape, weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class ConvTranspose1d(Module):
    """1-D transposed convolution; weight ``(in, out / groups, k)``, drawn with torch's fan-in
    from the weight's second axis."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None, generator: Any = None) -> None:
        super().__init__()
        name = "ConvTranspose1d"
        _positive(name, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise TorchLeanError(f"{name}: in_channels ({in_channels}) and out_channels "
                                 f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise TorchLeanError(f"{name}: only padding_mode='zeros' is supported for "
                                 f"transposed convolutions (torch's rule), found "
                                 f"{padding_mode!r}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _int_tuple(name, "kernel_size", kernel_size, 1, 1)
        self.stride = _int_tuple(name, "stride", stride, 1, 1)
        self.padding = _int_tuple(name, "padding", padding, 1, 0)
        self.output_padding = _int_tuple(name, "output_padding", output_padding, 1, 0)
        self.dilation = _int_tuple(name, "dilation", dilation, 1, 1)
        self.groups, self.padding_mode = int(groups), padding_mode
        k = self.kernel_size[0]
        bound = kaiming_uniform_bound(out_channels // groups * k)
        dt = _dtype(dtype)
        self.weight = Param(uniform_init((in_channels, out_channels // groups, k), bound, dt,
                                         generator), "weight")
        self.bias = (Param(uniform_init((out_channels,), bound, dt, generator), "bias")
                     if bias else None)

    def forward(self, input: Any, output_size: Any = None) -> Any:
        if output_size is not None:
            raise TorchLeanError("ConvTranspose1d: output_size is not supported; give "
                                 "output_padding instead")
        bias = None if self.bias is None else _use(input, self.bias)
        return FM.conv_transpose1d(input, _use(input, self.weight), bias, self.stride,
                                   self.padding, self.output_padding, self.groups,
                                   self.dilation)

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,):
            text += f", padding={self.padding}"
        if self.dilation != (1,):
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,):
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


# --- lazy layers: the input size is read on the first call ---------------------------------


class LazyLinear(Module):
    """``Linear`` whose ``in_features`` is the last axis of its first input; it then becomes
    a ``Linear`` (torch's ``cls_to_become``)."""

    def __init__(self, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        _positive("LazyLinear", out_features=out_features)
        self.out_features, self._bias, self._dtype = int(out_features), bool(bias), dtype
        self.in_features = 0
        self.weight, self.bias = None, None

    def forward(self, x: Any) -> Any:
        training, bias, dtype = self.training, self._bias, self._dtype
        for name in ("_bias", "_dtype"):
            object.__delattr__(self, name)
        self.__class__ = Linear  # type: ignore[assignment]
        Linear.__init__(self, int(x.shape[-1]), self.out_features, bias,  # type: ignore
                        _dtype(dtype))
        self.train(training)
        return self(x)


class LazyConv1d(Module):
    """``Conv1d`` whose ``in_channels`` is read from its first input (then a ``Conv1d``)."""

    _becomes: type[Module] = Conv1d
    _spatial = 1

    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _positive(type(self).__name__, out_channels=out_channels, groups=groups)
        self._args = (int(out_channels), kernel_size, stride, padding, dilation, int(groups),
                      bool(bias), padding_mode, _dtype(dtype))
        self.weight, self.bias = None, None

    def forward(self, x: Any) -> Any:
        shape = tuple(x.shape)
        if len(shape) not in (self._spatial + 1, self._spatial + 2):
            raise ShapeError(f"{type(self).__name__}: expected a {self._spatial + 1}-D or "
                             f"{self._spatial + 2}-D input, found {shape}")
        training, args, target = self.training, self._args, self._becomes
        in_channels = shape[-self._spatial - 1]
        object.__delattr__(self, "_args")
        self.__class__ = target  # type: ignore[assignment]
        target.__init__(self, in_channels, *args)  # type: ignore
        self.train(training)
        return self(x)


class LazyConv2d(LazyConv1d):
    """``Conv2d`` whose ``in_channels`` is read from its first input (then a ``Conv2d``)."""

    _becomes: type[Module] = Conv2d
    _spatial = 2


# --- normalisation, shuffles, activations -----------------------------------------------------


class LocalResponseNorm(Module):
    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1.0) -> None:
        super().__init__()
        _positive("LocalResponseNorm", size=size)
        self.size, self.alpha, self.beta, self.k = int(size), alpha, beta, k

    def forward(self, input: Any) -> Any:
        return FM.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        _positive("PixelUnshuffle", downscale_factor=downscale_factor)
        self.downscale_factor = int(downscale_factor)

    def forward(self, input: Any) -> Any:
        return FM.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        _positive("ChannelShuffle", groups=groups)
        self.groups = int(groups)

    def forward(self, input: Any) -> Any:
        return FM.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class Softmax2d(Module):
    """Softmax over the channels of ``(N, C, H, W)`` or ``(C, H, W)``."""

    def forward(self, input: Any) -> Any:
        if len(tuple(input.shape)) not in (3, 4):
            raise ShapeError(f"Softmax2d: expected (C, H, W) or (N, C, H, W), found "
                             f"{tuple(input.shape)}")
        return TF.softmax(input, dim=-3)


class Hardshrink(Module):
    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        TF._number("Hardshrink", "lambd", lambd)
        self.lambd = lambd

    def forward(self, input: Any) -> Any:
        return FM.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Module):
    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        TF._number("Softshrink", "lambd", lambd)
        self.lambd = lambd
        if lambd < 0:
            raise TorchLeanError(f"Softshrink: lambd must be >= 0, found {lambd}")

    def forward(self, input: Any) -> Any:
        return FM.softshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class RReLU(Module):
    """Randomised leaky relu: slopes drawn from U(lower, upper) in training, their mean in
    eval mode."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
                 inplace: bool = False) -> None:
        super().__init__()
        self.lower = TF._number("RReLU", "lower", lower)
        self.upper = TF._number("RReLU", "upper", upper)
        if self.lower > self.upper:
            raise TorchLeanError(f"RReLU: lower ({lower}) must be <= upper ({upper})")
        self.inplace = bool(inplace)

    def forward(self, input: Any) -> Any:
        return FM.rrelu(input, self.lower, self.upper, self.training)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace
                                                            else "")


class AlphaDropout(Module):
    """SELU-preserving dropout in training mode; identity in eval mode."""

    _feature = False

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = FM._prob(type(self).__name__, p)
        self.inplace = bool(inplace)

    def forward(self, input: Any) -> Any:
        if self._feature:
            return FM.feature_alpha_dropout(input, self.p, self.training)
        return FM.alpha_dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class FeatureAlphaDropout(AlphaDropout):
    """``AlphaDropout`` of whole channels."""

    _feature = True


# --- padding ----------------------------------------------------------------------------------


class _Pad(Module):
    _d = 1
    _mode = "constant"

    def __init__(self, padding: Any) -> None:
        super().__init__()
        self.padding = _int_tuple(type(self).__name__, "padding", padding, 2 * self._d,
                                  -(1 << 62))

    def forward(self, input: Any) -> Any:
        x = FM._t(type(self).__name__, "input", input)
        if x.ndim not in (self._d + 1, self._d + 2):
            raise ShapeError(f"{type(self).__name__}: expected a {self._d + 1}-D or "
                             f"{self._d + 2}-D input, found {tuple(x.shape)}")
        return TF.pad(x, list(self.padding), mode=self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        TF._number(type(self).__name__, "value", value)
        self.value = value

    def forward(self, input: Any) -> Any:
        x = FM._t(type(self).__name__, "input", input)
        return TF.pad(x, list(self.padding), mode="constant", value=self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPad):
    _d = 1


class ConstantPad2d(_ConstantPad):
    _d = 2


class ConstantPad3d(_ConstantPad):
    _d = 3


class _ZeroPad(_ConstantPad):
    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad):
    _d = 1


class ZeroPad3d(_ZeroPad):
    _d = 3


def _pad_class(name: str, d: int, mode: str) -> type[_Pad]:
    doc = f"``F.pad(input, padding, mode={mode!r})`` over the last {d} axes."
    return type(name, (_Pad,), {"_d": d, "_mode": mode, "__doc__": doc,
                                "__module__": __name__})


ReflectionPad1d = _pad_class("ReflectionPad1d", 1, "reflect")
ReflectionPad2d = _pad_class("ReflectionPad2d", 2, "reflect")
ReflectionPad3d = _pad_class("ReflectionPad3d", 3, "reflect")
ReplicationPad1d = _pad_class("ReplicationPad1d", 1, "replicate")
ReplicationPad2d = _pad_class("ReplicationPad2d", 2, "replicate")
ReplicationPad3d = _pad_class("ReplicationPad3d", 3, "replicate")
CircularPad1d = _pad_class("CircularPad1d", 1, "circular")
CircularPad2d = _pad_class("CircularPad2d", 2, "circular")
CircularPad3d = _pad_class("CircularPad3d", 3, "circular")


# --- resizing and pooling ---------------------------------------------------------------------


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear resizing with ``align_corners=True`` (torch's)."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Any) -> Any:
        return FM.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(Module):
    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, bool(return_indices)

    def forward(self, input: Any) -> Any:
        return FM.adaptive_max_pool1d(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    def forward(self, input: Any) -> Any:
        if self.return_indices:
            return FM.adaptive_max_pool2d_with_indices(input, self.output_size)
        return TF.adaptive_max_pool2d(input, self.output_size)


class LPPool1d(Module):
    """Power-average pooling: ``(sum of x^p over each window)^(1/p)``."""

    _d = 1

    def __init__(self, norm_type: float, kernel_size: Any, stride: Any = None,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        TF._number(type(self).__name__, "norm_type", norm_type)
        self.norm_type = norm_type  # as given: torch's repr prints it so
        self.kernel_size, self.stride, self.ceil_mode = kernel_size, stride, bool(ceil_mode)

    def forward(self, input: Any) -> Any:
        pool = FM.lp_pool1d if self._d == 1 else FM.lp_pool2d
        return pool(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool2d(LPPool1d):
    _d = 2


class MaxUnpool1d(Module):
    """The inverse of ``MaxPool1d`` given its indices: ``forward(input, indices,
    output_size=None)``."""

    _d = 1

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        name, d = type(self).__name__, self._d
        self.kernel_size = _int_tuple(name, "kernel_size", kernel_size, d, 1)
        self.stride = (self.kernel_size if stride is None
                       else _int_tuple(name, "stride", stride, d, 1))
        self.padding = _int_tuple(name, "padding", padding, d, 0)

    def forward(self, input: Any, indices: Any, output_size: Any = None) -> Any:
        unpool = FM.max_unpool1d if self._d == 1 else FM.max_unpool2d
        return unpool(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool2d(MaxUnpool1d):
    _d = 2


class Unfold(Module):
    """Sliding local blocks of ``(N, C, H, W)`` as columns ``(N, C kH kW, L)``."""

    def __init__(self, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
                 stride: Any = 1) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input: Any) -> Any:
        return FM.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    """Columns ``(N, C kH kW, L)`` summed back into ``(N, C, H, W)`` (``Unfold``'s adjoint)."""

    def __init__(self, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
                 stride: Any = 1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Any) -> Any:
        return FM.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                       self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")
