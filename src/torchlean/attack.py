"""Adversarial attacks (FGSM, PGD) on a compiled classifier: the empirical side of certification.

``sample_box`` and ``pgd_box`` attack a box with general linear objectives (the unsafe sets of
VNN-LIB properties, ``torchlean.bounds.properties``) instead of a labelled example's ball;
``switch_on_starts`` gives PGD starts it cannot reach by itself: the box vertices that switch on
the first relu's neurons (a neuron that is off wherever PGD goes passes it no gradient).

Both attacks run the compiled graph that ``torchlean.bounds`` certifies (``tl.compile`` of the
logits, float32 kernels) and take input gradients from its reverse mode (``Compiled.vjp``), so an
example PGD breaks and a certificate for it would contradict each other. Perturbations are
L-infinity, projected onto the ball of radius ``eps`` and the valid input range after every step.
PGD starts from a uniformly random point of the ball (seeded), restarts ``restarts`` times, and
keeps for each example the first input that is misclassified (or the last iterate).
"""

from __future__ import annotations

import time
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


# ---------------------------------------------------------------------------------------------
# Attacks on a box with general linear objectives (VNN-LIB properties)
#
# The unsafe set is a union of conjunctions ``A_j y <= b_j`` (all rows). For a chain attacking
# conjunction ``j`` the objective is ``max_r (A_j y - b_j)_r``: at most 0 exactly when the
# conjunction is met. Sampling and PGD minimise it over the box; whoever calls them checks any
# point they return against the exact property (these run the network in its float type, on a
# batch of chains, and decide nothing themselves).


@dataclass
class BoxAttackResult:
    """Per chain: its best input, that input's objective (<= 0: the targeted conjunction is met
    by the attack's own float computation) and which conjunction it targeted."""

    inputs: Array
    objective: Array
    target: Array
    evaluations: int = 0
    timed_out: bool = False


