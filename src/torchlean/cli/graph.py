"""``torchlean graph``: the compiled graph of a zoo model's loss, as an IR listing and Graphviz."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine import ops_interface as F
from ..engine.transforms import compile as compile_fn
from ..zoo import datasets, models
from ..zoo.trained import load_data
from . import common


def add_parser(sub: Any) -> None:
    p = sub.add_parser("graph", help="print the compiled graph of a model's loss",
                       description="Trace the loss of a model on one batch and print the "
                                   "graph's IR listing.")
    p.add_argument("--model", choices=models.NAMES, default="mlp",
                   help="model whose loss is traced (default mlp)")
    p.add_argument("--dataset", choices=datasets.NAMES, default=None,
                   help="dataset (default: the model's own)")
    p.add_argument("--batch-size", type=common.int_in(1, 100_000, "a batch size"), default=2,
                   help="batch size the graph is traced for (default 2)")
    p.add_argument("--seed", type=common.seed_int, default=0,
                   help="seed of the initial weights and the data split (default 0)")
    p.add_argument("--dot", metavar="PATH", type=common.output_path,
                   help="also write the graph as Graphviz DOT")


def run(args: argparse.Namespace) -> int:
    model_name = args.model
    dataset_name = args.dataset or models.DEFAULT_DATASET[model_name]
    models.check_compatible(model_name, dataset_name)
    common.check_outputs([(args.dot, "--dot")])
    data = load_data(model_name, dataset_name, args.seed)
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
        common.write_text(args.dot, compiled.graph.to_dot() + "\n")
        print(f"# wrote Graphviz DOT to {args.dot}")
    return 0
