"""Shared fixtures: every test gets its own DuckDB file under tmp_path, and its own system
temporary directory (``tempfile`` and ``$TMPDIR`` of child processes point into it), so that no
test writes outside its own folder and a test can check what was left there."""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(autouse=True)
def own_tempdir(tmp_path_factory, monkeypatch):
    """A fresh folder as the system temporary directory of this test (and of what it starts)."""
    folder = tmp_path_factory.mktemp("systmp")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "runs.duckdb"
    monkeypatch.setenv("MOEPROXY_DB", str(path))
    return path
