"""``torchlean export``: write a saved zoo model as an ONNX model onnxruntime runs."""

from __future__ import annotations

import argparse
from typing import Any

from ..onnx import export
from ..onnx.exporter import MAX_OPSET, MIN_OPSET
from ..zoo.trained import load_trained
from . import common
from .onnx_inputs import OnnxCliError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="write a saved checkpoint's model as ONNX",
                       description="Rebuild the model saved by 'torchlean train --save' and "
                                   f"write it as an ONNX model (opset {MIN_OPSET} to "
                                   f"{MAX_OPSET}) that onnxruntime runs.")
    p.add_argument("--checkpoint", metavar="PATH", required=True,
                   help="a checkpoint written by 'torchlean train --save' or tl.save(model)")
    p.add_argument("--out", metavar="PATH", required=True, type=common.output_path,
                   help="the .onnx file to write")
    p.add_argument("--batch-size", type=common.int_in(1, 1_000_000, "a batch size"), default=1,
                   help="the batch size the ONNX graph takes (default 1)")
    p.add_argument("--opset", type=common.int_in(MIN_OPSET, MAX_OPSET, "an ONNX opset"),
                   default=MIN_OPSET, help=f"ONNX opset (default {MIN_OPSET})")


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


def run(args: argparse.Namespace) -> int:
    common.check_outputs([(args.checkpoint, "<--checkpoint"), (args.out, "--out")])
    model = load_trained(args.checkpoint)
    config = model.model_config
    model.eval()
    shape = example_shape(config, args.batch_size)
    proto = export(model, args.out, [shape], opset=args.opset)
    print(f"wrote {config['model']} from {args.checkpoint} to {args.out}: input {shape}, "
          f"{len(proto.graph.node)} nodes, {len(proto.graph.initializer)} initialisers, "
          f"opset {args.opset}", flush=True)
    return 0
