"""torch's original ``weight_norm`` / ``spectral_norm`` (``torch.nn.utils.weight_norm``):
forward pre-hooks that recompute ``module.weight`` before every call.

``weight_norm`` replaces the parameter by ``weight_g`` (norms over every axis but ``dim``) and
``weight_v``; ``spectral_norm`` by ``weight_orig`` with power-iteration buffers ``weight_u``
and ``weight_v`` (torch's order: ``v`` from ``u``, then ``u`` from ``v``, advancing in
training mode). Names, order and formulas are torch's, so a torch state dict loads and
training trajectories match. ``remove_*`` turns the computed weight back into a parameter.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import TorchLeanError
from ...engine.params import Param
from ...engine.tensor import no_grad, tensor
from .. import functional as TF
from ..modules import Module, normal_init
from .parametrizations import norm_except_dim, weight_from_norm

__all__ = ["remove_spectral_norm", "remove_weight_norm", "spectral_norm", "weight_norm"]


class WeightNorm:
    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim
        self.handle: Any = None

    def compute_weight(self, module: Module) -> Any:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return weight_from_norm(v, g, self.dim)

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module))


def _hook_of(module: Module, kind: Any, name: str) -> Any:
    hooks: list[Any] = module.__dict__.get("_torchlean_weight_hooks", [])
    for hook in hooks:
        if isinstance(hook, kind) and hook.name == name:
            return hook
    return None


def _param(module: Module, name: str, op: str) -> Param:
    for kind in (WeightNorm, SpectralNorm):
        if _hook_of(module, kind, name) is not None:
            raise TorchLeanError(f"{op}: cannot register two {kind.__name__} hooks on the same "
                                 f"parameter {name}")
    weight = module._parameters.get(name)
    if not isinstance(weight, Param):
        raise TorchLeanError(f"{op}: {type(module).__name__} has no parameter {name!r}")
    return weight


def _attach(module: Module, fn: Any) -> None:
    fn.handle = module.register_forward_pre_hook(fn)
    hooks = module.__dict__.setdefault("_torchlean_weight_hooks", [])
    hooks.append(fn)


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """``weight = g * v / ||v||`` recomputed before each forward; parameters ``<name>_g``,
    ``<name>_v``."""
    weight = _param(module, name, "weight_norm")
    fn = WeightNorm(name, -1 if dim is None else dim)
    del module._parameters[name]
    with no_grad():
        g = norm_except_dim(weight.detach(), fn.dim)
    setattr(module, name + "_g", Param(g, name + "_g"))
    setattr(module, name + "_v", Param(weight.detach(), name + "_v"))
    setattr(module, name, fn.compute_weight(module))
    _attach(module, fn)
    return module


def _detach_hook(module: Module, fn: Any) -> None:
    fn.handle.remove()
    module.__dict__["_torchlean_weight_hooks"].remove(fn)


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    fn = _hook_of(module, WeightNorm, name)
    if fn is None:
        raise TorchLeanError(f"remove_weight_norm: weight_norm of {name!r} not found in "
                             f"{type(module).__name__}")
    with no_grad():
        weight = fn.compute_weight(module)
    _detach_hook(module, fn)
    module.__dict__.pop(name, None)  # the computed tensor (a plain attribute)
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    setattr(module, name, Param(weight.detach(), name))
    return module


class SpectralNorm:
    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        if n_power_iterations <= 0:
            raise TorchLeanError(f"spectral_norm: expected n_power_iterations to be positive, "
                                 f"found {n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, \
            eps
        self.handle: Any = None

    def matrix(self, weight: Any) -> Any:
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Any:
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(TF.normalize(mat.detach().t() @ u, dim=0, eps=self.eps))
                    u.copy_(TF.normalize(mat.detach() @ v, dim=0, eps=self.eps))
            u, v = u.clone(), v.clone()
        sigma = (u * (mat @ v)).sum()
        return weight / sigma

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """``weight = weight_orig / sigma`` with ``sigma`` by power iteration, recomputed before
    each forward; ``dim`` defaults to 1 for transposed convolutions, else 0."""
    weight = _param(module, name, "spectral_norm")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    fn = SpectralNorm(name, n_power_iterations, dim, eps)
    mat = fn.matrix(weight.detach())
    h, w = mat.shape
    u = TF.normalize(tensor(normal_init((h,), weight.dtype)), dim=0, eps=eps)
    v = TF.normalize(tensor(normal_init((w,), weight.dtype)), dim=0, eps=eps)
    del module._parameters[name]
    setattr(module, name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    _attach(module, fn)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    fn = _hook_of(module, SpectralNorm, name)
    if fn is None:
        raise TorchLeanError(f"remove_spectral_norm: spectral_norm of {name!r} not found in "
                             f"{type(module).__name__}")
    with no_grad():
        weight = fn.compute_weight(module, do_power_iteration=False)
    _detach_hook(module, fn)
    module.__dict__.pop(name, None)  # the computed tensor (a plain attribute)
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_u"], module._buffers[name + "_v"]
    setattr(module, name, Param(weight.detach(), name))
    return module
