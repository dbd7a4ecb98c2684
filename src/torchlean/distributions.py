"""``torchlean.distributions``: the few of torch.distributions that training scripts use.

``Categorical`` (policy-gradient scripts: ``m = Categorical(probs); a = m.sample();
m.log_prob(a)``), ``Bernoulli`` and ``Normal``, with torch's argument names and shapes. Densities
(``log_prob``, ``entropy``) are compositions of tensor ops, so gradients flow to ``probs``,
``logits``, ``loc`` and ``scale``; ``sample`` draws from the default generator that
``tl.manual_seed`` seeds (not torch's stream: the numbers differ from torch's, the distribution
does not) and carries no gradient; ``Normal.rsample`` is the reparameterised draw
``loc + eps * scale``, which does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .core.errors import ShapeError, TorchLeanError
from .core.rng import default_generator
from .engine.tensor import Tensor, no_grad, tensor

__all__ = ["Distribution", "Categorical", "Bernoulli", "Normal"]


def _as_tensor(op: str, name: str, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return tensor(np.asarray(value, dtype=np.float32))
    except (TypeError, ValueError) as exc:
        raise TorchLeanError(f"{op}: {name} must be a tensor or numbers, found "
                             f"{type(value).__name__}") from exc


def _shape(sample_shape: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in sample_shape)


class Distribution:
    """Base class: ``batch_shape``, ``sample``/``rsample``, ``log_prob``, ``entropy``."""

    batch_shape: tuple[int, ...] = ()

    def sample(self, sample_shape: Any = ()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.sample")

    def log_prob(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.log_prob")

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.entropy")


class Categorical(Distribution):
    """Categories ``0..K-1`` over the last dimension of ``probs`` (normalised to sum to 1) or
    ``logits`` (normalised by log-sum-exp), exactly one of the two."""

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        if (probs is None) == (logits is None):
            raise TorchLeanError("Categorical: either `probs` or `logits` must be specified, "
                                 "but not both")
        if probs is not None:
            p = _as_tensor("Categorical", "probs", probs)
            if p.ndim < 1:
                raise ShapeError("Categorical: probs must have at least one dimension")
            if validate_args is not False and bool((p.detach() < 0).any()):
                raise TorchLeanError("Categorical: probs must be non-negative")
            self.probs = p / p.sum(-1, keepdim=True)
            self.logits = self.probs.clamp(min=float(np.finfo(p.dtype).tiny)).log()
        else:
            lg = _as_tensor("Categorical", "logits", logits)
            if lg.ndim < 1:
                raise ShapeError("Categorical: logits must have at least one dimension")
            self.logits = lg - lg.logsumexp(-1, keepdim=True)
            self.probs = self.logits.exp()
        self.batch_shape = tuple(self.probs.shape[:-1])
        self._num_events = self.probs.shape[-1]

    @property
    def param_shape(self) -> tuple[int, ...]:
        return tuple(self.probs.shape)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = _shape(sample_shape) + self.batch_shape
        with no_grad():
            cdf = np.cumsum(self.probs.detach().numpy().astype(np.float64), axis=-1)
        u = np.asarray(default_generator.uniform(shape + (1,)), np.float64)
        cdf = np.broadcast_to(cdf, shape + (self._num_events,))
        idx = (u * cdf[..., -1:] >= cdf).sum(-1)
        return tensor(np.minimum(idx, self._num_events - 1).astype(np.int64))

    def log_prob(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, np.int64))
        if v.dtype.kind not in "iu":
            v = v.long()
        shape = np.broadcast_shapes(tuple(v.shape), self.batch_shape)
        logits = self.logits.expand(*shape, self._num_events)
        return logits.gather(-1, v.expand(*shape).unsqueeze(-1)).squeeze(-1)  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        return -(self.probs * self.logits).sum(-1)  # type: ignore[no-any-return]


class Bernoulli(Distribution):
    """0/1 with probability ``probs`` (or ``sigmoid(logits)``)."""

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        if (probs is None) == (logits is None):
            raise TorchLeanError("Bernoulli: either `probs` or `logits` must be specified, but "
                                 "not both")
        if probs is not None:
            self.probs = _as_tensor("Bernoulli", "probs", probs)
            eps = float(np.finfo(self.probs.dtype).eps)
            p = self.probs.clamp(eps, 1 - eps)
            self.logits = p.log() - (1 - p).log()
        else:
            self.logits = _as_tensor("Bernoulli", "logits", logits)
            self.probs = self.logits.sigmoid()
        self.batch_shape = tuple(self.probs.shape)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = _shape(sample_shape) + self.batch_shape
        u = np.asarray(default_generator.uniform(shape), np.float64)
        p = np.broadcast_to(self.probs.detach().numpy(), shape)
        return tensor((u < p).astype(self.probs.dtype))

    def log_prob(self, value: Any) -> Tensor:
        v = _as_tensor("Bernoulli", "value", value)
        # -BCE with logits: v * logits - softplus(logits)
        softplus = self.logits.clamp(min=0) + (-self.logits.abs()).exp().log1p()
        return v * self.logits - softplus  # type: ignore[no-any-return]

    def entropy(self) -> Tensor:
        p = self.probs
        softplus = self.logits.clamp(min=0) + (-self.logits.abs()).exp().log1p()
        return softplus - p * self.logits  # type: ignore[no-any-return]


class Normal(Distribution):
    """Gaussian with mean ``loc`` and standard deviation ``scale`` (broadcast together)."""

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc = _as_tensor("Normal", "loc", loc)
        self.scale = _as_tensor("Normal", "scale", scale)
        if validate_args is not False and bool((self.scale.detach() <= 0).any()):
            raise TorchLeanError("Normal: scale must be positive")
        self.batch_shape = tuple(np.broadcast_shapes(tuple(self.loc.shape),
                                                     tuple(self.scale.shape)))

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale  # type: ignore[no-any-return]

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = _shape(sample_shape) + self.batch_shape
        eps = tensor(np.asarray(default_generator.normal(shape), self.loc.dtype))
        return self.loc + eps * self.scale  # type: ignore[no-any-return]

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        v = _as_tensor("Normal", "value", value)
        var = self.scale * self.scale
        return (-((v - self.loc) ** 2) / (2 * var) - self.scale.log()  # type: ignore[no-any-return]
                - math.log(math.sqrt(2 * math.pi)))

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()  # type: ignore[no-any-return]
