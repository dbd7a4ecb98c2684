"""``tl.nn`` loss modules and the extra activation / pooling modules, with torch's names and
constructor arguments.

Each is a thin ``Module`` over ``torchlean.nn.functional`` (PyTorch's argument order:
``loss_fn(input, target)``), so it runs on whatever its input lives on: session refs,
``tl.Tensor``, graph variables or plain arrays. Class weights are buffers, as in torch, so they
appear in ``state_dict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import to_host
from ..core.errors import TorchLeanError
from . import functional as TF
from .modules import Module

__all__ = ["AdaptiveAvgPool2d", "BCEWithLogitsLoss", "CrossEntropyLoss", "ELU", "Hardtanh",
           "HuberLoss", "Identity", "L1Loss", "LeakyReLU", "LogSigmoid", "LogSoftmax", "MSELoss",
           "NLLLoss", "ReLU6", "SmoothL1Loss", "Softmax", "Softplus"]


class _Loss(Module):
    """Checks and stores ``reduction`` (torch's deprecated size_average/reduce mapped to it)."""

    def __init__(self, name: str, size_average: Any, reduce: Any, reduction: str) -> None:
        super().__init__()
        reduction = TF._legacy_reduction(name, size_average, reduce, reduction)
        self.reduction = TF._reduction(name, reduction)

    def extra_repr(self) -> str:
        return ""  # torch prints losses without arguments


class _WeightedLoss(_Loss):
    def __init__(self, name: str, weight: Any, size_average: Any, reduce: Any,
                 reduction: str) -> None:
        super().__init__(name, size_average, reduce, reduction)
        if weight is None:
            self.weight = None
        else:
            w = np.asarray(to_host(weight))
            if w.ndim != 1 or w.dtype.kind not in "fiu":
                raise TorchLeanError(f"{name}: weight must be a 1-D array of class weights, "
                                     f"found {w.dtype} {w.shape}")
            self.register_buffer("weight", w.astype(np.float64))


class CrossEntropyLoss(_WeightedLoss):
    """``F.cross_entropy(input, target, ...)`` as a module (logits in, class indices or
    probabilities as targets)."""

    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__("CrossEntropyLoss", weight, size_average, reduce, reduction)
        self.ignore_index = TF._int("CrossEntropyLoss", "ignore_index", ignore_index)
        if not isinstance(label_smoothing, int | float) or isinstance(label_smoothing, bool) \
                or not 0.0 <= label_smoothing <= 1.0:
            raise TorchLeanError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], found "
                                 f"{label_smoothing!r}")
        self.label_smoothing = float(label_smoothing)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                                reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """``F.nll_loss(input, target, ...)`` as a module (log-probabilities in)."""

    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean") -> None:
        super().__init__("NLLLoss", weight, size_average, reduce, reduction)
        self.ignore_index = TF._int("NLLLoss", "ignore_index", ignore_index)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                           reduction=self.reduction)


class MSELoss(_Loss):
    """``F.mse_loss(input, target, reduction=...)`` as a module."""

    def __init__(self, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("MSELoss", size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """``F.l1_loss(input, target, reduction=...)`` as a module."""

    def __init__(self, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("L1Loss", size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.l1_loss(input, target, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """``F.binary_cross_entropy_with_logits`` as a module (``weight`` and ``pos_weight``)."""

    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__("BCEWithLogitsLoss", size_average, reduce, reduction)
        # buffers, as in torch; broadcast against the input when used
        for name, value in (("weight", weight), ("pos_weight", pos_weight)):
            if value is None:
                setattr(self, name, None)
            else:
                self.register_buffer(name, np.asarray(to_host(value), np.float64))

    def forward(self, input: Any, target: Any) -> Any:
        # constants (NumPy), taken in the input's dtype by the functional form
        weight = None if self.weight is None else self.weight.numpy()
        pos_weight = None if self.pos_weight is None else self.pos_weight.numpy()
        return TF.binary_cross_entropy_with_logits(input, target, weight=weight,
                                                   reduction=self.reduction,
                                                   pos_weight=pos_weight)


class HuberLoss(_Loss):
    """``F.huber_loss(input, target, reduction=..., delta=...)`` as a module."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__("HuberLoss", None, None, reduction)
        self.delta = TF._number("HuberLoss", "delta", delta)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class SmoothL1Loss(_Loss):
    """``F.smooth_l1_loss(input, target, reduction=..., beta=...)`` as a module."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        super().__init__("SmoothL1Loss", size_average, reduce, reduction)
        self.beta = TF._number("SmoothL1Loss", "beta", beta)

    def forward(self, input: Any, target: Any) -> Any:
        return TF.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)
        self.negative_slope = TF._number("LeakyReLU", "negative_slope", negative_slope)

    def forward(self, input: Any) -> Any:
        return TF.leaky_relu(input, self.negative_slope, inplace=self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                          else "")


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)
        self.alpha = TF._number("ELU", "alpha", alpha)

    def forward(self, input: Any) -> Any:
        return TF.elu(input, self.alpha, inplace=self.inplace)


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0,
                 inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)
        self.min_val = TF._number("Hardtanh", "min_val", min_val)
        self.max_val = TF._number("Hardtanh", "max_val", max_val)
        if self.min_val > self.max_val:
            raise TorchLeanError(f"Hardtanh: min_val {min_val} must be <= max_val {max_val}")

    def forward(self, input: Any) -> Any:
        return TF.hardtanh(input, self.min_val, self.max_val, inplace=self.inplace)


class ReLU6(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, input: Any) -> Any:
        return TF.relu6(input, inplace=self.inplace)


class LogSigmoid(Module):
    def forward(self, input: Any) -> Any:
        return TF.logsigmoid(input)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = TF._number("Softplus", "beta", beta), float(threshold)

    def forward(self, input: Any) -> Any:
        return TF.softplus(input, self.beta, self.threshold)


class AdaptiveAvgPool2d(Module):
    """``F.adaptive_avg_pool2d`` (output sizes that divide the input's spatial size)."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Any) -> Any:
        return TF.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class Softmax(Module):
    """Softmax along ``dim`` (required here: torch's implicit choice is deprecated)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return TF.softmax(input, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """log(softmax) along ``dim``."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return TF.log_softmax(input, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments (as torch)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input
