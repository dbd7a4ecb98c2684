"""Univariate continuous laws with torch's arguments: Normal, Uniform, Exponential, Laplace,
Cauchy, Gumbel, Gamma, Chi2, Beta, StudentT.

Each is parameters broadcast together (``broadcast_all``) plus closed forms written as tensor
ops, so ``log_prob``/``entropy``/``cdf`` and ``rsample`` differentiate to the parameters.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..engine.tensor import Tensor, tensor
from . import constraints
from .base import (
    Distribution,
    DistributionValueError,
    broadcast_all,
    digamma,
    gammainc_np,
    lbeta,
    normal,
    standard_gamma,
    uniform,
    uniform_open,
    xlogy,
)

__all__ = ["Normal", "Uniform", "Exponential", "Laplace", "Cauchy", "Gumbel", "Gamma", "Chi2",
           "Beta", "StudentT"]

_EULER = 0.57721566490153286061


def _full(like: Tensor, value: float) -> Tensor:
    return like.detach() * 0 + value  # type: ignore[no-any-return]


class Normal(Distribution):
    """Gaussian with mean ``loc`` and standard deviation ``scale``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        self._dtype = self.loc.dtype
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.scale ** 2  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        eps = normal(self._extended_shape(sample_shape), self._dtype)
        return self.loc + eps * self.scale  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        var = self.scale ** 2
        return (-((v - self.loc) ** 2) / (2 * var) - self.scale.log()  # type: ignore[no-any-return]
                - math.log(math.sqrt(2 * math.pi)))

    def cdf(self, value: Any) -> Tensor:
        v = self._value(value)
        return 0.5 * (1 + ((v - self.loc) / (self.scale * math.sqrt(2))).erf())  # type: ignore[no-any-return]

    def icdf(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, self._dtype))
        return self.loc + self.scale * (2 * v - 1).erfinv() * math.sqrt(2)  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()  # type: ignore[no-any-return]


class Uniform(Distribution):
    """Uniform on ``[low, high)``."""

    arg_constraints = {"low": constraints.dependent(is_discrete=False, event_dim=0),
                       "high": constraints.dependent(is_discrete=False, event_dim=0)}
    has_rsample = True

    def __init__(self, low: Any, high: Any, validate_args: Any = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        self._dtype = self.low.dtype
        super().__init__(self.low.shape, validate_args=validate_args)
        if self._validate_args and not bool(np.all(self.low.detach().numpy()
                                                   < self.high.detach().numpy())):
            raise DistributionValueError("Uniform: argument low must be less than high, "
                                         f"found low={self.low}, high={self.high}")

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.interval(self.low, self.high)

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) / 2  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return _full(self.high, float("nan"))

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) / 12 ** 0.5  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = uniform(self._extended_shape(sample_shape), self._dtype)
        return self.low + u * (self.high - self.low)  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        inside = ((self.low <= v) & (self.high > v)).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        v = self._value(value)
        return ((v - self.low) / (self.high - self.low)).clamp(0, 1)  # type: ignore[no-any-return]

    def icdf(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, self._dtype))
        return v * (self.high - self.low) + self.low  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()  # type: ignore[no-any-return]


class Exponential(Distribution):
    """Exponential with ``rate``."""

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate: Any, validate_args: Any = None) -> None:
        (self.rate,) = broadcast_all(rate)
        self._dtype = self.rate.dtype
        super().__init__(self.rate.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.rate.reciprocal()  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.rate * 0  # type: ignore[no-any-return]

    @property
    def stddev(self) -> Tensor:
        return self.rate.reciprocal()  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.rate ** -2  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = uniform_open(self._extended_shape(sample_shape), self._dtype)
        return -(u.log()) / self.rate  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        return self.rate.log() - self.rate * v  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        v = self._value(value)
        return 1 - (-self.rate * v).exp()  # type: ignore[no-any-return]

    def icdf(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, self._dtype))
        return -(-v).log1p() / self.rate  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return 1.0 - self.rate.log()  # type: ignore[no-any-return]


