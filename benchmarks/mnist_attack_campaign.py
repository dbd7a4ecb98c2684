"""Offline counterexample campaign on MNIST-FC instances (issue 23): a strong attack, far beyond
``torchlean vnn``'s budget, to find out which open instances are sat at all.

Not part of torchlean: a measurement script. The network is run in float32 NumPy from the ONNX
weights (the same matrices torchlean runs); any point found is re-checked by ``torchlean vnn``'s
own check (``Network.run`` + ``Property.violated_by``, exact) and by onnxruntime before it is
reported. Stages per instance:

1. APGD (Croce & Hein 2020) targeted per unsafe conjunction, margin loss ``y_t - y_label``,
   step halving at its checkpoints, momentum 0.75; ``--restarts`` restarts of ``--chains``
   chains per target, cycling through ``--start`` kinds: uniform points, output-diversified
   (ODI) starts, or ``hidden`` starts (a hidden neuron off at the box's centre, in any layer,
   switched on by sign steps on its pre-activation); ``--leak`` lets off relus pass a share of
   the gradient backwards (a surrogate gradient).
2. ``--dive K``: for the K targets with the best margins, local MILPs (a BaB-attack-like search
   in activation space, scipy HiGHS) from the best point: the relus far from 0 keep their phase,
   the ``--free`` nearest to 0 (in units of their interval width) become binaries (big-M from
   interval bounds under the fixed phases); maximise ``y_t - y_label`` over the box; repeated
   from the MILP's point with the next ``--free`` count.

    python benchmarks/mnist_attack_campaign.py --net 256x4 --props prop_12_0.05,prop_1_0.03 \
        --restarts 3 --steps 300 --chains 16 --start uniform,odi,hidden --dive 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from torchlean.vnn import instance, vnnlib

DIR = "/work/shared/vnncomp2021/mnistfc"


def load_net(name):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(DIR, f"mnist-net_{name}.onnx"))
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    layers = []
    for node in m.graph.node:
        if node.op_type == "Gemm":
            w, b = init[node.input[1]], init[node.input[2]]
            layers.append((w.astype(np.float32), b.astype(np.float32)))
    return layers


def load_prop(name, folder=DIR):
    prop = vnnlib.read(os.path.join(folder, f"{name}.vnnlib"))
    region = prop.regions[0]
    lo, hi = region.inner_box(np.float32)
    # every conjunction is one row y_t - y_label >= 0, i.e. y_label - y_t <= 0
    targets, label = [], None
    for conj in region.outputs:
        (con,) = conj.constraints
        terms = dict(con.terms)
        t = next(i for i, c in terms.items() if c < 0)
        lab = next(i for i, c in terms.items() if c > 0)
        assert con.bound == 0 and label in (None, lab)
        label = lab
        targets.append(t)
    return prop, lo, hi, label, targets


def forward(layers, x, keep=False):
    acts, pres = [x], []
    h = x
    for k, (w, b) in enumerate(layers):
        z = h @ w.T + b
        if k < len(layers) - 1:
            pres.append(z)
            h = np.maximum(z, 0)
            acts.append(h)
        else:
            h = z
    return (h, pres, acts) if keep else h


LEAK = 0.0  # backward slope through an off relu (0: the true gradient)


def grad_margin(layers, x, label, t):
    """Margins y_t - y_label (N,) and their input gradients (N, 784); t: (N,) targets. With
    ``LEAK`` > 0 an off relu passes that share of the gradient backwards (a surrogate that
    draws chains towards switching neurons on)."""
    y, pres, _ = forward(layers, x, keep=True)
    n = len(x)
    m = y[np.arange(n), t] - y[:, label]
    w_last = layers[-1][0]
    g = w_last[t] - w_last[label]  # (N, H)
    for k in range(len(layers) - 2, -1, -1):
        g = g * np.where(pres[k] > 0, 1.0, LEAK).astype(np.float32)
        g = g @ layers[k][0]
    return m, g


def apgd(layers, lo, hi, label, targets, chains, steps, rng, starts=None):
    """APGD (L-inf box version) with the margin loss, one target per chain."""
    n = chains * len(targets)
    t = np.repeat(np.asarray(targets), chains)
    width = hi - lo
    x = lo + rng.uniform(size=(n, lo.size)).astype(np.float32) * width if starts is None else starts
    x = np.clip(x, lo, hi).astype(np.float32)
    eta = np.full(n, 2.0, dtype=np.float32)  # 2 eps, in units of half the width
    half = width / 2
    m, g = grad_margin(layers, x, label, t)
    best_m, best_x = m.copy(), x.copy()
    x_prev = x.copy()
    # checkpoints (Croce & Hein)
    p = [0, 0.22]
    while p[-1] < 1:
        p.append(p[-1] + max(p[-1] - p[-2] - 0.03, 0.06))
    checks = sorted({int(np.ceil(q * steps)) for q in p if q <= 1})
    last_check = 0
    count = np.zeros(n)
    best_at_check = best_m.copy()
    eta_at_check = eta.copy()
    for step in range(1, steps + 1):
        z = np.clip(x + (eta[:, None] * half) * np.sign(g), lo, hi)
        alpha = 0.75 if step > 1 else 1.0
        x_new = np.clip(x + alpha * (z - x) + (1 - alpha) * (x - x_prev), lo, hi).astype(np.float32)
        x_prev, x = x, x_new
        m, g = grad_margin(layers, x, label, t)
        count += m > best_m
        better = m > best_m
        best_m[better], best_x[better] = m[better], x[better]
        if np.any(best_m >= 0):
            break
        if step in checks:
            k = step - last_check
            cond1 = count < 0.75 * k
            cond2 = (eta == eta_at_check) & (best_m == best_at_check)
            halve = cond1 | cond2
            eta_at_check = eta.copy()
            eta[halve] /= 2
            x[halve] = best_x[halve]
            x_prev[halve] = best_x[halve]
            if np.any(halve):
                m2, g2 = grad_margin(layers, x[halve], label, t[halve])
                g[halve] = g2
            count[:] = 0
            best_at_check = best_m.copy()
            last_check = step
    return best_m, best_x, t


def odi_starts(layers, lo, hi, n, rng, k=10):
    x = lo + rng.uniform(size=(n, lo.size)).astype(np.float32) * (hi - lo)
    for _ in range(k):
        d = rng.uniform(-1, 1, size=(n, layers[-1][0].shape[0])).astype(np.float32)
        y, pres, _ = forward(layers, x, keep=True)
        g = d @ layers[-1][0]
        for j in range(len(layers) - 2, -1, -1):
            g = (g * (pres[j] > 0)) @ layers[j][0]
        x = np.clip(x + 0.25 * (hi - lo) * np.sign(g), lo, hi).astype(np.float32)
    return x


def hidden_starts(layers, lo, hi, n, rng, steps=20):
    """Per chain a random hidden neuron (any layer) that is off at the box's centre, switched on
    by ``steps`` sign-gradient steps on its pre-activation from a random point: starts in parts
    of the box where neurons that pass no gradient at the centre are on."""
    centre = ((lo + hi) / 2)[None].astype(np.float32)
    _, pres, _ = forward(layers, centre, keep=True)
    cands = [(k, i) for k, z in enumerate(pres) for i in np.flatnonzero(z[0] <= 0)]
    pick = [cands[j] for j in rng.integers(0, len(cands), size=n)]
    x = (lo + rng.uniform(size=(n, lo.size)) * (hi - lo)).astype(np.float32)
    for step in range(steps):
        _, pres, _ = forward(layers, x, keep=True)
        grads = np.zeros_like(x)
        for layer in sorted({k for k, _ in pick}):
            rows = np.array([c for c, (k, _) in enumerate(pick) if k == layer])
            idx = np.array([pick[c][1] for c in rows])
            g = np.zeros((len(rows), pres[layer].shape[1]), np.float32)
            g[np.arange(len(rows)), idx] = 1
            for j in range(layer, -1, -1):
                if j < layer:
                    g = g * np.where(pres[j][rows] > 0, 1.0, LEAK).astype(np.float32)
                g = g @ layers[j][0]
            grads[rows] = g
        size = 0.5 * 0.9 ** step
        x = np.clip(x + size * (hi - lo) * np.sign(grads), lo, hi).astype(np.float32)
    return x


def check(prop, net_path, x):
    """torchlean's exact check and onnxruntime's; returns (torchlean ok, ort ok, margins)."""
    net = instance.Network(net_path)
    y = net.run(x)
    ok = prop.violated_by(x.astype(np.float64), y.astype(np.float64)) is not None
    import onnxruntime as ort
    sess = ort.InferenceSession(net_path)
    inp = sess.get_inputs()[0]
    y2 = sess.run(None, {inp.name: x.astype(np.float32).reshape(net.input_shape)})[0].reshape(-1)
    ok2 = prop.violated_by(x.astype(np.float64), y2.astype(np.float64)) is not None
    return ok, ok2, y, y2


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", required=True)
    ap.add_argument("--props", required=True)
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", default="uniform,odi")
    ap.add_argument("--out", default=None)
    ap.add_argument("--dir", default=DIR, help="where the .vnnlib files are")
    ap.add_argument("--leak", type=float, default=0.0)
    ap.add_argument("--dive", type=int, default=0, help="targets (best first) to dive on")
    ap.add_argument("--free", default="60,160")
    ap.add_argument("--milp-time", type=float, default=60.0)
    ap.add_argument("--radius", type=float, default=None,
                    help="MILP trust region: this share of the box's width around the point")
    args = ap.parse_args(argv)
    global LEAK
    LEAK = args.leak
    layers = load_net(args.net)
    net_path = os.path.join(DIR, f"mnist-net_{args.net}.onnx")
    rows = []
    for name in args.props.split(","):
        prop, lo, hi, label, targets = load_prop(name, args.dir)
        rng = np.random.default_rng(args.seed)
        t0 = time.process_time()
        best = (-np.inf, None, None)
        per_target = {t: -np.inf for t in targets}
        best_x = {}
        found = None
        kinds = args.start.split(",")
        for r in range(args.restarts):
            kind = kinds[r % len(kinds)]
            n = args.chains * len(targets)
            starts = (None if kind == "uniform" else odi_starts(layers, lo, hi, n, rng)
                      if kind == "odi" else hidden_starts(layers, lo, hi, n, rng))
            m, x, t = apgd(layers, lo, hi, label, targets, args.chains, args.steps, rng, starts)
            for tt in targets:
                k = int(np.flatnonzero(t == tt)[np.argmax(m[t == tt])])
                if m[k] > per_target[tt]:
                    per_target[tt], best_x[tt] = float(m[k]), x[k].copy()
            k = int(np.argmax(m))
            if m[k] > best[0]:
                best = (float(m[k]), x[k].copy(), int(t[k]))
            if m[k] >= 0:
                ok, ok2, y, y2 = check(prop, net_path, x[k])
                if ok and ok2:
                    found = x[k].copy()
                    break
        if found is None and args.dive:
            for tt in sorted(targets, key=lambda q: -per_target[q])[:args.dive]:
                got = dive(layers, lo, hi, label, tt, best_x[tt], time_limit=args.milp_time,
                           radius=args.radius,
                           free=tuple(int(v) for v in args.free.split(",")),
                           rounds=len(args.free.split(",")),
                           log=lambda s: print(s, file=sys.stderr, flush=True))
                per_target[tt] = max(per_target[tt], got[0])
                if got[0] > best[0]:
                    best = (got[0], got[1], tt)
                if got[0] >= 0:
                    ok, ok2, y, y2 = check(prop, net_path, got[1])
                    if ok and ok2:
                        found = got[1]
                        break
        row = {"net": args.net, "prop": name, "best_margin": best[0], "target": best[2],
               "sat": found is not None, "cpu_s": round(time.process_time() - t0, 1),
               "restarts": r + 1, "per_target": {int(k): round(v, 4) for k, v in
                                                 per_target.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
        if found is not None and args.out:
            np.save(os.path.join(args.out, f"cex_{args.net}_{name}.npy"), found)
    return rows



# ---------------------------------------------------------------------------------------------
# Local MILP (BaB-attack style): keep the phase of relus far from 0 at a candidate point, make the
# nearest ``free`` ones binaries, maximise the target margin over the box.


SLACK = 1e-4


def _intervals(layers, lo, hi, phase):
    """Interval bounds of each hidden layer's pre-activations with fixed phases applied
    (phase: per layer, 1 active, 0 inactive, -1 free); None if a fixed phase is infeasible."""
    bounds = []
    l, u = lo.astype(np.float64), hi.astype(np.float64)
    for k, (w, b) in enumerate(layers[:-1]):
        w = w.astype(np.float64)
        c, r = (l + u) / 2, (u - l) / 2
        zl, zu = w @ c + b - np.abs(w) @ r, w @ c + b + np.abs(w) @ r
        p = phase[k]
        if np.any((p == 1) & (zu < 0)) or np.any((p == 0) & (zl > 0)):
            return None
        # a fixed phase with a little slack: the point's own float32 phases must stay feasible
        # for the float64 program
        zl = np.where(p == 1, np.maximum(zl, -SLACK), zl)
        zu = np.where(p == 0, np.minimum(zu, SLACK), zu)
        bounds.append((zl, zu))
        l = np.where(p == 0, 0, np.maximum(zl, 0))
        u = np.where(p == 0, 0, np.maximum(zu, 0))
    return bounds


def local_milp(layers, lo, hi, label, t, x0, free, time_limit=20.0, radius=None):
    """Maximise y_t - y_label over the box with the relu phases of ``x0`` kept except the
    ``free`` relus nearest to 0 (scaled by their interval width). ``radius``: only within that
    share of the box's width around ``x0`` (tighter big-M constants: deep nets' interval bounds
    are too loose for HiGHS to find any solution). Returns (value, x) or None."""
    if radius is not None:
        lo, hi = (np.maximum(lo, x0 - radius * (hi - lo)).astype(np.float32),
                  np.minimum(hi, x0 + radius * (hi - lo)).astype(np.float32))
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix
    _, pres, _ = forward(layers, x0[None].astype(np.float32), keep=True)
    phase = [(z[0] > 0).astype(np.int64) for z in pres]
    # free the neurons nearest to 0, in units of the (unfixed) interval width
    loose = _intervals(layers, lo, hi, [np.full_like(p, -1) for p in phase])
    scores = np.concatenate([np.abs(z[0]) / np.maximum(bu - bl, 1e-9)
                             for z, (bl, bu) in zip(pres, loose, strict=True)])
    sizes = [len(p) for p in phase]
    order = np.argsort(scores)[:free]
    flat = np.concatenate(phase)
    flat[order] = -1
    phase = np.split(flat, np.cumsum(sizes)[:-1])
    bnds = _intervals(layers, lo, hi, phase)
    if bnds is None:
        return None
    n0 = lo.size
    # variable layout
    offs, pos = [], n0
    for k, p in enumerate(phase):
        nf = int(np.sum(p == -1))
        offs.append((pos, pos + sizes[k], pos + 2 * sizes[k], nf))
        pos += 2 * sizes[k] + nf
    nvar = pos
    lb = np.zeros(nvar)
    ub = np.zeros(nvar)
    integ = np.zeros(nvar)
    lb[:n0], ub[:n0] = lo, hi
    rows, cols, vals, rlo, rhi = [], [], [], [], []
    r = 0

    def add(cs, vs, a, b):
        nonlocal r
        rows.extend([r] * len(cs))
        cols.extend(cs)
        vals.extend(vs)
        rlo.append(a)
        rhi.append(b)
        r += 1

    prev = np.arange(n0)
    for k, p in enumerate(phase):
        w, b = layers[k]
        w = w.astype(np.float64)
        zs, as_, ds, nf = offs[k]
        zl, zu = bnds[k]
        lb[zs:zs + sizes[k]], ub[zs:zs + sizes[k]] = zl, zu
        # z - W a_prev = b
        for i in range(sizes[k]):
            cols_i = np.flatnonzero(w[i])
            add([zs + i, *prev[cols_i].tolist()], [1.0, *(-w[i, cols_i]).tolist()], b[i], b[i])
        free_idx = np.flatnonzero(p == -1)
        for i in range(sizes[k]):
            a_i, z_i = as_ + i, zs + i
            if p[i] == 0:
                lb[a_i] = ub[a_i] = 0.0
            elif p[i] == 1:
                lb[a_i], ub[a_i] = zl[i], zu[i]
                add([a_i, z_i], [1.0, -1.0], 0.0, 0.0)
        for j, i in enumerate(free_idx):
            a_i, z_i, d_i = as_ + i, zs + i, ds + j
            lb[a_i], ub[a_i] = 0.0, max(zu[i], 0)
            lb[d_i], ub[d_i], integ[d_i] = 0, 1, 1
            add([a_i, z_i], [1.0, -1.0], 0.0, np.inf)  # a >= z
            add([a_i, z_i, d_i], [1.0, -1.0, -zl[i]], -np.inf, -zl[i])  # a <= z - l (1 - d)
            add([a_i, d_i], [1.0, -zu[i]], -np.inf, 0.0)  # a <= u d
        prev = np.arange(as_, as_ + sizes[k])
    w_l, b_l = layers[-1]
    c = np.zeros(nvar)
    c[prev] = -(w_l[t].astype(np.float64) - w_l[label])
    const = float(b_l[t]) - float(b_l[label])
    a_mat = coo_matrix((vals, (rows, cols)), shape=(r, nvar)).tocsr()
    res = milp(c, constraints=LinearConstraint(a_mat, rlo, rhi), integrality=integ,
               bounds=Bounds(lb, ub), options={"time_limit": time_limit, "disp": False})
    if res.x is None:
        print(f"  milp: {res.message}", file=sys.stderr)
        return None
    x = np.clip(res.x[:n0], lo, hi).astype(np.float32)
    return -res.fun + const, x


def dive(layers, lo, hi, label, t, x0, free=(30, 60, 120), rounds=3, time_limit=30.0, log=print,
         radius=None):
    """Local MILPs from ``x0``: each round re-fixes the phases at the current best point and frees
    the ``free[r]`` relus nearest to 0; returns the best (margin, x) in float32."""
    y = forward(layers, x0[None])[0]
    best = (float(y[t] - y[label]), x0)
    for r in range(rounds):
        f = free[min(r, len(free) - 1)]
        t0 = time.process_time()
        got = local_milp(layers, lo, hi, label, t, best[1], f, time_limit, radius)
        if got is None:
            log(f"  round {r} free {f}: no solution")
            continue
        y = forward(layers, got[1][None])[0]
        m = float(y[t] - y[label])
        log(f"  round {r} free {f}: milp {got[0]:.4f} float32 {m:.4f} "
            f"({time.process_time() - t0:.1f} cpu-s)")
        if m > best[0]:
            best = (m, got[1])
        if best[0] >= 0:
            break
    return best


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
