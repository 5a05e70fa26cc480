"""What "live" means lives in the store (``Store.live_runs``), not in a dashboard page: a run a
watcher stored rows of within the last ``LIVE_SECONDS`` is live; an ingested run never is."""

from __future__ import annotations

import time

from moeproxy.ingest import ingest_paths
from moeproxy.store import Store
from moeproxy.watch import WatchConfig, Watcher


def test_a_watched_run_is_live_and_an_ingested_one_is_not(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    log = tmp_path / "watched.jsonl"
    log.write_text("".join(f'{{"step": {s}, "loss": {2 - s / 100}}}\n' for s in range(1, 6)))
    Watcher(WatchConfig(paths=[str(log)], run="watched"), store).run(once=True)
    other = tmp_path / "other.jsonl"
    other.write_text(log.read_text())
    ingest_paths(store, [other], run="ingested")
    assert store.live_runs() == frozenset({"watched"})
    time.sleep(0.05)
    assert store.live_runs(seconds=0.01) == frozenset()  # not live once the window has passed
