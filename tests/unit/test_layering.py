"""The shape of the code: the import graph has no cycle and no upward arrow, and modules and
functions stay small (STYLE.md). Imports are read from the source (module level and inside
functions alike), so a lazy import counts as an arrow too.

Layers, lowest first: ringleader (the shared vocabulary) < coordinator, worker < dashboard
< ringleader.app (the entry points), which alone may import everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ringleader", "coordinator", "worker", "dashboard")
GENERATED = ROOT / "ringleader" / "v1"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 60

# What each layer may import (besides itself).
ALLOWED = {
    "ringleader": set(),
    "coordinator": {"ringleader"},
    "worker": {"ringleader"},
    "dashboard": {"ringleader", "coordinator"},
    "ringleader.app": {"ringleader", "coordinator", "worker", "dashboard"},
}


def layer(module: str) -> str:
    if module.startswith("ringleader.app") or module == "ringleader.__main__":  # entry points
        return "ringleader.app"
    return module.split(".")[0]


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if GENERATED in path.parents:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(path: Path, known: set[str]) -> set[str]:
    """Project modules imported anywhere in the file (the longest known prefix of each name)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            for i in range(len(parts), 0, -1):
                candidate = ".".join(parts[:i])
                if candidate in known:
                    found.add(candidate)
                    break
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    # A package's __init__ is not an arrow target of its own modules' imports of siblings.
    return {m: {d for d in imports(p, known) if d != m and not m.startswith(d + ".")} for m, p in mods.items()}


def test_no_module_imports_a_higher_layer():
    upward = []
    for mod, deps in graph().items():
        for dep in deps:
            if layer(dep) != layer(mod) and layer(dep) not in ALLOWED[layer(mod)]:
                upward.append(f"{mod} -> {dep}")
    assert not upward, upward


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(g.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep] if dep in path else [node, dep])
            elif not state.get(dep):
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(g):
        if not state.get(node):
            visit(node, [node])
    assert not cycles, cycles


def test_the_vocabulary_and_the_cli_do_not_import_torch():
    torch_users = {m for m, p in modules().items() if "torch" in {
        (a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
        for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])}}
    assert all(layer(m) == "worker" for m in torch_users), sorted(torch_users)


def test_modules_and_functions_stay_small():
    big, long = [], []
    for mod, path in modules().items():
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            big.append(f"{mod}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{mod}.{node.name}: {n} lines")
    assert not big and not long, big + long


def test_a_client_command_runs_without_importing_torch():
    """`ringleader jobs` (here against a coordinator that is not there) loads no torch."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ringleader", "--coordinator", "127.0.0.1:1",
                          "jobs"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "unavailable" in out.stderr, out.stderr[-500:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "grpc" in imported and not any(m.split(".")[0] == "torch" for m in imported)
