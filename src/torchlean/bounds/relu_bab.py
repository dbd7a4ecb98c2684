"""Branch and bound over ReLU splits (beta-CROWN): complete verification for ReLU chains with
too many inputs to split the box (MNIST-sized networks).

The problem is ``bab.Spec``'s: an input box and a disjunction of conjunctions of output rows
``a_k . y <= b_k`` (the unsafe set). ``search``:

1. alpha-CROWN on the whole box (``compute_bounds``, every layer's slopes optimised), which
   refutes some conjunctions and gives every pre-activation its bounds; then one beta-CROWN
   pass (``bounds.beta``, no splits yet) on each open row, which also scores the unstable
   neurons (BaBSR: ``beta.babsr_scores``) and proposes the input minimising the bound;
2. repeatedly: the ``batch`` open domains with the worst margin are taken off the queue
   (``bab._Queue``) and each is split on its best-scored neuron into an active and an inactive
   child; the children inherit their parent's pre-activation bounds (valid on the parent, so
   on them) intersected with the split, the layers after the split re-bounded by CROWN on the
   child (``refresh``), and all (child, open row) pairs are bounded by one
   batched beta-CROWN pass (alpha and beta optimised together, then evaluated rigorously); the
   network is run on each pair's proposed input (a counterexample there ends the search);
   children with every conjunction refuted are dropped, the rest queued with their own best
   neuron to split next.

It stops at the first counterexample that ``confirm`` accepts (``sat``), when every domain is
proved (``unsat``), at the timeout, at the domain cap or when a domain has no unstable neuron
left to split and is still open (``unknown``, with the reason). Soundness is the bound engine's
(``kernel=True``: the float32 network) plus the split's: the two children of a domain cover
every execution of it (each float32 pre-activation value is >= 0 or <= 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
from .beta import Chain, babsr_scores, bound_pairs, refresh_bounds, relu_chain

Array = Any

__all__ = ["search", "supports", "verify_network"]

ROOT_STEPS = 20  # alpha-CROWN steps on the whole box (as `vnn --method alpha-crown`)
PAIRS_PER_PASS = 256  # (domain, row) pairs in one batched beta-CROWN pass
REFRESH_BATCH = 64  # domains per CROWN refresh of their intermediate bounds
FARKAS_SCALE = 1e3  # what an empty domain's certificate must lift the bound by


def supports(model: Any) -> bool:
    """Whether ``model`` (a compiled network with a batch axis) is a ReLU chain this search
    handles, with at least one relu."""
    chain = relu_chain(model)
    return chain is not None and len(chain.pre) > 0


class _Passes:
    """Batched beta-CROWN passes over (domain, row) pairs, chunked to the models' sizes."""

    def __init__(self, models: Models, spec: Spec, chains: dict[int, Chain], *, steps: int,
                 kernel: bool, root_alpha: list[Array]) -> None:
        self.models, self.spec, self.chains = models, spec, chains
        self.steps, self.kernel, self.root_alpha = steps, kernel, root_alpha
        chain = chains[1]
        self.sizes = chain.sizes
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)

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

    def layer_of(self, flat: Array) -> Array:
        """The relu layer of flat neuron indices."""
        return np.searchsorted(self.offsets, flat, side="right") - 1

    def split(self, flat: Array) -> list[Array]:
        return [flat[:, self.offsets[k]:self.offsets[k + 1]] for k in range(len(self.sizes))]

    def run(self, lo: Array, hi: Array, sign: Array, open_: Array, beta0: Array | None = None,
            steps: int | None = None, over: Callable[[], bool] = lambda: False
            ) -> tuple[Array, Array, Array, Array, Array, Array, int]:
        """Bound every open row of each domain (flat bounds ``(N, S)``, signs, open
        conjunctions ``(N, J)``): row lower bounds ``(N, K)`` (``-inf`` for rows not
        evaluated), the domains' bounds after the pass, the flat neuron to split next per domain
        (-1: none left), its score, the proposed inputs of the pairs ``(P, n)`` and the passes.
        Once ``over()`` the remaining pairs are left unevaluated (their rows stay open)."""
        spec = self.spec
        n_dom = len(lo)
        row_open = open_[:, spec.group]  # (N, K)
        dom, row = np.nonzero(row_open)
        lower = np.full((n_dom, len(spec.b)), -np.inf)
        new_lo, new_hi = lo.copy(), hi.copy()
        best_score = np.full(n_dom, -1.0)
        best_gap = np.full(n_dom, np.inf)
        branch = np.full(n_dom, -1, dtype=np.int64)
        primal = np.zeros((len(dom), spec.lower.shape[0]))
        passes = 0
        for start, stop, size in self.models.chunks(len(dom), PAIRS_PER_PASS):
            if passes and over():
                break
            take = np.arange(start, stop)
            pad = np.concatenate([take, np.full(size - len(take), take[-1])])
            d, r = dom[pad], row[pad]
            model = self.models.get(size)
            chain = self.chain(size)
            alpha0 = [a[r] for a in self.root_alpha]
            x_lo = np.broadcast_to(spec.lower, (size, spec.lower.shape[0]))
            x_hi = np.broadcast_to(spec.upper, (size, spec.upper.shape[0]))
            result = bound_pairs(model, chain, x_lo, x_hi, spec.a[r], self.split(lo[d]),
                                 self.split(hi[d]), self.split(sign[d]),
                                 thresholds=spec.b[r], alpha0=alpha0,
                                 beta0=None if beta0 is None else self.split(beta0[pad]),
                                 steps=self.steps if steps is None else steps,
                                 kernel=self.kernel)
            passes += 1
            n = len(take)
            d, r = d[:n], r[:n]
            lower[d, r] = result.lower[:n]
            new_lo[d] = np.concatenate(result.lo, axis=1)[:n]
            new_hi[d] = np.concatenate(result.hi, axis=1)[:n]
            primal[start:stop] = result.primal[:n]
            scores = np.concatenate(babsr_scores(result.lo, result.hi, result.mu), axis=1)[:n]
            gap = result.lower[:n] - spec.b[r]
            # each domain splits on the best neuron of its worst open row
            for p in np.argsort(gap):
                if gap[p] < best_gap[d[p]]:
                    best_gap[d[p]] = gap[p]
                    branch[d[p]] = int(np.argmax(scores[p]))
                    best_score[d[p]] = float(scores[p].max())
        branch[best_score <= 0] = -1
        return lower, new_lo, new_hi, branch, best_score, primal, passes