class Laplace(Distribution):
    """Laplace with ``loc`` and ``scale``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        self._dtype = self.loc.dtype
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return 2 * self.scale ** 2  # type: ignore[no-any-return]

    @property
    def stddev(self) -> Tensor:
        return 2 ** 0.5 * self.scale  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = float(np.finfo(self._dtype).eps)
        u = uniform(shape, self._dtype) * (2 - 2 * eps) + (eps - 1)  # in (-1, 1), torch's
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        return -(2 * self.scale).log() - (v - self.loc).abs() / self.scale  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        v = self._value(value)
        d = v - self.loc
        return 0.5 - 0.5 * d.sign() * (-d.abs() / self.scale).expm1()  # type: ignore[no-any-return]

    def icdf(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, self._dtype))
        term = v - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return 1 + (2 * self.scale).log()  # type: ignore[no-any-return]


class Cauchy(Distribution):
    """Cauchy with ``loc`` (median) and ``scale`` (half width at half maximum)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        self._dtype = self.loc.dtype
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return _full(self.loc, float("nan"))

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return _full(self.loc, float("inf"))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = uniform_open(self._extended_shape(sample_shape), self._dtype)
        return self.loc + self.scale * (math.pi * (u - 0.5)).tan()  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        return (-math.log(math.pi) - self.scale.log()  # type: ignore[no-any-return]
                - (((v - self.loc) / self.scale) ** 2).log1p())

    def cdf(self, value: Any) -> Tensor:
        v = self._value(value)
        return ((v - self.loc) / self.scale).atan() / math.pi + 0.5  # type: ignore[no-any-return]

    def icdf(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, self._dtype))
        return (math.pi * (v - 0.5)).tan() * self.scale + self.loc  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return math.log(4 * math.pi) + self.scale.log()  # type: ignore[no-any-return]


class Gumbel(Distribution):
    """Gumbel (type I extreme value) with ``loc`` and ``scale``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        self._dtype = self.loc.dtype
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc + self.scale * _EULER  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return (math.pi / math.sqrt(6)) * self.scale  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.stddev ** 2  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = uniform_open(self._extended_shape(sample_shape), self._dtype)
        return self.loc - self.scale * (-(u.log())).log()  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        z = (v - self.loc) / self.scale
        return -(z + (-z).exp()) - self.scale.log()  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        v = self._value(value)
        return (-(-(v - self.loc) / self.scale).exp()).exp()  # type: ignore[no-any-return]

    def icdf(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, self._dtype))
        return self.loc - self.scale * (-(v.log())).log()  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return self.scale.log() + (1 + _EULER)  # type: ignore[no-any-return]


class Gamma(Distribution):
    """Gamma with shape ``concentration`` and ``rate`` (inverse scale). ``rsample`` carries
    the implicit reparameterisation gradient to ``concentration``, as torch's."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration: Any, rate: Any, validate_args: Any = None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        self._dtype = self.rate.dtype
        super().__init__(self.rate.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return ((self.concentration - 1) / self.rate).clamp(min=0)  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.concentration / self.rate ** 2  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = standard_gamma(self.concentration.expand(*shape)) / self.rate
        return x.clamp(min=float(np.finfo(self._dtype).tiny))  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        a = self.concentration
        return (xlogy(a, self.rate) + xlogy((a - 1), v)  # type: ignore[no-any-return]
                - self.rate * v - a.lgamma())

    def cdf(self, value: Any) -> Tensor:
        """P(concentration, rate * value): values only (torch differentiates in value)."""
        v = self._value(value)
        a, x = np.broadcast_arrays(self.concentration.detach().numpy(),
                                   (self.rate * v).detach().numpy())
        return tensor(gammainc_np(a, x).astype(self._dtype))

    def entropy(self) -> Tensor:
        a = self.concentration
        return (a - self.rate.log() + a.lgamma()  # type: ignore[no-any-return]
                + (1.0 - a) * digamma(a))


class Chi2(Gamma):
    """Chi-squared with ``df`` degrees of freedom: Gamma(df / 2, 1 / 2)."""

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df: Any, validate_args: Any = None) -> None:
        (df_t,) = broadcast_all(df)
        super().__init__(0.5 * df_t, _full(df_t, 0.5), validate_args=validate_args)

    @property
    def df(self) -> Tensor:
        return self.concentration * 2  # type: ignore[no-any-return]


