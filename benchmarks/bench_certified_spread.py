"""Certified training across seeds: torchlean against auto_LiRPA's ``simple_training.py`` recipe.

A measurement, not a test. For each seed it trains the cell (model, method, eps) twice on the digits
split of seed 0 (the reference trains on a fixed data set; ``torchlean train --seed s`` would also
re-split the data):

- ours: what ``torchlean train --model M --certified METHOD --eps E --seed s`` runs (compiled
  backend, initial weights and batch orders from seed ``s``, the CLI's defaults
  ``cli.certified.DEFAULTS``, e.g. the MLP's warm-up regularisers and label smoothing), through
  ``fit`` directly; ``--set KEY=VALUE`` changes a setting of its ``CertifiedConfig`` (``--set
  reg=0 --set smoothing=0`` the reference's recipe exactly, ``--set pool_chord=1`` CROWN-IBP's
  max pooling bounded by the certifier's chord);
- ref: auto_LiRPA's recipe step for step: ``torch.manual_seed(s)``, the torch module's default
  initialisation, a shuffling ``DataLoader`` (batch 64), ``BoundedModule`` (patches mode), its
  ``SmoothedScheduler("start=11,length=30")`` stepped per batch, natural loss at eps 0, robust
  cross-entropy on ``-lb`` (CROWN-IBP: ``beta * CROWN + (1 - beta) * IBP``), Adam 1e-3 and
  ``StepLR(10, 0.5)`` stepped once the target eps is reached, no gradient clipping.

Both networks are then certified by torchlean's sound certifier (``certify``: IBP, CROWN, with
``--alpha`` alpha-CROWN, PGD 20 steps) and by auto_LiRPA (IBP, CROWN, with ``--alirpa-alpha``
alpha-CROWN, 20 iterations; matrix mode, which its max-pool alpha needs) on the same 359 test
examples: the same certifier on both networks separates the training from the certification.
Training time is CPU seconds per epoch with one thread. One JSON line per run; ``--summary``
prints mean +- sd per column for each side from such lines. ``--ours-only`` skips auto_LiRPA's
certification (torchlean's networks and certifier only: the quick way to compare settings).

auto_LiRPA is not a dependency: point ``--alirpa`` (default ``$AUTO_LIRPA`` or ``/tmp/alirpa``)
at a directory holding its ``auto_LiRPA`` package.

    python benchmarks/bench_certified_spread.py mlp ibp 0.05 --seeds 0,1,2,3,4 --alpha > mlp.jsonl
    python benchmarks/bench_certified_spread.py --summary mlp.jsonl

To choose options without looking at the test set, ``--val 0.2`` trains on 80% of the training
set and scores on the other 20% (a fixed draw) instead.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from torchlean import optim  # noqa: E402
from torchlean.bounds.certified_training import CertifiedConfig, CertifiedTraining  # noqa: E402
from torchlean.bounds.certify import certify  # noqa: E402
from torchlean.cli.certified import defaults, lr_after  # noqa: E402
from torchlean.engine import ops_interface as F  # noqa: E402
from torchlean.training.fit import fit  # noqa: E402
from torchlean.zoo import models  # noqa: E402
from torchlean.zoo.trained import load_data  # noqa: E402

COLUMNS = ("clean", "ibp", "crown", "alpha-crown", "pgd")


def torch_net(torch: Any, model: str) -> Any:
    """The torch module equal to torchlean's default ``model`` on digits (same parameter order)."""
    nn = torch.nn
    if model == "mlp":
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def overrides(settings: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs as ``CertifiedConfig`` keyword arguments (a value with a comma
    is a pair of floats, e.g. ``kappa=1,0``; a flag such as ``pool_chord`` takes 1/0, on/off or
    true/false)."""
    flags = {f.name for f in dataclasses.fields(CertifiedConfig) if f.type in (bool, "bool")}
    out: dict[str, Any] = {}
    for item in settings:
        key, _, text = item.partition("=")
        if key in flags:
            if text.lower() not in ("1", "0", "on", "off", "true", "false"):
                raise SystemExit(f"--set {item}: {key} takes 1/0, on/off or true/false")
            out[key] = text.lower() in ("1", "on", "true")
        elif "," in text:
            out[key] = tuple(float(t) for t in text.split(","))
        else:
            try:
                out[key] = int(text) if text.isdigit() else float(text)
            except ValueError:
                out[key] = text
    return out


def validation_split(data: Any, fraction: float) -> Any:
    """``data`` with its test set replaced by a held-out ``fraction`` of its training set (a
    fixed draw), for choosing options without looking at the test set."""
    n = len(data.train)
    order = np.random.default_rng(20260101).permutation(n)
    held = int(round(fraction * n))
    return type(data)(**{**vars(data), "train": data.train[np.sort(order[held:])],
                         "test": data.train[np.sort(order[:held])]})


def train_ours(args: argparse.Namespace, data: Any, seed: int) -> tuple[Any, float]:
    model = models.build(models.config_for(args.model, data, seed=seed))
    opt = optim.Adam(model.parameters(), lr=1e-3)
    settings = {**defaults(args.model, args.method), **overrides(args.set)}  # as `torchlean train`
    config = CertifiedConfig(args.method, args.eps, seed=seed, **settings)

    def on_epoch(record: Any) -> None:
        opt.lr = lr_after(config, 1e-3, record.epoch)
    start = time.process_time()
    fit(model, F.cross_entropy, opt, data.train, 60, 64, backend="compiled", seed=seed,
        progress=False, on_epoch=on_epoch, objective=CertifiedTraining(config))
    return model, (time.process_time() - start) / 60


def train_ref(args: argparse.Namespace, data: Any, seed: int, lib: Any) -> tuple[Any, float]:
    torch = lib.torch
    torch.manual_seed(seed)
    np.random.seed(seed)
    net = torch_net(torch, args.model)
    x = torch.from_numpy(np.asarray(data.train.inputs, np.float32))
    y = torch.from_numpy(np.asarray(data.train.targets).astype(np.int64))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64,
                                         shuffle=True)
    model = lib.BoundedModule(net, x[:2], bound_opts={"activation_bound_option": None,
                                                      "conv_mode": "patches"}, device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step_lr = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    sched = lib.SmoothedScheduler(args.eps, "start=11,length=30")
    ce = torch.nn.CrossEntropyLoss()
    start = time.process_time()
    for _ in range(60):
        if sched.reached_max_eps():
            step_lr.step()
        model.train()
        sched.train()
        sched.step_epoch()
        sched.set_epoch_length(len(loader))
        for xb, yb in loader:
            sched.step_batch()
            eps = sched.get_eps()
            opt.zero_grad()
            c = specs(torch, yb)
            ptb = lib.PerturbationLpNorm(norm=np.inf, eps=eps, x_L=torch.clamp(xb - eps, min=0.0),
                                         x_U=torch.clamp(xb + eps, max=1.0))
            natural = ce(model(lib.BoundedTensor(xb, ptb)), yb)
            if eps < 1e-20:
                loss = natural
            else:
                lb, _ = model.compute_bounds(IBP=True, C=c, method=None)
                factor = (sched.get_max_eps() - eps) / sched.get_max_eps()
                if args.method == "crown-ibp" and factor >= 1e-5:
                    clb, _ = model.compute_bounds(IBP=False, C=c, method="backward",
                                                  bound_upper=False)
                    lb = clb * factor + lb * (1 - factor)
                padded = torch.cat((torch.zeros(lb.size(0), 1), lb), dim=1)
                loss = ce(-padded, torch.zeros(lb.size(0), dtype=torch.int64))
            loss.backward()
            sched.update_loss(loss.item() - natural.item())
            opt.step()
    return net, (time.process_time() - start) / 60


def specs(torch: Any, y: Any) -> Any:
    """The reference's margin rows ``e_y - e_j`` for the 9 classes ``j != y``."""
    c = torch.eye(10)[y].unsqueeze(1) - torch.eye(10).unsqueeze(0)
    keep = ~(y.unsqueeze(1) == torch.arange(10).unsqueeze(0))
    return c[keep].view(y.size(0), 9, 10)


def certify_ours(args: argparse.Namespace, model: Any, x: Any, y: Any) -> dict[str, float]:
    model.eval()
    methods = ["ibp", "crown"] + (["alpha-crown"] if args.alpha else [])
    start = time.process_time()
    row = certify(model, x, y, [args.eps], methods, pgd_steps=20,
                  alpha_steps=args.alpha_steps).rows[0]
    return {"clean": row.clean, **row.certified, "pgd": row.pgd,
            "cpu_s": round(time.process_time() - start, 1)}


def certify_alirpa(args: argparse.Namespace, net: Any, x: Any, y: Any,
                   lib: Any) -> dict[str, float]:
    torch = lib.torch
    net.eval()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    bm = lib.BoundedModule(net, xt[:2], bound_opts={"conv_mode": "matrix", "verbosity": 0},
                           device="cpu")
    with torch.no_grad():
        correct = (net(xt).argmax(1) == yt).numpy()
    ptb = lib.PerturbationLpNorm(norm=np.inf, eps=args.eps, x_L=torch.clamp(xt - args.eps, min=0.0),
                                 x_U=torch.clamp(xt + args.eps, max=1.0))
    bx, c = lib.BoundedTensor(xt, ptb), specs(torch, yt)
    runs = [("ibp", {"IBP": True, "method": None}), ("crown", {"IBP": False, "method": "backward"})]
    if args.alirpa_alpha:
        bm.set_bound_opts({"optimize_bound_args": {"iteration": 20}})
        runs.append(("alpha-crown", {"IBP": False, "method": "CROWN-Optimized"}))
    out: dict[str, float] = {}
    for name, kw in runs:
        start = time.process_time()
        with torch.set_grad_enabled(name == "alpha-crown"):
            lb, _ = bm.compute_bounds(x=(bx,), C=c, bound_upper=False, **kw)
        out[name] = float(np.mean((lb.detach() > 0).all(1).numpy() & correct))
        out[name + "_cpu_s"] = round(time.process_time() - start, 1)
    return out


class AutoLirpa:
    """auto_LiRPA and torch, imported from ``path`` (optional libraries: imported lazily)."""

    def __init__(self, path: str) -> None:
        sys.path.insert(0, path)
        import torch
        from auto_LiRPA import BoundedModule, BoundedTensor
        from auto_LiRPA.eps_scheduler import SmoothedScheduler
        from auto_LiRPA.perturbations import PerturbationLpNorm
        torch.set_num_threads(1)
        self.torch, self.BoundedModule, self.BoundedTensor = torch, BoundedModule, BoundedTensor
        self.SmoothedScheduler, self.PerturbationLpNorm = SmoothedScheduler, PerturbationLpNorm


def summary(paths: list[str]) -> None:
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    key = (r["model"], r["method"], r["eps"], r["who"], r.get("variant", ""),
                           r.get("split", "test"))
                    runs.setdefault(key, []).append(r)
    for (model, method, eps, who, variant, split), rs in sorted(runs.items()):
        seeds = sorted(r["seed"] for r in rs)
        cells = []
        for col in COLUMNS:
            vals = [r["certifier_ours"][col] for r in rs if col in r["certifier_ours"]]
            if vals:
                sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                cells.append(f"{col} {statistics.mean(vals):.3f} +- {sd:.3f}")
        spe = statistics.mean(r["train_cpu_s_per_epoch"] for r in rs)
        print(f"{model} {method} {eps} {who:4} {variant or 'default'} ({split}) seeds {seeds}: "
              + ", ".join(cells)
              + f"; {spe:.3f} CPU s/epoch")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", choices=("mlp", "cnn"))
    p.add_argument("method", nargs="?", choices=("ibp", "crown-ibp"))
    p.add_argument("eps", nargs="?", type=float)
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--who", default=None,
                   help="ours, ref or both (comma-separated; default both, ours with --ours-only)")
    p.add_argument("--alpha", action="store_true", help="also torchlean's alpha-CROWN")
    p.add_argument("--alirpa-alpha", action="store_true", help="also auto_LiRPA's alpha-CROWN")
    p.add_argument("--alirpa", default=os.environ.get("AUTO_LIRPA", "/tmp/alirpa"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a CertifiedConfig setting for ours (e.g. init=ibp, reg=0.5, kappa=1,0)")
    p.add_argument("--val", type=float, default=0.0, metavar="FRACTION",
                   help="train on the rest of the training set and score on this held-out "
                        "fraction of it instead of the test set (to choose options)")
    p.add_argument("--ours-only", action="store_true",
                   help="certify with torchlean's certifier only (skip auto_LiRPA's)")
    p.add_argument("--alpha-steps", type=int, default=20,
                   help="torchlean's alpha-CROWN steps (default 20, as `torchlean certify`)")
    p.add_argument("--summary", nargs="+", metavar="JSONL", help="summarise earlier runs")
    args = p.parse_args()
    if args.summary:
        summary(args.summary)
        return
    if args.model is None or args.method is None or args.eps is None:
        p.error("give MODEL METHOD EPS (or --summary FILE...)")
    if args.who is None:
        args.who = "ours" if args.ours_only else "ours,ref"
    # auto_LiRPA (and torch) only where its side runs or certifies
    need_lib = not args.ours_only or "ref" in args.who.split(",")
    lib = AutoLirpa(args.alirpa) if need_lib else None
    from threadpoolctl import threadpool_limits
    data = load_data(args.model, "digits", 0)
    if args.val:
        data = validation_split(data, args.val)
    x = np.asarray(data.test.inputs, np.float32)
    y = np.asarray(data.test.targets).astype(np.int64)
    with threadpool_limits(1):
        for seed in (int(s) for s in args.seeds.split(",")):
            for who in args.who.split(","):
                if who == "ours":
                    model, spe = train_ours(args, data, seed)
                    net = None if lib is None else torch_net(lib.torch, args.model)
                    if lib is not None:
                        with lib.torch.no_grad():
                            for p_, tp in zip(model.parameters(), net.parameters(), strict=True):
                                value = np.asarray(p_.value, np.float32).reshape(tp.shape)
                                tp.copy_(lib.torch.from_numpy(value))
                else:
                    net, spe = train_ref(args, data, seed, lib)
                    model = models.build(models.config_for(args.model, data, seed=0))
                    for p_, tp in zip(model.parameters(), net.parameters(), strict=True):
                        p_.assign(tp.detach().numpy().astype(np.float32))
                rec = {"who": who, "model": args.model, "method": args.method, "eps": args.eps,
                       "seed": seed, "variant": " ".join(args.set) if who == "ours" else "",
                       "split": f"val {args.val:g}" if args.val else "test",
                       "train_cpu_s_per_epoch": round(spe, 4),
                       "certifier_ours": certify_ours(args, model, x, y),
                       "certifier_alirpa": {} if args.ours_only
                       else certify_alirpa(args, net, x, y, lib),
                       "load": round(os.getloadavg()[0], 1)}
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
