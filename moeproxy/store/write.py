"""Writing: the ``Transaction`` a ``Store.write()`` block gets; every insert and update of the run
database is one of its methods."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from moeproxy.columns import Columns, arrow_array, arrow_strings, as_columns
from moeproxy.contracts import ROLES
from moeproxy.errors import InputError, NotFound
from moeproxy.lazy import LazyModule

from moeproxy.store.schema import ATTEMPT_MAX, BUMP_DATA_VERSION, LATEST

pd = LazyModule("pandas")  # imported on first use: storing parsed rows needs no pandas


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _first(result):
    """The first row of a result, reading it to the end (DuckDB 2 results stream: an unfinished
    result blocks the connection)."""
    rows = result.fetchall()
    return rows[0] if rows else None



def _metric_array(rows: Columns) -> pa.Array:
    """The metric-name column of rows as a dictionary-encoded Arrow array."""
    return pa.DictionaryArray.from_arrays(arrow_array(rows.code), arrow_strings(rows.names))


_COLUMN_ORDER: dict[str, list[str]] = {}  # a versioned table's columns (the schema's, fixed)
SOURCE_TOTALS = ("source_id", "sha256", "rows", "steps", "metrics", "nonfinite", "attempts", "skipped_lines", "bytes")


class Transaction:
    """Write operations of one ingest, inside ``Store.write()``."""

    def __init__(self, con, sequences: bool = True) -> None:
        self.con = con
        # a DuckLake catalog has no sequences: ids are the next free ones of the table, in this
        # transaction (a concurrent writer's commit of the same ids conflicts and is retried)
        self.sequences = sequences

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

    _ID_OF = {"run_id_seq": ("runs", "run_id"), "source_id_seq": ("sources", "source_id")}

    def _next_ids(self, sequence: str, n: int) -> list[int]:
        """``n`` new ids of a sequence, ascending, in one query."""
        if not self.sequences:
            table, column = self._ID_OF[sequence]
            top = int(_first(self.con.execute(f"SELECT coalesce(max({column}), 0) FROM {table}"))[0])
            # two writers taking the same free ids must conflict at commit (DuckLake: both UPDATE meta),
            # while writers that only append rows do not
            self.con.execute(BUMP_DATA_VERSION)
            return list(range(top + 1, top + 1 + n))
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
        run_id = self._next_ids("run_id_seq", 1)[0]
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

    def runs_state(self, names: list[str]) -> tuple[dict[str, int], dict[int, dict[str, str]],
                                                    dict[int, tuple[int | None, int | None]]]:
        """``run_ids``, ``metric_mappings`` and ``run_extents`` of the named runs that exist, in one
        query (a DuckLake catalog looks up its metadata for every statement: one instead of three)."""
        rows = self.con.execute(
            "WITH r AS (SELECT name, run_id FROM runs WHERE list_contains(?, name)) "
            "SELECT 0, name, run_id, NULL, NULL FROM r "
            "UNION ALL SELECT 1, m.original, m.run_id, m.metric, NULL FROM metric_names m JOIN r USING (run_id) "
            "UNION ALL SELECT 2, NULL, s.run_id, CAST(max(s.attempt) AS VARCHAR), max(s.step) "
            "FROM scalars s JOIN r USING (run_id) GROUP BY s.run_id", [list(names)]).fetchall()
        ids = {str(r[1]): int(r[2]) for r in rows if r[0] == 0}
        mappings: dict[int, dict[str, str]] = {i: {} for i in ids.values()}
        extents: dict[int, tuple[int | None, int | None]] = {i: (None, None) for i in ids.values()}
        for kind, text, run_id, metric, step in rows:
            if kind == 1:
                mappings[int(run_id)][text] = metric
            elif kind == 2:
                extents[int(run_id)] = (int(metric), int(step))
        return ids, mappings, extents

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

    def save_watch_position(self, position: dict, new: bool) -> None:
        """How far a watched file was read (stored with the rows read up to there); ``new``: the
        file's first position."""
        columns = ("run_id", "path", "device", "inode", "position", "lines", "format", "header", "index_base")
        values = [position[c] for c in columns] + [_now(), position["source_id"]]
        if new:
            self.con.execute(f"INSERT INTO watch_files ({', '.join(columns)}, updated_at, source_id) "
                             f"VALUES ({', '.join('?' * len(values))})", values)
        else:
            self._update("watch_files", [position], ("source_id", *columns), stamp="updated_at")

    def add_source(self, run_id: int, summary: dict) -> int:
        source_id = self._next_ids("source_id_seq", 1)[0]
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
        self._update("sources", totals, SOURCE_TOTALS, stamp="ingested_at")
        self._update("watch_files", positions, ("source_id", "path", "device", "inode", "position", "lines",
                                                "index_base"), stamp="updated_at")

    def _update(self, table: str, rows: list[dict], columns: tuple[str, ...], stamp: str) -> None:
        """One UPDATE of ``table``'s rows matched on ``columns[0]``: the other columns from ``rows``, and
        ``stamp`` set to now. On a catalog, a new version of each row is appended instead (readers take
        the latest: ``schema.LATEST``), so that writers of different sources never conflict."""
        if rows and not self.sequences:
            key = columns[0]
            order = _COLUMN_ORDER.get(table) or _COLUMN_ORDER.setdefault(
                table, [r[0] for r in self.con.execute(f"DESCRIBE {table}").fetchall()])
            picks = ", ".join("?" if c == stamp else (f"n.{c}" if c in columns[1:] else f"s.{c}") for c in order)
            self._run_with("new_values", pa.table({c: [r[c] for r in rows] for c in columns}),
                           f"INSERT INTO {table} SELECT {picks} FROM {LATEST[table]} s JOIN new_values n "
                           f"USING ({key})", [_now()])
            return
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
