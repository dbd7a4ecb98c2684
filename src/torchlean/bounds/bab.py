"""Branch and bound over input boxes: complete verification for low-dimensional inputs.

One bound pass (CROWN, alpha-CROWN) over a whole input box either refutes the unsafe set or
says nothing. ``search`` splits the box until every piece (a *domain*) is proved safe, a point
the float32 network maps into the unsafe set is found, the time runs out or the queue of open
domains reaches its cap. The problem (``Spec``) is the VNN-LIB one: an input box and a
disjunction of conjunctions of linear output constraints ``A_j y <= b_j``, the unsafe set.

The loop (``search``):

1. an attack on the whole box first (projected sign-gradient steps from random points, each
   chain in its own box), as the reference verifiers do: most ``sat`` instances end here;
2. one bound pass on the box; a conjunction is *refuted* on a domain when one of its rows has a
   certified lower bound above its threshold, and stays refuted on every sub-box;
3. repeatedly: the ``batch`` open domains with the worst bound (most negative margin) are taken
   off the queue; the network runs on their centres (a cheap falsification) and gives the
   gradient of the deciding row there; each domain is split in half along the input with the
   largest *smear* ``|gradient| x width`` (the dimension whose width moves the bound most); all
   children are bounded in ONE batched bound pass (the engine takes a batch of boxes); children
   with every conjunction refuted are dropped, the others queued. Every few rounds the worst
   domains are attacked.

Look-ahead (``lookahead="all"``; ``search``'s default is ``"off"``, ``verify_network`` looks
ahead for its first ``LOOKAHEAD_DOMAINS`` bounded domains, then starts afresh without): each
domain is split along each of its best ``LOOKAHEAD_INPUTS`` inputs by that score (on ACAS Xu:
all 5), every candidate's halves are bounded in the same batched pass, and the split kept is
the one whose worse half gains most over the parent's margin, then whose better half does
(FSB-style strong branching over inputs);
where none gains, the score's own split. The score reads the bound's linear dependence on the
inputs and is blind to how an input's width loosens the relaxations: on ACAS Xu ``5_7``
property 1 it never split the heading (width 0.5 in every open domain after 100,000 domains, all
stuck at margin -5.85, a timeout at 116 CPU-s); looking ahead it is ``unsat`` in 2-3 CPU-s.

The bound pass (``method="crown"``) on a network that is a plain chain of affine layers and
relus (``Models(intermediate="pairs")``, the default) is ``bounds.chain_crown``: intervals, the
parent's pre-activation bounds intersected, then CROWN for each box's *own* unstable neurons
only (stacked (box, neuron) rows: on ACAS Xu 2-9x the domains per CPU-second of the engine's
pass over the batch's union of unstable neurons). Its row bounds come as linear functions of the
input, valid on every sub-box: each child is first tried with its parent's function (an
``O(n)`` concretization; a child it proves gets no pass), and the split goes to the input whose
coefficient times width, in the rows still open, is largest (``split="auto"``; the reference's
"sb" rule). Once the queue holds a quarter of its cap, the domains nearest a proof are taken
first, so it shrinks. Once ``alpha_after`` domains have been bounded, the children CROWN leaves
open also get ``alpha_steps`` of alpha-CROWN (``Models.alpha_pairs``: the relu lower slopes of
every bound optimised, ``bounds.alpha``), whose tighter intermediate bounds their own children
inherit. On ACAS Xu property 1 CROWN's intermediate bounds stall on boxes straddling an early
neuron's hyperplane (the networks' large internal values cancel at the output): on ``4_9`` the
worst margin stays near -60 from depth 10 on, where alpha-CROWN's is -3; with it the 17
property-1 instances that timed out at 116 s are answered. Easy instances end before
``alpha_after`` and never pay for it; where alpha-CROWN proves under a quarter of the boxes it
is given (CROWN's cheap splits then win: ``3_3`` property 2), it is given up after a probe.
(That is ``search``'s default; ``verify_network``, the ``torchlean vnn`` path, gives no alpha
since the chain pass got cheaper: see ``VERIFY_ALPHA_STEPS``.) A search that timed out can go
on from its open domains (``resume``).
Other networks: CROWN on the child's box with every pre-activation bound also intersected
with the parent's (valid on the larger box, so on the child's): a little tighter than CROWN alone,
at no cost. With ``refresh_every=r > 1`` the CROWN pass over the intermediate layers (nearly
all of a pass's time) runs only every ``r``-th split and the children in between use the
inherited bounds and their own intervals (cheaper, looser: on ACAS Xu it needed more domains
than it saved, hence the default 1). Other methods (``ibp``, ``alpha-crown``) run
``compute_bounds`` on each box.

Soundness. ``unsat`` rests on the bounds alone (with ``kernel=True``, the default, the engine's
and ``bounds.chain_crown``'s bounds enclose the float32 kernels' results in round-to-nearest:
see ``torchlean.bounds``; a parent's linear bound holds on its children's boxes); the
children of a split cover their parent exactly (the split point is a float64 number shared by
both halves), and a row is called refuted only when its rigorous float64 lower bound is strictly
above the threshold (the caller rounds thresholds up). ``sat`` is reported only with a point
that ``confirm`` accepted: the caller runs the network on it and checks the exact property.
Everything else (the split heuristic, the attacks, the order) only decides how fast it goes.

Memory is bounded: when the queue would exceed ``max_domains`` open domains the search stops
with ``unknown`` (reason ``"domain cap"``), never an out-of-memory kill.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import METHODS, compute_bounds, properties
from .alpha import optimise
from .chain_crown import ChainCrown, concretize
from .engine import BoundsError, Propagation
from .forward import Chain, chain_of, forward_bounds

Array = Any

__all__ = ["BabError", "BabResult", "Models", "Resume", "Spec", "search", "shift_progress",
           "spec_of_region", "verify_network", "verify_property"]

STATUSES = ("unsat", "sat", "unknown", "timeout")
# input to split: largest |coefficient of the input in the deciding row's bound| x width,
# largest |gradient at the centre| x width, or relative width
SPLITS = ("auto", "bound", "smear", "widest")
INTERMEDIATE = ("pairs", "crown", "forward")
MAX_DOMAINS = 200_000  # open domains kept at most (each holds two boxes of n float64s)
MAX_QUEUE_BYTES = 512 * 2**20  # and at most this much memory for their boxes
GRADIENT_BATCH = 64  # reverse mode slows down sharply on bigger batches (measured)
ATTACK_EVERY = 8  # rounds of splitting between two attacks on the worst domains
PAIR_BATCH = 1024  # boxes per pass on the chain path (verify_network)
ALPHA_BATCH = 16  # boxes per alpha-CROWN pass (Models.alpha_pairs): its cost per box grows with
# the batch (the optimised rows are the union of the boxes' unstable neurons): 8.9 ms a box at 16,
# 17.7 at 64, 26.1 at 256 (5 steps, 4_9 property 1, depth-10 boxes)
ALPHA_LR = 0.2  # its Adam step size (compute_bounds' default)
ALPHA_STEPS = 5  # alpha-CROWN steps on the children CROWN leaves open (0: never; 5 took less
# CPU than 10 on 3 of 4 property-1 instances)
VERIFY_ALPHA_STEPS = 0  # ... in verify_network (see there)
ALPHA_AFTER = 1024  # ... once this many domains have been bounded (easy instances never pay;
# on the property-1 instances 1,024 took 1.1-3.6x less CPU than 2,048)
ALPHA_PER_ROUND = 256  # open children given alpha-CROWN per round at most
ALPHA_PROBE = 128  # after this many boxes, alpha-CROWN stays on only if it proved at least
ALPHA_MIN_RATE = 0.25  # this share of the boxes CROWN left open
# look-ahead splitting: "all": every domain tries its LOOKAHEAD_INPUTS best inputs by the split
# heuristic and keeps the split whose worse half bounds best; "off": the heuristic's input
LOOKAHEADS = ("all", "off")
LOOKAHEAD = "off"  # search's default; verify_network looks ahead first (LOOKAHEAD_DOMAINS)
LOOKAHEAD_INPUTS = 8
LOOKAHEAD_GAIN = 1e-3  # a half closing less than this share of its parent's gap gains none
LOOKAHEAD_DOMAINS = 8000  # verify_network: domains bounded looking ahead before the heuristic's
# splits start afresh (a budget in work, the same on every machine; it was 10 s, which on a 2-core
# Zen 3 cut 4_9 property 1 off at 5,001 of the 5,431 domains it needs, and the plain search then
# timed out; every other ACAS Xu property-1 instance needs at most 4,051. Where the look-ahead
# does not end the search it is a loss: 3_3 property 2 spent 10.6 s on 43,451 domains there.)


class BabError(BoundsError):
    """A branch-and-bound problem that does not fit the network, or a bad option."""


@dataclass
class Spec:
    """One input box and the unsafe set over it, flat.

    ``lower``/``upper`` (float64, ``(n,)``): a box containing the exact one (rounded outward),
    bounded by the engine; ``inner_lower``/``inner_upper``: the exact box rounded inward to the
    network's float type, where attack points are taken. ``a`` (``(K, m)``) and ``b``
    (``(K,)``, rounded up): the rows ``a_k . y <= b_k``; ``group[k]`` is the conjunction row
    ``k`` belongs to (``0 .. n_conj - 1``). The unsafe set is the union over conjunctions of
    the points meeting all of its rows.
    """

    lower: Array
    upper: Array
    inner_lower: Array
    inner_upper: Array
    a: Array
    b: Array
    group: Array
    n_conj: int

    def __post_init__(self) -> None:
        self.lower = np.asarray(self.lower, np.float64).reshape(-1)
        self.upper = np.asarray(self.upper, np.float64).reshape(-1)
        self.inner_lower = np.asarray(self.inner_lower).reshape(-1)
        self.inner_upper = np.asarray(self.inner_upper).reshape(-1)
        self.a = np.asarray(self.a, np.float64)
        self.b = np.asarray(self.b, np.float64).reshape(-1)
        self.group = np.asarray(self.group, np.int64).reshape(-1)
        n, k = self.lower.shape[0], self.b.shape[0]
        if (self.upper.shape != (n,) or self.inner_lower.shape != (n,)
                or self.inner_upper.shape != (n,)):
            raise BabError(f"bab: the box ends must all have {n} entries, found "
                           f"{self.upper.shape}, {self.inner_lower.shape}, "
                           f"{self.inner_upper.shape}")
        if not (np.all(np.isfinite(self.lower)) and np.all(np.isfinite(self.upper))):
            raise BabError("bab: the input box must be finite")
        if np.any(self.lower > self.upper) or np.any(self.inner_lower > self.inner_upper):
            raise BabError("bab: the input box has lower > upper")
        if (np.any(self.inner_lower < self.lower) or np.any(self.inner_upper > self.upper)):
            raise BabError("bab: the inner box must lie inside the bounded box")
        if self.a.ndim != 2 or self.a.shape[0] != k or self.group.shape != (k,):
            raise BabError(f"bab: rows must be a (K, m) matrix with K thresholds and groups, "
                           f"found {self.a.shape}, {self.b.shape}, {self.group.shape}")
        if not (np.all(np.isfinite(self.a)) and np.all(np.isfinite(self.b))):
            raise BabError("bab: the output constraints have non-finite entries")
        if k and (self.group.min() < 0 or self.group.max() >= self.n_conj):
            raise BabError(f"bab: row groups must lie in [0, {self.n_conj})")
        if np.any(np.bincount(self.group, minlength=self.n_conj) == 0):
            raise BabError("bab: every conjunction needs at least one output constraint "
                           "(one without any is met everywhere: check a point instead)")


@dataclass
class BabResult:
    """What the search found and what it cost.

    ``status``: ``unsat`` (every domain proved), ``sat`` (``counterexample`` = the flat input
    and output that ``confirm`` accepted), ``unknown`` (``reason`` says why: the domain cap, a
    domain too small to split) or ``timeout``. ``domains``: boxes bounded; ``passes``: batched
    bound passes; ``max_queue``: the most open domains held at once; ``stages``: seconds per part.
    ``proved``: bounded domains whose every unsafe conjunction was refuted (dropped, not split).
    """

    status: str
    reason: str = ""
    counterexample: tuple[Array, Array] | None = None
    domains: int = 0
    proved: int = 0
    passes: int = 0
    max_queue: int = 0
    reused: int = 0
    alpha: int = 0
    alpha_proved: int = 0
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    # on a timeout: the open domains (search's ``resume``); from verify_property, the Resume
    queue: Any = None
    budget: bool = False  # the "timeout" was search's max_bounded running out, not the time
    looked_ahead: bool = False  # verify_network: its look-ahead phase ran to its budget

    def as_dict(self) -> dict[str, Any]:
        cex = None
        if self.counterexample is not None:
            cex = {"x": [float(v) for v in self.counterexample[0]],
                   "y": [float(v) for v in self.counterexample[1]]}
        return {"status": self.status, "reason": self.reason, "domains": self.domains,
                "proved": self.proved, "passes": self.passes, "max_queue": self.max_queue,
                "seconds": round(self.seconds, 6),
                "stages": {k: round(v, 6) for k, v in self.stages.items()},
                "counterexample": cex}


class Models:
    """Batched copies of one network, made on demand by ``factory(batch)`` (a compiled graph
    taking ``(batch, *features)``, or None when the network cannot be batched), in power-of-two
    batch sizes up to ``max_batch``; bigger requests are chunked, smaller ones padded.

    ``intermediate``: how the pre-activations are bounded: ``"pairs"`` (the default: chain
    networks by ``bounds.chain_crown``, each box's own unstable neurons; other networks as
    ``"crown"``), ``"crown"`` (CROWN's backward pass over the batch's unstable neurons, by the
    engine: ``bound_inherited``) or ``"forward"`` (for chain
    networks: forward-mode functions first, and CROWN, per box and unstable neuron, only for
    the boxes they leave open; on ACAS Xu it needed about as many domains and 15-40% more CPU
    time than ``"crown"``, so it is not the default)."""

    def __init__(self, factory: Callable[[int], Any], max_batch: int = 256,
                 intermediate: str = "pairs") -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise BabError(f"bab: max_batch must be an integer >= 1, found {max_batch!r}")
        self.factory = factory
        self._cache: dict[int, Any] = {}
        one = self.get(1)
        if one is None:
            raise BabError("bab: the network factory gave no model for a batch of one")
        self.features = tuple(one.graph.nodes[one.graph.inputs[0]].shape)[1:]
        self.out_rest = tuple(one.out_shape)[1:]
        self.dtype = np.dtype(one.dtype)
        self.max_batch = max_batch if self.get(2) is not None else 1
        if intermediate not in INTERMEDIATE:
            raise BabError(f"bab: unknown intermediate bounds {intermediate!r}; expected one of "
                           f"{INTERMEDIATE}")
        # "forward": chain networks take forward-mode intermediate bounds first (bounds.forward)
        self.fast = intermediate == "forward"
        self.lower_slope = "adaptive"
        self._chains: dict[int, Chain | None] = {}
        # "pairs": chain networks are bounded by bounds.chain_crown (each box's own unstable
        # neurons); other networks fall back to "crown"
        self.pairs = intermediate == "pairs"
        self._chain_crown: dict[bool, tuple[Chain, ChainCrown] | None] = {}

    def get(self, n: int) -> Any:
        if n not in self._cache:
            model = self.factory(n)
            if model is not None:
                shape = tuple(model.graph.nodes[model.graph.inputs[0]].shape)
                if not shape or shape[0] != n or tuple(model.out_shape)[:1] != (n,):
                    raise BabError(f"bab: the factory's model for a batch of {n} maps "
                                   f"{shape} to {tuple(model.out_shape)}; expected a batch "
                                   f"axis of {n} on both")
            self._cache[n] = model
        return self._cache[n]

    def chunks(self, total: int, most: int | None = None) -> list[tuple[int, int, int]]:
        """``(start, stop, size)`` pieces of ``total`` rows: full batches (of ``max_batch``, or
        ``most`` if smaller), then the smallest power of two holding the rest."""
        out, start = [], 0
        most = self.max_batch if most is None else min(most, self.max_batch)
        while start < total:
            stop = min(total, start + most)
            size = 1
            while size < stop - start:
                size *= 2
            out.append((start, stop, size))
            start = stop
        return out

    @staticmethod
    def pad(x: Array, size: int) -> Array:
        if len(x) == size:
            return x
        return np.concatenate([x, np.repeat(x[-1:], size - len(x), axis=0)])

    def propagation(self, lo: Array, hi: Array, size: int, kernel: bool
                    ) -> tuple[Any, Propagation]:
        """The batched model of ``size`` boxes and a bound pass over ``[lo, hi]`` (padded to
        ``size`` with the last box)."""
        model = self.get(size)
        shape = (size, *self.features)
        return model, Propagation(model.graph, self.consts(model),
                                  self.pad(lo, size).reshape(shape),
                                  self.pad(hi, size).reshape(shape), kernel=kernel, n_data=1)

    def forward(self, x: Array) -> Array:
        """Outputs (float64 copies of the float32 results), flat: ``(N, m)``."""
        parts = []
        for start, stop, size in self.chunks(len(x)):
            model = self.get(size)
            xs = self.pad(x[start:stop], size).reshape((size, *self.features))
            y = np.asarray(model.forward(xs.astype(self.dtype)), np.float64)
            parts.append(y.reshape(size, -1)[:stop - start])
        return np.concatenate(parts) if parts else np.zeros((0, 0))

    def gradient(self, x: Array, rows: Array) -> tuple[Array, Array]:
        """Outputs and the gradient of ``rows[i] . y`` wrt the input at each ``x[i]`` (flat)."""
        ys, gs = [], []
        for start, stop, size in self.chunks(len(x), GRADIENT_BATCH):
            model = self.get(size)
            xs = self.pad(x[start:stop], size).reshape((size, *self.features))
            xs = xs.astype(self.dtype)
            seed = self.pad(rows[start:stop], size).reshape((size, *self.out_rest))
            y = np.asarray(model.forward(xs), np.float64).reshape(size, -1)
            g = np.asarray(model.vjp([xs], seed.astype(self.dtype))[0], np.float64)
            ys.append(y[:stop - start])
            gs.append(g.reshape(size, -1)[:stop - start])
        return np.concatenate(ys), np.concatenate(gs)

    def bound(self, lo: Array, hi: Array, a: Array, *, method: str, kernel: bool,
              options: dict[str, Any]) -> Array:
        """Certified lower bounds of every row ``a_k . y`` over each box: ``(N, K)``."""
        parts = []
        k = a.shape[0]
        for start, stop, size in self.chunks(len(lo)):
            model = self.get(size)
            shape = (size, *self.features)
            spec = np.broadcast_to(a.reshape((1, k, *self.out_rest)),
                                   (size, k, *self.out_rest)).copy()
            result = compute_bounds(model, self.pad(lo[start:stop], size).reshape(shape),
                                    self.pad(hi[start:stop], size).reshape(shape),
                                    method=method, spec=spec, kernel=kernel,
                                    output_crown=False, **options)
            assert result.spec is not None
            parts.append(np.asarray(result.spec[0]).reshape(size, k)[:stop - start])
        return np.concatenate(parts)


    @staticmethod
    def consts(model: Any) -> dict[int, Array]:
        """The graph's constants and parameters by node (what a ``Propagation`` starts from)."""
        graph = model.graph
        consts = dict(graph.consts)
        n_data = len(graph.inputs) - len(graph.params)
        for k, p in enumerate(graph.params):
            consts[graph.inputs[n_data + k]] = np.asarray(p.data)
        return consts

    def bound_inherited(self, lo: Array, hi: Array, a: Array, inherited: Array | None,
                        refresh: bool, *, kernel: bool,
                        settled: Callable[[Array, Array], Array] | None = None
                        ) -> tuple[Array, Array, Array]:
        """Row lower bounds ``(N, K)`` by CROWN's back-substitution from the rows, with the
        pre-activation bounds of every relaxed neuron taken from the box's intervals
        intersected with ``inherited`` (bounds valid on a box containing this one: the parent
        domain's), and with ``refresh`` tightened by CROWN as well (the full pass); also the
        bounds used, flat per box ``(N, P)`` (lower then upper of every target node), for the
        children to inherit, and the rows' linear coefficients of the input in the bound
        ``(N, K, n)`` (which inputs the bound depends on most: the split rule ``"bound"``).

        Sound as CROWN is: bounds over a larger box hold on a sub-box, for the real values and
        (``kernel``) for every float32 execution the engine encloses.

        For a chain network (``bounds.forward.chain_of``) the intermediate bounds come from the
        forward-mode functions first; ``settled(lower, rows)`` (row bounds of the boxes ``rows``)
        says which boxes those already decide, and only the others get CROWN's backward bounds
        of their unstable neurons (``refresh``).
        """
        parts, kept, coefs = [], [], []
        k = a.shape[0]
        n_in = int(np.prod(self.features))
        for start, stop, size in self.chunks(len(lo)):
            model, prop = self.propagation(lo[start:stop], hi[start:stop], size, kernel)
            graph = model.graph
            if getattr(prop, "whole", False):  # no batch axis (a batch of one): plain CROWN
                parts.append(self.bound(lo[start:stop], hi[start:stop], a, method="crown",
                                        kernel=kernel, options={}))
                kept.append(np.zeros((stop - start, 0)))
                coefs.append(np.zeros((stop - start, k, n_in)))
                continue
            inh = None if inherited is None else self.pad(inherited[start:stop], size)
            chain = self.chain(size, prop) if self.fast else None
            if chain is not None:
                idx = np.minimum(np.arange(start, start + size), stop - 1)
                decided: Callable[[Array], Array] | None = None
                if refresh and settled is not None:
                    def decided(low: Array, idx: Array = idx) -> Array:
                        return settled(low, idx)
                elif refresh:
                    def decided(low: Array) -> Array:
                        return np.ones(len(low), dtype=bool)
                lower, flat, coef = self._bound_chain(prop, chain, a, inh, size, decided)
                parts.append(lower[:stop - start])
                kept.append(flat[:stop - start])
                coefs.append(coef[:stop - start])
                continue
            targets = sorted(prop.targets())
            offset, flat = 0, []
            for i, node in enumerate(graph.nodes):
                if node.kind != "op":
                    continue
                iv = prop.interval(i)
                if i not in targets:
                    continue
                n = int(np.prod(node.shape[1:]))
                if inh is not None:
                    iv.lo = np.maximum(iv.lo, inh[:, offset:offset + n].reshape(node.shape))
                    iv.hi = np.minimum(iv.hi, inh[:, offset + n:offset + 2 * n].reshape(
                        node.shape))
                if refresh:
                    c_lo, c_hi = prop.crown_node(i)
                    iv.lo, iv.hi = np.maximum(iv.lo, c_lo), np.minimum(iv.hi, c_hi)
                flat += [np.reshape(iv.lo, (size, n)), np.reshape(iv.hi, (size, n))]
                offset += 2 * n
            spec = np.broadcast_to(a.reshape((1, k, *self.out_rest)),
                                   (size, k, *self.out_rest)).copy()
            prop.trace = {}
            lower = prop.lower(graph.output, spec)
            parts.append(np.asarray(lower).reshape(size, k)[:stop - start])
            coefs.append(self._input_coef(prop, size, k)[:stop - start])
            kept.append(np.concatenate(flat, axis=1)[:stop - start] if flat
                        else np.zeros((stop - start, 0)))
        return np.concatenate(parts), np.concatenate(kept), np.concatenate(coefs)

    def chain_crown(self, kernel: bool) -> tuple[Chain, ChainCrown] | None:
        """The network's chain and its ``ChainCrown`` bounder (``intermediate="pairs"``), or
        None when the network is not a chain of affine layers and relus (or cannot batch)."""
        if kernel not in self._chain_crown:
            found = None
            model = self.get(2) if self.pairs and self.max_batch > 1 else None
            if model is not None:
                shape = (2, *self.features)
                prop = Propagation(model.graph, self.consts(model), np.zeros(shape),
                                   np.zeros(shape), kernel=kernel, n_data=1)
                chain = chain_of(prop)
                kinds = _layer_kinds(prop, chain) if chain is not None else None
                if chain is not None and kinds is not None:
                    ctx = prop.ctx
                    try:
                        found = (chain, ChainCrown(chain, kinds, kernel=kernel, u=ctx.u,
                                                   eta=ctx.eta))
                    except ValueError:
                        found = None
            self._chain_crown[kernel] = found
        return self._chain_crown[kernel]

    def chain_input(self, lo: Array, hi: Array, chain: Chain, kernel: bool
                    ) -> tuple[Array, Array]:
        """Intervals ``(N, d)`` of the chain's input node over the boxes (the engine's interval
        rules on the ops before it, kernel errors included)."""
        los, his = [], []
        for start, stop, size in self.chunks(len(lo)):
            model = self.get(size)
            shape = (size, *self.features)
            prop = Propagation(model.graph, self.consts(model),
                               self.pad(lo[start:stop], size).reshape(shape),
                               self.pad(hi[start:stop], size).reshape(shape),
                               kernel=kernel, n_data=1)
            for i, node in enumerate(model.graph.nodes[:chain.start + 1]):
                if node.kind == "op":
                    prop.interval(i)
            iv = prop.ivals[chain.start]
            assert iv is not None
            los.append(np.asarray(iv.lo, np.float64).reshape(size, -1)[:stop - start])
            his.append(np.asarray(iv.hi, np.float64).reshape(size, -1)[:stop - start])
        return np.concatenate(los), np.concatenate(his)

    def bound_pairs(self, lo: Array, hi: Array, a: Array, inherited: Array | None,
                    parent: tuple[Array, Array] | None, *, kernel: bool,
                    settled: Callable[[Array, Array], Array]
                    ) -> tuple[Array, Array, Array, Array, int]:
        """``bound_inherited`` by ``bounds.chain_crown`` (``chain_crown`` must not be None): row
        lower bounds ``(N, K)``, the hidden layers' bounds flat ``(N, P)`` for children, the
        rows' input coefficients ``(N, K, d)`` and constants ``(N, K)`` (the row bound as a
        linear function of the chain input, valid on every sub-box), and how many boxes the
        parent's function ``parent = (coef, const)`` already settled (those get no pass)."""
        found = self.chain_crown(kernel)
        assert found is not None
        chain, crown = found
        v_lo, v_hi = self.chain_input(lo, hi, chain, kernel)
        n_box, k = len(lo), a.shape[0]
        d = v_lo.shape[1]
        sizes = [layer.w.shape[0] for layer in chain.layers[:-1]]
        lower = np.full((n_box, k), -np.inf)
        flat = np.zeros((n_box, 2 * sum(sizes)), np.float32)
        coef = np.zeros((n_box, k, d))
        const = np.zeros((n_box, k))
        todo = np.arange(n_box)
        if parent is not None:
            lower = concretize(parent[0], parent[1], v_lo, v_hi)
            done = np.asarray(settled(lower, todo), dtype=bool)
            coef[:], const[:] = parent
            if inherited is not None:
                flat[:] = inherited
            todo = np.flatnonzero(~done)
        reused = n_box - len(todo)
        if len(todo):
            inh = None
            if inherited is not None:
                inh, offset = [], 0
                for n in sizes:
                    inh.append((inherited[todo, offset:offset + n],
                                inherited[todo, offset + n:offset + 2 * n]))
                    offset += 2 * n
            got = crown.bound(v_lo[todo], v_hi[todo], a, inh)
            lower[todo] = np.maximum(lower[todo], got.lower) if parent is not None \
                else got.lower
            coef[todo], const[todo] = got.coef, got.const
            parts = []
            for l_k, h_k in got.layers:  # float32 rounded outward: half the queue's memory
                parts += [_f32_down(l_k), _f32_up(h_k)]
            flat[todo] = np.concatenate(parts, axis=1) if parts else np.zeros((len(todo), 0))
        return lower, flat, coef, const, reused

    def alpha_pairs(self, lo: Array, hi: Array, spec: Spec, lower: Array, kept: Array, *,
                    kernel: bool, steps: int, over: Callable[[], bool] | None = None
                    ) -> tuple[Array, Array]:
        """alpha-CROWN (``bounds.alpha``: every bound's relu lower slopes optimised) on boxes that
        ``bound_pairs`` left open, starting from its bounds: the row lower bounds ``lower``
        ``(N, K)`` and the hidden layers' bounds ``kept`` (flat, ``bound_pairs``' layout) both
        tightened (never loosened), for the children to inherit.

        Why: on ACAS Xu property 1 the networks' large internal values cancel at the output;
        boxes that straddle an early neuron's hyperplane keep CROWN's intermediate bounds loose
        however small they get (the worst margin stalls near -60 below depth 11 on ``4_9``),
        while optimised slopes tighten them several-fold (depth 8, worst 64 boxes: median margin
        -41 by CROWN, -15 after 10 steps, 36% proved). Sound as the engine's alpha-CROWN is: any
        slopes give a valid bound, evaluated rigorously; the starting bounds are valid on these
        boxes, so their intersections are. ``over()``: stop early (the boxes left keep their
        bounds) once it says so."""
        found = self.chain_crown(kernel)
        assert found is not None
        chain = found[0]
        sizes = [layer.w.shape[0] for layer in chain.layers[:-1]]
        pre = {layer.pre: k for k, layer in enumerate(chain.layers[:-1])}
        offsets = np.concatenate([[0], np.cumsum([2 * n for n in sizes])])
        lower, kept = lower.copy(), kept.copy()
        k_rows = spec.a.shape[0]
        for start, stop, size in self.chunks(len(lo), ALPHA_BATCH):
            if over is not None and over():  # the rest keep CROWN's bounds
                break
            model, prop = self.propagation(lo[start:stop], hi[start:stop], size, kernel)
            graph = model.graph
            inh = self.pad(kept[start:stop], size).astype(np.float64)
            for i, node in enumerate(graph.nodes):
                if node.kind != "op":
                    continue
                iv = prop.interval(i)
                if i in pre:
                    o, n = offsets[pre[i]], sizes[pre[i]]
                    iv.lo = np.maximum(iv.lo, inh[:, o:o + n].reshape(node.shape))
                    iv.hi = np.maximum(np.minimum(iv.hi, inh[:, o + n:o + 2 * n].reshape(
                        node.shape)), iv.lo)
            rows = np.broadcast_to(spec.a.reshape((1, k_rows, *self.out_rest)),
                                   (size, k_rows, *self.out_rest)).copy()
            start_low = self.pad(lower[start:stop], size)
            (low, _), _ = optimise(prop, graph.output, rows,
                                   (start_low, np.full_like(start_low, np.inf)),
                                   thresholds=np.broadcast_to(spec.b, start_low.shape).copy(),
                                   steps=steps, lr=ALPHA_LR, groups=spec.group)
            lower[start:stop] = np.maximum(lower[start:stop], low[:stop - start])
            for i, k in pre.items():
                tight = prop.ivals[i]
                assert tight is not None
                o, n = offsets[k], sizes[k]
                part = kept[start:stop]
                part[:, o:o + n] = np.maximum(part[:, o:o + n], _f32_down(
                    np.asarray(tight.lo, np.float64).reshape(size, n)[:stop - start]))
                part[:, o + n:o + 2 * n] = np.minimum(part[:, o + n:o + 2 * n], _f32_up(
                    np.asarray(tight.hi, np.float64).reshape(size, n)[:stop - start]))
        return lower, kept

    def chain(self, size: int, prop: Propagation) -> Chain | None:
        """The network's chain structure (``bounds.forward``) for this batch size, or None."""
        if size not in self._chains:
            self._chains[size] = chain_of(prop)
        return self._chains[size]

    def _bound_chain(self, prop: Propagation, chain: Chain, a: Array,
                     inh: Array | None, size: int,
                     settled: Callable[[Array], Array] | None
                     ) -> tuple[Array, Array, Array]:
        """``bound_inherited`` for a chain network: every pre-activation bounded by forward-mode
        functions (``bounds.forward``), IBP and the inherited bounds; the rows by CROWN's
        backward pass from them; then, for the boxes ``settled`` leaves open, CROWN's backward
        bounds of each box's own unstable neurons, layer by layer, and the rows again."""
        inherited: dict[int, tuple[Array, Array]] = {}
        if inh is not None:
            offset = 0
            for layer in chain.layers:
                n = layer.w.shape[0]
                inherited[layer.pre] = (inh[:, offset:offset + n],
                                        inh[:, offset + n:offset + 2 * n])
                offset += 2 * n
        forward_bounds(prop, chain, inherited, lower_slope=self.lower_slope)
        k = a.shape[0]
        spec = np.broadcast_to(a.reshape((1, k, *self.out_rest)),
                               (size, k, *self.out_rest)).copy()
        prop.trace = {}
        lower = np.asarray(prop.lower(prop.graph.output, spec)).reshape(size, k)
        coef = self._input_coef(prop, size, k)
        if settled is not None:
            left = np.flatnonzero(~np.asarray(settled(lower), dtype=bool))
            if left.size:
                sub = prop.subset(left)
                for layer in chain.layers[1:]:
                    if layer.relu is not None:
                        _refine(sub, layer.pre)
                for layer in chain.layers:  # the refined bounds back into prop, for inheritance
                    iv, niv = prop.ivals[layer.pre], sub.ivals[layer.pre]
                    assert iv is not None and niv is not None
                    iv.lo, iv.hi = np.array(iv.lo), np.array(iv.hi)
                    iv.lo[left], iv.hi[left] = niv.lo, niv.hi
                sub._cache = {}
                sub.trace = {}
                again = np.asarray(sub.lower(prop.graph.output, spec[left])).reshape(len(left), k)
                coef[left] = self._input_coef(sub, len(left), k)
                lower[left] = np.maximum(lower[left], again)
        flat = []
        for layer in chain.layers:
            iv = prop.ivals[layer.pre]
            assert iv is not None
            flat += [iv.lo.reshape(size, -1), iv.hi.reshape(size, -1)]
        return lower, np.concatenate(flat, axis=1), coef

    def _input_coef(self, prop: Propagation, size: int, k: int) -> Array:
        """The rows' linear coefficients of the input in the last bound pass (``prop.trace``,
        then cleared): ``(size, K, n)``, zeros where the pass did not reach the input."""
        trace, prop.trace = prop.trace or {}, None
        n = int(np.prod(self.features))
        v = trace.get(prop.graph.inputs[0])
        if v is None or isinstance(v, float):
            return np.zeros((size, k, n))
        v = np.asarray(v, np.float64).reshape(v.shape[0], k, n)
        return np.broadcast_to(v, (size, k, n)).copy()


