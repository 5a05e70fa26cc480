"""The DuckDB run store: path resolution, concurrency between processes, roles, deletion, export."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from moeproxy.errors import NotFound, StoreBusy
from moeproxy.ingest import ingest_paths
from moeproxy.store import Store, default_db_path

LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_db_path_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPROXY_DB", str(tmp_path / "env.duckdb"))
    assert default_db_path() == tmp_path / "env.duckdb"
    assert Store().path == tmp_path / "env.duckdb"
    assert Store(tmp_path / "x.duckdb").path == tmp_path / "x.duckdb"
    monkeypatch.delenv("MOEPROXY_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "moeproxy" / "runs.duckdb"


def _hold_open(db: Path, seconds: float) -> subprocess.Popen:
    """Another process that opens the database and keeps a write transaction open."""
    code = textwrap.dedent(f"""
        import sys, time
        from moeproxy.store import Store
        from moeproxy.ingest import ingest_paths
        store = Store({str(db)!r})
        with store.write() as tx:
            tx.ensure_run("half", "other", None, "x", "x")
            print("holding", flush=True)
            time.sleep({seconds})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_second_writer_gets_a_clear_message_and_the_file_stays_sound(tmp_path):
    db = tmp_path / "runs.duckdb"
    ingest_paths(Store(db), [LOGS / "megatron.log"], run="m")
    holder = _hold_open(db, 4)
    try:
        with pytest.raises(StoreBusy, match=rf"{db.name} is in use by process {holder.pid}"):
            ingest_paths(Store(db, lock_timeout=0.5), [LOGS / "verl_file.jsonl"], run="v")
    finally:
        holder.wait(timeout=30)
    store = Store(db)
    assert set(store.runs()["run"]) == {"m", "half"}  # the holder committed; the refused writer wrote nothing


def test_a_reader_waits_for_the_writer_and_never_sees_half_a_run(tmp_path):
    db = tmp_path / "runs.duckdb"
    Store(db).runs()
    holder = _hold_open(db, 1.5)
    try:
        started = time.monotonic()
        runs = Store(db, lock_timeout=20).runs()  # waits for the lock, then sees the committed state
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=30)
    assert list(runs["run"]) == ["half"]
    assert waited > 0.5


def test_unknown_run_lists_the_known_ones(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="m")
    with pytest.raises(NotFound, match="runs in .*: m"):
        store.run_frame("nope")


def test_roles_proxy_link_and_delete(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="full", role="full")
    ingest_paths(store, [LOGS / "mindspeed_llm.log"], run="small", role="proxy", proxy_of="full")
    runs = store.runs().set_index("run")
    assert runs.loc["small", "proxy_of"] == "full" and runs.loc["full", "role"] == "full"
    store.save_findings("full", {"verdict": "overflow", "onset_step": 5, "findings": []}, "test-1")
    assert store.runs().set_index("run").loc["full", "verdict"] == "overflow"
    assert store.findings("full")["detector_version"] == "test-1"
    version = store.data_version()
    store.delete_run("full")
    assert store.data_version() == version + 1
    runs = store.runs().set_index("run")
    assert list(runs.index) == ["small"] and pd.isna(runs.loc["small", "proxy_of"])
    with store.read() as con:
        assert con.execute("SELECT count(*) FROM scalars WHERE run_id NOT IN (SELECT run_id FROM runs)").fetchall() == [(0,)]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_export_keeps_every_attempt_and_the_original_names(tmp_path, suffix):
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="m")
    target = tmp_path / f"m{suffix}"
    rows = store.export("m", target)
    frame = pd.read_csv(target) if suffix == ".csv" else pd.read_parquet(target)
    assert len(frame) == rows == store.runs().set_index("run").loc["m", "rows"]
    assert set(frame["attempt"]) == {0, 1}
    gn = frame[frame["metric"] == "grad_norm"]
    assert set(gn["original"]) == {"grad norm"}
    assert (gn["value"] == float("inf")).sum() == 1


def test_memory_store_is_private(tmp_path):
    a, b = Store(":memory:"), Store(":memory:")
    ingest_paths(a, [LOGS / "megatron.log"], run="m")
    assert list(a.runs()["run"]) == ["m"] and b.runs().empty
