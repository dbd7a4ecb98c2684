"""Run a VNN benchmark: every row of an ``instances.csv`` through ``verify_instance``.

A row is ``onnx, vnnlib, timeout`` (paths relative to the benchmark folder, as the competition
writes them). ``run`` yields one ``Row`` per instance: each network is loaded and compiled, and
each property parsed, once per run and reused by every row naming the same file (``_Cache``,
keyed by path, size and modification time; ACAS Xu names each property for 45 networks); the
time to load what a row needed first is counted in its seconds (stage ``load``).
``write_csv`` writes the rows; ``summary`` counts verified (``unsat``), falsified (``sat``),
unknown, timeout and error, with total and median seconds, per-stage medians, and the domains
branch and bound bounded with their rate (domains per second of the ``bab`` stage).
A file that cannot be read, or a network and property that do not fit, gives status ``error``
with the message (a benchmark goes on); other exceptions propagate.
"""

from __future__ import annotations

import csv
import functools
import os
import statistics
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..core.errors import TorchLeanError
from . import vnnlib
from .instance import Network, Result, verify_instance

__all__ = ["Instance", "Row", "read_instances", "run", "summary", "write_csv"]

MAX_ROWS = 1_000_000
COLUMNS = ("onnx", "vnnlib", "timeout", "status", "seconds", "method", "rounding", "refuted",
           "conjunctions", "fallback", "message", "domains")


@dataclass(frozen=True)
class Instance:
    onnx: str
    vnnlib: str
    timeout: float


@dataclass
class Row:
    instance: Instance
    result: Result

    def as_dict(self, stages: bool = False) -> dict[str, Any]:
        """The CSV columns (``stages``: also the seconds per stage, for JSON)."""
        r = self.result
        row = {"onnx": self.instance.onnx, "vnnlib": self.instance.vnnlib,
               "timeout": self.instance.timeout, "status": r.status,
               "seconds": round(r.seconds, 4), "method": r.method, "rounding": r.rounding,
               "refuted": r.refuted, "conjunctions": r.conjunctions,
               "fallback": " ".join(r.fallback), "message": r.message, "domains": r.domains}
        if stages:
            row["stages"] = dict(r.stages)
        return row


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


class _Cache:
    """What was loaded from files, by ``(path, size, mtime)``: a file changed on disk during a
    run is loaded again. At most ``size`` entries whose files total at most ``max_bytes``
    (the oldest loaded goes first; the newest always stays)."""

    def __init__(self, load: Callable[[str], Any], size: int, max_bytes: int) -> None:
        self.load, self.size, self.max_bytes = load, size, max_bytes
        self.items: OrderedDict[tuple[str, int, int], Any] = OrderedDict()

    def get(self, path: str) -> Any:
        try:
            info = os.stat(path)
            key = (os.path.abspath(path), info.st_size, info.st_mtime_ns)
        except OSError:  # let the loader name the problem
            return self.load(path)
        if key not in self.items:
            self.items[key] = self.load(path)
            while len(self.items) > 1 and (len(self.items) > self.size or sum(
                    k[1] for k in self.items) > self.max_bytes):
                self.items.popitem(last=False)
        return self.items[key]


# ACAS Xu has 45 small networks, MNIST-FC 3; a compiled network with its batched copies for
# the attacks takes a multiple of its file's size.
MAX_CACHED_NETWORKS = 64
MAX_CACHED_NETWORK_BYTES = 256 * 2**20
MAX_CACHED_PROPERTIES = 256
MAX_CACHED_PROPERTY_BYTES = 256 * 2**20


def run(instances: list[Instance], directory: Any, *, method: str = "crown",
        rounding: str = "float32", timeout: float | None = None, seed: int = 0,
        effort: int = 4, on_row: Callable[[Row], None] | None = None,
        on_progress: Callable[[Instance, dict[str, Any]], None] | None = None
        ) -> Iterator[Row]:
    """Each instance's ``Row``, in order; ``timeout`` overrides the rows' own limits.
    ``on_progress(instance, counts)``: branch and bound's running counts on the instance being
    run (``verify_instance``'s ``progress``)."""
    folder = os.fspath(directory)
    networks = _Cache(Network, MAX_CACHED_NETWORKS, MAX_CACHED_NETWORK_BYTES)
    props = _Cache(vnnlib.read, MAX_CACHED_PROPERTIES, MAX_CACHED_PROPERTY_BYTES)
    for inst in instances:
        limit = inst.timeout if timeout is None else timeout
        try:
            start = time.monotonic()
            net = networks.get(os.path.join(folder, inst.onnx))
            prop = props.get(os.path.join(folder, inst.vnnlib))
            loading = time.monotonic() - start
            left = max(limit - loading, 1e-3)
            progress = (None if on_progress is None
                        else functools.partial(on_progress, inst))
            result = verify_instance(net, prop, left, method, rounding=rounding, seed=seed,
                                     effort=effort, progress=progress)
            result.seconds += loading
            result.stages["load"] = round(result.stages.get("load", 0.0) + loading, 6)
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
    """Counts per outcome, seconds (total, median, per-stage medians) and branch and bound's
    work: ``domains`` bounded in all, and ``domains_per_second`` over the seconds spent in
    the ``bab`` stage (0 where no branch and bound ran)."""
    names = {"unsat": "verified", "sat": "falsified", "unknown": "unknown",
             "timeout": "timeout", "error": "error"}
    counts = {name: 0 for name in names.values()}
    seconds = [row.result.seconds for row in rows]
    for row in rows:
        counts[names.get(row.result.status, "error")] += 1
    stages: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row.result.stages.items():
            stages.setdefault(name, []).append(value)
    domains = sum(row.result.domains for row in rows)
    bab = sum(stages.get("bab", []))
    return {"instances": len(rows), **counts,
            "seconds_total": round(sum(seconds), 3),
            "seconds_median": round(statistics.median(seconds), 4) if seconds else 0.0,
            "stage_medians": {name: round(statistics.median(v), 4)
                              for name, v in stages.items()},
            "domains": domains, "domains_per_second": round(domains / bab, 1) if bab > 0 else 0.0}
