"""A run store on a DuckLake catalog: the catalog in PostgreSQL (or, for one machine, a local
``.ducklake`` file), the data as Parquet files under a data path, read and written with the same
DuckDB SQL as the single-file store.

    --db ducklake:postgres:dbname=moeproxy host=db.cluster user=moeproxy   --data-path /shared/moeproxy
    --db ducklake:/shared/moeproxy/runs.ducklake                            (data path: runs.ducklake.files/)
    --db ducklake:postgres:dbname=moeproxy host=db.cluster   --data-path s3://bucket/moeproxy/

An ``s3://`` data path is any S3-compatible object store (AWS S3, MinIO, Ceph, Huawei OBS): the
``httpfs`` extension (its wheel, in the team extra) reads and writes it, with the credentials of the
standard AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``) and, for a store that is not AWS, its address in ``AWS_ENDPOINT_URL``
(``http://minio.cluster:9000``: path-style URLs, TLS as the address says; ``MOEPROXY_S3_URL_STYLE``
overrides the style).

Extensions come from Python wheels, never from the internet: ``pip install 'moeproxy[team]'``
installs ``duckdb-extension-ducklake`` and ``-postgres``, which require DuckDB 1.5.5 (the last release
with such wheels; DuckDB 2.0 downloads its extensions at first use, which an air-gapped cluster
cannot), and each is loaded from its wheel's file with ``INSTALL '<path>'`` + ``LOAD``. The default
install keeps the newest DuckDB for the single-file store (faster); ``available()`` says whether this
one can open a catalog.

Small appends (a watcher's second of rows) are kept in the catalog itself (``DATA_INLINING_ROW_LIMIT``)
rather than written as a Parquet file each; ``compact`` (``moeproxy store compact``, and the watcher
every ``compact_minutes``) writes them out, merges small files and deletes the ones no recent
snapshot needs, so that the file count stays bounded however long jobs are watched.

DuckLake has no sequences and no PRIMARY KEY / UNIQUE constraints: the catalog's schema is the
file store's without them (``lake_schema``), ids are the next free ones in the writing transaction,
and DuckLake's optimistic concurrency makes a second writer's commit fail instead of both writing
the same id (``Store.write`` turns that into ``StoreBusy``: try again).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import duckdb

from moeproxy.errors import InputError
from moeproxy.store.schema import catalog_file  # what a catalog string says

ALIAS = "lake"  # the attached catalog's name in the connection
WHEEL_RELEASE = "1.5.5"  # the DuckDB release the extension wheels (and the `team` extra) are for
EXTENSIONS = {"ducklake": "ducklake", "postgres": "postgres_scanner"}  # wheel name -> extension name
OBJECT_STORE = {"httpfs": "httpfs"}  # the wheel an s3:// data path needs (loaded only then)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def object_store(data_path: str) -> bool:
    """Whether the data path is in an object store (``s3://``); a folder otherwise. Another scheme
    (``gs://``, ``az://``, ``http://``) is refused by name: S3-compatible stores are what is supported."""
    scheme = _SCHEME.match(data_path)
    if scheme is None:
        return False
    if scheme.group(1).lower() != "s3":
        raise InputError(f"data path {data_path}: a {scheme.group(1)}:// data path is not supported; use a folder "
                         "every host sees or s3://BUCKET/PREFIX (any S3-compatible store: set AWS_ENDPOINT_URL)")
    if not re.match(r"^s3://[^/]+", data_path, re.IGNORECASE):
        raise InputError(f"data path {data_path}: an s3:// data path names its bucket (s3://BUCKET/PREFIX)")
    return True


def s3_secret(con, env=os.environ) -> None:
    """The connection's S3 credentials and address, from the standard AWS variables (none set: the
    store is read anonymously, as a public bucket allows)."""
    options = {"REGION": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if env.get("AWS_ACCESS_KEY_ID"):
        options["KEY_ID"] = env["AWS_ACCESS_KEY_ID"]
        options["SECRET"] = env.get("AWS_SECRET_ACCESS_KEY", "")
        if env.get("AWS_SESSION_TOKEN"):
            options["SESSION_TOKEN"] = env["AWS_SESSION_TOKEN"]
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    style = env.get("MOEPROXY_S3_URL_STYLE")
    if endpoint:
        address = re.match(r"^(?:(https?)://)?([^/]+)/?$", endpoint.strip())
        if address is None:
            raise InputError(f"AWS_ENDPOINT_URL {endpoint!r}: not an address (http://HOST:PORT or https://HOST)")
        options["ENDPOINT"] = address.group(2)
        options["USE_SSL"] = "false" if (address.group(1) or "https").lower() == "http" else "true"
        style = style or "path"  # MinIO, Ceph and most stores of a cluster
    if style:
        if style not in ("path", "vhost"):
            raise InputError(f"MOEPROXY_S3_URL_STYLE {style!r}: must be path or vhost")
        options["URL_STYLE"] = style
    text = ", ".join(f"{k} {v}" if k == "USE_SSL" else f"{k} '{v.replace(chr(39), chr(39) * 2)}'"
                     for k, v in options.items())
    con.execute(f"CREATE OR REPLACE SECRET moeproxy_s3 (TYPE s3, {text})")


def default_data_path(target: str) -> str:
    """``$MOEPROXY_DATA_PATH``, else for a local catalog the folder beside it (``FILE.files``)."""
    env = os.environ.get("MOEPROXY_DATA_PATH")
    if env:
        return env
    local = catalog_file(target)
    if local is None:
        raise InputError(f"{target}: a PostgreSQL catalog needs a data path for its Parquet files "
                         "(--data-path or $MOEPROXY_DATA_PATH: a folder every host sees, or s3://...)")
    return str(local) + ".files"


def available() -> str | None:
    """None when this install can open a DuckLake catalog, else why not (one line)."""
    try:
        for wheel in EXTENSIONS:
            extension_file(wheel)
    except InputError as exc:
        return str(exc)
    return None


def extension_file(wheel: str) -> Path:
    """The ``.duckdb_extension`` file a ``duckdb-extension-<wheel>`` package ships for this DuckDB."""
    spec = importlib.util.find_spec(f"duckdb_extension_{wheel}")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"a DuckLake catalog needs the extension wheels of the team extra: pip install "
                         f"'moeproxy[team]' (duckdb-extension-{wheel}, which exists for DuckDB {WHEEL_RELEASE} only: "
                         f"the extra moves this DuckDB {duckdb.__version__} to it); they are not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    found = sorted(root.glob(f"extensions/v{duckdb.__version__}/*.duckdb_extension"))
    if not found:
        shipped = ", ".join(sorted(p.parent.name for p in root.glob("extensions/*/*.duckdb_extension"))) or "none"
        raise InputError(f"duckdb-extension-{wheel} has no extension for DuckDB {duckdb.__version__} (it ships: "
                         f"{shipped}); install the wheel of the same release: pip install 'moeproxy[team]'")
    return found[0]


def load_extensions(con, target: str, data_path: str | None = None) -> None:
    wheels = ["ducklake"] + (["postgres"] if catalog_file(target) is None else [])
    remote = data_path is not None and object_store(data_path)
    for wheel in wheels + (["httpfs"] if remote else []):
        path = extension_file(wheel)
        con.execute(f"INSTALL '{path}'")
        con.execute(f"LOAD {EXTENSIONS.get(wheel) or OBJECT_STORE[wheel]}")
    if remote:
        s3_secret(con)


def attach(con, target: str, data_path: str) -> None:
    """Attach the catalog as ``lake`` and make it the default database of the connection."""
    quoted = target.replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS {ALIAS} (DATA_PATH '{data_path.replace(chr(39), chr(39) * 2)}', "
                f"DATA_INLINING_ROW_LIMIT {INLINE_ROWS})")
    con.execute(f"USE {ALIAS}")


_NO_LAKE = [
    (re.compile(r"CREATE SEQUENCE[^;]*;\s*"), ""),
    (re.compile(r"\s+PRIMARY KEY"), ""),
    (re.compile(r"\s+UNIQUE"), ""),
]


# A view reads one run: each run's values in data files of their own, so that a Triage view reads its
# run's files and no other (``bench/team_reads.py``, 1,000 runs x 20,000 values: one run's series 192
# -> 55 ms; without it every file holds every run's rows, as many watchers interleave them). Within a
# run's files the values are sorted by (metric, step) when written out, so that a chart of a few
# metrics reads their row groups only (a run of 100,000 steps x 200 metrics, stored step by step as
# jobs log them: Triage chart 4.4 s -> 0.3-0.6 s), compressed with zstd (sorted, the steps and wall
# times no longer repeat along a row group: 14.9 bytes a value with snappy, 6.1 with zstd)
PARTITIONS = ("ALTER TABLE scalars SET PARTITIONED BY (run_id);\n"
              "ALTER TABLE routing SET PARTITIONED BY (run_id);\n")
SORTED = "ALTER TABLE scalars SET SORTED BY (metric, step);\n"
COMPRESSION = "zstd"


def lake_schema(schema: str) -> str:
    """The file store's tables without what DuckLake lacks (sequences, PRIMARY KEY, UNIQUE), the
    values partitioned by run and sorted by metric."""
    for pattern, replacement in _NO_LAKE:
        schema = pattern.sub(replacement, schema)
    return schema + PARTITIONS + SORTED


def ensure_layout(con) -> bool:
    """A catalog made before the values were sorted and zstd-compressed gets both (its files are
    rewritten so by the next merges); True when it had to."""
    current = con.execute(f"SELECT value FROM {ALIAS}.options() WHERE option_name = 'parquet_compression'").fetchall()
    if current == [(COMPRESSION,)]:
        return False
    con.execute("BEGIN TRANSACTION")
    con.execute(SORTED)
    con.execute(f"CALL {ALIAS}.set_option('parquet_compression', '{COMPRESSION}')")
    con.execute("COMMIT")
    return True


INLINE_ROWS = 10_000  # an insert of fewer rows is kept in the catalog, not written as a Parquet file
KEEP_MINUTES = 10.0   # snapshots (and the files only they need) kept this long for readers mid-query


def data_files(con) -> int:
    """Parquet files the catalog's current snapshot reads (every table)."""
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = ?",
                                        [ALIAS]).fetchall()]
    return sum(int(con.execute(f"SELECT count(*) FROM ducklake_list_files('{ALIAS}', '{t}')").fetchone()[0])
               for t in tables)


def lost_to_a_writer(exc: BaseException) -> bool:
    """Whether a catalog statement failed because another process's commit came first: DuckLake's own
    conflict, or PostgreSQL's serialization failure under it (flushing inlined rows deletes them from
    the catalog's table while a watcher appends to it: "could not serialize access due to concurrent
    update", raised as a plain ``duckdb.Error``). Such a statement can be run again."""
    text = str(exc)
    return "onflict" in text or "could not serialize access" in text or "concurrent update" in text


COMPACT_TRIES = 6  # each upkeep step, against watchers committing meanwhile


def compact(con, keep_minutes: float, tries: int = COMPACT_TRIES) -> None:
    """Flush inlined rows to Parquet, rewrite files with deleted rows, merge adjacent files, expire
    old snapshots, delete the files only they needed. Each step is a transaction of its own: one that
    a watcher's commit beat (DuckLake's optimistic concurrency: a conflict) is tried again after a
    short random pause, up to ``tries`` times, so that upkeep gets through between the commits of
    many watchers; the last conflict is raised."""
    import random
    import time

    import duckdb

    cutoff = f"now() - INTERVAL {float(keep_minutes) * 60:.0f} SECOND"
    for call in (f"ducklake_flush_inlined_data('{ALIAS}')",
                 f"ducklake_rewrite_data_files('{ALIAS}')",  # files with deleted rows
                 f"ducklake_merge_adjacent_files('{ALIAS}')",
                 f"ducklake_expire_snapshots('{ALIAS}', older_than => {cutoff})",
                 f"ducklake_cleanup_old_files('{ALIAS}', older_than => {cutoff})"):
        for attempt in range(tries):
            try:
                con.execute(f"CALL {call}").fetchall()
                break
            except duckdb.Error as exc:
                if not lost_to_a_writer(exc) or attempt == tries - 1:
                    raise
                time.sleep(random.uniform(0.05, 0.3) * min(attempt + 1, 3))
