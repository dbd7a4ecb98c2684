"""Discrete laws with torch's arguments: Categorical, OneHotCategorical (and its
straight-through form), Bernoulli, Binomial, Multinomial, Geometric, Poisson, NegativeBinomial.

``probs``/``logits``: exactly one is given, the other derived on access (torch's lazy form);
log-probabilities are tensor ops of them, so gradients reach whichever was given. Samples are
drawn by inversion from the default generator's uniforms and carry no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import ShapeError
from ..core.rng import default_generator
from ..engine.tensor import Tensor, arange, no_grad, tensor
from . import constraints
from .base import (
    Distribution,
    DistributionValueError,
    broadcast_all,
    logits_to_probs,
    masked_fill,
    probs_to_logits,
    softplus,
    standard_gamma_np,
    xlogy,
)

__all__ = ["Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough", "Bernoulli",
           "Binomial", "Multinomial", "Geometric", "Poisson", "NegativeBinomial"]


class _ProbsOrLogits(Distribution):
    """``probs`` xor ``logits``; the other is computed on access, as torch's lazy_property."""

    _lazy = ("probs", "logits")
    _binary = True

    def _given(self, name: str, probs: Any, logits: Any, *others: Any) -> tuple[Tensor, ...]:
        if (probs is None) == (logits is None):
            raise DistributionValueError(
                f"{name}: either `probs` or `logits` must be specified, but not "
                "both")
        ts = broadcast_all(*others, probs if probs is not None else logits)
        p = ts[-1]
        if probs is not None:
            self.probs = p if self._binary else p / p.sum(-1, keepdim=True)
        else:
            self.logits = p if self._binary else p - p.logsumexp(-1, keepdim=True)
        self._dtype = p.dtype
        return ts

    @property
    def _param(self) -> Tensor:
        return self.__dict__.get("probs", self.__dict__.get("logits"))  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if name == "logits" and "probs" in d:
            return probs_to_logits(d["probs"], type(self)._binary)
        if name == "probs" and "logits" in d:
            return logits_to_probs(d["logits"], type(self)._binary)
        raise AttributeError(name)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return tuple(self._param.shape)


