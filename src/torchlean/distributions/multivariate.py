"""Laws over vectors and wrappers of other laws: MultivariateNormal, LowRankMultivariateNormal,
Dirichlet, Independent, MixtureSameFamily.

MultivariateNormal keeps torch's three parameterisations and works from the lower Cholesky
factor (``log_prob`` by a solve against it, ``rsample`` as ``loc + L eps``); the factor is taken
by differentiable ops when the covariance needs a gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import ShapeError
from ..engine import torch_math
from ..engine.tensor import Tensor, no_grad, tensor
from . import constraints
from .base import (
    Distribution,
    DistributionValueError,
    as_param,
    cholesky,
    digamma,
    normal,
    solve_tril,
    standard_gamma,
    sum_rightmost,
    xlogy,
)
from .discrete import Categorical

__all__ = ["MultivariateNormal", "LowRankMultivariateNormal", "Dirichlet", "Independent",
           "MixtureSameFamily"]


def _batch(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


class MultivariateNormal(Distribution):
    """Gaussian vectors: ``loc`` (..., n) and one of ``covariance_matrix``,
    ``precision_matrix`` or ``scale_tril`` (..., n, n)."""

    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True
    _lazy = ("covariance_matrix", "precision_matrix", "scale_tril")

    def __init__(self, loc: Any, covariance_matrix: Any = None, precision_matrix: Any = None,
                 scale_tril: Any = None, validate_args: Any = None) -> None:
        loc = as_param(loc)
        if loc.ndim < 1:
            raise DistributionValueError(
                "MultivariateNormal: loc must be at least one-dimensional.")
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise DistributionValueError("MultivariateNormal: exactly one of covariance_matrix or "
                             "precision_matrix or scale_tril may be specified.")
        m = as_param(given[0], loc.dtype)
        if m.ndim < 2:
            raise DistributionValueError("MultivariateNormal: the matrix argument must be at least "
                             "two-dimensional, with optional leading batch dimensions")
        n = loc.shape[-1]
        if tuple(m.shape[-2:]) != (n, n):
            raise ShapeError(f"MultivariateNormal: matrix of shape {tuple(m.shape)} does not "
                             f"match loc of shape {tuple(loc.shape)}")
        batch = _batch(tuple(m.shape[:-2]), tuple(loc.shape[:-1]))
        self.loc = loc.expand(*batch, n)
        self._dtype = loc.dtype
        name = ("covariance_matrix" if covariance_matrix is not None else
                "precision_matrix" if precision_matrix is not None else "scale_tril")
        setattr(self, name, m.expand(*batch, n, n))
        super().__init__(batch, (n,), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = m
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(m)
        else:
            self._unbroadcasted_scale_tril = cholesky(torch_math.inv(m))

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if "_unbroadcasted_scale_tril" not in d or "loc" not in d:
            raise AttributeError(name)
        n, batch = d["loc"].shape[-1], tuple(d["_batch_shape"])
        low = d["_unbroadcasted_scale_tril"]
        if name == "scale_tril":
            return low.expand(*batch, n, n)
        if name == "covariance_matrix":
            return (low @ low.mT).expand(*batch, n, n)
        if name == "precision_matrix":
            return torch_math.inv(low @ low.mT).expand(*batch, n, n)
        raise AttributeError(name)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        shape = tuple(int(s) for s in batch_shape)
        n = self._event_shape[0]
        new.loc = self.loc.expand(*shape, n)
        for name in ("covariance_matrix", "precision_matrix", "scale_tril"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand(*shape, n, n)
        new._batch_shape = type(self._batch_shape)(shape)
        return new

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        low = self._unbroadcasted_scale_tril
        return (low ** 2).sum(-1).expand(*self._batch_shape, *self._event_shape)  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        eps = normal(self._extended_shape(sample_shape), self._dtype)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)  # type: ignore[no-any-return]

    def _half_log_det(self) -> Tensor:
        low = self._unbroadcasted_scale_tril
        return low.diagonal(dim1=-2, dim2=-1).log().sum(-1)  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        diff = v - self.loc
        m = (solve_tril(self._unbroadcasted_scale_tril, diff) ** 2).sum(-1)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + m) - self._half_log_det()  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        n = self._event_shape[0]
        h = 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return h.expand(*self._batch_shape) if self._batch_shape else h  # type: ignore[no-any-return]


class LowRankMultivariateNormal(MultivariateNormal):
    """Gaussian vectors with covariance ``cov_factor @ cov_factor.T + diag(cov_diag)``.
    Computed through the full covariance's Cholesky factor (torch uses the Woodbury identity;
    the values agree, the cost is cubic in the event size)."""

    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}

    def __init__(self, loc: Any, cov_factor: Any, cov_diag: Any,
                 validate_args: Any = None) -> None:
        loc, w = as_param(loc), as_param(cov_factor)
        d = as_param(cov_diag, loc.dtype)
        if loc.ndim < 1 or w.ndim < 2 or d.ndim < 1:
            raise DistributionValueError(
                "LowRankMultivariateNormal: loc, cov_diag must be at least "
                "one-dimensional and cov_factor two-dimensional")
        n = loc.shape[-1]
        if w.shape[-2] != n or d.shape[-1] != n:
            raise ShapeError(f"LowRankMultivariateNormal: cov_factor {tuple(w.shape)} and "
                             f"cov_diag {tuple(d.shape)} do not match loc {tuple(loc.shape)}")
        batch = _batch(tuple(loc.shape[:-1]), tuple(w.shape[:-2]), tuple(d.shape[:-1]))
        self.cov_factor = w.expand(*batch, n, w.shape[-1])
        self.cov_diag = d.expand(*batch, n)
        self.loc = loc.expand(*batch, n)
        self._dtype = loc.dtype
        Distribution.__init__(self, batch, (n,), validate_args=validate_args)
        cov = w @ w.mT + d.diag_embed()
        self._unbroadcasted_scale_tril = cholesky(cov)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = super().expand(batch_shape)
        shape = tuple(int(s) for s in batch_shape)
        n = self._event_shape[0]
        new.cov_factor = self.cov_factor.expand(*shape, n, self.cov_factor.shape[-1])  # type: ignore[attr-defined]
        new.cov_diag = self.cov_diag.expand(*shape, n)  # type: ignore[attr-defined]
        return new

    @property
    def variance(self) -> Tensor:
        return (self.cov_factor ** 2).sum(-1) + self.cov_diag  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps_w = normal(shape[:-1] + (self.cov_factor.shape[-1],), self._dtype)
        eps_d = normal(shape, self._dtype)
        return (self.loc + (self.cov_factor @ eps_w.unsqueeze(-1)).squeeze(-1)  # type: ignore[no-any-return]
                + self.cov_diag.sqrt() * eps_d)


def dirichlet_mode(c: Tensor) -> Tensor:
    """torch's Dirichlet mode: normalised (c - 1)+, one-hot at the argmax where every c < 1."""
    cm1 = (c - 1).clamp(min=0.0)
    mode = cm1 / cm1.sum(-1, keepdim=True)
    small = (c.detach().numpy() < 1).all(-1, keepdims=True)
    if not small.any():
        return mode  # type: ignore[no-any-return]
    m = np.nan_to_num(mode.detach().numpy(), nan=np.inf)
    onehot = (np.arange(c.shape[-1]) == m.argmax(-1)[..., None]).astype(c.dtype)
    return mode.where(tensor(~small), tensor(onehot))  # type: ignore[no-any-return]


