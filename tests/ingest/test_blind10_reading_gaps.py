"""Shapes a fresh blind set (blind10) brought that no reader knew, each written here as a small
made-up log of the same shape: a progress fraction opening the line before ``=`` or `` - ``,
TensorFlow's NaN guard stopping a run, a ``Batch N/M`` counter, ``<step> <split> <value>`` lines, a
CSV with rows run together, and a JSON document of metric columns."""

from __future__ import annotations

import json
import math

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file


def _by_metric(parsed):
    frame = parsed.frame
    return {m: dict(zip(g["step"], g["value"])) for m, g in frame.groupby("metric", observed=True)}


def test_a_leading_fraction_before_an_equals_sign_and_tensorflows_nan_guard(tmp_path):
    log = tmp_path / "pretrain.log"
    lines = [f"{s}/500000 = 0.0%, SPS: 1.2, ELAP: 0:{s:02d}, ETA: 4 days, 2:00:00 - loss: {9.0 - s / 10:.4f}"
             for s in range(1, 11)]
    lines += ["ERROR:tensorflow:Model diverged with loss = NaN.",
              "ERROR:tensorflow:Error recorded from training_loop: NaN loss during training.",
              "Traceback (most recent call last):", '  File "run.py", line 3, in <module>']
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    loss = _by_metric(parsed)["loss"]
    assert parsed.format == "text" and loss[1] == pytest.approx(8.9) and loss[10] == pytest.approx(8.0)
    assert math.isnan(loss[11]) and len(loss) == 11  # the step being attempted when the guard fired
    assert _by_metric(parsed)["nan_iters"] == {11: 1.0}  # the guard counted it: not a record cut short
    # the run stopped at a NaN out of a calm, improving loss: overflow there (the last record holds
    # fewer metrics than the others, yet it is no crash mid-write to set aside)
    from moeproxy.diagnose.record import diagnose_target

    _, result, _ = diagnose_target(str(log), db=":memory:")
    assert result["verdict"] == "overflow" and result["onset_step"] == 11, result["findings"]


def test_a_batch_counter_with_its_total_and_a_dash_before_the_pair(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"Batch {b}/9000 - Loss: {3.0 - b / 1000:.3f}\n" for b in range(100, 110)))
    loss = _by_metric(parse_file(log))["loss"]
    assert sorted(loss) == list(range(100, 110)) and loss[100] == pytest.approx(2.9)


def test_a_bare_batch_number_is_not_a_step(tmp_path):
    """``batch: 32`` is as often a batch size as a counter: only ``batch N/M`` counts."""
    from moeproxy.ingest.formats.text import find_step

    assert find_step("batch: 32 loss: 2.0") is None
    assert find_step("Batch 7/100 loss: 2.0")[0] == 7


def test_step_split_value_lines_read_a_splits_name_as_its_loss(tmp_path):
    log = tmp_path / "log.txt"
    rows = []
    for s in range(0, 12):
        if s % 5 == 0:
            rows += [f"{s} val {7.0 - s / 20:.4f}", f"{s} hella {0.25 + s / 1000:.4f}"]
        rows.append(f"{s} train {7.2 - s / 10:.6f}")
    log.write_text("\n".join(rows) + "\n")
    metrics = _by_metric(parse_file(log))
    assert set(metrics) == {"loss", "val/loss", "hella"}
    assert metrics["loss"][3] == pytest.approx(6.9) and metrics["val/loss"][10] == pytest.approx(6.5)
    assert metrics["hella"][5] == pytest.approx(0.255)


def test_a_csv_with_two_rows_run_together_keeps_the_rest_and_says_so(tmp_path):
    header = "iteration,mean_reward,value_loss,timestamp"
    rows = [f"{i},{-2 + i / 10:.2f},{1.5 - i / 20:.3f},2026-01-01T00:0{i}:00" for i in range(8)]
    rows[3] = rows[3] + rows[4]  # a lost newline: two records on one line, more cells than the header
    del rows[4]
    path = tmp_path / "summary.csv"
    path.write_text("\n".join([header] + rows) + "\n")
    parsed = parse_file(path)
    assert parsed.format == "csv" and parsed.skipped_lines == 1
    assert parsed.notes == ["1 row(s) with more cells than the header's 4 left out"]
    assert sorted(_by_metric(parsed)["mean_reward"]) == [0, 1, 2, 5, 6, 7]


def test_a_json_document_of_metric_columns(tmp_path):
    doc = {"experiment": "moe-temp", "final": {"val_loss": 3.1},
           "history": {"steps": [10, 20, 30, 40], "train_losses": [4.0, 3.5, None, 3.0],
                       "learning_rates": [1e-3, 2e-3, 3e-3, 3e-3], "val_accuracies": [0.1, 0.2, 0.25, float("nan")],
                       "expert_utilizations": [[0.5, 0.5]] * 4, "note": ["a", "b", "c", "d"]}}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(doc, indent=2))
    parsed = parse_file(path)
    metrics = _by_metric(parsed)
    assert parsed.format == "json-columns" and not parsed.step_from_index
    assert set(metrics) == {"train_loss", "learning_rate", "val_accuracy"}
    assert metrics["train_loss"] == {10: 4.0, 20: 3.5, 40: 3.0}  # null: not logged at that step
    assert math.isnan(metrics["val_accuracy"][40])


def test_keras_history_columns_use_the_epoch_index_and_a_second_table_its_own_steps(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(json.dumps({"loss": [2.0, 1.5, 1.2], "accuracy": [0.3, 0.5, 0.6],
                                "eval_steps": [100, 200, 300, 400], "eval_loss": [1.9, 1.4, 1.3, 1.25]}))
    parsed = parse_file(path)
    metrics = _by_metric(parsed)
    assert parsed.step_from_index
    assert metrics["loss"] == {0: 2.0, 1: 1.5, 2: 1.2}
    assert metrics["eval_loss"] == {100: 1.9, 200: 1.4, 300: 1.3, 400: 1.25}


def test_a_json_object_without_a_numeric_column_is_refused_by_name(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": [1, 2, 3], "b": [4, 5, 6], "c": "x"}'.replace("[1, 2, 3]", '["x", "y", "z"]'))
    with pytest.raises(InputError, match="config.json"):
        parse_file(path)


def test_a_short_row_in_the_middle_of_a_long_csv_is_cells_not_logged(tmp_path):
    """Beyond the lines the sniffer reads, a row with fewer cells than the header: its missing
    cells are "not logged", never a crash."""
    rows = [f"{i},{1.0 + i / 100:.3f},{0.5:.1f}" for i in range(120)]
    rows[90] = "90,1.9"
    path = tmp_path / "long.csv"
    path.write_text("\n".join(["step,loss,grad_norm"] + rows) + "\n")
    metrics = _by_metric(parse_file(path))
    assert metrics["loss"][90] == pytest.approx(1.9) and 90 not in metrics["grad_norm"] and len(metrics["grad_norm"]) == 119
