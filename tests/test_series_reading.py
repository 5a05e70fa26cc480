"""One value per step, everywhere: the dashboard's query, the export and the diagnosis read a stored
series by the store's one definition (``moeproxy.store.series_sql``): the latest attempt; at a step,
a global value wins over per-rank values, else the mean over the ranks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from moeproxy.cli import main
from moeproxy.contracts import GLOBAL_RANK
from moeproxy.diagnose import diagnose_frame
from moeproxy.diagnose.series import RunSeries
from moeproxy.store import Store

G = GLOBAL_RANK
# (step, attempt, rank, value) of grad_norm:
ROWS = [
    (1, 0, G, 10.0), (1, 0, 0, 1.0), (1, 0, 1, 3.0),  # a global value and two ranks: 10.0
    (2, 0, 0, 1.0), (2, 0, 1, 3.0),                     # ranks only: their mean, 2.0
    (3, 0, G, 5.0), (3, 1, 0, 2.0), (3, 1, 1, 4.0),     # a restart wrote ranks only: 3.0 (latest attempt)
    (4, 0, G, 7.0), (4, 0, 0, float("nan")),            # the global value wins over a NaN rank: 7.0
    (5, 0, 0, 1.0), (5, 0, 1, float("inf")),            # ranks only, one +inf: +inf
]
EXPECTED = {1: 10.0, 2: 2.0, 3: 3.0, 4: 7.0, 5: math.inf}


def raw_frame() -> pd.DataFrame:
    step, attempt, rank, value = zip(*ROWS)
    return pd.DataFrame({"metric": "grad_norm", "step": step, "attempt": attempt, "rank": rank, "value": value})


def write_run(store: Store, run: str, frame: pd.DataFrame, names: dict[str, str]) -> None:
    """Write a long frame (metric, step, attempt, rank, value) as one source of ``run``, through the
    store's own transaction (``names``: original -> stored metric name)."""
    with store.write() as tx:
        run_id = tx.ensure_run(run, "full", None, "test", "synthetic")
        source_id = tx.add_source(run_id, {"path": f"{run}.log", "sha256": f"sha-{run}", "format": "synthetic",
                                           "framework": "test", "rows": len(frame), "steps": frame["step"].nunique(),
                                           "metrics": frame["metric"].nunique(),
                                           "nonfinite": int((~np.isfinite(frame["value"])).sum()),
                                           "attempts": frame["attempt"].nunique(), "skipped_lines": 0,
                                           "step_from_index": False})
        tx.add_metric_names(run_id, names)
        tx.add_scalars(run_id, source_id, frame.assign(wall_time=np.nan))


@pytest.fixture
def store(db_path) -> Store:
    """A DuckDB file holding run 'r' with the rows above."""
    store = Store(db_path)
    write_run(store, "r", raw_frame(), {"actor/grad_norm": "grad_norm"})
    return store


def as_dict(steps, values) -> dict[int, float]:
    return {int(s): float(v) for s, v in zip(steps, values)}


def test_the_store_reads_one_value_per_step(store):
    frame = store.run_frame("r")
    assert as_dict(frame["step"], frame["value"]) == EXPECTED


def test_the_dashboard_query_draws_the_same_values(store, db_path):
    from dashboard import queries

    drawn = queries.m4(str(db_path), store.data_version(), "r", ("grad_norm",), None, None, 1000)
    latest = drawn[drawn["latest"]]
    assert as_dict(latest["step"], latest["value"]) == EXPECTED
    # the overwritten attempt of step 3 is drawn apart, as itself
    assert as_dict(drawn.loc[~drawn["latest"], "step"], drawn.loc[~drawn["latest"], "value"]) == {3: 5.0}


def test_the_series_export_writes_the_same_values(store, db_path, tmp_path, capsys):
    target = tmp_path / "r.csv"
    assert main(["export", "r", "--to", str(target), "--series", "--db", str(db_path)]) == 0
    assert "wrote 5 rows" in capsys.readouterr().out
    exported = pd.read_csv(target)
    assert list(exported.columns) == ["step", "metric", "original", "value"]
    assert as_dict(exported["step"], exported["value"]) == EXPECTED
    assert set(exported["original"]) == {"actor/grad_norm"}
    # without --series: every stored row, as stored
    assert main(["export", "r", "--to", str(target), "--db", str(db_path)]) == 0
    assert len(pd.read_csv(target)) == len(ROWS)


def test_the_diagnosis_sees_the_same_values_stored_or_not(store):
    stored = RunSeries.from_frame(store.run_frame("r")).get("grad_norm")
    assert as_dict(stored.index, stored.to_numpy()) == EXPECTED
    # a frame never stored (parse_file's, a user's), with its attempt and rank columns
    unstored = RunSeries.from_frame(raw_frame()).get("grad_norm")
    assert as_dict(unstored.index, unstored.to_numpy()) == EXPECTED


def test_a_global_overflow_is_not_averaged_away_by_finite_ranks(db_path):
    """The rule decides a verdict: the global grad norm says inf at step 30; ranks said 1 and 3."""
    steps = np.arange(1, 61)
    frames = [pd.DataFrame({"metric": "grad_norm", "step": steps, "attempt": 0, "rank": G,
                            "value": np.where(steps >= 30, np.inf, 1.0 + 0.01 * steps)}),
              pd.DataFrame({"metric": "loss", "step": steps, "attempt": 0, "rank": G,
                            "value": np.where(steps >= 30, np.nan, 2.0 - 0.01 * steps)})]
    for rank, value in ((0, 1.0), (1, 3.0)):
        frames.append(pd.DataFrame({"metric": "grad_norm", "step": steps, "attempt": 0, "rank": rank, "value": value}))
    frame = pd.concat(frames, ignore_index=True)
    result = diagnose_frame(frame)
    assert result["verdict"] == "overflow" and result["onset_step"] == 30
    store = Store(db_path)
    write_run(store, "o", frame, {"grad_norm": "grad_norm", "loss": "loss"})
    assert diagnose_frame(store.run_frame("o")) == result
