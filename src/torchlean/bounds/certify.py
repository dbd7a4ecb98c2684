"""``torchlean certify``: certified and empirical robust accuracy of a saved classifier.

For each radius ``eps`` the test examples' L-infinity balls (clipped to the valid input range)
are bounded with each requested method on the compiled logits graph; an example is certified
when every margin ``logit_true - logit_other`` has a positive lower bound. PGD (``attack``) gives
the empirical upper envelope. A certified example that PGD breaks would mean an unsound bound:
the run counts such contradictions and fails if there is any.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import attack
from ..engine.transforms import compile as compile_fn
from . import METHODS, BoundsError, compute_bounds, margin_spec
from . import box as make_box

Array = Any
CHUNK = 512  # examples per bound computation for small models (all of digits' 359)


@dataclass
class EpsResult:
    """One radius: clean, certified (per method) and PGD accuracy, seconds per method."""

    eps: float
    clean: float
    certified: dict[str, float]
    pgd: float
    seconds: dict[str, float]
    contradictions: int = 0
    examples: int = 0
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"eps": self.eps, "clean_accuracy": self.clean, "certified_accuracy":
                self.certified, "pgd_accuracy": self.pgd, "seconds": self.seconds,
                "examples_per_second": {m: (self.examples / s if s > 0 else None)
                                        for m, s in self.seconds.items()},
                "cpu_seconds": self.cpu_seconds,
                "contradictions": self.contradictions, "examples": self.examples}


@dataclass
class Report:
    """Everything one ``certify`` run measured."""

    model: str
    dataset: str
    examples: int
    clip: tuple[float, float] | None
    kernel: bool
    rows: list[EpsResult] = field(default_factory=list)


MAX_EPS = 1e6
"""Largest radius ``parse_eps`` accepts: beyond it PGD's steps and the bounds overflow float32
long before any certificate could mean something."""


def parse_eps(text: str) -> list[float]:
    """``"0.01,0.02"`` -> ``[0.01, 0.02]`` (finite, in ``[0, MAX_EPS]``, at least one)."""
    values = []
    for part in str(text).split(","):
        try:
            v = float(part)
        except ValueError:
            raise BoundsError(f"--eps: expected comma-separated numbers, found {part!r}") from None
        if not np.isfinite(v) or not 0 <= v <= MAX_EPS:
            raise BoundsError(f"--eps: each radius must be a number from 0 to {MAX_EPS:g}, "
                              f"found {part!r}")
        values.append(v)
    return values


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in str(text).split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise BoundsError(f"--method: unknown method(s) {bad or text!r}; expected a "
                          f"comma-separated subset of {', '.join(METHODS)}")
    return methods


class _Logits:
    """The model's logits graph compiled once per batch size."""

    def __init__(self, model: Any, example_shape: tuple[int, ...]) -> None:
        self.model = model
        self.example_shape = example_shape
        self._cache: dict[int, Any] = {}

    def __call__(self, batch: int) -> Any:
        if batch not in self._cache:
            model = self.model
            self._cache[batch] = compile_fn(lambda x: model(x), (batch, *self.example_shape),
                                            dtype="float32")
        return self._cache[batch]


