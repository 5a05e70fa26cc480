"""Ingest speed and memory against DuckDB's own JSON reader.

Generates (in a temporary directory) a verl file-logger JSONL run of 20,000 steps x 200 metrics
(4 million values) and a Megatron text log of 200,000 iterations, then times
``moeproxy ingest`` on each in a fresh process (start-up included) into a new DuckDB file, and
DuckDB reading the same JSONL natively (``read_json`` + unpivot into a table) as the reference.
Peak memory is the child process's max RSS. Prints one line per measurement.

    python bench/ingest.py [--steps 20000] [--metrics 200] [--iterations 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
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

    from moeproxy.ingest.crc32c import crc32c, crc32c_equal_length, masked

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


def run_child(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB of that child, stdout); CPU seconds are printed too."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{text}")
    cpu = usage.ru_utime + usage.ru_stime
    print(f"    (cpu {cpu:.2f} s)", end="")
    return seconds, usage.ru_maxrss / 1024, text


DUCKDB_NATIVE = """
import sys, duckdb
path, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(f"CREATE TABLE t AS SELECT step, e.key AS metric, e.value AS value FROM (SELECT step, unnest(map_entries(data)) AS e FROM read_json('{path}', format='newline_delimited'))")
print(con.execute("SELECT count(*) FROM t").fetchall()[0][0])
"""

DUCKDB_NATIVE_STRUCT = """
import sys, duckdb
path, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(f"CREATE TABLE t AS UNPIVOT (SELECT step, unnest(data) FROM read_json('{path}', format='newline_delimited', map_inference_threshold=-1)) ON COLUMNS(* EXCLUDE step) INTO NAME metric VALUE value")
print(con.execute("SELECT count(*) FROM t").fetchall()[0][0])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--metrics", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=200000)
    parser.add_argument("--repeat", type=int, default=3, help="ingests timed per file (median and best printed)")
    args = parser.parse_args()
    moeproxy = [sys.executable, "-m", "moeproxy"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        jsonl, megatron = tmp / "verl_run.jsonl", tmp / "megatron_run.log"
        print(f"generating {args.steps} steps x {args.metrics} metrics verl JSONL and {args.iterations} Megatron iterations ...",
              flush=True)
        n_json = write_verl_jsonl(jsonl, args.steps, args.metrics)
        n_text = write_megatron_log(megatron, args.iterations)
        print(f"  {jsonl.name}: {jsonl.stat().st_size / 2**20:.0f} MiB, {n_json:,} values; "
              f"{megatron.name}: {megatron.stat().st_size / 2**20:.0f} MiB, {n_text:,} values", flush=True)

        ref_times = []
        for name, script in (("map", DUCKDB_NATIVE), ("struct+unpivot", DUCKDB_NATIVE_STRUCT)):
            seconds, rss, out = run_child([sys.executable, "-c", script, str(jsonl), str(tmp / f"ref_{name}.duckdb")])
            ref_times.append(seconds)
            print(f"\nduckdb native read_json ({name}) : {seconds:6.2f} s  {int(out.split()[-1]) / seconds / 1e6:5.2f} M values/s  "
                  f"peak RSS {rss:6.0f} MiB", flush=True)
        reference = min(ref_times)

        def timed_ingest(path: Path, label: str) -> tuple[float, float, float, str]:
            """Median and best wall time of --repeat fresh ingests (each into a new database)."""
            times, peak, out = [], 0.0, ""
            for i in range(args.repeat):
                db = tmp / f"{label}-{i}.duckdb"
                seconds, rss, out = run_child(moeproxy + ["ingest", str(path), "--db", str(db)])
                times.append(seconds)
                peak = max(peak, rss)
                db.unlink()
            return statistics.median(times), min(times), peak, out

        median, best, rss, out = timed_ingest(jsonl, "jsonl")
        print(f"\nmoeproxy ingest verl JSONL      : median {median:6.2f} s  best {best:6.2f} s of {args.repeat}  "
              f"{n_json / median / 1e6:5.2f} M values/s (median)  peak RSS {rss:6.0f} MiB  "
              f"ratio to DuckDB native {median / reference:.2f}x (target <= 2x)")
        print(f"  {out.splitlines()[0]}", flush=True)
        median, best, rss2, out = timed_ingest(megatron, "megatron")
        print(f"\nmoeproxy ingest Megatron text   : median {median:6.2f} s  best {best:6.2f} s of {args.repeat}  "
              f"{n_text / median / 1e6:5.2f} M values/s (median, {n_text / best / 1e6:.2f} best)  "
              f"peak RSS {rss2:6.0f} MiB  (target >= 1 M values/s, < 1024 MiB)")
        print(f"  {out.splitlines()[0]}")
        seconds, _, _ = run_child(moeproxy + ["runs", "--db", str(tmp / "b.duckdb")])
        print(f"moeproxy runs (start-up + query): {seconds:6.2f} s")


if __name__ == "__main__":
    main()
