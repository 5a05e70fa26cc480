"""The run store: one DuckDB file, and the only module that writes SQL against it.

Tables: ``runs`` (name, role full|proxy|other, proxy_of, framework, format, meta), ``sources``
(each ingested file with its sha256), ``metric_names`` (stored name <- original name, per run),
``scalars`` in long form (run, metric, step, value, attempt, rank, wall_time, source),
``routing`` (run, step, layer, expert, load), ``findings`` (diagnoses with detector version),
``watch_files`` (for each file ``moeproxy watch`` follows: the byte position and line count reached,
written in the transaction that stores the rows read up to there), ``alerts`` (the alerts the
watcher raised, so a restarted watcher raises none twice) and ``meta`` (schema version, a
data-version counter for caches). Background jobs keep their state in
their job folders (``moeproxy.jobs``), not here: a worker never needs the database's single
writer slot while the dashboard reads.
NaN and +-inf are values: stored as such (inserted through Arrow, which keeps them), never NULL.

Lifecycle and concurrency: every operation opens the file, works, and closes it again, so the
dashboard and ``moeproxy ingest`` take turns. DuckDB allows one process on a
file at a time; a process that finds the file locked retries for ``lock_timeout`` seconds and
then raises ``StoreBusy`` naming the holder. Writes happen in one transaction (``Store.write()``),
so readers never see a half-ingested run and a failed ingest leaves the store as it was.
``Store(":memory:")`` keeps one private in-memory database for the object's lifetime.

Path resolution: the explicit path (``--db``), else ``$MOEPROXY_DB``, else
``$XDG_DATA_HOME/moeproxy/runs.duckdb`` (``~/.local/share/moeproxy/runs.duckdb``).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import numpy as np
import pyarrow as pa

from moeproxy.columns import Columns, arrow_array, arrow_strings, as_columns
from moeproxy.contracts import GLOBAL_RANK, ROLES  # noqa: F401  (ROLES re-exported)
from moeproxy.errors import InputError, NotFound, StoreBusy, StoreUnavailable
from moeproxy.lazy import LazyModule

pd = LazyModule("pandas")  # imported on first use: storing parsed rows needs no pandas

SCHEMA_VERSION = 3  # 2: attempt INTEGER (was SMALLINT: 32,767 restarts), sources.bytes (bytes parsed);
# 3: watch_files (how far `moeproxy watch` read each file, committed with its rows) and alerts
ATTEMPT_MAX = 2**31 - 1
LIVE_SECONDS = 60  # a run a watcher stored rows of within this long is live

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


def default_db_path() -> Path:
    env = os.environ.get("MOEPROXY_DB")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "moeproxy" / "runs.duckdb"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _first(result):
    """The first row of a result, reading it to the end (DuckDB 2 results stream: an unfinished
    result blocks the connection)."""
    rows = result.fetchall()
    return rows[0] if rows else None


def series_sql(rows: str) -> str:
    """The one definition of how a stored series is read, as SQL over ``rows`` (a SELECT with the
    columns metric, step, attempt, rank, value).

    One row per (metric, step, attempt) with columns metric, step, attempt, value, latest: the
    value is the global value (rank ``GLOBAL_RANK``) when that attempt wrote one at that step, else
    the mean over its ranks (a NaN on any rank stays NaN, +inf with finite ones stays +inf);
    ``latest`` marks the last attempt that wrote the metric at that step, the one a reader shows.
    ``Store.run_frame``, ``moeproxy.downsample`` and ``read_series`` (frames never stored) all read
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


_LOCK_HOLDER = re.compile(r"\(PID (\d+)\)")


class OutputError(InputError):
    """An export's output could not be written (``str``: the reason, without the path)."""