def _f32_down(x: Array) -> Array:
    """The greatest float32 at most ``x`` (elementwise)."""
    y = x.astype(np.float32)
    return np.where(y > x, np.nextafter(y, np.float32(-np.inf)), y)


def _f32_up(x: Array) -> Array:
    """The least float32 at least ``x`` (elementwise)."""
    y = x.astype(np.float32)
    return np.where(y < x, np.nextafter(y, np.float32(np.inf)), y)


def _layer_kinds(prop: Propagation, chain: Chain) -> list[str] | None:
    """How each chain layer's float32 kernels round (``ChainCrown``'s kinds), or None."""
    kinds = []
    for layer in chain.layers:
        names = tuple(prop.nodes[e].op.name for e in layer.err_nodes)  # type: ignore[union-attr]
        kind = {("linear",): "linear", ("matmul",): "matmul",
                ("matmul", "add"): "matmul+add"}.get(names)
        if kind is None:
            return None
        kinds.append(kind)
    return kinds


REFINE_PAIRS = 2048  # (box, neuron) pairs per backward pass when refining unstable neurons
PAIR_GAIN = 2  # pairs are used when there are this many times fewer than boxes x union


def _refine(prop: Propagation, node: int) -> None:
    """Tighten node ``node``'s bounds (``(B, n)``) by CROWN, each box's unstable neurons only:
    every (box, neuron) pair is one example of its own (``Propagation.subset`` repeats the
    box), with the rows +e_n and -e_n; the bounds are intersected with the old ones."""
    iv = prop.ivals[node]
    assert iv is not None
    lo, hi = np.array(iv.lo, dtype=np.float64), np.array(iv.hi, dtype=np.float64)
    unstable = (lo < 0) & (hi > 0)
    box_of, neuron = np.nonzero(unstable)
    n = lo.shape[1]
    if PAIR_GAIN * len(box_of) > len(lo) * int(unstable.any(axis=0).sum()):
        # most boxes share their unstable neurons: one pass over their union is cheaper
        c_lo, c_hi = prop.crown_node(node)
        iv.lo, iv.hi = np.maximum(lo, c_lo), np.minimum(hi, c_hi)
        prop._cache = {}
        return
    for s in range(0, len(box_of), REFINE_PAIRS):
        b, j = box_of[s:s + REFINE_PAIRS], neuron[s:s + REFINE_PAIRS]
        pairs = prop.subset(b)
        rows = np.zeros((len(b), 2, n))
        rows[np.arange(len(b)), 0, j] = 1.0
        rows[np.arange(len(b)), 1, j] = -1.0
        got = np.asarray(pairs.lower(node, rows))
        lo[b, j] = np.maximum(lo[b, j], got[:, 0])
        hi[b, j] = np.minimum(hi[b, j], -got[:, 1])
    iv.lo, iv.hi = lo, hi
    prop._cache = {}


