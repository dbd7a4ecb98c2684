"""MEASUREMENT ONLY (unsound): do MILP-refined intermediate bounds pay on MNIST-FC?

Usage: python benchmarks/mnist_milp_refine.py NET:PROP [--limit S] [--bab S] [--binaries all|last]
(``NET`` 2/4/6 for mnist-net_256x{2,4,6}, ``PROP`` e.g. 3_0.03).

1. Captures the root pre-activation bounds that ``relu_bab.search`` has after its alpha-CROWN
   pass (at its ``lp=True`` hook: ``relu_bab.tighten`` is replaced from here, nothing in
   ``src`` changes).
2. Bounds every unstable neuron of relu layers 2..N from below and above by a big-M MILP
   (``scipy.optimize.milp``, HiGHS; variables: the inputs, each earlier relu's outputs, one
   binary per unstable earlier neuron (``--binaries last``: only the previous layer's, the
   others relaxed); the current bounds as big-M), ``--limit`` seconds each, layer by layer,
   each layer on the refined ones before it. The MILP's dual bound (valid when time-limited)
   is intersected in. It is plain float64 and UNTRUSTED: these bounds are not sound for the
   float32 network, and nothing here is a verdict.
3. With ``--bab S``: runs the relu branch and bound for ``S`` CPU seconds with the refined
   bounds injected (again through the ``lp=True`` hook) and without, and prints both.

Prints per layer the unstable neurons before and after, the mean width of the unstable ones,
the median width ratio and the MILP CPU seconds (``docs/MNISTFC_MILP.md`` has the figures).
BLAS runs on one thread; the clock is the process's CPU time (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix, hstack, vstack

from torchlean.bounds import relu_bab
from torchlean.cli import common
from torchlean.vnn import instance, vnnlib

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "vnncomp2021" / "mnistfc"


class _Captured(Exception):
    pass


def capture(net: Any, prop: Any) -> dict[str, Any]:
    """The root's input box, affine layers and per-layer pre-activation bounds."""
    box: dict[str, Any] = {}

    def grab(models: Any, chain: Any, x_lo: Any, x_hi: Any, lo: Any, hi: Any,
             **_: Any) -> Any:
        box.update(layers=[(np.asarray(w, np.float64), np.asarray(b, np.float64))
                           for w, b in chain.layers],
                   x_lo=np.array(x_lo, np.float64), x_hi=np.array(x_hi, np.float64),
                   lo=[np.array(v, np.float64) for v in lo],
                   hi=[np.array(v, np.float64) for v in hi])
        raise _Captured

    real = relu_bab.tighten
    relu_bab.tighten = grab
    try:
        relu_bab.verify_network(net, prop, timeout=600, kernel=True, lp=True)
    except _Captured:
        pass
    finally:
        relu_bab.tighten = real
    if not box:
        raise SystemExit("the property was decided before the intermediate-bound hook")
    return box


class BigM:
    """The big-M MILP of the layers before relu layer ``k`` (0-based) on bounds ``lo``/``hi``."""

    def __init__(self, box: dict[str, Any], lo: list[Any], hi: list[Any], k: int,
                 binary: set[int] | None) -> None:
        layers, n_in = box["layers"], len(box["x_lo"])
        unstable = [np.flatnonzero((lo[i] < 0) & (hi[i] > 0)) for i in range(k)]
        self.h_at, self.d_at, n = [], [], n_in
        for i in range(k):
            self.h_at.append(n)
            n += layers[i][0].shape[0]
        for i in range(k):
            self.d_at.append(n)
            n += len(unstable[i])
        self.n = n
        v_lo, v_hi, integral = [box["x_lo"]], [box["x_hi"]], [np.zeros(n_in)]
        for i in range(k):
            v_lo.append(np.zeros(len(lo[i])))
            v_hi.append(np.maximum(hi[i], 0.0))
            integral.append(np.zeros(len(lo[i])))
        for i in range(k):
            m = len(unstable[i])
            v_lo.append(np.zeros(m))
            v_hi.append(np.ones(m))
            integral.append(np.full(m, 1.0 if binary is None or i in binary else 0.0))
        rows, r_lo, r_hi = [], [], []
        for i in range(k):
            w, b = layers[i]
            z = self.place(i, w)
            act = np.flatnonzero(lo[i] >= 0)
            if len(act):  # h = z
                rows.append(self.unit(self.h_at[i] + act) - z[act])
                r_lo.append(b[act])
                r_hi.append(b[act])
            u_idx = unstable[i]
            if len(u_idx):
                m, lu, uu = len(u_idx), lo[i][u_idx], hi[i][u_idx]
                h, zu = self.unit(self.h_at[i] + u_idx), z[u_idx]
                d = self.unit(self.d_at[i] + np.arange(m))
                rows += [h - zu, h - zu - d.multiply(lu[:, None]), h - d.multiply(uu[:, None])]
                r_lo += [b[u_idx], np.full(m, -np.inf), np.full(m, -np.inf)]
                r_hi += [np.full(m, np.inf), b[u_idx] - lu, np.zeros(m)]
        self.constraint = LinearConstraint(vstack(rows).tocsr(), np.concatenate(r_lo),
                                           np.concatenate(r_hi))
        self.bounds = Bounds(np.concatenate(v_lo), np.concatenate(v_hi))
        self.integral = np.concatenate(integral)
        self.target, self.target_b = self.place(k, layers[k][0]), layers[k][1]

    def place(self, i: int, w: Any) -> Any:
        start = 0 if i == 0 else self.h_at[i - 1]
        m = w.shape[0]
        return hstack([csr_matrix((m, start)), csr_matrix(w),
                       csr_matrix((m, self.n - start - w.shape[1]))]).tocsr()

    def unit(self, cols: Any) -> Any:
        m = len(cols)
        return csr_matrix((np.ones(m), (np.arange(m), cols)), shape=(m, self.n))

    def bound(self, j: int, sign: float, limit: float) -> tuple[float, int]:
        """A lower bound of ``sign * z_kj`` (the MILP's dual bound; -inf if none) and the status."""
        res = milp(sign * self.target[j].toarray().ravel(), constraints=self.constraint,
                   bounds=self.bounds, integrality=self.integral,
                   options={"time_limit": limit, "disp": False})
        dual = getattr(res, "mip_dual_bound", None)
        if dual is None or not np.isfinite(dual):
            dual = res.fun if res.status == 0 else -np.inf
        return float(dual) + sign * float(self.target_b[j]), int(res.status)


