"""The ONNX parts of the ``torchlean`` command: ``torchlean export`` and ``torchlean eval --onnx``.

``torchlean export --checkpoint model.safetensors --out model.onnx`` rebuilds the model a
``torchlean train --save`` checkpoint describes and writes it as ONNX for a fixed batch size.
``torchlean eval --onnx model.onnx --dataset NAME`` loads any ONNX classifier (from PyTorch or
from ``export``) and reports its test loss and accuracy the way ``eval --checkpoint`` does;
``torchlean verify --onnx model.onnx --dataset NAME`` runs the model report on its graph
(``verify_report``). The argument parsers are registered by the commands; the work is here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from .. import datasets
from .. import functional as F
from ..errors import TorchLeanError


class OnnxCliError(TorchLeanError):
    """Bad command-line input to ``export`` or ``eval --onnx``."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def add_export_parser(sub: Any) -> None:
    """Register ``torchlean export``."""
    p = sub.add_parser("export", help="write a saved checkpoint's model as ONNX",
                       description="Rebuild the model saved by 'torchlean train --save' and "
                                   "write it as an ONNX model (opset 17) that onnxruntime runs.")
    p.add_argument("--checkpoint", metavar="PATH", required=True)
    p.add_argument("--out", metavar="PATH", required=True, help="the .onnx file to write")
    p.add_argument("--batch-size", type=_positive_int, default=1,
                   help="the batch size the ONNX graph takes (default 1)")
    p.add_argument("--opset", type=_positive_int, default=17, help="ONNX opset (>= 17)")


def add_eval_options(p: argparse.ArgumentParser) -> None:
    """Add ``--onnx`` to ``torchlean eval``."""
    p.add_argument("--onnx", metavar="PATH", default=None,
                   help="evaluate an ONNX classifier instead of a checkpoint (needs --dataset; "
                        "the torchlean[onnx] extra)")