class _Clock:
    def __init__(self, timeout: float | None, now: Callable[[], float]) -> None:
        self.now = now
        self.start = now()
        self.deadline = None if timeout is None else self.start + timeout
        self.stages: dict[str, float] = {}
        self._mark = self.start

    def over(self) -> bool:
        return self.deadline is not None and self.now() > self.deadline

    def stage(self, name: str) -> None:
        now = self.now()
        self.stages[name] = self.stages.get(name, 0.0) + now - self._mark
        self._mark = now


def _values(spec: Spec, y: Array) -> Array:
    """Per point and conjunction, ``max_k (a_k . y - b_k)`` over its rows (<= 0: met)."""
    gaps = y @ spec.a.T - spec.b  # (N, K)
    out = np.full((len(y), spec.n_conj), -np.inf)
    np.maximum.at(out.T, spec.group, gaps.T)
    return out


def _margins(spec: Spec, lower: Array, open_: Array) -> tuple[Array, Array]:
    """From row lower bounds ``(N, K)``: the conjunctions still open ``(N, J)`` (not refuted
    before and not now) and each domain's margin, the worst open conjunction's best row gap
    (``+inf`` when none is open)."""
    gaps = lower - spec.b  # a row is refuted when its lower bound is strictly above b
    best = np.full((len(lower), spec.n_conj), -np.inf)
    np.maximum.at(best.T, spec.group, gaps.T)
    still = open_ & ~(best > 0)
    margin = np.where(still, best, np.inf).min(axis=1)
    return still, margin


