"""Intermediate bounds of a ReLU chain tightened by linear programs, made rigorous by the engine.

For a pre-activation neuron ``z_kj`` of relu layer ``k`` the LP minimises (and maximises)
``z_kj`` over the input box and the triangle relaxation of every earlier relu, built on the
current bounds ``[l, u]`` of those layers: an unstable neuron's output ``h`` satisfies
``h >= 0``, ``h >= z`` and ``h <= u (z - l) / (u - l)``; a stable one is ``h = z`` or ``h = 0``.
With the earlier bounds fixed this is the tightest bound any choice of CROWN's lower slopes
gives (the LP's dual *is* such a choice), so it is at least as tight as alpha-CROWN's, whose
slopes are found by a few gradient steps.

scipy's HiGHS solves it in plain float64 with no guarantee, so its answer is never used as a
bound. Only its dual is: the multipliers of the two lower constraints of an unstable neuron,
``lam1`` on ``h >= z`` and ``lam0`` on ``h >= 0``, give the lower slope
``alpha = lam1 / (lam0 + lam1)`` that CROWN's backward pass needs to reproduce the LP's dual
bound (weak duality: any slopes in [0, 1] give a valid bound). The bound itself is the engine's
rigorous evaluation with those slopes (``Propagation.lower`` with ``alpha`` set, ``kernel=True``:
outward rounding and the float32 kernels' error terms, as for every CROWN bound), intersected
with the bounds it had. A wrong or inaccurate dual can only make the bound looser, never wrong.

Only unstable neurons are worth an LP (a stable neuron's relu is exact already), and layer 0
(the first affine map of the box) is exact by intervals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix, hstack, vstack
from scipy.sparse import eye as speye

from .bab import Models
from .beta import Chain, _propagate
from .engine import relu_slopes

Array = Any

__all__ = ["LpStats", "lp_slopes", "tighten"]

PAIRS_PER_PASS = 256  # (neuron, direction) pairs per rigorous evaluation


@dataclass
class LpStats:
    """What ``tighten`` did: LPs solved, their seconds, and per layer tightened how many
    unstable neurons it had before and after."""

    lps: int = 0
    lp_seconds: float = 0.0
    unstable_before: list[int] = field(default_factory=list)
    unstable_after: list[int] = field(default_factory=list)
    stopped: str = ""


class _Relaxation:
    """The triangle LP of the layers before relu layer ``k``: variables ``x`` (the box), then
    the output ``h_i`` of each earlier relu layer; ``z_i = W_i h_{i-1} + b_i``."""

    def __init__(self, chain: Chain, x_lo: Array, x_hi: Array, lo: list[Array],
                 hi: list[Array], k: int) -> None:
        n_in = x_lo.shape[0]
        sizes = [w.shape[0] for w, _ in chain.layers[:k]]
        self.offsets = np.concatenate([[0, n_in], n_in + np.cumsum(sizes)]).astype(int)
        n_var = int(self.offsets[-1])
        bounds_lo = np.concatenate([x_lo] + [np.zeros(s) for s in sizes])
        bounds_hi = np.concatenate([x_hi] + [np.full(s, np.inf) for s in sizes])
        ub_rows, ub_rhs, eq_rows, eq_rhs = [], [], [], []
        # where each unstable neuron's ``h >= z`` row is (for the slopes): layer -> (rows, idx)
        self.lower_rows: list[tuple[Array, Array]] = []
        n_ub = 0
        for i in range(k):
            w, b = chain.layers[i]
            l, u = lo[i], hi[i]
            a_prev = self._place(i, w, n_var)  # W_i h_{i-1} as a row block
            own = self._place_own(i + 1, n_var)  # h_i
            dead = u <= 0
            alive = l >= 0
            unstable = ~dead & ~alive
            hs = slice(self.offsets[i + 1], self.offsets[i + 2])
            bounds_hi[hs] = np.where(dead, 0.0, np.inf)
            bounds_lo[hs] = np.where(alive, -np.inf, 0.0)
            act = np.flatnonzero(alive)
            if len(act):  # h = z
                eq_rows.append(own[act] - a_prev[act])
                eq_rhs.append(b[act])
            uns = np.flatnonzero(unstable)
            if len(uns):
                s = u[uns] / (u[uns] - l[uns])
                ub_rows.append(a_prev[uns] - own[uns])  # z - h <= 0
                ub_rhs.append(-b[uns])
                self.lower_rows.append((np.arange(n_ub, n_ub + len(uns)), uns))
                n_ub += len(uns)
                # h - s z <= -s l
                ub_rows.append(own[uns] - csr_matrix(s[:, None]).multiply(a_prev[uns]))
                ub_rhs.append(s * (b[uns] - l[uns]))
                n_ub += len(uns)
            else:
                self.lower_rows.append((np.zeros(0, int), uns))
        self.a_ub = vstack(ub_rows).tocsr() if ub_rows else None
        self.b_ub = np.concatenate(ub_rhs) if ub_rhs else None
        self.a_eq = vstack(eq_rows).tocsr() if eq_rows else None
        self.b_eq = np.concatenate(eq_rhs) if eq_rhs else None
        self.bounds = [(float(a) if np.isfinite(a) else None, float(b) if np.isfinite(b) else None)
                       for a, b in zip(bounds_lo, bounds_hi, strict=True)]
        self.k = k
        w, b = chain.layers[k]
        self.target = self._place(k, w, n_var)
        self.target_b = b
        self.n_var = n_var

    def _place(self, i: int, w: Array, n_var: int) -> Any:
        """``w`` acting on the variables of ``h_{i-1}`` (``x`` for ``i = 0``), as sparse rows."""
        start, stop = self.offsets[i], self.offsets[i + 1]
        m = w.shape[0]
        parts = []
        if start:
            parts.append(csr_matrix((m, start)))
        parts.append(csr_matrix(w))
        if n_var - stop:
            parts.append(csr_matrix((m, n_var - stop)))
        return hstack(parts).tocsr()

    def _place_own(self, i: int, n_var: int) -> Any:
        start, stop = self.offsets[i], self.offsets[i + 1]
        m = stop - start
        parts = []
        if start:
            parts.append(csr_matrix((m, start)))
        parts.append(speye(m, format="csr"))
        if n_var - stop:
            parts.append(csr_matrix((m, n_var - stop)))
        return hstack(parts).tocsr()

    def solve(self, j: int, sign: float) -> tuple[float, list[Array]] | None:
        """The LP ``min sign * z_kj`` (plain float64, untrusted) and the lower slopes of each
        earlier layer that its dual gives (``relu_slopes``'s default where the dual puts no
        weight on a neuron's lower constraints); None when HiGHS finds no solution."""
        c = sign * self.target[j].toarray().ravel()
        res = linprog(c, A_ub=self.a_ub, b_ub=self.b_ub, A_eq=self.a_eq, b_eq=self.b_eq,
                      bounds=self.bounds, method="highs")
        if res.status != 0:
            return None
        marg_ub = -np.asarray(res.ineqlin.marginals)  # >= 0: the multipliers of a_ub x <= b
        marg_lo = np.asarray(res.lower.marginals)  # >= 0: of the variables' lower bounds
        slopes = []
        for i, (rows, uns) in enumerate(self.lower_rows):
            lam1 = np.maximum(marg_ub[rows], 0.0)
            lam0 = np.maximum(marg_lo[self.offsets[i + 1] + uns], 0.0)
            total = lam0 + lam1
            alpha = np.full(self.offsets[i + 2] - self.offsets[i + 1], np.nan)
            with np.errstate(invalid="ignore", divide="ignore"):
                alpha[uns] = np.where(total > 0, lam1 / np.where(total > 0, total, 1.0), np.nan)
            slopes.append(alpha)
        return float(res.fun) + sign * float(self.target_b[j]), slopes


def lp_slopes(chain: Chain, x_lo: Array, x_hi: Array, lo: list[Array], hi: list[Array],
              k: int, neurons: Array) -> tuple[Array, list[Array], Array]:
    """For each neuron of relu layer ``k`` in ``neurons``, both directions: rows ``(T, n_k)``
    (``+e_j``, then ``-e_j``), the lower slopes per earlier layer ``(T, n_i)`` from the LPs'
    duals (CROWN's adaptive ones where an LP failed or put no weight), and the LPs' own
    (untrusted) lower bounds of each row ``(T,)`` (``-inf`` where an LP failed)."""
    lp = _Relaxation(chain, x_lo, x_hi, lo, hi, k)
    default = [relu_slopes(lo[i], hi[i])[0] for i in range(k)]
    n_k = chain.layers[k][0].shape[0]
    t = 2 * len(neurons)
    rows = np.zeros((t, n_k))
    slopes = [np.repeat(d[None], t, axis=0).astype(np.float64) for d in default]
    values = np.full(t, -np.inf)
    for p, (j, sign) in enumerate([(j, 1.0) for j in neurons] + [(j, -1.0) for j in neurons]):
        rows[p, j] = sign
        got = lp.solve(int(j), sign)
        if got is None:
            continue
        values[p] = got[0]
        for i, alpha in enumerate(got[1]):
            ok = np.isfinite(alpha)
            slopes[i][p, ok] = np.clip(alpha[ok], 0.0, 1.0)
    return rows, slopes, values


def tighten(models: Models, chain: Chain, x_lo: Array, x_hi: Array, lo: list[Array],
            hi: list[Array], *, kernel: bool = True, layers: list[int] | None = None,
            max_lps: int | None = None, over: Callable[[], bool] = lambda: False
            ) -> tuple[list[Array], list[Array], LpStats]:
    """The pre-activation bounds of one domain (``lo``/``hi``: ``(n_k,)`` per relu layer,
    valid over the box ``[x_lo, x_hi]``) with each unstable neuron of ``layers`` (default:
    every relu layer after the first) re-bounded by its LPs' slopes, rigorously (see the module
    docstring), layer by layer in order (a layer's LPs use the tightened earlier ones). Stops
    (keeping what it has) after ``max_lps`` LPs or once ``over()``."""
    lo = [np.asarray(v, np.float64).copy() for v in lo]
    hi = [np.asarray(v, np.float64).copy() for v in hi]
    stats = LpStats()
    todo = list(range(1, len(chain.pre))) if layers is None else sorted(layers)
    for k in todo:
        if not 0 < k < len(chain.pre):
            raise ValueError(f"lp_bounds: layer {k} is not a relu layer after the first")
        # the bounds the LP and the engine both use: the interval sweep intersected with ours
        prop1, _ = _propagate(models.get(1), chain, x_lo[None], x_hi[None],
                              [v[None] for v in lo], [v[None] for v in hi], kernel)
        ivals = [prop1.ivals[p] for p in chain.pre]
        assert all(iv is not None for iv in ivals)  # every op node has its interval
        lo = [np.asarray(iv.lo, np.float64).reshape(-1) for iv in ivals]  # type: ignore[union-attr]
        hi = [np.asarray(iv.hi, np.float64).reshape(-1) for iv in ivals]  # type: ignore[union-attr]
        uns = np.flatnonzero((lo[k] < 0) & (hi[k] > 0))
        stats.unstable_before.append(len(uns))
        if max_lps is not None:
            uns = uns[:max(0, (max_lps - stats.lps) // 2)]
        if over() or not len(uns):
            stats.unstable_after.append(int(((lo[k] < 0) & (hi[k] > 0)).sum()))
            stats.stopped = stats.stopped or ("time" if over() else "")
            continue
        start = time.process_time()
        rows, slopes, _ = lp_slopes(chain, x_lo, x_hi, lo, hi, k, uns)
        stats.lp_seconds += time.process_time() - start
        stats.lps += len(rows)
        bound = rigorous_lower(models, chain, x_lo, x_hi, lo, hi, k, rows, slopes, kernel)
        n = len(uns)
        lo[k][uns] = np.maximum(lo[k][uns], bound[:n])
        hi[k][uns] = np.minimum(hi[k][uns], -bound[n:])
        stats.unstable_after.append(int(((lo[k] < 0) & (hi[k] > 0)).sum()))
    return lo, hi, stats


def rigorous_lower(models: Models, chain: Chain, x_lo: Array, x_hi: Array, lo: list[Array],
                   hi: list[Array], k: int, rows: Array, slopes: list[Array],
                   kernel: bool) -> Array:
    """The engine's rigorous lower bound of ``rows[p] . z_k`` over the domain (box and the
    bounds ``lo``/``hi`` of every relu layer), with the lower slopes ``slopes[i][p]`` of the
    relu layers before ``k``: sound for any slopes in [0, 1]."""
    out = np.empty(len(rows))
    n_in = x_lo.shape[0]
    for start, stop, size in models.chunks(len(rows), PAIRS_PER_PASS):
        take = np.concatenate([np.arange(start, stop), np.full(size - (stop - start), stop - 1)])
        prop, empty = _propagate(models.get(size), chain, np.broadcast_to(x_lo, (size, n_in)),
                                 np.broadcast_to(x_hi, (size, n_in)),
                                 [np.broadcast_to(v, (size, v.shape[0])) for v in lo],
                                 [np.broadcast_to(v, (size, v.shape[0])) for v in hi], kernel)
        prop.alpha = {chain.relus[i]: np.clip(slopes[i][take], 0.0, 1.0).reshape(size, 1, -1)
                      for i in range(k)}
        try:
            got = prop.lower(chain.pre[k], rows[take].reshape(size, 1, -1))[:, 0]
        finally:
            prop.alpha = {}
        out[start:stop] = np.where(empty, np.inf, got)[:stop - start]
    return out
