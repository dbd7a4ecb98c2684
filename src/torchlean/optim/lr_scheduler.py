"""``optim.lr_scheduler``: torch's learning-rate schedules over an optimiser's ``param_groups``.

Each scheduler writes ``group["lr"]`` of every group once per ``step()`` with torch's formulas,
in torch's recursive ("chainable") form where torch uses it (and its closed form for
``step(epoch)``), so the sequence of rates equals torch's to rounding: ``StepLR``,
``MultiStepLR``, ``ExponentialLR``, ``CosineAnnealingLR``, ``CosineAnnealingWarmRestarts``,
``LambdaLR``, ``MultiplicativeLR``, ``LinearLR``, ``ConstantLR``, ``PolynomialLR``,
``OneCycleLR`` and ``CyclicLR`` (both also cycle SGD's ``momentum`` or Adam's ``beta1``),
``ReduceLROnPlateau`` (stepped with the metric), and the combinations ``SequentialLR`` (one
scheduler after another at milestones) and ``ChainedScheduler`` (all at every step). Building a
scheduler records each group's ``initial_lr`` and applies the schedule's first rate, as torch
does; ``get_last_lr()`` is the list of rates the last step set; ``state_dict()`` is every
attribute but the optimiser (with ``LambdaLR``'s and ``MultiplicativeLR``'s functions and
``CyclicLR``'s ``scale_fn`` left out, as torch leaves functions out; a combination holds its
schedulers' state dicts).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .optimizers import Optimizer, OptimizerError

__all__ = [
    "ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
    "CyclicLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR",
    "MultiplicativeLR", "OneCycleLR", "PolynomialLR", "ReduceLROnPlateau", "SequentialLR",
    "StepLR",
]


def _number(owner: str, name: str, value: Any, minimum: float | None = None,
            above: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise OptimizerError(f"{owner}: {name} must be a number, found {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise OptimizerError(f"{owner}: {name} must be finite, found {v}")
    if minimum is not None and (v <= minimum if above else v < minimum):
        relation = ">" if above else ">="
        raise OptimizerError(f"{owner}: {name} must be {relation} {minimum}, found {v}")
    return v


def _int(owner: str, name: str, value: Any, minimum: int) -> int:
    # a whole float is accepted as torch does (the transformer tutorial's StepLR(opt, 1.0))
    if isinstance(value, float | np.floating) and float(value).is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise OptimizerError(f"{owner}: {name} must be an int >= {minimum}, found {value!r}")
    return int(value)


def _per_group(owner: str, name: str, value: Any, n: int) -> list[float]:
    """One number >= 0 per parameter group: ``value`` itself, or a list of ``n``."""
    values = list(value) if isinstance(value, list | tuple) else [value] * n
    if len(values) != n:
        raise OptimizerError(f"{owner}: expected {n} values for {name} (one per parameter "
                             f"group), found {len(values)}")
    return [_number(owner, name, v, 0.0) for v in values]


def _optimizer(owner: str, optimizer: Any) -> Optimizer:
    if not isinstance(optimizer, Optimizer):
        raise OptimizerError(f"{owner}: expected a torchlean optimiser, found "
                             f"{type(optimizer).__name__}")
    return optimizer


class LRScheduler:
    """Base class: keeps ``base_lrs`` and ``last_epoch`` and writes ``get_lr()`` into the groups
    on each ``step()``; subclasses implement ``get_lr``."""

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        name = type(self).__name__
        self.optimizer = _optimizer(name, optimizer)
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise OptimizerError(f"{name}: last_epoch must be an int >= -1, found "
                                 f"{last_epoch!r}")
        if last_epoch == -1:
            for group in self.optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(self.optimizer.param_groups):
                if "initial_lr" not in group:
                    raise OptimizerError(f"{name}: param 'initial_lr' is not specified in "
                                         f"param_groups[{i}] when resuming an optimizer")
        self.base_lrs: list[float] = [g["initial_lr"] for g in self.optimizer.param_groups]
        self.last_epoch = last_epoch
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        """The step a scheduler takes when built (``SequentialLR`` also calls it when a
        scheduler's turn comes); ``_is_initial`` is True meanwhile (a resumed ``LinearLR`` or
        ``PolynomialLR`` then keeps the rate it finds, as torch's)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step()`` set, one per group."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``, torch's deprecated form) and set the rates."""
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Set the rates of the next epoch (recursive form), or of ``epoch`` (closed form);
        torch's ``_update_lr``, which ``SequentialLR`` calls with 0 at a milestone."""
        if epoch is None:
            self.last_epoch += 1
        else:
            self.last_epoch = _int(type(self).__name__, "epoch", epoch, 0)
        rates = self._closed_form() if epoch is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, rates, strict=True):
            group["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _closed_form(self) -> list[float]:
        """The rates at ``last_epoch`` directly (``step(epoch)``); defaults to ``get_lr``."""
        return self.get_lr()

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        unknown = sorted(set(state_dict) - set(self.__dict__))
        if unknown:
            raise OptimizerError(f"{type(self).__name__}.load_state_dict: unexpected keys "
                                 f"{unknown}")
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)`` (one function, or one per group)."""

    def __init__(self, optimizer: Any, lr_lambda: Any, last_epoch: int = -1) -> None:
        opt = _optimizer("LambdaLR", optimizer)
        n = len(opt.param_groups)
        lambdas = list(lr_lambda) if isinstance(lr_lambda, list | tuple) else [lr_lambda] * n
        if len(lambdas) != n or not all(callable(f) for f in lambdas):
            raise OptimizerError(f"LambdaLR: expected one function or {n} functions, found "
                                 f"{lr_lambda!r}")
        self.lr_lambdas: list[Callable[[int], float]] = lambdas
        super().__init__(opt, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * f(self.last_epoch)
                for base, f in zip(self.base_lrs, self.lr_lambdas, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.step_size = _int("StepLR", "step_size", step_size, 1)
        self.gamma = _number("StepLR", "gamma", gamma, 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]

    def _closed_form(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each milestone epoch (repeated milestones compound)."""

    def __init__(self, optimizer: Any, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = Counter(sorted(_int("MultiStepLR", "milestone", m, 0)
                                         for m in milestones))
        self.gamma = _number("MultiStepLR", "gamma", gamma, 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch not in self.milestones:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma ** self.milestones[self.last_epoch] for g in groups]

    def _closed_form(self) -> list[float]:
        passed = sum(c for m, c in self.milestones.items() if m <= self.last_epoch)
        return [base * self.gamma ** passed for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` every epoch."""

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = _number("ExponentialLR", "gamma", gamma, 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]

    def _closed_form(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine from ``initial_lr`` down to ``eta_min`` over ``T_max`` epochs (and back up, as
    torch's recursive form continues past ``T_max``)."""

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        self.T_max = _int("CosineAnnealingLR", "T_max", T_max, 1)
        self.eta_min = _number("CosineAnnealingLR", "eta_min", eta_min, 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        epoch, t_max, eta = self.last_epoch, self.T_max, self.eta_min
        if epoch == 0:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and epoch > 0:
            return [eta + (base - eta) * (1 + math.cos(epoch * math.pi / t_max)) / 2
                    for base in self.base_lrs]
        if (epoch - 1 - t_max) % (2 * t_max) == 0:
            return [g["lr"] + (base - eta) * (1 - math.cos(math.pi / t_max)) / 2
                    for base, g in zip(self.base_lrs, groups, strict=True)]
        return [(1 + math.cos(math.pi * epoch / t_max))
                / (1 + math.cos(math.pi * (epoch - 1) / t_max)) * (g["lr"] - eta) + eta
                for g in groups]

    def _closed_form(self) -> list[float]:
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the rate rises from ``max_lr / div_factor`` to ``max_lr`` over
    ``pct_start`` of ``total_steps`` and anneals to ``initial / final_div_factor`` (three phases
    with ``three_phase``); momentum (SGD) or ``beta1`` (Adam) moves the opposite way between
    ``max_momentum`` and ``base_momentum`` when ``cycle_momentum``. Step once per batch."""

    def __init__(self, optimizer: Any, max_lr: Any, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: Any = 0.85,
                 max_momentum: Any = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        name = "OneCycleLR"
        opt = _optimizer(name, optimizer)
        groups = opt.param_groups
        if total_steps is not None:
            self.total_steps = _int(name, "total_steps", total_steps, 1)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = (_int(name, "epochs", epochs, 1)
                                * _int(name, "steps_per_epoch", steps_per_epoch, 1))
        else:
            raise OptimizerError(f"{name}: you must define either total_steps OR (epochs AND "
                                 "steps_per_epoch)")
        pct = _number(name, "pct_start", pct_start, 0.0)
        if pct > 1:
            raise OptimizerError(f"{name}: expected float between 0 and 1 pct_start, found {pct}")
        if anneal_strategy not in ("cos", "linear"):
            raise OptimizerError(f"{name}: anneal_strategy must be one of 'cos' or 'linear', "
                                 f"found {anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        total = self.total_steps
        if three_phase:
            self._phases = [
                (float(pct * total) - 1, "initial_lr", "max_lr", "max_momentum",
                 "base_momentum"),
                (float(2 * pct * total) - 2, "max_lr", "initial_lr", "base_momentum",
                 "max_momentum"),
                (total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (float(pct * total) - 1, "initial_lr", "max_lr", "max_momentum",
                 "base_momentum"),
                (total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        max_lrs = _per_group(name, "max_lr", max_lr, len(groups))
        div = _number(name, "div_factor", div_factor, 0.0, above=True)
        final_div = _number(name, "final_div_factor", final_div_factor, 0.0, above=True)
        if last_epoch == -1:
            for group, top in zip(groups, max_lrs, strict=True):
                group["initial_lr"] = top / div
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            self.use_beta1 = "beta1" in opt.defaults
            if not self.use_beta1 and "momentum" not in opt.defaults:
                raise OptimizerError(f"{name}: optimizer must support momentum or beta1 with "
                                     "`cycle_momentum` option enabled")
            lows = _per_group(name, "base_momentum", base_momentum, len(groups))
            highs = _per_group(name, "max_momentum", max_momentum, len(groups))
            if last_epoch == -1:
                for group, low, high in zip(groups, lows, highs, strict=True):
                    if self.use_beta1:
                        group["betas"] = (high, group["betas"][1])
                    else:
                        group["momentum"] = high
                    group["max_momentum"] = high
                    group["base_momentum"] = low
        super().__init__(opt, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise OptimizerError(f"OneCycleLR: tried to step {step} times. The specified number "
                                 f"of total steps is {self.total_steps}")
        rates = []
        for group in self.optimizer.param_groups:
            start = 0.0
            lr = momentum = 0.0
            for i, (end, lr_a, lr_b, m_a, m_b) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(group[lr_a], group[lr_b], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal(group[m_a], group[m_b], pct)
                    break
                start = end
            rates.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (momentum, group["betas"][1])
                else:
                    group["momentum"] = momentum
        return rates


class ReduceLROnPlateau(LRScheduler):
    """Multiply the rate by ``factor`` when the metric given to ``step(metric)`` has not
    improved (by ``threshold``, relative or absolute) for more than ``patience`` epochs, then
    wait ``cooldown`` epochs; never below ``min_lr``."""

    def __init__(self, optimizer: Any, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: Any = 0.0, eps: float = 1e-8) -> None:
        name = "ReduceLROnPlateau"
        opt = _optimizer(name, optimizer)
        self.factor = _number(name, "factor", factor, 0.0)
        if self.factor >= 1.0:
            raise OptimizerError(f"{name}: factor should be < 1.0, found {self.factor}")
        if mode not in ("min", "max"):
            raise OptimizerError(f"{name}: mode {mode!r} is unknown (expected 'min' or 'max')")
        if threshold_mode not in ("rel", "abs"):
            raise OptimizerError(f"{name}: threshold mode {threshold_mode!r} is unknown "
                                 "(expected 'rel' or 'abs')")
        self.optimizer = opt
        n = len(opt.param_groups)
        lows = list(min_lr) if isinstance(min_lr, list | tuple) else [min_lr] * n
        if len(lows) != n:
            raise OptimizerError(f"{name}: expected {n} min_lrs, found {len(lows)}")
        self.min_lrs = [_number(name, "min_lr", v, 0.0) for v in lows]
        self.mode, self.threshold_mode = mode, threshold_mode
        self.patience = _int(name, "patience", patience, 0)
        self.cooldown = _int(name, "cooldown", cooldown, 0)
        self.threshold = _number(name, "threshold", threshold, 0.0)
        self.eps = _number(name, "eps", eps, 0.0)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._step_count = 0
        self.base_lrs = [g["lr"] for g in opt.param_groups]
        self._last_lr = [g["lr"] for g in opt.param_groups]

    def _is_better(self, a: float) -> bool:
        best, t = self.best, self.threshold
        if self.mode == "min":
            return a < best * (1.0 - t) if self.threshold_mode == "rel" else a < best - t
        return a > best * (t + 1.0) if self.threshold_mode == "rel" else a > best + t

    def step(self, metrics: Any = None, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record this epoch's metric and reduce the rates after a plateau."""
        if metrics is None:
            raise OptimizerError("ReduceLROnPlateau.step: expected the metric (e.g. the "
                                 "validation loss), found None")
        current = _number("ReduceLROnPlateau", "metrics", float(metrics))
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, low in zip(self.optimizer.param_groups, self.min_lrs, strict=True):
                old = float(group["lr"])
                new = max(old * self.factor, low)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


class MultiplicativeLR(LRScheduler):
    """Multiply the rate by ``lr_lambda(epoch)`` every epoch (one function, or one per group)."""

    def __init__(self, optimizer: Any, lr_lambda: Any, last_epoch: int = -1) -> None:
        opt = _optimizer("MultiplicativeLR", optimizer)
        n = len(opt.param_groups)
        lambdas = list(lr_lambda) if isinstance(lr_lambda, list | tuple) else [lr_lambda] * n
        if len(lambdas) != n or not all(callable(f) for f in lambdas):
            raise OptimizerError(f"MultiplicativeLR: expected one function or {n} functions "
                                 f"(one per parameter group), found {lr_lambda!r}")
        self.lr_lambdas: list[Callable[[int], float]] = lambdas
        super().__init__(opt, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [g["lr"] for g in groups]
        return [g["lr"] * f(self.last_epoch)
                for f, g in zip(self.lr_lambdas, groups, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}


class ConstantLR(LRScheduler):
    """Multiply the rate by ``factor`` until epoch ``total_iters``, then restore it."""

    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        self.factor = _number("ConstantLR", "factor", factor, 0.0, above=True)
        if self.factor > 1.0:
            raise OptimizerError(f"ConstantLR: factor must be in (0, 1] (the rate is divided by "
                                 f"it at total_iters), found {self.factor}")
        self.total_iters = _int("ConstantLR", "total_iters", total_iters, 1)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in groups]
        if self.last_epoch != self.total_iters:
            return [g["lr"] for g in groups]
        return [g["lr"] * (1.0 / self.factor) for g in groups]

    def _closed_form(self) -> list[float]:
        return [base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the rate by a factor moving linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs (then constant)."""

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        name = "LinearLR"
        self.start_factor = _number(name, "start_factor", start_factor, 0.0, above=True)
        if self.start_factor > 1.0:
            raise OptimizerError(f"{name}: start_factor must be in (0, 1], found "
                                 f"{self.start_factor}")
        self.end_factor = _number(name, "end_factor", end_factor, 0.0)
        if self.end_factor > 1.0:
            raise OptimizerError(f"{name}: end_factor must be in [0, 1], found {self.end_factor}")
        self.total_iters = _int(name, "total_iters", total_iters, 1)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [g["lr"] for g in groups]
        start, end = self.start_factor, self.end_factor
        ratio = 1.0 + (end - start) / (self.total_iters * start
                                       + (self.last_epoch - 1) * (end - start))
        return [g["lr"] * ratio for g in groups]

    def _closed_form(self) -> list[float]:
        return [base * (self.start_factor + (self.end_factor - self.start_factor)
                        * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay the rate as ``initial_lr * (1 - epoch / total_iters) ** power`` until
    ``total_iters`` (then constant)."""

    def __init__(self, optimizer: Any, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        self.total_iters = _int("PolynomialLR", "total_iters", total_iters, 1)
        self.power = _number("PolynomialLR", "power", power)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial or self.last_epoch > self.total_iters:
            return [g["lr"] for g in groups]
        decay = ((1.0 - self.last_epoch / self.total_iters)
                 / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [g["lr"] * decay for g in groups]

    def _closed_form(self) -> list[float]:
        return [base * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters)
                ** self.power for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine from ``initial_lr`` down to ``eta_min`` over ``T_i`` epochs, then a restart;
    ``T_i`` starts at ``T_0`` and is multiplied by ``T_mult`` at each restart. ``step(epoch)``
    takes a fractional epoch (``epoch + i / iters`` per batch) and finds the cycle it lies in."""

    def __init__(self, optimizer: Any, T_0: int, T_mult: int = 1,  # noqa: N803
                 eta_min: float = 0.0, last_epoch: int = -1) -> None:
        name = "CosineAnnealingWarmRestarts"
        self.T_0 = _int(name, "T_0", T_0, 1)
        self.T_i = self.T_0
        self.T_mult = _int(name, "T_mult", T_mult, 1)
        self.eta_min = _number(name, "eta_min", eta_min)
        self.T_cur: float = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:  # type: ignore[override]
        """Advance one epoch, or go to ``epoch`` (a number >= 0, fractional allowed)."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            epoch = _number(type(self).__name__, "epoch", epoch, 0.0)
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


class CyclicLR(LRScheduler):
    """The cyclical learning rate policy: the rate goes from ``base_lr`` up to ``max_lr`` over
    ``step_size_up`` steps and back over ``step_size_down`` (default the same), the cycle's
    height scaled by ``mode`` (``"triangular"``: constant, ``"triangular2"``: halved every
    cycle, ``"exp_range"``: ``gamma ** iteration``) or by ``scale_fn`` (of the cycle or of the
    iteration, ``scale_mode``). With ``cycle_momentum``, momentum (SGD, RMSprop) or ``beta1``
    (the Adam family) moves the opposite way between ``max_momentum`` and ``base_momentum``.
    Step once per batch."""

    def __init__(self, optimizer: Any, base_lr: Any, max_lr: Any, step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: Any = 0.8, max_momentum: Any = 0.9,
                 last_epoch: int = -1) -> None:
        name = "CyclicLR"
        opt = _optimizer(name, optimizer)
        groups = opt.param_groups
        base_lrs = _per_group(name, "base_lr", base_lr, len(groups))
        self.max_lrs = _per_group(name, "max_lr", max_lr, len(groups))
        up = _number(name, "step_size_up", step_size_up, 0.0, above=True)
        down = up if step_size_down is None else _number(name, "step_size_down",
                                                         step_size_down, 0.0)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise OptimizerError(f"{name}: mode must be 'triangular', 'triangular2' or "
                                 f"'exp_range' (or give scale_fn), found {mode!r}")
        if scale_fn is not None and not callable(scale_fn):
            raise OptimizerError(f"{name}: scale_fn must be a function, found {scale_fn!r}")
        if scale_mode not in ("cycle", "iterations"):
            raise OptimizerError(f"{name}: scale_mode must be 'cycle' or 'iterations', found "
                                 f"{scale_mode!r}")
        self.gamma = _number(name, "gamma", gamma, 0.0)
        cycle_momentum = bool(cycle_momentum)
        if cycle_momentum and "beta1" not in opt.defaults and "momentum" not in opt.defaults:
            raise OptimizerError(f"{name}: optimizer must support momentum or beta1 with "
                                 f"`cycle_momentum` option enabled ({type(opt).__name__} has "
                                 "neither)")
        if cycle_momentum:
            lows = _per_group(name, "base_momentum", base_momentum, len(groups))
            highs = _per_group(name, "max_momentum", max_momentum, len(groups))
        # Checked: now change the optimiser, as torch's constructor does.
        if last_epoch == -1:
            for lr, group in zip(base_lrs, groups, strict=True):
                group["lr"] = lr
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        self.mode = mode
        self._scale_fn_custom = scale_fn
        # the built-in modes fix what the scale applies to, as torch's ``_init_scale_fn``
        self.scale_mode = scale_mode if scale_fn is not None else (
            "iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = "beta1" in opt.defaults
            self.base_momentums, self.max_momentums = lows, highs
            if last_epoch == -1:
                for high, low, group in zip(highs, lows, groups, strict=True):
                    _set_momentum(group, self.use_beta1, high)
                    group["max_momentum"] = high
                    group["base_momentum"] = low
        super().__init__(opt, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x: float) -> float:
        """The height scale at cycle (or iteration) ``x``."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self) -> list[float]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * scale_factor * scale
               for base, top in zip(self.base_lrs, self.max_lrs, strict=True)]
        if self.cycle_momentum:
            momenta = [top - (top - low) * scale_factor * scale
                       for low, top in zip(self.base_momentums, self.max_momentums,
                                           strict=True)]
            for group, momentum in zip(self.optimizer.param_groups, momenta, strict=True):
                _set_momentum(group, self.use_beta1, momentum)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        # a custom scale function is code, not state: left out as torch leaves a function out
        return {**super().state_dict(), "_scale_fn_custom": None}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        custom = self._scale_fn_custom
        super().load_state_dict(state_dict)
        self._scale_fn_custom = custom


def _set_momentum(group: Any, use_beta1: bool, value: float) -> None:
    """Set a group's momentum: ``beta1`` of the Adam family, else ``momentum``."""
    if use_beta1:
        group["betas"] = (value, group["betas"][1])
    else:
        group["momentum"] = value


def _schedulers(owner: str, schedulers: Any, optimizer: Any) -> list[LRScheduler]:
    """``schedulers`` checked: a non-empty list of schedulers of ``optimizer``, none of them
    ``ReduceLROnPlateau`` (its step needs the metric)."""
    if isinstance(schedulers, LRScheduler) or not isinstance(schedulers, list | tuple):
        raise OptimizerError(f"{owner}: schedulers must be a list of schedulers, found "
                             f"{type(schedulers).__name__}")
    if not schedulers:
        raise OptimizerError(f"{owner} expects at least one scheduler, found none")
    for i, s in enumerate(schedulers):
        if not isinstance(s, LRScheduler):
            raise OptimizerError(f"{owner}: scheduler {i} is a {type(s).__name__}, expected "
                                 "an lr scheduler")
        if isinstance(s, ReduceLROnPlateau):
            raise OptimizerError(f"{owner} does not support ReduceLROnPlateau (scheduler {i}): "
                                 "its step needs the metric")
        if s.optimizer is not optimizer:
            raise OptimizerError(f"{owner} expects all schedulers to belong to the same "
                                 f"optimizer, but scheduler {i} ({type(s).__name__}) has "
                                 "another")
    return list(schedulers)


def _nested_state(scheduler: Any) -> dict[str, Any]:
    state = {k: v for k, v in scheduler.__dict__.items()
             if k not in ("optimizer", "_schedulers")}
    state["_schedulers"] = [s.state_dict() for s in scheduler._schedulers]
    return state


def _load_nested(scheduler: Any, state_dict: dict[str, Any]) -> None:
    name = type(scheduler).__name__
    inner = state_dict.get("_schedulers")
    if not isinstance(inner, list) or len(inner) != len(scheduler._schedulers):
        raise OptimizerError(f"{name}.load_state_dict: expected '_schedulers' with "
                             f"{len(scheduler._schedulers)} states, found {inner!r:.80}")
    unknown = sorted(set(state_dict) - set(scheduler.__dict__))
    if unknown:
        raise OptimizerError(f"{name}.load_state_dict: unexpected keys {unknown}")
    for s, state in zip(scheduler._schedulers, inner, strict=True):
        s.load_state_dict(state)
    scheduler.__dict__.update({k: v for k, v in state_dict.items() if k != "_schedulers"})


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another: scheduler ``i`` takes over at ``milestones[i-1]``
    (starting from its own epoch 0, its closed form there)."""

    def __init__(self, optimizer: Any, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1) -> None:
        name = "SequentialLR"
        opt = _optimizer(name, optimizer)
        scheds = _schedulers(name, schedulers, opt)
        if isinstance(milestones, int) or not isinstance(milestones, list | tuple):
            raise OptimizerError(f"{name}: milestones must be a list of ints, found "
                                 f"{milestones!r}")
        marks = [_int(name, "milestone", m, 0) for m in milestones]
        if len(marks) != len(scheds) - 1:
            raise OptimizerError(f"{name}: expected {len(scheds) - 1} milestones (one fewer than "
                                 f"the {len(scheds)} schedulers), found {len(marks)}")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise OptimizerError(f"{name}: last_epoch must be an int >= -1, found "
                                 f"{last_epoch!r}")
        self._schedulers = scheds
        self._milestones = marks
        self.last_epoch = last_epoch + 1
        self.optimizer = opt
        # Undo the schedulers' own first steps, then start the one whose turn it is.
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"]
        self._undo(self)
        scheds[bisect_right(marks, 0)]._initial_step()
        self._last_lr = scheds[bisect_right(marks, 0)].get_last_lr()

    @staticmethod
    def _undo(scheduler: Any) -> None:
        """Take back the initial step of every scheduler inside (nested ones included)."""
        if hasattr(scheduler, "_schedulers"):
            for s in scheduler._schedulers:
                SequentialLR._undo(s)
        elif hasattr(scheduler, "last_epoch"):
            scheduler.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance one epoch: the current scheduler steps (or, at a milestone, the next one
        starts at its epoch 0)."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimiser, with each scheduler's own state dict."""
        return _nested_state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _load_nested(self, state_dict)


class ChainedScheduler(LRScheduler):
    """Step every scheduler of ``schedulers`` at each ``step()`` (their multiplicative effects
    compound on the rates)."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Any = None) -> None:
        name = "ChainedScheduler"
        if isinstance(schedulers, list | tuple) and schedulers and optimizer is None:
            optimizer = getattr(schedulers[0], "optimizer", None)
        opt = _optimizer(name, optimizer)
        self._schedulers = _schedulers(name, schedulers, opt)
        self.optimizer = opt
        self._last_lr = [g["lr"] for g in opt.param_groups]

    def step(self) -> None:  # type: ignore[override]
        """Step each scheduler in order."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimiser, with each scheduler's own state dict."""
        return _nested_state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _load_nested(self, state_dict)
