"""The op registry as a Markdown table (``torchlean ops``, ``docs/OPS.md``).

One row per primitive: its signature, how its derivatives are declared, its documented semantics
and the module of its reference definition ("none" where it has none).
"""

from __future__ import annotations

from ..core.registry import REGISTRY, kind_of
from .defs import SPECS


def markdown_table() -> str:
    """Every registered primitive as a Markdown table (sorted by name)."""
    rows = ["| op | signature | derivatives | semantics | spec |", "|---|---|---|---|---|"]
    for name in sorted(REGISTRY):
        prim = REGISTRY[name]
        signature = ", ".join(prim.inputs + tuple(prim.attrs))
        semantics = " ".join(prim.semantics.split()).replace("|", "\\|")
        entry = SPECS.get(name)
        spec = "none" if entry is None else f"`{entry.fn.__module__}`"
        rows.append(f"| `{name}` | `{name}({signature})` | {kind_of(prim)} | {semantics} | "
                    f"{spec} |")
    return "\n".join(rows)
