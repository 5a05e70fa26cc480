"""Shared fixtures: every test gets its own DuckDB file under tmp_path."""

from __future__ import annotations

import pytest


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "runs.duckdb"
    monkeypatch.setenv("MOEPROXY_DB", str(path))
    return path
