"""Run a VNN benchmark: every row of an ``instances.csv`` through ``verify_instance``.

A row is ``onnx, vnnlib, timeout`` (paths relative to the benchmark folder, as the competition
writes them). ``run`` yields one ``Row`` per instance (networks are loaded once per consecutive
run of rows naming the same file); ``write_csv`` writes them; ``summary`` counts verified
(``unsat``), falsified (``sat``), unknown, timeout and error, with total and median seconds.
A file that cannot be read, or a network and property that do not fit, gives status ``error``
with the message (a benchmark goes on); other exceptions propagate.
"""

from __future__ import annotations

import csv
import os
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..core.errors import TorchLeanError
from .instance import Network, Result, verify_instance

__all__ = ["Instance", "Row", "read_instances", "run", "summary", "write_csv"]

MAX_ROWS = 1_000_000
COLUMNS = ("onnx", "vnnlib", "timeout", "status", "seconds", "method", "rounding", "refuted",
           "conjunctions", "fallback", "message")


@dataclass(frozen=True)
class Instance:
    onnx: str
    vnnlib: str
    timeout: float


@dataclass
class Row:
    instance: Instance
    result: Result

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        return {"onnx": self.instance.onnx, "vnnlib": self.instance.vnnlib,
                "timeout": self.instance.timeout, "status": r.status,
                "seconds": round(r.seconds, 4), "method": r.method, "rounding": r.rounding,
                "refuted": r.refuted, "conjunctions": r.conjunctions,
                "fallback": " ".join(r.fallback), "message": r.message}


class BenchmarkError(TorchLeanError):
    """An instances file that cannot be read or has a malformed row."""


def read_instances(path: Any) -> list[Instance]:
    """The rows of an ``instances.csv`` (``onnx, vnnlib, timeout``; blank lines skipped)."""
    label = os.fspath(path)
    rows: list[Instance] = []
    try:
        with open(label, newline="", encoding="utf-8") as handle:
            for number, row in enumerate(csv.reader(handle), start=1):
                if not row or all(not cell.strip() for cell in row):
                    continue
                if number > MAX_ROWS:
                    raise BenchmarkError(f"vnn: {label} has more than {MAX_ROWS} rows")
                if len(row) != 3:
                    raise BenchmarkError(f"vnn: {label}, line {number}: expected onnx, vnnlib, "
                                         f"timeout, found {len(row)} fields: {row[:4]!r}")
                try:
                    timeout = float(row[2])
                except ValueError:
                    timeout = -1.0
                if not timeout > 0 or timeout == float("inf"):
                    raise BenchmarkError(f"vnn: {label}, line {number}: the timeout must be a "
                                         f"number of seconds > 0, found {row[2]!r}")
                rows.append(Instance(row[0].strip(), row[1].strip(), timeout))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchmarkError(f"vnn: cannot read {label}: {exc}") from None
    if not rows:
        raise BenchmarkError(f"vnn: {label} lists no instances")
    return rows


def run(instances: list[Instance], directory: Any, *, method: str = "crown",
        rounding: str = "float32", timeout: float | None = None, seed: int = 0,
        effort: int = 4, on_row: Callable[[Row], None] | None = None) -> Iterator[Row]:
    """Each instance's ``Row``, in order; ``timeout`` overrides the rows' own limits."""
    folder = os.fspath(directory)
    net: Network | None = None
    for inst in instances:
        limit = inst.timeout if timeout is None else timeout
        try:
            model_path = os.path.join(folder, inst.onnx)
            if net is None or net.label != model_path:
                net = None
                net = Network(model_path)
            result = verify_instance(net, os.path.join(folder, inst.vnnlib), limit, method,
                                     rounding=rounding, seed=seed, effort=effort)
        except TorchLeanError as exc:
            result = Result("error", 0.0, method, rounding, message=str(exc))
        row = Row(inst, result)
        if on_row is not None:
            on_row(row)
        yield row


def write_csv(rows: list[Row], path: Any) -> None:
    """The rows as CSV, with a header (the columns of ``Row.as_dict``)."""
    with open(os.fspath(path), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_dict())


def summary(rows: list[Row]) -> dict[str, Any]:
    """Counts per outcome and seconds (total, median, per outcome)."""
    names = {"unsat": "verified", "sat": "falsified", "unknown": "unknown",
             "timeout": "timeout", "error": "error"}
    counts = {name: 0 for name in names.values()}
    seconds = [row.result.seconds for row in rows]
    for row in rows:
        counts[names.get(row.result.status, "error")] += 1
    return {"instances": len(rows), **counts,
            "seconds_total": round(sum(seconds), 3),
            "seconds_median": round(statistics.median(seconds), 4) if seconds else 0.0}
