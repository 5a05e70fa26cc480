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


def test_ingest_with_diagnose_records_each_new_run_and_prints_its_verdict(tmp_path, capsys):
    import json

    from moeproxy.cli import main

    db = tmp_path / "runs.duckdb"
    log = FIXTURES / "megatron_divergence_then_nan.log"
    assert main(["ingest", "--diagnose", "--run", "full-run", "--db", str(db), str(log)]) == 0
    assert "full-run: divergence from step 160" in capsys.readouterr().out
    saved = Store(db).findings("full-run")
    assert saved["verdict"] == "divergence" and saved["detector_version"] == DETECTOR_VERSION
    # the JSON form carries the diagnosis beside the file's summary
    assert main(["ingest", "--diagnose", "--json", "--run", "second", "--db", str(db),
                 str(FIXTURES / "verl_console_nan.log")]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["diagnosis"]["verdict"] == "overflow"
    # a file already stored (a duplicate) has no new data: nothing to diagnose, nothing printed for it
    assert main(["ingest", "--diagnose", "--run", "again", "--db", str(db), str(log)]) == 0
    assert "again:" not in capsys.readouterr().out
    # the onset in the log's other counters too, as `moeproxy diagnose` prints it (a Stable-Baselines3
    # table's rollout step beside its environment steps)
    rows = "".join(f"{i},{500 * i},{200.0 - (180.0 if i > 30 else 0.0) + (i % 3)}\n" for i in range(1, 61))
    table = tmp_path / "progress.csv"
    table.write_text("time/iterations,time/total_timesteps,rollout/ep_rew_mean\n" + rows)
    assert main(["ingest", "--diagnose", "--run", "sb3", "--db", str(db), str(table)]) == 0
    assert "sb3: reward_collapse from step 31 (time/total_timesteps 15500)" in capsys.readouterr().out
    # without --diagnose nothing is recorded
    assert main(["ingest", "--run", "third", "--db", str(db), str(FIXTURES / "megatron_fp16_warmup_healthy.log")]) == 0
    capsys.readouterr()
    assert Store(db).findings("third") is None


def test_the_fidelity_comparison_reads_the_recorded_findings(tmp_path):
    from moeproxy.fidelity import compare_runs

    store = stored_run(tmp_path / "runs.duckdb")
    ingest_paths(store, [FIXTURES / "megatron_fp16_warmup_healthy.log"], run="proxy-run")
    # findings recorded by the current detector are what the comparison shows (not diagnosed again)
    planted = {"verdict": "overflow", "onset_step": 170, "confidence": "high", "findings": []}
    store.save_findings("proxy-run", planted, DETECTOR_VERSION)
    out = compare_runs(store, "full-run", "proxy-run")
    assert out["proxy"]["verdict"] == "overflow" and out["full"]["verdict"] == "divergence"
    assert store.findings("full-run")["verdict"] == "divergence"  # missing ones were recorded on the way
