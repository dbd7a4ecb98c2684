"""Branch and bound over ReLU splits (beta-CROWN): complete verification for ReLU chains with
too many inputs to split the box (MNIST-sized networks).

The problem is ``bab.Spec``'s: an input box and a disjunction of conjunctions of output rows
``a_k . y <= b_k`` (the unsafe set). ``search``:

1. alpha-CROWN on the whole box (``compute_bounds``, every layer's slopes optimised), which
   refutes some conjunctions and gives every pre-activation its bounds; then one beta-CROWN
   pass (``bounds.beta``, no splits yet) on each open row, which also scores the unstable
   neurons (BaBSR: ``beta.babsr_scores``) and proposes the input minimising the bound;
2. repeatedly: the ``batch`` open domains with the worst margin are taken off the queue
   (``bab._Queue``) and each is split on its best-scored neuron into an active and an
   inactive child; the children inherit their parent's pre-activation bounds (valid on the
   parent, so on them) intersected with the split (the interval sweep tightens the later
   layers; ``refresh`` would also re-bound them by CROWN, which measured slower on MNIST-FC:
   about as many domains for 15-30% more CPU time), and get their batched beta-CROWN pass
   (``warm`` would start it from their parent's best alpha and beta per row: 1.4x faster on
   one MNIST-FC instance, 3x more domains and no answer in twice the time on another; at one
   BLAS thread, 60 CPU-s: 256x2 ``prop_1_0.03`` worst margin -0.22 against -0.33, still
   open, but 256x4 ``prop_0_0.03`` 4,300-4,500 domains against 2,483 and ``prop_5_0.03`` open
   at 60 s against proved in 35 s, with the slopes' step size 0.1 or 0.01; so it is off);
   a pair stops being optimised once its traced bound clears the threshold by twice what its
   parent's rigorous bound lost to round-off; the network is run on each pair's proposed
   input (a counterexample there ends the search); children with every conjunction refuted
   are dropped, the rest queued with their own best neuron to split next.

It stops at the first counterexample that ``confirm`` accepts (``sat``), when every domain is
proved (``unsat``), at the timeout, at the domain cap or when a domain has no unstable neuron
left to split and is still open (``unknown``, with the reason). Soundness is the bound engine's
(``kernel=True``: the float32 network) plus the split's: the two children of a domain cover
every execution of it (each float32 pre-activation value is >= 0 or <= 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linprog

from . import compute_bounds
from .bab import (
    MAX_DOMAINS,
    MAX_QUEUE_BYTES,
    BabError,
    BabResult,
    Models,
    Spec,
    _Clock,
    _inside,
    _margins,
    _Queue,
    _values,
    verify_property,
)
from .beta import (
    ALPHA_LR,
    Chain,
    babsr_scores,
    bound_pairs,
    child_bounds,
    refresh_bounds,
    relu_chain,
)
from .lp_bounds import tighten

Array = Any

__all__ = ["search", "supports", "verify_network"]

ROOT_STEPS = 20  # alpha-CROWN steps on the whole box (as `vnn --method alpha-crown`)
ROOT_BETA_STEPS = 20  # Adam steps of the first beta-CROWN pass on the whole box
# of a split domain's pass: 10 measured faster than 20 (256x4 `prop_0_0.03`: 2,475 domains in
# 9.6 CPU-s against 2,691 in 15.0; 5 steps needed 7,231 domains, 3 did not finish in 40 s)
CHILD_STEPS = 10
# domains split per round: 128 (256 children, about a pass of pairs each) over 64: 8.2 against
# 9.6 CPU-s on the same instance, same domains
BATCH = 128
PAIRS_PER_PASS = 256  # (domain, row) pairs in one batched beta-CROWN pass
REFRESH_BATCH = 64  # domains per CROWN refresh of their intermediate bounds
FARKAS_SCALE = 1e3  # what an empty domain's certificate must lift the bound by
# LPs (two per unstable neuron) that ``lp=True`` may spend on the root's intermediate bounds
LP_MAX = 2000
# the slopes' Adam step size in a warm-started child's pass (``warm``): Adam's first step moves
# every slope by about its step size, which at the cold start's 0.1 throws the parent's optimum
# away
WARM_ALPHA_LR = 0.01
FSB = 0  # candidates per domain of the FSB look-ahead (0: BaBSR)
FSB_CHUNK = 64  # domains per look-ahead evaluation
# FSB ranks a candidate by its better child ("max"; then the worse one), or its worse ("min"):
# "min" picked balanced splits that helped neither child on 256x4 prop_0_0.03 (no answer after
# 43,000 domains; "max" and BaBSR about 2,470)
FSB_REDUCE = "max"


def supports(model: Any) -> bool:
    """Whether ``model`` (a compiled network with a batch axis) is a ReLU chain this search
    handles, with at least one relu."""
    chain = relu_chain(model)
    return chain is not None and len(chain.pre) > 0


@dataclass
class _Pass:
    """What ``_Passes.run`` found: row lower bounds ``(N, K)`` (``-inf`` where not evaluated),
    the domains' bounds after the pass (flat), the flat neuron to split next per domain (-1:
    none left), the proposed inputs of the pairs ``(P, n)``, the passes run, and the best
    slopes and multipliers per domain and slot (``(N, R, S)`` float32, slot = the row's place
    in its conjunction; each domain has one conjunction open: the children's warm start; the
    given ones where a pair was not evaluated); per domain the most its traced bounds were
    above the rigorous ones (``gap``, ``(N,)``)."""

    lower: Array
    lo: Array
    hi: Array
    branch: Array
    primal: Array
    passes: int
    alpha: Array
    beta: Array
    gap: Array


class _Passes:
    """Batched beta-CROWN passes over (domain, row) pairs, chunked to the models' sizes."""

    def __init__(self, models: Models, spec: Spec, chains: dict[int, Chain], *, kernel: bool,
                 root_alpha: Array, per_conjunction: bool = False, fsb: int = 0,
                 skip: bool = False) -> None:
        self.models, self.spec, self.chains = models, spec, chains
        self.kernel = kernel
        self.skip = skip  # rigorous pass only where it may prove (``bound_pairs(prove_at)``)
        self.fsb = fsb  # candidates per domain of the FSB look-ahead (0: BaBSR's best alone)
        self.root_alpha = root_alpha  # (K, S): each row's starting slopes
        chain = chains[1]
        self.sizes = chain.sizes
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        # where a domain keeps each row's slopes and multipliers: its own slot, or (one
        # conjunction open per domain) the row's place inside its conjunction
        self.slot, self.n_slots = np.arange(len(spec.b)), max(1, len(spec.b))
        if per_conjunction:
            for c in range(spec.n_conj):
                rows = np.flatnonzero(spec.group == c)
                self.slot[rows] = np.arange(len(rows))
            self.n_slots = int(self.slot.max()) + 1 if len(spec.b) else 1

    def chain(self, size: int) -> Chain:
        if size not in self.chains:
            found = relu_chain(self.models.get(size))
            if found is None:
                raise BabError(f"bab: the batched network for {size} examples is not a relu "
                               "chain like the network itself")
            self.chains[size] = found
        return self.chains[size]

    def refresh(self, lo: Array, hi: Array, first: Array) -> tuple[Array, Array]:
        """The domains' bounds with every relu layer after ``first`` (per domain: the layer
        of the last split) re-bounded by CROWN (``beta.refresh_bounds``), in batches."""
        spec, new_lo, new_hi = self.spec, lo.copy(), hi.copy()
        n_in = spec.lower.shape[0]
        for start, stop, size in self.models.chunks(len(lo), REFRESH_BATCH):
            pad = np.concatenate([np.arange(start, stop), np.full(size - (stop - start),
                                                                   stop - 1)])
            layers = frozenset(range(int(first[start:stop].min()) + 1, len(self.sizes)))
            if not layers:
                continue
            r_lo, r_hi = refresh_bounds(
                self.models.get(size), self.chain(size), np.broadcast_to(spec.lower, (size, n_in)),
                np.broadcast_to(spec.upper, (size, n_in)), self.split(lo[pad]),
                self.split(hi[pad]), layers, self.kernel)
            new_lo[start:stop] = np.concatenate(r_lo, axis=1)[:stop - start]
            new_hi[start:stop] = np.concatenate(r_hi, axis=1)[:stop - start]
        return new_lo, new_hi

    def look_ahead(self, dom: Array, row: Array, lo: Array, hi: Array, sign: Array,
                   alpha: Array, beta: Array, top: Array) -> Array:
        """Filtered smart branching: of each domain's candidates ``top`` (its worst row's
        best by BaBSR), the one whose children bound best (``FSB_REDUCE``), by one evaluation
        of the traced bound per child (``beta.child_bounds``) with the domain's slopes and
        multipliers. Only chooses the split: soundness does not depend on it."""
        spec, out = self.spec, np.zeros(len(dom), dtype=np.int64)
        n_in = spec.lower.shape[0]
        for start in range(0, len(dom), FSB_CHUNK):
            at = np.arange(start, min(start + FSB_CHUNK, len(dom)))
            d, r = dom[at], row[at]
            vals = child_bounds(self.chains[1], spec.a[r], self.split(lo[d]), self.split(hi[d]),
                                self.split(sign[d]), self.split(alpha[d, self.slot[r]]),
                                self.split(beta[d, self.slot[r]]),
                                np.broadcast_to(spec.lower, (1, n_in)),
                                np.broadcast_to(spec.upper, (1, n_in)), top[at])
            worse, better = vals.min(axis=2), vals.max(axis=2)
            if FSB_REDUCE == "max":
                worse, better = better, worse
            pick = np.lexsort((better, worse), axis=-1)[:, -1]
            out[at] = top[at, pick]
        return out

    def deepen(self, lo: Array, hi: Array, sign: Array, first: Array, steps: int
               ) -> tuple[Array, Array]:
        """The domains' bounds with every unstable neuron of the relu layers after ``first``
        (per domain: the layer of its last split) re-bounded by beta-CROWN over the domain
        (``bound_pairs`` on the chain cut at that layer, rows ``+-e_j``, ``steps`` Adam steps):
        the split constraints then tighten the later layers, not only the output. Layer by
        layer, each using the ones before it."""
        spec, lo, hi = self.spec, lo.copy(), hi.copy()
        n_in = spec.lower.shape[0]
        for m in range(1, len(self.sizes)):
            a, b = self.offsets[m], self.offsets[m + 1]
            uns = (lo[:, a:b] < 0) & (hi[:, a:b] > 0) & (first[:, None] < m)
            dom, j = np.nonzero(uns)
            dom, j = np.repeat(dom, 2), np.repeat(j, 2)
            side = np.tile([1.0, -1.0], len(dom) // 2)  # +e_j: lower bound; -e_j: upper
            for start, stop, size in self.models.chunks(len(dom), PAIRS_PER_PASS):
                pad = np.concatenate([np.arange(start, stop),
                                      np.full(size - (stop - start), stop - 1)])
                d, jj, sd = dom[pad], j[pad], side[pad]
                full = self.chain(size)
                cut = Chain(full.layers[:m + 1], full.pre[:m], full.relus[:m], full.pre[m])
                rows = np.zeros((size, b - a))
                rows[np.arange(size), jj] = sd
                res = bound_pairs(self.models.get(size), cut,
                                  np.broadcast_to(spec.lower, (size, n_in)),
                                  np.broadcast_to(spec.upper, (size, n_in)), rows,
                                  self.split(lo[d])[:m], self.split(hi[d])[:m],
                                  self.split(sign[d])[:m], thresholds=np.full(size, np.inf),
                                  steps=steps, kernel=self.kernel)
                n = stop - start
                d, jj, sd, val = d[:n], jj[:n], sd[:n], res.lower[:n]
                low = sd > 0
                np.maximum.at(lo, (d[low], a + jj[low]), val[low])
                np.minimum.at(hi, (d[~low], a + jj[~low]), -val[~low])
        return lo, hi

    def layer_of(self, flat: Array) -> Array:
        """The relu layer of flat neuron indices."""
        return np.searchsorted(self.offsets, flat, side="right") - 1

    def split(self, flat: Array) -> list[Array]:
        return [flat[:, self.offsets[k]:self.offsets[k + 1]] for k in range(len(self.sizes))]

    def run(self, lo: Array, hi: Array, sign: Array, open_: Array, *, steps: int,
            alpha0: Array | None = None, beta0: Array | None = None,
            lift: Array | None = None, over: Callable[[], bool] = lambda: False,
            alpha_lr: float = ALPHA_LR) -> _Pass:
        """Bound every open row of each domain (flat bounds ``(N, S)``, signs, open
        conjunctions ``(N, J)``, at most one per domain when ``alpha0``/``beta0`` are given),
        starting from the slopes ``alpha0`` and multipliers ``beta0`` (``(N, R, S)`` by slot;
        default: the rows' root slopes and zero) with ``steps`` Adam steps; a pair stops being
        optimised once its traced bound is ``lift`` (per domain) above its threshold. Once
        ``over()`` the remaining pairs are left unevaluated (their rows stay open).
        ``alpha_lr``: the slopes' Adam step size."""
        spec = self.spec
        n_dom, n_rows, n_flat = len(lo), len(spec.b), lo.shape[1]
        row_open = open_[:, spec.group]  # (N, K)
        dom, row = np.nonzero(row_open)
        lower = np.full((n_dom, n_rows), -np.inf)
        new_lo, new_hi = lo.copy(), hi.copy()
        best_score = np.full(n_dom, -1.0)
        best_gap = np.full(n_dom, np.inf)
        branch = np.full(n_dom, -1, dtype=np.int64)
        best_row = np.zeros(n_dom, dtype=np.int64)
        top = np.full((n_dom, max(1, self.fsb)), -1, dtype=np.int64)
        primal = np.zeros((len(dom), spec.lower.shape[0]))
        gaps = np.zeros(n_dom)
        lift = np.zeros(n_dom) if lift is None else lift
        slot = self.slot
        if alpha0 is None:
            alpha = np.zeros((n_dom, self.n_slots, n_flat), np.float32)
        else:
            alpha = np.array(alpha0, np.float32)
        beta = (np.zeros((n_dom, self.n_slots, n_flat), np.float32) if beta0 is None
                else np.array(beta0, np.float32))
        # the starting slopes of each pair (its domain's, or its row's root ones)
        start_alpha = (self.root_alpha[row].astype(np.float32) if alpha0 is None
                       else alpha[dom, slot[row]])
        passes = 0
        for start, stop, size in self.models.chunks(len(dom), PAIRS_PER_PASS):
            if passes and over():
                break
            take = np.arange(start, stop)
            pad = np.concatenate([take, np.full(size - len(take), take[-1])])
            d, r = dom[pad], row[pad]
            x_lo = np.broadcast_to(spec.lower, (size, spec.lower.shape[0]))
            x_hi = np.broadcast_to(spec.upper, (size, spec.upper.shape[0]))
            # the pairs of one domain share its interval sweep (``bound_pairs(owner=...)``)
            uniq, at = np.unique(d, return_inverse=True)
            (_, _, d_size), = self.models.chunks(len(uniq), len(uniq))
            upad = np.concatenate([uniq, np.full(d_size - len(uniq), uniq[-1])])
            result = bound_pairs(self.models.get(size), self.chain(size), x_lo, x_hi,
                                 spec.a[r], self.split(lo[upad]), self.split(hi[upad]),
                                 self.split(sign[upad]), thresholds=spec.b[r] + lift[d],
                                 alpha0=self.split(start_alpha[pad]),
                                 beta0=self.split(beta[d, slot[r]]),
                                 steps=steps, kernel=self.kernel,
                                 prove_at=spec.b[r] if self.skip else None,
                                 alpha_lr=alpha_lr,
                                 owner=(self.models.get(d_size), self.chain(d_size), at))
            passes += 1
            n = len(take)
            d, r = d[:n], r[:n]
            lower[d, r] = result.lower[:n]
            new_lo[d] = np.concatenate(result.lo, axis=1)[:n]
            new_hi[d] = np.concatenate(result.hi, axis=1)[:n]
            alpha[d, slot[r]] = np.concatenate(result.alpha, axis=1)[:n]
            beta[d, slot[r]] = np.concatenate(result.beta, axis=1)[:n]
            primal[start:stop] = result.primal[:n]
            gap = result.traced[:n] - result.lower[:n]
            np.maximum.at(gaps, d, np.where(np.isfinite(gap), gap, 0.0))
            scores = np.concatenate(babsr_scores(result.lo, result.hi, result.mu), axis=1)[:n]
            gap = result.lower[:n] - spec.b[r]
            # each domain splits on the best neuron of its worst open row
            for p in np.argsort(gap):
                if gap[p] < best_gap[d[p]]:
                    best_gap[d[p]] = gap[p]
                    branch[d[p]] = int(np.argmax(scores[p]))
                    best_score[d[p]] = float(scores[p].max())
                    best_row[d[p]] = r[p]
                    if self.fsb:
                        cand = np.argsort(-scores[p])[:self.fsb]
                        top[d[p], :len(cand)] = np.where(scores[p][cand] > 0, cand, -1)
        branch[best_score <= 0] = -1
        if self.fsb:
            look = np.flatnonzero((branch >= 0) & (best_gap < 0))
            branch[look] = self.look_ahead(look, best_row[look], new_lo, new_hi, sign,
                                           alpha, beta, top[look])
        return _Pass(lower, new_lo, new_hi, branch, primal, passes, alpha, beta, gaps)


def search(models: Models, spec: Spec, confirm: Callable[[Array], tuple[Array, Array] | None],
           *, timeout: float | None = None, kernel: bool = True, batch: int = BATCH,
           steps: int = ROOT_BETA_STEPS, child_steps: int = CHILD_STEPS,
           root_steps: int = ROOT_STEPS, max_domains: int = MAX_DOMAINS,
           refresh: bool = False, warm: bool = False, per_conjunction: bool = False,
           lp: bool = False, lp_max: int = LP_MAX, fsb: int = FSB, skip: bool = True, deep: int = 0,
           warm_lr: float = WARM_ALPHA_LR,
           clock: Callable[[], float] | None = None,
           progress: Callable[[dict[str, Any]], None] | None = None,
           **unused: Any) -> BabResult:
    """Decide whether any input of ``spec``'s box is mapped into its unsafe set by splitting
    ReLUs (see the module docstring). ``models``: batched copies of a ReLU chain (``supports``);
    ``confirm``: as for ``bab.search``; ``batch``: domains split per round; ``steps``: Adam
    steps of the first beta-CROWN pass on the whole box; ``child_steps``: of the passes on
    split domains (which start from their parent's slopes and multipliers); ``root_steps``:
    alpha-CROWN steps on the whole box; ``refresh``: re-bound the layers after a split by
    CROWN in the children (tighter, dearer: measured slower on MNIST-FC); ``warm``: children
    start from their parent's slopes and multipliers (else from the root's slopes and zero);
    ``per_conjunction``: one search tree per open conjunction (see step 2); ``lp``: tighten the
    root's intermediate bounds by linear programs first (``bounds.lp_bounds``, at most
    ``lp_max`` LPs; off: on MNIST-FC 256x6 they gave almost nothing over alpha-CROWN's bounds
    for about 0.05-0.1 CPU-s each, see ``lp_bounds``); ``fsb``: split on the best of this
    many BaBSR candidates by a look-ahead at their children's traced bounds (filtered smart
    branching, ``_Passes.look_ahead``; 0: BaBSR's best; measured on MNIST-FC 256x4: 17% fewer
    domains with 8 candidates, the same CPU time); ``skip``: run the rigorous pass only on the
    pairs whose traced bound may prove them (12% less CPU on 256x4, the same domains);
    ``deep``: re-bound the children's later relu layers by beta-CROWN with this many Adam
    steps (``_Passes.deepen``; 0: off: on 256x4 ``prop_0_0.03`` 5 steps gave 24% fewer
    domains for 4.3x the CPU time); ``clock``: what
    ``timeout`` is measured by (default ``time.monotonic``, looked up at the call). Options of
    ``bab.search`` that do not apply here (the input-split rule, attack sizes) are ignored.
    """
    for name, value, least in (("batch", batch, 1), ("steps", steps, 1),
                               ("child_steps", child_steps, 1),
                               ("root_steps", root_steps, 0), ("max_domains", max_domains, 1),
                               ("lp_max", lp_max, 0), ("fsb", fsb, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BabError(f"bab: {name} must be an integer >= {least}, found {value!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not timeout > 0):
        raise BabError(f"bab: timeout must be a number of seconds > 0, found {timeout!r}")
    one = models.get(1)
    chain = relu_chain(one)
    if chain is None or not chain.pre:
        raise BabError("bab: relu splitting needs a network of linear layers and relus")
    n_in = chain.layers[0][0].shape[1]
    if spec.lower.shape[0] != n_in or spec.a.shape[1] != chain.layers[-1][0].shape[0]:
        raise BabError(f"bab: the property has {spec.lower.shape[0]} inputs and "
                       f"{spec.a.shape[1]} outputs, the network {n_in} and "
                       f"{chain.layers[-1][0].shape[0]}")
    timer = _Clock(timeout, clock or time.monotonic)
    result = BabResult("unknown")

    def finish(status: str, reason: str = "", cex: Any = None) -> BabResult:
        timer.stage("other")
        vars(result).update(status=status, reason=reason, counterexample=cex,
                            seconds=timer.now() - timer.start, stages=dict(timer.stages))
        return result

    def check(points: Array) -> Any:
        """The first point the network maps into the unsafe set, confirmed, or None."""
        if not len(points):
            return None
        pts = _inside(spec, points)
        vals = _values(spec, models.forward(pts)).min(axis=1)
        for p in np.argsort(vals)[:8]:
            if vals[p] > 0:
                break
            cex = confirm(pts[p])
            if cex is not None:
                return cex
        return None

    # 1. alpha-CROWN on the whole box, then a first beta-CROWN pass
    k = len(spec.b)
    feat = (1, *models.features)
    root = compute_bounds(one, spec.lower.reshape(feat), spec.upper.reshape(feat),
                          method="alpha-crown", spec=spec.a.reshape((1, k, -1)), kernel=kernel,
                          alpha_steps=root_steps, thresholds=spec.b[None], output_crown=False)
    assert root.spec is not None
    result.domains, result.passes = 1, 1
    all_open = np.ones((1, spec.n_conj), dtype=bool)
    still, _ = _margins(spec, np.asarray(root.spec[0]).reshape(1, k), all_open)
    timer.stage("bounds")
    if not still.any():
        result.proved = 1
        return finish("unsat", "proved by alpha-CROWN")
    lo = np.concatenate([np.asarray(root.nodes[p][0], np.float64).reshape(1, -1)
                         for p in chain.pre], axis=1)
    hi = np.concatenate([np.asarray(root.nodes[p][1], np.float64).reshape(1, -1)
                         for p in chain.pre], axis=1)
    if lp:  # the LP-tightened bounds are valid on the whole box, so on every domain
        t_lo, t_hi, _ = tighten(models, chain, spec.lower, spec.upper,
                                [v.reshape(-1) for v in _split_flat(chain, lo)],
                                [v.reshape(-1) for v in _split_flat(chain, hi)], kernel=kernel,
                                max_lps=lp_max, over=timer.over)
        lo, hi = np.concatenate(t_lo)[None], np.concatenate(t_hi)[None]
        timer.stage("lp")
    # the root's slopes, per row: CROWN's adaptive ones from its bounds (a warm start)
    root_alpha = np.repeat((hi > -lo).astype(np.float64), k, axis=0)
    passes = _Passes(models, spec, {1: chain}, kernel=kernel, root_alpha=root_alpha,
                     per_conjunction=per_conjunction, fsb=fsb, skip=skip)

    # 2. the root's pass (with ``per_conjunction``: one root per open conjunction, all in
    # one queue, so that a split chosen for one row does not multiply the work of the others;
    # measured slower on MNIST-FC, where the same splits serve every row)
    conj = np.flatnonzero(still[0])
    if not per_conjunction:
        open_ = still.copy()
    else:
        lo, hi = np.repeat(lo, len(conj), axis=0), np.repeat(hi, len(conj), axis=0)
        open_ = np.zeros((len(conj), spec.n_conj), dtype=bool)
        open_[np.arange(len(conj)), conj] = True
    sign = np.zeros_like(lo, dtype=np.int8)
    found = passes.run(lo, hi, sign, open_, steps=steps, over=timer.over)
    result.passes += found.passes
    timer.stage("bounds")
    cex = check(found.primal)
    timer.stage("attack")
    if cex is not None:
        return finish("sat", "counterexample proposed by the bound", cex)
    if timer.over():
        return finish("timeout", "the time ran out in the first pass")
    still, margin = _margins(spec, found.lower, open_)
    keep = still.any(axis=1)
    if not keep.any():
        result.proved = 1
        return finish("unsat", "proved by beta-CROWN on the whole box")
    if np.any(keep & (found.branch < 0)):
        return finish("unknown", "no unstable neuron left to split")
    n_flat = lo.shape[1]
    per_domain = 17 * n_flat + 4 * passes.n_slots * n_flat * warm + spec.n_conj + 40
    cap = int(min(max_domains, max(1, MAX_QUEUE_BYTES // per_domain)))
    queue = _Queue(cap)

    def kept(found: _Pass, keep: Array) -> dict[str, Array]:
        """What a queued domain keeps of a pass (its slopes and multipliers only if warm)."""
        out = {"branch": found.branch[keep], "gap": found.gap[keep]}
        if warm:  # float16: they only start the children's optimiser (any value is sound)
            out.update(alpha=found.alpha[keep].astype(np.float16),
                       beta=found.beta[keep].astype(np.float16))
        return out

    queue.push(lo=found.lo[keep], hi=found.hi[keep], sign=sign[keep], open=still[keep],
               margin=margin[keep], **kept(found, keep))
    result.max_queue = queue.size

    # 3. split until done
    while queue.size:
        if timer.over():
            return finish("timeout", f"{queue.size} domains open when the time ran out")
        got = queue.pop(batch)
        n = len(got["margin"])
        idx = np.arange(n)
        j = got["branch"]
        c_lo = np.concatenate([got["lo"], got["lo"]])
        c_hi = np.concatenate([got["hi"], got["hi"]])
        c_sign = np.concatenate([got["sign"], got["sign"]])
        c_lo[idx, j] = np.maximum(c_lo[idx, j], 0.0)  # active child: z >= 0
        c_sign[idx, j] = 1
        c_hi[n + idx, j] = np.minimum(c_hi[n + idx, j], 0.0)  # inactive child: z <= 0
        c_sign[n + idx, j] = -1
        c_open = np.concatenate([got["open"], got["open"]])
        c_alpha = np.concatenate([got["alpha"], got["alpha"]]) if warm else None
        c_beta = np.concatenate([got["beta"], got["beta"]]) if warm else None
        # a child climbs until its traced bound clears the threshold by twice the round-off
        # its parent's rigorous bound lost (else it would stop where the rigorous one fails)
        c_lift = 2.0 * np.concatenate([got["gap"], got["gap"]])
        timer.stage("split")
        if refresh:
            c_lo, c_hi = passes.refresh(c_lo, c_hi, passes.layer_of(np.concatenate([j, j])))
            timer.stage("refresh")
        if deep:
            c_lo, c_hi = passes.deepen(c_lo, c_hi, c_sign,
                                       passes.layer_of(np.concatenate([j, j])), deep)
            timer.stage("deepen")
        found = passes.run(c_lo, c_hi, c_sign, c_open, steps=child_steps,
                           alpha0=c_alpha, beta0=c_beta, lift=c_lift, over=timer.over,
                           alpha_lr=warm_lr if warm else ALPHA_LR)
        result.passes += found.passes
        result.domains += 2 * n
        timer.stage("bounds")
        cex = check(found.primal)
        timer.stage("attack")
        if cex is not None:
            return finish("sat", "counterexample proposed by the bound of a domain", cex)
        if timer.over():  # the pass may have stopped part-way
            return finish("timeout", f"{queue.size + 2 * n} domains open when the time ran out")
        c_lo, c_hi = found.lo, found.hi
        still, c_margin = _margins(spec, found.lower, c_open)
        keep = still.any(axis=1)
        fixed = np.flatnonzero(keep & (found.branch < 0))
        if len(fixed):
            # every neuron fixed: the domain is a linear program; its solution is a candidate
            # counterexample and its duals the best beta, evaluated rigorously
            points, duals, f_open = _linear_programs(passes, chain, spec, c_lo[fixed],
                                                     c_hi[fixed], c_sign[fixed], still[fixed])
            cex = check(points)
            timer.stage("attack")
            if cex is not None:
                return finish("sat", "counterexample from the linear program of a domain", cex)
            f_beta = np.zeros((len(fixed), passes.n_slots, n_flat), np.float32)
            f_dom, f_row = np.nonzero(f_open[:, spec.group])
            f_beta[f_dom, passes.slot[f_row]] = duals
            fixed_pass = passes.run(c_lo[fixed], c_hi[fixed], c_sign[fixed], f_open, steps=1,
                                    alpha0=found.alpha[fixed], beta0=f_beta)
            result.passes += fixed_pass.passes
            f_still, _ = _margins(spec, fixed_pass.lower, f_open)
            timer.stage("bounds")
            if f_still.any():
                # rows are bounded one at a time: a conjunction of several rows, each reachable
                # on the domain but not all at once, stays open here (no combined row yet)
                several = np.bincount(spec.group, minlength=spec.n_conj) > 1
                why = ("a conjunction of several rows, each reachable on its own, is bounded row "
                       "by row" if (f_still & several[None, :]).any() else "its linear "
                       "program's bound is within round-off of the threshold")
                return finish("unknown", f"a domain with every neuron fixed stays open ({why})")
            keep[fixed] = False
        result.proved += int(keep.size - np.count_nonzero(keep))
        if not queue.push(lo=c_lo[keep], hi=c_hi[keep], sign=c_sign[keep], open=still[keep],
                          margin=c_margin[keep], **kept(found, keep)):
            return finish("unknown", f"domain cap: more than {cap} open domains")
        result.max_queue = max(result.max_queue, queue.size)
        if progress is not None:
            progress({"domains": result.domains, "proved": result.proved, "open": queue.size,
                      "seconds": timer.now() - timer.start,
                      "margin": float(queue.fields["margin"][:queue.size].min())
                      if queue.size else float("inf")})
    return finish("unsat", f"all {result.domains} domains proved")


def _split_flat(chain: Chain, flat: Array) -> list[Array]:
    """Flat per-domain bounds ``(N, S)`` as one array per relu layer."""
    cuts = np.cumsum(chain.sizes)[:-1]
    return np.split(flat, cuts, axis=1)


def _linear_programs(passes: _Passes, chain: Chain, spec: Spec, lo: Array, hi: Array,
                     sign: Array, open_: Array) -> tuple[Array, Array, Array]:
    """For domains with every neuron fixed (the network affine on each): per open row the
    linear program ``min a . y`` over the box and the split constraints (scipy's HiGHS, plain
    float64). Returns the minimisers (candidates), one multiplier vector per pair (the
    constraints' duals: beta-CROWN's optimal beta) and which conjunctions are still open (those
    stay: the rigorous pass decides)."""
    points, rows_beta = [], []
    for d in range(len(lo)):
        active = lo[d] >= 0
        m, v = np.eye(spec.lower.shape[0]), np.zeros(spec.lower.shape[0])
        a_ub, b_ub, offset = [], [], 0
        for w, b in chain.layers[:-1]:
            m, v = w @ m, w @ v + b
            n = w.shape[0]
            s = sign[d, offset:offset + n].astype(np.float64)
            a_ub.append(-s[:, None] * m)  # s z >= 0
            b_ub.append(s * v)
            on = active[offset:offset + n]
            m, v = on[:, None] * m, on * v
            offset += n
        w, b = chain.layers[-1]
        m, v = w @ m, w @ v + b
        a_all, b_all = np.concatenate(a_ub), np.concatenate(b_ub)
        for k in np.flatnonzero(open_[d][spec.group]):
            res = linprog(spec.a[k] @ m, A_ub=a_all, b_ub=b_all,
                          bounds=list(zip(spec.lower, spec.upper, strict=True)),
                          method="highs")
            if res.status == 0:
                points.append(res.x)
            elif res.status == 2:  # empty: the duals of the least violation, scaled up, make
                res = _least_violation(a_all, b_all, spec)  # the bound as large as needed
            marg = getattr(getattr(res, "ineqlin", None), "marginals", None)
            rows_beta.append(np.zeros(lo.shape[1]) if marg is None else -np.asarray(marg))
    # one row of duals per pair, in ``_Passes.run``'s order (domains, then their open rows)
    duals = np.array(rows_beta) if rows_beta else np.zeros((0, lo.shape[1]))
    return (np.array(points) if points else np.zeros((0, spec.lower.shape[0])), duals, open_)


def _least_violation(a_ub: Array, b_ub: Array, spec: Spec) -> Any:
    """The LP ``min sum(t)`` over the box with ``a_ub x - t <= b_ub``, ``t >= 0`` (positive
    when the constraints have no solution), its duals scaled so that their Lagrangian term
    outweighs the output row (a Farkas certificate of emptiness, as a beta)."""
    n, m = a_ub.shape[1], a_ub.shape[0]
    res = linprog(np.concatenate([np.zeros(n), np.ones(m)]),
                  A_ub=np.concatenate([a_ub, -np.eye(m)], axis=1), b_ub=b_ub,
                  bounds=list(zip(spec.lower, spec.upper, strict=True)) + [(0, None)] * m,
                  method="highs")
    if res.status == 0 and res.fun > 0:
        res.ineqlin.marginals = res.ineqlin.marginals * (FARKAS_SCALE / res.fun)
    return res


def verify_network(net: Any, prop: Any, *, timeout: float | None = None, max_batch: int = 256,
                   **options: Any) -> BabResult:
    """``bab.verify_property`` with this search, for a ``torchlean.vnn.instance.Network`` (as
    ``bab.verify_network``): the entry point of ``torchlean vnn --method bab`` for ReLU chains
    with many inputs."""
    def factory(n: int) -> Any:
        return net.model if n == 1 else net.batched(n)

    models = Models(factory, max_batch=max_batch)
    return verify_property(models, prop, net.run, timeout=timeout, search_fn=search, **options)