def _u(shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(default_generator.uniform(shape), np.float64)


def _categorical_np(probs: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Indices drawn by inverting the cumulative sums of ``probs`` (last axis)."""
    k = probs.shape[-1]
    cdf = np.cumsum(probs.astype(np.float64), axis=-1)
    cdf = np.broadcast_to(cdf, shape + (k,))
    u = _u(shape + (1,))
    idx = (u * cdf[..., -1:] >= cdf).sum(-1)
    return np.minimum(idx, k - 1).astype(np.int64)


def _count_np(lpmf0: np.ndarray, step: Any, cap: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inversion of a count law: the least k with CDF(k) >= u, the log pmf advanced by
    ``step(lpmf, k)``; capped at ``cap`` (the support's end or a far tail)."""
    out = np.zeros(u.shape)
    lp, cdf = lpmf0.copy(), np.exp(lpmf0)
    todo = u > cdf
    k = 0
    kmax = int(np.max(cap)) if cap.size else 0
    while todo.any() and k < kmax:
        lp = step(lp, k)
        k += 1
        cdf = cdf + np.exp(lp)
        out = np.where(todo, k, out)
        todo = todo & (u > cdf)
    return np.minimum(out, cap)


class Categorical(_ProbsOrLogits):
    """Categories ``0..K-1`` over the last dimension of ``probs`` (normalised) or ``logits``."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True
    _binary = False

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        (p,) = self._given("Categorical", probs, logits)
        if p.ndim < 1:
            raise ShapeError(f"Categorical: {'probs' if probs is not None else 'logits'} must "
                             "have at least one dimension")
        self._num_events = p.shape[-1]
        super().__init__(tuple(p.shape[:-1]), validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def mean(self) -> Tensor:
        return self.probs.sum(-1) * float("nan")  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(-1)  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.probs.sum(-1) * float("nan")  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return tensor(_categorical_np(self.probs.detach().numpy(), shape))

    def log_prob(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, np.int64))
        if self._validate_args:
            self._validate_sample(v)
        v = v if v.dtype.kind in "iu" else v.long()
        shape = tuple(np.broadcast_shapes(tuple(v.shape), tuple(self._batch_shape)))
        logits = self.logits.expand(*shape, self._num_events)
        return logits.gather(-1, v.expand(*shape).unsqueeze(-1)).squeeze(-1)  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        logits = self.logits.clamp(min=float(np.finfo(self._dtype).min))
        return -(self.probs * logits).sum(-1)  # type: ignore[no-any-return]

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = arange(self._num_events).reshape(-1, *([1] * len(self._batch_shape)))
        return values.expand(-1, *self._batch_shape) if expand else values  # type: ignore[no-any-return]


class OneHotCategorical(Distribution):
    """Categorical draws as one-hot vectors (event shape ``(K,)``)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        self._dtype = self._categorical._dtype
        super().__init__(self._categorical.batch_shape, (self._categorical._num_events,),
                         validate_args=False)
        self._validate_args = self._categorical._validate_args

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        k = self._event_shape[0]
        idx = self.probs.argmax(-1).detach().numpy()
        return tensor((idx[..., None] == np.arange(k)).astype(self._dtype))

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)  # type: ignore[no-any-return]

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._categorical = self._categorical.expand(batch_shape)  # type: ignore[assignment]
        new._batch_shape = type(self._batch_shape)(tuple(int(s) for s in batch_shape))
        return new

    def sample(self, sample_shape: Any = ()) -> Tensor:
        idx = self._categorical.sample(sample_shape).numpy()
        k = self._event_shape[0]
        return tensor((idx[..., None] == np.arange(k)).astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        return self._categorical.log_prob(v.argmax(-1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Tensor:
        k = self._event_shape[0]
        values = tensor(np.eye(k, dtype=self._dtype)).reshape(k, *([1] * len(self._batch_shape)),
                                                              k)
        return values.expand(k, *self._batch_shape, k) if expand else values  # type: ignore[no-any-return]


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """OneHotCategorical whose ``rsample`` passes gradients straight through to ``probs``."""

    has_rsample = True

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        samples = self.sample(sample_shape)
        probs = self.probs
        return samples + (probs - probs.detach())  # type: ignore[no-any-return]


class Bernoulli(_ProbsOrLogits):
    """0/1 with probability ``probs`` (or ``sigmoid(logits)``)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        (p,) = self._given("Bernoulli", probs, logits)
        super().__init__(tuple(p.shape), validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        mode = (self.probs >= 0.5).to(self._dtype)
        return mode.masked_fill(self.probs == 0.5, float("nan"))  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        p = np.broadcast_to(self.probs.detach().numpy(), shape)
        return tensor((_u(shape) < p).astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        return v * self.logits - softplus(self.logits)  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return softplus(self.logits) - self.probs * self.logits  # type: ignore[no-any-return]

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = tensor(np.array([0.0, 1.0], self._dtype)).reshape(2, *([1] * len(
            self._batch_shape)))
        return values.expand(2, *self._batch_shape) if expand else values  # type: ignore[no-any-return]


class Binomial(_ProbsOrLogits):
    """Successes in ``total_count`` Bernoulli(``probs``) trials."""

    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval, "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count: Any = 1, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        self.total_count, p = self._given("Binomial", probs, logits, total_count)
        super().__init__(tuple(p.shape), validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.probs  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return ((self.total_count + 1) * self.probs).floor().clamp(  # type: ignore[no-any-return]
            max=self.total_count)

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        n = np.broadcast_to(self.total_count.detach().numpy().astype(np.float64), shape)
        p = np.broadcast_to(self.probs.detach().numpy().astype(np.float64), shape)
        u = _u(shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.log(p) - np.log1p(-p)

            def step(lp: np.ndarray, k: int) -> np.ndarray:
                return lp + np.log(np.maximum(n - k, 0)) - np.log(k + 1) + ratio

            out = _count_np(n * np.log1p(-p), step, n, u)
        return tensor(np.where(p >= 1, n, out).astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        n, logits = self.total_count, self.logits
        clamp0 = (logits.clamp(min=0) + logits - logits.clamp(max=0)) / 2
        normalize = (n * clamp0 + n * (-logits.abs()).exp().log1p() - (n + 1).lgamma())
        return (v * logits - (v + 1).lgamma() - (n - v + 1).lgamma()  # type: ignore[no-any-return]
                - normalize)

    def entropy(self) -> Tensor:
        support = self.enumerate_support(expand=False)
        lp = self.log_prob_unchecked(support)
        return -(lp.exp() * lp).sum(0)  # type: ignore[no-any-return]

    def log_prob_unchecked(self, value: Tensor) -> Tensor:
        keep, self._validate_args = self._validate_args, False
        try:
            lp = self.log_prob(value)
        finally:
            self._validate_args = keep
        return masked_fill(lp, value > self.total_count, float("-inf"))  # type: ignore[no-any-return]

    def enumerate_support(self, expand: bool = True) -> Tensor:
        top = int(np.max(self.total_count.detach().numpy())) if self.total_count.numel() else 0
        values = tensor(np.arange(top + 1, dtype=self._dtype)).reshape(
            -1, *([1] * len(self._batch_shape)))
        return values.expand(-1, *self._batch_shape) if expand else values  # type: ignore[no-any-return]


class Multinomial(Distribution):
    """Counts of ``total_count`` Categorical(``probs``) draws (event shape ``(K,)``)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count: int = 1, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        if not isinstance(total_count, int | np.integer):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = int(total_count)
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        self._dtype = self._categorical._dtype
        super().__init__(self._categorical.batch_shape, (self._categorical._num_events,),
                         validate_args=False)
        self._validate_args = self._categorical._validate_args

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.multinomial(self.total_count)

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def mean(self) -> Tensor:
        return self.probs * self.total_count  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)[:-1]
        k = self._event_shape[0]
        idx = _categorical_np(self.probs.detach().numpy()[..., None, :],
                              shape + (self.total_count,))
        counts = (idx[..., None] == np.arange(k)).sum(-2)
        return tensor(counts.astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        logits = self.logits
        logits = masked_fill(logits, (v == 0) & logits.detach().isneginf(), 0.0)
        return ((v.sum(-1) + 1).lgamma() - (v + 1).lgamma().sum(-1)  # type: ignore[no-any-return]
                + (logits * v).sum(-1))

    def entropy(self) -> Tensor:
        n = self.total_count
        p = self.probs
        binom = Binomial(n, probs=p, validate_args=False)
        support: Tensor = binom.enumerate_support(expand=False)  # (n + 1, 1, ..)
        weights = (binom.log_prob_unchecked(support).exp() * (support + 1).lgamma()).sum(0)
        logits = self.logits.clamp(min=float(np.finfo(self._dtype).min))
        return (-float(np.log(np.arange(1, n + 1)).sum()) - n * (p * logits).sum(-1)  # type: ignore[no-any-return]
                + weights.sum(-1))


class Geometric(_ProbsOrLogits):
    """Failures before the first success in Bernoulli(``probs``) trials."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        (p,) = self._given("Geometric", probs, logits)
        super().__init__(tuple(p.shape), validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.probs - 1.0  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return self.probs * 0  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return (1.0 / self.probs - 1.0) / self.probs  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        tiny = float(np.finfo(self._dtype).tiny)
        u = np.maximum(_u(shape), tiny)
        p = np.broadcast_to(self.probs.detach().numpy().astype(np.float64), shape)
        with np.errstate(divide="ignore"):
            return tensor(np.floor(np.log(u) / np.log1p(-p)).astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        p = self.probs
        q = masked_fill(p, (p == 1) & (v == 0), 0.0)
        return v * (-q).log1p() + p.log()  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        p, logits = self.probs, self.logits
        bce = softplus(logits) - p * logits  # binary cross entropy of logits against probs
        return bce / p  # type: ignore[no-any-return]


class Poisson(Distribution):
    """Poisson with ``rate``."""

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate: Any, validate_args: Any = None) -> None:
        (self.rate,) = broadcast_all(rate)
        self._dtype = self.rate.dtype
        super().__init__(self.rate.shape, validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.rate

    @property
    def mode(self) -> Tensor:
        return self.rate.floor()  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.rate

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        lam = np.broadcast_to(self.rate.detach().numpy().astype(np.float64), shape)
        return tensor(_poisson_np(lam).astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        return xlogy(v, self.rate) - self.rate - (v + 1).lgamma()  # type: ignore[no-any-return]


def _poisson_np(lam: np.ndarray) -> np.ndarray:
    """Poisson draws by inversion (work grows with the rate)."""
    u = _u(lam.shape)
    with np.errstate(divide="ignore"):
        loglam = np.log(lam)
    cap = np.ceil(lam + 40 * np.sqrt(lam) + 40)
    return _count_np(-lam, lambda lp, k: lp + loglam - np.log(k + 1), cap, u)


class NegativeBinomial(_ProbsOrLogits):
    """Successes before ``total_count`` failures of Bernoulli(``probs``) trials."""

    arg_constraints = {"total_count": constraints.nonnegative,
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:
        self.total_count, p = self._given("NegativeBinomial", probs, logits, total_count)
        super().__init__(tuple(p.shape), validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.logits.exp()  # type: ignore[no-any-return]

    @property
    def mode(self) -> Tensor:
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)  # type: ignore[no-any-return]

    @property
    def variance(self) -> Tensor:
        return self.mean / (-self.logits).sigmoid()  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            r = np.broadcast_to(self.total_count.detach().numpy().astype(np.float64), shape)
            odds = np.broadcast_to(self.logits.exp().detach().numpy().astype(np.float64), shape)
        lam = standard_gamma_np(np.maximum(r, 1e-300)) * odds
        return tensor(_poisson_np(np.where(r > 0, lam, 0.0)).astype(self._dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = self._value(value)
        r, logits = self.total_count, self.logits
        log_unnormalized = r * (-softplus(logits)) + v * (-softplus(-logits))
        log_norm = -(r + v).lgamma() + (1.0 + v).lgamma() + r.lgamma()
        log_norm = log_norm.masked_fill(r + v == 0.0, 0.0)
        return log_unnormalized - log_norm  # type: ignore[no-any-return]

