"""Certified training (IBP, CROWN-IBP): minimise a loss on the bounds, as auto_LiRPA's recipe.

``fit(..., objective=CertifiedTraining(CertifiedConfig("crown-ibp", eps=0.1)))`` replaces the
natural loss of each training step by

    loss = kappa * CE(logits, y) + (1 - kappa) * CE(-lower, y)

where ``lower[b, j]`` lower-bounds the margin ``logit_y - logit_j`` over the L-infinity ball of
radius ``eps_t`` around the input, clipped to the input range (``bounds.differentiable``: the
bounds are recorded with the loss, so their gradients come from the same reverse pass).

Schedules, stepped per batch (``Schedule``): ``warmup_epochs`` at eps 0 (natural training; the
robust loss equals it there), then ``ramp_epochs`` of a smooth ramp to the target eps
(auto_LiRPA's ``SmoothedScheduler``: polynomial growth of degree ``power`` up to the ``mid``
fraction of the ramp, then linear, value and slope continuous), then the target. CROWN-IBP's
``beta`` (the weight of the CROWN bound against the IBP one) slides linearly in ``eps_t / eps``
from ``beta[0]`` at the start of the ramp to ``beta[1]`` at the target; the default (1, 0) is
the reference's ``1 - eps_t / eps`` (Zhang et al. 2020 also train with 1 -> 1, CROWN-IBP
throughout, which pays a CROWN pass in the target phase too). ``kappa`` (the natural loss's
weight) goes linearly from ``kappa[0]`` to ``kappa[1]`` over the ramp (default 0 throughout:
the reference's pure robust loss). Gradients are clipped to a global norm of ``grad_clip`` (10,
as the reference).

Shi et al. 2021 ("Fast certified robust training with short warmup"), both off by default:
``init="ibp"`` draws the weights so that an interval's width keeps its size through a layer
(``ibp_init``), and ``reg > 0`` adds their warm-up regularisers on the ramp
(``warmup_regularisers``: interval tightness and relu balance of the IBP pre-activation boxes),
weighted ``reg * (1 - eps_t / eps)`` as theirs, so they fade out as eps reaches the target.
Also off by default: ``l1 > 0`` adds ``l1 * sum |W|`` over the weight matrices and kernels to
every phase's loss (Xiao et al. 2019: sparse weights are easier to certify), and
``smoothing > 0`` smooths the robust loss's labels (``(1 - s) one_hot + s / N``).
``pool_chord`` (CROWN-IBP): max pooling's upper side in the CROWN pass is the certifier's chord
(``engine.pool_upper``, what ``torchlean certify`` uses) instead of the window's constant
greatest upper bound (auto_LiRPA's); off by default here, the CLI's default is per model.

Batch normalisation is handled as auto_LiRPA's certified training handles it: the bounds use
the clean batch's statistics (``bounds.differentiable``), the natural loss the batch's own
statistics, and each step updates the layers' running statistics from the clean batch (one
forward pass of the model, before the optimiser's update, as the reference's clean forward
does), so the trained model certifies in eval mode with them. The bounds used for training are
not rounded outward; certify the trained model with the sound certifier (``torchlean certify``).

Speed. Each phase's loss (natural, IBP, CROWN-IBP) is one stepper, traced once per batch shape.
On the compiled backend (host) a step runs that graph's generated plan (``engine.codegen``) with
the fast kernels, the node the progress statistics read (the bounds; the logits at eps 0) being
one more output of the plan; on the eager backend the statistics are read off the tape as the
loss records them. So no step pays for a second bound pass. Training runs in the model's
precision (float32): the bounds are a training signal, and certification is the sound
certifier's job (``torchlean certify``).

(This lives with the bounds, layer 5, rather than in ``training``: it needs the bound rules, and
imports only go down; ``fit`` knows it only as a generic ``objective``.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..core.backend import namespace_of, to_host
from ..core.errors import TorchLeanError
from ..core.registry import fast_kernels
from ..engine import codegen
from ..engine import ops_interface as F
from ..engine.session import Options
from ..engine.tensor import no_grad
from ..training.stepper import Stepper
from .differentiable import (
    Box,
    clean_logits,
    has_batch_norm,
    input_box,
    margin_lower_bounds,
    robust_cross_entropy,
)

__all__ = ["METHODS", "CertifiedConfig", "CertifiedTraining", "CertifiedTrainingError",
           "Schedule", "clip_grad_norm", "l1_penalty", "smooth_ramp", "smoothed_targets"]

METHODS = ("ibp", "crown-ibp")
# Below this weight CROWN-IBP's CROWN bound is left out (the IBP bound alone), as the reference
# does: the last steps of the ramp do not pay a CROWN pass for a vanishing share of the loss.
CROWN_WEIGHT_FLOOR = 1e-5
INITS = ("default", "ibp")


class CertifiedTrainingError(TorchLeanError):
    """Certified training was asked for something it cannot do (bad settings, a bad model)."""


@dataclass(frozen=True)
class CertifiedConfig:
    """The certified-training settings (checkpoints record ``as_dict()``)."""

    method: str
    eps: float
    warmup_epochs: int = 10
    ramp_epochs: int = 30
    kappa: tuple[float, float] = (0.0, 0.0)
    clip: tuple[float, float] | None = (0.0, 1.0)
    grad_clip: float = 10.0
    mid: float = 0.25
    power: float = 4.0
    init: str = "default"
    seed: int = 0
    reg: float = 0.0
    reg_tol: float = 0.5
    beta: tuple[float, float] = (1.0, 0.0)
    l1: float = 0.0
    smoothing: float = 0.0
    pool_chord: bool = False

    def __post_init__(self) -> None:
        where = "certified training"
        if self.method not in METHODS:
            raise CertifiedTrainingError(f"{where}: method must be one of {', '.join(METHODS)}, "
                                         f"found {self.method!r}")
        if not _number(self.eps) or not 0 < self.eps < math.inf:
            raise CertifiedTrainingError(f"{where}: eps must be a finite number > 0, found "
                                         f"{self.eps!r}")
        for name in ("warmup_epochs", "ramp_epochs"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise CertifiedTrainingError(f"{where}: {name} must be an integer >= 0, found "
                                             f"{v!r}")
        if (not isinstance(self.kappa, tuple) or len(self.kappa) != 2
                or not all(_number(k) and 0 <= k <= 1 for k in self.kappa)):
            raise CertifiedTrainingError(f"{where}: kappa must be two numbers in [0, 1] (start, "
                                         f"end), found {self.kappa!r}")
        if (not isinstance(self.beta, tuple) or len(self.beta) != 2
                or not all(_number(b) and 0 <= b <= 1 for b in self.beta)):
            raise CertifiedTrainingError(f"{where}: beta must be two numbers in [0, 1] (start, "
                                         f"end), found {self.beta!r}")
        if self.clip is not None and (len(self.clip) != 2 or not all(map(_number, self.clip))
                                      or not self.clip[0] < self.clip[1]):
            raise CertifiedTrainingError(f"{where}: clip must be (low, high) with low < high, "
                                         f"found {self.clip!r}")
        if not _number(self.grad_clip) or not self.grad_clip > 0:
            raise CertifiedTrainingError(f"{where}: grad_clip must be a number > 0 (math.inf: "
                                         f"no clipping), found {self.grad_clip!r}")
        if not _number(self.mid) or not 0 < self.mid < 1:
            raise CertifiedTrainingError(f"{where}: mid must lie in (0, 1), found {self.mid!r}")
        if not _number(self.power) or not self.power >= 1:
            raise CertifiedTrainingError(f"{where}: power must be >= 1, found {self.power!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise CertifiedTrainingError(f"{where}: seed must be an integer >= 0, found "
                                         f"{self.seed!r}")
        if not _number(self.reg) or not 0 <= self.reg < math.inf:
            raise CertifiedTrainingError(f"{where}: reg must be a finite number >= 0, found "
                                         f"{self.reg!r}")
        if not _number(self.reg_tol) or not 0 < self.reg_tol <= 1:
            raise CertifiedTrainingError(f"{where}: reg_tol must lie in (0, 1], found "
                                         f"{self.reg_tol!r}")
        if not _number(self.l1) or not 0 <= self.l1 < math.inf:
            raise CertifiedTrainingError(f"{where}: l1 must be a finite number >= 0, found "
                                         f"{self.l1!r}")
        if not _number(self.smoothing) or not 0 <= self.smoothing < 1:
            raise CertifiedTrainingError(f"{where}: smoothing must lie in [0, 1), found "
                                         f"{self.smoothing!r}")
        if not isinstance(self.pool_chord, bool):
            raise CertifiedTrainingError(f"{where}: pool_chord must be True or False, found "
                                         f"{self.pool_chord!r}")
        if self.pool_chord and self.method != "crown-ibp":
            raise CertifiedTrainingError(f"{where}: pool_chord relaxes max pooling in "
                                         f"CROWN-IBP's CROWN pass: it needs method "
                                         f"'crown-ibp', found {self.method!r}")
        if self.init not in INITS:
            raise CertifiedTrainingError(f"{where}: init must be one of {', '.join(INITS)}, "
                                         f"found {self.init!r}")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kappa"], d["clip"] = list(self.kappa), None if self.clip is None else list(self.clip)
        d["beta"] = list(self.beta)
        return d


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)


def smooth_ramp(t: float, mid: float = 0.25, power: float = 4.0) -> float:
    """The ramp's shape on ``t`` in [0, 1]: ``a t^power`` up to ``mid``, then the straight line
    to (1, 1) with the same value and slope at ``mid`` (auto_LiRPA's smoothed schedule)."""
    t = min(max(t, 0.0), 1.0)
    a = 1.0 / (mid ** (power - 1) * (mid + power * (1.0 - mid)))
    if t < mid:
        return a * t ** power
    return a * mid ** power + a * power * mid ** (power - 1) * (t - mid)


class Schedule:
    """eps, kappa and beta at each training step (a step is one batch; the first is 0)."""

    def __init__(self, config: CertifiedConfig, steps_per_epoch: int) -> None:
        if not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
            raise CertifiedTrainingError(f"certified training: steps_per_epoch must be a "
                                         f"positive int, found {steps_per_epoch!r}")
        self.config = config
        self.warmup = config.warmup_epochs * steps_per_epoch
        self.ramp = config.ramp_epochs * steps_per_epoch

    def progress(self, step: int) -> float:
        """How far along the ramp ``step`` is: 0 up to the first step of the ramp (as the
        reference's scheduler, whose ramp starts from 0 at that step), 1 from the target on."""
        if self.ramp == 0:
            return 0.0 if step < self.warmup else 1.0
        return min(1.0, max(0.0, (step - self.warmup) / self.ramp))

    def eps(self, step: int) -> float:
        if self.progress(step) == 0.0:
            return 0.0
        c = self.config
        # the switch to the straight line falls on a whole step, as the reference's
        mid = int(self.ramp * c.mid) / self.ramp if self.ramp and int(self.ramp * c.mid) else c.mid
        return c.eps * smooth_ramp(self.progress(step), mid, c.power)

    def kappa(self, step: int) -> float:
        k0, k1 = self.config.kappa
        return k0 + (k1 - k0) * self.progress(step)

    def fade(self, step: int) -> float:
        """``1 - eps_t / eps``: 1 up to the start of the ramp, 0 from the target on."""
        return max(0.0, 1.0 - self.eps(step) / self.config.eps)

    def beta(self, step: int) -> float:
        """CROWN-IBP's weight of the CROWN bound: ``beta[0] * fade + beta[1] * (1 - fade)``,
        written so that the default (1, 0) gives the reference's ``1 - eps_t / eps`` bit for
        bit."""
        b0, b1 = self.config.beta
        return max(0.0, b0 + (b1 - b0) * (self.eps(step) / self.config.eps))

    def reg_weight(self, step: int) -> float:
        """The warm-up regularisers' weight: ``reg * (1 - eps_t / eps)`` on the ramp (Shi et
        al. 2021), 0 at eps 0 (no boxes to regularise) and from the target on."""
        if self.config.reg == 0.0 or self.eps(step) == 0.0:
            return 0.0
        return self.config.reg * self.fade(step)


def ibp_init(model: Any, seed: int) -> None:
    """Shi et al. 2021's initialisation for IBP training: every weight matrix or kernel but the
    last drawn from N(0, 2 pi / fan_in^2), so that an interval's width keeps its size through
    a layer at initialisation instead of growing with the width (biases unchanged)."""
    rng = np.random.default_rng(seed)
    weights = [p for p in model.parameters() if len(p.shape) >= 2]
    for p in weights[:-1]:
        fan_in = int(np.prod(p.shape[1:]))
        std = math.sqrt(2.0 * math.pi) / fan_in
        p.assign(rng.normal(0.0, std, p.shape).astype(p.value.dtype))


def warmup_regularisers(relu_inputs: list[Box], lo: Any, hi: Any, tol: float) -> Any:
    """Shi et al. 2021's warm-up regularisers (their ``relu`` and ``tightness`` terms, averaged
    over the relus), recorded with ``F`` from the IBP boxes of the relus' inputs and the input
    box ``[lo, hi]``:

    * tightness: ``relu(tol - r0 / r) / tol`` where ``r0`` is the input box's mean radius and
      ``r`` a pre-activation box's: penalises intervals that grow by more than ``1 / tol``;
    * relu balance: ``(relu(tol - m) + relu(tol - v)) / tol`` where ``m`` (``v``) is the smaller
      of the ratios, active over inactive neurons, of the box centres' mean (variance about the
      layer's mean): penalises layers whose relus are mostly dead (or mostly active).

    A ratio with a zero denominator counts as 0 (the term is then constant, as theirs).
    """
    tiny = 1e-12
    r0 = F.mean(hi - lo) * 0.5
    total = None
    for box in relu_inputs:
        centre, radius = (box.hi + box.lo) * 0.5, (box.hi - box.lo) * 0.5
        tight = F.relu(tol - F.div(r0, F.clamp(F.mean(radius), lo=tiny, hi=math.inf))) * (1.0 / tol)
        active = F.relu(F.sign(F.detach(box.lo)))  # 1 where the relu is surely on
        inactive = F.relu(F.sign(F.neg(F.detach(box.hi))))  # 1 where surely off
        spread = F.square(centre - F.mean(centre))
        ratios = []
        for on, off in ((F.mean(centre * active), F.neg(F.mean(centre * inactive))),
                        (F.sum(spread * active), F.sum(spread * inactive))):
            ratio = F.div(on, F.clamp(off, lo=tiny, hi=math.inf))
            ratio = F.min(ratio, F.apply("inv", F.clamp(ratio, lo=tiny, hi=math.inf)))
            ratios.append(F.relu(tol - ratio))
        term = tight + (ratios[0] + ratios[1]) * (1.0 / tol)
        total = term if total is None else total + term
    if total is None:
        raise CertifiedTrainingError("certified training: the warm-up regularisers need a "
                                     "relu whose input depends on the perturbed input")
    return total * (1.0 / len(relu_inputs))


def l1_penalty(owner: Any, model: Any) -> Any:
    """The sum of the absolute values of every weight matrix or kernel of ``model`` (the
    parameters of two or more dimensions; biases and norm scales left out), recorded on
    ``owner`` (Xiao et al. 2019: L1 sparsity makes networks easier to certify)."""
    weights = [p for p in model.parameters() if len(p.shape) >= 2]
    if not weights:
        raise CertifiedTrainingError("certified training: l1 needs a weight matrix or kernel")
    total = None
    for p in weights:
        term = F.apply("sum", F.apply("abs", owner.use(p)))
        total = term if total is None else total + term
    return total


def smoothed_targets(labels: Any, logits: Any, smoothing: float) -> Any:
    """Class probabilities ``(1 - smoothing) * one_hot(labels) + smoothing / N`` (label
    smoothing) for ``logits`` of shape (B, N); ``labels`` a ref of class indices as floats."""
    n = int(logits.shape[-1])
    return F.apply("one_hot", labels, num_classes=n) * (1.0 - smoothing) + smoothing / n


def clip_grad_norm(params: list[Any], max_norm: float) -> float:
    """Scale every ``.grad`` so their global L2 norm is at most ``max_norm``; return the norm
    before clipping (PyTorch's ``clip_grad_norm_``)."""
    # a parameter's .grad is a tensor: its array is read and replaced
    grads = [getattr(p.grad, "array", p.grad) for p in params if p.grad is not None]
    if not grads:
        return 0.0
    total = math.sqrt(sum(float(to_host((g.astype(np.float64) ** 2).sum())) for g in grads))
    if math.isfinite(total) and total > max_norm:
        scale = max_norm / (total + 1e-6)
        for p in params:
            if p.grad is not None:
                g = getattr(p.grad, "array", p.grad)
                p.grad = g * namespace_of(g).asarray(scale, dtype=g.dtype)
    return total


class CertifiedTraining:
    """``fit``'s training-step hook for certified training (``fit(..., objective=this)``).

    ``fit`` calls ``bind`` once, then ``step(x, y)`` per batch (the loss; gradients accumulated
    into the parameters and clipped) and ``postfix``/``epoch_stats`` for its progress and
    metrics: the robust loss and the verified error of the batches (the fraction with some
    margin not proven positive by the training bounds), and the current eps.
    """

    def __init__(self, config: CertifiedConfig) -> None:
        if not isinstance(config, CertifiedConfig):
            raise CertifiedTrainingError(f"CertifiedTraining: expected a CertifiedConfig, found "
                                         f"{type(config).__name__}")
        self.config = config
        self.step_count = 0
        self._bound = False
        self._last: dict[str, float] = {}
        self._epoch = np.zeros(3)  # robust loss sum, verified errors, examples
        # the ref whose value the batch statistics read (the bounds, or the logits at eps 0) in
        # the graph being traced
        self._traced_stat: Any = None
        self._eager_stat: Any = None  # its value, on the eager tape

    def bind(self, model: Any, steps_per_epoch: int, backend: str, dtype: Any,
             device: str = "cpu", check_finite: bool = False) -> None:
        self.model = model
        self.schedule = Schedule(self.config, steps_per_epoch)
        if self.config.init == "ibp" and self.step_count == 0:
            ibp_init(model, self.config.seed)
        self.params = list(model.parameters())
        opts = Options(backend=backend, dtype=np.dtype(dtype).name, check_finite=check_finite,
                       device=device)
        crown = self.config.method == "crown-ibp"
        mixed = any(k > 0 for k in self.config.kappa)
        clip = self.config.clip

        eager = backend == "eager"

        def keep(owner: Any, stat: Any) -> None:
            # The batch statistics read this ref's value: a traced graph's node (read where the
            # compiled step runs), or on the eager tape its value, read now (no second pass).
            if eager:
                self._eager_stat = owner.value(stat)
            else:
                self._traced_stat = stat

        l1, smoothing = self.config.l1, self.config.smoothing

        def penalty(owner: Any, loss: Any) -> Any:
            # L1 on the weight matrices and kernels (not the biases), every phase
            return loss if l1 == 0.0 else loss + l1_penalty(owner, model) * l1

        def natural(owner: Any, x: Any, y: Any) -> Any:
            logits = clean_logits(model, x)
            keep(owner, logits)
            return penalty(owner, F.cross_entropy(logits, y))

        def robust(with_crown: bool, with_reg: bool) -> Any:
            def loss(owner: Any, x: Any, y: Any, eps: Any, kappa: Any, beta: Any,
                     reg: Any) -> Any:
                boxes: list[Box] | None = [] if with_reg else None
                lower = margin_lower_bounds(model, x, y, eps, beta=beta, crown=with_crown,
                                            clip=clip, relu_inputs=boxes,
                                            pool_chord=self.config.pool_chord)
                keep(owner, lower)
                rob = (robust_cross_entropy(lower, y) if smoothing == 0.0
                       else F.cross_entropy(-lower, smoothed_targets(y, lower, smoothing)))
                if mixed:
                    rob = F.cross_entropy(clean_logits(model, x), y) * kappa + rob * (1.0 - kappa)
                if boxes is not None:
                    lo, hi = input_box(x, eps, clip)
                    rob = rob + warmup_regularisers(boxes, lo, hi, self.config.reg_tol) * reg
                return penalty(owner, rob)
            return loss

        # One stepper per phase, so the warm-up and the target phase of CROWN-IBP (beta = 0) do
        # not pay for bounds they do not use (the reference skips them too), nor the target
        # phase for regularisers of weight 0.
        self._steppers = {"natural": Stepper(natural, opts),
                          "ibp": Stepper(robust(False, False), opts)}
        regularised = self.config.reg > 0
        if regularised:
            self._steppers["ibp-reg"] = Stepper(robust(False, True), opts)
        if crown:
            self._steppers["crown-ibp"] = Stepper(robust(True, False), opts)
            if regularised:
                self._steppers["crown-ibp-reg"] = Stepper(robust(True, True), opts)
        self.dtype = np.dtype(dtype)
        # Compiled on the host: run the graph here, so the bounds the loss was computed from
        # (the logits at eps 0) give the batch statistics too (no second pass). Otherwise: the
        # stepper, and the statistics from the rules run again on arrays.
        self._direct = backend == "compiled" and device == "cpu" and not check_finite
        self._fast = opts.fast_kernels
        # per compiled graph (by id): the statistics node, and its generated plan (None: it
        # could not be emitted, the graph is interpreted)
        self._stat_ids: dict[int, int] = {}
        self._plans: dict[int, Any] = {}
        self._norms = has_batch_norm(model)
        self._bound = True

    def _phase(self, eps: float, beta: float, reg: float = 0.0) -> str:
        if eps == 0.0:
            return "natural"
        crown = self.config.method == "crown-ibp" and beta >= CROWN_WEIGHT_FLOOR
        # the regularisers' weight is reg * fade: left out below the same floor
        regularised = reg > 0 and reg >= CROWN_WEIGHT_FLOOR * self.config.reg
        return ("crown-ibp" if crown else "ibp") + ("-reg" if regularised else "")

    def step(self, x: Any, y: Any) -> float:
        """One batch: the loss at this step's eps, kappa and beta; gradients accumulated into
        the parameters' ``.grad`` and clipped. Returns the loss."""
        if not self._bound:
            raise CertifiedTrainingError("CertifiedTraining.step before bind (fit calls bind)")
        s = self.schedule
        step = self.step_count
        eps, kappa, beta, reg = s.eps(step), s.kappa(step), s.beta(step), s.reg_weight(step)
        phase = self._phase(eps, beta, reg)
        labels = np.asarray(y)
        y_float = labels.astype(self.dtype)
        inputs = [x, y_float] if phase == "natural" else [
            x, y_float, *(np.asarray(v, dtype=self.dtype) for v in (eps, kappa, beta, reg))]
        stepper = self._steppers[phase]
        stat = None
        if self._direct:
            with fast_kernels(self._fast):
                value, pairs, stat = self._run_compiled(stepper, inputs)
        else:
            self._eager_stat = None
            value, pairs = stepper.value_and_grads(inputs, extra_key=self.model.training)
            stat, self._eager_stat = self._eager_stat, None
        for p, g in pairs:
            if g is not None:
                p.accumulate_grad(g)
        if math.isfinite(self.config.grad_clip):
            clip_grad_norm(self.params, self.config.grad_clip)
        self._batch_stats(np.asarray(x), labels, eps, beta, stat)
        if self._norms and self.model.training:
            with no_grad():  # the layers update their running statistics from the clean batch
                self.model(np.asarray(x, dtype=self.dtype))
        self.step_count += 1
        return float(to_host(value))

    def _run_compiled(self, stepper: Stepper, inputs: list[Any]
                      ) -> tuple[Any, list[tuple[Any, Any]], Any]:
        """The loss, parameter gradients and the statistics node's value (the margins' lower
        bounds; the logits at eps 0), from one run of the phase's compiled graph on the host
        (the stepper's graph, traced once per input shape): its generated plan (``codegen``,
        with that node as an extra output) from the second call on, the interpreter before and
        wherever no plan could be emitted. Runs in the caller's kernel set."""
        xs = [np.asarray(v, dtype=self.dtype) for v in inputs]
        c = stepper.compiled_for(xs, self.model.training)
        key = id(c)
        if key not in self._stat_ids:
            assert self._traced_stat is not None, "the loss was traced without its statistics"
            self._stat_ids[key] = self._traced_stat.id
            self._traced_stat = None
        stat_id = self._stat_ids[key]
        g = c.graph
        arrays = g.check_inputs("certified training step", xs + [p.array for p in g.params])
        got = None
        if key in self._plans:
            plan = self._plans[key]
            if plan is _UNSEEN:  # second call: emit (a one-off shape never pays for it)
                plan = self._plans[key] = codegen.emit_value_and_backward(g, arrays, (stat_id,))
            got = None if plan is None else plan.run(arrays)
        else:
            self._plans[key] = _UNSEEN
        if got is not None:
            value, stat, grads = got[0], got[1], got[2:]
        else:
            values = g.evaluate(arrays, np)
            grads = _grads_or_none(g.backprop(values, g.output, np.ones((), dtype=self.dtype)),
                                   g.inputs)
            value, stat = values[g.output], values[stat_id]
        first = len(xs)
        pairs = [(p, grads[first + k] if p.requires_grad else None)
                 for k, p in enumerate(g.params)]
        return value, pairs, stat

    def _batch_stats(self, x: Any, labels: Any, eps: float, beta: float,
                     stat: Any = None) -> None:
        """Robust loss and verified error of the batch from the bounds the loss used (before
        this step's update; ``stat``: those bounds, or at eps 0 the logits), else from the
        same bound rules run on arrays (at eps 0 a forward pass)."""
        lower = stat
        if eps == 0.0:
            # a point: the bounds are the margins themselves (from the logits of the loss's
            # graph, or of one forward pass; a bound pass would cost more)
            if stat is None:
                stat = clean_logits(self.model, x.astype(self.dtype))
            logits = np.asarray(to_host(stat), dtype=np.float64)
            lower = logits[np.arange(len(labels)), labels][:, None] - logits
        elif lower is None:
            crown = self._phase(eps, beta) == "crown-ibp"
            lower = margin_lower_bounds(self.model, x.astype(self.dtype), labels, eps,
                                        beta=beta, crown=crown, clip=self.config.clip,
                                        dtype=self.dtype, pool_chord=self.config.pool_chord)
        lower = np.asarray(lower, dtype=np.float64)
        shifted = -lower - (-lower).max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        rob = float(-log_probs[np.arange(len(labels)), labels].mean())
        others = lower.copy()
        others[np.arange(len(labels)), labels] = np.inf  # the true class's own zero margin
        unverified = int(np.sum(others.min(axis=1) <= 0))
        self._last = {"robust_loss": rob, "verified_error": unverified / max(len(labels), 1),
                      "eps": eps}
        self._epoch += (rob * len(labels), unverified, len(labels))

    def postfix(self) -> dict[str, str]:
        """The progress bar's fields for the last batch."""
        last = self._last
        if not last:
            return {}
        return {"eps": f"{last['eps']:.4f}", "rob": f"{last['robust_loss']:.4f}",
                "verr": f"{last['verified_error']:.3f}"}

    def epoch_stats(self) -> dict[str, float]:
        """Mean robust loss and verified error over the epoch's batches, and the eps reached;
        resets the accumulators."""
        total, wrong, seen = self._epoch
        self._epoch = np.zeros(3)
        if not seen:
            return {}
        return {"robust_loss": float(total / seen), "verified_error": float(wrong / seen),
                "eps": float(self._last.get("eps", 0.0))}


_UNSEEN = object()  # a compiled graph run once (interpreted): its plan is emitted on the next


def _grads_or_none(grads: list[Any], ids: list[int]) -> list[Any]:
    """The cotangents of nodes ``ids`` (``None`` where none arrived)."""
    return [grads[i] for i in ids]