def _objectives(op: str, objectives: Any, n_out: int) -> tuple[Array, Array]:
    """The conjunctions as padded arrays ``A`` (J, M, n_out) and ``b`` (J, M); padding rows have
    ``b = -inf`` so they never decide the maximum."""
    try:
        pairs = [(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
                 for a, b in objectives]
    except (TypeError, ValueError):
        raise AttackError(f"{op}: objectives must be (A, b) pairs of numeric arrays") from None
    if not pairs:
        raise AttackError(f"{op}: no objectives given")
    rows = max(max(len(b) for _, b in pairs), 1)
    a_pad = np.zeros((len(pairs), rows, n_out))
    b_pad = np.full((len(pairs), rows), -np.inf)
    for j, (a, b) in enumerate(pairs):
        if a.ndim != 2 or a.shape[1] != n_out or b.shape != (a.shape[0],):
            raise AttackError(f"{op}: objective {j} must be A (rows, {n_out}) and b (rows,), "
                              f"found {a.shape} and {b.shape}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise AttackError(f"{op}: objective {j} has non-finite entries")
        a_pad[j, :len(b)], b_pad[j, :len(b)] = a, b
        if len(b) == 0:  # no output constraint: met everywhere
            b_pad[j, 0] = 0.0
    return a_pad, b_pad


def _box_check(op: str, compiled: Any, lower: Array, upper: Array
               ) -> tuple[Array, Array, tuple[int, ...], int]:
    graph = getattr(compiled, "graph", None)
    if graph is None:
        raise AttackError(f"{op}: expected a compiled network (tl.compile or onnx.load), found "
                          f"{type(compiled).__name__}")
    shape = tuple(graph.nodes[graph.inputs[0]].shape)
    out = tuple(compiled.out_shape)
    if not shape or not out or out[0] != shape[0]:
        raise AttackError(f"{op}: the network must map a batch (N, ...) to (N, ...), found "
                          f"input {shape} and output {out}")
    dtype = np.dtype(compiled.dtype)
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    if lo.shape != shape[1:] or hi.shape != shape[1:]:
        raise AttackError(f"{op}: lower and upper must have the per-example input shape "
                          f"{shape[1:]}, found {lo.shape} and {hi.shape}")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or np.any(lo > hi):
        raise AttackError(f"{op}: the box must be finite with lower <= upper")
    lo_t, hi_t = lo.astype(dtype), hi.astype(dtype)
    if np.any(lo_t != lo) or np.any(hi_t != hi):
        raise AttackError(f"{op}: the box ends must be {dtype} numbers (round them inward, as "
                          "bounds.properties.Region.inner_box does)")
    return lo_t, hi_t, shape, int(np.prod(out[1:]))


def _evaluate(compiled: Any, x: Array, a: Array, b: Array, target: Array | None
              ) -> tuple[Array, Array, Array]:
    """Each chain's objective, the objective it attacks (``target``, or the best one when
    ``target`` is None) and that objective's rows' values ``A y - b`` (N, M)."""
    y = np.asarray(compiled.forward(x)).reshape(len(x), -1).astype(np.float64)
    values = np.einsum("jmo,no->njm", a, y) - b[None]  # (N, J, M)
    per_objective = values.max(axis=2)
    chosen = np.argmin(per_objective, axis=1) if target is None else target
    chains = np.arange(len(x))
    return per_objective[chains, chosen], chosen, values[chains, chosen]


def _descent_rows(rows: Array, loss: str) -> Array:
    """Weights (N, M) of each chain's rows in the function PGD descends: the row attaining the
    maximum (``"max"``), or every row still above its threshold (``"hinge"``: the sum of the
    positive parts, which moves all unmet rows at once instead of zigzagging between the two
    largest at a kink), the maximum row once none is above."""
    top = np.zeros_like(rows)
    top[np.arange(len(rows)), np.argmax(rows, axis=1)] = 1.0
    if loss == "max":
        return top
    above = (rows > 0).astype(np.float64)
    return np.where(above.any(axis=1, keepdims=True), above, top)


def _uniform(rng: Any, lo: Array, hi: Array, n: int, snap: float = 0.0) -> Array:
    u = rng.uniform(size=(n, *lo.shape))
    if snap > 0:  # put some coordinates on a face: counterexamples often sit on the boundary
        u = np.where(rng.uniform(size=u.shape) < snap, np.round(u), u)
    return np.minimum(np.maximum(lo + u * (hi - lo), lo), hi).astype(lo.dtype)


def sample_box(compiled: Any, lower: Array, upper: Array, objectives: Any, *, rounds: int = 1,
               seed: int = 0, snap: float = 0.0) -> BoxAttackResult:
    """Uniform samples of the box (``rounds`` batches of the network's batch size), each scored
    against every objective; per batch slot, the best sample and objective seen. ``snap``: the
    probability that a coordinate is moved to the nearer end of its interval (faces, corners)."""
    lo, hi, shape, n_out = _box_check("sample_box", compiled, lower, upper)
    a, b = _objectives("sample_box", objectives, n_out)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise AttackError(f"sample_box: rounds must be an integer >= 1, found {rounds!r}")
    if not isinstance(snap, int | float) or not 0 <= snap <= 1:
        raise AttackError(f"sample_box: snap must be a probability in [0, 1], found {snap!r}")
    rng = np.random.default_rng(seed)
    n = shape[0]
    best = np.zeros(shape, dtype=lo.dtype)
    best_obj = np.full(n, np.inf)
    best_target = np.zeros(n, dtype=np.int64)
    for _ in range(rounds):
        x = _uniform(rng, lo, hi, n, snap)
        y = np.asarray(compiled.forward(x)).reshape(n, -1).astype(np.float64)
        values = (np.einsum("jmo,no->njm", a, y) - b[None]).max(axis=2)  # (n, J)
        target = np.argmin(values, axis=1)
        obj = values[np.arange(n), target]
        better = obj < best_obj
        best[better], best_obj[better], best_target[better] = (x[better], obj[better],
                                                               target[better])
    return BoxAttackResult(best, best_obj, best_target, rounds * n)


STEP_RULES = ("adam", "sign")
BOX_LOSSES = ("max", "hinge")


def _diversified(compiled: Any, rng: Any, x: Array, lo: Array, hi: Array, steps: int
                 ) -> Array:
    """Output-diversified starts (Tashiro et al., ODI): ``steps`` signed-gradient steps of a
    quarter of the box's width per chain, each ascending a random direction of the output space,
    so that the chains begin in parts of the box that map to different outputs."""
    n = len(x)
    width = hi - lo
    direction = rng.uniform(-1.0, 1.0, size=(n, *compiled.out_shape[1:]))
    for _ in range(steps):
        point = np.minimum(np.maximum(x.astype(lo.dtype), lo), hi)
        grad = np.asarray(compiled.vjp([point], direction.astype(lo.dtype))[0])
        x = np.minimum(np.maximum(x + 0.25 * width * np.sign(grad), lo), hi)
    return x


def pgd_box(compiled: Any, lower: Array, upper: Array, objectives: Any, *, steps: int = 50,
            restarts: int = 1, seed: int = 0, step_size: float = 0.02, starts: Any = None,
            untargeted: bool = False, deadline: float | None = None, rule: str = "adam",
            decay: float | None = None, diversify: int = 0, loss: str = "max"
            ) -> BoxAttackResult:
    """Projected gradient descent on the objectives over the box ``[lower, upper]``.

    The network's batch holds ``N`` chains; chain ``k`` targets objective ``k mod J`` (restart
    ``r``: ``(k + r) mod J``; or the ``(inputs, target)`` of ``starts``, e.g. the best
    ``sample_box`` points, for the first restart): a multi-targeted attack, every unsafe
    conjunction attacked by its own chains in one batch. Each restart starts from uniform random
    points (seeded), moved by ``diversify`` output-diversified steps (``_diversified``), and
    takes ``steps`` steps of ``step_size * (upper - lower)``, projected onto the box, along the
    gradient of the row attaining the maximum (``loss="max"``) or of the sum of the rows still
    above their thresholds (``"hinge"``): ``rule="adam"`` (per-coordinate normalised
    gradients: a sign step early on, finer near an optimum) or ``"sign"`` (signed gradient, as
    PGD on an L-inf ball). The step size is annealed by a cosine schedule, or multiplied by
    ``decay`` after each step when given. ``untargeted``: every chain attacks whichever objective
    is lowest at its point (the minimum over a disjunction). Stops early once a chain's objective
    is <= 0, or at ``deadline`` (a ``time.monotonic`` value).
    """
    lo, hi, shape, n_out = _box_check("pgd_box", compiled, lower, upper)
    a, b = _objectives("pgd_box", objectives, n_out)
    for name, value, least in (("steps", steps, 1), ("restarts", restarts, 1), ("seed", seed, 0),
                               ("diversify", diversify, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise AttackError(f"pgd_box: {name} must be an integer >= {least}, found {value!r}")
    if not isinstance(step_size, int | float) or not np.isfinite(step_size) or step_size <= 0:
        raise AttackError(f"pgd_box: step_size must be a finite number > 0, found {step_size!r}")
    if loss not in BOX_LOSSES:
        raise AttackError(f"pgd_box: unknown loss {loss!r}; expected one of {BOX_LOSSES}")
    if rule not in STEP_RULES:
        raise AttackError(f"pgd_box: unknown rule {rule!r}; expected one of {STEP_RULES}")
    if decay is not None and (not isinstance(decay, int | float) or not 0 < decay <= 1):
        raise AttackError(f"pgd_box: decay must be a number in (0, 1], found {decay!r}")
    n, j = shape[0], len(a)
    rng = np.random.default_rng(seed)
    lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
    width = hi64 - lo64
    chains = np.arange(n)
    best = np.zeros(shape, dtype=lo.dtype)
    best_obj = np.full(n, np.inf)
    best_target = chains % j
    evaluations = 0
    beta1, beta2 = 0.9, 0.999
    for restart in range(restarts):
        if restart == 0 and starts is not None:
            x = np.asarray(starts.inputs, dtype=np.float64).reshape(shape)
            target = np.asarray(starts.target, dtype=np.int64).reshape(n)
            if np.any(target < 0) or np.any(target >= j):
                raise AttackError(f"pgd_box: starts target objectives outside [0, {j})")
        else:
            x = _uniform(rng, lo, hi, n).astype(np.float64)
            target = (chains + restart) % j
            if diversify:
                x = _diversified(compiled, rng, x, lo64, hi64, diversify)
                evaluations += n * diversify
        x = np.minimum(np.maximum(x, lo64), hi64)
        moment, second = np.zeros_like(x), np.zeros_like(x)
        for step in range(steps + 1):
            if deadline is not None and time.monotonic() > deadline:
                return BoxAttackResult(best, best_obj, best_target, evaluations, timed_out=True)
            # The network runs on the float points actually tried (inside the box: its ends are
            # numbers of that type).
            point = np.minimum(np.maximum(x.astype(lo.dtype), lo), hi)
            obj, target, values = _evaluate(compiled, point, a, b,
                                            None if untargeted else target)
            evaluations += n
            better = obj < best_obj
            best[better], best_obj[better] = point[better], obj[better]
            best_target[better] = target[better]
            if np.any(obj <= 0) or step == steps:
                break
            seed_rows = np.einsum("nm,nmo->no", _descent_rows(values, loss), a[target])
            seed_rows = seed_rows.reshape((n, *compiled.out_shape[1:]))
            grad = np.asarray(compiled.vjp([point], seed_rows.astype(lo.dtype))[0],
                              dtype=np.float64) * width
            if rule == "sign":
                direction = np.sign(grad)
            else:
                moment = beta1 * moment + (1 - beta1) * grad
                second = beta2 * second + (1 - beta2) * grad**2
                direction = (moment / (1 - beta1 ** (step + 1))) / (
                    np.sqrt(second / (1 - beta2 ** (step + 1))) + 1e-12)
            if decay is None:
                size = step_size * 0.5 * (1.0 + np.cos(np.pi * step / steps))
            else:
                size = step_size * decay**step
            x = np.minimum(np.maximum(x - size * width * direction, lo64), hi64)
        if np.any(best_obj <= 0):
            break
    return BoxAttackResult(best, best_obj, best_target, evaluations)


def switch_on_starts(compiled: Any, lower: Array, upper: Array, *, limit: int | None = None,
                     neurons: int = 1024) -> Array:
    """Per unstable neuron of the network's first relu, the box vertex that maximises its
    pre-activation: PGD starts in parts of the box that gradient steps do not find.

    A ReLU network can be flat around the box's centre with a counterexample behind a neuron
    that is off along every descent path (it passes no gradient, so no chain is ever drawn
    towards switching it on): MNIST-FC ``mnist-net_256x2 prop_0_0.05``, where only 1-3 of 256
    first-layer neurons are on anywhere PGD goes. Each neuron's input gradient at the box's
    centre (one reverse pass per batch of neurons, seeded at the pre-activation) gives its
    range over the box, ``z(c) +- |g| . (upper - lower) / 2``, and its maximising vertex
    (``upper`` where ``g > 0``, ``lower`` where ``g < 0``, the centre where 0): exact when
    the layers before the relu are affine (linear, matmul, add, conv, reshapes; otherwise a
    linearisation, and the starts are only candidates either way). Unstable: the range
    straddles 0. Order: the neurons off at the centre first (those are the ones PGD cannot
    see), each group by its largest value, most first; at most ``limit`` of them. A relu of
    more than ``neurons`` neurons (a convolution's) has that many examined, evenly spaced (the
    work is one reverse pass per network batch of them). Returns
    ``(S, *input shape)`` starts in the network's float type (``S = 0`` when the graph has no
    relu, or none is unstable).
    """
    lo, hi, shape, _ = _box_check("switch_on_starts", compiled, lower, upper)
    for name, value, least in (("limit", limit, 0), ("neurons", neurons, 1)):
        if value is None and name == "limit":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise AttackError(f"switch_on_starts: {name} must be an integer >= {least}, found "
                              f"{value!r}")
    graph = compiled.graph
    empty = np.zeros((0, *shape[1:]), dtype=lo.dtype)
    relu = next((i for i, node in enumerate(graph.nodes)
                 if node.kind == "op" and node.op is not None and node.op.name == "relu"), None)
    if relu is None or len(graph.inputs) - len(graph.params) != 1:
        return empty
    pre = graph.nodes[relu].parents[0]
    pre_shape = tuple(graph.nodes[pre].shape)
    n = shape[0]
    if not pre_shape or pre_shape[0] != n:
        return empty
    width = int(np.prod(pre_shape[1:]))
    examined = np.unique(np.linspace(0, width - 1, min(width, neurons)).round().astype(np.int64))
    centre = np.minimum(np.maximum(lo + (hi - lo) / 2, lo), hi)
    xs = graph.check_inputs("switch_on_starts",
                            [np.broadcast_to(centre, shape).copy(),
                             *[p.array for p in graph.params]])
    values = graph.evaluate(xs, np)
    z = np.asarray(values[pre], dtype=np.float64).reshape(n, width)[0][examined]
    radius = (hi.astype(np.float64) - lo.astype(np.float64)).reshape(-1) / 2
    grads = np.zeros((len(examined), radius.size))
    for first in range(0, len(examined), n):  # a reverse pass seeds n neurons, one per row
        count = min(n, len(examined) - first)
        seed = np.zeros((n, width), dtype=lo.dtype)
        seed[np.arange(count), examined[first:first + count]] = 1
        cot = graph.backprop(values, pre, seed.reshape(pre_shape))[graph.inputs[0]]
        if cot is not None:
            grads[first:first + count] = np.asarray(cot, np.float64).reshape(n, -1)[:count]
    reach = np.abs(grads) @ radius
    top, bottom = z + reach, z - reach
    unstable = np.flatnonzero((top > 0) & (bottom < 0))
    order = unstable[np.lexsort((-top[unstable], z[unstable] > 0))][:limit]
    flat_lo, flat_hi, flat_c = lo.reshape(-1), hi.reshape(-1), centre.reshape(-1)
    g = grads[order]
    starts = np.where(g > 0, flat_hi, np.where(g < 0, flat_lo, flat_c))
    return starts.astype(lo.dtype).reshape((len(order), *shape[1:]))
