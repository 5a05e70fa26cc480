"""The run store: one DuckDB file (or a DuckLake catalog), and the only package that writes SQL against it.

- ``schema.py``: the tables, the schema version, where the file lives by default;
- ``database.py``: ``Store`` — opening the file, taking turns on it with other processes, and the
  reads every caller uses (runs, series, findings, alerts, what is live);
- ``write.py``: the ``Transaction`` a ``Store.write()`` block gets (every insert and update);
- ``series.py``: how a run's series is read (latest attempt, global value over per-rank values);
- ``downsample.py``: the views' reads (M4 downsampling, the per-layer heatmap, step times);
- ``lake.py``: a DuckLake catalog (PostgreSQL or a local file) with Parquet data, the same store;
- ``copy.py``: ``copy_store`` — every table from one store to another (file <-> catalog), counts checked.

Everything a caller needs is importable from ``moeproxy.store``.
"""

from moeproxy.contracts import GLOBAL_RANK, ROLES
from moeproxy.store.database import LIVE_SECONDS, OutputError, Store
from moeproxy.store.schema import ATTEMPT_MAX, SCHEMA_VERSION, _SCHEMA, default_db_path, resolve_db, store_exists
from moeproxy.store.series import read_series, series_sql
from moeproxy.store.write import Transaction, _grouped_order

__all__ = ["ATTEMPT_MAX", "GLOBAL_RANK", "LIVE_SECONDS", "OutputError", "ROLES", "SCHEMA_VERSION", "Store",
           "Transaction", "_SCHEMA", "_grouped_order", "default_db_path", "read_series", "resolve_db", "series_sql",
           "store_exists"]
