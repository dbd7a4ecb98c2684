"""``nn.utils`` helpers that build or rewrite modules: conv/linear + batch-norm fusion for
inference (``fuse_conv_bn_eval``, ``fuse_linear_bn_eval`` and their ``*_weights`` forms, torch's
formulas) and ``skip_init``; and the two-step gradient clipping of torch 2.6
(``get_total_norm`` then ``clip_grads_with_norm_``)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

from ...core.errors import ShapeError, TorchLeanError
from ...engine.params import Param
from ...engine.tensor import Tensor, no_grad, stack, tensor
from ..modules import Module

__all__ = ["clip_grads_with_norm_", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
           "fuse_linear_bn_eval", "fuse_linear_bn_weights", "get_total_norm", "skip_init"]


def _values(x: Any) -> Any:
    return x.detach() if isinstance(x, Tensor) else tensor(x)


def fuse_conv_bn_weights(conv_w: Any, conv_b: Any, bn_rm: Any, bn_rv: Any, bn_eps: float,
                         bn_w: Any, bn_b: Any, transpose: bool = False) -> tuple[Param, Param]:
    """The weight and bias of one convolution computing ``bn(conv(x))`` in eval mode."""
    w, rm, rv = _values(conv_w), _values(bn_rm), _values(bn_rv)
    b = rm * 0.0 if conv_b is None else _values(conv_b)
    scale = (rv + float(bn_eps)).rsqrt() * (rv * 0.0 + 1.0 if bn_w is None else _values(bn_w))
    shift = rm * 0.0 if bn_b is None else _values(bn_b)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (w.ndim - 2)
    fused_w = w * scale.reshape(*shape).to(w.dtype)
    fused_b = ((b - rm) * scale + shift).to(w.dtype)
    grad_w = conv_w.requires_grad if isinstance(conv_w, Tensor) else True
    grad_b = conv_b.requires_grad if isinstance(conv_b, Tensor) else grad_w
    return Param(fused_w, requires_grad=grad_w), Param(fused_b, requires_grad=grad_b)


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of ``conv`` whose output equals ``bn(conv(x))`` (both in eval mode)."""
    if conv.training or bn.training:
        raise TorchLeanError("fuse_conv_bn_eval: fusion only for eval (call .eval() on both)")
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose)
    return fused


def fuse_linear_bn_weights(linear_w: Any, linear_b: Any, bn_rm: Any, bn_rv: Any,
                           bn_eps: float, bn_w: Any, bn_b: Any) -> tuple[Param, Param]:
    """The weight and bias of one linear layer computing ``bn(linear(x))`` in eval mode."""
    w, rm, rv = _values(linear_w), _values(bn_rm), _values(bn_rv)
    b = rm * 0.0 if linear_b is None else _values(linear_b)
    scale = (rv + float(bn_eps)).rsqrt() * (rv * 0.0 + 1.0 if bn_w is None else _values(bn_w))
    shift = rm * 0.0 if bn_b is None else _values(bn_b)
    fused_w = w * scale.unsqueeze(-1).to(w.dtype)
    fused_b = ((b - rm) * scale + shift).to(w.dtype)
    return Param(fused_w), Param(fused_b)


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Module:
    """A copy of ``linear`` whose output equals ``bn(linear(x))`` (both in eval mode)."""
    if linear.training or bn.training:
        raise TorchLeanError("fuse_linear_bn_eval: fusion only for eval (call .eval() on both)")
    if not (linear.out_features == bn.num_features or bn.num_features == 1):
        raise ShapeError(f"fuse_linear_bn_eval: the linear layer's out_features "
                         f"({linear.out_features}) must equal the batch norm's num_features "
                         f"({bn.num_features}) or num_features must be 1")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused


def skip_init(module_cls: type, *args: Any, **kwargs: Any) -> Module:
    """torch builds the module without running its initialisers; here the module is built
    normally (its parameters hold the default initial values, which a caller of skip_init
    overwrites anyway)."""
    if not isinstance(module_cls, type) or not issubclass(module_cls, Module):
        raise TorchLeanError(f"skip_init: expected a Module class, found {module_cls!r}")
    kwargs.pop("device", None)
    return module_cls(*args, **kwargs)  # type: ignore[no-any-return]


def _tensors(op: str, tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        return [tensors]
    if not isinstance(tensors, Iterable):
        raise TorchLeanError(f"{op}: expected a tensor or an iterable of tensors, found "
                             f"{type(tensors).__name__}")
    return [t for t in tensors if t is not None]


def get_total_norm(tensors: Any, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: Any = None) -> Tensor:
    """The ``norm_type``-norm of the tensors' norms (torch's ``get_total_norm``)."""
    items = _tensors("get_total_norm", tensors)
    if not items:
        return tensor(0.0)
    order = float(norm_type)
    with no_grad():
        if math.isinf(order):
            norms = [t.detach().abs().amax() if t.numel() else t.detach().sum() * 0.0
                     for t in items]
            total = stack(norms).amax()
        else:
            norms = [t.detach().abs().pow(order).sum() ** (1.0 / order) for t in items]
            total = (stack(norms).pow(order).sum()) ** (1.0 / order)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise TorchLeanError(f"get_total_norm: the total norm of order {order} is non-finite")
    return total


def clip_grads_with_norm_(parameters: Any, max_norm: float, total_norm: Any,
                          foreach: Any = None) -> None:
    """Scale every gradient by ``min(max_norm / (total_norm + 1e-6), 1)`` in place."""
    params = [p for p in _tensors("clip_grads_with_norm_", parameters) if p.grad is not None]
    coef = min(float(max_norm) / (float(total_norm) + 1e-6), 1.0)
    with no_grad():
        for p in params:
            grad: Any = p.grad  # (only parameters with a gradient are in params)
            grad.mul_(coef)
