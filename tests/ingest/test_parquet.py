"""The Parquet format: wide history tables and moeproxy's own export, read back exactly.

The fixture ``tests/fixtures/logs/wandb_history.parquet`` was written for this project with pyarrow
(a W&B-style history: ``_step``, ``train/loss`` with a null at step 30 and a NaN at step 60,
``train/grad_norm`` with an inf at step 50, a float32 learning rate, ``_runtime``, ``_timestamp``,
a text ``run_name`` and a boolean ``is_eval``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import FORMATS, ingest_paths, parse_file
from moeproxy.store import Store

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"


def test_a_wide_history_keeps_nan_and_inf_leaves_nulls_out_and_reads_only_numeric_columns():
    parsed = parse_file(LOGS / "wandb_history.parquet")
    assert parsed.format == "parquet" and not parsed.step_from_index
    frame = parsed.frame
    assert set(frame["metric"]) == {"train/loss", "train/grad_norm", "train/learning_rate", "_runtime", "_timestamp"}
    loss = frame[frame["metric"] == "train/loss"].set_index("step")["value"]
    assert 30 not in loss.index  # a null cell: not logged at this step
    assert math.isnan(loss[60]) and loss[0] == 2.31  # a NaN cell: a value
    grad = frame[frame["metric"] == "train/grad_norm"].set_index("step")["value"]
    assert grad[50] == math.inf
    assert sorted(set(frame["step"])) == list(range(0, 120, 10))


def test_without_a_step_column_the_row_index_is_the_step(tmp_path):
    path = tmp_path / "losses.parquet"
    pq.write_table(pa.table({"loss": [3.0, 2.5, 2.0], "grad_norm": [1.0, None, 0.5]}), path)
    parsed = parse_file(path)
    assert parsed.step_from_index
    assert parsed.frame.groupby("metric")["step"].apply(list).to_dict() == {"loss": [0, 1, 2], "grad_norm": [0, 2]}


def _resumed_log(path: Path) -> Path:
    lines = [f'{{"step": {s}, "loss": {3.0 - 0.1 * s}, "grad_norm": {1.0 + s / 10}}}' for s in (1, 2, 3, 4, 5)]
    lines += [f'{{"step": {s}, "loss": {2.9 - 0.1 * s}, "grad_norm": "nan"}}' for s in (3, 4, 5, 6)]  # a resume
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_export_to_parquet_ingests_back_to_the_same_rows_attempts_and_ranks_included(tmp_path):
    first = Store(tmp_path / "a.duckdb")
    ingest_paths(first, [_resumed_log(tmp_path / "run.jsonl")], run="r")
    first.export("r", tmp_path / "r.parquet")
    second = Store(tmp_path / "b.duckdb")
    summaries = ingest_paths(second, [tmp_path / "r.parquet"], run="r")
    assert [s.format for s in summaries] == ["parquet"] and summaries[0].attempts == 2
    first.export("r", tmp_path / "a.csv")
    second.export("r", tmp_path / "b.csv")
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    assert len(a) == 18 and (a["attempt"] == 1).sum() == 8
    pd.testing.assert_frame_equal(a, b)


def test_the_series_export_reads_back_as_the_run_is_read(tmp_path):
    first = Store(tmp_path / "a.duckdb")
    ingest_paths(first, [_resumed_log(tmp_path / "run.jsonl")], run="r")
    first.export("r", tmp_path / "series.parquet", series=True)
    second = Store(tmp_path / "b.duckdb")
    ingest_paths(second, [tmp_path / "series.parquet"], run="r")
    a, b = first.run_frame("r"), second.run_frame("r")
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


def test_a_broken_parquet_file_is_named_and_nothing_stored_changes(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "wandb_history.parquet"], run="kept")
    before = store.runs()
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1" + b"\x00\x15not a footer" * 20 + b"PAR1")
    with pytest.raises(InputError, match=r"broken\.parquet: malformed Parquet file"):
        ingest_paths(store, [bad], run="new")
    pd.testing.assert_frame_equal(store.runs(), before)


def test_a_table_of_text_only_is_refused_by_name(tmp_path):
    path = tmp_path / "names.parquet"
    pq.write_table(pa.table({"step": ["a", "b"], "note": ["x", "y"]}), path)
    with pytest.raises(InputError, match=r"names\.parquet: no numeric column"):
        parse_file(path)


def test_parquet_is_whole_document_for_watching():
    assert FORMATS["parquet"].binary and not FORMATS["parquet"].appendable
