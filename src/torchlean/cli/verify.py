"""``torchlean verify``: the op table (``--ops``, ``--quick``, ``--json``) and the model report
(``--checkpoint`` or ``--model``/``--dataset``).

``add_parser`` registers the subcommand on the main parser; ``run`` executes it and returns the
exit status: 0 when every check passed, 1 when any failed, 2 for bad input or a missing extra
(``torchlean.cli.main`` prints ``TorchLeanError`` messages and returns 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ..engine import ops_interface as F
from ..verify import check_model
from ..verify.checks import VerifyError, check_ops, require_sympy
from ..verify.model import check_checkpoint, check_fresh
from ..verify.report import Report, render_table
from ..zoo import datasets, models
from ..zoo.trained import check_user_data, load_trained
from . import common
from .onnx_inputs import load_data_file, load_for_data

EXIT_FAILED = 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``verify`` subcommand's arguments."""
    p = sub.add_parser(
        "verify", help="check every primitive against its spec, or a model's graph",
        description="Evidence, not proof: each primitive's forward kernel against its reference "
                    "spec (exact over Fraction where rational), its VJP and JVP rules against "
                    "sympy's exact derivative of the spec, finite differences, the dot-product "
                    "test, second order, the compiled/eager link, PyTorch, and the fast "
                    "kernels (Options.fast_kernels) against the reference ones. With --checkpoint "
                    "(or --model), a report on that model's compiled loss graph instead. Exit "
                    "status 1 if any check fails. Needs the verify extra (sympy).")
    p.add_argument("--ops", metavar="NAME,...", help="only these primitives (comma-separated)")
    p.add_argument("--quick", action="store_true",
                   help="fewer samples and sympy draws (under a minute for the registry)")
    p.add_argument("--seed", type=common.seed_int, default=0,
                   help="seed of the extra draws (default 0)")
    p.add_argument("--json", metavar="PATH", type=common.output_path,
                   help="also write the results as JSON")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="report on the model saved by 'torchlean train --save'")
    p.add_argument("--model", choices=models.NAMES, default=None,
                   help="report on a freshly initialised model of this kind")
    p.add_argument("--onnx", metavar="PATH", default=None,
                   help="report on an ONNX classifier's graph (needs --dataset and the onnx "
                        "extra; the batch is the model's own)")
    p.add_argument("--data", metavar="FILE.npz", default=None,
                   help="the user's examples for an --onnx or --checkpoint classifier: 'x' "
                        "(examples first) and 'y' (integer class labels), instead of --dataset")
    p.add_argument("--dataset", choices=datasets.NAMES, default=None,
                   help="dataset for --model / --checkpoint (default: the model's own)")
    p.add_argument("--batch-size", type=common.int_in(1, 100_000, "a batch size"), default=32,
                   help="test examples in the model report's batch (default 32)")
    p.add_argument("--no-color", action="store_true", help="no colour even on a terminal")
    return p


def _progress() -> Any:
    """A one-line progress display on a terminal (stderr), nothing otherwise."""
    if not sys.stderr.isatty():
        return None
    done = [0]

    def show(result: Any) -> None:
        done[0] += 1
        print(f"\r\033[Kchecked {done[0]} primitives (last: {result.name})", end="",
              file=sys.stderr, flush=True)

    return show


def run(args: argparse.Namespace) -> int:
    require_sympy("torchlean verify")
    if args.seed < 0:
        raise VerifyError(f"torchlean verify: --seed must be >= 0, found {args.seed}")
    if args.batch_size < 1:
        raise VerifyError(f"torchlean verify: --batch-size must be >= 1, found {args.batch_size}")
    if sum(bool(a) for a in (args.checkpoint, args.model, args.onnx)) > 1:
        raise VerifyError("torchlean verify: give one of --checkpoint, --model and --onnx")
    if args.ops and (args.checkpoint or args.model or args.onnx):
        raise VerifyError("torchlean verify: --ops lists primitives for the op table; the model "
                          "report checks the primitives its graph uses")
    if args.data and not (args.onnx or args.checkpoint):
        raise VerifyError("torchlean verify: --data goes with --onnx or --checkpoint")
    if args.data and args.dataset:
        raise VerifyError("torchlean verify: give either --dataset or --data, not both")
    if args.dataset and not (args.checkpoint or args.model or args.onnx):
        raise VerifyError("torchlean verify: --dataset needs --model or --checkpoint")
    common.check_outputs([(args.checkpoint, "<--checkpoint"), (args.onnx, "<--onnx"),
                          (args.data, "<--data"), (args.json, "--json")])
    colour = sys.stdout.isatty() and not args.no_color
    if args.onnx:
        report = onnx_report(args.onnx, args.dataset, quick=args.quick, seed=args.seed,
                             data_file=args.data)
    elif args.checkpoint or args.model:
        if args.checkpoint and args.data:
            report = checkpoint_report(args.checkpoint, args.data, batch_size=args.batch_size,
                                       quick=args.quick, seed=args.seed)
        elif args.checkpoint:
            report = check_checkpoint(args.checkpoint, dataset=args.dataset,
                                      batch_size=args.batch_size, quick=args.quick,
                                      seed=args.seed)
        else:
            report = check_fresh(args.model, args.dataset, batch_size=args.batch_size,
                                 quick=args.quick, seed=args.seed)
    else:
        names = None
        if args.ops is not None:
            names = [n.strip() for n in args.ops.split(",") if n.strip()]
            if not names:
                raise VerifyError("torchlean verify: --ops is empty; give primitive names "
                                  "separated by commas")
        report = check_ops(names, quick=args.quick, seed=args.seed, progress=_progress())
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    print(render_table(report, colour=colour), flush=True)
    if args.json:
        common.write_text(args.json, json.dumps(report.as_dict(), indent=2, default=str)
                             + "\n")
        print(f"wrote {args.json}", flush=True)
    return 0 if report.ok else EXIT_FAILED


def checkpoint_report(path: str, data_file: str, *, batch_size: int = 32, quick: bool = False,
                      seed: int = 0) -> Report:
    """``verify.check_model`` on a saved zoo classifier (``train --save`` or ``tl.save``) with
    the cross-entropy loss, on the first ``batch_size`` of the user's labelled examples."""
    model = load_trained(path)
    config = model.model_config
    user = load_data_file(data_file, "verify", labels=True)
    check_user_data(config, user.test.inputs, user.test.targets, path, "verify")
    inputs = np.asarray(user.test.inputs[:batch_size], dtype=np.float32)
    targets = np.asarray(user.test.targets[:batch_size]).astype(np.int64)
    return check_model(model, F.cross_entropy, inputs, targets, quick=quick, seed=seed,
                       title=f"model report: {config['model']} from {path} on {data_file}")


def onnx_report(path: str, dataset: str | None, quick: bool = False, seed: int = 0,
                data_file: str | None = None) -> Report:
    """``verify.check_model`` on an ONNX classifier's graph (as a module), on the first test
    batch of the model's own batch size, with the cross-entropy loss."""
    model, data = load_for_data(path, dataset, 0, "verify", data_file)
    if np.asarray(data.test.targets).dtype.kind not in "iu":
        raise VerifyError(f"verify --data: {data_file}: 'y' must hold integer class labels "
                          "(the report checks the cross-entropy loss)")
    batch = model.input_shapes[0][0]
    inputs = np.asarray(data.test.inputs[:batch], dtype=model.dtype)
    targets = np.asarray(data.test.targets[:batch])
    return check_model(model.as_module(), F.cross_entropy, inputs, targets, quick=quick,
                       seed=seed,
                       title=f"model report: ONNX model {path} on {dataset or data_file}")
