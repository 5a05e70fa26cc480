"""The run store: one DuckDB file; ``Store`` opens it, takes turns on it and answers the reads.

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

A DuckLake catalog (``ducklake:postgres:dbname=... host=...`` or ``ducklake:FILE.ducklake``, with
``data_path``/``$MOEPROXY_DATA_PATH`` for its Parquet files: ``moeproxy.store.lake``) is the same
store on another engine: the same tables, reads and writes, through the same methods.
"""


from __future__ import annotations

import json
import os
import random
import re
import socket
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

import duckdb

from moeproxy.contracts import ROLES
from moeproxy.errors import InputError, NotFound, StoreBusy, StoreReadOnly, StoreUnavailable, WriteConflict
from moeproxy.lazy import LazyModule

from moeproxy.store import lake
from moeproxy.store.schema import (BUMP_DATA_VERSION, LATEST_SOURCES, LATEST_WATCH_FILES, SCHEMA_VERSION, TABLES, _SCHEMA, catalog_file,
                                   default_db_path, is_catalog)
from moeproxy.store.series import series_sql
from moeproxy.store.write import Transaction, _first

pd = LazyModule("pandas")  # imported on first use: storing parsed rows needs no pandas


# the run lists' shared parts: each run's latest verdict, and its name, role and sizes
_LATEST_FINDING = """f AS (SELECT run_id, arg_max(verdict, created_at) AS verdict,
                         arg_max(onset_step, created_at) AS onset_step FROM findings GROUP BY run_id)"""
_RUN_COLUMNS = """r.name AS run, r.role, r.proxy_of, r.framework, r.format,
    coalesce(CAST(json_extract(r.meta, '$.tags') AS VARCHAR[]), []) AS tags,
    coalesce(s.steps, 0) AS steps, coalesce({metrics}, 0) AS metrics,
    coalesce(s.rows, 0) AS rows, coalesce(s.nonfinite, 0) AS nonfinite, coalesce(s.attempts, 0) AS attempts"""

LIVE_SECONDS = 60  # a run a watcher stored rows of within this long is live

# the errors of a store DuckDB cannot read or write (damaged, truncated, a full disk): ``unreadable``
_UNREADABLE = (duckdb.IOException, duckdb.InternalException, duckdb.SerializationException,
               duckdb.TransactionException)
_LOCK_HOLDER = re.compile(r"\(PID (\d+)\)")
_LOCKED = re.compile(r"could not set lock|conflicting lock|\block\b.*\b(held|set)\b", re.IGNORECASE)


class OutputError(InputError):
    """An export's output could not be written (``str``: the reason, without the path)."""


