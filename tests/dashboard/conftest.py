"""Dashboard test fixtures: a store filled from synthetic demo logs, fresh Streamlit caches, AppTest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_runs import write_demo_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "dashboard" / "app.py"


@pytest.fixture(autouse=True)
def _fresh_streamlit_caches():
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    yield


@pytest.fixture
def demo_dir(tmp_path) -> Path:
    return write_demo_dir(tmp_path / "demo")


@pytest.fixture
def app_env(tmp_path, monkeypatch, demo_dir):
    """Environment of a dashboard on an empty store that will load the synthetic demo runs."""
    monkeypatch.setenv("MOEPROXY_DB", str(tmp_path / "runs.duckdb"))
    monkeypatch.setenv("MOEPROXY_DEMO_DIR", str(demo_dir))
    monkeypatch.setenv("MOEPROXY_JOBS", str(tmp_path / "jobs"))
    monkeypatch.setenv("MOEPROXY_ALLOWED_ROOTS", f"{tmp_path}:{REPO / 'data'}")
    return tmp_path


@pytest.fixture
def app(app_env):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at
