"""The ``torchlean`` command (also ``python -m torchlean``): one module per subcommand.

``train`` trains a zoo model, ``eval`` evaluates a checkpoint or an ONNX classifier, ``graph``
prints a model's compiled loss graph, ``ops`` the op registry, ``export`` writes ONNX, ``verify``
checks every primitive against its spec (or a model's graph), ``certify`` reports certified and
PGD robust accuracy, ``bench`` times the workloads against PyTorch, JAX, autograd and NumPy,
``vnn`` decides VNN-LIB properties of ONNX networks (one instance or a benchmark).

This package is the top layer: the only place that parses arguments, prints, sets BLAS threads
or malloc options, or writes output files; nothing in the library imports it. Every error is one
line on stderr with exit status 2 (never a traceback; ``TORCHLEAN_DEBUG=1`` shows one); an
argparse error is its one-line reason plus "see --help"; Ctrl-C during training stops after the
current batch, writes what was asked for, and exits with 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .. import __version__
from ..core import alloc
from ..core.errors import TorchLeanError
from . import bench, certify, common, export, graph, ops, train, verify, vnn
from . import eval as eval_command
from .common import EXIT_ERROR, EXIT_INTERRUPTED, CliError

__all__ = ["CliError", "build_parser", "main"]

_COMMANDS: dict[str, tuple[Callable[[Any], object], Callable[[argparse.Namespace], int]]] = {
    "train": (train.add_parser, train.run),
    "eval": (eval_command.add_parser, eval_command.run),
    "graph": (graph.add_parser, graph.run),
    "ops": (ops.add_parser, ops.run),
    "export": (export.add_parser, export.run),
    "verify": (verify.add_parser, verify.run),
    "certify": (certify.add_parser, certify.run),
    "bench": (bench.add_parser, bench.run),
    "vnn": (vnn.add_parser, vnn.run),
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: the reason and where to read more, not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="torchlean",
                     description="Train, evaluate, export, verify, certify and benchmark "
                                 "models with torchlean; decide VNN-LIB properties.")
    parser.add_argument("--version", action="version", version=f"torchlean {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(_COMMANDS) + "}",
                                parser_class=_Parser)
    sub.required = True
    for add_parser, _ in _COMMANDS.values():
        add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its one line (or --help, --version)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    # NumPy-only training faults its step buffers back in every step under glibc's default
    # thresholds (see core/alloc.py): the command opts in at once; the library on the first
    # repeated step.
    alloc.pin_thresholds()
    try:
        with common.blas_threads(getattr(args, "threads", 1)):
            return _COMMANDS[args.command][1](args)
    except KeyboardInterrupt:
        print(f"torchlean {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (TorchLeanError, OSError) as exc:
        _say(args.command, exc, exc)
        return EXIT_ERROR
    except (MemoryError, RecursionError, ImportError) as exc:
        _say(args.command, exc, f"{type(exc).__name__}: {exc or 'out of memory'}")
        return EXIT_ERROR
    except Exception as exc:  # a bug: still one line, and how to see the whole story
        _say(args.command, exc, f"internal error ({type(exc).__name__}: {exc}); please "
             "report it (TORCHLEAN_DEBUG=1 shows the traceback)")
        return EXIT_ERROR


def _say(command: str, exc: BaseException, message: object) -> None:
    if os.environ.get("TORCHLEAN_DEBUG"):
        traceback.print_exception(exc, file=sys.stderr)
    print(f"torchlean {command}: error: {message}", file=sys.stderr)
