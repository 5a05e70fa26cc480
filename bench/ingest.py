"""Ingest speed and memory, each format against its fastest native reader, in one run.

Generates (in a temporary directory; ``--dir`` chooses where: a tmpfs keeps disk writes out of
the figures) five inputs and times, alternately, ``moeproxy ingest`` into a new DuckDB file in a
fresh process (start-up included) and the reference reader in a fresh process:

- TensorBoard: 100,000 steps x 20 tags = 2M scalars in tensorboardX's layout (one event per
  scalar); reference: TensorBoard's ``EventAccumulator`` loading every scalar
  (``size_guidance={'scalars': 0}``).
- verl JSONL: 20,000 steps x 200 metrics = 4M values (``{"step": N, "data": {...}}``, NaN as
  null); reference: DuckDB's fastest native read of that layout, ``read_json(columns={'step':
  'BIGINT', 'data': 'JSON'})`` with ``unnest(json_keys(data))`` and ``unnest(CAST(json_extract(data,
  '$.*') AS DOUBLE[]))``, into a table of a DuckDB file.
- the same JSONL against a floor: DuckDB's read written straight into moeproxy's 8-column scalars
  table, with none of ingest's checks, name mapping, attempts or grouping by metric.
- the same JSONL against the bare skeleton of ingest's design: DuckDB's read into numpy, the rows put
  in metric order by numpy and written by one INSERT into moeproxy's scalars table, with no checks,
  hash, name mapping or attempts (the first line's keys name the values).
- the same JSONL against the same job done in DuckDB: the reference read, its table written grouped
  by metric in log order (``ORDER BY metric, step``; the generated steps only increase), as moeproxy
  stores it so that reading one series skips the other metrics' row groups. For each JSONL table
  and moeproxy's, the time to read one series back as the dashboard reads it (within the metric's
  row-id range) is printed too (median over reads of 9 metrics, each 3 times, in a fresh read-only
  connection).
- flat JSON records (the ``jsonl`` format: HF/TRL-style loggers): 20,000 steps x 200 metrics = 4M
  values (``{"step": N, "train/loss": ..., ...}``); reference: DuckDB's fastest read of that layout
  found, ``read_ndjson_objects`` with ``json_keys`` and ``json_extract(json, '$.*')`` in a subquery,
  unnested, the step key dropped, into a table of a DuckDB file (auto-detected columns and
  ``UNPIVOT`` took 4.1 s).
- a W&B-style CSV export: 20,000 steps x 200 metric columns, one metric logged every other step
  (its other cells empty); reference: DuckDB's ``read_csv`` (types detected) and ``UNPIVOT``, which
  leaves empty cells out as ingest does.
- Megatron text: 200,000 iteration lines x 10 fields = 2M values; reference: DuckDB reading the
  lines (``read_csv`` of one column) and splitting them with ``regexp_extract_all`` into a table.

Each figure is the median of ``--repeat`` runs (wall seconds, CPU seconds of the process and its
children beside them), with the peak RSS. After the timed runs, the values moeproxy stored are
compared with the reference's (every value; NaN equal to NaN). Prints one table.

    python bench/ingest.py [--repeat 3] [--formats tensorboard,jsonl,records,csv,megatron] [--dir /dev/shm]

To time another checkout (a before and after), run this script from that checkout's directory with
PYTHONPATH set to it: ``moeproxy ingest`` runs as ``python -m moeproxy``, which puts the working
directory first on sys.path, ahead of PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_verl_jsonl(path: Path, steps: int, metrics: int) -> int:
    rng = random.Random(0)
    names = ["actor/grad_norm", "actor/pg_loss", "actor/entropy", "critic/score/mean"]
    names += [f"perf/metric_{i:03d}" for i in range(metrics - len(names))]
    with open(path, "w") as fh:
        for step in range(1, steps + 1):
            data = {name: rng.random() for name in names}
            if step % 5000 == 0:
                data["actor/grad_norm"] = None  # orjson's NaN
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
    return steps * metrics


def write_flat_jsonl(path: Path, steps: int, metrics: int) -> int:
    """Flat records, as HF/TRL-style loggers write them: ``{"step": N, "train/loss": ..., ...}``."""
    rng = random.Random(2)
    names = ["train/loss", "train/grad_norm", "train/learning_rate"]
    names += [f"train/metric_{i:03d}" for i in range(metrics - len(names))]
    with open(path, "w") as fh:
        for step in range(1, steps + 1):
            record = {"step": step} | {name: rng.random() for name in names}
            if step % 5000 == 0:
                record["train/grad_norm"] = None
            fh.write(json.dumps(record) + "\n")
    return steps * metrics


def write_wandb_csv(path: Path, steps: int, metrics: int) -> int:
    """A W&B-style history export: a ``Step`` column, then one column per metric; a metric logged
    every other step leaves its other cells empty (not logged), and a NaN is spelled ``nan``."""
    rng = random.Random(3)
    names = ["train/loss", "train/grad_norm", "eval/reward"] + [f"train/metric_{i:03d}" for i in range(metrics - 3)]
    values = 0
    with open(path, "w") as fh:
        fh.write("Step," + ",".join(names) + "\n")
        for step in range(1, steps + 1):
            cells = [f"{rng.random():.9g}" for _ in names]
            cells[1] = "nan" if step % 5000 == 0 else cells[1]
            if step % 2:
                cells[2] = ""  # eval/reward: every other step
            values += sum(1 for c in cells if c)
            fh.write(f"{step}," + ",".join(cells) + "\n")
    return values


def write_megatron_log(path: Path, iterations: int) -> int:
    rng = random.Random(1)
    values = 0
    with open(path, "w") as fh:
        for it in range(1, iterations + 1):
            loss = 10.0 * math.exp(-it / 50000) + rng.random() * 0.05
            fields = [
                f"consumed samples: {it * 288:12d}", f"elapsed time per iteration (ms): {11000 + rng.random() * 500:.1f}",
                f"learning rate: {3e-4:.6E}", "global batch size:   288", f"lm loss: {loss:.6E}",
                f"load_balancing_loss: {1.0 + rng.random() * 0.1:.6E}", f"loss scale: {1.0:.1f}",
                f"grad norm: {0.5 + rng.random():.3f}", "number of skipped iterations:   0",
                "number of nan iterations:   0",
            ]
            fh.write(f"[default0]: [2026-01-01 00:00:00] iteration {it:8d}/ {iterations:8d} | " + " | ".join(fields) + " |\n")
            values += len(fields)
            if it % 1000 == 0:
                fh.write("[default0]: (min, max) time across ranks (ms):\n")
    return values


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | 0x80 if n else low)
        if not n:
            return bytes(out)


def write_event_file(directory: Path, steps: int, tags: list[str], value_of, wall0: float = 1.7e9) -> Path:
    """A TensorBoard event file as tensorboardX writes it (a test checks it byte for byte): a
    file_version event, then one event per scalar for steps 1..steps. tensorboardX itself takes
    minutes for 2M scalars (its checksums are pure Python); the checksums here come in bulk."""
    import numpy as np

    from moeproxy.ingest.formats.tensorboard.crc32c import crc32c, crc32c_equal_length, masked

    payloads = [b"\x09" + struct.pack("<d", wall0) + b"\x1a\x0dbrain.Event:2"]
    tag_fields = [b"\x0a" + _varint(len(t.encode())) + t.encode() for t in tags]
    pack_d, pack_f = struct.Struct("<d").pack, struct.Struct("<f").pack
    for step in range(1, steps + 1):
        head = b"\x10" + _varint(step)
        for i, tag_field in enumerate(tag_fields):
            value = tag_field + b"\x15" + pack_f(value_of(step, i))
            summary = b"\x0a" + _varint(len(value)) + value
            payloads.append(b"\x09" + pack_d(wall0 + step * 0.01) + head + b"\x2a" + _varint(len(summary)) + summary)
    lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    crcs = np.empty(len(payloads), np.uint32)
    for length in np.unique(lengths).tolist():
        members = np.flatnonzero(lengths == length)
        crcs[members] = masked(crc32c_equal_length(buf, starts[members], length))
    header = struct.Struct("<QI").pack
    length_crc = {n: masked(crc32c(struct.pack("<Q", n))) for n in np.unique(lengths).tolist()}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"events.out.tfevents.{int(wall0)}.bench"
    with open(path, "wb") as fh:
        fh.write(b"".join(header(len(p), length_crc[len(p)]) + p + struct.pack("<I", c)
                          for p, c in zip(payloads, crcs.tolist())))
    return path


# Runs the measured command and reports its wall time, CPU time and peak RSS. A small process of
# its own: a child inherits the high-water RSS of the process it was forked from (Linux keeps it
# across exec), so a child of this script, which holds the generated inputs, would report this
# script's RSS when its own is smaller.
LAUNCH = """
import os, resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.run(sys.argv[1:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"measured {time.perf_counter() - started} {usage.ru_utime + usage.ru_stime} {usage.ru_maxrss}")
sys.exit(code)
"""


def run_child(args: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MiB, output) of one command."""
    proc = subprocess.run([sys.executable, "-c", LAUNCH, *map(str, args)], capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed:\n{text}")
    wall, cpu, kib = proc.stdout.rsplit("measured", 1)[1].split()
    return float(wall), float(cpu), float(kib) / 1024, proc.stdout.rsplit("measured", 1)[0]


# Every scalar through TensorBoard's own loader; the arrays are saved for the value check after the
# clock stopped (the time that takes is printed, and taken off the wall time).
EVENT_ACCUMULATOR = """
import sys, time
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
ea.Reload()
events = {tag: ea.Scalars(tag) for tag in ea.Tags()["scalars"]}
loaded = time.perf_counter()
import numpy as np
tags, steps, values, walls = [], [], [], []
for tag, evs in events.items():
    tags += [tag] * len(evs)
    steps += [e.step for e in evs]
    values += [e.value for e in evs]
    walls += [e.wall_time for e in evs]
np.savez(sys.argv[2], tag=np.asarray(tags), step=np.asarray(steps), value=np.asarray(values), wall=np.asarray(walls))
print(f"dump {time.perf_counter() - loaded:.3f}")
"""

DUCKDB_JSON = """
import sys, duckdb
path, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(f'''CREATE TABLE t AS SELECT step, unnest(json_keys(data)) AS metric,
    unnest(CAST(json_extract(data, '$.*') AS DOUBLE[])) AS value
    FROM read_json('{path}', columns = {{'step': 'BIGINT', 'data': 'JSON'}}, format = 'newline_delimited')''')
print(con.execute("SELECT count(*) FROM t").fetchone()[0])
"""

# The floor under any ingest into moeproxy's store: the same DuckDB read, written straight into a
# run database's scalars table (moeproxy's schema: 8 columns) with none of ingest's work: no checks
# (the file's bytes, its hash, what DuckDB reads that Python's json refuses), no names mapped, no
# attempts numbered, rows not grouped by metric. How far moeproxy is from this is the cost of those.
DUCKDB_JSON_INTO_STORE = """
import sys, duckdb
path, schema, db = sys.argv[1], sys.argv[2], sys.argv[3]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(schema)  # moeproxy's tables, as the store creates them (the text passed in: no moeproxy import)
con.execute(f"INSERT INTO scalars SELECT 1, metric, step, value, 0, -1, CAST('nan' AS DOUBLE), 1 FROM ("
            "SELECT step, unnest(json_keys(data)) AS metric, unnest(CAST(json_extract(data, '$.*') AS DOUBLE[])) AS value "
            f"FROM read_json('{path}', columns = {{'step': 'BIGINT', 'data': 'JSON'}}, format = 'newline_delimited'))")
print(con.execute("SELECT count(*) FROM scalars").fetchone()[0])
"""

# The bare skeleton of ingest's design, with none of its work: DuckDB reads each line's step and
# values (the first line's keys name them: one key list assumed), numpy puts the rows in metric
# order, and one INSERT writes them into moeproxy's scalars table. No checks, hash, names or attempts:
# how far this is from the reference is what reading first and writing grouped after costs.
DUCKDB_TWO_PHASE = """
import sys, duckdb, numpy as np, pyarrow as pa
path, schema, db = sys.argv[1], sys.argv[2], sys.argv[3]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(schema)
source = f"read_json('{path}', columns = {{'step': 'BIGINT', 'data': 'JSON'}}, format = 'newline_delimited')"
names = con.execute(f"SELECT json_keys(data) FROM {source} LIMIT 1").fetchall()[0][0]
steps, values = [], []
for batch in con.sql(f"SELECT step, CAST(json_extract(data, '$.*') AS DOUBLE[]) AS v FROM {source}").to_arrow_reader(2048):
    steps.append(batch.column(0).to_numpy())
    values.append(batch.column(1).values.to_numpy(zero_copy_only=False))
k = len(names)
def grouped(column):
    return np.ascontiguousarray(column.reshape(-1, k).T).reshape(-1)
value = np.concatenate(values)
step = np.repeat(np.concatenate(steps), k)
code = np.tile(np.arange(k, dtype=np.int32), len(value) // k)
con.register("rows", pa.table({"metric": pa.DictionaryArray.from_arrays(pa.array(grouped(code)), pa.array(names)),
                               "step": grouped(step), "value": grouped(value)}))
con.execute("INSERT INTO scalars SELECT 1, CAST(metric AS VARCHAR), step, value, 0, -1, CAST('nan' AS DOUBLE), 1 FROM rows")
con.execute("CREATE VIEW t AS SELECT metric, step, value FROM scalars")
print(con.execute("SELECT count(*) FROM t").fetchone()[0])
"""

# Flat records: each line read whole as JSON, its keys and values listed (in a subquery: with the
# lists unnested in the same SELECT, DuckDB re-reads the line for the step of every value), the
# step key itself dropped after unnesting.
DUCKDB_FLAT_JSON = """
import sys, duckdb
path, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(f'''CREATE TABLE t AS SELECT step, metric, value FROM (
    SELECT step, unnest(k) AS metric, unnest(v) AS value FROM (
        SELECT CAST(json_extract(json, '$.step') AS BIGINT) AS step, json_keys(json) AS k,
               CAST(json_extract(json, '$.*') AS DOUBLE[]) AS v
        FROM read_ndjson_objects('{path}')))
    WHERE metric <> 'step' ''')
print(con.execute("SELECT count(*) FROM t").fetchall()[0][0])
"""

# A W&B export: DuckDB's CSV reader (types detected), each metric column turned into rows by
# UNPIVOT, which leaves empty cells (NULL) out as ingest does.
DUCKDB_CSV = """
import sys, duckdb
path, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(f'''CREATE TABLE t AS SELECT "Step" AS step, metric, value FROM (
    UNPIVOT (SELECT * FROM read_csv('{path}')) ON COLUMNS(* EXCLUDE ("Step")) INTO NAME metric VALUE value)''')
print(con.execute("SELECT count(*) FROM t").fetchall()[0][0])
"""

# The same job as ingest's write: the reference's table, grouped by metric with log order kept in each
# (rows sorted by metric, then step: the generated file's steps only increase), the layout that lets
# a reader of one series skip the other metrics' row groups.
DUCKDB_JSON_GROUPED = DUCKDB_JSON.replace("format = 'newline_delimited')", "format = 'newline_delimited') ORDER BY metric, step")
assert DUCKDB_JSON_GROUPED != DUCKDB_JSON

# the fastest of the patterns tried (a leading space instead of a lazy quantifier or \s classes)
DUCKDB_REGEX = r"""
import sys, duckdb
path, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
pattern = " ([^|:]+): +([^ |]+) \\|"
con.execute(f'''CREATE TABLE t AS SELECT CAST(regexp_extract(line, 'iteration +(\\d+)/', 1) AS BIGINT) AS step,
    unnest(regexp_extract_all(line, '{pattern}', 1)) AS metric,
    unnest(CAST(regexp_extract_all(line, '{pattern}', 2) AS DOUBLE[])) AS value
    FROM read_csv('{path}', columns = {{'line': 'VARCHAR'}}, delim = '\x01', header = false, quote = '',
                  escape = '', auto_detect = false)
    WHERE line LIKE '%iteration%' ''')
print(con.execute("SELECT count(*) FROM t").fetchone()[0])
"""

STORED = ("SELECT n.original AS metric, s.step, s.value, s.wall_time FROM ours.scalars s JOIN ours.metric_names n "
          "ON n.run_id = s.run_id AND n.metric = s.metric")


def check_against_duckdb(ours: Path, reference: Path, skip_metrics=()) -> str:
    """Every stored value against the reference table's (NaN equal to NaN, as DuckDB compares)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"ATTACH '{ours}' AS ours (READ_ONLY)")
    con.execute(f"ATTACH '{reference}' AS ref (READ_ONLY)")
    skip = ", ".join(f"'{m}'" for m in skip_metrics) or "''"
    mine = f"SELECT metric, step, value FROM ({STORED}) WHERE metric NOT IN ({skip})"
    theirs = ("SELECT trim(metric) AS metric, step, coalesce(value, 'nan'::DOUBLE) AS value FROM ref.t "
              f"WHERE trim(metric) NOT IN ({skip})")
    n_mine, n_theirs = (con.execute(f"SELECT count(*) FROM ({q})").fetchone()[0] for q in (mine, theirs))
    differ = con.execute(f"SELECT count(*) FROM (({mine}) EXCEPT ALL ({theirs}))").fetchone()[0]
    ok = differ == 0 and n_mine == n_theirs
    return f"{'identical' if ok else 'DIFFERENT'} ({n_mine:,} vs {n_theirs:,} values, {differ} differ)"


def series_read_ms(db: Path, table: str, where: str = "") -> float:
    """Median milliseconds to read one series (step, value) of a stored table as the dashboard reads
    it (``moeproxy.store.downsample``): an equality filter on the metric within the metric's row-id range,
    the ranges read first with one GROUP BY (the dashboard keeps them per run; not timed). DuckDB
    keeps a string column's min and max only to a prefix (``perf/metric_`` of ``perf/metric_042``),
    so the metric filter alone skips no row group when names share one; the row-id range skips every
    row group outside the series when the table is grouped by metric, none when it is not.
    9 metrics spread over the names, each read 3 times, after one warm-up read, in a fresh
    read-only connection."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        ranges = {m: (lo, hi) for m, lo, hi in con.execute(
            f"SELECT metric, min(rowid), max(rowid) FROM {table} GROUP BY metric ORDER BY metric").fetchall()}
        names = list(ranges)
        picked = names[:: max(1, len(names) // 9)][:9]
        sql = f"SELECT step, value FROM {table} WHERE rowid BETWEEN ? AND ? AND {where}metric = ? ORDER BY step"
        con.execute(sql, [*ranges[picked[0]], picked[0]]).fetchnumpy()
        times = []
        for metric in picked:
            for _ in range(3):
                start = time.perf_counter()
                con.execute(sql, [*ranges[metric], metric]).fetchnumpy()
                times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000
    finally:
        con.close()


def check_against_accumulator(ours: Path, dump: Path) -> str:
    """Every stored value, step and wall time against EventAccumulator's."""
    import duckdb
    import numpy as np

    ref = np.load(dump)
    con = duckdb.connect()
    con.execute(f"ATTACH '{ours}' AS ours (READ_ONLY)")
    mine = con.execute(f"SELECT * FROM ({STORED}) ORDER BY metric, step").fetchnumpy()
    order = np.lexsort((ref["step"], ref["tag"]))
    same = (len(order) == len(mine["step"]) and np.array_equal(ref["tag"][order], mine["metric"].astype(str))
            and np.array_equal(ref["step"][order], mine["step"])
            and np.array_equal(ref["value"][order], mine["value"], equal_nan=True)
            and np.array_equal(ref["wall"][order], mine["wall_time"]))
    return f"{'identical' if same else 'DIFFERENT'} ({len(mine['step']):,} vs {len(order):,} values, steps and wall times)"


def _store_schema() -> str:
    from moeproxy.store import _SCHEMA  # the SQL that creates a run database's tables

    return _SCHEMA


def _size(path: Path) -> float:
    return sum(f.stat().st_size for f in ([path] if path.is_file() else path.iterdir())) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tb-steps", type=int, default=100_000)
    parser.add_argument("--tb-tags", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--metrics", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (the median is shown)")
    parser.add_argument("--formats", default="tensorboard,jsonl,records,csv,megatron")
    parser.add_argument("--dir", help="where the inputs and databases go (default: a temporary directory)")
    args = parser.parse_args()
    formats = args.formats.split(",")
    moeproxy = [sys.executable, "-m", "moeproxy", "ingest"]

    rows, reads = [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        tmp = Path(tmp)
        inputs = {}
        if "tensorboard" in formats:
            tags = [f"train/metric_{i:02d}" for i in range(args.tb_tags)]

            def value_of(step: int, i: int) -> float:
                return math.nan if (step * 7 + i) % 99991 == 0 else math.sin(step * 1e-3 + i)

            path = write_event_file(tmp / "tb", args.tb_steps, tags, value_of)
            inputs["tensorboard"] = (path.parent, args.tb_steps * args.tb_tags, "EventAccumulator, every scalar",
                                     [sys.executable, "-c", EVENT_ACCUMULATOR, str(path.parent)], ".npz")
        if "jsonl" in formats:
            path = tmp / "verl_run.jsonl"
            n = write_verl_jsonl(path, args.steps, args.metrics)
            inputs["jsonl"] = (path, n, "DuckDB read_json + json_keys/json_extract",
                               [sys.executable, "-c", DUCKDB_JSON, str(path)], ".duckdb")
            inputs["jsonl, floor"] = (path, n, "the same read straight into moeproxy's scalars table, no checks",
                                      [sys.executable, "-c", DUCKDB_JSON_INTO_STORE, str(path), _store_schema()], ".duckdb")
            inputs["jsonl, two phases"] = (path, n, "the same read into numpy, then written grouped by metric (no checks)",
                                           [sys.executable, "-c", DUCKDB_TWO_PHASE, str(path), _store_schema()], ".duckdb")
            inputs["jsonl, same job"] = (path, n, "the same read, its table grouped by metric in log order",
                                         [sys.executable, "-c", DUCKDB_JSON_GROUPED, str(path)], ".duckdb")
        if "records" in formats:
            path = tmp / "records.jsonl"
            n = write_flat_jsonl(path, args.steps, args.metrics)
            inputs["records"] = (path, n, "DuckDB read_ndjson_objects + json_keys/json_extract",
                                 [sys.executable, "-c", DUCKDB_FLAT_JSON, str(path)], ".duckdb")
        if "csv" in formats:
            path = tmp / "wandb_export.csv"
            n = write_wandb_csv(path, args.steps, args.metrics)
            inputs["csv"] = (path, n, "DuckDB read_csv + UNPIVOT", [sys.executable, "-c", DUCKDB_CSV, str(path)],
                             ".duckdb")
        if "megatron" in formats:
            path = tmp / "megatron_run.log"
            n = write_megatron_log(path, args.iterations)
            inputs["megatron"] = (path, n, "DuckDB read_csv + regexp_extract_all",
                                  [sys.executable, "-c", DUCKDB_REGEX, str(path)], ".duckdb")
        for name, (path, n, ref_name, ref_cmd, suffix) in inputs.items():
            print(f"{name}: {n:,} values, {_size(path):.0f} MiB", flush=True)
            ours, theirs = [], []
            for i in range(args.repeat):
                db, out = tmp / f"{name}-{i}.duckdb", tmp / f"{name}-ref-{i}{suffix}"
                seconds, cpu, rss, text = run_child(ref_cmd + [str(out)])
                if name == "tensorboard":
                    seconds -= float(text.split("dump")[-1].split()[0])
                theirs.append((seconds, cpu, rss))
                ours.append(run_child(moeproxy + [str(path), "--db", str(db)])[:3])
                print(f"  run {i + 1}: moeproxy {ours[-1][0]:.2f} s, reference {theirs[-1][0]:.2f} s", flush=True)
                if i < args.repeat - 1:
                    db.unlink()
                    out.unlink()
            if name == "tensorboard":
                check = check_against_accumulator(db, out)
            elif name == "jsonl, floor":
                check = "(a floor: not compared)"
            else:  # Megatron's step time is stored in seconds (the log prints ms): not compared
                check = check_against_duckdb(db, out, ("elapsed time per iteration (ms)",) if name == "megatron" else ())
            print(f"  values: {check}", flush=True)
            if name.startswith("jsonl"):
                table = "scalars" if name in ("jsonl, floor", "jsonl, two phases") else "t"
                reads.append((name, ref_name, series_read_ms(out, table, "run_id = 1 AND " if table == "scalars" else "")))
                if name == "jsonl":
                    reads.append(("jsonl", "moeproxy", series_read_ms(db, "scalars", "run_id = 1 AND ")))

            def median(runs, k):
                return statistics.median(r[k] for r in runs)

            rows.append((name, n, ref_name, median(ours, 0), median(ours, 1), max(r[2] for r in ours),
                         median(theirs, 0), median(theirs, 1), max(r[2] for r in theirs), check))
    print(f"\nmedian of {args.repeat} runs each: wall seconds (CPU seconds of the process and its children); peak RSS")
    print("| input | values | moeproxy ingest | reference | reference reader | ratio wall | ratio CPU | "
          "peak RSS moeproxy / reference | stored values |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, ref_name, ow, oc, orss, tw, tc, trss, check in rows:
        print(f"| {name} | {n / 1e6:.1f}M | {ow:.2f} s ({oc:.2f}) | {tw:.2f} s ({tc:.2f}) | {ref_name} | "
              f"{ow / tw:.2f}x | {oc / tc:.2f}x | {orss:.0f} / {trss:.0f} MiB | {check} |")
    if reads:
        print("\nreading one series back from what was stored, as the dashboard reads it "
              "(median of 27 reads: 9 metrics x 3)")
        print("| table | written by | one series |")
        print("|---|---|---|")
        for name, writer, ms in reads:
            print(f"| {name} | {writer} | {ms:.1f} ms |")


if __name__ == "__main__":
    main()