def search(models: Models, spec: Spec, confirm: Callable[[Array], tuple[Array, Array] | None],
           *, timeout: float | None = None, kernel: bool = True, batch: int = 64,
           steps: int = 20, root_steps: int = ROOT_STEPS, max_domains: int = MAX_DOMAINS,
           refresh: bool = True,
           clock: Callable[[], float] | None = None,
           progress: Callable[[dict[str, Any]], None] | None = None,
           **unused: Any) -> BabResult:
    """Decide whether any input of ``spec``'s box is mapped into its unsafe set by splitting
    ReLUs (see the module docstring). ``models``: batched copies of a ReLU chain (``supports``);
    ``confirm``: as for ``bab.search``; ``batch``: domains split per round; ``steps``: Adam
    steps of each beta-CROWN pass; ``root_steps``: alpha-CROWN steps on the whole box;
    ``refresh``: re-bound the layers after a split by CROWN in the children (tighter, dearer);
    ``clock``: what ``timeout`` is measured by (default ``time.monotonic``, looked up at the
    call). Options
    of ``bab.search`` that do not apply here (the input-split rule, attack sizes) are ignored.
    """
    for name, value, least in (("batch", batch, 1), ("steps", steps, 1),
                               ("root_steps", root_steps, 0), ("max_domains", max_domains, 1)):
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
        return finish("unsat", "proved by alpha-CROWN")
    lo = np.concatenate([np.asarray(root.nodes[p][0], np.float64).reshape(1, -1)
                         for p in chain.pre], axis=1)
    hi = np.concatenate([np.asarray(root.nodes[p][1], np.float64).reshape(1, -1)
                         for p in chain.pre], axis=1)
    # the root's slopes, per row: CROWN's adaptive ones from its bounds (a warm start)
    cuts = np.cumsum(chain.sizes)[:-1]
    root_alpha = [np.repeat((u > -l).astype(np.float64), k, axis=0)
                  for l, u in zip(np.split(lo, cuts, axis=1), np.split(hi, cuts, axis=1),
                                  strict=True)]
    passes = _Passes(models, spec, {1: chain}, steps=steps, kernel=kernel,
                     root_alpha=root_alpha)

    def bound(lo: Array, hi: Array, sign: Array, open_: Array) -> tuple[Any, ...]:
        """One batched pass; a confirmed counterexample among its proposals (or None)."""
        lower, new_lo, new_hi, branch, _, primal, n_pass = passes.run(lo, hi, sign, open_,
                                                                      over=timer.over)
        result.passes += n_pass
        timer.stage("bounds")
        cex = check(primal)
        timer.stage("attack")
        return cex, lower, new_lo, new_hi, branch

    sign = np.zeros_like(lo, dtype=np.int8)
    cex, lower, lo, hi, branch = bound(lo, hi, sign, still)
    if cex is not None:
        return finish("sat", "counterexample proposed by the bound", cex)
    if timer.over():
        return finish("timeout", "the time ran out in the first pass")
    still, margin = _margins(spec, lower, still)
    if not still.any():
        return finish("unsat", "proved by beta-CROWN on the whole box")
    if branch[0] < 0:
        return finish("unknown", "no unstable neuron left to split")
    per_domain = 16 * lo.shape[1] + lo.shape[1] + spec.n_conj + 24
    cap = int(min(max_domains, max(1, MAX_QUEUE_BYTES // per_domain)))
    queue = _Queue(cap)
    queue.push(lo=lo, hi=hi, sign=sign, open=still, margin=margin, branch=branch)
    result.max_queue = 1

    # 2. split until done
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
        timer.stage("split")
        if refresh:
            first = passes.layer_of(np.concatenate([j, j]))
            c_lo, c_hi = passes.refresh(c_lo, c_hi, first)
            timer.stage("refresh")
        cex, lower, c_lo, c_hi, c_branch = bound(c_lo, c_hi, c_sign, c_open)
        result.domains += 2 * n
        if cex is not None:
            return finish("sat", "counterexample proposed by the bound of a domain", cex)
        if timer.over():  # the pass may have stopped part-way
            return finish("timeout", f"{queue.size + 2 * n} domains open when the time ran out")
        still, c_margin = _margins(spec, lower, c_open)
        keep = still.any(axis=1)
        fixed = np.flatnonzero(keep & (c_branch < 0))
        if len(fixed):
            # every neuron fixed: the domain is a linear program; its solution is a candidate
            # counterexample and its duals the best beta, evaluated rigorously
            points, duals, f_open = _linear_programs(passes, chain, spec, c_lo[fixed],
                                                     c_hi[fixed], c_sign[fixed], still[fixed])
            cex = check(points)
            timer.stage("attack")
            if cex is not None:
                return finish("sat", "counterexample from the linear program of a domain", cex)
            lower, _, _, _, _, _, n_pass = passes.run(c_lo[fixed], c_hi[fixed], c_sign[fixed],
                                                      f_open, beta0=duals, steps=1)
            result.passes += n_pass
            f_still, _ = _margins(spec, lower, f_open)
            timer.stage("bounds")
            if f_still.any():
                return finish("unknown", "a domain with every neuron fixed stays open (its "
                              "linear program's bound is within round-off of the threshold)")
            keep[fixed] = False
        if not queue.push(lo=c_lo[keep], hi=c_hi[keep], sign=c_sign[keep], open=still[keep],
                          margin=c_margin[keep], branch=c_branch[keep]):
            return finish("unknown", f"domain cap: more than {cap} open domains")
        result.max_queue = max(result.max_queue, queue.size)
        if progress is not None:
            progress({"domains": result.domains, "open": queue.size,
                      "seconds": timer.now() - timer.start})
    return finish("unsat", f"all {result.domains} domains proved")


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
