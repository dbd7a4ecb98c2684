"""``torch.distributions.constraints``: the sets parameters and values must lie in.

A constraint's ``check(value)`` is a boolean tensor (reduced over ``event_dim`` trailing
dimensions), as torch's; distributions read ``arg_constraints`` and ``support`` from here to
validate arguments and samples when ``validate_args`` is on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine.tensor import Tensor, tensor

__all__ = ["Constraint", "boolean", "dependent", "dependent_property", "greater_than",
           "greater_than_eq", "half_open_interval", "independent", "integer_interval",
           "interval", "is_dependent", "less_than", "lower_cholesky", "lower_triangular",
           "nonnegative", "nonnegative_integer", "one_hot", "positive", "positive_definite",
           "positive_integer", "real", "real_vector", "simplex", "unit_interval",
           "corr_cholesky", "multinomial"]


def _np(value: Any) -> np.ndarray:
    return value.detach().numpy() if isinstance(value, Tensor) else np.asarray(value)


class Constraint:
    """A set of values; ``check`` says elementwise (per event) whether values lie in it."""

    is_discrete = False
    event_dim = 0

    def ok(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def check(self, value: Any) -> Tensor:
        return tensor(np.asarray(self.ok(_np(value)), dtype=bool))

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


class _Dependent(Constraint):
    """Placeholder for a constraint that depends on other parameters (never checked)."""

    def __init__(self, is_discrete: bool = False, event_dim: int = 0) -> None:
        self.is_discrete, self.event_dim = is_discrete, event_dim

    def __call__(self, *, is_discrete: bool = False, event_dim: int = 0) -> _Dependent:
        return _Dependent(is_discrete, event_dim)

    def ok(self, v: np.ndarray) -> np.ndarray:
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint: Any) -> bool:
    return isinstance(constraint, _Dependent)


class dependent_property(property):  # noqa: N801 (torch's name)
    """A ``support`` property that depends on the parameters (``Uniform``'s interval)."""

    def __init__(self, fn: Any = None, *, is_discrete: bool = False, event_dim: int = 0) -> None:
        super().__init__(fn)
        self.is_discrete, self.event_dim = is_discrete, event_dim

    def __call__(self, fn: Any) -> dependent_property:
        # the decorator-with-arguments form: @dependent_property(is_discrete=..., event_dim=...)
        return dependent_property(fn, is_discrete=self.is_discrete, event_dim=self.event_dim)


class _Real(Constraint):
    def ok(self, v: np.ndarray) -> np.ndarray:
        return v == v  # not NaN


class _Boolean(Constraint):
    is_discrete = True

    def ok(self, v: np.ndarray) -> np.ndarray:
        return (v == 0) | (v == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound: Any, upper_bound: Any) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def ok(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & (_np(self.lower_bound) <= v) & (v <= _np(self.upper_bound))

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound: int) -> None:
        self.lower_bound = lower_bound

    def ok(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & (v >= self.lower_bound)

    def __repr__(self) -> str:
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _GreaterThan(Constraint):
    def __init__(self, lower_bound: Any, strict: bool = True) -> None:
        self.lower_bound, self.strict = lower_bound, strict

    def ok(self, v: np.ndarray) -> np.ndarray:
        lb = _np(self.lower_bound)
        return (v > lb) if self.strict else (v >= lb)

    def __repr__(self) -> str:
        name = "GreaterThan" if self.strict else "GreaterThanEq"
        return f"{name}(lower_bound={self.lower_bound})"


class _LessThan(Constraint):
    def __init__(self, upper_bound: Any) -> None:
        self.upper_bound = upper_bound

    def ok(self, v: np.ndarray) -> np.ndarray:
        return v < _np(self.upper_bound)

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound: Any, upper_bound: Any, half_open: bool = False) -> None:
        self.lower_bound, self.upper_bound, self.half_open = lower_bound, upper_bound, half_open

    def ok(self, v: np.ndarray) -> np.ndarray:
        lo, hi = _np(self.lower_bound), _np(self.upper_bound)
        return (lo <= v) & ((v < hi) if self.half_open else (v <= hi))

    def __repr__(self) -> str:
        name = "HalfOpenInterval" if self.half_open else "Interval"
        return f"{name}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Independent(Constraint):
    """``base`` on each element, all of the last ``reinterpreted_batch_ndims`` dims at once."""

    def __init__(self, base: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def ok(self, v: np.ndarray) -> np.ndarray:
        r = np.asarray(self.base_constraint.ok(v))
        n = self.reinterpreted_batch_ndims
        return np.asarray(r.reshape(r.shape[:r.ndim - n] + (-1,)).all(-1)) if n else r

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint}, {self.reinterpreted_batch_ndims})"


class _Simplex(Constraint):
    event_dim = 1

    def ok(self, v: np.ndarray) -> np.ndarray:
        return np.all(v >= 0, axis=-1) & (np.abs(v.sum(-1) - 1) < 1e-6)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def ok(self, v: np.ndarray) -> np.ndarray:
        return np.all((v == 0) | (v == 1), axis=-1) & (v.sum(-1) == 1)


class _Multinomial(Constraint):
    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound: int) -> None:
        self.upper_bound = upper_bound

    def ok(self, v: np.ndarray) -> np.ndarray:
        return np.all(v >= 0, axis=-1) & (v.sum(-1) <= self.upper_bound)


class _LowerTriangular(Constraint):
    event_dim = 2

    def ok(self, v: np.ndarray) -> np.ndarray:
        return np.all(np.tril(v) == v, axis=(-2, -1))


class _LowerCholesky(Constraint):
    event_dim = 2

    def ok(self, v: np.ndarray) -> np.ndarray:
        diag = np.diagonal(v, axis1=-2, axis2=-1)
        return np.all(np.tril(v) == v, axis=(-2, -1)) & np.all(diag > 0, axis=-1)


class _CorrCholesky(_LowerCholesky):
    def ok(self, v: np.ndarray) -> np.ndarray:
        rows = np.sqrt((v * v).sum(-1))
        return super().ok(v) & np.all(np.abs(rows - 1) <= 1e-6, axis=-1)


class _PositiveDefinite(Constraint):
    event_dim = 2

    def ok(self, v: np.ndarray) -> np.ndarray:
        sym = np.all(np.isclose(v, np.swapaxes(v, -1, -2), atol=1e-6), axis=(-2, -1))
        eig = np.linalg.eigvalsh(np.where(np.isfinite(v), v, 0)) if v.size else v[..., 0]
        return sym & np.all(eig > 0, axis=-1) & np.all(np.isfinite(v), axis=(-2, -1))


dependent = _Dependent()
boolean = _Boolean()
real = _Real()
real_vector = _Independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThan(0.0, strict=False)
unit_interval = _Interval(0.0, 1.0)
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
simplex = _Simplex()
one_hot = _OneHot()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
positive_definite = _PositiveDefinite()
independent = _Independent
integer_interval = _IntegerInterval
interval = _Interval
multinomial = _Multinomial


def greater_than(lower_bound: Any) -> Constraint:
    return _GreaterThan(lower_bound)


def greater_than_eq(lower_bound: Any) -> Constraint:
    return _GreaterThan(lower_bound, strict=False)


def less_than(upper_bound: Any) -> Constraint:
    return _LessThan(upper_bound)


def half_open_interval(lower_bound: Any, upper_bound: Any) -> Constraint:
    return _Interval(lower_bound, upper_bound, half_open=True)
