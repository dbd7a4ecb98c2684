"""Adversarial attacks (FGSM, PGD) on a compiled classifier: the empirical side of certification.

Both attacks run the compiled graph that ``torchlean.bounds`` certifies (``tl.compile`` of the
logits, float32 kernels) and take input gradients from its reverse mode (``Compiled.vjp``), so an
example PGD breaks and a certificate for it would contradict each other. Perturbations are
L-infinity, projected onto the ball of radius ``eps`` and the valid input range after every step.
PGD starts from a uniformly random point of the ball (seeded), restarts ``restarts`` times, and
keeps for each example the first input that is misclassified (or the last iterate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .core.errors import TorchLeanError

Array = Any
LOSSES = ("margin", "ce")


class AttackError(TorchLeanError):
    """Bad input to an attack."""


@dataclass
class AttackResult:
    """Per example: the adversarial input found, its logits and whether it is misclassified."""

    inputs: Array
    logits: Array
    broken: Array


def _check(compiled: Any, x: Array, labels: Array, eps: float, clip: tuple[Any, Any] | None,
           op: str) -> tuple[Array, Array]:
    graph = getattr(compiled, "graph", None)
    if graph is None:
        raise AttackError(f"{op}: expected a compiled classifier (tl.compile), found "
                          f"{type(compiled).__name__}")
    x = np.asarray(x, dtype=compiled.dtype)
    shape = graph.nodes[graph.inputs[0]].shape
    if x.shape != shape:
        raise AttackError(f"{op}: inputs have shape {x.shape}, the graph takes {shape}")
    y = np.asarray(labels)
    out = compiled.out_shape
    if len(out) != 2 or y.shape != (out[0],):
        raise AttackError(f"{op}: expected logits (B, classes) and labels (B,), found logits "
                          f"{out} and labels {y.shape}")
    if np.any(y < 0) or np.any(y >= out[1]) or np.any(np.mod(y, 1)):
        raise AttackError(f"{op}: labels must be class indices in [0, {out[1]})")
    if not isinstance(eps, int | float | np.floating) or not np.isfinite(eps) or eps < 0:
        raise AttackError(f"{op}: eps must be a finite number >= 0, found {eps!r}")
    if clip is not None and clip[0] is not None and clip[1] is not None and clip[0] > clip[1]:
        raise AttackError(f"{op}: clip range {clip} is empty")
    return x, y.astype(np.int64)


def _loss_seed(logits: Array, y: Array, loss: str) -> Array:
    """d loss / d logits for the loss to *increase* (margin: best other class minus true)."""
    n, c = logits.shape
    rows = np.arange(n)
    if loss == "ce":
        z = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[rows, y] -= 1.0
        return p
    others = logits.astype(np.float64).copy()
    others[rows, y] = -np.inf
    j = np.argmax(others, axis=1)
    seed = np.zeros_like(logits)
    seed[rows, j] = 1.0
    seed[rows, y] -= 1.0
    return seed


def _project(x: Array, lo: Array, hi: Array) -> Array:
    return np.minimum(np.maximum(x, lo), hi)


def _ball(x: Array, eps: float, clip: tuple[Any, Any] | None) -> tuple[Array, Array]:
    """The ball's ends in x's dtype, rounded inward: every point the attack tries lies in the
    float64 ball that ``torchlean.bounds.box`` certifies."""
    c = x.astype(np.float64)
    lo, hi = c - eps, c + eps
    if clip is not None:
        lo = lo if clip[0] is None else np.maximum(lo, clip[0])
        hi = hi if clip[1] is None else np.minimum(hi, clip[1])
    lo_t, hi_t = lo.astype(x.dtype), hi.astype(x.dtype)
    lo_t = np.where(lo_t < lo, np.nextafter(lo_t, np.asarray(np.inf, x.dtype)), lo_t)
    hi_t = np.where(hi_t > hi, np.nextafter(hi_t, np.asarray(-np.inf, x.dtype)), hi_t)
    return np.minimum(lo_t, x), np.maximum(hi_t, x)


def _gradient(compiled: Any, x: Array, y: Array, loss: str) -> tuple[Array, Array]:
    logits = compiled.forward(x)
    grads = compiled.vjp([x], _loss_seed(logits, y, loss))
    return logits, grads[0]


def fgsm(compiled: Any, x: Array, labels: Array, eps: float, *,
         clip: tuple[Any, Any] | None = (0.0, 1.0), loss: str = "ce") -> AttackResult:
    """One signed-gradient step of size ``eps`` (Goodfellow et al.)."""
    if loss not in LOSSES:
        raise AttackError(f"fgsm: unknown loss {loss!r}; expected one of {LOSSES}")
    x, y = _check(compiled, x, labels, eps, clip, "fgsm")
    lo, hi = _ball(x, eps, clip)
    _, g = _gradient(compiled, x, y, loss)
    adv = _project(x + eps * np.sign(g).astype(x.dtype), lo, hi)
    logits = compiled.forward(adv)
    return AttackResult(adv, logits, np.argmax(logits, axis=1) != y)


def pgd(compiled: Any, x: Array, labels: Array, eps: float, *, steps: int = 20,
        restarts: int = 1, step_size: float | None = None, seed: int = 0,
        clip: tuple[Any, Any] | None = (0.0, 1.0), loss: str = "margin") -> AttackResult:
    """Projected gradient ascent (Madry et al.) with random starts; ``step_size`` defaults to
    ``2.5 * eps / steps``. Deterministic for a given ``seed``."""
    if loss not in LOSSES:
        raise AttackError(f"pgd: unknown loss {loss!r}; expected one of {LOSSES}")
    for name, value, least in (("steps", steps, 1), ("restarts", restarts, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise AttackError(f"pgd: {name} must be an integer >= {least}, found {value!r}")
    x, y = _check(compiled, x, labels, eps, clip, "pgd")
    size = 2.5 * eps / steps if step_size is None else float(step_size)
    if not np.isfinite(size) or size < 0:
        raise AttackError(f"pgd: step_size must be a finite number >= 0, found {step_size!r}")
    lo, hi = _ball(x, eps, clip)
    rng = np.random.default_rng(seed)
    best = x.copy()
    best_logits = compiled.forward(x)
    broken = np.argmax(best_logits, axis=1) != y
    for _ in range(restarts):
        adv = _project(x + rng.uniform(-eps, eps, size=x.shape).astype(x.dtype), lo, hi)
        for _ in range(steps):
            logits, g = _gradient(compiled, adv, y, loss)
            hit = (np.argmax(logits, axis=1) != y) & ~broken
            best[hit], best_logits[hit], broken = adv[hit], logits[hit], broken | hit
            adv = _project(adv + (size * np.sign(g)).astype(x.dtype), lo, hi)
        logits = compiled.forward(adv)
        hit = (np.argmax(logits, axis=1) != y) & ~broken
        best[hit], best_logits[hit], broken = adv[hit], logits[hit], broken | hit
        keep = ~broken
        best[keep], best_logits[keep] = adv[keep], logits[keep]
    return AttackResult(best, best_logits, broken)
