"""The ``torchlean`` command: ``train``, ``eval``, ``graph`` and ``ops`` (also ``python -m
torchlean``).

``torchlean train`` trains one of the models in ``torchlean.models`` on one of the datasets in
``torchlean.datasets`` with ``torchlean.train.fit``, printing one line per epoch, and optionally
writes a safetensors checkpoint (``--save``, with the model config in its metadata), a PNG of the
loss and accuracy curves (``--plot``) and the metrics history as JSON (``--json``).
``torchlean eval`` rebuilds a saved model from its checkpoint and reports the test metrics;
``torchlean graph`` prints the compiled graph of a model's loss (and writes Graphviz DOT);
``torchlean ops`` prints the op registry as a Markdown table; ``torchlean verify`` checks every
primitive against its spec, or a saved model's graph (``torchlean.verify.cli``);
``torchlean certify`` reports certified (IBP, CROWN, alpha-CROWN) and PGD accuracy of a saved
classifier (``torchlean.bounds.certify``).

Every error is reported as one message on stderr with exit status 2 (no traceback); Ctrl-C
during training stops after the current batch, writes what was asked for, and exits with 130.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from . import checkpoint, datasets, models, optim
from . import functional as F
from .anomaly import TrainingDiverged
from .backend import namespace_for
from .errors import TorchLeanError
from .onnx import cli as onnx_cli
from .train import EpochMetrics, evaluate, fit
from .transforms import compile as compile_fn
from .verify import cli as verify_cli

__all__ = ["main", "build_parser", "CliError"]

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_DIVERGED = 1  # training stopped on a NaN or infinite value
OPTIMIZERS = ("sgd", "adam", "adamw")
CHECKPOINT_FORMAT = "torchlean.train/1"


class CliError(TorchLeanError):
    """Bad command-line input that is not any other torchlean error."""


# ---------------------------------------------------------------------------------------------
# Argument parsing


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type for integers >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, found {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "positive")
_non_negative_int = _int_at_least(0, "non-negative")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, found {text!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, found {text}")
    return value


def _add_runtime_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("eager", "compiled"), default="eager",
                   help="eager tape, or a graph compiled once per batch shape (default eager)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run (cuda needs CuPy and a GPU; default cpu)")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="BLAS threads (default 1: these models' matrices are small, and more "
                        "threads cost more in synchronisation than they give)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchlean", description="Train, evaluate and inspect small models with torchlean.")
    from . import __version__  # here: the package imports this module's siblings first

    parser.add_argument("--version", action="version", version=f"torchlean {__version__}")
    sub = parser.add_subparsers(dest="command",
                                metavar="{train,eval,graph,ops,export,verify,certify,bench}")
    sub.required = True

    recipes = "; ".join(
        f"{m} on {d}: {r['epochs']} epochs, batch {r['batch_size']}, {r['optimizer']} "
        f"lr {r['lr']:g}" for (m, d), r in models.RECIPES.items())
    train = sub.add_parser(
        "train", help="train a model on a dataset",
        description="Train a model on a dataset and report test metrics after every epoch. "
                    f"Unset options take the model's defaults ({recipes}).")
    train.add_argument("--model", choices=models.NAMES, default="mlp",
                       help="model to train (default mlp)")
    train.add_argument("--dataset", choices=datasets.NAMES, default=None,
                       help="dataset (default: digits for mlp and cnn, adder for transformer)")
    train.add_argument("--epochs", type=_positive_int, default=None)
    train.add_argument("--batch-size", type=_positive_int, default=None)
    train.add_argument("--lr", type=_positive_float, default=None, help="learning rate")
    train.add_argument("--optimizer", choices=OPTIMIZERS, default=None)
    _add_runtime_options(train)
    train.add_argument("--seed", type=_non_negative_int, default=0,
                       help="seeds the data split, the initial weights and the shuffles "
                            "(default 0)")
    train.add_argument("--save", metavar="PATH",
                       help="write a safetensors checkpoint (weights, optimiser state, config)")
    train.add_argument("--plot", metavar="PATH", help="write a PNG of loss and accuracy curves")
    train.add_argument("--json", metavar="PATH", help="write the metrics history as JSON")
    train.add_argument("--distributed", action="store_true",
                       help="data-parallel over MPI: launch with 'mpiexec -n N torchlean train "
                            "--distributed' (pip install 'torchlean[distributed]')")
    train.add_argument("--check-every", type=_non_negative_int, default=0, metavar="N",
                       help="with --distributed: compare a hash of the parameters across ranks "
                            "every N steps (0: never)")
    train.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                       help="with --device cuda --backend compiled: replay each training step "
                            "from one captured CUDA graph (default: where it applies, falling "
                            "back with a warning if capture fails; --no-cuda-graph: never)")
    train.add_argument("--check-finite", action="store_true",
                       help="check every forward value, gradient and update for NaN/inf and "
                            "name the first op and node that made one (without it, training "
                            "still stops when the loss becomes NaN or infinite)")

    ev = sub.add_parser("eval", help="evaluate a saved checkpoint",
                        description="Rebuild the model saved by 'torchlean train --save' and "
                                    "report its test metrics.")
    ev.add_argument("--checkpoint", metavar="PATH", default=None,
                    help="a checkpoint written by 'torchlean train --save' (or use --onnx)")
    onnx_cli.add_eval_options(ev)
    ev.add_argument("--dataset", choices=datasets.NAMES, default=None,
                    help="dataset to evaluate on (default: the one it was trained on)")
    ev.add_argument("--seed", type=_non_negative_int, default=None,
                    help="seed of the data split (default: the training seed, so the test set "
                         "is the one held out in training)")
    ev.add_argument("--batch-size", type=_positive_int, default=256)
    _add_runtime_options(ev)
    ev.add_argument("--json", metavar="PATH", help="write the metrics as JSON")

    graph = sub.add_parser("graph", help="print the compiled graph of a model's loss",
                           description="Trace the loss of a model on one batch and print the "
                                       "graph's IR listing.")
    graph.add_argument("--model", choices=models.NAMES, default="mlp")
    graph.add_argument("--dataset", choices=datasets.NAMES, default=None)
    graph.add_argument("--batch-size", type=_positive_int, default=2,
                       help="batch size the graph is traced for (default 2)")
    graph.add_argument("--seed", type=_non_negative_int, default=0)
    graph.add_argument("--dot", metavar="PATH", help="also write the graph as Graphviz DOT")

    sub.add_parser("ops", help="list every primitive op with its signature and semantics",
                   description="Print the op registry as a Markdown table (one row per "
                               "primitive: signature, how its derivatives are declared, "
                               "documented semantics).")
    onnx_cli.add_export_parser(sub)
    verify_cli.add_parser(sub)
    from .bounds import certify as certify_cli  # here: torchlean.bounds imports the graph layer

    certify_cli.add_parser(sub, _positive_int, _non_negative_int)
    from . import bench

    bench.add_arguments(sub.add_parser(
        "bench", help="time the issue-13 workloads side by side with PyTorch, JAX, autograd",
        description="Time W1-W5 in every installed framework (agreement checked first)."))
    return parser


# ---------------------------------------------------------------------------------------------
# Helpers


def _check_writable(path: str, what: str) -> None:
    """Fail now, before any training, if ``path`` cannot be written (no file is left behind)."""
    if os.path.isdir(path):
        raise CliError(f"{what} {path}: is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CliError(f"{what} {path}: directory {directory} does not exist")
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".torchlean-probe-")
    except OSError as exc:
        raise CliError(f"{what} {path}: cannot write in {directory} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise CliError(f"{what} {path}: file exists and is not writable")


def _write_text(path: str, text: str) -> None:
    """Write ``text`` atomically (temporary file in the same directory, then rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check_libraries(save: bool, plot: bool) -> None:
    """The optional libraries an output needs, checked before training rather than after."""
    if save:
        try:
            import safetensors  # noqa: F401
        except ImportError:
            raise CliError("--save: safetensors is not installed (pip install "
                           "'torchlean[examples]')") from None
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot: matplotlib is not installed (pip install "
                           "'torchlean[examples]')") from None


def _check_device(device: str, distributed: bool = False) -> None:
    """Fail before loading data or training when ``--device`` cannot be used here."""
    if device == "cuda":
        if distributed:
            raise CliError("--device cuda: data-parallel training (--distributed) runs on the "
                           "host; use --device cpu")
        namespace_for("cuda")  # DeviceError naming what is missing (CuPy, a GPU)


@contextlib.contextmanager
def _blas_threads(n: int) -> Iterator[None]:
    """Limit BLAS threads for the duration (threadpoolctl comes with scikit-learn)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield


class _StopFlag:
    """SIGINT sets a flag that ``fit`` polls after each batch; a second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: stopping after this batch (Ctrl-C again to abort)", file=sys.stderr,
              flush=True)

    def __enter__(self) -> _StopFlag:
        with contextlib.suppress(ValueError):  # not the main thread: no handler, no flag
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _make_optimizer(name: str, params: list[Any], lr: float) -> optim.Optimizer:
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return optim.Adam(params, lr=lr)
    return optim.AdamW(params, lr=lr, weight_decay=0.01)


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _epoch_line(record: EpochMetrics, epochs: int) -> str:
    width = len(str(epochs))
    return (f"epoch {record.epoch:>{width}}/{epochs}  train loss {_fmt(record.train_loss)}  "
            f"test loss {_fmt(record.test_loss)}  test acc {_fmt(record.test_accuracy)}  "
            f"{record.examples_per_second:,.0f} ex/s  {record.seconds:.1f}s")


