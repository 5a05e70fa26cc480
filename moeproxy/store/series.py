"""How a run's series is read: the one rule (latest attempt; a global value wins over per-rank
values at a step, else the mean over ranks), as SQL for the store and as pandas for a frame."""

from __future__ import annotations


import duckdb
import numpy as np
import pyarrow as pa

from moeproxy.contracts import GLOBAL_RANK
from moeproxy.lazy import LazyModule

pd = LazyModule("pandas")  # imported on first use: storing parsed rows needs no pandas


def series_sql(rows: str) -> str:
    """The one definition of how a stored series is read, as SQL over ``rows`` (a SELECT with the
    columns metric, step, attempt, rank, value).

    One row per (metric, step, attempt) with columns metric, step, attempt, value, latest: the
    value is the global value (rank ``GLOBAL_RANK``) when that attempt wrote one at that step, else
    the mean over its ranks (a NaN on any rank stays NaN, +inf with finite ones stays +inf);
    ``latest`` marks the last attempt that wrote the metric at that step, the one a reader shows.
    ``Store.run_frame``, ``moeproxy.store.downsample`` and ``read_series`` (frames never stored) all read
    through it, so the store, the charts, the export and the diagnosis give one answer per value.
    """
    return f"""
        SELECT metric, step, attempt,
               CASE WHEN count(*) FILTER (WHERE rank = {GLOBAL_RANK}) > 0
                    THEN avg(value) FILTER (WHERE rank = {GLOBAL_RANK}) ELSE avg(value) END AS value,
               attempt = max(attempt) OVER (PARTITION BY metric, step) AS latest
        FROM ({rows}) GROUP BY metric, step, attempt"""


def read_series(frame: pd.DataFrame) -> pd.DataFrame:
    """``series_sql`` applied to a long frame that was never stored (``parse_file(...).frame``, a
    user's DataFrame): (step, metric, value), one value per (metric, step). ``attempt`` and ``rank``
    default to 0 and the global rank when the frame has no such column."""
    n = len(frame)
    attempt = frame["attempt"].fillna(0).to_numpy(np.int64) if "attempt" in frame else np.zeros(n, np.int64)
    rank = frame["rank"].fillna(GLOBAL_RANK).to_numpy(np.int64) if "rank" in frame \
        else np.full(n, GLOBAL_RANK, np.int64)
    table = pa.table({"metric": pa.array(frame["metric"].astype(str).to_numpy()),
                      "step": pa.array(frame["step"].to_numpy(np.int64)),
                      "attempt": pa.array(attempt), "rank": pa.array(rank),
                      "value": pa.array(frame["value"].to_numpy(np.float64))})  # Arrow keeps NaN as NaN
    con = duckdb.connect(":memory:")
    try:
        con.register("frame_rows", table)
        rows = "SELECT metric, step, attempt, rank, value FROM frame_rows"
        return con.execute(f"SELECT step, metric, value FROM ({series_sql(rows)}) WHERE latest "
                           "ORDER BY metric, step").df().astype({"step": "int64", "metric": str, "value": "float64"})
    finally:
        con.close()