class Beta(Distribution):
    """Beta with ``concentration1`` (alpha) and ``concentration0`` (beta); ``rsample`` is
    G1 / (G1 + G2) of Gamma draws, carrying their implicit gradients."""

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1: Any, concentration0: Any,
                 validate_args: Any = None) -> None:
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        self._dtype = self.concentration1.dtype
        super().__init__(self.concentration1.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration1 / (self.concentration1 + self.concentration0)  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        # torch's: the Dirichlet mode of (alpha, beta), first coordinate
        a, b = self.concentration1, self.concentration0
        am1, bm1 = (a - 1).clamp(min=0.0), (b - 1).clamp(min=0.0)
        mode = am1 / (am1 + bm1)
        both_small = ((a < 1) & (b < 1)).detach().numpy()
        if not both_small.any():
            return mode  # type: ignore[no-any-return]
        return mode.where(tensor(~both_small), tensor(np.ones(  # type: ignore[no-any-return]
            both_small.shape, self._dtype)))

    @property
    def variance(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total ** 2 * (total + 1))  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        g1 = standard_gamma(self.concentration1.expand(*shape))
        g0 = standard_gamma(self.concentration0.expand(*shape))
        fi = np.finfo(self._dtype)
        return (g1 / (g1 + g0)).clamp(float(fi.tiny), 1 - float(fi.eps))  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        a, b = self.concentration1, self.concentration0
        return (xlogy((a - 1), v) + xlogy((b - 1), 1 - v)  # type: ignore[no-any-return]
                - lbeta(a, b))

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return (lbeta(a, b) - (a - 1) * digamma(a) - (b - 1) * digamma(b)  # type: ignore[no-any-return]
                + (total - 2) * digamma(total))


class StudentT(Distribution):
    """Student's t with ``df``, ``loc`` and ``scale``; ``rsample`` is
    loc + scale * Z / sqrt(Chi2(df) / df), differentiable in all three."""

    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df: Any, loc: Any = 0.0, scale: Any = 1.0,
                 validate_args: Any = None) -> None:
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._dtype = self.df.dtype
        super().__init__(self.df.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc.where(self.df > 1, _full(self.loc, float("nan")))  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        df = self.df
        finite = self.scale ** 2 * df / (df - 2)
        out = finite.where(df > 2, _full(df, float("inf")))
        return out.where(df > 1, _full(df, float("nan")))  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        z = normal(shape, self._dtype)
        chi2 = standard_gamma((0.5 * self.df).expand(*shape)) * 2
        return self.loc + self.scale * z * (chi2 / self.df).rsqrt()  # type: ignore[no-any-return]

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        y = (v - self.loc) / self.scale
        df = self.df
        z = (self.scale.log() + 0.5 * df.log() + 0.5 * math.log(math.pi)
             + (0.5 * df).lgamma() - (0.5 * (df + 1)).lgamma())
        return -0.5 * (df + 1) * (y ** 2 / df).log1p() - z  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        df = self.df
        lb = (0.5 * df).lgamma() + math.lgamma(0.5) - (0.5 * (df + 1)).lgamma()
        return (self.scale.log() + 0.5 * (df + 1) * (digamma(0.5 * (df + 1))  # type: ignore[no-any-return]
                                                    - digamma(0.5 * df))
                + 0.5 * df.log() + lb)


