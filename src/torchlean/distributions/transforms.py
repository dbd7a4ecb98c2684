"""``torch.distributions.transforms``: invertible maps with log-Jacobians, and
``TransformedDistribution``, the law of ``f(X)`` for a base law of ``X``.

Each transform is ``__call__``/``inv``/``log_abs_det_jacobian`` as tensor ops, so a transformed
law's ``rsample`` and ``log_prob`` differentiate through the transforms' parameters.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..engine.tensor import Tensor, no_grad
from . import constraints
from .base import Distribution, as_param, clamp_probs, softplus, sum_rightmost

__all__ = ["Transform", "ExpTransform", "AffineTransform", "SigmoidTransform", "TanhTransform",
           "SoftmaxTransform", "PowerTransform", "AbsTransform", "ComposeTransform",
           "identity_transform", "TransformedDistribution"]


class Transform:
    """A map ``y = f(x)``: ``t(x)``, ``t.inv(y)``, ``t.log_abs_det_jacobian(x, y)``."""

    bijective = False
    sign: Any = 1
    domain: constraints.Constraint = constraints.real
    codomain: constraints.Constraint = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        self._cache_size = cache_size  # torch's x/y cache; values are recomputed here

    @property
    def event_dim(self) -> int:
        return self.domain.event_dim

    @property
    def inv(self) -> Transform:
        return _InverseTransform(self)

    def __call__(self, x: Tensor) -> Tensor:
        return self._call(x)

    def _call(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}")

    def _inverse(self, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.inv")

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.log_abs_det_jacobian")

    def forward_shape(self, shape: Any) -> Any:
        return shape

    def inverse_shape(self, shape: Any) -> Any:
        return shape

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    def __init__(self, transform: Transform) -> None:
        super().__init__()
        self._inv = transform
        self.bijective, self.sign = transform.bijective, transform.sign
        self.domain, self.codomain = transform.codomain, transform.domain

    @property
    def inv(self) -> Transform:
        return self._inv

    def _call(self, x: Tensor) -> Tensor:
        return self._inv._inverse(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return self._inv._call(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -self._inv.log_abs_det_jacobian(y, x)  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    def __hash__(self) -> int:
        return hash(("inv", self._inv))


class ComposeTransform(Transform):
    """``parts`` applied left to right."""

    def __init__(self, parts: list[Transform], cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.parts = list(parts)
        self.bijective = all(p.bijective for p in self.parts)
        self.sign = 1
        for p in self.parts:
            self.sign = self.sign * p.sign
        if self.parts:
            self.domain, self.codomain = self.parts[0].domain, self.parts[-1].codomain

    @property
    def event_dim(self) -> int:
        return max([p.event_dim for p in self.parts] or [0])

    @property
    def inv(self) -> Transform:
        return ComposeTransform([p.inv for p in reversed(self.parts)])

    def _call(self, x: Tensor) -> Tensor:
        for p in self.parts:
            x = p(x)
        return x

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        if not self.parts:
            return x * 0  # type: ignore[no-any-return]
        total: Any = 0
        dim = self.event_dim
        for p in self.parts:
            y = p(x)
            total = total + sum_rightmost(p.log_abs_det_jacobian(x, y), dim - p.event_dim)
            x = y
        return total  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    def __hash__(self) -> int:
        return hash(tuple(self.parts))


identity_transform = ComposeTransform([])


class ExpTransform(Transform):
    bijective = True
    codomain = constraints.positive

    def _call(self, x: Tensor) -> Tensor:
        return x.exp()  # type: ignore[no-any-return]

    def _inverse(self, y: Tensor) -> Tensor:
        return y.log()  # type: ignore[no-any-return]

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return x


class AffineTransform(Transform):
    """``y = loc + scale * x`` (``event_dim`` trailing dims summed in the Jacobian)."""

    bijective = True

    def __init__(self, loc: Any, scale: Any, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim
        if isinstance(scale, int | float):
            self.sign = 1 if scale > 0 else (-1 if scale < 0 else 0)
        else:
            self.sign = as_param(scale).sign()

    @property
    def event_dim(self) -> int:
        return self._event_dim

    def _call(self, x: Tensor) -> Tensor:
        return self.loc + self.scale * x  # type: ignore[no-any-return]

    def _inverse(self, y: Tensor) -> Tensor:
        return (y - self.loc) / self.scale  # type: ignore[no-any-return]

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        scale = self.scale
        if isinstance(scale, int | float):
            result = x * 0 + math.log(abs(scale))
        else:
            result = (x * 0 + scale.abs().log()) if isinstance(scale, Tensor) else (
                x * 0 + float(np.log(np.abs(scale))))
        return sum_rightmost(result, self._event_dim)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AffineTransform):
            return False
        same = [a is b or (not isinstance(a, Tensor) and not isinstance(b, Tensor) and a == b)
                or (isinstance(a, Tensor) and isinstance(b, Tensor)
                    and bool(np.array_equal(a.detach().numpy(), b.detach().numpy())))
                for a, b in ((self.loc, other.loc), (self.scale, other.scale))]
        return all(same) and self._event_dim == other._event_dim

    def __hash__(self) -> int:
        return hash(("affine", self._event_dim))


class SigmoidTransform(Transform):
    bijective = True
    codomain = constraints.unit_interval

    def _call(self, x: Tensor) -> Tensor:
        return clamp_probs(x.sigmoid())

    def _inverse(self, y: Tensor) -> Tensor:
        y = clamp_probs(y)
        return y.log() - (-y).log1p()  # type: ignore[no-any-return]

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -softplus(-x) - softplus(x)  # type: ignore[no-any-return]


class TanhTransform(Transform):
    bijective = True
    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x: Tensor) -> Tensor:
        return x.tanh()  # type: ignore[no-any-return]

    def _inverse(self, y: Tensor) -> Tensor:
        return y.atanh()  # type: ignore[no-any-return]

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        # log(1 - tanh(x)^2) in a form that is stable for large |x| (torch's)
        return 2.0 * (math.log(2.0) - x - softplus(-2.0 * x))  # type: ignore[no-any-return]


class SoftmaxTransform(Transform):
    """Unconstrained vectors to the simplex (not bijective: no Jacobian), as torch's."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x: Tensor) -> Tensor:
        logprobs = x - x.amax(-1, keepdim=True).detach()
        probs = logprobs.exp()
        return probs / probs.sum(-1, keepdim=True)  # type: ignore[no-any-return]

    def _inverse(self, y: Tensor) -> Tensor:
        return y.log()  # type: ignore[no-any-return]


