"""The results of ``torchlean.verify`` as data, and their rendering as a table or as JSON.

A ``Report`` holds one ``OpResult`` per primitive (one ``CheckResult`` per column) and, for
``--checkpoint``, a ``ModelReport``. ``render_table`` aligns the columns for a terminal (colour
only when asked, i.e. on a TTY); ``Report.as_dict`` is the same content for ``--json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS, FAIL, NA = "pass", "FAIL", "n/a"

# Column name -> what it checks, in table order (the README and --help repeat these words).
COLUMNS: dict[str, str] = {
    "forward": "forward kernel == spec (exact over Fraction / high-precision), float32 in budget",
    "fd": "VJP and JVP rules == central finite differences of the kernel (float64)",
    "vjp": "VJP rule == exact derivative of the spec (sympy), or the documented kink convention",
    "jvp": "JVP rule == exact derivative of the spec (sympy), or the documented kink convention",
    "dot": "dot-product test <v, J u> == <J^T v, u> (the two rules describe one Jacobian)",
    "2nd": "VJP rule differentiated again == sympy second derivative and finite differences",
    "link": "compiled == eager bitwise; to_tape + backward_dense_all == backprop_all bitwise",
    "torch": "forward and VJP == PyTorch float64 (torch_ref), minus the intended differences",
    "fast": "fast kernels (Options.fast_kernels) == the reference kernels within rtol 1e-4 "
            "(float32) / 1e-10 (float64), forward and VJP; compiled/eager link bitwise with them",
}


@dataclass
class CheckResult:
    """One cell: ``status`` is pass, FAIL or n/a; ``detail`` says why (always set)."""

    status: str
    detail: str = ""
    error: float | None = None  # the largest error seen (FAIL) or the largest accepted (pass)
    sample: str | None = None  # the sample that failed
    cases: int = 0  # how many sample evaluations the check ran
    conventions: list[str] = field(default_factory=list)  # kink conventions that held

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "error": self.error,
                "sample": self.sample, "cases": self.cases, "conventions": self.conventions}


@dataclass
class OpResult:
    """Every column's result for one primitive."""

    name: str
    checks: dict[str, CheckResult]
    seconds: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [c for c, r in self.checks.items() if r.failed]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": round(self.seconds, 4),
                "checks": {c: r.as_dict() for c, r in self.checks.items()}}


@dataclass
class ModelReport:
    """The evidence for one model: a list of named checks, each with a result."""

    title: str
    checks: dict[str, CheckResult]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [c for c, r in self.checks.items() if r.failed]

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "facts": self.facts,
                "checks": {c: r.as_dict() for c, r in self.checks.items()}}


@dataclass
class Report:
    """What ``check_ops`` / ``check_model`` found; ``ok`` is false if anything failed."""

    ops: list[OpResult]
    quick: bool = False
    seed: int = 0
    seconds: float = 0.0
    model: ModelReport | None = None

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.ops) and not (self.model and self.model.failed)

    def op(self, name: str) -> OpResult:
        for r in self.ops:
            if r.name == name:
                return r
        raise KeyError(name)

    def counts(self) -> dict[str, int]:
        cells = [c for r in self.ops for c in r.checks.values()]
        return {"primitives": len(self.ops), "cells": len(cells),
                "pass": sum(c.status == PASS for c in cells),
                "fail": sum(c.status == FAIL for c in cells),
                "n/a": sum(c.status == NA for c in cells)}

    def na_reasons(self) -> dict[str, int]:
        """How many n/a cells each reason accounts for."""
        reasons: dict[str, int] = {}
        for r in self.ops:
            for c in r.checks.values():
                if c.status == NA:
                    reasons[c.detail] = reasons.get(c.detail, 0) + 1
        return dict(sorted(reasons.items(), key=lambda kv: -kv[1]))

    def summary(self) -> str:
        n = self.counts()
        mode = "quick" if self.quick else "full"
        line = (f"{n['primitives']} primitives x {len(COLUMNS)} checks: {n['pass']} passed, "
                f"{n['fail']} failed, {n['n/a']} n/a ({mode} run, seed {self.seed}, "
                f"{self.seconds:.1f} s)")
        if self.model is not None:
            m = self.model
            bad = len(m.failed)
            line += f"; model: {len(m.checks) - bad} of {len(m.checks)} checks passed"
        return line

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "quick": self.quick, "seed": self.seed,
                "seconds": round(self.seconds, 3), "columns": COLUMNS,
                "counts": self.counts(), "na_reasons": self.na_reasons(),
                "ops": [r.as_dict() for r in self.ops],
                "model": None if self.model is None else self.model.as_dict(),
                "summary": self.summary()}


_COLOURS = {PASS: "\033[32m", FAIL: "\033[31;1m", NA: "\033[2m"}
_RESET = "\033[0m"


def _paint(text: str, status: str, colour: bool) -> str:
    return f"{_COLOURS[status]}{text}{_RESET}" if colour else text


def _cell(result: CheckResult) -> str:
    if result.status == FAIL:
        return "FAIL" if result.error is None else f"FAIL {result.error:.1e}"
    return result.status


def render_table(report: Report, colour: bool = False) -> str:
    """One row per primitive, one column per check; failures and n/a reasons listed below."""
    lines: list[str] = []
    if report.ops:
        names = list(COLUMNS)
        first = max(9, *(len(r.name) for r in report.ops))
        widths = {c: max(len(c), *(len(_cell(r.checks[c])) for r in report.ops if c in
                                   r.checks), 4) for c in names}
        lines.append("primitive".ljust(first) + "  " + "  ".join(c.ljust(widths[c])
                                                                for c in names))
        for r in report.ops:
            cells = []
            for c in names:
                res = r.checks.get(c, CheckResult(NA, "not run"))
                cells.append(_paint(_cell(res).ljust(widths[c]), res.status, colour))
            lines.append(r.name.ljust(first) + "  " + "  ".join(cells))
        failures = [(r.name, c, res) for r in report.ops for c, res in r.checks.items()
                    if res.failed]
        if failures:
            lines.append("")
            lines.append("failures:")
            for name, c, res in failures:
                where = f" on {res.sample}" if res.sample else ""
                lines.append(f"  {name} [{c}]{where}: {res.detail}")
        conventions = sorted({f"{r.name}: {', '.join(res.conventions)}" for r in report.ops
                              for res in r.checks.values() if res.conventions})
        if conventions:
            lines.append("")
            lines.append("conventions that held at kinks: " + "; ".join(conventions))
        reasons = report.na_reasons()
        if reasons:
            lines.append("")
            lines.append("n/a: " + "; ".join(f"{reason} ({k})" for reason, k in reasons.items()))
    if report.model is not None:
        lines.append("")
        lines.append(render_model(report.model, colour))
    lines.append("")
    lines.append(_paint(report.summary(), PASS if report.ok else FAIL, colour))
    return "\n".join(lines)


def render_model(model: ModelReport, colour: bool = False) -> str:
    """The model report: facts, then one line per check with its detail."""
    lines = [model.title]
    for key, value in model.facts.items():
        lines.append(f"  {key}: {value}")
    width = max((len(c) for c in model.checks), default=0)
    for name, res in model.checks.items():
        status = _paint(res.status.ljust(4), res.status, colour)
        lines.append(f"  {status}  {name.ljust(width)}  {res.detail}")
    return "\n".join(lines)