def _plot(path: str, history: list[EpochMetrics], title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise CliError("--plot: matplotlib is not installed (pip install "
                       "'torchlean[examples]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r.epoch for r in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r.train_loss for r in history], marker="o", label="train")
    if any(r.test_loss is not None for r in history):
        ax_loss.plot(epochs, [r.test_loss for r in history], marker="o", label="test")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_loss.legend()
    ax_acc.plot(epochs, [r.test_accuracy for r in history], marker="o", color="tab:green")
    ax_acc.set(xlabel="epoch", ylabel="test accuracy", title="test accuracy", ylim=(0, 1.02))
    from matplotlib.ticker import MaxNLocator

    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=100)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _load_data(model: str, dataset: str, seed: int) -> datasets.DatasetBundle:
    return datasets.load(dataset, seed=seed, **models.dataset_options(model, dataset))


# ---------------------------------------------------------------------------------------------
# train


def _train(args: argparse.Namespace) -> int:
    if getattr(args, "distributed", False):
        from .distributed import cli_ranks

        with cli_ranks(args):  # rank 0 prints and writes; one rank's error ends them all
            return _train_on_this_rank(args)
    return _train_on_this_rank(args)


def _train_on_this_rank(args: argparse.Namespace) -> int:
    model_name = args.model
    dataset_name = args.dataset or models.DEFAULT_DATASET[model_name]
    models.check_compatible(model_name, dataset_name)
    _check_device(args.device, bool(getattr(args, "distributed", False)))
    recipe = models.RECIPES[(model_name, dataset_name)]
    epochs = args.epochs or recipe["epochs"]
    batch_size = args.batch_size or recipe["batch_size"]
    lr = args.lr or recipe["lr"]
    optimizer_name = args.optimizer or recipe["optimizer"]
    outputs = [(args.save, "--save"), (args.plot, "--plot"), (args.json, "--json")]
    for path, what in outputs:
        if path:
            _check_writable(path, what)
    _check_libraries(save=bool(args.save), plot=bool(args.plot))

    data = _load_data(model_name, dataset_name, args.seed)
    config = models.config_for(model_name, data, seed=args.seed)
    model = models.build(config)
    optimizer = _make_optimizer(optimizer_name, model.parameters(), lr)
    settings = {"epochs": epochs, "batch_size": batch_size, "lr": lr,
                "schedule": "cosine", "optimizer": optimizer_name, "backend": args.backend,
                "device": args.device, "seed": args.seed}
    n_params = sum(int(np.prod(p.shape)) for p in model.parameters())
    scored = " (accuracy = exact match of the whole sum)" if dataset_name == "adder" else ""
    print(f"training {model_name} ({n_params:,} parameters) on {dataset_name} "
          f"({len(data.train)} train / {len(data.test)} test){scored}", flush=True)
    where = "" if args.device == "cpu" else f" on {args.device}"
    print(f"{optimizer_name} lr {lr:g} (cosine decay), {epochs} epochs, batch {batch_size}, "
          f"{args.backend} backend{where}, seed {args.seed}", flush=True)

    def report(record: EpochMetrics) -> None:
        print(_epoch_line(record, epochs), flush=True)
        # Cosine learning-rate decay, epoch by epoch, to lr * 0 after the last epoch: the late
        # epochs take small steps, so the final accuracy does not hop around.
        optimizer.lr = lr * 0.5 * (1.0 + math.cos(math.pi * record.epoch / epochs))

    start = time.perf_counter()
    diverged: TrainingDiverged | None = None
    with _StopFlag() as stop:
        try:
            history = fit(model, F.cross_entropy, optimizer, data.train, epochs, batch_size,
                          test_data=data.test, backend=args.backend, seed=args.seed,
                          progress=True, metrics=datasets.score, on_epoch=report,
                          should_stop=stop, distributed=getattr(args, "distributed", False),
                          check_every=getattr(args, "check_every", 0),
                          check_finite=getattr(args, "check_finite", False),
                          device=args.device, cuda_graph=args.cuda_graph)
        except TrainingDiverged as exc:  # the model holds its last finite state: report, save
            diverged, history = exc, exc.history
            kept = f"; --save writes the last finite state to {args.save}" if args.save else ""
            print(f"torchlean train: {exc}{kept}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    interrupted = stop.requested
    last = history[-1] if history else EpochMetrics(0, float("nan"))
    if interrupted:
        print(f"interrupted: stopped in epoch {last.epoch} (its metrics cover the batches run)",
              file=sys.stderr, flush=True)
    print(f"test accuracy {_fmt(last.test_accuracy)}, test loss {_fmt(last.test_loss)} after "
          f"{last.epoch} epoch(s) in {seconds:.1f}s", flush=True)

    summary = {"model": model_name, "dataset": dataset_name, "config": config,
               "settings": settings, "interrupted": interrupted, "seconds": seconds,
               "epochs_run": len(history),  # when interrupted, the last may be partial
               "final": last.as_dict(), "history": [r.as_dict() for r in history]}
    if args.save:
        metadata = {"format": CHECKPOINT_FORMAT, "config": json.dumps(config),
                    "settings": json.dumps(settings),
                    "final": json.dumps(last.as_dict()), "interrupted": json.dumps(interrupted)}
        if diverged is not None:
            metadata["stopped"] = str(diverged)
        checkpoint.save(args.save, {"model": model, "optimizer": optimizer}, metadata=metadata)
        print(f"saved checkpoint {args.save}", flush=True)
    if args.json:
        _write_text(args.json, json.dumps(summary, indent=2) + "\n")
        print(f"wrote metrics {args.json}", flush=True)
    if args.plot:
        _plot(args.plot, history, f"{model_name} on {dataset_name} ({args.backend})")
        print(f"wrote plot {args.plot}", flush=True)
    if diverged is not None:
        return EXIT_DIVERGED
    return EXIT_INTERRUPTED if interrupted else 0


# ---------------------------------------------------------------------------------------------
# eval


def _read_config(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    metadata = checkpoint.read_metadata(path)
    formats = (CHECKPOINT_FORMAT, checkpoint.SAVE_FORMAT)
    if metadata.get("format") not in formats or "config" not in metadata:
        raise CliError(f"checkpoint {path}: not written by 'torchlean train --save' or by "
                       "tl.save(model, path) of a torchlean.models model (no model config in "
                       "its metadata)")
    try:
        config = json.loads(metadata["config"])
        settings = json.loads(metadata.get("settings", "{}"))
    except json.JSONDecodeError as exc:
        raise CliError(f"checkpoint {path}: model config is not valid JSON ({exc})") from None
    if not isinstance(config, dict) or not isinstance(settings, dict):
        raise CliError(f"checkpoint {path}: model config must be a JSON object")
    return config, settings


def _check_fits_data(config: dict[str, Any], data: datasets.DatasetBundle, path: str) -> None:
    """The saved model must take this dataset's inputs and produce its classes."""
    models.check_compatible(config["model"], data.name)
    wanted = models.config_for(config["model"], data)
    for key in ("in_features", "image_shape", "num_classes", "vocab_size", "seq_len"):
        if key in config and key in wanted and config[key] != wanted[key]:
            raise CliError(f"checkpoint {path}: its {config['model']} has {key} = {config[key]}, "
                           f"but dataset {data.name} needs {wanted[key]}")


def _load_model(path: str, config: dict[str, Any]) -> Any:
    """Rebuild the model and load its weights; every mismatched tensor is reported."""
    model = models.build(config)
    arrays = checkpoint.read_arrays(path)
    if checkpoint.read_metadata(path).get("format") == checkpoint.SAVE_FORMAT:
        found = arrays  # tl.save(model, path): the module's own state dict, unprefixed
    else:  # torchlean train --save: {"model": ..., "optimizer": ...}
        found = {k[len("model."):]: v for k, v in arrays.items() if k.startswith("model.")}
    problems = checkpoint.describe_mismatches(model.state_dict(), found)
    if problems:
        raise CliError(f"checkpoint {path} does not fit the {config['model']} its config "
                       "describes:\n  " + "\n  ".join(problems))
    model.load_state_dict(found)
    return model


def _eval(args: argparse.Namespace) -> int:
    _check_device(args.device)
    if args.onnx and args.device != "cpu":
        raise CliError("eval --onnx runs the ONNX model on the CPU; use --device cpu")
    if args.onnx:
        return onnx_cli.run_eval(args)
    if not args.checkpoint:
        raise CliError("eval: give --checkpoint PATH (or --onnx PATH)")
    if args.json:
        _check_writable(args.json, "--json")
    path = args.checkpoint
    config, settings = _read_config(path)
    if config.get("model") not in models.NAMES:
        raise CliError(f"checkpoint {path}: unknown model {config.get('model')!r}; valid models: "
                       f"{', '.join(models.NAMES)}")
    dataset_name = args.dataset or config.get("dataset")
    if dataset_name not in datasets.NAMES:
        raise CliError(f"checkpoint {path}: unknown dataset {dataset_name!r}; valid datasets: "
                       f"{', '.join(datasets.NAMES)}")
    seed = args.seed if args.seed is not None else int(settings.get("seed", config.get("seed", 0)))
    data = _load_data(config["model"], dataset_name, seed)
    _check_fits_data(config, data, path)
    model = _load_model(path, config)
    result = evaluate(model, F.cross_entropy, data.test, batch_size=args.batch_size,
                      backend=args.backend, metrics=datasets.score, device=args.device)
    print(f"{config['model']} from {path} on {dataset_name} ({len(data.test)} test examples): "
          f"test loss {result['loss']:.4f}  test acc {result['accuracy']:.4f}", flush=True)
    if args.json:
        _write_text(args.json, json.dumps({"checkpoint": path, "model": config["model"],
                                           "dataset": dataset_name, "seed": seed,
                                           "examples": len(data.test), **result}, indent=2)
                    + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# graph


def _graph(args: argparse.Namespace) -> int:
    model_name = args.model
    dataset_name = args.dataset or models.DEFAULT_DATASET[model_name]
    models.check_compatible(model_name, dataset_name)
    if args.dot:
        _check_writable(args.dot, "--dot")
    data = _load_data(model_name, dataset_name, args.seed)
    model = models.build(models.config_for(model_name, data, seed=args.seed))
    batch = args.batch_size
    x_shape = (batch, *data.train.inputs.shape[1:])
    y_shape = (batch, *data.train.targets.shape[1:])

    def loss(x: Any, y: Any) -> Any:
        return F.cross_entropy(model(x), y)

    compiled = compile_fn(loss, x_shape, y_shape, dtype="float32")
    print(f"# loss of {model_name} on {dataset_name}: inputs x {x_shape}, labels y {y_shape} "
          f"(float class indices), then the {len(compiled.params)} parameters")
    print(compiled.graph)
    if args.dot:
        _write_text(args.dot, compiled.graph.to_dot() + "\n")
        print(f"# wrote Graphviz DOT to {args.dot}")
    return 0


# ---------------------------------------------------------------------------------------------
# entry point

def _ops(args: argparse.Namespace) -> int:
    from .ops.registry import markdown_table

    print(markdown_table())
    return 0


def _certify(args: argparse.Namespace) -> int:
    from .bounds.certify import run_cli

    return run_cli(args)


def _bench(args: argparse.Namespace) -> int:
    from . import bench

    return bench.run(args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": _train, "eval": _eval, "graph": _graph, "ops": _ops,
    "export": onnx_cli.run_export, "verify": verify_cli.run, "certify": _certify,
    "bench": _bench}



def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage and the reason
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        with _blas_threads(getattr(args, "threads", 1)):
            return _COMMANDS[args.command](args)
    except TorchLeanError as exc:
        print(f"torchlean {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"torchlean {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"torchlean {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