class _Queue:
    """Open domains: per domain a row of each field (box ends, open conjunctions, margin,
    inherited bounds, age) in growable arrays, popped worst margin first."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.fields: dict[str, Array] = {}
        self.size = 0

    def push(self, **rows: Array) -> bool:
        """Add domains (every field the same length); False (nothing added) when the cap would
        be passed."""
        count = len(rows["margin"])
        new = self.size + count
        if new > self.cap:
            return False
        if not self.fields:
            self.fields = {k: np.zeros((min(self.cap, max(1024, count)), *np.shape(v)[1:]),
                                       dtype=np.asarray(v).dtype) for k, v in rows.items()}
        if new > len(self.fields["margin"]):
            grow = min(self.cap, max(new, 2 * len(self.fields["margin"])))
            for k, old in self.fields.items():
                arr = np.zeros((grow, *old.shape[1:]), dtype=old.dtype)
                arr[:self.size] = old[:self.size]
                self.fields[k] = arr
        for k, v in rows.items():
            self.fields[k][self.size:new] = v
        self.size = new
        return True

    def _worst(self, count: int, best: bool = False) -> Array:
        m = self.fields["margin"][:self.size]
        if best:
            m = -m
        return (np.argpartition(m, count - 1)[:count] if count < self.size
                else np.arange(self.size))

    def pop(self, count: int, best: bool = False) -> dict[str, Array]:
        """The ``count`` domains with the lowest margins (with ``best``: the highest, those
        nearest a proof; removed)."""
        take = self._worst(min(count, self.size), best)
        out = {k: v[take].copy() for k, v in self.fields.items()}
        # fill the holes below the new size with the rows kept from the tail: O(count) copies,
        # not O(size) (the inherited bounds make a row kilobytes)
        new = self.size - len(take)
        holes = np.sort(take[take < new])
        tail = np.ones(self.size - new, dtype=bool)
        tail[take[take >= new] - new] = False
        movers = new + np.flatnonzero(tail)
        for v in self.fields.values():
            v[holes] = v[movers]
        self.size = new
        return out

    def peek(self, count: int) -> dict[str, Array]:
        """The ``count`` worst domains (left in place)."""
        take = self._worst(min(count, self.size))
        return {k: v[take] for k, v in self.fields.items()}


def _halves(lo: Array, hi: Array, dim: Array, mid: Array) -> tuple[Array, Array]:
    """The two halves of each box ``[lo[i], hi[i]]`` split at ``mid[i]`` along ``dim[i]``:
    ``(lo, hi)`` of ``2 M`` boxes, every first half before every second. Both halves share the
    split point, so together they cover the box exactly."""
    rows = np.arange(len(lo))
    left_hi, right_lo = hi.copy(), lo.copy()
    left_hi[rows, dim] = mid
    right_lo[rows, dim] = mid
    return np.concatenate([lo, right_lo]), np.concatenate([left_hi, hi])


def _best_split(cand_p: Array, margin: Array, parent: Array) -> Array:
    """Of ``M`` candidate splits (``cand_p[i]``: the domain split; ``margin``: ``(2 M,)``, the
    halves' margins as ``_halves`` orders them, ``+inf`` when proved; ``parent``: each domain's
    own margin, below 0), the rows of the two halves of each domain's best one: the largest gain
    of the worse half, then of the better half, then the earlier candidate (the split
    heuristic's order). ``(2 D,)``: first halves, then second halves.

    A half's gain is how much of the parent's gap ``-parent`` it closes, in ``[0, -parent]``
    (proved: all of it; a sub-box's true margin is at least its parent's, so a bound pass that
    comes out looser learns nothing), and a gain below ``LOOKAHEAD_GAIN`` of the gap counts as
    none. Without that floor the rule can halve one input down to float spacing: where the
    worse half holds the least point (a box with a counterexample), no split gains there but
    one along an input that barely matters, by ever less, while every half stays open."""
    m = len(cand_p)
    base = parent[cand_p]
    gap = np.maximum(-base, 0.0)
    gains = np.minimum(np.maximum(margin.reshape(2, m), base), 0.0) - base
    gains = np.where(gains > LOOKAHEAD_GAIN * gap + 1e-12, gains, 0.0)
    order = np.lexsort((np.arange(m), -gains.max(axis=0), -gains.min(axis=0), cand_p))
    first = order[np.r_[True, cand_p[order][1:] != cand_p[order][:-1]]]
    return np.concatenate([first, first + m])


def _inside(spec: Spec, x: Array) -> Array:
    """Points of the network's float type inside the exact box (the inner box's ends are)."""
    dt = spec.inner_lower.dtype
    return np.minimum(np.maximum(np.asarray(x).astype(dt), spec.inner_lower), spec.inner_upper)


def _deciding_rows(spec: Spec, values_rows: Array, open_: Array) -> Array:
    """The rows (``(N, m)``) of ``_deciding_index``."""
    return spec.a[_deciding_index(spec, values_rows, open_)]


def _deciding_index(spec: Spec, values_rows: Array, open_: Array) -> Array:
    """Per domain, the output row whose gradient guides splitting and attacks: in the open
    conjunction with the worst value, the row attaining its maximum. ``values_rows``: per
    domain and row, the gap (a bound or a value) ``(N, K)``."""
    best = np.full((len(values_rows), spec.n_conj), -np.inf)
    np.maximum.at(best.T, spec.group, values_rows.T)
    conj = np.argmin(np.where(open_, best, np.inf), axis=1)
    in_conj = spec.group[None, :] == conj[:, None]
    return np.argmax(np.where(in_conj, values_rows, -np.inf), axis=1)


def _attack(models: Models, spec: Spec, lo: Array, hi: Array, open_: Array, steps: int,
            rng: Any, clock: _Clock) -> Array | None:
    """Sign-gradient descent on the unsafe objective, one chain per box (from a random point of
    it), each step projected back into its box; the points whose float value meets some
    conjunction (to be confirmed), best first, or None."""
    width = hi - lo
    x = lo + rng.uniform(size=lo.shape) * width
    found = []
    for step in range(steps):
        p = _inside(spec, np.minimum(np.maximum(x, lo), hi))
        y = models.forward(p)
        vals = _values(spec, y)
        met = vals.min(axis=1) <= 0
        if np.any(met):
            order = np.argsort(vals.min(axis=1)[met])
            found.append(p[met][order])
            break
        if step == steps - 1 or clock.over():
            break
        gaps = y @ spec.a.T - spec.b
        rows = _deciding_rows(spec, gaps, open_)
        _, g = models.gradient(p, rows)
        size = 0.25 * (1 - step / steps) + 0.01
        x = np.minimum(np.maximum(x - size * width * np.sign(g), lo), hi)
    return np.concatenate(found) if found else None


def search(models: Models, spec: Spec, confirm: Callable[[Array], tuple[Array, Array] | None],
           *, timeout: float | None = None, method: str = "crown", kernel: bool = True,
           batch: int = 256, max_domains: int = MAX_DOMAINS, attack_steps: int = 40,
           attack_chains: int = 256, seed: int = 0, bound_options: dict[str, Any] | None = None,
           split: str = "auto", refresh_every: int = 1,
           alpha_steps: int = ALPHA_STEPS, alpha_after: int = ALPHA_AFTER,
           lookahead: str = LOOKAHEAD, max_bounded: int | None = None,
           clock: Callable[[], float] = time.monotonic,
           progress: Callable[[dict[str, Any]], None] | None = None,
           resume: _Queue | None = None) -> BabResult:
    """Decide whether any input of ``spec``'s box is mapped into its unsafe set (see module).

    ``models``: batched copies of the network (``Models``); ``confirm(x)``: given a flat point
    of the network's float type (inside the exact box), the ``(x, y)`` pair when the network
    really maps it into the unsafe set (checked exactly by the caller), else None. ``batch``:
    domains split per round (their children, twice as many, go into one bound pass);
    ``max_domains``: open domains kept at most; ``max_bounded``: stop, as on a timeout (with
    the open domains to resume from), once this many domains have been bounded (a budget in
    work, the same on every machine); ``clock``: what ``timeout`` is measured by (wall
    time; ``time.process_time`` measures this process's CPU time, for benchmarks on a busy
    machine); ``progress``: called after every round with the counts so far (``domains``,
    ``proved``, ``open``, ``seconds``); ``resume``: the
    open domains of an earlier search of the same ``spec`` that timed out (its
    ``BabResult.queue``): the search goes on from them (no first attack, no root pass), as if
    it had never stopped. They are a cover of what that search had not proved, so the verdict
    rests on the same argument.
    """
    for name, value, least in (("batch", batch, 1), ("max_domains", max_domains, 1),
                               ("attack_steps", attack_steps, 0),
                               ("attack_chains", attack_chains, 1), ("seed", seed, 0),
                               ("refresh_every", refresh_every, 1),
                               ("alpha_steps", alpha_steps, 0), ("alpha_after", alpha_after, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BabError(f"bab: {name} must be an integer >= {least}, found {value!r}")
    if max_bounded is not None and (isinstance(max_bounded, bool)
                                    or not isinstance(max_bounded, int) or max_bounded < 1):
        raise BabError(f"bab: max_bounded must be None or an integer >= 1, found "
                       f"{max_bounded!r}")
    if method not in METHODS:
        raise BabError(f"bab: unknown bound method {method!r}; expected one of {METHODS}")
    if split not in SPLITS:
        raise BabError(f"bab: unknown split rule {split!r}; expected one of {SPLITS}")
    if lookahead not in LOOKAHEADS:
        raise BabError(f"bab: unknown lookahead {lookahead!r}; expected one of {LOOKAHEADS}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not timeout > 0):
        raise BabError(f"bab: timeout must be a number of seconds > 0, found {timeout!r}")
    if spec.lower.shape[0] != int(np.prod(models.features)):
        raise BabError(f"bab: the box has {spec.lower.shape[0]} inputs, the network "
                       f"{int(np.prod(models.features))}")
    m = int(np.prod(models.out_rest)) if models.out_rest else 1
    if spec.a.shape[1] != m:
        raise BabError(f"bab: the output constraints have {spec.a.shape[1]} columns, the "
                       f"network {m} outputs")
    timer = _Clock(timeout, clock)
    rng = np.random.default_rng(seed)
    options = dict(bound_options or {})
    n, j = spec.lower.shape[0], spec.n_conj
    result = BabResult("unknown")

    def finish(status: str, reason: str = "", cex: Any = None) -> BabResult:
        timer.stage("other")
        if status == "timeout":  # the open domains, to go on from (search's resume)
            result.queue = queue
        result.status, result.reason, result.counterexample = status, reason, cex
        result.seconds = timer.now() - timer.start
        result.stages = dict(timer.stages)
        return result

    def check(points: Array | None) -> Any:
        if points is None:
            return None
        for x in points[:8]:
            cex = confirm(x)
            if cex is not None:
                return cex
        return None

    queue = resume
    # 1. the centre and an attack on the whole box (done already when resuming)
    lo0, hi0 = spec.inner_lower.astype(np.float64), spec.inner_upper.astype(np.float64)
    centre = _inside(spec, (lo0 + (hi0 - lo0) / 2)[None])
    vals = _values(spec, models.forward(centre))
    cex = check(centre) if vals.min() <= 0 else None
    all_open = np.ones((1, j), dtype=bool)
    if cex is None and attack_steps and resume is None:
        chains = np.repeat(lo0[None], attack_chains, axis=0), np.repeat(hi0[None], attack_chains,
                                                                        axis=0)
        cex = check(_attack(models, spec, *chains, np.repeat(all_open, attack_chains, axis=0),
                            attack_steps, rng, timer))
    timer.stage("attack")
    if cex is not None:
        return finish("sat", "counterexample from the first attack", cex)

    # 2. the whole box
    incremental = method == "crown"
    pairs = incremental and models.chain_crown(kernel) is not None
    if split == "auto":
        split = "bound" if pairs else "smear"

    def settled(low: Array, open_rows: Array) -> Array:
        """Which boxes the row bounds ``low`` prove (every open conjunction refuted)."""
        return ~_margins(spec, low, open_rows)[0].any(axis=1)

    def bound(lo: Array, hi: Array, inherited: Array | None, age: Array | None, open_: Array,
              parent: tuple[Array, Array] | None = None
              ) -> tuple[Array, Array, Array, Array]:
        """Row lower bounds of the boxes, the bounds their children may inherit, the rows'
        input coefficients in the bound (zeros where unknown) and constants."""
        consts = np.zeros((len(lo), len(spec.b)))
        if pairs:
            lower, kept, coef, consts, reused = models.bound_pairs(
                lo, hi, spec.a, inherited, parent, kernel=kernel,
                settled=lambda low, idx: settled(low, open_[idx]))
            result.reused += reused
            return lower, kept, coef, consts
        if not incremental:
            return (models.bound(lo, hi, spec.a, method=method, kernel=kernel,
                                 options=options), np.zeros((len(lo), 0)),
                    np.zeros((len(lo), len(spec.b), n)), consts)
        if inherited is None or age is None:
            return (*models.bound_inherited(
                lo, hi, spec.a, None, True, kernel=kernel,
                settled=lambda low, idx: settled(low, open_[idx])), consts)  # type: ignore[misc]
        lower = np.zeros((len(lo), len(spec.b)))
        kept = np.zeros_like(inherited)
        coef = np.zeros((len(lo), len(spec.b), n))
        for fresh in (False, True):  # a full CROWN pass for the domains due a refresh
            which = np.flatnonzero((age >= refresh_every) == fresh)
            if len(which):
                lower[which], kept[which], coef[which] = models.bound_inherited(
                    lo[which], hi[which], spec.a, inherited[which], fresh, kernel=kernel,
                    settled=lambda low, idx, w=which: settled(  # type: ignore[misc]
                        low, open_[w][idx]))
        return lower, kept, coef, consts

    if queue is None:
        lower, kept, coef, consts = bound(spec.lower[None], spec.upper[None], None, None,
                                          all_open)
        result.domains, result.passes = 1, 1
        still, margin = _margins(spec, lower, all_open)
        timer.stage("bounds")
        if not still.any():
            result.proved = 1
            return finish("unsat", "proved by one bound pass")
        per_domain = (16 * n + j + 8 * kept.shape[1] + 8 * len(spec.b) * (coef.shape[2] + 2)
                      + 16)
        queue = _Queue(int(min(max_domains, max(1, MAX_QUEUE_BYTES // per_domain))))
        queue.push(lo=spec.lower[None], hi=spec.upper[None], open=still, margin=margin,
                   inh=kept, age=np.zeros(1, np.int64), low=lower, coef=coef, const=consts)
    cap = queue.cap
    result.max_queue = queue.size

    alpha_live = pairs and alpha_steps > 0
    # 3. split until done
    span = np.where(spec.upper > spec.lower, spec.upper - spec.lower, 1.0)
    rounds = 0
    while queue.size:
        if timer.over():
            return finish("timeout", f"{queue.size} domains open when the time ran out")
        if max_bounded is not None and result.domains >= max_bounded:
            result.budget = True
            return finish("timeout", f"{queue.size} domains open when the budget of "
                          f"{max_bounded} bounded domains ran out")
        # worst domains first (counterexamples show up early); when the queue fills, those
        # nearest a proof (their children mostly close, so the queue shrinks)
        got = queue.pop(batch, best=queue.size > cap // 4)
        lo, hi, open_ = got["lo"], got["hi"], got["open"]
        # centres: a cheap falsification, and the gradient that picks the split
        centres = _inside(spec, lo + (hi - lo) / 2)
        # the row to move: the worst open conjunction's best row, judged at the centre
        y = models.forward(centres)
        vals_rows = y @ spec.a.T - spec.b
        met = _values(spec, y).min(axis=1) <= 0
        if np.any(met):
            cex = check(centres[met])
            if cex is not None:
                timer.stage("split")
                return finish("sat", "counterexample at a domain centre", cex)
        width = hi - lo
        if split == "bound" and got["coef"].shape[2] == n and np.any(got["coef"]):
            # the deciding rows' own linear bounds: split where an input coefficient times the
            # width (what the box's radius costs the bound) is largest, over the rows of open
            # conjunctions that are not proved
            live = open_[:, spec.group] & (got["low"] <= spec.b)
            grad = np.where(live[..., None], np.abs(got["coef"]), 0.0).max(axis=1)
        else:
            rows = spec.a[_deciding_index(spec, vals_rows, open_)]
            _, grad = models.gradient(centres, rows)
        # smear, with a little of the relative width so flat directions still get split
        smear = np.abs(grad) * width + 1e-3 * width / span * (np.abs(grad) * width).max(
            axis=1, keepdims=True) + 1e-12 * width / span
        score = smear if split in ("smear", "bound") else width / span
        # candidate splits (parent, input), in the heuristic's order: its best input, or for
        # the domains that look ahead its best LOOKAHEAD_INPUTS
        tries = np.full(len(lo), min(n, LOOKAHEAD_INPUTS) if lookahead == "all" else 1)
        cand_p = np.repeat(np.arange(len(lo)), tries)
        ranked = np.argsort(-score, axis=1, kind="stable")
        cand_d = ranked[cand_p, np.arange(len(cand_p)) - np.repeat(np.cumsum(tries) - tries,
                                                                   tries)]
        mid = lo[cand_p, cand_d] + width[cand_p, cand_d] / 2
        ok = (mid > lo[cand_p, cand_d]) & (mid < hi[cand_p, cand_d])
        if not np.all(np.bincount(cand_p[ok], minlength=len(lo)) > 0):
            timer.stage("split")
            return finish("unknown", "a domain became too small to split (at float64 spacing)")
        cand_p, cand_d, mid = cand_p[ok], cand_d[ok], mid[ok]
        c_lo, c_hi = _halves(lo[cand_p], hi[cand_p], cand_d, mid)
        both = np.concatenate([cand_p, cand_p])
        c_open = open_[both]
        c_inh = got["inh"][both]
        c_age = got["age"][both] + 1
        parent = None
        if pairs:
            parent = (got["coef"][both], got["const"][both])
        timer.stage("split")
        lower, kept, coef, consts = bound(c_lo, c_hi, c_inh, c_age, c_open, parent)
        c_age[c_age >= refresh_every] = 0
        result.domains += len(c_lo)
        result.passes += 1
        if lookahead == "all":
            # keep, per domain, the split whose worse half has the best margin (FSB-style
            # look-ahead over the inputs: the split heuristic reads the bound's input
            # coefficients, blind to how an input's width loosens the relaxations)
            _, c_margin = _margins(spec, lower, c_open)
            pick = _best_split(cand_p, c_margin, got["margin"])
            c_lo, c_hi, c_open, c_inh, c_age, both = (
                c_lo[pick], c_hi[pick], c_open[pick], c_inh[pick], c_age[pick], both[pick])
            lower, kept, coef, consts = lower[pick], kept[pick], coef[pick], consts[pick]
        still, c_margin = _margins(spec, lower, c_open)
        if alpha_live and result.domains > alpha_after and still.any():
            # alpha-CROWN on the children CROWN left open (see Models.alpha_pairs), those
            # nearest a proof first, at most ALPHA_PER_ROUND
            timer.stage("bounds")
            which = np.flatnonzero(still.any(axis=1))
            which = which[np.argsort(-c_margin[which], kind="stable")[:ALPHA_PER_ROUND]]
            lower[which], kept[which] = models.alpha_pairs(
                c_lo[which], c_hi[which], spec, lower[which], kept[which], kernel=kernel,
                steps=alpha_steps, over=timer.over)
            result.alpha += len(which)
            still, c_margin = _margins(spec, lower, c_open)
            result.alpha_proved += int(np.sum(~still[which].any(axis=1)))
            # it pays where CROWN stalls (property 1: it proves 44-81% of the boxes CROWN
            # leaves open); where it proves few, CROWN's cheap splits win (3_3 property 2:
            # 12%, and 10x slower): give it up
            alpha_live = (result.alpha < ALPHA_PROBE
                          or result.alpha_proved >= ALPHA_MIN_RATE * result.alpha)
            timer.stage("alpha")
        keep = still.any(axis=1)
        result.proved += int(keep.size - np.count_nonzero(keep))
        timer.stage("bounds")
        if not queue.push(lo=c_lo[keep], hi=c_hi[keep], open=still[keep], margin=c_margin[keep],
                          inh=kept[keep], age=c_age[keep],
                          low=lower[keep], coef=coef[keep], const=consts[keep]):
            return finish("unknown", f"domain cap: more than {cap} open domains")
        result.max_queue = max(result.max_queue, queue.size)
        rounds += 1
        if attack_steps and rounds % ATTACK_EVERY == 0 and queue.size:
            worst = queue.peek(min(attack_chains, queue.size))
            a_lo, a_hi = worst["lo"], worst["hi"]
            cex = check(_attack(models, spec, a_lo, a_hi, np.ones((len(a_lo), j), dtype=bool),
                                max(2, attack_steps // 4), rng, timer))
            timer.stage("attack")
            if cex is not None:
                return finish("sat", "counterexample from an attack on the worst domains", cex)
        if progress is not None:
            progress({"domains": result.domains, "proved": result.proved, "open": queue.size,
                      "seconds": timer.now() - timer.start})
    return finish("unsat", f"all {result.domains} domains proved")


def shift_progress(progress: Callable[[dict[str, Any]], None], before: BabResult
                   ) -> Callable[[dict[str, Any]], None]:
    """``progress`` for a search that follows ``before`` in one verification (a later region,
    phase or run): its reported ``domains`` and ``proved`` count ``before``'s too, so a display
    shows one running total. ``before``'s counts are read now, not when a report comes."""
    domains, proved = before.domains, before.proved

    def report(counts: dict[str, Any]) -> None:
        progress({**counts, "domains": counts["domains"] + domains,
                  "proved": counts.get("proved", 0) + proved})
    return report


