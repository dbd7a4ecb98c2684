"""CROWN for plain chains of affine layers and relus over many small boxes at once, sound under
round-off: the bound pass of input-splitting branch and bound (``bounds.bab``).

The engine's CROWN (``bounds.engine``) bounds a layer's neurons with one backward pass over the
union of the batch's unstable neurons, for every box of the batch; on ACAS Xu that is 77% of a
branch-and-bound pass. Here, for a network that is exactly a chain (``bounds.forward.chain_of``),
every pre-activation is bounded first by intervals (from the previous layer's bounds, and
intersected with bounds inherited from a box containing this one), and then only each box's
*own* unstable neurons get CROWN bounds: one backward pass over the stacked (box, neuron) pairs,
two rows each (lower and upper), as plain 2-D matrix products with the box's relaxation gathered
per row. The output rows get CROWN over every box. The result also gives each row's bound as a
linear function of the chain's input ``v`` (``Bounds.coef``, ``Bounds.const``): valid on every
sub-box, so a child of a split can be tried with its parent's function (``concretize``) before
any pass, and its coefficients say which input moves the bound most (the split rule).

Soundness (the bound holds for the float32 network when ``kernel``, else for the real one).
The network is ``z_k = W_k h_{k-1} + b_k + delta_k``, ``h_k = relu(z_k)``, ``h_{-1} = v``, where
``|delta_k| <= eps_k`` bounds the float32 kernels' errors (matrix product and bias add, with the
same formulas as the interval rules of ``bounds.ibp``, from the interval of ``h_{k-1}``). A row's
bound is the weak-duality sum (as in ``bounds.engine``): the multipliers are computed in plain
float64 (optionally float32: below) and whatever they are, the evaluation is rigorous:

- affine step with multiplier ``lam`` on ``z_k``: ``lam . b_k`` plus ``-|lam| . S_k``, where
  ``S_k = eps_k + gamma (|W_k| max|h_{k-1}| + |b_k|)`` covers the kernel errors, the residual of
  the rounded product ``lam W_k`` over ``h_{k-1}`` and the rounding of ``lam . b_k``;
- relu step with multiplier ``mu`` on ``h_j`` and ``nu`` (the relaxed one) on ``z_j``: the term
  ``min over [l, u] of (mu relu(z) - nu z)``, which is exactly 0 for stable neurons and for the
  lower line (slope 0 or 1), and ``-nu l`` for the upper line of an unstable neuron, less
  ``|mu| G_j`` with ``G_j = gamma (|l| + |u|)`` for the rounding of ``nu`` and of the sum;
- the input: ``min over the box of A . v`` by centre and radius with its rounding bound, and the
  accumulated constant less ``gamma`` times the sum of its terms' magnitudes.

Every interval is rounded outward (``bounds.rounding``; by ``up_wide``/``down_wide``, at least
one step out and ten times cheaper than ``numpy.nextafter``, which was a fifth of a pass). The
inherited bounds are valid because a bound over a box holds on each of its sub-boxes.

For the (box, neuron) pairs (``ChainCrown.pairs32``, on by default; ``rows32`` does the same
for the output rows, off: looser where it decides which boxes close) the backward pass runs in
float32 (``_backward_chunk32``: half the memory traffic of its elementwise
work, which dominates it, and float32 matrix products). The multipliers may be anything, so
making them in float32 costs nothing; every float32 rounding inside the *evaluated* terms is
accounted with float32's unit roundoff ``u32`` (``MULT_U``):

- the product ``a = fl32(nu W_j)`` (float32 weights: ``n``-term dot products, the weights' own
  rounding to float32 included) is the next multiplier; its residual ``(nu W_j - a) . h_{j-1}``
  is at least ``-gamma32(n + 2) |nu| |W_j| max|h_{j-1}|``: the backward pass's affine slack is
  ``S'_k = eps_k + (gamma + gamma32(n + 2)) (|W_k| max|h_{k-1}| + |b_k|)`` in place of ``S_k``
  (also covering the rounding of a float64 first multiplier ``lam W_k`` to float32);
- a relu step's terms and the bias are one float32 sum ``sum mu p + min(mu, 0) q`` over tables
  rounded outward to float32 (``p <= al b - S``, ``p + q >= T + s b + S``, ``S`` the slack of
  ``mu``), i.e. ``mu (al b - S)`` for ``mu >= 0`` and ``mu (T + s b + S)`` for ``mu < 0``, where
  the weak-duality terms are ``0`` or ``mu T`` (the relu term), ``nu . b`` and ``-|nu| S'``. The
  multiplier ``nu = mu al + min(mu, 0) (s - al)`` is ``mu`` times the slope up to
  ``|nu / mu - s| <= 4 u32``, which moves the relu term by at most ``|mu| 4 u32 (|l| + |u|)``
  and the bias by ``|mu| 4 u32 |b|``; the sum's rounding is at most
  ``gamma32(n + 2) |mu| (|p| + |q|)`` per neuron. All three are in ``S`` (``_pack``);
- each step's float32 total is added into the float64 constant as before (exactly converted);
- underflow: a float32 product may be off by float32's smallest normal (flush-to-zero
  included), bounded per box over the whole pass (``_under``);
- overflow past float32's range leaves inf or nan in the constant or the coefficients: such a
  row gets no bound (-inf), never a wrong one.

Tested on one-point boxes with every neuron stable, where the bound is exact but for round-off:
with large cancelling weights, a planted float64 ``u`` for these roundings puts bounds above the
exact rational values of the network. The price is the slack: the float32 sums' worst-case
errors (``gamma32(n + 2)`` of the terms' magnitudes) are about the network's own kernel errors
``eps_k`` again, and ACAS Xu searches feel that (``pairs32``' measurements).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .forward import Chain
from .rounding import ETA32, ETA64, U32, U64, down_wide, gamma, mid_rad, up_wide

Array = Any

__all__ = ["Bounds", "ChainCrown", "concretize"]

ROW_CHUNK = 4096  # backward rows per matrix product (bounds memory: rows x widest layer)
MULT_U = U32  # unit roundoff of the backward pass's float32 multipliers and sums
MIN32 = 2.0 ** -126  # float32's smallest normal: bounds an underflowing float32 result's error


def _up32(x: Array) -> Array:
    """An upper bound of ``x`` (float64, within 2**-21 of it, relatively, or MIN32) in
    float32: ``x + (|x| 2**-22 + MIN32)``, its two float64 roundings (relative ``2**-53``) and
    the rounding to float32 (relative ``2**-24``, or absolute ``2**-150`` below MIN32) stay
    within the added ``|x| 2**-22 + MIN32``. Overflow is inf, nan stays nan."""
    return (x + (np.abs(x) * 2.0 ** -22 + MIN32)).astype(np.float32)


def _down32(x: Array) -> Array:
    """A lower bound of ``x`` in float32: ``_up32`` mirrored."""
    return (x - (np.abs(x) * 2.0 ** -22 + MIN32)).astype(np.float32)


@dataclass
class Bounds:
    """One pass over ``N`` boxes: ``lower`` ``(N, K)`` certified lower bounds of the rows;
    ``coef`` ``(N, K, d)`` and ``const`` ``(N, K)``: ``row . y >= const + coef . v`` for every
    ``v`` in the box (``lower`` is at least its minimum over the box, and also bounded through
    the output's interval); ``layers``: per hidden layer the
    pre-activation bounds ``(lo, hi)``, ``(N, n_k)`` each; ``pairs``: (box, neuron) pairs that
    got CROWN bounds."""

    lower: Array
    coef: Array
    const: Array
    layers: list[tuple[Array, Array]]
    pairs: int


def concretize(coef: Array, const: Array, lo: Array, hi: Array) -> Array:
    """A lower bound of ``const + coef . v`` over the boxes ``[lo, hi]`` (``(N, d)``), rounded
    outward: ``(N, K)``."""
    c = 0.5 * lo + 0.5 * hi
    r = up_wide(np.maximum(up_wide(hi - c), up_wide(c - lo)))
    d = lo.shape[-1]
    s = np.einsum("nkd,nd->nk", coef, c) - np.einsum("nkd,nd->nk", np.abs(coef), r) + const
    m = np.einsum("nkd,nd->nk", np.abs(coef), np.abs(c) + r) + np.abs(const)
    return down_wide(s - gamma(2 * d + 6) * m - (2 * d + 6) * ETA64)


class ChainCrown:
    """Bounds of a chain network (``Chain``: ``v -> affine -> relu -> ... -> affine``).

    ``kinds[k]``: how layer ``k``'s float32 kernels round, from the ops of its error nodes:
    ``"linear"`` (one fused product and bias), ``"matmul"`` (a product, no bias) or
    ``"matmul+add"`` (a product, then the bias added). ``kernel``: include those errors (the
    bounds then hold for the float32 network); ``u``/``eta``: the kernels' unit roundoff and
    underflow unit."""

    pairs32 = True
    """The pair bounds by the float32 backward pass (else float64). It halves a pass's
    backward time (ACAS Xu, 2-core Zen 3), but float32's rounding slack is about the size of
    the network's kernel errors again, which some searches feel: measured, domains and CPU-s,
    float64 / float32 pairs: 4_2 property 2 637k 104 s / 671k 92 s, 3_3 property 2 176k 36 s
    / 264k 44 s, 1_1 property 6 16.1k 10.3 s / 16.3k 9.9 s, 4_9 property 1 5.4k 8.9 s / 5.5k
    5.9 s. On: the whole of ACAS Xu through ``torchlean vnn`` took 251 s against 308 s (the
    slowest instance, 4_2 property 2, 99 s against 110 s of its 116 s; 3_3 property 2 38 s
    against 35 s)."""
    rows32 = False
    """The output rows by the float32 backward pass too: looser still (the rows decide which
    boxes close): 4_2 property 2 with float32 pairs and rows took 774k domains and 96 CPU-s."""

    def __init__(self, chain: Chain, kinds: list[str], *, kernel: bool, u: float = U32,
                 eta: float = ETA32) -> None:
        if len(kinds) != len(chain.layers):
            raise ValueError("chain_crown: one kind per layer")
        for kind in kinds:
            if kind not in ("linear", "matmul", "matmul+add"):
                raise ValueError(f"chain_crown: unknown layer kind {kind!r}")
        self.layers = chain.layers
        self.w = [np.asarray(layer.w, np.float64) for layer in chain.layers]
        self.b = [np.asarray(layer.b, np.float64) for layer in chain.layers]
        self.aw_t = [np.abs(w).T.copy() for w in self.w]
        self.w_t = [w.T.copy() for w in self.w]
        self.abs_b = [np.abs(b) for b in self.b]
        # float32 weights for the float32 pass (rounded to nearest where not exact: covered)
        self.w32 = [w.astype(np.float32) for w in self.w]
        self.kinds = kinds
        self.kernel = kernel
        self.u, self.eta = u, eta
        if (any(layer.relu is None for layer in chain.layers[:-1])
                or chain.layers[-1].relu is not None):
            raise ValueError("chain_crown: every layer but the last must end in a relu, and "
                             "the last in none (the output is its pre-activation)")

    # --- the forward sweep: intervals, kernel errors, slacks ------------------------------------

    def _kernel_eps(self, k: int, m: Array) -> Array:
        """Kernel error bound of layer ``k``'s pre-activation given ``m >= |W| |h|``."""
        p = self.w[k].shape[1]
        kind = self.kinds[k]
        if kind == "linear":
            return up_wide(gamma(p + 2, self.u) * (m + self.abs_b[k]) + (p + 2) * self.eta)
        e = up_wide(gamma(p + 2, self.u) * m + (p + 2) * self.eta)
        if kind == "matmul+add":  # the sum's own rounding, relative to its magnitude
            out = up_wide(up_wide(m + e) + self.abs_b[k])
            e = up_wide(e + up_wide(self.u * out * (1 + 4 * U64) + 4 * self.eta))
        return e

    def bound(self, v_lo: Array, v_hi: Array, rows: Array,
              inherited: list[tuple[Array, Array]] | None = None,
              refine: bool = True) -> Bounds:
        """Lower bounds of ``rows @ y`` (``rows``: ``(K, m)``) over the boxes ``[v_lo, v_hi]``
        (``(N, d)``, enclosing the chain input's values, kernel errors included);
        ``inherited``: pre-activation bounds of every hidden layer valid on boxes containing
        these; ``refine``: CROWN bounds for the unstable neurons (else intervals only)."""
        n_box, _ = v_lo.shape
        n_layers = len(self.w)
        h_lo, h_hi = np.asarray(v_lo, np.float64), np.asarray(v_hi, np.float64)
        c0 = 0.5 * h_lo + 0.5 * h_hi
        r0 = up_wide(np.maximum(up_wide(h_hi - c0), up_wide(c0 - h_lo)))
        self._c0, self._r0 = c0, r0
        layers: list[tuple[Array, Array]] = []
        # per hidden layer j: relaxation (al, s), upper-line intercept T = s (-l), slack C
        self._al: list[Array] = []
        self._s: list[Array] = []
        self._t: list[Array] = []
        self._slack: list[Array] = []  # S_k: slack of a multiplier on z_k
        self._slack_h: list[Array] = []  # the same for a multiplier on h_k (see _relax)
        self._p: list[Array] = []  # float32 tables of the float32 pass (see _pack)
        self._q: list[Array] = []
        self._al32: list[Array] = []
        self._e32: list[Array] = []
        f32 = self.pairs32 or self.rows32
        self._slack32: list[Array] = []  # S'_k: S_k for the float32 backward pass
        self._hsum: list[Array] = []  # per box: sum of max |h_{k-1}|
        self._under: list[Array] = [np.zeros(n_box)]  # per box: underflow of layers < k
        pairs = 0
        for k in range(n_layers):
            w_t, aw_t, b = self.w_t[k], self.aw_t[k], self.b[k]
            p = w_t.shape[0]
            n = w_t.shape[1]
            mag_in = np.maximum(np.abs(h_lo), np.abs(h_hi))
            m = up_wide((mag_in @ aw_t) * (1 + gamma(p + 2)) + (p + 2) * ETA64)  # >= |W| |h|
            eps = self._kernel_eps(k, m) if self.kernel else 0.0
            g = gamma(2 * max(p, n) + 8)
            self._slack.append(up_wide((eps + g * (m + self.abs_b[k])) * (1 + 4 * U64) + 8 * ETA64))
            # the backward pass's: its products with W_k and b_k are float32 (n-term dot products,
            # the weights rounded to float32 too: gamma(n + 2) with float32's u, MULT_U)
            if f32:
                self._slack32.append(up_wide((eps + (g + gamma(n + 2, MULT_U))
                                              * (m + self.abs_b[k])) * (1 + 4 * U64) + 8 * ETA64))
                self._hsum.append(np.sum(mag_in, axis=1))  # sum of max |h_{k-1}| over the box
            c = 0.5 * h_lo + 0.5 * h_hi
            r = up_wide(np.maximum(up_wide(h_hi - c), up_wide(c - h_lo)))
            zc = c @ w_t + b
            zr = r @ aw_t
            err = up_wide(g * (m + self.abs_b[k] + zr) + (p + 4) * ETA64) + eps
            lo, hi = down_wide(zc - zr - err), up_wide(zc + zr + err)
            if k == n_layers - 1:
                break
            if inherited is not None:
                lo = np.maximum(lo, inherited[k][0])
                hi = np.minimum(hi, inherited[k][1])
            if refine and k > 0:
                box, j = np.nonzero((lo < 0) & (hi > 0))
                pairs += len(box)
                if len(box):
                    lo_p, hi_p = self._pair_bounds(k, box, j)
                    lo[box, j] = np.maximum(lo[box, j], lo_p)
                    hi[box, j] = np.minimum(hi[box, j], hi_p)
            hi = np.maximum(hi, lo)  # an empty intersection only where no float run reaches
            layers.append((lo, hi))
            self._relax(lo, hi)
            if f32:
                self._pack(lo, hi)
            h_lo, h_hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        # the rows over every box
        rows = np.asarray(rows, np.float64)
        k_rows = rows.shape[0]
        lam_w = rows @ self.w[-1]  # (K, p): the rows' multiplier on the last hidden layer
        every = np.arange(n_box)
        k_last = n_layers - 1
        slack32 = self.rows32 and k_last > 0
        s_k = self._slack32[k_last] if slack32 else self._slack[k_last]
        slack = (s_k @ np.abs(rows).T).reshape(-1)  # (N K,): |row| . S_k (or S'_k)
        const, coef, low = self._backward(k_last, every, np.tile(rows @ self.b[k_last], n_box),
                                          slack, np.tile(lam_w, (n_box, 1)), k_rows, slack32)
        # the rows folded into the last layer over the last hidden layer's interval: now and
        # then tighter than CROWN (kept, as the engine keeps the intersection)
        h_c, h_r = mid_rad(h_lo, h_hi)
        p = lam_w.shape[1]
        s = h_c @ lam_w.T - h_r @ np.abs(lam_w).T + rows @ self.b[-1] - self._slack[-1] @ np.abs(
            rows).T
        mag_rows = ((np.abs(h_c) + h_r) @ np.abs(lam_w).T + np.abs(rows) @ self.abs_b[-1]
                    + self._slack[-1] @ np.abs(rows).T)
        by_interval = down_wide(s - gamma(2 * p + 12) * mag_rows - (2 * p + 12) * ETA64)
        low = np.maximum(low.reshape(n_box, k_rows), by_interval)
        return Bounds(low.reshape(n_box, k_rows), coef.reshape(n_box, k_rows, -1),
                      const.reshape(n_box, k_rows), layers, pairs)

    def _relax(self, lo: Array, hi: Array) -> None:
        active = lo >= 0
        unstable = (lo < 0) & (hi > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(unstable, up_wide(hi / np.where(unstable, down_wide(hi - lo), 1.0)),
                         active.astype(np.float64))
        al = np.where(active | (unstable & (hi > -lo)), 1.0, 0.0)
        t = np.where(unstable, s * -lo, 0.0)
        self._al.append(al)
        self._s.append(s)
        self._t.append(t)
        n = lo.shape[1]
        grel = np.where(unstable, up_wide(gamma(2 * n + 16) * (np.abs(lo) + np.abs(hi))), 0.0)
        # the slack of a multiplier mu on h_j (float64 pass): its relu term's rounding plus,
        # through |nu| <= |mu| (slopes in [0, 1], up to rounding), the slack of the next
        # affine step
        k = len(self._al) - 1
        self._slack_h.append(up_wide((grel + self._slack[k] * (1 + 8 * U64))
                                     * (1 + gamma(n + 4))))

    def _pack(self, lo: Array, hi: Array) -> None:
        """The float32 tables of the last relaxed layer ``k`` for the float32 pass (see
        ``_backward_chunk32``): ``al``, ``e = s - al`` and ``p``, ``q`` with
        ``p <= al b - S`` and ``p + q >= T + s b + S`` (``S``: the slack of a multiplier on
        ``h_k``), and the pass's underflow bound."""
        k = len(self._al) - 1
        al, s, t = self._al[k], self._s[k], self._t[k]
        n = lo.shape[1]
        b, abs_b = self.b[k], self.abs_b[k]
        unstable = (lo < 0) & (hi > 0)
        spread = np.abs(lo) + np.abs(hi)
        # the relu term: float64 rounding of the slope and the intercept, and float32's
        # (MULT_U): the slope rounded to float32 and nu = mu al + min(mu, 0) (s - al) rounded
        # twice, so |nu / mu - s| <= 4 u32 (s <= 1 + 2**-51; |s - al| <= 1/2 where al = 1)
        grel = np.where(unstable, up_wide((gamma(2 * n + 16) + 4 * MULT_U) * spread), 0.0)
        # the slack of a multiplier mu on h_k: its relu term's rounding plus, through
        # |nu| <= |mu| (1 + 4 u32) (slopes in [0, 1] up to rounding), the slack of the next
        # affine step, plus |mu| |nu / mu - s| |b| for the bias taken as mu s b; then the
        # float32 sum of the 2 n products mu p + min(mu, 0) q: its error is at most
        # g (|p| + |q|) |mu| per neuron, with |p| + |q| <= T + 2 |b| + 3 S (+ 2**-21 of it)
        g = gamma(n + 2, MULT_U)
        base = up_wide((grel + self._slack32[k] * (1 + 8 * MULT_U)) * (1 + gamma(n + 4))
                       + 4 * MULT_U * abs_b)
        slack = up_wide((base + g * (t + 2 * abs_b)) * (1 + 8 * g))
        p = _down32(al * b - slack)
        q = up_wide(t + s * b + slack + gamma(6) * (t + abs_b + slack))
        self._p.append(p)
        self._q.append(_up32(q - p))
        al32 = al.astype(np.float32)
        self._al32.append(al32)
        self._e32.append(s.astype(np.float32) - al32)  # exact (Sterbenz where al = 1)
        # underflow (absolute: float32's smallest normal, so flush-to-zero is covered too) of
        # the float32 work of a step through this layer: nu's products (on |z| and on the next
        # affine slack), the 2 n products of the relu and bias terms, the product nu W (n
        # terms for each of the layer's inputs, times |h_{k-1}|) and the rounding of a
        # multiplier on h_k to float32. Doubled for the float64 rounding of this sum.
        under = (np.sum(spread + self._slack32[k], axis=1) + 3 * n
                 + (n + 1) * self._hsum[k] + np.sum(np.maximum(hi, 0.0), axis=1))
        self._under.append(self._under[-1] + 2 * MIN32 * under)

    def _pair_bounds(self, k: int, box: Array, j: Array) -> tuple[Array, Array]:
        """CROWN bounds of neuron ``j[i]`` of layer ``k`` on box ``box[i]``: rows ``+e_j`` and
        ``-e_j``, side by side (a group of two rows per box: ``_backward``)."""
        lo_out, hi_out = np.empty(len(box)), np.empty(len(box))
        for s in range(0, len(box), ROW_CHUNK // 2):
            b = box[s:s + ROW_CHUNK // 2]
            jj = np.repeat(j[s:s + ROW_CHUNK // 2], 2)
            count = len(b)
            sign = np.tile([1.0, -1.0], count)
            if self.pairs32:
                first = self.w32[k][jj] * sign[:, None].astype(np.float32)
                slack = self._slack32[k][np.repeat(b, 2), jj]
            else:
                first = self.w[k][jj] * sign[:, None]
                slack = self._slack[k][np.repeat(b, 2), jj]
            _, _, low = self._backward(k, b, sign * self.b[k][jj], slack, first, 2,
                                       self.pairs32)
            lo_out[s:s + count] = low[0::2]
            hi_out[s:s + count] = -low[1::2]
        return lo_out, hi_out

    def _backward(self, k: int, box: Array, bias: Array, slack: Array, first: Array,
                  group: int, f32: bool) -> tuple[Array, Array, Array]:
        """Rows ``lam`` on ``z_k``, given by ``bias = lam . b_k``, ``slack = |lam| . S_k`` (both
        rounded to nearest) and ``first = lam W_k`` (coefficients on ``h_{k-1}``), in groups
        of ``group`` consecutive rows over one box, group ``i`` over box ``box[i]``: the
        rigorous constant, the input coefficients and the bound of every row. (A box's
        relaxation is gathered once per group and broadcast over its rows: on ACAS Xu about
        an eighth less time than a gather per row.) ``f32``: by the float32 pass (then
        ``slack`` is ``|lam| . S'_k``)."""
        rows = len(box) * group
        const = np.empty(rows)
        coef = np.empty((rows, self.w[0].shape[1]))
        low = np.empty(rows)
        step = max(1, ROW_CHUNK // group)
        for s in range(0, len(box), step):
            sl = slice(s * group, (s + step) * group)
            chunk = self._backward_chunk32 if f32 else self._backward_chunk
            const[sl], coef[sl], low[sl] = chunk(
                k, box[s:s + step], bias[sl], slack[sl], first[sl], group)
        return const, coef, low

    def _start(self, k: int, bias: Array, slack: Array) -> tuple[Array, Array]:
        """A backward pass's float64 constant and the magnitude of its terms so far: the rows'
        bias less their affine slack (grown by the slack sum's own rounding)."""
        slack = slack * (1 + gamma(self.w[k].shape[0] + 4))
        return bias - slack, np.abs(bias) + slack

    def _backward_chunk(self, k: int, box: Array, bias: Array, slack: Array, a: Array,
                        group: int) -> tuple[Array, Array, Array]:
        g = len(box)
        acc, mags = self._start(k, bias, slack)
        for j in range(k - 1, -1, -1):
            a3 = a.reshape(g, group, -1)
            neg = np.minimum(a3, 0.0)
            pos = a3 - neg  # max(a, 0), exactly
            # per neuron: mu (T + S) for mu < 0 (the upper line's term less its slack), -|mu| S
            # otherwise, i.e. min(mu, 0) T - |mu| S, summed (one more rounding than a single
            # sum: n_terms below); the multiplier nu = mu times the lower or the upper slope
            # (one of the two products is 0, so the sum is the rounded product itself).
            # No np.where: 2-5x faster per step (measured)
            term = (np.einsum("grn,gn->gr", neg, self._t[j][box])
                    - np.einsum("grn,gn->gr", pos - neg, self._slack_h[j][box])).reshape(-1)
            nu = (pos * self._al[j][box][:, None] + neg * self._s[j][box][:, None]).reshape(
                g * group, -1)
            bias = nu @ self.b[j]
            acc += term + bias
            mags += np.abs(term) + np.abs(bias)
            a = nu @ self.w[j]
        n_terms = 3 * k + 4
        rig = down_wide(acc - gamma(n_terms + 4) * mags - n_terms * ETA64)
        return rig, a, self._over_box(box, rig, a, group)

    def _over_box(self, box: Array, rig: Array, a: Array, group: int) -> Array:
        """The rows' rigorous lower bounds over their boxes: ``rig + a . x`` minimised over box
        ``box[i]`` for group ``i`` of ``group`` rows (centre and radius, rounded outward)."""
        c, r = self._c0[box], self._r0[box]
        d = a.shape[1]
        a3 = a.reshape(len(box), group, d)
        abs3 = np.abs(a3)
        s = (np.einsum("grd,gd->gr", a3, c) - np.einsum("grd,gd->gr", abs3, r)).reshape(-1) + rig
        m = np.einsum("grd,gd->gr", abs3, np.abs(c) + r).reshape(-1) + np.abs(rig)
        return down_wide(s - gamma(2 * d + 6) * m - (2 * d + 6) * ETA64)

    def _backward_chunk32(self, k: int, box: Array, bias: Array, slack: Array, a: Array,
                          group: int) -> tuple[Array, Array, Array]:
        g = len(box)
        acc, mags = self._start(k, bias, slack)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow: no bound (below)
            if k:  # a multiplier: any value (its rounding is in S'_k, its underflow in under)
                a = a.astype(np.float32, copy=False)
            for j in range(k - 1, -1, -1):
                a3 = a.reshape(g, group, -1)
                neg = np.minimum(a3, np.float32(0.0))
                # per neuron: mu (al b - S) for mu >= 0, mu (T + s b + S) for mu < 0: the relu
                # term (0, or mu T on the upper line), the bias nu b and -|mu| S, summed in
                # float32 (its rounding is in S); the multiplier nu = mu al + min(mu, 0) (s - al)
                # (mu times the lower or the upper slope). No np.where: 2-5x faster per step
                term = (np.einsum("grn,gn->gr", a3, self._p[j][box])
                        + np.einsum("grn,gn->gr", neg, self._q[j][box])).reshape(-1)
                nu = a3 * self._al32[j][box][:, None]
                nu += neg * self._e32[j][box][:, None]
                term = term.astype(np.float64)
                acc += term
                mags += np.abs(term)
                a = nu.reshape(g * group, -1) @ self.w32[j]
            n_terms = 2 * k + 4
            under = np.repeat(self._under[k][box], group)
            rig = down_wide(acc - gamma(n_terms + 5) * mags - n_terms * ETA64 - under)
            a = a.astype(np.float64)
            low = self._over_box(box, rig, a, group)
        # a float32 overflow leaves inf or nan in the constant or the coefficients: no bound
        bad = ~(np.isfinite(rig) & np.all(np.isfinite(a), axis=1)) | np.isnan(low)
        if bad.any():
            rig[bad], a[bad], low[bad] = -np.inf, 0.0, -np.inf
        return rig, a, low
