"""Server-side downsampling of stored series for drawing: M4 in SQL, spikes and non-finite points kept.

A 100,000-step series cannot go to the browser point by point, and averaging would hide the one
spike that matters. ``m4_series`` splits the requested step range into ``buckets`` equal buckets
and keeps, per bucket, the first, last, minimum and maximum finite point (M4: Jugel et al.,
PVLDB 7(10), 2014), so every spike survives and a line through the kept points looks like the
line through all of them. Non-finite values (NaN, +inf, -inf) never enter min/max; they are
returned as their own rows (``kind`` = 'nan' | 'inf' | '-inf') so they can be drawn as markers on
their steps: all of them when there are at most ``max_nonfinite``, else the first and last of
each kind in each bucket (no bucket that holds a NaN looks clean).

Restarts: a step written by several attempts is drawn from the latest attempt (``latest`` true);
the overwritten points of earlier attempts come back too (``latest`` false, downsampled per
attempt), so a restart is visible instead of silently merged. Ranks are reduced like
``Store.run_frame``: the global series when the run has one, else the mean across ranks.

This module and ``moeproxy.store`` are the only places that write SQL; it reads through
``Store.read()`` and returns plain pandas frames.
"""

from __future__ import annotations

import pandas as pd

from moeproxy.errors import NotFound
from moeproxy.store import GLOBAL_RANK, Store

DEFAULT_BUCKETS = 1000
DEFAULT_MAX_NONFINITE = 5000
COLUMNS = ["metric", "step", "value", "attempt", "latest", "kind"]

# One statement for several metrics of one run. $run is the integer run id, $metrics a list.
_M4_SQL = f"""
WITH raw AS (
    SELECT metric, step, attempt, rank, value FROM scalars
    WHERE run_id = $run AND list_contains($metrics, metric) AND step BETWEEN $lo AND $hi),
has_global AS (SELECT DISTINCT metric FROM raw WHERE rank = {GLOBAL_RANK}),
reduced AS (
    SELECT metric, step, attempt, avg(value) AS value FROM raw
    WHERE rank = {GLOBAL_RANK} OR metric NOT IN (SELECT metric FROM has_global)
    GROUP BY metric, step, attempt),
marked AS (
    SELECT metric, step, attempt, value,
           attempt = max(attempt) OVER (PARTITION BY metric, step) AS latest,
           CASE WHEN isnan(value) THEN 'nan' WHEN value = 'inf'::DOUBLE THEN 'inf'
                WHEN value = '-inf'::DOUBLE THEN '-inf' ELSE 'finite' END AS kind
    FROM reduced),
bucketed AS (
    SELECT *, CASE WHEN latest THEN -1 ELSE attempt END AS lane,
           least(CAST((step - $lo) * $buckets // ($hi - $lo + 1) AS BIGINT), $buckets - 1) AS bucket
    FROM marked),
finite_kept AS (
    SELECT metric, lane, unnest([min(step), max(step), arg_min(step, value), arg_max(step, value)]) AS step
    FROM bucketed WHERE kind = 'finite' GROUP BY metric, lane, bucket),
finite_points AS (
    SELECT DISTINCT b.metric, b.step, b.value, b.attempt, b.latest, b.kind
    FROM bucketed b JOIN finite_kept k USING (metric, lane, step) WHERE b.kind = 'finite'),
nonfinite_points AS (
    SELECT metric, step, value, attempt, latest, kind FROM bucketed WHERE kind <> 'finite'
    QUALIFY count(*) OVER (PARTITION BY metric) <= $max_nonfinite
         OR row_number() OVER (PARTITION BY metric, lane, bucket, kind ORDER BY step) = 1
         OR row_number() OVER (PARTITION BY metric, lane, bucket, kind ORDER BY step DESC) = 1)
SELECT metric, step, value, attempt, latest, kind FROM finite_points
UNION ALL
SELECT metric, step, value, attempt, latest, kind FROM nonfinite_points
ORDER BY metric, latest DESC, attempt, step
"""

# The common case: one attempt, global values only. No window, no join: each bucket's four points
# come straight out of arg_min/arg_max.
_M4_FAST_SQL = """
WITH bucketed AS (
    SELECT metric, step, value,
           CASE WHEN isnan(value) THEN 'nan' WHEN value = 'inf'::DOUBLE THEN 'inf'
                WHEN value = '-inf'::DOUBLE THEN '-inf' ELSE 'finite' END AS kind,
           least(CAST((step - $lo) * $buckets // ($hi - $lo + 1) AS BIGINT), $buckets - 1) AS bucket
    FROM scalars WHERE run_id = $run AND list_contains($metrics, metric) AND step BETWEEN $lo AND $hi),
finite_points AS (
    SELECT DISTINCT metric, p.step AS step, p.value AS value FROM (
        SELECT metric, unnest([
            {'step': min(step), 'value': arg_min(value, step)},
            {'step': max(step), 'value': arg_max(value, step)},
            {'step': arg_min(step, value), 'value': min(value)},
            {'step': arg_max(step, value), 'value': max(value)}]) AS p
        FROM bucketed WHERE kind = 'finite' GROUP BY metric, bucket)),
nonfinite_points AS (
    SELECT metric, step, value, kind FROM bucketed WHERE kind <> 'finite'
    QUALIFY count(*) OVER (PARTITION BY metric) <= $max_nonfinite
         OR row_number() OVER (PARTITION BY metric, bucket, kind ORDER BY step) = 1
         OR row_number() OVER (PARTITION BY metric, bucket, kind ORDER BY step DESC) = 1)
SELECT metric, step, value, 0 AS attempt, true AS latest, 'finite' AS kind FROM finite_points
UNION ALL
SELECT metric, step, value, 0 AS attempt, true AS latest, kind FROM nonfinite_points
ORDER BY metric, step
"""