class Dirichlet(Distribution):
    """Dirichlet on the simplex with ``concentration`` (..., K); ``rsample`` normalises Gamma
    draws, which carry the implicit gradient to ``concentration``."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration: Any, validate_args: Any = None) -> None:
        c = as_param(concentration)
        if c.ndim < 1:
            raise DistributionValueError("Dirichlet: `concentration` parameter must be at least "
                             "one-dimensional.")
        self.concentration = c
        self._dtype = c.dtype
        super().__init__(tuple(c.shape[:-1]), tuple(c.shape[-1:]), validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.concentration.sum(-1, keepdim=True)  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return dirichlet_mode(self.concentration)

    @property
    def variance(self) -> Tensor:
        c = self.concentration
        c0 = c.sum(-1, keepdim=True)
        return c * (c0 - c) / (c0 ** 2 * (c0 + 1))  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        g = standard_gamma(self.concentration.expand(*shape))
        fi = np.finfo(self._dtype)
        return (g / g.sum(-1, keepdim=True)).clamp(float(fi.tiny), 1 - float(fi.eps))  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        c = self.concentration
        return (xlogy((c - 1), v).sum(-1) + c.sum(-1).lgamma()  # type: ignore[no-any-return]
                - c.lgamma().sum(-1))

    def entropy(self) -> Tensor:
        c = self.concentration
        k = c.shape[-1]
        c0 = c.sum(-1)
        return (c.lgamma().sum(-1) - c0.lgamma() - (k - c0) * digamma(c0)  # type: ignore[no-any-return]
                - ((c - 1.0) * digamma(c)).sum(-1))


class Independent(Distribution):
    """``base_distribution`` with its last ``reinterpreted_batch_ndims`` batch dimensions read
    as event dimensions (log-probabilities summed over them)."""

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int,
                 validate_args: Any = None) -> None:
        n = int(reinterpreted_batch_ndims)
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        event_dim = n + len(base_distribution.event_shape)
        if n > len(base_distribution.batch_shape):
            raise DistributionValueError(f"Independent: expected reinterpreted_batch_ndims <= "
                             f"len(base_distribution.batch_shape), actual {n} vs "
                             f"{len(base_distribution.batch_shape)}")
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n
        self._dtype = getattr(base_distribution, "_dtype", np.float32)
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self) -> bool:  # type: ignore[override]
        return self.reinterpreted_batch_ndims == 0 and self.base_dist.has_enumerate_support

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        s = self.base_dist.support
        return constraints.independent(s, self.reinterpreted_batch_ndims) if (
            self.reinterpreted_batch_ndims) else s

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        shape = tuple(int(s) for s in batch_shape)
        tail = tuple(self._event_shape)[:self.reinterpreted_batch_ndims]
        new.base_dist = self.base_dist.expand(shape + tail)
        new._batch_shape = type(self._batch_shape)(shape)
        return new

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def sample(self, sample_shape: Any = ()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


class MixtureSameFamily(Distribution):
    """A mixture: ``mixture_distribution`` (a Categorical over K) picks one of the K
    components in the rightmost batch dimension of ``component_distribution``."""

    arg_constraints: dict[str, constraints.Constraint] = {}
    has_rsample = False

    def __init__(self, mixture_distribution: Categorical, component_distribution: Distribution,
                 validate_args: Any = None) -> None:
        if not isinstance(mixture_distribution, Categorical):
            raise DistributionValueError(
                "MixtureSameFamily: the mixture distribution needs to be an "
                "instance of torch.distributions.Categorical")
        if not isinstance(component_distribution, Distribution):
            raise DistributionValueError(
                "MixtureSameFamily: the component distribution needs to be an "
                "instance of torch.distributions.Distribution")
        cb = tuple(component_distribution.batch_shape)
        mb = tuple(mixture_distribution.batch_shape)
        k = mixture_distribution._num_events
        if not cb or cb[-1] != k:
            raise DistributionValueError(
                f"MixtureSameFamily: the mixture's number of components ({k}) "
                f"does not equal the component batch shape's last dim {cb}")
        try:
            batch = _batch(mb, cb[:-1])
        except ValueError as exc:
            raise DistributionValueError(
                f"MixtureSameFamily: batch shapes {mb} and {cb[:-1]} do not "
                "broadcast") from exc
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        self._num_component = k
        self._event_ndims = len(component_distribution.event_shape)
        self._dtype = getattr(component_distribution, "_dtype", np.float32)
        super().__init__(batch, component_distribution.event_shape, validate_args=validate_args)

    @property
    def mixture_distribution(self) -> Categorical:
        return self._mixture_distribution

    @property
    def component_distribution(self) -> Distribution:
        return self._component_distribution

    @property
    def support(self) -> Any:  # type: ignore[override]
        return self._component_distribution.support

    def _pad_mixture(self, x: Tensor) -> Tensor:
        for _ in range(self._event_ndims):
            x = x.unsqueeze(-1)  # type: ignore[assignment]
        return x

    @property
    def mean(self) -> Tensor:
        probs = self._pad_mixture(self._mixture_distribution.probs)
        return (probs * self._component_distribution.mean).sum(-1 - self._event_ndims)  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        probs = self._pad_mixture(self._mixture_distribution.probs)
        d = -1 - self._event_ndims
        comp = self._component_distribution
        mean_cond_var = (probs * comp.variance).sum(d)
        var_cond_mean = (probs * (comp.mean - self._pad(self.mean)) ** 2).sum(d)
        return mean_cond_var + var_cond_mean  # type: ignore[no-any-return]

    def _pad(self, x: Tensor) -> Tensor:
        return x.unsqueeze(-1 - self._event_ndims)  # type: ignore[no-any-return,return-value]

    def log_prob(self, value: Any) -> Tensor:
        v = as_param(value, self._dtype)
        if self._validate_args:
            self._validate_sample(v)
        lp = self._component_distribution.log_prob(self._pad(v))
        mix = self._mixture_distribution.logits.log_softmax(-1)
        return (lp + mix).logsumexp(-1)  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        v = as_param(value, self._dtype)
        c = self._component_distribution.cdf(self._pad(v))
        return (c * self._mixture_distribution.probs).sum(-1)  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            ss = tuple(int(s) for s in (sample_shape if not isinstance(sample_shape, int)
                                        else (sample_shape,)))
            idx = self._mixture_distribution.sample(ss).numpy()  # ss + mix batch
            comp = self._component_distribution.sample(ss).numpy()  # ss + cb + event
            idx = np.broadcast_to(idx, ss + tuple(self._batch_shape))
            idx = idx.reshape(idx.shape + (1,) + (1,) * self._event_ndims)
            full = comp.shape[:len(ss)] + tuple(self._batch_shape) + comp.shape[-1 - (
                self._event_ndims):]
            comp = np.broadcast_to(comp, full)
            idx = np.broadcast_to(idx, full[:-1 - self._event_ndims] + (1,) + full[
                len(full) - self._event_ndims:])
            out = np.take_along_axis(comp, idx, axis=-1 - self._event_ndims)
            return tensor(np.squeeze(out, axis=-1 - self._event_ndims))