class Store:
    def __init__(self, path: str | Path | None = None, *, lock_timeout: float = 15.0) -> None:
        self.lock_timeout = lock_timeout
        self._held = None
        if str(path) == ":memory:":
            self.path = None
            self._memory = duckdb.connect(":memory:")
            self._memory.execute(_SCHEMA)
            self._init_meta(self._memory)
        else:
            self.path = Path(path).expanduser() if path is not None else default_db_path()
            self._memory = None

    def __repr__(self) -> str:
        return f"Store({str(self.path) if self.path else ':memory:'})"

    @property
    def label(self) -> str:
        return str(self.path) if self.path else ":memory:"

    # -- connections -------------------------------------------------------------------
    @staticmethod
    def _init_meta(con) -> None:
        con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?), ('data_version', '0')",
                    [str(SCHEMA_VERSION)])

    def _open(self):
        deadline = time.monotonic() + self.lock_timeout
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a parent that is a file, a folder that cannot be written
            raise InputError(f"{self.path}: cannot create the run database's folder {self.path.parent} "
                             f"({exc.strerror or exc})") from None
        if self.path.exists() and not self.path.is_file():
            raise InputError(f"{self.path}: not a regular file; the run database must be a file")
        delay = 0.02
        while True:
            try:
                con = duckdb.connect(str(self.path))
                break
            except duckdb.IOException as exc:
                message = str(exc)
                if "lock" not in message.lower():
                    raise InputError(f"{self.path}: cannot open the run database ({message.splitlines()[0]})") from None
                if time.monotonic() >= deadline:
                    holder = _LOCK_HOLDER.search(message)
                    who = f"process {holder.group(1)}" if holder else "another process"
                    raise StoreBusy(
                        f"{self.path} is in use by {who} (a dashboard, an ingest or a job) and stayed locked "
                        f"for {self.lock_timeout:.0f} s; try again when it is done"
                    ) from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
            except duckdb.Error as exc:
                raise InputError(f"{self.path}: not a moeproxy run database ({str(exc).splitlines()[0]})") from None
        try:  # a plain read (an information_schema join cost ~8 ms on every open); no meta table: new file
            version = _first(con.execute("SELECT value FROM meta WHERE key='schema_version'"))
        except duckdb.CatalogException:
            version = None
        except duckdb.Error as exc:
            con.close()
            raise self.unreadable(exc) from None
        if version is None:
            tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                                "WHERE table_schema = 'main'").fetchall()]
            if tables:  # a user's own DuckDB database: never add moeproxy's tables to it
                con.close()
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise InputError(f"{self.path}: a DuckDB database that is not a moeproxy run database (it holds "
                                 f"{shown}); nothing was changed; choose another --db")
            con.execute(_SCHEMA)
            self._init_meta(con)
        elif version[0] != str(SCHEMA_VERSION):
            self._migrate(con, version[0])
        return con

    def _migrate(self, con, version: str) -> None:
        """Bring a store of an older schema up to this one, in place (one transaction)."""
        if version not in ("1", "2"):
            con.close()
            raise InputError(f"{self.path}: run database of schema {version}, this moeproxy knows up to "
                             f"{SCHEMA_VERSION}; upgrade moeproxy or use another --db")
        con.execute("BEGIN TRANSACTION")
        if version == "1":
            con.execute("ALTER TABLE sources ADD COLUMN IF NOT EXISTS bytes BIGINT")
            con.execute("ALTER TABLE scalars ALTER attempt SET DATA TYPE INTEGER")
            con.execute("ALTER TABLE routing ALTER attempt SET DATA TYPE INTEGER")
        con.execute(_SCHEMA)  # 2 -> 3: the new tables (watch_files, alerts); existing ones are kept
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
        con.execute("COMMIT")

    def unreadable(self, exc: BaseException) -> StoreUnavailable:
        """The one-line error for a store file DuckDB cannot read or write (damaged, truncated,
        disk full): nothing was changed by the command that met it."""
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "space left" in first.lower():
            why = "the disk is full"
        elif isinstance(exc, duckdb.TransactionException):
            why = "the transaction could not commit"
        else:
            why = "damaged or truncated?"
        return StoreUnavailable(f"{self.path}: cannot use the run database ({why}: {first}); nothing was changed")

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """DuckDB's I/O and internal errors on a file store (a damaged or truncated file, a full
        disk) become ``unreadable``'s one line instead of a traceback."""
        try:
            yield
        except (duckdb.IOException, duckdb.InternalException, duckdb.SerializationException,
                duckdb.TransactionException) as exc:  # a commit whose write-ahead log hit a full disk
            if self._memory is not None:
                raise
            raise self.unreadable(exc) from None

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep the file open across several reads and writes (one watcher cycle): inside, ``read()``
        and ``write()`` use cursors of one connection, and the file is released on exit. Hold it
        briefly: no other process can open the database meanwhile."""
        if self._memory is not None or self._held is not None:
            yield
            return
        with self._guarded():
            self._held = self._open()
            try:
                yield
            finally:
                held, self._held = self._held, None
                held.close()

    def _connect(self):
        """A connection of its own, or a cursor of the held one."""
        held = self._held
        return held.cursor() if held is not None else self._open()

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for queries; closed (and the file released) on exit. A store that does not
        exist yet reads as an empty one: a read never creates the file or its folders."""
        if self._memory is not None:
            with self._memory.cursor() as cur:
                yield cur
            return
        if self._held is None and not self.path.exists():
            con = duckdb.connect(":memory:")
            con.execute(_SCHEMA)
            self._init_meta(con)
            try:
                yield con
            finally:
                con.close()
            return
        with self._guarded():
            con = self._connect()
            try:
                yield con
            finally:
                con.close()

    @contextmanager
    def write(self) -> Iterator["Transaction"]:
        """One transaction: committed on normal exit, rolled back on any exception."""
        with self._guarded():
            cm = self._memory.cursor() if self._memory is not None else None
            con = cm if cm is not None else self._connect()
            try:
                con.execute("BEGIN TRANSACTION")
                tx = Transaction(con)
                try:
                    yield tx
                except BaseException:
                    try:
                        con.execute("ROLLBACK")
                    except duckdb.Error:  # a transaction DuckDB already aborted (disk full): nothing to undo
                        pass
                    raise
                con.execute("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS VARCHAR) WHERE key='data_version'")
                con.execute("COMMIT")
            finally:
                con.close()

    # -- queries -------------------------------------------------------------------------
    def data_version(self) -> int:
        with self.read() as con:
            return int(_first(con.execute("SELECT value FROM meta WHERE key='data_version'"))[0])

    def runs(self) -> pd.DataFrame:
        """One row per run with its size and latest verdict."""
        with self.read() as con:
            return con.execute(
                """
                WITH s AS (
                    SELECT run_id, count(DISTINCT step) AS steps, count(DISTINCT metric) AS metrics,
                           count(*) AS rows, count(*) FILTER (WHERE NOT isfinite(value)) AS nonfinite,
                           count(DISTINCT attempt) AS attempts, max(step) AS last_step
                    FROM scalars GROUP BY run_id),
                f AS (SELECT run_id, arg_max(verdict, created_at) AS verdict,
                             arg_max(onset_step, created_at) AS onset_step FROM findings GROUP BY run_id)
                SELECT r.name AS run, r.role, r.proxy_of, r.framework, r.format,
                       coalesce(CAST(json_extract(r.meta, '$.tags') AS VARCHAR[]), []) AS tags,
                       coalesce(s.steps, 0) AS steps, coalesce(s.metrics, 0) AS metrics,
                       coalesce(s.rows, 0) AS rows, coalesce(s.nonfinite, 0) AS nonfinite,
                       coalesce(s.attempts, 0) AS attempts, s.last_step, f.verdict, f.onset_step, r.created_at
                FROM runs r LEFT JOIN s USING (run_id) LEFT JOIN f USING (run_id)
                ORDER BY r.created_at, r.run_id
                """
            ).df()

    def run_id(self, con, run: str) -> int:
        """The integer id of a run on an open connection (``read()``/``write()``); NotFound lists the runs."""
        row = _first(con.execute("SELECT run_id FROM runs WHERE name = ?", [run]))
        if row is None:
            known = [r[0] for r in con.execute("SELECT name FROM runs ORDER BY run_id").fetchall()]
            hint = f"; runs in {self.label}: {', '.join(known[:10])}" if known else f"; {self.label} has no runs"
            raise NotFound(f"no run named {run!r}{hint}")
        return int(row[0])

    _run_id = run_id

    def has_run(self, run: str) -> bool:
        with self.read() as con:
            return _first(con.execute("SELECT 1 FROM runs WHERE name = ?", [run])) is not None

    def run_info(self, run: str) -> dict:
        table = self.runs()
        row = table[table["run"] == run]
        if row.empty:
            with self.read() as con:
                self._run_id(con, run)  # raises NotFound with the list of runs
        info = row.iloc[0].to_dict()
        with self.read() as con:
            run_id = self._run_id(con, run)
            info["sources"] = con.execute(
                "SELECT path, sha256, format, framework, rows, steps, metrics, nonfinite, attempts, skipped_lines, "
                "step_from_index, ingested_at, bytes FROM sources WHERE run_id = ? ORDER BY source_id", [run_id]
            ).df().to_dict("records")
            meta = _first(con.execute("SELECT meta FROM runs WHERE run_id = ?", [run_id]))[0]
        info["meta"] = json.loads(meta) if meta else {}
        return info

    def metrics(self, run: str) -> pd.DataFrame:
        """Stored metric names of a run with their original names and point counts."""
        with self.read() as con:
            run_id = self._run_id(con, run)
            return con.execute(
                """
                SELECT m.metric, string_agg(DISTINCT m.original, ', ') AS original, s.points, s.nonfinite
                FROM metric_names m JOIN (
                    SELECT metric, count(*) AS points, count(*) FILTER (WHERE NOT isfinite(value)) AS nonfinite
                    FROM scalars WHERE run_id = $run GROUP BY metric) s USING (metric)
                WHERE m.run_id = $run GROUP BY m.metric, s.points, s.nonfinite ORDER BY m.metric
                """,
                {"run": run_id},
            ).df()

    def metric_names_by_run(self) -> dict[str, set[str]]:
        """run -> its stored metric names, for every run (from the name table: no value is read)."""
        with self.read() as con:
            rows = con.execute("SELECT r.name, list(DISTINCT m.metric) FROM runs r "
                               "LEFT JOIN metric_names m USING (run_id) GROUP BY r.name").fetchall()
        return {name: {m for m in (metrics or []) if m is not None} for name, metrics in rows}

    def run_frame(self, run: str, metrics: list[str] | None = None) -> pd.DataFrame:
        """Long form (step, metric, value): one value per step, read by ``series_sql`` (latest
        attempt; a global value wins over per-rank values at that step, else the mean over ranks)."""
        with self.read() as con:
            run_id = self._run_id(con, run)
            params: dict = {"run": run_id}
            where = ""
            if metrics is not None:
                where = "AND list_contains($metrics, metric)"
                params["metrics"] = list(metrics)
            rows = f"SELECT metric, step, attempt, rank, value FROM scalars WHERE run_id = $run {where}"
            return con.execute(
                f"SELECT step, metric, value FROM ({series_sql(rows)}) WHERE latest ORDER BY metric, step", params,
            ).df().astype({"step": "int64", "metric": str, "value": "float64"})

    def step_span(self, run: str) -> tuple[int, int] | None:
        """(first, last) step the run logged any metric at; None for a run without rows."""
        with self.read() as con:
            lo, hi = con.execute("SELECT min(step), max(step) FROM scalars WHERE run_id = ?",
                                 [self._run_id(con, run)]).fetchone()
        return None if lo is None else (int(lo), int(hi))

    def series(self, run: str, metric: str, attempts: str = "latest") -> pd.DataFrame:
        """One metric's stored rows with their attempt and rank columns (``attempts='latest'``: the
        rows of the latest attempt at each step, as ``series_sql`` reads them; ``'all'``: every restart)."""
        with self.read() as con:
            run_id = self._run_id(con, run)
            qualify = ("QUALIFY attempt = max(attempt) OVER (PARTITION BY step)" if attempts == "latest" else "")
            return con.execute(
                f"SELECT step, value, attempt, rank, wall_time FROM scalars WHERE run_id = ? AND metric = ? "
                f"{qualify} ORDER BY attempt, rank, step",
                [run_id, metric],
            ).df()

    def routing(self, run: str) -> pd.DataFrame:
        """Expert load per (step, layer, expert), latest attempt per step."""
        with self.read() as con:
            run_id = self._run_id(con, run)
            return con.execute(
                "SELECT step, layer, expert, load FROM routing WHERE run_id = ? "
                "QUALIFY row_number() OVER (PARTITION BY layer, expert, step ORDER BY attempt DESC) = 1 "
                "ORDER BY layer, expert, step",
                [run_id],
            ).df()

    def findings(self, run: str) -> dict | None:
        with self.read() as con:
            run_id = self._run_id(con, run)
            row = _first(con.execute(
                "SELECT result, detector_version FROM findings WHERE run_id = ? ORDER BY created_at DESC LIMIT 1",
                [run_id],
            ))
        if row is None:
            return None
        result = json.loads(row[0])
        result.setdefault("detector_version", row[1])
        return result

    def export(self, run: str, target: str | Path, series: bool = False) -> int:
        """Write every stored row of a run (all attempts and ranks, original names) to CSV or
        Parquet, or with ``series`` one row per (metric, step) as the run is read (``series_sql``,
        the values the dashboard and the diagnosis see); returns the number of rows written."""
        target = Path(target)
        kind = {".csv": "csv", ".parquet": "parquet"}.get(target.suffix.lower())
        if kind is None:
            raise InputError(f"{target}: export writes .csv or .parquet files")
        target.parent.mkdir(parents=True, exist_ok=True)  # a library caller's new folder (the CLI's exists)
        with self.read() as con:
            run_id = int(self._run_id(con, run))  # an int: safe to place in the statement
            rows = f"SELECT metric, step, attempt, rank, value FROM scalars WHERE run_id = {run_id}"
            if series:
                body = f"SELECT step, metric, value FROM ({series_sql(rows)}) WHERE latest"
                columns, order = "s.step, s.metric, coalesce(m.original, s.metric) AS original, s.value", "s.step"
            else:
                body = f"SELECT step, metric, value, attempt, rank, wall_time FROM scalars WHERE run_id = {run_id}"
                columns = ("s.step, s.metric, coalesce(m.original, s.metric) AS original, s.value, s.attempt, "
                           "s.rank, s.wall_time")
                order = "s.attempt, s.rank, s.step"
            rel = con.sql(
                f"""
                SELECT {columns}
                FROM ({body}) s LEFT JOIN (SELECT metric, min(original) AS original FROM metric_names
                                           WHERE run_id = {run_id} GROUP BY metric) m USING (metric)
                ORDER BY s.metric, {order}
                """
            )
            try:
                rel.write_csv(str(target)) if kind == "csv" else rel.write_parquet(str(target))
            except duckdb.IOException as exc:
                # writing the output failed (a full disk), not reading the store: the output's fault,
                # named as such (the caller names the file the user gave)
                reason = "No space left on device" if "space left" in str(exc).lower() else \
                    " ".join(str(exc).replace(str(target), "it").split())[:300]
                raise OutputError(reason) from None
            return int(_first(con.execute(f"SELECT count(*) FROM ({body})"))[0])

    # -- writes that are not ingests --------------------------------------------------------
    def save_findings(self, run: str, result: dict, detector_version: str) -> None:
        with self.write() as tx:
            tx.add_findings(self._run_id(tx.con, run), result, detector_version)

    # -- what `moeproxy watch` keeps -------------------------------------------------------------
    def watch_positions(self) -> list[dict]:
        """Every file a watcher followed: run, path, device/inode, the byte position and line count
        reached, format, header, index base, and its source's totals and sha256 of [0, position)."""
        with self.read() as con:
            return con.execute(
                "SELECT w.*, r.name AS run, s.sha256, s.rows, s.steps, s.metrics, s.nonfinite, s.attempts, "
                "s.skipped_lines FROM watch_files w JOIN runs r USING (run_id) "
                "JOIN sources s USING (source_id) ORDER BY w.source_id").df().to_dict("records")

    def alerts(self, run: str | None = None, since: datetime | None = None) -> list[dict]:
        """The alerts raised (the JSON objects, oldest first), of one run or of all; with ``since``,
        only those raised from then on."""
        with self.read() as con:
            conditions, params = [], []
            if run is not None:
                conditions.append("r.name = ?")
                params.append(run)
            if since is not None:
                conditions.append("a.raised_at >= ?")
                params.append(since)
            where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
            rows = con.execute(f"SELECT a.alert FROM alerts a JOIN runs r USING (run_id) {where} "
                               "ORDER BY a.raised_at", params).fetchall()
        return [json.loads(r[0]) for r in rows]

    def watched_runs(self) -> pd.DataFrame:
        """run, last_update: when a watcher last stored rows of each run it follows."""
        with self.read() as con:
            return con.execute("SELECT r.name AS run, max(w.updated_at) AS last_update FROM watch_files w "
                               "JOIN runs r USING (run_id) GROUP BY r.name ORDER BY r.name").df()

    def live_runs(self, seconds: float = LIVE_SECONDS) -> frozenset[str]:
        """The runs a ``moeproxy watch`` stored rows of in the last ``seconds``: what "live" means
        wherever a run is shown (the dashboard's badge and refresh)."""
        watched = self.watched_runs()
        if watched.empty:
            return frozenset()
        now = pd.Timestamp.now(tz="UTC")
        last = pd.to_datetime(watched["last_update"], utc=True)
        return frozenset(watched.loc[(now - last).dt.total_seconds() <= seconds, "run"])

    def set_role(self, run: str, role: str, proxy_of: str | None = None) -> None:
        """Mark a run full/proxy/other; a proxy may name the full run it stands in for."""
        if role not in ROLES:
            raise InputError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        with self.write() as tx:
            self._run_id(tx.con, run)
            if proxy_of is not None:
                if proxy_of == run:
                    raise InputError(f"run {run!r} cannot be a proxy of itself")
                self._run_id(tx.con, proxy_of)
            tx.con.execute("UPDATE runs SET role = ?, proxy_of = ? WHERE name = ?", [role, proxy_of, run])

    def set_tags(self, run: str, tags) -> list[str]:
        """Replace a run's tags (kept in the run's ``meta``): stripped, printable, at most 20 of 40
        characters each, without duplicates; returns them."""
        clean: list[str] = []
        for tag in tags:
            tag = "".join(c for c in str(tag) if c.isprintable()).strip()[:40]
            if tag and tag not in clean:
                clean.append(tag)
        clean = clean[:20]
        with self.write() as tx:
            run_id = self._run_id(tx.con, run)
            meta = _first(tx.con.execute("SELECT meta FROM runs WHERE run_id = ?", [run_id]))[0]
            meta = json.loads(meta) if meta else {}
            meta["tags"] = clean
            tx.con.execute("UPDATE runs SET meta = ? WHERE run_id = ?", [json.dumps(meta), run_id])
        return clean

    def delete_run(self, run: str) -> None:
        with self.write() as tx:
            run_id = self._run_id(tx.con, run)
            for table in ("scalars", "routing", "metric_names", "sources", "findings", "watch_files", "alerts"):
                tx.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
            tx.con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
            tx.con.execute("UPDATE runs SET proxy_of = NULL WHERE proxy_of = ?", [run])

    def runs_overview(self) -> pd.DataFrame:
        """``runs()`` without scanning the values (for the dashboard's run list on large stores):
        sizes come from the per-file ingest summaries (steps: the largest file's step count; rows,
        non-finite: sums; attempts: the most of any file) and the metric-name table."""
        with self.read() as con:
            return con.execute(
                """
                WITH s AS (SELECT run_id, max(steps) AS steps, sum(rows) AS rows, sum(nonfinite) AS nonfinite,
                                  max(attempts) AS attempts FROM sources GROUP BY run_id),
                m AS (SELECT run_id, count(DISTINCT metric) AS metrics FROM metric_names GROUP BY run_id),
                f AS (SELECT run_id, arg_max(verdict, created_at) AS verdict,
                             arg_max(onset_step, created_at) AS onset_step FROM findings GROUP BY run_id)
                SELECT r.name AS run, r.role, r.proxy_of, r.framework, r.format,
                       coalesce(CAST(json_extract(r.meta, '$.tags') AS VARCHAR[]), []) AS tags,
                       coalesce(s.steps, 0) AS steps, coalesce(m.metrics, 0) AS metrics,
                       coalesce(s.rows, 0) AS rows, coalesce(s.nonfinite, 0) AS nonfinite,
                       coalesce(s.attempts, 0) AS attempts, f.verdict, f.onset_step, r.created_at
                FROM runs r LEFT JOIN s USING (run_id) LEFT JOIN m USING (run_id) LEFT JOIN f USING (run_id)
                ORDER BY r.created_at, r.run_id
                """
            ).df()


