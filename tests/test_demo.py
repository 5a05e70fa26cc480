"""Demo runs: loaded once into an empty store, diagnosed; manifest or naming convention."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "dashboard"))
from synthetic_runs import write_demo_dir  # noqa: E402

from moeproxy.demo import DEMO_DIR, demo_runs, load_demo
from moeproxy.errors import InputError, NotFound
from moeproxy.store import Store


def test_load_demo_into_an_empty_store_only(tmp_path):
    store = Store(":memory:")
    result = load_demo(store, write_demo_dir(tmp_path / "demo"))
    assert result.loaded == ["demo-full", "demo-proxy"] and not result.warnings
    runs = store.runs().set_index("run")
    assert runs.loc["demo-proxy", "proxy_of"] == "demo-full" and runs.loc["demo-full", "role"] == "full"
    assert store.findings("demo-full")["verdict"] == runs.loc["demo-full", "verdict"]
    again = load_demo(store, tmp_path / "demo")
    assert again.loaded == [] and "already has runs" in again.skipped_reason


def test_naming_convention_without_manifest(tmp_path):
    demo = write_demo_dir(tmp_path / "demo")
    (demo / "manifest.json").unlink()
    shutil.move(demo / "full.jsonl", demo / "grpo-full.jsonl")
    shutil.move(demo / "proxy.jsonl", demo / "grpo-proxy.jsonl")
    runs = demo_runs(demo)
    assert [(r.name, r.role, r.proxy_of) for r in runs] == [("grpo-full", "full", None),
                                                          ("grpo-proxy", "proxy", "grpo-full")]


def test_bad_demo_directories(tmp_path):
    with pytest.raises(NotFound):
        demo_runs(tmp_path / "missing")
    (tmp_path / "manifest.json").write_text("{\"runs\": 3}")
    with pytest.raises(InputError, match="manifest.json"):
        demo_runs(tmp_path)
    assert load_demo(Store(":memory:"), tmp_path / "missing").skipped_reason.startswith("no demo data")


@pytest.mark.skipif(not (DEMO_DIR.is_dir() and demo_runs(DEMO_DIR)), reason="no demo runs in data/demo/ yet")
def test_bundled_demo_loads(tmp_path):
    store = Store(":memory:")
    result = load_demo(store)
    assert result.loaded and not result.warnings
    assert (store.runs()["role"] == "proxy").any()
