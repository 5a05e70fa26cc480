"""Diagnose and record (moeproxy.diagnose.record): the one call the CLI, the pages, the demo and the
repro harness use; stored findings carry the detector version and are redone when stale."""

from __future__ import annotations

from pathlib import Path

from moeproxy.diagnose import DETECTOR_VERSION
from moeproxy.diagnose.record import (diagnose_and_record, diagnose_and_record_all, diagnose_target,
                                      findings_are_stale)
from moeproxy.ingest import ingest_paths
from moeproxy.store import Store

FIXTURES = Path(__file__).parent / "fixtures"


def stored_run(db: Path) -> Store:
    store = Store(db)
    ingest_paths(store, [FIXTURES / "megatron_divergence_then_nan.log"], run="full-run")
    return store


def test_a_stored_run_is_diagnosed_and_recorded_with_the_detector_version(tmp_path):
    store = stored_run(tmp_path / "runs.duckdb")
    assert findings_are_stale(store.findings("full-run"))  # none yet
    result = diagnose_and_record(store, "full-run")
    assert (result["verdict"], result["onset_step"]) == ("divergence", 160)
    saved = store.findings("full-run")
    assert saved["detector_version"] == DETECTOR_VERSION and saved["verdict"] == "divergence"
    assert not findings_are_stale(saved)


def test_only_stale_findings_are_redone(tmp_path):
    store = stored_run(tmp_path / "runs.duckdb")
    planted = {"verdict": "healthy", "onset_step": None, "confidence": "low", "findings": []}
    store.save_findings("full-run", planted, "diagnose-0.1")
    assert findings_are_stale(store.findings("full-run"))
    assert diagnose_and_record(store, "full-run", only_if_stale=True)["verdict"] == "divergence"  # redone
    store.save_findings("full-run", planted, DETECTOR_VERSION)  # current: kept as they are
    assert diagnose_and_record(store, "full-run", only_if_stale=True)["verdict"] == "healthy"
    assert diagnose_and_record(store, "full-run")["verdict"] == "divergence"  # unless asked


def test_recording_many_runs_names_those_that_failed(tmp_path):
    store = stored_run(tmp_path / "runs.duckdb")
    failures = diagnose_and_record_all(store, ["full-run", "not-stored"])
    assert list(failures) == ["not-stored"] and failures["not-stored"].startswith("NotFound: no run named")
    assert store.findings("full-run")["verdict"] == "divergence"


def test_a_log_path_is_diagnosed_without_touching_the_database(tmp_path):
    db = tmp_path / "runs.duckdb"
    name, result, recorded = diagnose_target(str(FIXTURES / "megatron_divergence_then_nan.log"), str(db))
    assert (result["verdict"], result["onset_step"], recorded) == ("divergence", 160, False)
    assert name == "megatron_divergence_then_nan.log" and not db.exists()
    stored_run(db)
    name, result, recorded = diagnose_target("full-run", str(db))
    assert (name, result["verdict"], recorded) == ("full-run", "divergence", True)
    assert Store(db).findings("full-run")["detector_version"] == DETECTOR_VERSION
