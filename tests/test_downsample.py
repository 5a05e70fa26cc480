"""M4 downsampling in SQL: bounded points, spikes and non-finite points kept, restarts and ranks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from moeproxy.store.downsample import has_wall_time, layer_heatmap, m4_series, step_range, step_times
from moeproxy.errors import NotFound
from moeproxy.store import GLOBAL_RANK, Store


def put(store: Store, run: str, frame: pd.DataFrame) -> None:
    """Write a long frame (metric, step, value[, attempt, rank]) straight into the store."""
    frame = frame.copy()
    frame["attempt"] = frame.get("attempt", 0)
    frame["rank"] = frame.get("rank", GLOBAL_RANK)
    frame["wall_time"] = frame.get("wall_time", np.nan)
    with store.write() as tx:
        run_id = tx.ensure_run(run, "other", None, "test", "synthetic")
        source_id = tx.add_source(run_id, {"path": run, "sha256": f"sha-{run}-{len(frame)}", "format": "synthetic",
                                           "framework": "test", "rows": len(frame), "steps": 0, "metrics": 0,
                                           "nonfinite": 0, "attempts": 1, "skipped_lines": 0,
                                           "step_from_index": False})
        tx.add_metric_names(run_id, {m: m for m in frame["metric"].unique()})
        tx.add_scalars(run_id, source_id, frame)


@pytest.fixture
def store():
    return Store(":memory:")


def series(metric: str, values, start: int = 1) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    return pd.DataFrame({"metric": metric, "step": np.arange(start, start + len(values)), "value": values})


def test_bounded_points_keep_spike_and_ends(store):
    values = np.random.default_rng(0).normal(1.0, 0.01, 20_000)
    values[12_345] = 500.0
    values[777] = -40.0
    put(store, "r", series("grad_norm", values))
    out = m4_series(store, "r", ["grad_norm"], buckets=200)
    assert len(out) <= 4 * 200
    assert out["value"].max() == 500.0 and out.loc[out["value"].idxmax(), "step"] == 12_346
    assert out["value"].min() == -40.0 and out.loc[out["value"].idxmin(), "step"] == 778
    assert out["step"].min() == 1 and out["step"].max() == 20_000


def test_nonfinite_points_are_returned_as_markers(store):
    values = np.ones(5_000)
    values[100] = math.nan
    values[200] = math.inf
    values[300] = -math.inf
    put(store, "r", series("loss", values))
    out = m4_series(store, "r", ["loss"], buckets=50)
    marks = out[out["kind"] != "finite"].set_index("step")["kind"].to_dict()
    assert marks == {101: "nan", 201: "inf", 301: "-inf"}
    assert np.isfinite(out.loc[out["kind"] == "finite", "value"]).all()


def test_many_nonfinite_points_keep_every_bucket(store):
    values = np.ones(10_000)
    values[5_000:] = math.nan  # a diverged run: half of it NaN
    put(store, "r", series("loss", values))
    out = m4_series(store, "r", ["loss"], buckets=100, max_nonfinite=1_000)
    nan_steps = out.loc[out["kind"] == "nan", "step"].to_numpy()
    assert 50 <= len(nan_steps) <= 2 * 100  # first and last per bucket, not 5,000 points
    assert nan_steps.min() == 5_001 and nan_steps.max() == 10_000
    assert len(np.unique((nan_steps - 1) * 100 // 10_000)) == 50  # every bucket holding NaN shows one


def test_zoom_returns_full_resolution(store):
    put(store, "r", series("loss", np.arange(100_000.0)))
    out = m4_series(store, "r", ["loss"], lo=40_000, hi=40_499, buckets=1000)
    assert out["step"].tolist() == list(range(40_000, 40_500))


def test_restart_attempts_are_distinguishable(store):
    first = series("loss", np.ones(100)).assign(attempt=0)
    second = series("loss", np.full(50, 2.0), start=61).assign(attempt=1)  # resumed from step 60
    put(store, "r", pd.concat([first, second]))
    out = m4_series(store, "r", ["loss"], buckets=1000)
    latest = out[out["latest"]]
    assert latest["step"].tolist() == list(range(1, 111))
    assert (latest.loc[latest["step"] > 60, "value"] == 2.0).all()
    overwritten = out[~out["latest"]]
    assert set(overwritten["attempt"]) == {0}
    assert overwritten["step"].tolist() == list(range(61, 101))


def test_per_rank_values_are_averaged_and_nan_stays(store):
    ranks = pd.concat([series("grad_norm", [1.0, 2.0, 3.0]).assign(rank=0),
                       series("grad_norm", [3.0, math.nan, 5.0]).assign(rank=1)])
    put(store, "r", ranks)
    out = m4_series(store, "r", ["grad_norm"]).set_index("step")
    assert out.loc[1, "value"] == 2.0 and out.loc[3, "value"] == 4.0
    assert out.loc[2, "kind"] == "nan"


def test_several_metrics_range_and_heatmap(store):
    frames = [series("loss", np.ones(1_000))] + [series(f"routing_entropy/layer_{i}", np.full(1_000, 0.1 * i))
                                                   for i in (0, 1, 10, 2)]
    put(store, "r", pd.concat(frames))
    out = m4_series(store, "r", ["loss", "routing_entropy/layer_1", "missing"], buckets=10)
    assert set(out["metric"]) == {"loss", "routing_entropy/layer_1"}
    assert step_range(store, "r", ["loss"]) == (1, 1_000)
    assert step_range(store, "r", ["missing"]) is None
    heat = layer_heatmap(store, "r", buckets=20)
    assert heat["metric"].nunique() == 4 and heat.groupby("metric").size().max() == 20
    assert heat.loc[heat["metric"] == "routing_entropy/layer_10", "value"].round(6).unique().tolist() == [1.0]


def test_unknown_run_and_empty_request(store):
    with pytest.raises(NotFound, match="no run named 'nope'"):
        m4_series(store, "nope", ["loss"])
    put(store, "r", series("loss", [1.0]))
    assert m4_series(store, "r", []).empty
    with pytest.raises(ValueError, match="buckets"):
        m4_series(store, "r", ["loss"], buckets=0)


def test_series_row_id_index_gives_the_same_answer_and_survives_stale_ranges(tmp_path, monkeypatch):
    from moeproxy.store import downsample

    monkeypatch.setattr(downsample, "SERIES_INDEX_MIN_ROWS", 0)
    store = Store(tmp_path / "runs.duckdb")
    values = np.random.default_rng(1).normal(1.0, 0.1, 3_000)
    values[1_500] = math.inf
    put(store, "r", pd.concat([series(f"routing_entropy/layer_{i}", values + i) for i in range(3)]
                              + [series("loss", values)]))
    downsample._SERIES_INDEX.clear()
    plain = m4_series(store, "r", ["loss", "routing_entropy/layer_1"], buckets=50)
    assert downsample._SERIES_INDEX  # the index was built for the on-disk store
    ranges = next(iter(downsample._SERIES_INDEX.values()))
    assert set(ranges) == {"loss", "routing_entropy/layer_0", "routing_entropy/layer_1", "routing_entropy/layer_2"}
    assert all(n == 3_000 for _, _, n in ranges.values())
    again = m4_series(store, "r", ["loss", "routing_entropy/layer_1"], buckets=50)
    pd.testing.assert_frame_equal(plain, again)
    heat = layer_heatmap(store, "r", buckets=10)
    # a stale cache entry (row ids that point elsewhere) falls back to the plain filter
    key = next(iter(downsample._SERIES_INDEX))
    downsample._SERIES_INDEX[key] = {m: (0, 5, n) for m, (_, _, n) in ranges.items()}
    pd.testing.assert_frame_equal(plain, m4_series(store, "r", ["loss", "routing_entropy/layer_1"], buckets=50))
    downsample._SERIES_INDEX[key] = {m: (0, 5, n) for m, (_, _, n) in ranges.items()}
    pd.testing.assert_frame_equal(heat, layer_heatmap(store, "r", buckets=10))
    # a write bumps the data version: the next read builds a fresh index
    put(store, "s", series("loss", values))
    m4_series(store, "r", ["loss"])
    assert list(downsample._SERIES_INDEX)[-1][1] == str(store.data_version())


def test_step_times_give_the_wall_clock_axis_and_a_log_without_times_has_none(tmp_path):
    store = Store(tmp_path / "t.duckdb")
    steps = np.arange(1, 6)
    put(store, "timed", pd.DataFrame({"metric": ["loss"] * 5 + ["kl"] * 5, "step": np.r_[steps, steps],
                                      "value": 1.0, "wall_time": np.r_[100.0 + steps, 99.0 + steps]}))
    put(store, "untimed", pd.DataFrame({"metric": "loss", "step": steps, "value": 1.0}))
    assert has_wall_time(store, "timed") and not has_wall_time(store, "untimed")
    assert step_times(store, "timed")["wall_time"].tolist() == [100.0, 101.0, 102.0, 103.0, 104.0]  # earliest
    assert step_times(store, "timed", ["loss"])["wall_time"].tolist() == [101.0, 102.0, 103.0, 104.0, 105.0]
    assert step_times(store, "untimed").empty