class PowerTransform(Transform):
    """``y = x ** exponent`` on positive ``x``."""

    bijective = True
    domain = constraints.positive
    codomain = constraints.positive

    def __init__(self, exponent: Any, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.exponent = exponent

    def _call(self, x: Tensor) -> Tensor:
        return x.pow(self.exponent)  # type: ignore[no-any-return]

    def _inverse(self, y: Tensor) -> Tensor:
        return y.pow(1 / self.exponent)  # type: ignore[no-any-return]

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return (self.exponent * y / x).abs().log()  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PowerTransform) and self.exponent is other.exponent

    def __hash__(self) -> int:
        return hash(("power", id(self.exponent)))


class AbsTransform(Transform):
    codomain = constraints.nonnegative

    def _call(self, x: Tensor) -> Tensor:
        return x.abs()  # type: ignore[no-any-return]

    def _inverse(self, y: Tensor) -> Tensor:
        return y


class TransformedDistribution(Distribution):
    """The law of ``transforms(X)`` for ``X ~ base_distribution``."""

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(self, base_distribution: Distribution, transforms: Any,
                 validate_args: Any = None) -> None:
        self.transforms = [transforms] if isinstance(transforms, Transform) else list(transforms)
        self.base_dist = base_distribution
        self._dtype = getattr(base_distribution, "_dtype", np.float32)
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        event_dim = max([len(base_distribution.event_shape)]
                        + [t.codomain.event_dim for t in self.transforms])
        for t in self.transforms:
            shape = tuple(t.forward_shape(shape))
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return self.transforms[-1].codomain if self.transforms else self.base_dist.support

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        shape = tuple(int(s) for s in batch_shape)
        base_extra = len(self.base_dist.event_shape)
        tail = tuple(self._event_shape)[:len(self._event_shape) - base_extra]
        new.base_dist = self.base_dist.expand(shape + tail)
        new._batch_shape = type(self._batch_shape)(shape)
        return new

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
            return x

    def log_prob(self, value: Any) -> Tensor:
        y = self._value(value)
        event_dim = len(self._event_shape)
        lp: Any = 0
        for t in reversed(self.transforms):
            x = t.inv(y)
            event_dim += t.domain.event_dim - t.codomain.event_dim
            lp = lp - sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.domain.event_dim)
            y = x
        return lp + sum_rightmost(self.base_dist.log_prob(y),  # type: ignore[no-any-return]
                                  event_dim - len(self.base_dist.event_shape))

    def _monotonize_cdf(self, value: Tensor) -> Tensor:
        sign: Any = 1
        for t in self.transforms:
            sign = sign * t.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5  # type: ignore[no-any-return]

    def cdf(self, value: Any) -> Tensor:
        y = self._value(value)
        for t in reversed(self.transforms):
            y = t.inv(y)
        return self._monotonize_cdf(self.base_dist.cdf(y))

    def icdf(self, value: Any) -> Tensor:
        v = self._monotonize_cdf(as_param(value, self._dtype))
        x = self.base_dist.icdf(v)
        for t in self.transforms:
            x = t(x)
        return x