def certify(model: Any, inputs: Array, labels: Array, eps_list: Sequence[float],
            methods: Sequence[str], *, clip: tuple[float, float] | None = (0.0, 1.0),
            kernel: bool = True, pgd_steps: int = 20, pgd_restarts: int = 1, seed: int = 0,
            alpha_steps: int = 20, chunk: int | None = None,
            progress: Callable[[str, int, int], None] | None = None,
            model_name: str = "model", dataset: str = "data") -> Report:
    """Certified accuracy per method and PGD accuracy for every radius (see the module).

    ``progress(label, done, total)``, if given, is called before each chunk and once at the end
    of each method (``done == total``); the command line draws a bar with it.
    """
    x = np.asarray(inputs, dtype=np.float32)
    y = np.asarray(labels).astype(np.int64)
    if x.ndim < 2 or y.shape != (x.shape[0],) or not len(y):
        raise BoundsError(f"certify: expected inputs (N, ...) and labels (N,), found {x.shape} "
                          f"and {y.shape}")
    logits_of = _Logits(model, tuple(x.shape[1:]))
    n = len(y)
    probe = logits_of(1)
    widest = max(int(np.prod(nd.shape[1:])) for nd in probe.graph.nodes if nd.shape)
    size = chunk or (min(n, CHUNK) if widest <= 512 else min(n, 32))
    num_classes = probe.out_shape[1]
    spans = [(s, min(n, s + size)) for s in range(0, n, size)]
    full = logits_of(size)
    clean_logits = np.concatenate([full.forward(_pad(x[a:b], size))[: b - a] for a, b in spans])
    correct = np.argmax(clean_logits, axis=1) == y
    report = Report(model_name, dataset, n, clip, kernel)
    for eps in eps_list:
        certified: dict[str, float] = {}
        seconds: dict[str, float] = {}
        cpu: dict[str, float] = {}
        certified_any = np.zeros(n, dtype=bool)
        for method in methods:
            ok = np.zeros(n, dtype=bool)
            start, cpu_start = time.perf_counter(), time.process_time()
            for done, (a, b) in enumerate(spans):
                if progress is not None:
                    progress(f"eps {eps:g}  {method:<11}", done, len(spans))
                xs, ys = _pad(x[a:b], size), _pad(y[a:b], size)
                lo, hi = make_box(xs, eps, *(clip if clip is not None else (None, None)))
                result = compute_bounds(full, lo, hi, method=method,
                                        spec=margin_spec(ys, num_classes), kernel=kernel,
                                        alpha_steps=alpha_steps, output_crown=False)
                assert result.spec is not None
                ok[a:b] = (result.spec[0].min(axis=1) > 0)[: b - a]
            seconds[method] = time.perf_counter() - start
            cpu[method] = time.process_time() - cpu_start
            if progress is not None:
                progress(f"eps {eps:g}  {method:<11}", len(spans), len(spans))
            ok &= correct
            certified[method] = float(ok.mean())
            certified_any |= ok
        broken = np.zeros(n, dtype=bool)
        for a, b in spans:
            res = attack.pgd(full, _pad(x[a:b], size), _pad(y[a:b], size), eps, steps=pgd_steps,
                             restarts=pgd_restarts, seed=seed, clip=clip)
            broken[a:b] = res.broken[: b - a]
        robust = correct & ~broken
        contradictions = int(np.sum(certified_any & broken))
        report.rows.append(EpsResult(eps, float(correct.mean()), certified, float(robust.mean()),
                                     seconds, contradictions, n, cpu))
        if contradictions:
            raise BoundsError(f"certify: {contradictions} example(s) certified at eps {eps:g} "
                              "were broken by PGD: the bounds are unsound (please report)")
    return report


def _pad(a: Array, size: int) -> Array:
    """Pad the batch axis to ``size`` by repeating the last row (results are cut back)."""
    if len(a) == size:
        return a
    return np.concatenate([a, np.repeat(a[-1:], size - len(a), axis=0)])


def format_table(report: Report, methods: Sequence[str]) -> str:
    """The certified / PGD accuracy table and the time per example of each method."""
    head = ["eps", "clean", *methods, "pgd"]
    lines = ["  ".join(f"{h:>11}" for h in head)]
    for row in report.rows:
        cells = [f"{row.eps:g}", f"{row.clean:.3f}", *(f"{row.certified[m]:.3f}"
                                                        for m in methods), f"{row.pgd:.3f}"]
        lines.append("  ".join(f"{c:>11}" for c in cells))
    lines.append("")
    for m in methods:
        total = sum(r.seconds[m] for r in report.rows)
        per_eps = total / max(len(report.rows), 1)
        cpu = sum(r.cpu_seconds.get(m, 0.0) for r in report.rows) / max(len(report.rows), 1)
        # CPU time too: on a shared machine the wall clock also counts other processes' turns.
        lines.append(f"{m}: {per_eps:.2f} s per eps for {report.examples} examples "
                     f"({report.examples / per_eps if per_eps > 0 else float('inf'):,.0f} "
                     f"examples/s; {cpu:.2f} s CPU)")
    return "\n".join(lines)


def to_json(report: Report) -> str:
    return json.dumps({"model": report.model, "dataset": report.dataset,
                       "examples": report.examples, "clip": report.clip,
                       "float32_kernels": report.kernel,
                       "results": [r.as_dict() for r in report.rows]}, indent=2) + "\n"
