"""`moeproxy diagnose`: log paths (temporary in-memory store), stored runs (findings saved)."""

from __future__ import annotations

import json
from pathlib import Path

from moeproxy.cli import main
from moeproxy.diagnose import DETECTOR_VERSION

FIXTURES = Path(__file__).parent / "fixtures"
LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def test_file_target_json_contract_and_nothing_written(tmp_path, capsys, db_path):
    rc = main(["diagnose", str(FIXTURES / "verl_console_nan.log"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["verdict"] == "overflow" and out["onset_step"] == 9
    assert set(out) == {"verdict", "onset_step", "confidence", "confidence_reason", "confidence_basis", "verdict_basis", "alternatives", "findings", "config", "data"}
    assert out["confidence"] == "high"  # a NaN is decisive
    assert not db_path.exists()  # a file target never touches the user's database


def test_every_ingest_fixture_format_gives_the_contract(capsys, db_path):
    paths = sorted(p for p in LOGS.iterdir() if not p.name.startswith("."))
    assert len(paths) >= 10
    for path in paths:
        assert main(["diagnose", str(path), "--json"]) == 0, path
        out = json.loads(capsys.readouterr().out)
        contract = {"verdict", "onset_step", "confidence", "confidence_reason", "confidence_basis", "verdict_basis", "alternatives", "findings", "config", "data"}
        # a log dated only by fractional epochs also gets the onset in epochs
        # a log dated by its other counters too (an RL library's environment steps) gets the onset in them
        assert set(out) - {"onset_epoch", "onset_counters"} == contract, path
        assert out["confidence"] in ("high", "medium", "low"), path


def test_stored_run_saves_findings(tmp_path, capsys):
    from moeproxy.ingest import ingest_paths
    from moeproxy.store import Store

    db = tmp_path / "runs.duckdb"
    ingest_paths(Store(db), [FIXTURES / "megatron_divergence_then_nan.log"], run="full-run")
    assert main(["diagnose", "full-run", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("full-run: divergence from step 160")
    saved = Store(db).findings("full-run")
    assert saved["verdict"] == "divergence" and saved["onset_step"] == 160
    assert saved["detector_version"] == DETECTOR_VERSION


def test_unknown_target_is_a_one_line_error(tmp_path, capsys):
    rc = main(["diagnose", "no-such-run", "--db", str(tmp_path / "x.duckdb")])
    err = capsys.readouterr().err
    assert rc == 2 and "no-such-run" in err and len(err.strip().splitlines()) == 1


def test_reference_option_reports_where_two_runs_part(tmp_path, capsys, db_path):
    lines = [f"step {s} | loss {2.0 - 0.01 * s:.4f} | grad_norm {0.5 + 0.01 * (s % 3):.4f}" for s in range(1, 31)]
    (tmp_path / "gpu.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "same.txt").write_text("\n".join(lines) + "\n")
    npu = [f"step {s} | loss {(2.0 - 0.01 * s) * (1.08 if s >= 20 else 1.0):.4f} | "
           f"grad_norm {0.5 + 0.01 * (s % 3):.4f}" for s in range(1, 31)]
    (tmp_path / "npu.txt").write_text("\n".join(npu) + "\n")
    assert main(["diagnose", str(tmp_path / "npu.txt"), "--reference", str(tmp_path / "gpu.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "precision_mismatch" and out["onset_step"] == 20
    assert main(["diagnose", str(tmp_path / "same.txt"), "--reference", str(tmp_path / "gpu.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "healthy"


def test_tensorboard_event_file(tmp_path, capsys, db_path):
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(1, 41):
        grad = 0.8 + 0.05 * (step % 4) if step < 30 else float("inf")
        writer.add_scalar("actor/grad_norm", grad, step)
        writer.add_scalar("critic/score/mean", 0.3 + 0.01 * step, step)
    writer.close()
    assert main(["diagnose", str(tmp_path / "tb"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "overflow" and out["onset_step"] == 30


def test_detectors_are_listed_and_target_is_required(capsys):
    assert main(["diagnose", "--detectors"]) == 0
    listed = capsys.readouterr().out
    for name in ("overflow", "divergence", "precision_mismatch", "routing_collapse", "entropy_collapse",
                 "reward_collapse"):
        assert name in listed
    assert main(["diagnose"]) == 2


def test_a_log_path_is_diagnosed_when_the_database_cannot_be_opened(capsys, db_path):
    # a log file needs no database: a damaged or newer-format default store must not stop it
    db_path.parent.mkdir(parents=True, exist_ok=True)
    db_path.write_bytes(b"not a duckdb file\n" * 4096)
    assert main(["diagnose", str(FIXTURES / "verl_console_nan.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "overflow"
    assert db_path.read_bytes() == b"not a duckdb file\n" * 4096  # left as it was
    # a run name still needs the database, and the error says what is wrong with it
    assert main(["diagnose", "some-run"]) != 0
    assert str(db_path) in capsys.readouterr().err
