"""``torchlean eval``: a saved model's test loss and accuracy.

``--checkpoint PATH`` rebuilds a zoo model from the config its checkpoint records (the file is
read once) and evaluates it on the test split it was trained with; ``--onnx PATH --dataset NAME``
evaluates any ONNX classifier (from PyTorch or from ``torchlean export``) the same way, and
``--onnx PATH --data FILE.npz`` on the user's examples (accuracy for class labels, the mean
squared error for real targets); ``--checkpoint PATH --data FILE.npz`` (a ``train --save`` or
``tl.save``d zoo classifier) on the user's labelled examples.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from ..core import safe_files
from ..core.errors import CheckpointError
from ..data import Dataset
from ..engine import ops_interface as F
from ..engine.session import Options, Session
from ..training.fit import evaluate
from ..zoo import datasets
from ..zoo.trained import check_fits, check_user_data, load_data, load_trained
from . import common
from .onnx_inputs import OnnxCliError, load_data_file, load_for_data, predict

ONNX_MAGIC = b"\x08"  # an ONNX ModelProto starts with field 1 (ir_version, a varint)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("eval", help="evaluate a saved checkpoint or an ONNX classifier",
                       description="Rebuild the model saved by 'torchlean train --save' (or load "
                                   "an ONNX classifier) and report its test metrics.")
    p.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="a checkpoint written by 'torchlean train --save' (or use --onnx)")
    p.add_argument("--onnx", metavar="PATH", default=None,
                   help="evaluate an ONNX classifier instead of a checkpoint (needs --dataset; "
                        "the torchlean[onnx] extra)")
    p.add_argument("--dataset", choices=datasets.NAMES, default=None,
                   help="dataset to evaluate on (default: the one it was trained on)")
    p.add_argument("--data", metavar="FILE.npz", default=None,
                   help="evaluate on the user's examples instead: 'x' (examples first) and 'y' "
                        "(integer class labels; for an --onnx model also real regression "
                        "targets)")
    p.add_argument("--seed", type=common.seed_int, default=None,
                   help="seed of the data split (default: the training seed, so the test set "
                        "is the one held out in training)")
    p.add_argument("--batch-size", type=common.int_in(1, 1_000_000, "a batch size"),
                   default=256, help="examples per forward pass (default 256)")
    common.add_runtime_options(p)
    p.add_argument("--json", metavar="PATH", type=common.output_path,
                   help="write the metrics as JSON")


def looks_like_onnx(path: str) -> bool:
    """An ``.onnx`` name, or a file whose first byte is an ONNX model's and that is not a
    safetensors file (those start with an 8-byte little-endian header length, whose first byte
    may be 0x08, and then the JSON header's ``{``)."""
    if path.lower().endswith((".onnx", ".onnx.gz")):
        return True
    head = safe_files.read_head(path, 9)  # never blocks on a FIFO, never reads a device
    if len(head) == 9 and head[8:9] == b"{":
        return False
    return head[:1] == ONNX_MAGIC and len(head) >= 2 and head[1] < 0x20


def run(args: argparse.Namespace) -> int:
    common.check_device(args.device)
    if args.onnx:
        return _run_onnx(args)
    if not args.checkpoint:
        raise common.CliError("eval: give --checkpoint PATH (or --onnx PATH --dataset NAME)")
    common.check_outputs([(args.checkpoint, "<--checkpoint"), (args.data, "<--data"),
                          (args.json, "--json")])
    path = args.checkpoint
    if looks_like_onnx(path):
        raise CheckpointError(f"checkpoint {path}: this is an ONNX model, not a checkpoint; "
                              f"use --onnx {path} --dataset NAME")
    if args.data and args.dataset:
        raise common.CliError("eval: give either --dataset or --data, not both")
    model = load_trained(path)
    config, settings = model.model_config, model.train_settings
    if args.data:
        return _checkpoint_on_data(args, model)
    dataset_name = args.dataset or config.get("dataset")
    if dataset_name not in datasets.NAMES:
        raise CheckpointError(f"checkpoint {path}: unknown dataset {dataset_name!r}; valid "
                              f"datasets: {', '.join(datasets.NAMES)}")
    seed = args.seed if args.seed is not None else _recorded_seed(path, config, settings)
    data = load_data(config["model"], dataset_name, seed)
    check_fits(config, data, path)
    result = evaluate(model, F.cross_entropy, data.test, batch_size=args.batch_size,
                      backend=args.backend, metrics=datasets.score, device=args.device)
    print(f"{config['model']} from {path} on {dataset_name} ({len(data.test)} test examples): "
          f"test loss {result['loss']:.4f}  test acc {result['accuracy']:.4f}", flush=True)
    if args.json:
        common.write_text(args.json, json.dumps({"checkpoint": path, "model": config["model"],
                                                 "dataset": dataset_name, "seed": seed,
                                                 "examples": len(data.test), **result},
                                                indent=2) + "\n")
    return 0


def _checkpoint_on_data(args: argparse.Namespace, model: Any) -> int:
    """A saved zoo classifier on the user's labelled examples (``--data``)."""
    path, config = args.checkpoint, model.model_config
    user = load_data_file(args.data, "eval", labels=True)
    check_user_data(config, user.test.inputs, user.test.targets, path, "eval")
    test = Dataset(user.test.inputs, np.asarray(user.test.targets).astype(np.int64))
    result = evaluate(model, F.cross_entropy, test, batch_size=args.batch_size,
                      backend=args.backend, metrics=datasets.score, device=args.device)
    print(f"{config['model']} from {path} on {args.data} ({len(test)} examples): "
          f"test loss {result['loss']:.4f}  test acc {result['accuracy']:.4f}", flush=True)
    if args.json:
        common.write_text(args.json, json.dumps({"checkpoint": path, "model": config["model"],
                                                 "data": args.data, "examples": len(test),
                                                 **result}, indent=2) + "\n")
    return 0


def _recorded_seed(path: str, config: dict[str, Any], settings: dict[str, Any]) -> int:
    seed = settings.get("seed", config.get("seed", 0))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise CheckpointError(f"checkpoint {path}: its recorded seed must be an integer from 0 "
                              f"to 2**63 - 1, found {seed!r}")
    return seed


def _run_onnx(args: argparse.Namespace) -> int:
    if args.device != "cpu":
        raise common.CliError("eval --onnx runs the ONNX model on the CPU; use --device cpu")
    if args.checkpoint:
        raise OnnxCliError("eval: give either --checkpoint or --onnx, not both")
    common.check_outputs([(args.onnx, "<--onnx"), (args.json, "--json")])
    seed = args.seed if args.seed is not None else 0
    model, data = load_for_data(args.onnx, args.dataset, seed, "eval", args.data)
    inputs = np.asarray(data.test.inputs, dtype=model.dtype)
    outputs = predict(model, inputs)
    targets = np.asarray(data.test.targets)
    source = args.dataset or args.data
    if targets.dtype.kind == "f":  # regression targets: the mean squared error
        if targets.size != outputs.size:
            raise OnnxCliError(f"eval --data: 'y' has {targets.size} values, the model's "
                               f"outputs {outputs.size} ({outputs.shape})")
        mse = float(np.mean((outputs.reshape(-1).astype(np.float64)
                             - targets.reshape(-1).astype(np.float64)) ** 2))
        print(f"ONNX model {args.onnx} on {source} ({len(targets)} examples): mean squared "
              f"error {mse:.6g}", flush=True)
        if args.json:
            common.write_text(args.json, json.dumps({"onnx": args.onnx, "data": source,
                                                     "examples": len(targets), "mse": mse},
                                                    indent=2) + "\n")
        return 0
    session = Session(Options(dtype=model.dtype.name))
    loss = session.value(F.cross_entropy(session.const(outputs), session.input(
        targets.astype(model.dtype), requires_grad=False)))
    result = {"loss": float(loss), **datasets.score(outputs, targets)}
    print(f"ONNX model {args.onnx} on {source} ({len(targets)} test examples): "
          f"test loss {result['loss']:.4f}  test acc {result['accuracy']:.4f}", flush=True)
    if args.json:
        common.write_text(args.json, json.dumps({"onnx": args.onnx, "dataset": source,
                                                 "seed": seed, "examples": len(targets),
                                                 **result}, indent=2) + "\n")
    return 0
