"""CROWN and alpha-CROWN per VNN-COMP 2021 MNIST-FC instance: torchlean against auto_LiRPA.

A benchmark, not a test (nothing here gates on the clock). For every ``--every``-th row of
``mnistfc_instances.csv`` (default: every third, 30 instances) it runs, in this one process and
alternately (torchlean, then auto_LiRPA, instance by instance):

- torchlean: ``bounds.properties.refute`` on each region of the property, what ``torchlean vnn
  --method crown`` runs (float32-sound bounds, ``kernel=True``); for alpha-CROWN the CROWN pass
  followed by ``refute(method="alpha-crown", reuse=...)`` as ``--method alpha-crown`` runs it
  (``--alpha-steps`` steps, early stop once every unsafe conjunction is refuted).
- auto_LiRPA: ``BoundedModule.compute_bounds(C=..., method="CROWN"`` / ``"CROWN-Optimized",
  bound_upper=False)`` on the same network rebuilt as a ``torch.nn.Sequential`` (its weights
  copied from the ONNX file) with the same rows ``C`` (``--alpha-steps`` iterations, its own
  early stop once every row is above its threshold). Building the ``BoundedModule`` is not
  timed; torchlean's timing includes all of its per-call set-up.

Times are CPU seconds (``time.process_time``) with one thread everywhere (BLAS, OpenMP, torch),
so the ratio holds on a shared machine. It prints per-method medians, the ratio and how many
instances each tool verifies (every unsafe conjunction refuted).

auto_LiRPA is not a dependency: point ``--alirpa`` (default ``$AUTO_LIRPA`` or ``/tmp/alirpa``)
at a checkout of its source; without it (or without torch) the script says so and exits 0.

    PYTHONPATH=src python benchmarks/bench_crown_vs_autolirpa.py [--every 3] [--alpha]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy / torch load their thread pools

import argparse  # noqa: E402
import csv  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from torchlean.bounds.properties import refute  # noqa: E402
from torchlean.vnn import vnnlib  # noqa: E402
from torchlean.vnn.instance import Network  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "vnncomp2021")


def torch_net(model: Any) -> Any:
    """The imported chain of linear layers and relus as a ``torch.nn.Sequential``."""
    import torch

    g = model.graph
    consts = dict(g.consts)
    n_data = len(g.inputs) - len(g.params)
    for k, p in enumerate(g.params):
        consts[g.inputs[n_data + k]] = np.asarray(p.array)
    layers: list[Any] = []
    ops = [n.op.name for n in g.nodes if n.op is not None]
    lins = [n for n in g.nodes if n.op is not None and n.op.name == "linear"]
    if set(ops) - {"linear", "relu", "reshape", "flatten"}:
        raise SystemExit(f"torch_net: only linear/relu chains are rebuilt, found "
                         f"{sorted(set(ops))}")
    for j, n in enumerate(lins):
        w, b = consts[n.parents[0]], consts[n.parents[1]]
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        lin.weight.data = torch.tensor(np.asarray(w, np.float32))
        lin.bias.data = torch.tensor(np.asarray(b, np.float32))
        layers.append(lin)
        if j < len(lins) - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def ours(net: Network, prop: Any, alpha_steps: int | None) -> tuple[float, float, bool, bool]:
    """CPU seconds of the CROWN pass and of CROWN + alpha-CROWN, and whether each proves all."""
    t_crown = t_alpha = 0.0
    ok_crown = ok_alpha = True
    for region in prop.regions:
        t = time.process_time()
        r = refute(net.model, prop, region, method="crown")
        t_crown += time.process_time() - t
        ok_crown &= all(r.proved)
        if alpha_steps is None:
            continue
        if all(r.proved):
            t_alpha += time.process_time() - t
            continue
        a = refute(net.model, prop, region, method="alpha-crown", alpha_steps=alpha_steps,
                   reuse=r.bounds)
        t_alpha += time.process_time() - t
        ok_alpha &= all(a.proved)
    return t_crown, t_alpha, ok_crown, ok_alpha


def _refuted(lower: Any, b: Any, groups: Any) -> bool:
    """Every conjunction has a row whose lower bound is above its threshold."""
    above = lower.detach().numpy()[0] > b
    return all(above[groups == j].any() for j in range(int(groups.max()) + 1))


def theirs(tnet: Any, prop: Any, alpha_steps: int | None) -> tuple[float, float, bool, bool]:
    """auto_LiRPA's CROWN and CROWN-Optimized on the same rows (regions one by one)."""
    import torch
    from auto_LiRPA import BoundedModule, BoundedTensor, PerturbationLpNorm

    t_crown = t_alpha = 0.0
    ok_crown = ok_alpha = True
    for region in prop.regions:
        mats = [c.matrix(prop.n_outputs) for c in region.outputs]
        rows = np.concatenate([a for a, _ in mats])
        b = np.concatenate([bb for _, bb in mats])
        groups = np.concatenate([np.full(len(bb), j) for j, (_, bb) in enumerate(mats)])
        lo, hi = region.box()
        x0 = torch.tensor(((lo + hi) / 2)[None], dtype=torch.float32)
        c = torch.tensor(rows[None], dtype=torch.float32)
        ptb = PerturbationLpNorm(x_L=torch.tensor(lo[None], dtype=torch.float32),
                                 x_U=torch.tensor(hi[None], dtype=torch.float32))
        thr = torch.tensor(b[None], dtype=torch.float32)

        bm = BoundedModule(tnet, x0, verbose=0)
        t = time.process_time()
        lower, _ = bm.compute_bounds(x=(BoundedTensor(x0, ptb),), C=c, method="CROWN",
                                     bound_upper=False)
        t_crown += time.process_time() - t
        ok_crown &= _refuted(lower, b, groups)
        if alpha_steps is None:
            continue
        bm = BoundedModule(tnet, x0, verbose=0, bound_opts={"optimize_bound_args": {
            "iteration": alpha_steps,
            "stop_criterion_func": lambda x, thr=thr: bool((x > thr).all())}})
        t = time.process_time()
        lower, _ = bm.compute_bounds(x=(BoundedTensor(x0, ptb),), C=c, method="CROWN-Optimized",
                                     bound_upper=False)
        t_alpha += time.process_time() - t
        ok_alpha &= _refuted(lower, b, groups)
    return t_crown, t_alpha, ok_crown, ok_alpha


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.normpath(ROOT), help="vnncomp2021 directory")
    ap.add_argument("--every", type=int, default=3, help="take every N-th instance (default 3)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many instances")
    ap.add_argument("--alpha", action="store_true", help="also alpha-CROWN / CROWN-Optimized")
    ap.add_argument("--alpha-steps", type=int, default=100)
    ap.add_argument("--alirpa", default=os.environ.get("AUTO_LIRPA", "/tmp/alirpa"))
    ap.add_argument("--verbose", action="store_true", help="one line per instance")
    args = ap.parse_args()
    sys.path.insert(0, args.alirpa)
    try:
        import auto_LiRPA  # noqa: F401
        import torch
    except ImportError as exc:
        print(f"bench_crown_vs_autolirpa: skipped: auto_LiRPA or torch not importable ({exc}); "
              f"pass --alirpa DIR (its source checkout)")
        return 0
    torch.set_num_threads(1)
    csv_path = os.path.join(args.root, "mnistfc", "mnistfc_instances.csv")
    if not os.path.isfile(csv_path):
        print(f"bench_crown_vs_autolirpa: skipped: {csv_path} not found (--root)")
        return 0
    with open(csv_path) as f:
        rows = list(csv.reader(f))[:: args.every][: args.limit]
    steps = args.alpha_steps if args.alpha else None
    nets: dict[str, tuple[Network, Any]] = {}
    times: dict[str, list[float]] = {k: [] for k in ("ours crown", "alirpa crown",
                                                      "ours alpha", "alirpa alpha")}
    verified = dict.fromkeys(times, 0)
    for onnx_name, prop_name, _ in rows:
        if onnx_name not in nets:
            net = Network(os.path.join(args.root, "mnistfc", onnx_name))
            nets[onnx_name] = (net, torch_net(net.model))
        net, tnet = nets[onnx_name]
        prop = vnnlib.read(os.path.join(args.root, "mnistfc", prop_name))
        got = {}
        for who, fn, arg in (("ours", ours, net), ("alirpa", theirs, tnet)):
            tc, ta, okc, oka = fn(arg, prop, steps)
            got[who] = (tc, ta, okc, oka)
            times[f"{who} crown"].append(tc)
            verified[f"{who} crown"] += okc
            if steps is not None:
                times[f"{who} alpha"].append(ta)
                verified[f"{who} alpha"] += oka
        if args.verbose:
            o, a = got["ours"], got["alirpa"]
            print(f"{onnx_name} {prop_name}: crown {o[0]:.4f} vs {a[0]:.4f} ({o[2]}/{a[2]})"
                  + (f"; alpha {o[1]:.3f} vs {a[1]:.3f} ({o[3]}/{a[3]})" if steps else ""),
                  flush=True)
    n = len(rows)
    print(f"{n} MNIST-FC instances (every {args.every}), CPU seconds per instance, 1 thread")
    print(f"{'method':<24}{'ours median':>12}{'auto_LiRPA':>12}{'ratio':>8}{'verified':>14}")
    for m in ("crown", "alpha"):
        if not times[f"ours {m}"]:
            continue
        a, b = statistics.median(times[f"ours {m}"]), statistics.median(times[f"alirpa {m}"])
        label = "CROWN" if m == "crown" else f"alpha-CROWN ({steps} steps)"
        print(f"{label:<24}{a:>12.4f}{b:>12.4f}{a / b:>8.2f}"
              f"{verified[f'ours {m}']:>7}/{verified[f'alirpa {m}']:<6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
