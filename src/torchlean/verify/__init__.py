"""``torchlean.verify``: evidence anyone can rerun that each primitive's kernels and derivative
rules match its reference specification, and that a model's compiled graph is the network that
runs.

``check_ops(names=None, quick=False, seed=0) -> Report`` checks registered primitives, one column
per kind of evidence (``report.COLUMNS``); ``check_model(...)`` checks a model's loss graph on a
real batch. ``torchlean verify`` is the command-line front end (``verify.cli``). This is
evidence, not proof: floating-point kernels are compared with a spec on samples, and sympy and
``fractions.Fraction`` are trusted.
"""

from __future__ import annotations

from .checks import Settings, VerifyError, check_op, check_ops, require_sympy
from .differences import INTENDED_DIFFERENCES, KINKS, IntendedDifference, torch_skips
from .model import check_model
from .numeric import Mismatch
from .report import COLUMNS, CheckResult, ModelReport, OpResult, Report, render_table

__all__ = [
    "COLUMNS", "CheckResult", "INTENDED_DIFFERENCES", "IntendedDifference", "KINKS", "Mismatch",
    "ModelReport", "OpResult", "Report", "Settings", "VerifyError", "check_model", "check_op",
    "check_ops", "render_table", "require_sympy", "torch_skips",
]
