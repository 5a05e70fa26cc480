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
attempt), so a restart is visible instead of silently merged. Attempts and ranks are read by the
store's one definition (``moeproxy.store.series_sql``), the one ``Store.run_frame`` uses.

This module and ``moeproxy.store`` are the only places that write SQL; it reads through
``Store.read()`` and returns plain pandas frames.
"""

from __future__ import annotations

from moeproxy.vocabulary import LAYER_PREFIX

from collections import OrderedDict

import numpy as np
import pandas as pd

from moeproxy.contracts import GLOBAL_RANK
from moeproxy.store.database import Store
from moeproxy.store.series import series_sql

DEFAULT_BUCKETS = 1000
DEFAULT_MAX_NONFINITE = 5000
COLUMNS = ["metric", "step", "value", "attempt", "latest", "kind"]


def bucket_sql(lo: int, hi: int, buckets: int) -> str:
    """The bucket (0..buckets-1) of ``step`` in lo..hi, as SQL: 64-bit arithmetic when
    ``(hi - lo + 1) * buckets`` fits in it, else 128-bit (steps near +-2^63 overflow 64 bits)."""
    if (hi - lo + 1) * buckets < 2**63:
        return "least(CAST((step - $lo) * $buckets // ($hi - $lo + 1) AS BIGINT), $buckets - 1)"
    return ("least(CAST((CAST(step AS HUGEINT) - $lo) * $buckets // (CAST($hi AS HUGEINT) - $lo + 1) AS BIGINT), "
            "$buckets - 1)")


def bucket_numpy(steps: np.ndarray, lo: int, hi: int, buckets: int) -> np.ndarray:
    """``bucket_sql`` for an array of steps (Python integers where 64 bits would overflow)."""
    if (hi - lo + 1) * buckets < 2**63:
        return np.minimum((steps - lo) * buckets // (hi - lo + 1), buckets - 1)
    return np.array([min((int(s) - lo) * buckets // (hi - lo + 1), buckets - 1) for s in steps], dtype=np.int64)


# One statement for several metrics of one run: $run is the integer run id, {scan} the rows (``_scan``),
# read by the store's one definition of a series (``series_sql``: attempts, ranks).
_M4_SQL = """
WITH marked AS (
    SELECT metric, step, attempt, value, latest,
           CASE WHEN isnan(value) THEN 'nan' WHEN value = 'inf'::DOUBLE THEN 'inf'
                WHEN value = '-inf'::DOUBLE THEN '-inf' ELSE 'finite' END AS kind
    FROM ({series})),