def refine(box: dict[str, Any], limit: float, binary: str) -> tuple[list[Any], list[Any]]:
    lo, hi = [v.copy() for v in box["lo"]], [v.copy() for v in box["hi"]]
    for k in range(1, len(lo)):
        start = time.process_time()
        model = BigM(box, lo, hi, k, None if binary == "all" else {k - 1})
        idx = np.flatnonzero((lo[k] < 0) & (hi[k] > 0))
        before = (hi[k] - lo[k])[idx].copy()
        limited = 0
        for j in idx:
            low, s1 = model.bound(j, 1.0, limit)
            neg, s2 = model.bound(j, -1.0, limit)
            lo[k][j], hi[k][j] = max(lo[k][j], low), min(hi[k][j], -neg)
            limited += (s1 == 1) + (s2 == 1)
        after = (hi[k] - lo[k])[idx]
        left = int(((lo[k][idx] < 0) & (hi[k][idx] > 0)).sum())
        print(json.dumps({"layer": k + 1, "unstable": [len(idx), left],
                          "mean_width": [round(float(before.mean()), 3),
                                         round(float(after.mean()), 3)] if len(idx) else [],
                          "median_ratio": round(float(np.median(after / before)), 3)
                          if len(idx) else 1.0,
                          "time_limited": limited, "cpu": round(time.process_time() - start, 1)}),
              flush=True)
    return lo, hi


def bab(net: Any, prop: Any, seconds: float, lo: Any = None, hi: Any = None) -> dict[str, Any]:
    """The relu branch and bound with the root bounds intersected with ``lo``/``hi`` (if given)."""
    log: list[dict[str, Any]] = []

    def inject(models: Any, chain: Any, x_lo: Any, x_hi: Any, l0: Any, h0: Any,
               **_: Any) -> Any:
        if lo is None:
            return l0, h0, None
        return ([np.maximum(a, b) for a, b in zip(l0, lo, strict=True)],
                [np.minimum(a, b) for a, b in zip(h0, hi, strict=True)], None)

    real = relu_bab.tighten
    relu_bab.tighten = inject
    start = time.process_time()
    try:
        found = relu_bab.verify_network(net, prop, timeout=seconds, kernel=True, lp=True,
                                        clock=time.process_time, progress=log.append)
    finally:
        relu_bab.tighten = real
    last = log[-1] if log else {}
    return {"refined": lo is not None, "status": found.status, "domains": found.domains,
            "open": last.get("open"), "margin": last.get("margin"),
            "cpu": round(time.process_time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("instance")
    parser.add_argument("--limit", type=float, default=1.0, help="seconds per MILP")
    parser.add_argument("--bab", type=float, default=0.0, help="CPU seconds of B&B (0: none)")
    parser.add_argument("--binaries", choices=("all", "last"), default="all")
    args = parser.parse_args()
    size, name = args.instance.split(":")
    net = instance.Network(SHARED / f"mnist-net_256x{size}.onnx")
    prop = vnnlib.read(SHARED / f"prop_{name}.vnnlib")
    with common.blas_threads(1):
        box = capture(net, prop)
        lo, hi = refine(box, args.limit, args.binaries)
        if args.bab:
            for found in (bab(net, prop, args.bab, lo, hi), bab(net, prop, args.bab)):
                print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
