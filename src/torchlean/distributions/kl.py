"""``kl_divergence(p, q)`` and ``register_kl``: closed-form KL(p || q) rules looked up by the
most specific registered pair of types (torch's dispatch), as differentiable tensor ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..engine.tensor import Tensor
from .base import (
    Distribution,
    DistributionValueError,
    digamma,
    masked_fill,
    softplus,
    solve_tril,
    sum_rightmost,
)
from .continuous import Beta, Exponential, Gamma, Laplace, Normal, Uniform
from .discrete import Bernoulli, Categorical, Geometric, OneHotCategorical, Poisson
from .multivariate import Dirichlet, Independent, MultivariateNormal
from .transforms import TransformedDistribution

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict[tuple[type, type], Callable[..., Tensor]] = {}


def register_kl(type_p: type, type_q: type) -> Callable[[Callable[..., Tensor]],
                                                        Callable[..., Tensor]]:
    """Decorator registering ``fn(p, q)`` as KL(p || q) for instances of the two types."""
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise TypeError(f"Expected type_p to be a Distribution subclass but got {type_p}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"Expected type_q to be a Distribution subclass but got {type_q}")

    def decorator(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        _KL_REGISTRY[type_p, type_q] = fn
        return fn

    return decorator


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q) by the rule for the closest registered pair of base classes."""
    tp, tq = type(p), type(q)
    best = None
    for (rp, rq), fn in _KL_REGISTRY.items():
        if issubclass(tp, rp) and issubclass(tq, rq):
            rank = (tp.__mro__.index(rp), tq.__mro__.index(rq))
            if best is None or rank < best[0]:
                best = (rank, fn)
    if best is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type {tp.__name__} and "
                                  f"q type {tq.__name__}")
    return best[1](p, q)


def _inf_where(x: Tensor, mask: Any) -> Tensor:
    return masked_fill(x, mask, math.inf)


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())  # type: ignore[no-any-return]


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    t = p.probs * (p.logits - q.logits)
    t = _inf_where(t, (q.probs == 0).expand_as(t))
    t = masked_fill(t, (p.probs == 0).expand_as(t), 0.0)
    return t.sum(-1)  # type: ignore[no-any-return]


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p: OneHotCategorical, q: OneHotCategorical) -> Tensor:
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    t1 = masked_fill(_inf_where(t1, q.probs == 0), p.probs == 0, 0.0)
    t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    t2 = masked_fill(_inf_where(t2, q.probs == 1), p.probs == 1, 0.0)
    return t1 + t2  # type: ignore[no-any-return]


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p: MultivariateNormal, q: MultivariateNormal) -> Tensor:
    if p.event_shape != q.event_shape:
        raise DistributionValueError(
            "KL-divergence between two Multivariate Normals with different event "
            "shapes cannot be computed")
    n = p.event_shape[0]
    lp, lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = (lq.diagonal(dim1=-2, dim2=-1).log().sum(-1)
                  - lp.diagonal(dim1=-2, dim2=-1).log().sum(-1))
    # trace((Lq^-1 Lp)(Lq^-1 Lp)^T): each column of Lp solved against Lq as a batch of vectors;
    # row i of the result is Lq^-1 (column i of Lp)
    cols = solve_tril(lq.unsqueeze(-3), lp.mT)  # type: ignore[arg-type]
    term2 = (cols ** 2).sum((-2, -1))
    term3 = (solve_tril(lq, q.loc - p.loc) ** 2).sum(-1)
    return half_term1 + 0.5 * (term2 + term3 - n)  # type: ignore[no-any-return]


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p: Uniform, q: Uniform) -> Tensor:
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _inf_where(result, (q.low > p.low) | (q.high < p.high))


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p: Uniform, q: Normal) -> Tensor:
    width = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / width).log()
    t2 = width ** 2 / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2) ** 2
    return t1 + 0.5 * (t2 + t3) / q.scale ** 2  # type: ignore[no-any-return]


@register_kl(Independent, Independent)
def _kl_independent_independent(p: Independent, q: Independent) -> Tensor:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p: TransformedDistribution,
                                q: TransformedDistribution) -> Tensor:
    if p.transforms != q.transforms or p.event_shape != q.event_shape:
        raise NotImplementedError
    base_events = len(p.base_dist.event_shape)
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist),
                         len(p.event_shape) - base_events)


@register_kl(Beta, Beta)
def _kl_beta_beta(p: Beta, q: Beta) -> Tensor:
    sp = p.concentration1 + p.concentration0
    sq = q.concentration1 + q.concentration0
    t1 = q.concentration1.lgamma() + q.concentration0.lgamma() + sp.lgamma()
    t2 = p.concentration1.lgamma() + p.concentration0.lgamma() + sq.lgamma()
    t3 = (p.concentration1 - q.concentration1) * digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * digamma(p.concentration0)
    t5 = (sq - sp) * digamma(sp)
    return t1 - t2 + t3 + t4 + t5  # type: ignore[no-any-return]


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p: Dirichlet, q: Dirichlet) -> Tensor:
    sp = p.concentration.sum(-1)
    sq = q.concentration.sum(-1)
    t1 = sp.lgamma() - sq.lgamma()
    t2 = (p.concentration.lgamma() - q.concentration.lgamma()).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = digamma(p.concentration) - digamma(sp).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)  # type: ignore[no-any-return]


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p: Gamma, q: Gamma) -> Tensor:
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = q.concentration.lgamma() - p.concentration.lgamma()
    t3 = (p.concentration - q.concentration) * digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4  # type: ignore[no-any-return]


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p: Laplace, q: Laplace) -> Tensor:
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * (-loc_abs_diff / p.scale).exp()
    return t1 + t2 + t3 - 1  # type: ignore[no-any-return]


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p: Exponential, q: Exponential) -> Tensor:
    rate_ratio = q.rate / p.rate
    return -rate_ratio.log() + rate_ratio - 1  # type: ignore[no-any-return]


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p: Poisson, q: Poisson) -> Tensor:
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)  # type: ignore[no-any-return]


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p: Geometric, q: Geometric) -> Tensor:
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits  # type: ignore[no-any-return]
