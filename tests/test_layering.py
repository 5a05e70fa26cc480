"""Arrows point down (shared/DESIGN.md, Layout): nothing under moeproxy/ imports the dashboard, and
ingest and diagnose do not import torch. Imports are read with ``ast`` (every ``import``/``from``
at any depth, and ``importlib.import_module``/``__import__`` with a literal name), not grepped."""

from __future__ import annotations

import ast
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