# Step range and shape of the stored rows: decides between the fast and the general statement.
_PROFILE_SQL = f"""
SELECT min(step), max(step), count(DISTINCT attempt), count(*) FILTER (WHERE rank <> {GLOBAL_RANK})
FROM scalars WHERE run_id = $run AND list_contains($metrics, metric)
"""

_HEATMAP_SQL = """
WITH raw AS (
    SELECT metric, step, value FROM scalars
    WHERE run_id = $run AND starts_with(metric, $prefix) AND step BETWEEN $lo AND $hi
    {latest_only})
SELECT metric,
       least(CAST((step - $lo) * $buckets // ($hi - $lo + 1) AS BIGINT), $buckets - 1) AS bucket,
       min(step) AS step,
       avg(value) FILTER (WHERE isfinite(value)) AS value,
       count(*) FILTER (WHERE NOT isfinite(value)) AS nonfinite
FROM raw GROUP BY ALL ORDER BY metric, bucket
"""


def _run_id(con, store: Store, run: str) -> int:
    rows = con.execute("SELECT run_id FROM runs WHERE name = ?", [run]).fetchall()
    if not rows:
        raise NotFound(f"no run named {run!r} in {store.label}")
    return int(rows[0][0])


def step_range(store: Store, run: str, metrics: list[str]) -> tuple[int, int] | None:
    """(first, last) step over the given metrics of a run; None when none of them has data."""
    with store.read() as con:
        run_id = _run_id(con, store, run)
        lo, hi, _, _ = con.execute(_PROFILE_SQL, {"run": run_id, "metrics": list(metrics)}).fetchall()[0]
    return None if lo is None else (int(lo), int(hi))


def m4_series(store: Store, run: str, metrics: list[str], lo: int | None = None, hi: int | None = None,
              buckets: int = DEFAULT_BUCKETS, max_nonfinite: int = DEFAULT_MAX_NONFINITE) -> pd.DataFrame:
    """Downsampled long frame (metric, step, value, attempt, latest, kind) for the steps lo..hi.

    At most about ``4 * buckets`` finite points per metric and attempt lane; ``lo``/``hi`` default
    to the metrics' own first and last step (a zoom passes the selected range and gets that range
    at full resolution when it holds fewer than ``buckets`` steps).
    """
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    metrics = list(dict.fromkeys(metrics))
    if not metrics:
        return pd.DataFrame({c: [] for c in COLUMNS})
    with store.read() as con:
        run_id = _run_id(con, store, run)
        first, last, attempts, per_rank = con.execute(_PROFILE_SQL, {"run": run_id, "metrics": metrics}).fetchall()[0]
        if first is None:
            return pd.DataFrame({c: [] for c in COLUMNS})
        lo = int(first) if lo is None else lo
        hi = int(last) if hi is None else hi
        if hi < lo:
            lo, hi = hi, lo
        sql = _M4_FAST_SQL if attempts <= 1 and per_rank == 0 else _M4_SQL
        frame = con.execute(sql, {"run": run_id, "metrics": metrics, "lo": int(lo), "hi": int(hi),
                                      "buckets": int(buckets), "max_nonfinite": int(max_nonfinite)}).df()
    return frame.astype({"metric": str, "step": "int64", "value": "float64", "attempt": "int64",
                         "latest": bool, "kind": str})


def layer_heatmap(store: Store, run: str, prefix: str = "routing_entropy/layer_", lo: int | None = None,
                  hi: int | None = None, buckets: int = 300) -> pd.DataFrame:
    """Per-layer series averaged into step buckets: (metric, bucket, step, value, nonfinite).

    ``value`` is the mean of the finite values in the bucket, ``nonfinite`` how many were not
    finite; ``step`` is the bucket's first step. Empty when the run has no metric with the prefix.
    """
    with store.read() as con:
        run_id = _run_id(con, store, run)
        first, last, attempts = con.execute(
            "SELECT min(step), max(step), count(DISTINCT attempt) FROM scalars "
            "WHERE run_id = $run AND starts_with(metric, $prefix)", {"run": run_id, "prefix": prefix}).fetchall()[0]
        if first is None:
            return pd.DataFrame({c: [] for c in ["metric", "bucket", "step", "value", "nonfinite"]})
        lo = int(first) if lo is None else lo
        hi = int(last) if hi is None else hi
        latest_only = "" if attempts <= 1 else \
            "QUALIFY row_number() OVER (PARTITION BY metric, rank, step ORDER BY attempt DESC) = 1"
        return con.execute(_HEATMAP_SQL.format(latest_only=latest_only), {"run": run_id, "prefix": prefix, "lo": int(lo), "hi": int(hi),
                                          "buckets": int(buckets)}).df()