def example_shape(config: dict[str, Any], batch: int) -> tuple[int, ...]:
    """The input shape of a model built from ``config`` for ``batch`` examples."""
    name = config.get("model")
    try:
        if name == "mlp":
            return (batch, int(config["in_features"]))
        if name == "cnn":
            return (batch, *(int(s) for s in config["image_shape"]))
        if name == "transformer":
            return (batch, int(config["seq_len"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise OnnxCliError(f"export: the model config lacks a valid entry ({exc}): "
                           f"{config}") from None
    raise OnnxCliError(f"export: unknown model {name!r} in the checkpoint's config")


def run_export(args: argparse.Namespace) -> int:
    from .. import cli
    from . import export

    config, _ = cli._read_config(args.checkpoint)
    model = cli._load_model(args.checkpoint, config)
    model.eval()
    shape = example_shape(config, args.batch_size)
    cli._check_writable(args.out, "--out")
    proto = export(model, args.out, [shape], opset=args.opset)
    print(f"wrote {config['model']} from {args.checkpoint} to {args.out}: input {shape}, "
          f"{len(proto.graph.node)} nodes, {len(proto.graph.initializer)} initialisers, "
          f"opset {args.opset}", flush=True)
    return 0


def predict(model: Any, inputs: np.ndarray) -> np.ndarray:
    """The model's (single) output for every example, in chunks of its fixed batch size (the
    last chunk padded with zeros, whose rows are dropped)."""
    shape = model.input_shapes[0]
    batch = shape[0]
    if tuple(inputs.shape[1:]) != tuple(shape[1:]):
        raise OnnxCliError(f"eval: the ONNX model takes inputs {shape} (batch first), the "
                           f"dataset gives examples of shape {tuple(inputs.shape[1:])}")
    outs = []
    for start in range(0, len(inputs), batch):
        chunk = inputs[start:start + batch]
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.zeros((batch - n,) + chunk.shape[1:], chunk.dtype)])
        outs.append(np.asarray(model(chunk))[:n])
    return np.concatenate(outs, axis=0)


def run_eval(args: argparse.Namespace) -> int:
    from .. import cli
    from ..session import Options, Session

    if args.checkpoint:
        raise OnnxCliError("eval: give either --checkpoint or --onnx, not both")
    if args.dataset is None:
        raise OnnxCliError("eval --onnx: --dataset is needed (an ONNX file records no dataset)")
    if args.json:
        cli._check_writable(args.json, "--json")
    seed = args.seed if args.seed is not None else 0
    model, data = _load_for_data(args.onnx, args.dataset, seed, "eval")
    inputs = np.asarray(data.test.inputs, dtype=model.dtype)
    outputs = predict(model, inputs)
    targets = np.asarray(data.test.targets)
    session = Session(Options(dtype=model.dtype.name))
    loss = session.value(F.cross_entropy(session.const(outputs), session.input(
        targets.astype(model.dtype), requires_grad=False)))
    result = {"loss": float(loss), **datasets.score(outputs, targets)}
    print(f"ONNX model {args.onnx} on {args.dataset} ({len(targets)} test examples): "
          f"test loss {result['loss']:.4f}  test acc {result['accuracy']:.4f}", flush=True)
    if args.json:
        cli._write_text(args.json, json.dumps({"onnx": args.onnx, "dataset": args.dataset,
                                               "seed": seed, "examples": len(targets),
                                               **result}, indent=2) + "\n")
    return 0


def _load_for_data(path: str, dataset: str | None, seed: int, what: str) -> tuple[Any, Any]:
    """The loaded model and its dataset (the CNN layout when the model takes images)."""
    from . import load

    if dataset is None:
        raise OnnxCliError(f"{what} --onnx: --dataset is needed (an ONNX file records no "
                           "dataset)")
    model = load(path)
    if len(model.input_names) != 1 or len(model.output_names) != 1:
        raise OnnxCliError(f"{what} --onnx: {path} must have one input and one output, found "
                           f"{model.input_names} -> {model.output_names}")
    options = {"layout": "image"} if len(model.input_shapes[0]) == 4 else {}
    return model, datasets.load(dataset, seed=seed, **options)


def verify_report(path: str, dataset: str | None, quick: bool = False, seed: int = 0) -> Any:
    """``verify.check_model`` on an ONNX classifier's graph (as a module), on the first test
    batch of the model's own batch size, with the cross-entropy loss."""
    from ..verify import check_model

    model, data = _load_for_data(path, dataset, 0, "verify")
    shape = model.input_shapes[0]
    batch = shape[0]
    inputs = np.asarray(data.test.inputs[:batch], dtype=model.dtype)
    if inputs.shape != tuple(shape):
        raise OnnxCliError(f"verify --onnx: the model takes inputs {tuple(shape)}, the first "
                           f"test batch of {dataset} has shape {inputs.shape}")
    targets = np.asarray(data.test.targets[:batch])
    return check_model(model.as_module(), F.cross_entropy, inputs, targets, quick=quick,
                       seed=seed, title=f"model report: ONNX model {path} on {dataset}")


def run_certify(args: argparse.Namespace) -> int:
    """``torchlean certify --onnx model.onnx --dataset NAME``: the certify report (see
    ``torchlean.bounds.certify``) on an ONNX classifier's graph, replayed as a module (other
    batch sizes reload the file for their shapes)."""
    from .. import cli
    from ..bounds import certify as C

    if args.checkpoint:
        raise OnnxCliError("certify: give either --checkpoint or --onnx, not both")
    eps_list = C.parse_eps(args.eps)
    methods = C.parse_methods(args.method)
    for path, what in ((args.plot, "--plot"), (args.json, "--json")):
        if path:
            cli._check_writable(path, what)
    cli._check_libraries(save=False, plot=bool(args.plot))
    loaded, data = _load_for_data(args.onnx, args.dataset, 0, "certify")
    if loaded.index_inputs:
        raise OnnxCliError(f"certify --onnx: {args.onnx} takes integer inputs; certification "
                           "needs a classifier of real-valued features or images")
    return C.certify_and_report(args, loaded.as_module(), data, eps_list, methods,
                                f"ONNX {args.onnx}", args.dataset, f"ONNX model {args.onnx}")
