"""Laws torch defines as transformed base laws: LogNormal, HalfNormal, HalfCauchy, Pareto,
Weibull, and the relaxed (Concrete / Gumbel-softmax) ones, RelaxedBernoulli and
RelaxedOneHotCategorical with their logit-space bases.

They are ``TransformedDistribution`` subclasses as in torch (so ``isinstance`` and the KL rule
for transformed pairs apply), with closed-form moments and entropies on top.
"""

from __future__ import annotations

import math
from typing import Any

from ..engine.tensor import Tensor
from . import constraints
from .base import (
    Distribution,
    DistributionValueError,
    broadcast_all,
    clamp_probs,
    logits_to_probs,
    probs_to_logits,
    softplus,
    uniform_open,
)
from .continuous import Cauchy, Exponential, Normal
from .transforms import (
    AbsTransform,
    AffineTransform,
    ExpTransform,
    PowerTransform,
    SigmoidTransform,
    TransformedDistribution,
)

__all__ = ["LogNormal", "HalfNormal", "HalfCauchy", "Pareto", "Weibull",
           "LogitRelaxedBernoulli", "RelaxedBernoulli", "ExpRelaxedCategorical",
           "RelaxedOneHotCategorical"]


class LogNormal(TransformedDistribution):
    """``exp(X)`` for ``X ~ Normal(loc, scale)``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        super().__init__(Normal(loc, scale, validate_args=validate_args), ExpTransform(),
                         validate_args=validate_args)

    @property
    def loc(self) -> Tensor:
        return self.base_dist.loc  # type: ignore[attr-defined,no-any-return]

    @property
    def scale(self) -> Tensor:
        return self.base_dist.scale  # type: ignore[attr-defined,no-any-return]

    @property
    def mean(self) -> Tensor:
        return (self.loc + self.scale ** 2 / 2).exp()  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return (self.loc - self.scale ** 2).exp()  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        s2 = self.scale ** 2
        return s2.expm1() * (2 * self.loc + s2).exp()  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() + self.loc


class HalfNormal(TransformedDistribution):
    """``|X|`` for ``X ~ Normal(0, scale)``."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale: Any, validate_args: Any = None) -> None:
        super().__init__(Normal(0 * broadcast_all(scale)[0].detach(), scale,
                                validate_args=validate_args), AbsTransform(),
                         validate_args=validate_args)

    @property
    def scale(self) -> Tensor:
        return self.base_dist.scale  # type: ignore[attr-defined,no-any-return]

    @property
    def mean(self) -> Tensor:
        return self.scale * math.sqrt(2 / math.pi)  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.scale * 0  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.scale ** 2 * (1 - 2 / math.pi)  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        lp = self.base_dist.log_prob(v) + math.log(2)
        return lp.where(v >= 0, lp * 0 - math.inf)  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        return 2 * self.base_dist.cdf(self._value(value)) - 1  # type: ignore[no-any-return]

    def icdf(self, prob: Any) -> Tensor:
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() - math.log(2)  # type: ignore[no-any-return]


