"""``torchlean vnn``: decide a VNN-LIB property for an ONNX network, or run a whole benchmark.

``torchlean vnn MODEL.onnx PROP.vnnlib`` prints ``unsat``, ``sat``, ``unknown`` or ``timeout``
(with the time, the soundness claim made, and any nodes the bound engine had to bound by
intervals) and writes the competition's result file with ``--out``. ``torchlean vnn --instances
instances.csv [--dir D]`` runs every row (``onnx, vnnlib, timeout``), with a progress bar on a
terminal, writes the rows as CSV (``--out``) and prints a summary table (``--json`` also writes
it as JSON). The library behind it is ``torchlean.vnn``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..vnn import benchmark
from ..vnn.instance import CLAIMS, LOW_DIMENSION, ROUNDINGS, VNN_METHODS, Result, verify_instance
from . import common

REDRAW_S = 0.5  # the progress line's least interval between redraws


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``vnn`` subcommand's arguments."""
    p = sub.add_parser(
        "vnn", help="does an ONNX network satisfy a VNN-LIB property? (or run a benchmark)",
        description="Answers unsat (a bound pass refutes every unsafe disjunct: the property "
                    "holds), sat (a counterexample, checked by running the network), unknown or "
                    "timeout. Each unsat holds for the float32 network in round-to-nearest "
                    "(--rounding float32, the default) or for the real-valued network "
                    "(--rounding real).")
    p.add_argument("model", nargs="?", metavar="MODEL.onnx",
                   help="the network (.onnx or .onnx.gz)")
    p.add_argument("property", nargs="?", metavar="PROP.vnnlib",
                   help="the property (.vnnlib or .vnnlib.gz)")
    p.add_argument("--instances", metavar="CSV",
                   help="run every row (onnx, vnnlib, timeout) of this instances file instead")
    p.add_argument("--dir", metavar="D",
                   help="folder the instances' paths are relative to (default: the CSV's)")
    p.add_argument("--timeout", type=common.positive_float,
                   default=None, help="seconds per instance (default: none for one instance, "
                                      "each row's own for --instances)")
    p.add_argument("--method", choices=VNN_METHODS, default="bab",
                   help="bab: branch and bound (default); or one bound pass")
    p.add_argument("--rounding", choices=ROUNDINGS, default="float32",
                   help="what an unsat claims: the float32 network (default) or the real one")
    p.add_argument("--effort", type=common.int_in(0, 100, "an attack effort"), default=4,
                   help="attack attempts after the first, each with 4x more samples, for "
                        f"networks of at most {LOW_DIMENSION} inputs (default 4; 0: one); "
                        "larger ones get one")
    p.add_argument("--seed", type=common.non_negative_int, default=0,
                   help="seed of the attacks (default 0)")
    p.add_argument("--out", metavar="PATH", type=common.output_path,
                   help="the result file (one instance: the competition's format) or the "
                        "results CSV (--instances)")
    p.add_argument("--json", metavar="PATH", type=common.output_path,
                   help="also write the result(s) and summary as JSON")
    common.add_threads_option(p)
    return p


def _describe(result: Result) -> list[str]:
    lines = [result.status, f"seconds: {result.seconds:.3f}  method: {result.method}  "
             f"refuted: {result.refuted}/{result.conjunctions} unsafe conjunctions"]
    if result.claim:
        lines.append(f"claim: {result.claim}")
    if result.fallback:
        lines.append("interval fallback (CROWN could not relax these nodes; sound, looser): "
                     + ", ".join(result.fallback))
    if result.message:
        lines.append(result.message)
    return lines


