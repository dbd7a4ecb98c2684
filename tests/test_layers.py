"""The import contract: torchlean is layered, imports only go down, and nothing imports the CLI.

Read from the source with ``ast`` (so imports inside functions count too): every module is given
the layer of its folder; a module may import modules of its own layer or of lower ones, never a
higher one; the module graph has no cycles; the only imports inside functions are of optional
third-party libraries; ``torchlean.cli`` is imported by nothing but ``__main__``; and importing
``torchlean`` changes no process-wide state (malloc) and does not load the command line.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "torchlean"

# Lower number = lower layer. A module's layer is that of the longest matching prefix.
LAYERS: dict[str, int] = {
    "torchlean.core": 0, "torchlean.cuda": 0,
    "torchlean.ops": 1,
    "torchlean.engine": 2,
    "torchlean.nn": 3, "torchlean.optim": 3, "torchlean.checkpoint": 3, "torchlean.data": 3,
    "torchlean.utils": 3,
    "torchlean.training": 4, "torchlean.train": 4,
    # The package root re-exports layers 0-4 and imports the rest lazily (by name, on access).
    "torchlean": 4,
    "torchlean.spec": 5, "torchlean.verify": 5, "torchlean.bounds": 5, "torchlean.onnx": 5,
    "torchlean.attack": 5, "torchlean.zoo": 5, "torchlean.vnn": 5,
    "torchlean.cli": 6, "torchlean.bench": 6, "torchlean.__main__": 6,
}
# Deprecated shims of the old flat layout: each forwards one old path to its new module.
SHIMS = {"torchlean.functional", "torchlean.errors", "torchlean.shape", "torchlean.backend",
         "torchlean.generators", "torchlean.autodiff", "torchlean.tape", "torchlean.graph",
         "torchlean.transforms", "torchlean.tensor", "torchlean.session", "torchlean.params",
         "torchlean.anomaly", "torchlean.distributed", "torchlean.models", "torchlean.datasets",
         "torchlean.ops.registry", "torchlean.ops.attr_kinds"}
# Third-party libraries that are optional extras (or peers) and so may be imported late.
OPTIONAL = {"onnx", "onnxruntime", "cupy", "cupyx", "mpi4py", "sympy", "tqdm", "matplotlib",
            "scipy", "safetensors", "sklearn", "threadpoolctl", "torch", "jax", "jaxlib",
            "autograd", "array_api_strict", "numba"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS[best]


def _resolve(importer: str, is_pkg: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The torchlean modules an import statement names (``from a import b``: ``a.b`` if it is a
    module, else ``a``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = importer.split(".") if is_pkg else importer.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                 for a in node.names]
    out = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES:
            out.append(name)
    return out


def _imports() -> list[tuple[str, str, bool, int]]:
    """(importer, imported, inside a function, line) for every torchlean import."""
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"

        def visit(node: ast.AST, in_function: bool, name: str = name, is_pkg: bool = is_pkg
                  ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target in _resolve(name, is_pkg, child):
                        if target != name:
                            found.append((name, target, in_function, child.lineno))
                visit(child, in_function or isinstance(child, ast.FunctionDef
                                                       | ast.AsyncFunctionDef))

        visit(tree, False)
    return found


IMPORTS = _imports()


def test_every_module_has_a_layer_and_the_layers_cover_the_package() -> None:
    assert "torchlean.core.registry" in MODULES and "torchlean.cli" in MODULES
    for name in MODULES:
        _layer(name)  # raises if no prefix matches


def test_imports_only_go_down() -> None:
    upward = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)}) at line {line}"
              for a, b, _, line in IMPORTS if a not in SHIMS and _layer(b) > _layer(a)]
    assert not upward, "\n".join(upward)


def test_nothing_imports_the_command_line() -> None:
    bad = [f"{a}:{line}" for a, b, _, line in IMPORTS
           if (b == "torchlean.cli" or b.startswith("torchlean.cli."))
           and not (a == "torchlean.cli" or a.startswith("torchlean.cli."))
           and a != "torchlean.__main__"]
    assert not bad, bad


def test_no_torchlean_imports_inside_functions() -> None:
    late = [f"{a}:{line} imports {b}" for a, b, inside, line in IMPORTS if inside]
    assert not late, "\n".join(late)


def test_only_optional_libraries_are_imported_inside_functions() -> None:
    late = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    roots = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    roots = [(node.module or "").split(".")[0]]
                else:
                    continue
                late += [f"{name}:{node.lineno} imports {r}" for r in roots
                         if r not in OPTIONAL]
    assert not late, "\n".join(late)


def test_the_module_graph_has_no_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, _, _ in IMPORTS:
        if a not in SHIMS:
            graph[a].add(b)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                cycle = visit(n)
                if cycle:
                    return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, " -> ".join(cycle)


def test_the_checker_sees_a_planted_upward_import_inside_a_function(tmp_path: Path) -> None:
    code = "def f():\n    from ..cli import main\n    return main\n"
    tree = ast.parse(code)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _resolve("torchlean.core.shape", False, node) == ["torchlean.cli"]


@pytest.mark.parametrize("env", [{}, {"TORCHLEAN_MALLOPT": "1"}])
def test_import_torchlean_has_no_process_wide_side_effects(env: dict[str, str]) -> None:
    import os

    code = ("import json, sys, torchlean, torchlean.core.alloc as a; "
            "print(json.dumps({'malloc': a.applied, 'cli': 'torchlean.cli' in sys.modules, "
            "'argparse': 'argparse' in sys.modules, 'onnx': 'torchlean.onnx' in sys.modules}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    got = json.loads(proc.stdout)
    assert got == {"malloc": {}, "cli": False, "argparse": False, "onnx": False}


def test_lazy_subpackages_are_attributes_after_import_torchlean() -> None:
    code = ("import torchlean as tl; "
            "print(tl.onnx.load.__module__, tl.bounds.compute_bounds.__module__, "
            "tl.verify.check_ops.__module__, tl.distributed.__name__, tl.cuda.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.split() == ["torchlean.onnx", "torchlean.bounds",
                                   "torchlean.verify.checks", "torchlean.training.distributed",
                                   "torchlean.cuda"]