def spec_of_region(region: Any, n_outputs: int, dtype: Any) -> Spec:
    """The ``Spec`` of one region of a ``bounds.properties.Property`` (its outward box, inner
    box in ``dtype`` and conjunctions; conjunctions without constraints are not allowed here)."""
    lo, hi = region.box()
    in_lo, in_hi = region.inner_box(dtype)
    mats = [conj.matrix(n_outputs) for conj in region.outputs]
    a = np.concatenate([m[0] for m in mats]) if mats else np.zeros((0, n_outputs))
    b = np.concatenate([m[1] for m in mats]) if mats else np.zeros(0)
    group = np.concatenate([np.full(len(m[1]), c, dtype=np.int64) for c, m in enumerate(mats)]
                           + [np.zeros(0, np.int64)])
    return Spec(lo, hi, in_lo, in_hi, a, b, group, len(mats))


@dataclass
class Resume:
    """Where a timed-out ``verify_property`` stopped: every region before ``region`` proved
    (``unsat``), and that region's open domains ``queue`` (``search``'s ``resume``)."""

    region: int
    queue: Any


def verify_property(models: Models, prop: Any, run: Callable[[Array], Array], *,
                    timeout: float | None = None, resume: Resume | None = None,
                    **options: Any) -> BabResult:
    """``search`` on every region of a ``bounds.properties.Property`` in turn, sharing the
    time limit: ``unsat`` when every region is, ``sat`` at the first counterexample. On a
    timeout with every earlier region proved, ``BabResult.queue`` is a ``Resume``: passed
    back as ``resume``, the search goes on where it stopped.

    ``run(x)``: the float32 network on one flat input (batch of one), flat output; a point is a
    counterexample only when ``prop.violated_by(x, run(x))`` (exact arithmetic) says so, and
    the engine's enclosure of the outputs at ``x`` is unsafe throughout
    (``properties.confirm``).
    """
    clock = options.get("clock", time.monotonic)
    search_fn = options.pop("search_fn", search)  # bounds.relu_bab passes its own
    progress = options.pop("progress", None)
    start = clock()

    def confirm(x: Array) -> tuple[Array, Array] | None:
        y = np.asarray(run(x)).reshape(-1)
        if properties.confirm(models.get(1), prop, x, y):
            return np.asarray(x, np.float64), y.astype(np.float64)
        return None

    total = BabResult("unsat", "every region proved")
    proved = True  # every region so far unsat (only then may a timeout be resumed)
    for index, region in enumerate(prop.regions):
        if region.empty or (resume is not None and index < resume.region):
            continue  # (before the resumed region: proved by the earlier call)
        left = None if timeout is None else timeout - (clock() - start)
        if left is not None and left <= 0:
            total.status, total.reason = "timeout", "time ran out between regions"
            break
        if any(len(conj.constraints) == 0 for conj in region.outputs):
            # an output set met everywhere: any point of the box is a counterexample
            in_lo, in_hi = region.inner_box(models.dtype)
            cex = confirm(in_lo + (in_hi - in_lo) / 2)
            if cex is not None:
                total.status, total.reason, total.counterexample = "sat", "unconstrained", cex
                break
            total.status, total.reason = "unknown", "an unconstrained output set"
            proved = False
            continue
        spec = spec_of_region(region, prop.n_outputs, models.dtype)
        extra = ({"resume": resume.queue} if resume is not None and index == resume.region
                 else {})
        if progress is not None:  # (counts since this call began, not since this region's)
            extra["progress"] = shift_progress(progress, total)
        found = search_fn(models, spec, confirm, timeout=left, **options, **extra)
        total.domains += found.domains
        total.proved += found.proved
        total.passes += found.passes
        total.reused += found.reused
        total.alpha += found.alpha
        total.alpha_proved += found.alpha_proved
        total.max_queue = max(total.max_queue, found.max_queue)
        for k, v in found.stages.items():
            total.stages[k] = total.stages.get(k, 0.0) + v
        if found.status != "unsat":
            total.status, total.reason = found.status, found.reason
            total.counterexample = found.counterexample
            if found.status == "timeout" and proved and found.queue is not None:
                total.queue = Resume(index, found.queue)
            total.budget = found.budget
            proved = False
            if found.status in ("sat", "timeout"):
                break
    total.seconds = clock() - start
    return total