class Store:
    def __init__(self, path: str | Path | None = None, *, lock_timeout: float = 15.0,
                 data_path: str | None = None) -> None:
        self.lock_timeout = lock_timeout
        self._held = None
        self._lake = None  # a PostgreSQL catalog's attached connection, opened once
        self.catalog: str | None = None
        if path is None:
            path = default_db_path()  # $MOEPROXY_DB (a file or a catalog), else the default file
        if is_catalog(str(path)):
            self.catalog = str(path)
            missing = lake.available()  # said at once: not "no runs" for a catalog this install cannot open
            if missing is not None:
                raise InputError(f"{self.catalog}: {missing}")
            self.data_path = data_path or lake.default_data_path(self.catalog)
            lake.object_store(self.data_path)  # an unsupported scheme said at once, by name
            self.path = catalog_file(self.catalog)  # None for a PostgreSQL catalog
            self._memory = None
        elif str(path) == ":memory:":
            self.path = None
            self._memory = duckdb.connect(":memory:")
            self._memory.execute(_SCHEMA)
            self._init_meta(self._memory)
        else:
            self.path = Path(path).expanduser()
            self._memory = None

    def __repr__(self) -> str:
        return f"Store({self.label})"

    @property
    def label(self) -> str:
        if self.catalog is not None:
            return self.catalog
        return str(self.path) if self.path else ":memory:"

    # -- connections -------------------------------------------------------------------
    @staticmethod
    def _init_meta(con) -> None:
        # (no INSERT OR IGNORE: a DuckLake table has no key to ignore on)
        con.execute("INSERT INTO meta SELECT * FROM (VALUES ('schema_version', ?), ('data_version', '0')) v(k, x) "
                    "WHERE k NOT IN (SELECT key FROM meta)", [str(SCHEMA_VERSION)])

    @property
    def schema(self) -> str:
        return lake.lake_schema(_SCHEMA) if self.catalog is not None else _SCHEMA

    def _open(self):
        if self.catalog is not None:
            return self._open_catalog()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a parent that is a file, a folder that cannot be written
            raise InputError(f"{self.path}: cannot create the run database's folder {self.path.parent} "
                             f"({exc.strerror or exc})") from None
        if self.path.exists() and not self.path.is_file():
            raise InputError(f"{self.path}: not a regular file; the run database must be a file")
        con = self._connect_waiting(lambda: duckdb.connect(str(self.path)), str(self.path))
        return self._checked(con)

    def _connect_waiting(self, connect, label: str):
        """``connect()``, retried while another process holds the file's lock (``lock_timeout``)."""
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                return connect()
            except duckdb.IOException as exc:
                message = str(exc)
                if not _LOCKED.search(message):  # (not "lock" alone: "checksum ... in block at" is damage)
                    hint = ""
                    if "newer version of DuckDB" in message:  # a 2.0 file under the team extra's DuckDB 1.5.5
                        hint = (f"; it was written by a newer DuckDB than this {duckdb.__version__}: ingest its logs "
                                "again here (or read it with an install of that DuckDB)")
                    raise InputError(f"{label}: cannot open the run database ({message.splitlines()[0]}){hint}") from None
                if time.monotonic() >= deadline:
                    holder = _LOCK_HOLDER.search(message)
                    who = f"process {holder.group(1)}" if holder else "another process"
                    raise StoreBusy(
                        f"{label} is in use by {who} (a dashboard, an ingest or a job) and stayed locked "
                        f"for {self.lock_timeout:.0f} s; try again when it is done"
                    ) from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
            except duckdb.Error as exc:
                raise InputError(f"{label}: not a moeproxy run database ({str(exc).splitlines()[0]})") from None

    def _open_catalog(self):
        """A connection with the DuckLake catalog attached as its default database."""
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"{self.catalog}: cannot create the catalog's folder {self.path.parent} "
                                 f"({exc.strerror or exc})") from None

        def connect():
            deadline = time.monotonic() + self.lock_timeout
            while True:
                # (no progress bar: a slow catalog read would draw one on the dashboard's or watcher's terminal)
                con = duckdb.connect()
                try:
                    con.execute("SET enable_progress_bar = false")
                    lake.load_extensions(con, self.catalog, self.data_path)
                    lake.attach(con, self.catalog, self.data_path)
                    return con
                except duckdb.IOException:
                    con.close()
                    raise  # a local catalog file locked by another process: waited for
                except duckdb.Error as exc:
                    con.close()
                    # two processes making a new catalog's metadata tables at once: the loser waits
                    if "already exists" in str(exc) and time.monotonic() < deadline:
                        time.sleep(0.05 + 0.1 * random.random())
                        continue
                    raise InputError(f"{self.catalog}: cannot attach the DuckLake catalog "
                                     f"({str(exc).splitlines()[0]})") from None
                except BaseException:
                    con.close()
                    raise

        if self.path is not None:  # a local catalog file is locked while open: one connection per use
            return self._checked(self._connect_waiting(connect, self.catalog))
        # PostgreSQL serves many connections and DuckLake versions every commit: one attached instance
        # for the life of this Store, a cursor of it per use (loading the extensions and attaching
        # cost ~0.1-0.3 s per connection: every watcher cycle and dashboard read paid it)
        if self._lake is None:
            self._lake = self._checked(self._connect_waiting(connect, self.catalog))
        cursor = self._lake.cursor()
        try:
            cursor.execute(f"USE {lake.ALIAS}")
        except duckdb.Error:  # the server went away: attach again next time
            cursor.close()
            self._lake.close()
            self._lake = None
            raise
        return cursor

    def _checked(self, con):
        """The connection of a moeproxy store: the tables made in a new one, an older schema brought
        up to this one; a database of other tables refused."""
        try:  # a plain read (an information_schema join cost ~8 ms on every open); no meta table: new file
            version = _first(con.execute("SELECT value FROM meta WHERE key='schema_version'"))
        except duckdb.CatalogException:
            version = None
        except duckdb.Error as exc:
            con.close()
            raise self.unreadable(exc) from None
        if version is None:
            tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                                "WHERE table_schema = 'main' AND table_catalog = current_database()"
                                                ).fetchall()]
            foreign = sorted(set(tables) - set(TABLES))
            if foreign or (tables and self.catalog is None):  # a user's own database: never add moeproxy's tables
                con.close()
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise InputError(f"{self.label}: a DuckDB database that is not a moeproxy run database (it holds "
                                 f"{shown}); nothing was changed; choose another --db")
            self._create(con)
        elif version[0] != str(SCHEMA_VERSION):
            self._migrate(con, version[0])
        return con

    def _create(self, con) -> None:
        """The tables and the meta rows of a new store, in one transaction. Several processes may
        create one catalog at once: a commit that loses to another's is no error, the other made it."""
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                con.execute("BEGIN TRANSACTION")
                con.execute(self.schema)
                if self.catalog is not None:
                    con.execute(f"CALL {lake.ALIAS}.set_option('parquet_compression', '{lake.COMPRESSION}')")
                self._init_meta(con)
                con.execute("COMMIT")
                return
            except duckdb.TransactionException:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                if self.catalog is None or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05 + 0.1 * random.random())
                if _first(con.execute("SELECT value FROM meta WHERE key='schema_version'")) is not None:
                    return

    def retrying(self, write, attempts: int = 30):
        """``write()`` (a function that opens ``self.write()``), run again when a DuckLake catalog's
        commit lost to another writer's (nothing of it was stored), with a growing random pause."""
        delay = 0.02
        for attempt in range(attempts):
            try:
                return write()
            except WriteConflict:
                if attempt == attempts - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)

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
        con.execute(self.schema)  # 2 -> 3: the new tables (watch_files, alerts); existing ones are kept
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
        con.execute("COMMIT")

    def unreadable(self, exc: BaseException) -> StoreUnavailable:
        """The one-line error for a store file DuckDB cannot read or write (damaged, truncated,
        disk full): nothing was changed by the command that met it."""
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "space left" in first.lower():
            why = "the disk is full"
        elif self.catalog is not None and "permission denied" in str(exc).lower():
            # a dashboard's read-only PostgreSQL role (README "Team store"): reads work, writes do not
            why = "the catalog's PostgreSQL role may not write (permission denied); write with the owning role"
        elif isinstance(exc, duckdb.TransactionException):
            why = "the transaction could not commit"
        elif self.catalog is not None and first.startswith("HTTP Error"):  # an s3:// data path
            code = re.search(r"HTTP code (\d+)", first)
            meaning = {"404": "no such bucket or object", "403": "access denied: check AWS_ACCESS_KEY_ID and "
                       "AWS_SECRET_ACCESS_KEY", "400": "the store refused the request: check AWS_REGION"}
            why = (f"its data path {self.data_path} could not be read or written"
                   + (f" ({meaning[code.group(1)]})" if code and code.group(1) in meaning else ""))
        else:
            why = "damaged or truncated?"
        kind = StoreReadOnly if why.startswith("the catalog's PostgreSQL role may not write") else StoreUnavailable
        return kind(f"{self.label}: cannot use the run database ({why}: {first}); nothing was changed")

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """DuckDB's I/O and internal errors on a file store (a damaged or truncated file, a full
        disk) become ``unreadable``'s one line instead of a traceback."""
        try:
            yield
        except duckdb.Error as exc:
            # on a catalog, another writer's commit first: DuckLake's conflict, or PostgreSQL's serialization
            # failure (a plain duckdb.Error); a commit whose write-ahead log hit a full disk: TransactionException
            lost = (self.catalog is not None and type(exc) in (duckdb.Error, duckdb.TransactionException)
                    and lake.lost_to_a_writer(exc))
            if self._memory is not None or not (lost or isinstance(exc, _UNREADABLE)):
                raise
            if lost:
                # DuckLake's optimistic concurrency: another writer committed first
                raise WriteConflict(f"{self.catalog}: another writer committed to the same tables first; nothing "
                                    f"of this write was stored; try again ({str(exc).splitlines()[0]})") from None
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
        if held is None:
            return self._open()
        if self.catalog is not None:
            # a new cursor starts in the default database and its ``USE`` of the catalog is a statement
            # (DuckLake looks up its metadata for each: ~15 ms): the cycle's uses take turns on the held
            # one, which a use does not close
            return _Borrowed(held)
        return held.cursor()

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for queries; closed (and the file released) on exit. A store that does not
        exist yet reads as an empty one: a read never creates the file or its folders."""
        if self._memory is not None:
            with self._memory.cursor() as cur:
                yield cur
            return
        if self._held is None and self.path is not None and not self.path.exists():
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
            # a catalog's read is one transaction: DuckLake looks its metadata up in PostgreSQL once for
            # every query of it, not once per statement (~25 ms each: a Triage page makes a dozen), and
            # every query sees the same snapshot (a watcher's commit between two of them does not show
            # in one and not the other)
            snapshot = self.catalog is not None and self._held is None
            try:
                if snapshot:
                    con.execute("BEGIN TRANSACTION")
                yield con
                if snapshot:
                    con.execute("COMMIT")
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
                tx = Transaction(con, sequences=self.catalog is None)
                try:
                    yield tx
                except BaseException:
                    try:
                        con.execute("ROLLBACK")
                    except duckdb.Error:  # a transaction DuckDB already aborted (disk full): nothing to undo
                        pass
                    raise
                if self.catalog is None:  # (a catalog's version is its snapshot: an UPDATE here would make
                    # every two writers conflict; the id allocation bumps it there, see Transaction._next_ids)
                    con.execute(BUMP_DATA_VERSION)
                con.execute("COMMIT")
            finally:
                con.close()

    # -- a DuckLake catalog's upkeep -----------------------------------------------------------
    def compact(self, keep_minutes: float = lake.KEEP_MINUTES, every_minutes: float | None = None,
                by: str | None = None) -> dict:
        """Small appends were inlined into the catalog (``DATA_INLINING_ROW_LIMIT``): write them out as
        Parquet, merge adjacent small files, expire snapshots older than ``keep_minutes`` and delete
        the files no snapshot kept needs. A file store only checkpoints. Returns the data files
        before and after.

        ``every_minutes``: the catalog's upkeep is one job, however many watchers share it. The
        caller first claims it (``meta`` row ``compacted_at``: when and by whom); when another process
        compacted less than ``every_minutes`` ago, or claims it at the same moment (the claims
        conflict: one commits), nothing is done and ``{"skipped": "<by> at <time>"}`` returned."""
        if self.catalog is None:
            if self._memory is None and self.path is not None and self.path.exists():
                with self._guarded():
                    con = self._open()
                    try:
                        con.execute("CHECKPOINT")
                    finally:
                        con.close()
            return {}
        with self._guarded():
            con = self._open()
            try:
                claim = None
                if every_minutes is not None:
                    taken, claim = _claim_upkeep(con, every_minutes, by or _process_name())
                    if taken is not None:
                        return {"skipped": taken}
                try:
                    # the one upkeep of the period: it may try harder against the watchers' commits
                    return _compact_catalog(con, keep_minutes, lake.COMPACT_TRIES * (3 if claim else 1))
                except BaseException:
                    if claim is not None:  # not done: the next watcher whose turn comes may claim it
                        _release_upkeep(con, *claim)
                    raise
            finally:
                con.close()

    # -- queries -------------------------------------------------------------------------
    def data_version(self) -> int:
        """A number that changes with every write: the file store's counter, a catalog's snapshot id."""
        with self.read() as con:
            if self.catalog is not None:
                return int(_first(con.execute(f"SELECT id FROM {lake.ALIAS}.current_snapshot()"))[0])
            return int(_first(con.execute("SELECT value FROM meta WHERE key='data_version'"))[0])

    def runs(self, run: str | None = None) -> pd.DataFrame:
        """One row per run with its size and latest verdict; ``run``: that run's row only (its values
        alone are read: on a catalog partitioned by run, its files; NotFound lists the runs)."""
        with self.read() as con:
            params = {} if run is None else {"id": self.run_id(con, run)}
            only = "WHERE run_id = $id" if params else ""
            return con.execute(
                f"""
                WITH s AS (
                    SELECT run_id, count(DISTINCT step) AS steps, count(DISTINCT metric) AS metrics,
                           count(*) AS rows, count(*) FILTER (WHERE NOT isfinite(value)) AS nonfinite,
                           count(DISTINCT attempt) AS attempts, max(step) AS last_step
                    FROM scalars {only} GROUP BY run_id),
                {_LATEST_FINDING}
                SELECT {_RUN_COLUMNS.format(metrics="s.metrics")}, s.last_step, f.verdict, f.onset_step, r.created_at
                FROM runs r LEFT JOIN s USING (run_id) LEFT JOIN f USING (run_id) {"WHERE r.run_id = $id" if params else ""}
                ORDER BY r.created_at, r.run_id
                """, params
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
        info = self.runs(run).iloc[0].to_dict()  # (NotFound, listing the runs, for a run not stored)
        with self.read() as con:
            run_id = self._run_id(con, run)
            info["sources"] = con.execute(
                "SELECT path, sha256, format, framework, rows, steps, metrics, nonfinite, attempts, skipped_lines, "
                "step_from_index, ingested_at, bytes FROM " + LATEST_SOURCES + " WHERE run_id = ? ORDER BY source_id", [run_id]
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
                # straight into the target: the caller's target is already a temporary file of its own
                # (DuckDB 1.5 would otherwise write a tmp_ file beside it, left behind on a full disk)
                if kind == "csv":
                    rel.write_csv(str(target), use_tmp_file=False)
                else:
                    rel.write_parquet(str(target), use_tmp_file=False)
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
                f"s.skipped_lines FROM {LATEST_WATCH_FILES} w JOIN runs r USING (run_id) "
                f"JOIN {LATEST_SOURCES} s USING (source_id) ORDER BY w.source_id").df().to_dict("records")

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
                f"""
                WITH s AS (SELECT run_id, max(steps) AS steps, sum(rows) AS rows, sum(nonfinite) AS nonfinite,
                                  max(attempts) AS attempts FROM {LATEST_SOURCES} GROUP BY run_id),
                m AS (SELECT run_id, count(DISTINCT metric) AS metrics FROM metric_names GROUP BY run_id),
                {_LATEST_FINDING}
                SELECT {_RUN_COLUMNS.format(metrics="m.metrics")}, f.verdict, f.onset_step, r.created_at
                FROM runs r LEFT JOIN s USING (run_id) LEFT JOIN m USING (run_id) LEFT JOIN f USING (run_id)
                ORDER BY r.created_at, r.run_id
                """
            ).df()


class _Borrowed:
    """A held connection lent to one use of ``read()``/``write()``: everything goes to it, but the use's
    ``close()`` leaves it open for the next (``held()`` closes it)."""

    def __init__(self, con) -> None:
        self._con = con

    def __getattr__(self, name):
        return getattr(self._con, name)

    def close(self) -> None:
        pass


UPKEEP_KEY = "compacted_at"


def _compact_catalog(con, keep_minutes: float, tries: int) -> dict:
    before = lake.data_files(con)
    try:  # a catalog made by an earlier moeproxy: its values sorted and compressed as a new one's from now on
        lake.ensure_layout(con)
    except duckdb.TransactionException:  # a writer's commit came first: the next upkeep does it
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # (a failed commit has rolled back already)
    # the versions of watched sources and positions that a later one replaced
    con.execute("BEGIN TRANSACTION")
    for table, stamp in (("sources", "ingested_at"), ("watch_files", "updated_at")):
        con.execute(f"DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM {table} AS newer WHERE "
                    f"newer.source_id = {table}.source_id AND newer.{stamp} > {table}.{stamp})")
    con.execute("COMMIT")
    lake.compact(con, keep_minutes, tries)
    return {"files_before": before, "files_after": lake.data_files(con)}


def _process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _claim_upkeep(con, every_minutes: float, by: str) -> tuple[str | None, tuple[str, str] | None]:
    """Claim a catalog's upkeep for this process: ``(None, (previous value, this claim))`` when
    claimed, else ``(who holds it and since when, None)``. The claim is one ``meta`` row updated in
    a transaction of its own; two processes that claim at once conflict on it (DuckLake's optimistic
    concurrency) and only the first commits."""
    if _first(con.execute("SELECT count(*) FROM meta WHERE key = ?", [UPKEEP_KEY]))[0] == 0:
        # the row first, on its own: claims must be updates of one row to conflict (two inserts
        # would both commit); a second process adding it at the same moment leaves two, read by max
        try:
            con.execute("INSERT INTO meta VALUES (?, '')", [UPKEEP_KEY])
        except duckdb.TransactionException:
            pass  # another process's went in first
    con.execute("BEGIN TRANSACTION")
    try:
        row = _first(con.execute("SELECT max(value) FROM meta WHERE key = ?", [UPKEEP_KEY]))
        last = (row[0] if row else None) or ""
        stamp, _, who = last.partition(" ")
        try:
            when = float(stamp)
        except ValueError:
            when = None
        now = time.time()
        if when is not None and now - when < every_minutes * 60:
            con.execute("ROLLBACK")
            return f"{who or 'another process'} at {time.strftime('%H:%M:%S', time.localtime(when))}", None
        value = f"{now:.3f} {by}"
        con.execute("UPDATE meta SET value = ? WHERE key = ?", [value, UPKEEP_KEY])
        con.execute("COMMIT")
        return None, (last, value)
    except duckdb.TransactionException as exc:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        if "onflict" in str(exc):
            return "another process claiming it at the same moment", None
        raise


def _release_upkeep(con, previous: str, mine: str) -> None:
    """Give a claim back after an upkeep that did not get through (the row as it was, unless another
    process has claimed since); a release that fails leaves the claim to expire with its period."""
    try:
        con.execute("UPDATE meta SET value = ? WHERE key = ? AND value = ?", [previous, UPKEEP_KEY, mine])
    except duckdb.Error:
        pass

