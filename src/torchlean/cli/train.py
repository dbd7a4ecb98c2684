"""``torchlean train``: train a zoo model on a bundled dataset, one line per epoch.

Prints the model, the settings and one line per epoch (train loss, test loss, test accuracy,
examples per second); optionally writes a safetensors checkpoint (``--save``, with the model
config in its metadata, so ``eval`` needs nothing else), a PNG of the curves (``--plot``) and the
metrics history as JSON (``--json``). ``--distributed`` trains data-parallel over MPI ranks
(launched with ``mpiexec``); rank 0 alone prints and writes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import checkpoint, optim
from ..bounds.certified_training import CertifiedTraining
from ..core.errors import TorchLeanError
from ..engine import ops_interface as F
from ..engine.anomaly import TrainingDiverged
from ..training import watchdog
from ..training.distributed import (
    Communicator,
    DistributedError,
    abort_with,
    communicator,
    compare_settings,
)
from ..training.fit import EpochMetrics, fit
from ..zoo import datasets, models
from ..zoo.trained import TRAIN_FORMAT, load_data
from . import certified, common
from .common import fmt

OPTIMIZERS = ("sgd", "adam", "adamw")


def add_parser(sub: Any) -> None:
    recipes = "; ".join(
        f"{m} on {d}: {r['epochs']} epochs, batch {r['batch_size']}, {r['optimizer']} "
        f"lr {r['lr']:g}" for (m, d), r in models.RECIPES.items())
    p = sub.add_parser(
        "train", help="train a model on a dataset",
        description="Train a model on a dataset and report test metrics after every epoch. "
                    f"Unset options take the model's defaults ({recipes}).")
    p.add_argument("--model", choices=models.NAMES, default="mlp",
                   help="model to train (default mlp)")
    p.add_argument("--dataset", choices=datasets.NAMES, default=None,
                   help="dataset (default: digits for mlp and cnn, adder for transformer)")
    p.add_argument("--epochs", type=common.int_in(1, 100_000, "an epoch count"), default=None,
                   help="epochs (default: the model's recipe)")
    p.add_argument("--batch-size", type=common.int_in(1, 1_000_000, "a batch size"),
                   default=None, help="examples per step (default: the model's recipe)")
    p.add_argument("--lr", type=common.positive_float, default=None,
                   help="peak learning rate, decayed on a cosine schedule (default: the recipe)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="sgd (momentum 0.9), adam or adamw (weight decay 0.01); default: the "
                        "recipe")
    common.add_runtime_options(p, backend_help=(
        "eager tape, or a graph compiled once per batch shape (default eager; with --certified "
        "compiled: its steps give the same bits as eager's, run as generated code, in less "
        "time)"))
    p.add_argument("--seed", type=common.seed_int, default=0,
                   help="seeds the data split, the initial weights and the shuffles "
                        "(default 0)")
    p.add_argument("--save", metavar="PATH", type=common.output_path,
                   help="write a safetensors checkpoint (weights, optimiser state, config)")
    p.add_argument("--plot", metavar="PATH", type=common.output_path,
                   help="write a PNG of loss and accuracy curves")
    p.add_argument("--json", metavar="PATH", type=common.output_path,
                   help="write the metrics history as JSON")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel over MPI: launch with 'mpiexec -n N torchlean train "
                        "--distributed' (pip install 'torchlean[distributed]')")
    p.add_argument("--check-every", type=common.non_negative_int, default=0, metavar="N",
                   help="with --distributed: compare a hash of the parameters across ranks "
                        "every N steps (default 0: never)")
    p.add_argument("--collective-timeout", type=common.float_in(
        0.0, 1e8, "a number of seconds", low_open=True), default=None, metavar="SECONDS",
                   help="with --distributed: abort the job when a rank waits this long for the "
                        "others in one collective, start-up included (default "
                        f"${watchdog.TIMEOUT_ENV} or {watchdog.DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                   help="with --device cuda --backend compiled: replay each training step "
                        "from one captured CUDA graph (default: where it applies, falling "
                        "back with a warning if capture fails; --no-cuda-graph: never)")
    p.add_argument("--check-finite", action="store_true",
                   help="check every forward value, gradient and update for NaN/inf and "
                        "name the first op and node that made one (without it, training "
                        "still stops when the loss becomes NaN or infinite)")
    certified.add_options(p)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "distributed", False):
        with ranks(args):  # rank 0 prints and writes; one rank's error ends them all
            return _run_on_this_rank(args)
    world = watchdog.launcher_world()
    if world is not None and world[1] > 1:
        # Every rank would train alone, and a rank that did pass --distributed would wait for
        # this one forever: refuse at once (the other ranks' watchdog then ends the job).
        raise common.CliError(f"train: running as rank {world[0]} of {world[1]} under an MPI "
                              "launcher without --distributed; pass --distributed to every "
                              "rank (or run without mpiexec)")
    for option in ("check_every", "collective_timeout"):
        if getattr(args, option, None):
            raise common.CliError(f"train: --{option.replace('_', '-')} applies only with "
                                  "--distributed")
    return _run_on_this_rank(args)


@contextlib.contextmanager
def ranks(args: argparse.Namespace) -> Iterator[Communicator]:
    """``train --distributed``: every rank trains, rank 0 alone prints and writes.

    On the other ranks stdout goes to /dev/null and ``--save``, ``--plot`` and ``--json`` are
    dropped. Every option is compared across ranks first (the first collective), so options
    given to one rank only (``--check-every``...) are reported instead of deadlocking. An error
    on one rank aborts every rank (its message on stderr); an error every rank raises together
    (a start-up mismatch) is reported once, by rank 0.
    """
    comm = communicator(True, getattr(args, "collective_timeout", None))
    try:
        compare_settings(comm, {k: v for k, v in sorted(vars(args).items()) if not callable(v)},
                         "torchlean train --distributed")
    except DistributedError:
        if comm.is_main:
            raise
        raise SystemExit(2) from None
    if not comm.is_main:
        for name in ("save", "plot", "json"):
            setattr(args, name, None)
    with contextlib.ExitStack() as stack:
        if not comm.is_main:
            devnull = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
            stack.enter_context(contextlib.redirect_stdout(devnull))
        print(f"distributed: {comm.world_size} MPI rank(s), each global batch split across "
              "them", flush=True)
        try:
            yield comm
        except BaseException as exc:
            if comm.world_size == 1 or isinstance(exc, SystemExit):
                raise
            if getattr(exc, "collective", False):
                if comm.is_main:
                    raise
                raise SystemExit(2) from None
            # Exit status 2 for a reported error, as the single-process command uses.
            abort_with(comm, exc, 2 if isinstance(exc, TorchLeanError) else 1)


def make_optimizer(name: str, params: list[Any], lr: float) -> optim.Optimizer:
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return optim.Adam(params, lr=lr)
    return optim.AdamW(params, lr=lr, weight_decay=0.01)


def epoch_line(record: EpochMetrics, epochs: int) -> str:
    width = len(str(epochs))
    return (f"epoch {record.epoch:>{width}}/{epochs}  train loss {fmt(record.train_loss)}  "
            f"test loss {fmt(record.test_loss)}  test acc {fmt(record.test_accuracy)}  "
            f"{record.examples_per_second:,.0f} ex/s  {record.seconds:.1f}s")


def plot(path: str, history: list[EpochMetrics], title: str) -> None:
    """Loss and test accuracy per epoch, as a PNG written atomically."""
    import matplotlib  # checked by common.check_libraries before training

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [r.epoch for r in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r.train_loss for r in history], marker="o", label="train")
    if any(r.test_loss is not None for r in history):
        ax_loss.plot(epochs, [r.test_loss for r in history], marker="o", label="test")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_loss.legend()
    ax_acc.plot(epochs, [r.test_accuracy for r in history], marker="o", color="tab:green")
    ax_acc.set(xlabel="epoch", ylabel="test accuracy", title="test accuracy", ylim=(0, 1.02))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    fig.tight_layout()
    common.save_png(fig, path)


def _run_on_this_rank(args: argparse.Namespace) -> int:
    model_name = args.model
    dataset_name = args.dataset or models.DEFAULT_DATASET[model_name]
    models.check_compatible(model_name, dataset_name)
    if args.backend is None:  # certified training's steps are the same bits compiled, faster
        args.backend = "compiled" if args.certified is not None else "eager"
    common.check_device(args.device, bool(getattr(args, "distributed", False)))
    recipe = models.RECIPES[(model_name, dataset_name)]
    if args.certified is not None:
        recipe = certified.RECIPE
    epochs = args.epochs or recipe["epochs"]
    batch_size = args.batch_size or recipe["batch_size"]
    lr = args.lr or recipe["lr"]
    optimizer_name = args.optimizer or recipe["optimizer"]
    robust = certified.config_from(args, epochs)
    if robust is not None and getattr(args, "distributed", False):
        raise TorchLeanError("--certified trains in one process: drop --distributed")
    common.check_outputs([(args.save, "--save"), (args.plot, "--plot"), (args.json, "--json")])
    common.check_libraries(save=bool(args.save), plot=bool(args.plot))

    data = load_data(model_name, dataset_name, args.seed)
    config = models.config_for(model_name, data, seed=args.seed)
    if getattr(args, "batch_norm", False):  # --batch-norm (certified training's option)
        config["batch_norm"] = True
    model = models.build(config)
    optimizer = make_optimizer(optimizer_name, model.parameters(), lr)
    settings = {"epochs": epochs, "batch_size": batch_size, "lr": lr,
                "schedule": "cosine", "optimizer": optimizer_name, "backend": args.backend,
                "device": args.device, "seed": args.seed}
    if robust is not None:
        settings.update(schedule="halved every 10 epochs at the target eps",
                        certified=robust.as_dict())
    n_params = sum(int(np.prod(p.shape)) for p in model.parameters())
    scored = " (accuracy = exact match of the whole sum)" if dataset_name == "adder" else ""
    print(f"training {model_name} ({n_params:,} parameters) on {dataset_name} "
          f"({len(data.train)} train / {len(data.test)} test){scored}", flush=True)
    where = "" if args.device == "cpu" else f" on {args.device}"
    decay = "cosine decay" if robust is None else "halved every 10 epochs at the target eps"
    print(f"{optimizer_name} lr {lr:g} ({decay}), {epochs} epochs, batch {batch_size}, "
          f"{args.backend} backend{where}, seed {args.seed}", flush=True)
    if robust is not None:
        print(f"certified training: {robust.method} at eps {robust.eps:g} ({robust.warmup_epochs}"
              f" epochs at eps 0, {robust.ramp_epochs} ramping), kappa {robust.kappa[0]:g} -> "
              f"{robust.kappa[1]:g}, gradient norm clipped at {robust.grad_clip:g}; the "
              "training bounds are not rounded outward: check with 'torchlean certify'",
              flush=True)

    def report(record: EpochMetrics) -> None:
        if robust is not None:
            print(epoch_line(record, epochs) + certified.epoch_fields(record.extra), flush=True)
            optimizer.lr = certified.lr_after(robust, lr, record.epoch)
            return
        print(epoch_line(record, epochs), flush=True)
        # Cosine learning-rate decay, epoch by epoch, to lr * 0 after the last epoch: the late
        # epochs take small steps, so the final accuracy does not hop around.
        optimizer.lr = lr * 0.5 * (1.0 + math.cos(math.pi * record.epoch / epochs))

    start = time.perf_counter()
    diverged: TrainingDiverged | None = None
    with common.StopFlag() as stop:
        try:
            history = fit(model, F.cross_entropy, optimizer, data.train, epochs, batch_size,
                          test_data=data.test, backend=args.backend, seed=args.seed,
                          progress=common.progress_bars(), metrics=datasets.score,
                          on_epoch=report, should_stop=stop,
                          distributed=getattr(args, "distributed", False),
                          check_every=getattr(args, "check_every", 0),
                          check_finite=getattr(args, "check_finite", False),
                          device=args.device, cuda_graph=args.cuda_graph,
                          objective=None if robust is None else CertifiedTraining(robust))
        except TrainingDiverged as exc:  # the model holds its last finite state: report, save
            diverged, history = exc, exc.history
            message = str(exc)
            if exc.unchecked:  # tell a command-line user about the option, not the function
                message = message.replace("fit(..., check_finite=True)", "--check-finite")
            kept = f"; --save writes the last finite state to {args.save}" if args.save else ""
            print(f"torchlean train: {message}{kept}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    interrupted = stop.requested
    last = history[-1] if history else EpochMetrics(0, float("nan"))
    if interrupted:
        print(f"interrupted: stopped in epoch {last.epoch} (its metrics cover the batches run)",
              file=sys.stderr, flush=True)
    print(f"test accuracy {fmt(last.test_accuracy)}, test loss {fmt(last.test_loss)} after "
          f"{last.epoch} epoch(s) in {seconds:.1f}s", flush=True)
    if robust is not None and history:  # the figure certified-training comparisons quote
        n = len(history)
        print(f"training time per epoch (evaluation excluded, averaged over {n}): "
              f"{sum(r.seconds for r in history) / n:.3f} s wall, "
              f"{sum(r.cpu_seconds for r in history) / n:.3f} s CPU", flush=True)

    summary = {"model": model_name, "dataset": dataset_name, "config": config,
               "settings": settings, "interrupted": interrupted, "seconds": seconds,
               "epochs_run": len(history),  # when interrupted, the last may be partial
               "final": last.as_dict(), "history": [r.as_dict() for r in history]}
    if args.save:
        metadata = {"format": TRAIN_FORMAT, "config": json.dumps(config),
                    "settings": json.dumps(settings),
                    "final": json.dumps(last.as_dict()), "interrupted": json.dumps(interrupted)}
        if diverged is not None:
            metadata["stopped"] = str(diverged)
        checkpoint.save(args.save, {"model": model, "optimizer": optimizer}, metadata=metadata)
        print(f"saved checkpoint {args.save}", flush=True)
    if args.json:
        common.write_text(args.json, json.dumps(summary, indent=2) + "\n")
        print(f"wrote metrics {args.json}", flush=True)
    if args.plot:
        plot(args.plot, history, f"{model_name} on {dataset_name} ({args.backend})")
        print(f"wrote plot {args.plot}", flush=True)
    if diverged is not None:
        return common.EXIT_DIVERGED
    return common.EXIT_INTERRUPTED if interrupted else 0
