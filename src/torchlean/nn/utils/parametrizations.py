"""``nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as parametrizations.

Each registers a small module with ``parametrize.register_parametrization``, so the weight is
recomputed from its originals on every read: ``weight_norm`` stores ``original0 = g`` (the
norms over every axis but ``dim``) and ``original1 = v``; ``spectral_norm`` stores the weight
as ``original`` and divides it by its largest singular value, estimated by power iteration on
buffers ``_u``/``_v`` that advance in training mode (torch's order: ``u`` from ``v``, then
``v`` from ``u``; 15 iterations when registered).
"""

from __future__ import annotations

from typing import Any

from ...core.errors import TorchLeanError
from ...engine.tensor import Tensor, no_grad, tensor
from .. import functional as TF
from ..modules import Module, normal_init
from . import parametrize

__all__ = ["spectral_norm", "weight_norm"]


def norm_except_dim(v: Any, dim: int | None) -> Any:
    """The 2-norm over every axis but ``dim`` (kept as size 1); over all of ``v`` for None or
    -1 (torch's ``norm_except_dim``)."""
    if dim is None or dim == -1:
        return (v * v).sum().sqrt()
    axes = tuple(a for a in range(v.ndim) if a != dim % v.ndim)
    return (v * v).sum(dim=axes, keepdim=True).sqrt()


def weight_from_norm(v: Any, g: Any, dim: int | None) -> Any:
    """``v * g / ||v||`` with the norm over every axis but ``dim`` (torch's ``_weight_norm``)."""
    return v * (g / norm_except_dim(v, dim))


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Any, weight_v: Any) -> Any:
        return weight_from_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Any) -> tuple[Any, Any]:
        return norm_except_dim(weight, self.dim).detach(), weight.detach()


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrise ``module.<name>`` as ``g * v / ||v||`` (``original0 = g``,
    ``original1 = v``)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Any, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if not -ndim <= dim < max(ndim, 1):
            raise TorchLeanError(f"spectral_norm: dim must be in [-{ndim}, {ndim - 1}], found "
                                 f"{dim}")
        if n_power_iterations <= 0:
            raise TorchLeanError(f"spectral_norm: expected n_power_iterations to be positive, "
                                 f"found {n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = self._matrix(weight.detach())
            h, w = mat.shape
            u = normal_init((h,), weight.dtype)
            v = normal_init((w,), weight.dtype)
            self.register_buffer("_u", TF.normalize(tensor(u), dim=0, eps=self.eps))
            self.register_buffer("_v", TF.normalize(tensor(v), dim=0, eps=self.eps))
            self._power_method(mat, 15)

    def _matrix(self, weight: Any) -> Any:
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, mat: Any, n: int) -> None:
        with no_grad():
            for _ in range(n):
                self._u.copy_(TF.normalize(mat.detach() @ self._v, dim=0, eps=self.eps))
                self._v.copy_(TF.normalize(mat.detach().t() @ self._u, dim=0, eps=self.eps))

    def forward(self, weight: Any) -> Any:
        if weight.ndim == 1:
            return TF.normalize(weight, dim=0, eps=self.eps)
        mat = self._matrix(weight)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = (u * (mat @ v)).sum()
        return weight / sigma

    def right_inverse(self, value: Any) -> Any:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Divide ``module.<name>`` by its spectral norm (power iteration; ``dim`` defaults to 1
    for transposed convolutions, else 0)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise TorchLeanError(f"spectral_norm: {type(module).__name__} has no parameter or "
                             f"buffer named {name!r}")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
