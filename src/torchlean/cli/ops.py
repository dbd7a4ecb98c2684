"""``torchlean ops``: the op registry as a Markdown table (what ``docs/OPS.md`` holds)."""

from __future__ import annotations

import argparse
from typing import Any

from ..spec.table import markdown_table


def add_parser(sub: Any) -> None:
    sub.add_parser("ops", help="list every primitive op with its signature and semantics",
                   description="Print the op registry as a Markdown table (one row per "
                               "primitive: signature, how its derivatives are declared, "
                               "documented semantics, reference definition).")


def run(args: argparse.Namespace) -> int:
    print(markdown_table())
    return 0
