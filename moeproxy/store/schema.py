"""The run database's tables (``_SCHEMA``), its schema version and where the file lives by default."""

from __future__ import annotations

import os
from pathlib import Path



SCHEMA_VERSION = 3  # 2: attempt INTEGER (was SMALLINT: 32,767 restarts), sources.bytes (bytes parsed);
# 3: watch_files (how far `moeproxy watch` read each file, committed with its rows) and alerts
ATTEMPT_MAX = 2**31 - 1
TABLES = ("meta", "runs", "sources", "metric_names", "scalars", "routing", "findings", "watch_files", "alerts")

# A watched file's running totals (``sources``) and position (``watch_files``) change every cycle. On a
# file store they are updated in place; on a DuckLake catalog each cycle appends a new version of the
# row instead (two transactions that UPDATE one table conflict there, whatever the rows: many watchers
# would keep failing each other's commits), and readers take the latest version of each source.
LATEST_SOURCES = ("(SELECT * FROM sources QUALIFY row_number() OVER "
                  "(PARTITION BY source_id ORDER BY ingested_at DESC NULLS LAST) = 1)")
LATEST_WATCH_FILES = ("(SELECT * FROM watch_files QUALIFY row_number() OVER "
                      "(PARTITION BY source_id ORDER BY updated_at DESC NULLS LAST) = 1)")
LATEST = {"sources": LATEST_SOURCES, "watch_files": LATEST_WATCH_FILES}
# every write of a file store; on a catalog only a write that takes new ids (see Transaction._next_ids)
BUMP_DATA_VERSION = "UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS VARCHAR) WHERE key='data_version'"

_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS run_id_seq START 1;
CREATE SEQUENCE IF NOT EXISTS source_id_seq START 1;
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY, name VARCHAR UNIQUE NOT NULL, role VARCHAR NOT NULL,
    proxy_of VARCHAR, framework VARCHAR, format VARCHAR, created_at TIMESTAMPTZ, meta JSON);
CREATE TABLE IF NOT EXISTS sources (
    source_id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, path VARCHAR, sha256 VARCHAR NOT NULL,
    format VARCHAR, framework VARCHAR, rows BIGINT, steps BIGINT, metrics INTEGER, nonfinite BIGINT,
    attempts INTEGER, skipped_lines BIGINT, step_from_index BOOLEAN, ingested_at TIMESTAMPTZ, bytes BIGINT);
CREATE TABLE IF NOT EXISTS metric_names (run_id INTEGER NOT NULL, metric VARCHAR NOT NULL, original VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS scalars (
    run_id INTEGER NOT NULL, metric VARCHAR NOT NULL, step BIGINT NOT NULL, value DOUBLE,
    attempt INTEGER NOT NULL, rank INTEGER NOT NULL, wall_time DOUBLE, source_id INTEGER);
CREATE TABLE IF NOT EXISTS routing (
    run_id INTEGER NOT NULL, step BIGINT NOT NULL, layer INTEGER NOT NULL, expert INTEGER NOT NULL,
    load DOUBLE, attempt INTEGER NOT NULL, source_id INTEGER);
CREATE TABLE IF NOT EXISTS findings (
    run_id INTEGER NOT NULL, detector_version VARCHAR, created_at TIMESTAMPTZ, verdict VARCHAR,
    onset_step BIGINT, result JSON);
""" + """
CREATE TABLE IF NOT EXISTS watch_files (
    source_id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, path VARCHAR NOT NULL, device UBIGINT, inode UBIGINT,
    position BIGINT NOT NULL, lines BIGINT NOT NULL, format VARCHAR, header BLOB, index_base BIGINT NOT NULL,
    updated_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS alerts (
    run_id INTEGER NOT NULL, verdict VARCHAR NOT NULL, onset_step BIGINT, raised_at TIMESTAMPTZ, alert JSON);
"""


CATALOG_PREFIX = "ducklake:"


def is_catalog(target) -> bool:
    """A DuckLake catalog string (``ducklake:postgres:...`` or ``ducklake:FILE``), not a file path."""
    return isinstance(target, str) and target.startswith(CATALOG_PREFIX)


def catalog_file(target: str) -> Path | None:
    """The catalog file of a local catalog (``ducklake:FILE``), None for a PostgreSQL one."""
    rest = target[len(CATALOG_PREFIX):]
    return None if rest.startswith(("postgres:", "postgresql:")) else Path(rest).expanduser()


def resolve_db(db) -> str | Path:
    """The store a ``--db`` value names: a DuckLake catalog string as it is, ``:memory:``, or a file
    path (``~`` expanded); None: the default (``default_db_path``)."""
    if db is None or str(db) == "":
        return default_db_path()
    if is_catalog(str(db)) or str(db) == ":memory:":
        return str(db)
    return Path(db).expanduser()


def store_exists(db) -> bool:
    """Whether the store holds anything yet: a file that exists, or any catalog (a PostgreSQL one
    is there once attached; a local one once its file is)."""
    target = resolve_db(db)
    if isinstance(target, Path):
        return target.exists()
    if is_catalog(target):
        local = catalog_file(target)
        return local is None or local.exists()
    return True


def default_db_path() -> str | Path:
    env = os.environ.get("MOEPROXY_DB")
    if env:
        return env if is_catalog(env) else Path(env).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "moeproxy" / "runs.duckdb"