def verify_network(net: Any, prop: Any, *, timeout: float | None = None,
                   max_batch: int | None = None, intermediate: str = "pairs",
                   resume: Resume | None = None, **options: Any) -> BabResult:
    """``verify_property`` for a ``torchlean.vnn.instance.Network`` (its ``model``, the batch
    of one the property is stated for, its ``batched(n)`` copies and ``run``): the entry point
    of ``torchlean vnn --method bab``. ``resume``: a timed-out call's ``BabResult.queue`` (a
    ``Resume``, from its second phase; the same network and property): its second phase goes
    on where it stopped."""
    def factory(n: int) -> Any:
        return net.model if n == 1 else net.batched(n)

    # chain networks (bounds.chain_crown) take big batches: 1,024 boxes per pass ran ~10%
    # more domains per CPU-second than 256 on ACAS Xu; the engine's CROWN keeps 256
    models = Models(factory, max_batch=max_batch or PAIR_BATCH, intermediate=intermediate)
    if max_batch is None and models.chain_crown(options.get("kernel", True)) is None:
        models = Models(factory, max_batch=256, intermediate=intermediate)
    options.setdefault("batch", max(1, models.max_batch // 2))
    # no alpha-CROWN on open children (search's alpha_steps stays an option): since the chain
    # pass got cheaper (0.16 ms a domain on ACAS Xu, 2-core Zen 3) a box costs alpha about 34
    # domains' worth of CROWN, while the boxes it proves close under CROWN in a median of 3-7
    # domains (sampled, 4_2 property 2 and 4_9 property 1). Measured, CPU-s without / with:
    # 4_2 property 2 103 / 216, 1_1 property 6 15 / 26, 4_9 property 1 7.6 / 7.6
    options.setdefault("alpha_steps", VERIFY_ALPHA_STEPS)
    if "lookahead" in options:
        return verify_property(models, prop, net.run, timeout=timeout, resume=resume,
                               **options)
    # look-ahead first, for LOOKAHEAD_DOMAINS bounded domains, then the heuristic's splits from
    # scratch: looking ahead answers the property-1 instances whose split score is blind (2_8,
    # 5_7, 4_9: 1.7k-5.4k domains, timeouts without), but its 5x work per split is a loss where
    # the score is right and the search is long (3_3, 4_2 property 2). Going on from the
    # look-ahead phase's open domains instead was measured worse: 4_2 property 2 past 1.39M
    # domains against 645k from scratch. A ``resume`` goes on with the second phase.
    # ``BabResult.looked_ahead``: the look-ahead phase ran to its budget (a later call for the
    # same problem may skip it: ``lookahead="off"``).
    found = None
    if resume is None:
        found = verify_property(models, prop, net.run, timeout=timeout, lookahead="all",
                                max_bounded=LOOKAHEAD_DOMAINS, **options)
        found.queue = None  # (see above)
        if found.status != "timeout" or not found.budget:
            return found
        found.budget = False
    left = timeout
    if timeout is not None and found is not None:
        left = max(timeout - found.seconds, 1e-3)
    if found is not None and options.get("progress") is not None:
        options["progress"] = shift_progress(options["progress"], found)
    rest = verify_property(models, prop, net.run, timeout=left, lookahead="off",
                           resume=resume, **options)
    rest.looked_ahead = found is not None or resume is not None
    if found is not None:
        for name in ("domains", "proved", "passes", "reused", "alpha", "alpha_proved"):
            setattr(rest, name, getattr(rest, name) + getattr(found, name))
        rest.max_queue = max(rest.max_queue, found.max_queue)
        rest.seconds += found.seconds
    return rest
