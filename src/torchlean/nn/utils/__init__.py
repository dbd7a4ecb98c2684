"""``nn.utils``: gradient clipping over a model's parameters, as ``torch.nn.utils``.

``clip_grad_norm_`` scales every gradient by ``max_norm / (total_norm + 1e-6)`` when the norm of
all gradients together exceeds ``max_norm`` (torch's formula, epsilon included) and returns that
total norm; ``clip_grad_value_`` clamps each entry. Both change the gradients in place, whether a
parameter's ``.grad`` is an array (``Param``) or a tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...core.backend import namespace_of, to_host
from ...core.errors import TorchLeanError
from ...engine.tensor import Tensor, cat, no_grad, tensor
from . import parametrizations, parametrize, rnn
from .module_tools import (
    clip_grads_with_norm_,
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
    get_total_norm,
    skip_init,
)
from .weight_hooks import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "rnn",
           "vector_to_parameters", "parametrizations", "parametrize", "clip_grads_with_norm_",
           "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights", "get_total_norm", "skip_init", "remove_spectral_norm",
           "remove_weight_norm", "spectral_norm", "weight_norm"]


def _params(op: str, parameters: Any) -> list[Any]:
    if hasattr(parameters, "grad") and hasattr(parameters, "shape"):
        return [parameters]  # one parameter, as torch accepts
    if not isinstance(parameters, Iterable):
        raise TorchLeanError(f"{op}: expected parameters (an iterable, or one parameter), found "
                             f"{type(parameters).__name__}")
    out = list(parameters)
    for i, p in enumerate(out):
        if not hasattr(p, "grad"):
            raise TorchLeanError(f"{op}: item {i} is a {type(p).__name__}, not a parameter")
    return out


def _number(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TorchLeanError(f"{op}: {name} must be a number, found {value!r}")
    return float(value)


def _grad_array(g: Any) -> Any:
    """The gradient's values where they live (a tensor's without its history)."""
    if isinstance(g, Tensor):
        return g.detach().numpy() if g.device == "cpu" else g.detach().cpu().numpy()
    return g


def _scale(p: Any, factor: float) -> None:
    """``p.grad *= factor`` in place (the same buffer the caller may hold)."""
    g = p.grad
    if isinstance(g, Tensor):
        if hasattr(g, "mul_"):
            with no_grad():
                g.mul_(factor)
        else:
            p.grad = tensor(_grad_array(g) * np.asarray(factor, dtype=g.dtype))
    else:
        g *= np.asarray(factor, dtype=g.dtype)


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: Any = None) -> Any:
    """Scale the gradients so that their joint ``norm_type``-norm is at most ``max_norm``;
    returns the norm before clipping (a 0-d tensor)."""
    op = "clip_grad_norm_"
    params = [p for p in _params(op, parameters) if p.grad is not None]
    limit = _number(op, "max_norm", max_norm)
    order = _number(op, "norm_type", norm_type)
    if not params:
        return tensor(0.0)
    grads = [np.asarray(to_host(_grad_array(p.grad)), dtype=np.float64) for p in params]
    if math.isinf(order):
        total = max(float(np.max(np.abs(g))) if g.size else 0.0 for g in grads)
    else:
        norms = [float(np.sum(np.abs(g) ** order)) ** (1.0 / order) for g in grads]
        total = float(np.sum(np.asarray(norms) ** order)) ** (1.0 / order)
    if error_if_nonfinite and not math.isfinite(total):
        raise TorchLeanError(f"{op}: the total norm of order {order} for gradients from "
                             "`parameters` is non-finite, so it cannot be clipped")
    coef = min(limit / (total + 1e-6), 1.0)
    if coef < 1.0:
        for p in params:
            _scale(p, coef)
    dtype = np.dtype(_grad_array(params[0].grad).dtype)
    return tensor(np.asarray(total, dtype=dtype))


def clip_grad_value_(parameters: Any, clip_value: float, foreach: Any = None) -> None:
    """Clamp every gradient entry into ``[-clip_value, clip_value]`` in place."""
    op = "clip_grad_value_"
    bound = _number(op, "clip_value", clip_value)
    for p in _params(op, parameters):
        g = p.grad
        if g is None:
            continue
        if isinstance(g, Tensor):
            if hasattr(g, "clamp_"):
                with no_grad():
                    g.clamp_(-bound, bound)
            else:
                p.grad = tensor(np.clip(_grad_array(g), -bound, bound))
        else:
            xp = namespace_of(g)
            g[...] = xp.clip(g, -bound, bound)


def parameters_to_vector(parameters: Any) -> Tensor:
    """The parameters flattened and concatenated into one vector (torch's)."""
    params = _params("parameters_to_vector", parameters)
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec: Any, parameters: Any) -> None:
    """Copy consecutive slices of ``vec`` into the parameters (torch's)."""
    params = _params("vector_to_parameters", parameters)
    total = sum(p.numel() for p in params)
    if not isinstance(vec, Tensor) or vec.ndim != 1 or vec.numel() != total:
        raise TorchLeanError(f"vector_to_parameters: expected a 1-D tensor of {total} entries, "
                             f"found {getattr(vec, 'shape', type(vec).__name__)}")
    start = 0
    with no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vec[start:start + n].reshape(p.shape))
            start += n