class HalfCauchy(HalfNormal):
    """``|X|`` for ``X ~ Cauchy(0, scale)``."""

    def __init__(self, scale: Any, validate_args: Any = None) -> None:
        TransformedDistribution.__init__(
            self, Cauchy(0 * broadcast_all(scale)[0].detach(), scale,
                         validate_args=validate_args), AbsTransform(), validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.scale * 0 + math.inf  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.scale * 0 + math.inf  # type: ignore[no-any-return]


class Pareto(TransformedDistribution):
    """Pareto type I: ``scale * exp(E)`` for ``E ~ Exponential(alpha)``."""

    arg_constraints = {"scale": constraints.positive, "alpha": constraints.positive}
    has_rsample = True

    def __init__(self, scale: Any, alpha: Any, validate_args: Any = None) -> None:
        self.scale, self.alpha = broadcast_all(scale, alpha)
        super().__init__(Exponential(self.alpha, validate_args=validate_args),
                         [ExpTransform(), AffineTransform(0, self.scale)],
                         validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.greater_than_eq(self.scale)

    @property
    def mean(self) -> Tensor:
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        a = self.alpha.clamp(min=2)
        return self.scale ** 2 * a / ((a - 1) ** 2 * (a - 2))  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())  # type: ignore[no-any-return]


class Weibull(TransformedDistribution):
    """Weibull: ``scale * E ** (1 / concentration)`` for ``E ~ Exponential(1)``."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, scale: Any, concentration: Any, validate_args: Any = None) -> None:
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        super().__init__(Exponential(self.scale.detach() * 0 + 1, validate_args=validate_args),
                         [PowerTransform(self.concentration_reciprocal),
                          AffineTransform(0, self.scale)], validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.scale * (1 + self.concentration_reciprocal).lgamma().exp()  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        k = self.concentration
        return self.scale * ((k - 1) / k) ** k.reciprocal()  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        r = self.concentration_reciprocal
        return self.scale ** 2 * ((1 + 2 * r).lgamma().exp()  # type: ignore[no-any-return]
                                  - (1 + r).lgamma().exp() ** 2)

    def entropy(self) -> Tensor:
        return (0.57721566490153286061 * (1 - self.concentration_reciprocal)  # type: ignore[no-any-return]
                + (self.scale * self.concentration_reciprocal).log() + 1)


class _ProbsLogits(Distribution):
    """Shared ``probs``/``logits`` handling of the relaxed laws (exactly one given)."""

    _lazy = ("probs", "logits")

    def _set(self, name: str, temperature: Any, probs: Any, logits: Any, binary: bool) -> None:
        if (probs is None) == (logits is None):
            raise DistributionValueError(
                f"{name}: either `probs` or `logits` must be specified, but not "
                "both")
        given = probs if probs is not None else logits
        self.temperature, p = broadcast_all(temperature, given)
        if probs is not None:
            self.probs = p if binary else p / p.sum(-1, keepdim=True)
        else:
            self.logits = p if binary else p - p.logsumexp(-1, keepdim=True)
        self._binary = binary
        self._dtype = p.dtype

    def __getattr__(self, name: str) -> Any:
        if name == "logits" and "probs" in self.__dict__:
            return probs_to_logits(self.__dict__["probs"], self.__dict__["_binary"])
        if name == "probs" and "logits" in self.__dict__:
            return logits_to_probs(self.__dict__["logits"], self.__dict__["_binary"])
        raise AttributeError(name)


class LogitRelaxedBernoulli(_ProbsLogits):
    """The logit of a RelaxedBernoulli sample (its reparameterisable base)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        self._set("LogitRelaxedBernoulli", temperature, probs, logits, True)
        shape = tuple((self.probs if probs is not None else self.logits).shape)
        super().__init__(shape, validate_args=validate_args)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = uniform_open(self._extended_shape(sample_shape), self._dtype)
        probs = clamp_probs(self.probs)
        return (u.log() - (-u).log1p() + probs.log() - (-probs).log1p()) / self.temperature  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        diff = self.logits - v * self.temperature
        return self.temperature.log() + diff - 2 * softplus(diff)  # type: ignore[no-any-return]


class RelaxedBernoulli(TransformedDistribution):
    """Concrete relaxation of Bernoulli: ``sigmoid`` of a LogitRelaxedBernoulli sample."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        base = LogitRelaxedBernoulli(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)

    @property
    def temperature(self) -> Tensor:
        return self.base_dist.temperature  # type: ignore[attr-defined,no-any-return]

    @property
    def probs(self) -> Tensor:
        return self.base_dist.probs  # type: ignore[attr-defined,no-any-return]

    @property
    def logits(self) -> Tensor:
        return self.base_dist.logits  # type: ignore[attr-defined,no-any-return]


class ExpRelaxedCategorical(_ProbsLogits):
    """The log of a RelaxedOneHotCategorical sample (Gumbel-softmax in log space)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        self._set("ExpRelaxedCategorical", temperature, probs, logits, False)
        shape = tuple((self.probs if probs is not None else self.logits).shape)
        self.temperature = self.temperature.select(-1, 0) if self.temperature.ndim else (
            self.temperature)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = uniform_open(self._extended_shape(sample_shape), self._dtype)
        gumbels = -((-(u.log())).log())
        scores = (self.logits + gumbels) / self.temperature.unsqueeze(-1)
        return scores - scores.logsumexp(-1, keepdim=True)  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        k = int(self._event_shape[0])
        t = self.temperature
        log_scale = math.lgamma(k) + (k - 1) * t.log()
        score = self.logits - v * t.unsqueeze(-1)
        score = (score - score.logsumexp(-1, keepdim=True)).sum(-1)
        return score + log_scale  # type: ignore[no-any-return]


class RelaxedOneHotCategorical(TransformedDistribution):
    """Concrete / Gumbel-softmax relaxation of OneHotCategorical at ``temperature``."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    @property
    def temperature(self) -> Tensor:
        return self.base_dist.temperature  # type: ignore[attr-defined,no-any-return]

    @property
    def probs(self) -> Tensor:
        return self.base_dist.probs  # type: ignore[attr-defined,no-any-return]

    @property
    def logits(self) -> Tensor:
        return self.base_dist.logits  # type: ignore[attr-defined,no-any-return]