bucketed AS (
    SELECT *, CASE WHEN latest THEN -1 ELSE attempt END AS lane,
           {bucket} AS bucket
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

# The common case (one attempt, global values only), one series at a time: per bucket the first,
# last, lowest and highest finite point, plus the series' non-finite points. The metric's row-id range
# (``_series_ranges``) lets DuckDB skip every row group of other series; numpy does the rest.
_M4_BUCKETS_SQL = """
SELECT min(step), arg_min(value, step), max(step), arg_max(value, step),
       arg_min(step, value), min(value), arg_max(step, value), max(value)
FROM scalars WHERE rowid BETWEEN $r0 AND $r1 AND run_id = $run AND metric = $m AND step BETWEEN $lo AND $hi
  AND isfinite(value)
GROUP BY {bucket}
"""
_NONFINITE_SQL = """
SELECT step, value FROM scalars
WHERE rowid BETWEEN $r0 AND $r1 AND run_id = $run AND metric = $m AND step BETWEEN $lo AND $hi
  AND NOT isfinite(value) ORDER BY step
"""


def _kind(values: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(values), "nan", np.where(values > 0, "inf", "-inf"))


def _m4_one_series(con, run_id: int, metric: str, lo: int, hi: int, buckets: int,
                   max_nonfinite: int, rows_at: tuple[int, int]) -> pd.DataFrame:
    params = {"run": run_id, "m": metric, "lo": lo, "hi": hi, "r0": rows_at[0], "r1": rows_at[1]}
    rows = con.execute(_M4_BUCKETS_SQL.format(bucket=bucket_sql(lo, hi, buckets)),
                       {**params, "buckets": buckets}).fetchnumpy()
    cols = list(rows.values())
    steps = np.concatenate([np.asarray(cols[i], dtype=np.int64) for i in (0, 2, 4, 6)]) if len(cols[0]) else \
        np.empty(0, np.int64)
    values = np.concatenate([np.asarray(cols[i], dtype=np.float64) for i in (1, 3, 5, 7)]) if len(cols[0]) else \
        np.empty(0, np.float64)
    steps, first = np.unique(steps, return_index=True)
    values = values[first]
    bad = con.execute(_NONFINITE_SQL, params).fetchnumpy()
    bad_steps = np.asarray(bad["step"], dtype=np.int64)
    bad_values = np.asarray(bad["value"], dtype=np.float64)
    bad_kind = _kind(bad_values)
    if len(bad_steps) > max_nonfinite:  # keep the first and last of each kind in each bucket
        bucket = bucket_numpy(bad_steps, lo, hi, buckets)
        key = pd.Series(bucket.astype(str)) + bad_kind
        keep = (~key.duplicated(keep="first") | ~key.duplicated(keep="last")).to_numpy()
        bad_steps, bad_values, bad_kind = bad_steps[keep], bad_values[keep], bad_kind[keep]
    n, m = len(steps), len(bad_steps)
    return pd.DataFrame({"metric": metric, "step": np.concatenate([steps, bad_steps]),
                         "value": np.concatenate([values, bad_values]), "attempt": 0, "latest": True,
                         "kind": np.concatenate([np.full(n, "finite"), bad_kind]) if n + m else np.empty(0, str)})


# Step range and shape of the stored rows: decides between the fast and the general statement.
_PROFILE_SQL = f"""
SELECT min(step), max(step), 1 + (max(attempt) - min(attempt)), count(*) FILTER (WHERE rank <> {GLOBAL_RANK}), count(*)
FROM ({{scan}})
"""


def _scan(n_metrics: int, ranged: bool) -> str:
    """The rows of metrics $m0..$m<n-1> of run $run (in $lo..$hi when ``ranged``).

    One equality filter per metric, glued with UNION ALL: DuckDB prunes row groups by their
    min/max (zone maps) for ``metric = const`` but not for an IN list or ``list_contains``, and
    the scalars table is stored sorted by metric and step within each ingest, so this reads only
    the row groups of the requested series (8 ms instead of 60 ms for 3 series of 40 M rows).
    """
    step = " AND step BETWEEN $lo AND $hi" if ranged else ""
    return " UNION ALL ".join(
        f"SELECT metric, step, attempt, rank, value FROM scalars "
        f"WHERE rowid BETWEEN $r{i}a AND $r{i}b AND run_id = $run AND metric = $m{i}{step}"
        for i in range(n_metrics))


def _metric_params(metrics: list[str], ranges: dict[str, tuple[int, int]] | None = None) -> dict:
    params = {f"m{i}": m for i, m in enumerate(metrics)}
    for i, m in enumerate(metrics):
        params[f"r{i}a"], params[f"r{i}b"] = (ranges or {}).get(m, _ALL_ROWS)
    return params


# -- where each series lives: a row-id range per (run, metric) -----------------------------------
# DuckDB keeps min/max statistics of only a string's first bytes (8 in DuckDB 1.x, 12 in 2.0: the
# ``perf/metric_`` of ``perf/metric_042``), so ``metric = 'x'`` cannot
# skip row groups when names share a prefix ('routing_entropy/layer_3', 'actor/pg_...'): it reads
# every row group of the run. A row-id range can. The ranges of a run (one GROUP BY over the run,
# about a second for 20 M rows) are kept per (database file, data version, run): every write bumps
# the data version, so a cached range never outlives the rows it points at; and every query still
# filters on run and metric, and the profile query checks the row count, so a stale range can only
# fall back to the plain filter, never return another series' rows.
_ALL_ROWS = (0, 2**62)
_SERIES_INDEX: OrderedDict = OrderedDict()
_SERIES_INDEX_SIZE = 16
SERIES_INDEX_MIN_ROWS = 1_000_000  # smaller runs read fast enough without it


def _series_ranges(con, store: Store, run_id: int) -> dict[str, tuple[int, int, int]]:
    """metric -> (first row id, last row id, rows) of one run; empty for small or in-memory stores."""
    if store.path is None or store.catalog is not None:  # (a catalog's rowids are no row order to index by)
        return {}
    version = con.execute("SELECT value FROM meta WHERE key = 'data_version'").fetchall()[0][0]
    key = (str(store.path), version, run_id)
    if key in _SERIES_INDEX:
        _SERIES_INDEX.move_to_end(key)
        return _SERIES_INDEX[key]
    total = con.execute("SELECT rows FROM (SELECT sum(rows) AS rows FROM sources WHERE run_id = $run)",
                        {"run": run_id}).fetchall()[0][0]
    ranges: dict[str, tuple[int, int, int]] = {}
    if total and total >= SERIES_INDEX_MIN_ROWS:
        ranges = {m: (int(a), int(b), int(n)) for m, a, b, n in con.execute(
            "SELECT metric, min(rowid), max(rowid), count(*) FROM scalars WHERE run_id = $run GROUP BY metric",
            {"run": run_id}).fetchall()}
    _SERIES_INDEX[key] = ranges
    while len(_SERIES_INDEX) > _SERIES_INDEX_SIZE:
        _SERIES_INDEX.popitem(last=False)
    return ranges


def _profile(con, store: Store, run_id: int, metrics: list[str]) -> tuple[tuple, dict[str, tuple[int, int]]]:
    """(first step, last step, attempts, per-rank rows) of the metrics, and the row-id ranges to use."""
    index = _series_ranges(con, store, run_id)
    ranges = {m: index[m][:2] for m in metrics if m in index}
    row = con.execute(_PROFILE_SQL.format(scan=_scan(len(metrics), False)),
                      {"run": run_id, **_metric_params(metrics, ranges)}).fetchall()[0]
    if ranges and row[4] != sum(index[m][2] for m in ranges):  # rows moved: read without the ranges
        _SERIES_INDEX.clear()
        ranges = {}
        row = con.execute(_PROFILE_SQL.format(scan=_scan(len(metrics), False)),
                          {"run": run_id, **_metric_params(metrics)}).fetchall()[0]
    return row[:4], ranges


def metric_names(store: Store, run: str, prefix: str = "") -> list[str]:
    """Stored metric names of a run (from the name table, without scanning the values), sorted;
    only those starting with ``prefix`` when given."""
    with store.read() as con:
        run_id = store.run_id(con, run)
        rows = con.execute("SELECT DISTINCT metric FROM metric_names WHERE run_id = $run AND starts_with(metric, $p) "
                           "ORDER BY metric", {"run": run_id, "p": prefix}).fetchall()
    return [r[0] for r in rows]

# Metrics with a prefix as a range of names (>= prefix, < prefix with its last character bumped):
# a range is pruned by zone maps, ``starts_with`` is not.
_HEATMAP_SCAN = """
SELECT metric, step, attempt, rank, value FROM scalars
WHERE rowid BETWEEN $r0 AND $r1 AND run_id = $run AND metric >= $p_lo AND metric < $p_hi AND step BETWEEN $lo AND $hi
"""
_HEATMAP_SQL = """
WITH raw AS ({rows})
SELECT metric,
       {bucket} AS bucket,
       min(step) AS step,
       -- mean of the finite values; (CASE inside plain aggregates: ~20 % faster than FILTER here)
       sum(CASE WHEN isfinite(value) THEN value END) / count(CASE WHEN isfinite(value) THEN 1 END) AS value,
       count(*) - count(CASE WHEN isfinite(value) THEN 1 END) AS nonfinite
FROM raw GROUP BY ALL ORDER BY metric, bucket
"""


def step_range(store: Store, run: str, metrics: list[str]) -> tuple[int, int] | None:
    """(first, last) step over the given metrics of a run; None when none of them has data."""
    with store.read() as con:
        run_id = store.run_id(con, run)
        metrics = list(dict.fromkeys(metrics))
        if not metrics:
            return None
        (lo, hi, _, _), _ = _profile(con, store, run_id, metrics)
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
        run_id = store.run_id(con, run)
        (first, last, attempts, per_rank), ranges = _profile(con, store, run_id, metrics)
        if first is None:
            return pd.DataFrame({c: [] for c in COLUMNS})
        lo = int(first) if lo is None else lo
        hi = int(last) if hi is None else hi
        if hi < lo:
            lo, hi = hi, lo
        if attempts <= 1 and per_rank == 0:
            parts = [_m4_one_series(con, run_id, m, int(lo), int(hi), int(buckets), int(max_nonfinite),
                                    ranges.get(m, _ALL_ROWS)) for m in metrics]
            frame = pd.concat(parts, ignore_index=True).sort_values(["metric", "step"], kind="stable")
            return frame.reset_index(drop=True).astype(
                {"metric": str, "step": "int64", "value": "float64", "attempt": "int64", "latest": bool, "kind": str})
        sql = _M4_SQL.format(series=series_sql(_scan(len(metrics), True)), bucket=bucket_sql(int(lo), int(hi), buckets))
        frame = con.execute(sql, {"run": run_id, **_metric_params(metrics, ranges), "lo": int(lo), "hi": int(hi),
                                      "buckets": int(buckets), "max_nonfinite": int(max_nonfinite)}).df()
    return frame.astype({"metric": str, "step": "int64", "value": "float64", "attempt": "int64",
                         "latest": bool, "kind": str})


def _prefix_bounds(prefix: str) -> tuple[str, str]:
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def layer_heatmap(store: Store, run: str, prefix: str = LAYER_PREFIX, lo: int | None = None,
                  hi: int | None = None, buckets: int = 300) -> pd.DataFrame:
    """Per-layer series averaged into step buckets: (metric, bucket, step, value, nonfinite).

    ``value`` is the mean of the finite values in the bucket, ``nonfinite`` how many were not
    finite; ``step`` is the bucket's first step. Empty when the run has no metric with the prefix.
    """
    if not prefix:
        raise ValueError("layer_heatmap needs a metric-name prefix")
    p_lo, p_hi = _prefix_bounds(prefix)
    with store.read() as con:
        run_id = store.run_id(con, run)
        index = {m: r for m, r in _series_ranges(con, store, run_id).items() if m.startswith(prefix)}
        r0, r1 = (min(r[0] for r in index.values()), max(r[1] for r in index.values())) if index else _ALL_ROWS
        params = {"run": run_id, "p_lo": p_lo, "p_hi": p_hi, "r0": r0, "r1": r1}
        profile = ("SELECT min(step), max(step), 1 + (max(attempt) - min(attempt)), count(*), "
                   f"count(*) FILTER (WHERE rank <> {GLOBAL_RANK}) FROM scalars "
                   "WHERE rowid BETWEEN $r0 AND $r1 AND run_id = $run AND metric >= $p_lo AND metric < $p_hi")
        first, last, attempts, rows, per_rank = con.execute(profile, params).fetchall()[0]
        if index and rows != sum(r[2] for r in index.values()):  # rows moved: read without the range
            _SERIES_INDEX.clear()
            params.update(r0=_ALL_ROWS[0], r1=_ALL_ROWS[1])
            first, last, attempts, rows, per_rank = con.execute(profile, params).fetchall()[0]
        if first is None:
            return pd.DataFrame({c: [] for c in ["metric", "bucket", "step", "value", "nonfinite"]})
        lo = int(first) if lo is None else lo
        hi = int(last) if hi is None else hi
        rows = _HEATMAP_SCAN if attempts <= 1 and per_rank == 0 else \
            f"SELECT metric, step, value FROM ({series_sql(_HEATMAP_SCAN)}) WHERE latest"
        sql = _HEATMAP_SQL.format(rows=rows, bucket=bucket_sql(int(lo), int(hi), int(buckets)))
        return con.execute(sql, {**params, "lo": int(lo), "hi": int(hi), "buckets": int(buckets)}).df()


def has_wall_time(store: Store, run: str) -> bool:
    """Whether the log carries wall times (one row is enough: no scan of the run)."""
    with store.read() as con:
        run_id = store.run_id(con, run)
        return con.execute("SELECT 1 FROM scalars WHERE run_id = ? AND wall_time IS NOT NULL "
                           "AND isfinite(wall_time) LIMIT 1", [run_id]).fetchone() is not None


def step_times(store: Store, run: str, metrics: list[str] | None = None) -> pd.DataFrame:
    """step, wall_time (seconds since the epoch: the earliest logged at that step) of a run, read
    from ``metrics`` (default: all), for a wall-clock x axis; empty when the log carries no times."""
    with store.read() as con:
        run_id = store.run_id(con, run)
        where = "run_id = $run AND wall_time IS NOT NULL AND isfinite(wall_time)"
        params: dict = {"run": run_id}
        if metrics:
            where += " AND list_contains($metrics, metric)"
            params["metrics"] = list(metrics)
        return con.execute(f"SELECT step, min(wall_time) AS wall_time FROM scalars WHERE {where} "
                           "GROUP BY step ORDER BY step", params).df()
