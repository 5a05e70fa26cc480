"""Parquet tables of metrics: what `moeproxy export --to X.parquet` writes, and wide history tables
(a W&B run history saved with ``run.history().to_parquet(...)``, a pandas or DuckDB dump).

- Long form (the export): columns ``step``, ``metric``, ``value`` and optionally ``original`` (the
  name as logged, preferred to the canonical one), ``attempt``, ``rank``, ``wall_time``; each row is
  one value, read back exactly as it was stored (attempts and ranks kept).
- Wide form: a step column (the vocabulary's step keys, W&B's ``_step`` among them; else the row
  index is the step) and one numeric column per metric. A null cell is "not logged at this
  step"; NaN and inf are values. Text and boolean columns are not metrics.

The file is read once, from memory, so the bytes parsed are the bytes hashed.
"""

from __future__ import annotations

import io

import numpy as np

from moeproxy.columns import Columns
from moeproxy.errors import InputError
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import build_columns
from moeproxy.vocabulary import STEP_KEYS

MAGIC = b"PAR1"
LONG = ("step", "metric", "value")


def _column(table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values as float64, present) of a numeric column; nulls are absent."""
    col = table.column(name)
    present = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(col.cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
    return values, present


def _is_numeric(field) -> bool:
    import pyarrow.types as pt

    return (pt.is_integer(field.type) or pt.is_floating(field.type) or pt.is_decimal(field.type)) \
        and not pt.is_boolean(field.type)


def _long(table, src: SourceFile) -> tuple[Columns, int]:
    """The export's rows, as stored; rows without a step or a name are skipped (counted)."""
    names_col = "original" if "original" in table.column_names else "metric"
    step, has_step = _column(table, "step")
    value, _ = _column(table, "value")
    metric = table.column(names_col).cast("string").to_pylist()
    ok = has_step & np.isfinite(step) & np.array([m is not None for m in metric], dtype=bool)
    n = int(ok.sum())
    names, codes = np.unique(np.array([m for m, k in zip(metric, ok) if k], dtype=object), return_inverse=True)

    def per_row(name: str, default: float, dtype) -> np.ndarray:
        if name not in table.column_names:
            return np.full(n, default, dtype=dtype)
        vals, here = _column(table, name)
        return np.where(here, vals, default)[ok].astype(dtype)

    rows = Columns(step[ok].astype(np.int64), codes.astype(np.int32), [str(x) for x in names], value[ok],
                   per_row("attempt", 0, np.int32), per_row("rank", -1, np.int32), per_row("wall_time", np.nan, np.float64))
    return rows, len(step) - n


def _wide(table) -> tuple[Columns, int, bool]:
    """A history table's rows: one record per row with a step, its present numeric cells."""
    fields = {f.name: f for f in table.schema}
    step_col = next((k for k in STEP_KEYS if k in fields and _is_numeric(fields[k])), None)
    metrics = [c for c in table.column_names if c != step_col and _is_numeric(fields[c])]
    if not metrics:
        raise InputError("no numeric column to read as a metric")
    n = table.num_rows
    if step_col is None:
        steps, stepped = np.arange(n, dtype=np.int64), np.ones(n, dtype=bool)
    else:
        raw, stepped = _column(table, step_col)
        stepped &= np.isfinite(raw) & (raw == np.round(raw))
        steps = np.where(stepped, raw, 0).astype(np.int64)
    cells = [_column(table, c) for c in metrics]
    values = np.column_stack([v for v, _ in cells])
    present = np.column_stack([p for _, p in cells]) & stepped[:, None]
    counts = present.sum(axis=1)
    kept = counts > 0
    codes = np.broadcast_to(np.arange(len(metrics), dtype=np.int32), present.shape)[present]
    k = int(kept.sum())
    rows = build_columns(steps[kept], np.full(k, -1, dtype=np.int64), np.full(k, np.nan), counts[kept], codes,
                         metrics, values[present])
    return rows, int((~stepped).sum()), step_col is None


def parse_parquet(src: SourceFile) -> ParsedLog:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = b"".join(src.read_binary())
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{src.path}: malformed Parquet file ({str(exc).splitlines()[0]})") from None
    try:
        if set(LONG) <= set(table.column_names):
            rows, skipped = _long(table, src)
            from_index = False
        else:
            rows, skipped, from_index = _wide(table)
    except InputError as exc:
        raise InputError(f"{src.path}: {exc}") from None
    return ParsedLog(src.path, "parquet", guess_framework(rows.names), src.sha256, rows, skipped, from_index)


def sniff_parquet(src: SourceFile) -> float:
    return 0.99 if src.head[:4] == MAGIC else 0.0


register(LogFormat("parquet", "Parquet tables: moeproxy's own export, W&B run histories, pandas/DuckDB dumps",
                   sniff_parquet, parse_parquet, binary=True, top_score=0.99, appendable=False, priority=55))
