"""The shape of the code: the import graph has no cycle and no upward arrow, between packages
and between the coordinator's subpackages; a class lives in one file; functions stay short and
modules under a generous ceiling (STYLE.md: small because each has one role, not because of a
line cap). Imports are read from the source (module level and inside functions alike), so a lazy
import counts as an arrow too.

Layers, lowest first: ringleader (the shared vocabulary) < coordinator, worker < dashboard
< ringleader_app (the entry points), which alone may import everything; every package of the
tree has its row. Inside the coordinator (DESIGN.md: one subpackage per role): store < health <
core < shell (the core's async shell) < edge, as SUBLAYERS states. The one module of the vocabulary package that imports the entry
points is ringleader/__main__.py, which `python -m ringleader` needs there and nothing imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ringleader", "coordinator", "worker", "dashboard", "ringleader_app")
GENERATED = ROOT / "ringleader" / "v1"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 60  # a ceiling for outliers, not a design target

# What each layer may import (besides itself).
ALLOWED = {
    "ringleader": set(),
    "coordinator": {"ringleader"},
    "worker": {"ringleader"},
    "dashboard": {"ringleader", "coordinator"},
    "ringleader_app": {"ringleader", "coordinator", "worker", "dashboard"},  # the entry points
}


# The coordinator's roles, and which other roles each may import (DESIGN.md, docs/architecture.md).
SUBLAYERS = {
    "coordinator.store": set(),  # persistence: the contract (api.py) and its implementations
    "coordinator.health": {"coordinator.store"},  # verdicts, baselines, planners: pure or store-backed
    "coordinator.core": {"coordinator.store", "coordinator.health"},  # the reactor and its state
    "coordinator.shell": {"coordinator.store", "coordinator.health", "coordinator.core"},  # the core's async shell
    "coordinator.edge": {"coordinator.store", "coordinator.health", "coordinator.core", "coordinator.shell"},  # transport, trust, metrics
}

# Classes whose implementation is inherited from a concrete class of another file (mixins, or a
# store built on another store): the shape a class in one file replaces. The list only shrinks: a
# new split fails, and so does an entry whose split is gone (remove it then).
KNOWN_SPLITS = {
    "coordinator.store.sqlite.SqliteJobStore": {"coordinator.store.sqlite_health.SqliteBaselines",
                                                "coordinator.store.sqlite_health.SqliteWorkerHealth",
                                                "coordinator.store.sqlite_health.SqliteCredentials",
                                                "coordinator.store.sqlite_trends.SqliteTrends"},
    "coordinator.store.postgres_record.PostgresRecord": {"coordinator.store.sqlite.SqliteJobStore"},
    "coordinator.store.behind.WriteBehindStore": {"coordinator.store.behind_fleet.BehindFleet",
                                                  "coordinator.store.behind_trends.BehindTrends",
                                                  "coordinator.store.memory.MemoryJobStore"},
    "coordinator.store.postgres.PostgresJobStore": {"coordinator.store.behind.WriteBehindStore"},
    "coordinator.store.memory.MemoryJobStore": {"coordinator.store.trends.MemoryTrends"},
}


def role(module: str) -> str:
    """The coordinator subpackage a module belongs to, or '' outside them."""
    parts = module.split(".")
    name = ".".join(parts[:2])
    return name if name in SUBLAYERS else ""


def upward_role_arrows(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{mod} -> {dep}" for mod, deps in g.items() for dep in deps
                  if role(mod) and role(dep) and role(dep) != role(mod) and role(dep) not in SUBLAYERS[role(mod)])


def layer(module: str) -> str:
    if module == "ringleader.__main__":  # `python -m ringleader`: an entry point
        return "ringleader_app"
    return module.split(".")[0]


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    out = {}
    for pkg in packages:
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


def graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    mods = modules(packages)
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


def test_every_package_of_the_tree_has_a_layer():
    """A package added at the top of the tree is checked too (bench, tests and scripts are not
    packages of the product)."""
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in ("bench", "tests")}
    assert tops == set(PACKAGES) == set(ALLOWED)


def test_the_vocabulary_imports_no_other_package():
    """Only its `python -m` entry (layer() says why) reaches above it."""
    g = graph()
    assert not sorted(f"{m} -> {d}" for m, deps in g.items() for d in deps
                      if m.split(".")[0] == "ringleader" and m != "ringleader.__main__"
                      and d.split(".")[0] != "ringleader")


def test_no_coordinator_role_imports_a_higher_one():
    assert not upward_role_arrows(graph())


def test_the_role_rule_catches_an_upward_arrow():
    g = {"coordinator.health.verdicts": {"coordinator.edge.hop", "coordinator.store.api"},
         "coordinator.core.control": {"coordinator.health.verdicts"}}
    assert upward_role_arrows(g) == ["coordinator.health.verdicts -> coordinator.edge.hop"]


def test_every_coordinator_subpackage_has_a_row():
    subpackages = {f"coordinator.{p.name}" for p in (ROOT / "coordinator").iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(SUBLAYERS)


def split_classes() -> dict[str, set[str]]:
    """Each class whose base is a concrete class of another project module: {class: {bases}}.
    Abstract contracts (ABC, Protocol, abstract methods) and errors are not splits."""
    trees = {m: ast.parse(p.read_text()) for m, p in modules().items()}
    classes = {(m, n.name): n for m, tree in trees.items() for n in tree.body if isinstance(n, ast.ClassDef)}

    def abstract(node: ast.ClassDef) -> bool:
        bases = [ast.unparse(b) for b in node.bases] + [ast.unparse(k.value) for k in node.keywords]
        if node.name.endswith("Error") or any(b.split(".")[-1] in ("ABC", "ABCMeta", "Protocol", "Exception")
                                              or b.endswith("Error") for b in bases):
            return True
        return any(ast.unparse(d).split(".")[-1] == "abstractmethod" for f in node.body
                   if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in f.decorator_list)

    out: dict[str, set[str]] = {}
    for mod, tree in trees.items():
        imported = {(a.asname or a.name): (n.module, a.name) for n in tree.body
                    if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 for a in n.names}
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                key = imported.get(base.id) if isinstance(base, ast.Name) else None
                if key and key in classes and key[0] != mod and not abstract(classes[key]):
                    out.setdefault(f"{mod}.{node.name}", set()).add(".".join(key))
    return out


def test_a_class_lives_in_one_file():
    splits = split_classes()
    new = {c: b - KNOWN_SPLITS.get(c, set()) for c, b in splits.items() if b - KNOWN_SPLITS.get(c, set())}
    assert not new, f"compose parts that own their state instead of inheriting from another file: {new}"


def test_known_splits_only_shrink():
    splits = split_classes()
    gone = {c: b - splits.get(c, set()) for c, b in KNOWN_SPLITS.items() if b - splits.get(c, set())}
    assert not gone, f"these splits are gone: remove them from KNOWN_SPLITS: {gone}"


@pytest.mark.parametrize("packages", [PACKAGES, PACKAGES + ("bench",)], ids=["house", "with-bench"])
def test_the_import_graph_has_no_cycle(packages):
    g = graph(packages)
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