def _metric_array(rows: Columns) -> pa.Array:
    """The metric-name column of rows as a dictionary-encoded Arrow array."""
    return pa.DictionaryArray.from_arrays(arrow_array(rows.code), arrow_strings(rows.names))


class Transaction:
    """Write operations of one ingest, inside ``Store.write()``."""

    def __init__(self, con) -> None:
        self.con = con

    # -- many files in one transaction (``moeproxy.ingest.batch``): a few statements, not a few per file
    def sources_with_shas(self, shas: list[str]) -> dict[str, tuple[str, str]]:
        """sha256 -> (run, path) of the first-stored file with that content, for each of ``shas``
        already stored, in one query."""
        return {sha: (run, path) for sha, run, path in self.con.execute(
            "SELECT s.sha256, arg_min(r.name, s.source_id), arg_min(s.path, s.source_id) FROM sources s "
            "JOIN runs r USING (run_id) WHERE list_contains(?, s.sha256) GROUP BY s.sha256", [list(shas)]).fetchall()}

    def add_runs(self, runs: list[tuple[str, str, str]]) -> dict[str, int]:
        """New runs (name, framework, format) of role 'other', none of which exists yet (the caller
        checked with ``run_ids``), in one statement; name -> run id, ids in the order given."""
        if not runs:
            return {}
        ids = self._next_ids("run_id_seq", len(runs))
        table = pa.table({"run_id": arrow_array(np.asarray(ids, np.int32)), "name": arrow_strings([r[0] for r in runs]),
                          "framework": arrow_strings([r[1] for r in runs]), "format": arrow_strings([r[2] for r in runs])})
        self._run_with("new_runs", table, "INSERT INTO runs SELECT run_id, name, 'other', NULL, framework, format, "
                       "CAST(? AS TIMESTAMPTZ), '{}' FROM new_runs", [_now()])
        return {r[0]: i for r, i in zip(runs, ids)}

    def add_sources(self, records: list[tuple[int, dict]]) -> list[int]:
        """Sources (run id, summary as ``add_source`` takes it) in one statement; their ids, in order."""
        if not records:
            return []
        ids = self._next_ids("source_id_seq", len(records))
        texts = ("path", "sha256", "format", "framework")
        counts = ("rows", "steps", "metrics", "nonfinite", "attempts", "skipped_lines", "bytes")
        table = pa.table({"source_id": arrow_array(np.asarray(ids, np.int32)),
                          "run_id": arrow_array(np.asarray([r for r, _ in records], np.int32)),
                          "step_from_index": arrow_array(np.asarray([bool(s["step_from_index"]) for _, s in records],
                                                                    np.int8))}
                         | {c: arrow_strings([str(s[c]) for _, s in records]) for c in texts}
                         # -1: no figure (a summary without ``bytes``), stored as NULL as add_source stores it
                         | {c: arrow_array(np.asarray([-1 if s.get(c) is None else s[c] for _, s in records], np.int64))
                            for c in counts})
        self._run_with("new_sources", table,
                       f"INSERT INTO sources (source_id, run_id, {', '.join(texts + counts)}, step_from_index, ingested_at) "
                       f"SELECT source_id, run_id, {', '.join(texts)}, {', '.join(f'nullif({c}, -1)' for c in counts)}, "
                       "step_from_index <> 0, CAST(? AS TIMESTAMPTZ) FROM new_sources", [_now()])
        return ids

    def _next_ids(self, sequence: str, n: int) -> list[int]:
        """``n`` new ids of a sequence, ascending, in one query."""
        return sorted(int(r[0]) for r in self.con.execute(f"SELECT nextval('{sequence}') FROM range(?)", [n]).fetchall())

    def add_metric_name_rows(self, rows: list[tuple[int, str, str]]) -> None:
        """(run id, stored name, original name) rows, in one statement (the caller keeps out those recorded)."""
        if rows:
            table = pa.table({"run_id": arrow_array(np.asarray([r[0] for r in rows], np.int32)),
                              "metric": arrow_strings([r[1] for r in rows]),
                              "original": arrow_strings([r[2] for r in rows])})
            self._run_with("new_names", table, "INSERT INTO metric_names SELECT run_id, metric, original FROM new_names")

    def ensure_run(self, name: str, role: str, proxy_of: str | None, framework: str, fmt: str,
                   meta: dict | None = None) -> int:
        if role not in ROLES:
            raise InputError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        row = _first(self.con.execute("SELECT run_id, role FROM runs WHERE name = ?", [name]))
        if proxy_of is not None:
            if proxy_of == name:
                raise InputError(f"run {name!r} cannot be a proxy of itself")
            if _first(self.con.execute("SELECT 1 FROM runs WHERE name = ?", [proxy_of])) is None:
                raise NotFound(f"--proxy-of {proxy_of!r}: no such run; ingest the full run first")
        if row is not None:
            if role != "other" or proxy_of is not None:
                self.con.execute("UPDATE runs SET role = ?, proxy_of = coalesce(?, proxy_of) WHERE run_id = ?",
                                 [role, proxy_of, row[0]])
            return row[0]
        run_id = _first(self.con.execute("SELECT nextval('run_id_seq')"))[0]
        self.con.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, name, role, proxy_of, framework, fmt, _now(), json.dumps(meta or {})],
        )
        return run_id

    def metric_mapping(self, run_id: int) -> dict[str, str]:
        """original -> stored name already recorded for the run."""
        return dict(self.con.execute(
            "SELECT original, metric FROM metric_names WHERE run_id = ?", [run_id]).fetchall())

    def run_ids(self, names: list[str]) -> dict[str, int]:
        """name -> run id of the runs that exist, in one query."""
        return {str(n): int(i) for n, i in self.con.execute(
            "SELECT name, run_id FROM runs WHERE list_contains(?, name)", [list(names)]).fetchall()}

    def run_extents(self, run_ids: list[int]) -> dict[int, tuple[int | None, int | None]]:
        """run id -> (latest attempt, last step) stored, in one query (None, None for a run without rows)."""
        rows = self.con.execute("SELECT run_id, max(attempt), max(step) FROM scalars WHERE list_contains(?, run_id) "
                                "GROUP BY run_id", [list(run_ids)]).fetchall()
        found = {int(r[0]): (int(r[1]), int(r[2])) for r in rows}
        return {int(i): found.get(int(i), (None, None)) for i in run_ids}

    def metric_mappings(self, run_ids: list[int]) -> dict[int, dict[str, str]]:
        """run id -> {original: stored name}, in one query."""
        out: dict[int, dict[str, str]] = {int(i): {} for i in run_ids}
        for run_id, original, metric in self.con.execute(
                "SELECT run_id, original, metric FROM metric_names WHERE list_contains(?, run_id)",
                [list(run_ids)]).fetchall():
            out[int(run_id)][original] = metric
        return out

    def attempt_offset(self, run_id: int, rows, extent: tuple | None = None, repeats=None) -> int:
        """Attempt number for the new source's first attempt: after the run's latest attempt when
        the new rows (Columns or a long DataFrame) repeat any (metric, rank, step) already stored,
        else joining it. ``extent``: the run's (latest attempt, last step) when the caller read it
        already (``run_extents``). ``repeats``: a function of the rows that answers the repeat
        question instead of the store (an ingest of many files holds what it added in memory)."""
        rows = as_columns(rows)
        latest, last_step = extent if extent is not None else _first(self.con.execute(
            "SELECT max(attempt), max(step) FROM scalars WHERE run_id = ?", [run_id]))
        if latest is None or rows.empty:
            return 0 if latest is None else int(latest)
        if int(latest) + 1 + int(rows.attempt.max()) > ATTEMPT_MAX:
            raise InputError(f"run already holds {int(latest) + 1:,} attempts (restarts); more do not fit the store")
        if int(rows.step.min()) > int(last_step):  # only new steps (a log that grew): no repeat
            return int(latest)
        overlap = repeats(rows) if repeats is not None else self.repeats_stored(run_id, rows)
        return int(latest) + 1 if overlap else int(latest)

    def repeats_stored(self, run_id: int, rows: Columns) -> bool:
        """Whether the rows repeat any (metric, rank, step) the run stores (in any attempt)."""
        keys = pa.table({"metric": _metric_array(rows), "rank": arrow_array(rows.rank), "step": arrow_array(rows.step)})
        return bool(self._run_with("new_keys", keys, "SELECT 1 FROM scalars s JOIN new_keys n USING (metric, rank, step) "
                                   "WHERE s.run_id = ? LIMIT 1", [run_id]))

    def _run_with(self, name: str, table: pa.Table, sql: str, params: list | dict | None = None) -> list:
        """The rows of ``sql`` run with the Arrow ``table`` visible as ``name`` (for that statement only)."""
        self.con.register(name, table)
        try:
            return self.con.execute(sql, params or []).fetchall()
        finally:
            self.con.unregister(name)

    def add_findings(self, run_id: int, result: dict, detector_version: str) -> None:
        self.con.execute(
            "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, detector_version, _now(), result.get("verdict"), result.get("onset_step"),
             json.dumps(result, allow_nan=False, default=str)],
        )

    def add_alert(self, run_id: int, alert: dict) -> None:
        self.con.execute("INSERT INTO alerts VALUES (?, ?, ?, ?, ?)",
                         [run_id, alert["verdict"], alert.get("onset_step"), _now(),
                          json.dumps(alert, allow_nan=False, default=str)])

    def update_source(self, source_id: int, totals: dict) -> None:
        """The running totals of a source that grows (a watched file): rows, steps, sha256, bytes..."""
        columns = ("sha256", "rows", "steps", "metrics", "nonfinite", "attempts", "skipped_lines", "bytes")
        self.con.execute(f"UPDATE sources SET {', '.join(f'{c} = ?' for c in columns)}, ingested_at = ? "
                         "WHERE source_id = ?", [totals[c] for c in columns] + [_now(), source_id])

    def save_watch_position(self, position: dict, new: bool) -> None:
        """How far a watched file was read (stored with the rows read up to there); ``new``: the
        file's first position."""
        columns = ("run_id", "path", "device", "inode", "position", "lines", "format", "header", "index_base")
        values = [position[c] for c in columns] + [_now(), position["source_id"]]
        if new:
            self.con.execute(f"INSERT INTO watch_files ({', '.join(columns)}, updated_at, source_id) "
                             f"VALUES ({', '.join('?' * len(values))})", values)
        else:
            self.con.execute(f"UPDATE watch_files SET {', '.join(f'{c} = ?' for c in columns)}, updated_at = ? "
                             "WHERE source_id = ?", values)

    def add_source(self, run_id: int, summary: dict) -> int:
        source_id = _first(self.con.execute("SELECT nextval('source_id_seq')"))[0]
        self.con.execute(
            "INSERT INTO sources (source_id, run_id, path, sha256, format, framework, rows, steps, metrics, nonfinite, "
            "attempts, skipped_lines, step_from_index, ingested_at, bytes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [source_id, run_id, summary["path"], summary["sha256"], summary["format"], summary["framework"],
             summary["rows"], summary["steps"], summary["metrics"], summary["nonfinite"], summary["attempts"],
             summary["skipped_lines"], summary["step_from_index"], _now(), summary.get("bytes")],
        )
        return source_id

    def rename_metric(self, run_id: int, original: str, old: str, new: str) -> None:
        """A run's metric stored as ``old`` (from the log's ``original`` name) is stored as ``new``
        from now on: its rows and its name mapping follow."""
        self.con.execute("UPDATE scalars SET metric = ? WHERE run_id = ? AND metric = ?", [new, run_id, old])
        self.con.execute("UPDATE metric_names SET metric = ? WHERE run_id = ? AND original = ?", [new, run_id, original])

    def add_metric_names(self, run_id: int, mapping: dict[str, str], known: dict[str, str] | None = None) -> None:
        """Record the names not yet recorded (``known``: the run's mapping, when read already)."""
        known = self.metric_mapping(run_id) if known is None else known
        self.add_metric_name_rows([(run_id, stored, original) for original, stored in mapping.items()
                                   if original not in known])

    def add_scalars(self, run_id: int, source_id: int, rows) -> None:
        """Bulk insert of rows (Columns or a long DataFrame) through Arrow (keeps NaN as NaN),
        grouped by metric for fast reads."""
        self.add_scalar_parts([(run_id, source_id, rows)])

    def add_scalar_parts(self, parts: list[tuple[int, int, object]]) -> None:
        """Rows of several (run id, source id, rows) in one statement (a watcher's cycle), grouped by
        run and metric and in log order within each, so that DuckDB's zone maps skip row groups when
        one series is read. A column with one value throughout (one attempt, global rank, no wall
        times: the usual case) goes in as a constant instead of being reordered and copied."""
        parts = [(r, s, as_columns(rows)) for r, s, rows in parts if len(rows)]
        if not parts:
            return
        names = sorted({n for _, _, rows in parts for n in rows.names})
        index = {m: i for i, m in enumerate(names)}
        codes, columns = [], {}
        for _, _, rows in parts:
            recode = np.asarray([index[n] for n in rows.names], np.int32)
            codes.append(recode[rows.code] if not np.array_equal(recode, np.arange(len(recode))) else rows.code)
        code = np.concatenate(codes) if len(codes) > 1 else codes[0]
        single_run = len({r for r, _, _ in parts}) == 1
        order = _grouped_order(code, None if single_run else
                               np.concatenate([np.full(len(rows), r, np.int32) for r, _, rows in parts]))
        select, params = {}, {}
        for name, ids in (("run_id", [r for r, _, _ in parts]), ("source_id", [s for _, s, _ in parts])):
            if len(set(ids)) == 1:  # one run, one source: a constant, no column
                select[name], params[name] = f"CAST(${name} AS INTEGER)", ids[0]
            else:
                columns[name] = arrow_array(order(np.concatenate([np.full(len(p[2]), i, np.int32)
                                                                  for i, p in zip(ids, parts)])))
                select[name] = name
        for name, per_part, sql_type in (("step", [p[2].step for p in parts], "BIGINT"),
                                         ("value", [p[2].value for p in parts], "DOUBLE"),
                                         ("attempt", [p[2].attempt for p in parts], "INTEGER"),
                                         ("rank", [p[2].rank for p in parts], "INTEGER"),
                                         ("wall_time", [p[2].wall_time for p in parts], "DOUBLE")):
            values = np.concatenate(per_part) if len(per_part) > 1 else per_part[0]
            constant = _constant(values) if name not in ("step", "value") else None  # (attempt, rank, wall time)
            if constant is not None:
                select[name] = f"CAST(${name} AS {sql_type})"
                params[name] = constant
            else:
                columns[name] = arrow_array(order(values))
                select[name] = name
        columns["metric"] = pa.DictionaryArray.from_arrays(arrow_array(order(code)), arrow_strings(names))
        self._run_with("new_scalars", pa.table(columns),
                       f"INSERT INTO scalars SELECT {select['run_id']}, CAST(metric AS VARCHAR), {select['step']}, "
                       f"{select['value']}, {select['attempt']}, {select['rank']}, {select['wall_time']}, "
                       f"{select['source_id']} FROM new_scalars", params)

    def update_watched(self, totals: list[dict], positions: list[dict]) -> None:
        """Sources' running totals and watched files' positions (rows that exist), two statements."""
        self._update("sources", totals, ("source_id", "sha256", "rows", "steps", "metrics", "nonfinite", "attempts",
                                         "skipped_lines", "bytes"), stamp="ingested_at")
        self._update("watch_files", positions, ("source_id", "path", "device", "inode", "position", "lines",
                                                "index_base"), stamp="updated_at")

    def _update(self, table: str, rows: list[dict], columns: tuple[str, ...], stamp: str) -> None:
        """One UPDATE of ``table``'s rows matched on ``columns[0]``: the other columns from ``rows``, and
        ``stamp`` set to now."""
        if rows:
            key, sets = columns[0], ", ".join(f"{c} = n.{c}" for c in columns[1:])
            self._run_with("new_values", pa.table({c: [r[c] for r in rows] for c in columns}),
                           f"UPDATE {table} SET {sets}, {stamp} = ? FROM new_values n WHERE {table}.{key} = n.{key}",
                           [_now()])

    def add_routing(self, run_id: int, source_id: int, frame: pd.DataFrame | None) -> None:
        if frame is None or frame.empty:
            return
        n = len(frame)
        table = pa.table({
            "run_id": pa.array(np.full(n, run_id, np.int32)),
            "step": pa.array(frame["step"].to_numpy(np.int64)),
            "layer": pa.array(frame["layer"].to_numpy(np.int32)),
            "expert": pa.array(frame["expert"].to_numpy(np.int32)),
            "load": pa.array(frame["load"].to_numpy(np.float64)),
            "attempt": pa.array(frame["attempt"].to_numpy(np.int32)),
            "source_id": pa.array(np.full(n, source_id, np.int32)),
        })
        self._run_with("new_routing", table, "INSERT INTO routing SELECT * FROM new_routing")