def status_line(show: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    """A ``verify_instance`` progress callback passing branch and bound's running counts to
    ``show`` as one line, at most every ``REDRAW_S`` seconds (a round can take a millisecond,
    and a terminal redraw costs more)."""
    last = [-REDRAW_S]

    def report(counts: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - last[0] >= REDRAW_S:
            last[0] = now
            show(f"{counts['domains']:,} domains, {counts.get('proved', 0):,} proved, "
                 f"{counts['open']:,} open")
    return report


def _run_one(args: argparse.Namespace) -> int:
    common.check_outputs([(args.model, "<MODEL"), (args.property, "<PROP"),
                          (args.out, "--out"), (args.json, "--json")])
    bar = progress = None
    if common.progress_bars():
        from tqdm import tqdm

        bar = tqdm(file=sys.stderr, bar_format="branch and bound: {postfix} [{elapsed}]")
        progress = status_line(bar.set_postfix_str)
    try:
        result = verify_instance(args.model, args.property, args.timeout, args.method,
                                 rounding=args.rounding, seed=args.seed, effort=args.effort,
                                 progress=progress)
    finally:
        if bar is not None:
            bar.close()
    print("\n".join(_describe(result)), flush=True)
    if args.out:
        common.write_text(args.out, result.competition_text())
    if args.json:
        common.write_text(args.json, json.dumps(result.as_dict(), indent=2) + "\n")
    return 0


def _table(summary: dict[str, Any], label: str, method: str) -> str:
    head = ("benchmark", "method", "instances", "verified", "falsified", "unknown", "timeout",
            "error", "total s", "median s", "domains", "domains/s")
    row = (label, method, summary["instances"], summary["verified"], summary["falsified"],
           summary["unknown"], summary["timeout"], summary["error"],
           f"{summary['seconds_total']:.1f}", f"{summary['seconds_median']:.3f}",
           summary["domains"], f"{summary['domains_per_second']:.0f}")
    out = io.StringIO()
    out.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    out.write("| " + " | ".join(str(c) for c in row) + " |\n")
    return out.getvalue()


def _run_benchmark(args: argparse.Namespace) -> int:
    if args.model or args.property:
        raise common.CliError("give MODEL and PROP, or --instances, not both")
    common.check_outputs([(args.instances, "<--instances"), (args.out, "--out"),
                          (args.json, "--json")])
    instances = benchmark.read_instances(args.instances)
    folder = args.dir if args.dir is not None else os.path.dirname(args.instances) or "."
    if not os.path.isdir(folder):
        raise common.CliError(f"--dir {folder}: no such folder")
    bar = None
    if common.progress_bars():
        from tqdm import tqdm

        bar = tqdm(total=len(instances), unit="instance", file=sys.stderr)

    on_progress = None
    if bar is not None:
        shown = bar  # (a name mypy knows is not None inside the closures)
        running = [""]  # the instance being run
        report = status_line(lambda text: shown.set_postfix_str(f"{running[0]}: {text}"))

        def on_progress(inst: benchmark.Instance, counts: dict[str, Any]) -> None:
            running[0] = inst.vnnlib
            report(counts)

    def on_row(row: benchmark.Row) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{row.result.status} {row.instance.vnnlib}")
        else:
            print(f"{row.instance.onnx} {row.instance.vnnlib}: {row.result.status} "
                  f"({row.result.seconds:.2f} s)", flush=True)

    try:
        rows = list(benchmark.run(instances, folder, method=args.method,
                                  rounding=args.rounding, timeout=args.timeout, seed=args.seed,
                                  effort=args.effort, on_row=on_row,
                                  on_progress=on_progress))
    finally:
        if bar is not None:
            bar.close()
    summary = benchmark.summary(rows)
    label = os.path.basename(os.path.abspath(folder)) or folder
    print(_table(summary, label, args.method), end="", flush=True)
    if summary["stage_medians"]:
        print("median seconds per stage: " + ", ".join(
            f"{name} {value:.4f}" for name, value in summary["stage_medians"].items()))
    print(f"claim: every unsat: {CLAIMS[args.rounding]}; every sat was checked on the network, "
          "with a margin above the float32 rounding of any summation order")
    errors = [r for r in rows if r.result.status == "error"]
    for row in errors[:5]:
        print(f"error: {row.instance.onnx} {row.instance.vnnlib}: {row.result.message}",
              file=sys.stderr)
    if args.out:
        benchmark.write_csv(rows, args.out)
    if args.json:
        common.write_text(args.json, json.dumps(
            {"benchmark": label, "method": args.method, "rounding": args.rounding,
             "summary": summary, "rows": [r.as_dict(stages=True) for r in rows]},
            indent=2) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.instances:
        return _run_benchmark(args)
    if not (args.model and args.property):
        raise common.CliError("give MODEL.onnx and PROP.vnnlib, or --instances "
                              "CSV")
    if args.dir:
        raise common.CliError("--dir goes with --instances")
    return _run_one(args)
