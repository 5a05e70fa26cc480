"""Restarts: duplicate or decreasing steps are kept as numbered attempts; queries show the latest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeproxy.ingest import ingest_paths, parse_file
from moeproxy.store import Store

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"


def test_megatron_resume_from_checkpoint_is_a_second_attempt(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    [summary] = ingest_paths(store, [LOGS / "megatron.log"], run="m")
    assert summary.attempts == 2
    series = store.series("m", "grad_norm", attempts="all")
    assert set(series["attempt"]) == {0, 1}
    latest = store.run_frame("m", ["grad_norm"]).set_index("step")["value"]
    assert latest[6] == pytest.approx(9.001)  # the resumed attempt wins at step 6 (inf in attempt 0)
    assert latest[3] == pytest.approx(35.929)  # steps only the first attempt logged are kept


def test_verl_jsonl_relogged_steps(tmp_path):
    parsed = parse_file(LOGS / "verl_file.jsonl")
    f = parsed.frame
    assert sorted(f[f["attempt"] == 1]["step"].unique()) == [4, 5, 6, 7, 8]
    assert len(f[(f["metric"] == "actor/grad_norm") & (f["step"] == 5)]) == 2


def test_same_step_with_disjoint_or_equal_metrics_is_one_attempt(tmp_path):
    path = tmp_path / "log.jsonl"
    rows = [{"step": 1, "loss": 1.0, "epoch": 0.1}, {"step": 1, "eval_loss": 2.0, "epoch": 0.1},
            {"step": 2, "loss": 0.9, "epoch": 0.2}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert set(parse_file(path).frame["attempt"]) == {0}


def test_a_second_file_that_repeats_steps_becomes_a_new_attempt(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 11)))
    second.write_text("".join(json.dumps({"step": s, "loss": 2.0 / s}) + "\n" for s in range(8, 16)))
    other = tmp_path / "c.jsonl"
    other.write_text("".join(json.dumps({"step": s, "reward": 0.5}) + "\n" for s in range(1, 16)))
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [first], run="r")
    ingest_paths(store, [second], run="r")
    ingest_paths(store, [other], run="r")  # other metrics at the same steps: not a restart
    loss = store.series("r", "loss", attempts="all")
    assert loss.groupby("attempt")["step"].agg(["min", "max"]).values.tolist() == [[1, 10], [8, 15]]
    latest = store.run_frame("r", ["loss"]).set_index("step")["value"]
    assert latest[9] == pytest.approx(2.0 / 9) and latest[3] == pytest.approx(1.0 / 3)
    assert store.series("r", "reward_mean")["attempt"].max() == 1