def _constant(values: np.ndarray):
    """The one value a column holds throughout (NaN as the text 'nan', which DuckDB casts), or None."""
    first = values[0]
    if values.strides == (0,):  # a constant's view (moeproxy.ingest.table._per_value)
        return "nan" if first != first else first.item()
    if first != first:
        return "nan" if bool(np.all(values != values)) else None
    return first.item() if bool(np.all(values == first)) else None


def _grouped_order(code: np.ndarray, run_id: np.ndarray | None):
    """A function putting a column in (run, metric) order, log order kept within each: the
    identity when the rows are grouped already; a transpose when they come as records of one
    repeated layout (each record the same metrics in the same order: Megatron's and verl's lines);
    else a stable sort."""
    n = len(code)
    if run_id is None:
        if n < 2 or bool(np.all(code[1:] >= code[:-1])):
            return lambda column: column
        k = int(np.argmax(code[1:] == code[0])) + 1 if bool((code[1:] == code[0]).any()) else n
        layout = code[:k]
        if k > 1 and n % k == 0 and len(np.unique(layout)) == k and bool(np.all(code.reshape(-1, k) == layout)):
            by_code = np.argsort(layout)
            return lambda column: np.ascontiguousarray(column.reshape(-1, k).T[by_code]).reshape(-1)
        keys = code.astype(np.int16) if int(code.max()) < 2**15 else code  # numpy sorts 16-bit keys by radix
        order = np.argsort(keys, kind="stable")
    else:
        order = np.lexsort((code, run_id))
    return lambda column: column[order]
