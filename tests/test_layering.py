"""Arrows point down (shared/DESIGN.md, Layout): nothing under moeproxy/ imports the dashboard, and
ingest and diagnose do not import torch. Imports are read with ``ast`` (every ``import``/``from``
at any depth, and ``importlib.import_module``/``__import__`` with a literal name), not grepped."""

from __future__ import annotations

import ast

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(source: str) -> set[str]:
    """Top-level package names a module's source imports, wherever the import statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.add(node.args[0].value.split(".")[0])
    return found


def offenders(folder: str, forbidden: str) -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / folder).rglob("*.py")
                  if forbidden in imported_modules(path.read_text(encoding="utf-8")))


def test_the_scanner_sees_every_spelling_of_an_import():
    for source in ("import dashboard", "import dashboard.figures as f", "from dashboard.queries import runs",
                   "def f():\n    from dashboard import queries", "import importlib\nimportlib.import_module('dashboard.x')",
                   "__import__('dashboard')"):
        assert "dashboard" in imported_modules(source), source
    for source in ("from . import dashboard", "from .dashboard import x", "x = 'import dashboard'",
                   "import dashboards"):
        assert "dashboard" not in imported_modules(source), source


def test_the_library_never_imports_the_dashboard():
    assert offenders("moeproxy", "dashboard") == []


def test_ingest_and_diagnose_do_not_import_torch():
    assert offenders("moeproxy/ingest", "torch") == []
    assert offenders("moeproxy/diagnose", "torch") == []


def _module_graph() -> dict[str, set[str]]:
    """moeproxy module -> the moeproxy modules it imports (anywhere in its source). ``from pkg import
    name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``."""
    package = ROOT / "moeproxy"
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path

    def owner(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            if ".".join(parts) in modules:
                return ".".join(parts)
            parts = parts[:-1]
        return None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in modules else base)
            for target in targets:
                if target.startswith("moeproxy"):
                    found = owner(target)
                    if found and found != name:
                        edges.add(found)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_import_graph_has_no_circles():
    """No module imports, however lazily, one that imports it back (issue "one home for each rule"):
    the diagnosis's registries sit below the detectors and ``catalog`` above them; the proxy's
    feature types sit below both feature methods."""
    assert _cycles(_module_graph()) == []


# The rooms of the package from the ground floor up (shared/DESIGN.md, Layout): a module imports only
# from its own floor or the floors below it (rooms on one floor may use each other: the circle test
# above keeps that acyclic). A new module gets its floor here (an unknown room fails).
FLOORS = (
    ("errors", "vocabulary", "columns", "units", "terminal", "registry", "contracts", "lazy", "json_lines", "pids",
     "outputs", "devices"),
    ("ingest", "store"),
    ("diagnose", "allowed_paths"),
    ("fidelity", "fidelity_grid", "watch", "sparklines", "figures", "proxy", "reference"),
    ("jobs", "repro", "report", "demo"),
    ("commands",),
    ("cli", "__main__", "moeproxy"),
)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_import_goes_down_the_floors_or_stays_in_its_room():
    floor = {room: k for k, rooms in enumerate(FLOORS) for room in rooms}
    graph = _module_graph()
    unknown = sorted({_room(m) for m in graph} - set(floor))
    assert not unknown, f"modules with no floor in FLOORS: {unknown}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if floor[_room(b)] > floor[_room(a)])
    assert not upward, upward


def test_the_floor_check_sees_an_import_that_goes_up(tmp_path, monkeypatch):
    """The check itself: a module of ingest that imported the watcher would be named."""
    copy = tmp_path / "moeproxy"
    (copy / "ingest").mkdir(parents=True)
    (copy / "watch").mkdir()
    (copy / "__init__.py").write_text("")
    (copy / "ingest" / "__init__.py").write_text("")
    (copy / "watch" / "__init__.py").write_text("")
    (copy / "watch" / "follow.py").write_text("")
    (copy / "ingest" / "text.py").write_text("from moeproxy.watch.follow import x\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)  # the graph is read from the tiny package
    with pytest.raises(AssertionError, match="moeproxy.ingest.text -> moeproxy.watch.follow"):
        test_every_import_goes_down_the_floors_or_stays_in_its_room()
