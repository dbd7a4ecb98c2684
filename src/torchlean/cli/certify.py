"""``torchlean certify``: certified (IBP, CROWN, alpha-CROWN) and PGD accuracy of a classifier.

The work is ``torchlean.bounds.certify.certify``; this module loads the model (a zoo checkpoint,
or an ONNX classifier with a bundled ``--dataset`` or the user's ``--data FILE.npz``; a zoo
checkpoint takes ``--data`` too), prints the
table, and writes ``--json`` and ``--plot``; a model given data without class labels gets each
output's certified interval instead (``bounds.regression``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from ..bounds import METHODS, BoundsError
from ..bounds.certify import Report, certify, format_table, parse_eps, parse_methods, to_json
from ..bounds.regression import output_intervals
from ..core.errors import CheckpointError
from ..zoo import datasets
from ..zoo.trained import check_fits, check_user_data, load_data, load_trained
from . import common
from .onnx_inputs import OnnxCliError, load_data_file, load_for_data

DEFAULT_EPS = "0.01,0.02,0.05"


def add_parser(sub: Any) -> None:
    """Register the ``certify`` subcommand on ``torchlean``'s subparsers."""
    p = sub.add_parser(
        "certify", help="certified robustness of a saved classifier (IBP, CROWN, alpha-CROWN)",
        description="Bound every margin logit_true - logit_other over the L-infinity ball of "
                    "each test example (clipped to the valid input range) and report clean, "
                    "certified (per method) and PGD accuracy with the time per example.")
    p.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="a checkpoint written by 'torchlean train --save' (mlp or cnn)")
    p.add_argument("--onnx", metavar="PATH", default=None,
                   help="certify an ONNX classifier instead (with --dataset; the onnx extra)")
    p.add_argument("--dataset", choices=datasets.NAMES, default=None,
                   help="the dataset of an --onnx model")
    p.add_argument("--data", metavar="FILE.npz", default=None,
                   help="the user's examples instead of a dataset: 'x' (examples first) and 'y' "
                        "(class labels); for an --onnx model without integer labels, each "
                        "output's certified interval is reported instead (a regression model)")
    p.add_argument("--eps", default=None,
                   help="comma-separated L-infinity radii (default: the eps a certified-"
                        "trained checkpoint was trained for, else 0.01,0.02,0.05)")
    p.add_argument("--method", default=",".join(METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} (default all)")
    p.add_argument("--limit", type=common.positive_int, default=None,
                   help="certify only the first N test examples (default all)")
    p.add_argument("--rounding", choices=("float32", "real"), default="float32",
                   help="float32: bounds hold for the float32 kernels as they run (default); "
                        "real: for the exact real-valued network with its float32 weights")
    p.add_argument("--pgd-steps", type=common.int_in(1, 100_000, "a step count"), default=20,
                   help="PGD steps per restart (default 20)")
    p.add_argument("--pgd-restarts", type=common.int_in(1, 10_000, "a restart count"),
                   default=1, help="PGD random restarts (default 1)")
    p.add_argument("--alpha-steps", type=common.int_in(0, 100_000, "a step count"), default=20,
                   help="projected gradient steps of alpha-CROWN (default 20)")
    p.add_argument("--seed", type=common.seed_int, default=0,
                   help="seed of PGD's random starts (default 0)")
    common.add_threads_option(p)
    p.add_argument("--plot", metavar="PATH", type=common.output_path,
                   help="write a PNG of certified accuracy vs eps")
    p.add_argument("--json", metavar="PATH", type=common.output_path,
                   help="write the results as JSON")


def run(args: argparse.Namespace) -> int:
    eps_list = parse_eps(args.eps if args.eps is not None else DEFAULT_EPS)
    methods = parse_methods(args.method)
    source = ("<--onnx", args.onnx) if args.onnx else ("<--checkpoint", args.checkpoint)
    common.check_outputs([(source[1], source[0]), (args.plot, "--plot"), (args.json, "--json")])
    common.check_libraries(plot=bool(args.plot))
    if args.onnx:
        if args.checkpoint:
            raise OnnxCliError("certify: give either --checkpoint or --onnx, not both")
        loaded, data = load_for_data(args.onnx, args.dataset, 0, "certify", args.data,
                                     labels=False)
        if loaded.index_inputs:
            raise OnnxCliError(f"certify --onnx: {args.onnx} takes integer inputs; "
                               "certification needs a classifier of real-valued features or "
                               "images")
        targets = data.test.targets
        if targets is None or targets.ndim != 1 or targets.dtype.kind not in "iu":
            return _intervals(args, loaded.as_module(), data.test.inputs, eps_list, methods,
                              f"ONNX model {args.onnx} on {args.data}")
        return _report(args, loaded.as_module(), data, eps_list, methods, f"ONNX {args.onnx}",
                       args.dataset or args.data, f"ONNX model {args.onnx}")
    if not args.checkpoint:
        raise BoundsError("certify: give --checkpoint PATH (or --onnx PATH --dataset NAME)")
    if args.data and args.dataset:
        raise OnnxCliError("certify: give either --dataset or --data, not both")
    common.check_outputs([(args.data, "<--data"), (args.checkpoint, "<--checkpoint")])
    path = args.checkpoint
    model = load_trained(path)
    config, settings = model.model_config, model.train_settings
    if args.data:  # a saved zoo classifier on the user's labelled examples
        user = load_data_file(args.data, "certify", labels=True)
        check_user_data(config, user.test.inputs, user.test.targets, path, "certify")
        model.eval()
        return _report(args, model, user, eps_list, methods, config["model"], args.data,
                       f"{config['model']} from {path}")
    trained = settings.get("certified")
    if args.eps is None and isinstance(trained, dict) and "eps" in trained:
        eps_list = parse_eps(str(trained["eps"]))  # certify at the radius it was trained for
        print(f"certify: {path} was certified-trained ({trained.get('method')}) at eps "
              f"{trained['eps']}: certifying there (--eps to choose)", flush=True)
    if config.get("model") not in ("mlp", "cnn"):
        raise BoundsError(f"certify: checkpoint {path} holds a {config.get('model')!r}; "
                          "certification supports classifiers on feature vectors or images "
                          "(mlp, cnn)")
    dataset_name = args.dataset or config.get("dataset")
    if dataset_name not in datasets.NAMES:
        raise CheckpointError(f"certify: checkpoint {path}: unknown dataset {dataset_name!r}")
    data = load_data(config["model"], dataset_name, int(settings.get("seed", config.get("seed",
                                                                                       0))))
    check_fits(config, data, path)
    model.eval()
    return _report(args, model, data, eps_list, methods, config["model"], dataset_name,
                   f"{config['model']} from {path}")


def _intervals(args: argparse.Namespace, model: Any, x: Any, eps_list: list[float],
               methods: list[str], label: str) -> int:
    """A model without class labels: each output's certified interval over each example's
    ball (unclipped), summarised per eps and method; every interval in --json."""
    x = np.asarray(x, dtype=np.float32)
    if args.limit is not None:
        x = x[: args.limit]
    kernel = args.rounding == "float32"
    print(f"certify {label}: {len(x)} examples without class labels: certified output "
          f"intervals over each L-infinity ball, sound for the "
          f"{'float32 kernels' if kernel else 'exact real network'}", flush=True)
    print("| eps | method | mean width | max width | seconds |\n|---|---|---|---|---|")
    found = []
    for eps in eps_list:
        for method in methods:
            start = time.perf_counter()
            result = output_intervals(model, x, eps, method, kernel=kernel)
            seconds = time.perf_counter() - start
            width = result.width
            print(f"| {eps:g} | {method} | {float(np.mean(width)):.4g} | "
                  f"{float(np.max(width)):.4g} | {seconds:.2f} |", flush=True)
            found.append({**result.as_dict(), "seconds": seconds})
    if args.json:
        common.write_text(args.json, json.dumps({"model": label, "examples": len(x),
                                                 "kernel": kernel, "intervals": found}) + "\n")
        print(f"wrote results {args.json}", flush=True)
    return 0


def _bar(label: str, done: int, total: int) -> None:
    width = 20
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _report(args: argparse.Namespace, model: Any, data: Any, eps_list: list[float],
            methods: list[str], model_name: str, dataset: str, label: str) -> int:
    """After the model is loaded: the test examples, the input range, the table, JSON, plot."""
    x, y = np.asarray(data.test.inputs), np.asarray(data.test.targets)
    if args.limit is not None:
        x, y = x[: args.limit], y[: args.limit]
    # Pixel data lives in [0, 1] and its balls are clipped there; other features are unbounded.
    lo_all, hi_all = float(np.min(data.train.inputs)), float(np.max(data.train.inputs))
    clip = (0.0, 1.0) if lo_all >= 0.0 and hi_all <= 1.0 else None
    kernel = args.rounding == "float32"
    print(f"certify {label} on {dataset}: {len(y)} test examples, "
          f"inputs {'clipped to [0, 1]' if clip else 'unclipped'}, margin specifications, "
          f"bounds sound for the {'float32 kernels' if kernel else 'exact real network'}; "
          f"PGD {args.pgd_steps} steps x {args.pgd_restarts} restart(s)", flush=True)
    report = certify(model, x, y, eps_list, methods, clip=clip, kernel=kernel,
                     pgd_steps=args.pgd_steps, pgd_restarts=args.pgd_restarts,
                     seed=args.seed, alpha_steps=args.alpha_steps,
                     progress=_bar if common.progress_bars() else None,
                     model_name=model_name, dataset=dataset)
    print(format_table(report, methods), flush=True)
    if args.json:
        common.write_text(args.json, to_json(report))
        print(f"wrote results {args.json}", flush=True)
    if args.plot:
        plot(args.plot, report, methods)
        print(f"wrote plot {args.plot}", flush=True)
    return 0


def plot(path: str, report: Report, methods: list[str]) -> None:
    """Certified accuracy against eps, one line per method, PGD as the upper envelope."""
    import matplotlib  # checked by common.check_libraries before the run

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [r.eps for r in report.rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        ax.plot(eps, [r.certified[m] for r in report.rows], marker="o", label=f"certified ({m})")
    ax.plot(eps, [r.pgd for r in report.rows], marker="x", linestyle="--", color="black",
            label="PGD (upper envelope)")
    ax.set(xlabel="eps (L-infinity)", ylabel="accuracy", ylim=(0, 1.02),
           title=f"{report.model} on {report.dataset}: certified robustness")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    common.save_png(fig, path)
