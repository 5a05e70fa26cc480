"""Benchmark the reads a dashboard makes on a large team catalog: the runs list and a Triage view.

A DuckLake catalog (a local PostgreSQL started by ``moeproxy.store.local_postgres``, Parquet files in a
folder) is filled with RUNS runs x STEPS steps x METRICS metrics, written the way many watchers write
them: each commit holds a slice of steps of every run, so without a layout every data file holds rows
of every run. The same data is written twice, into a catalog whose ``scalars`` table is plain and into
one PARTITIONED BY (run_id) (each run's rows in files of their own: what moeproxy makes), both compacted as the watchers'
upkeep leaves them (``moeproxy store compact``). Printed for each: the rows, the data files and their
size, the time to write, and warm read latencies (median and max of --repeat reads, after one cold):
- the runs list (``Store.runs_overview``: the dashboard's Runs page and run picker);
- a Triage view's series: one run's every metric (``Store.run_frame``) and the M4-downsampled
  series the Triage chart asks for (``moeproxy.store.downsample.m4_series``, 4 metrics, 1,200 buckets).

Usage: python bench/team_reads.py [--runs 1000] [--steps 1000] [--metrics 20] [--commits 10] [--repeat 5]
The issue's full size (1,000 x 100,000 x 200 = 2e10 rows, ~100 GB of Parquet) does not fit this
machine's disk; the figures scale down the steps and metrics and say so. Figures only; nothing here is
asserted. Needs the ``team`` extra and PostgreSQL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def fill(store, runs: int, steps: int, metrics: int, commits: int) -> float:
    """Write the catalog's runs, sources, names and ``commits`` interleaved slices of scalars; seconds."""
    t = time.perf_counter()
    with store.write() as tx:
        con = tx.con
        con.execute("INSERT INTO runs SELECT i, printf('run%04d', i), 'other', NULL, 'bench', 'jsonl', now(), '{}' "
                    "FROM range(1, ? + 1) r(i)", [runs])
        con.execute("INSERT INTO sources SELECT i, i, printf('/jobs/run%04d/metrics.jsonl', i), 'x', 'jsonl', 'bench', "
                    "? * ?, ?, ?, 0, 1, 0, false, now(), 0 FROM range(1, ? + 1) r(i)", [steps, metrics, steps, metrics, runs])
        con.execute("INSERT INTO metric_names SELECT r.i, printf('m%03d', m.j), printf('m%03d', m.j) "
                    "FROM range(1, ? + 1) r(i), range(?) m(j)", [runs, metrics])
    per = steps // commits
    for c in range(commits):
        with store.write() as tx:
            tx.con.execute(
                "INSERT INTO scalars SELECT r.i, printf('m%03d', m.j), s.k, sin(s.k / 50 + m.j) + r.i / 1000, 0, -1, "
                "NULL, r.i FROM range(?, ?) s(k), range(1, ? + 1) r(i), range(?) m(j)",
                [c * per, (c + 1) * per, runs, metrics])
    store.compact(keep_minutes=0)
    return time.perf_counter() - t


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # cold
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), max(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--commits", type=int, default=10, help="interleaved slices the scalars are written in")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from moeproxy.store import Store, lake
    from moeproxy.store.downsample import m4_series
    from moeproxy.store.local_postgres import local_postgres

    if lake.available() is not None:
        print(f"bench/team_reads.py: skipped ({lake.available()})")
        return 0
    rows = args.runs * args.steps * args.metrics
    print(f"bench/team_reads.py: {args.runs:,} runs x {args.steps:,} steps x {args.metrics} metrics = {rows:,} rows, "
          f"written in {args.commits} interleaved commits, then compacted; warm reads: median / max of {args.repeat}")
    run = f"run{args.runs // 2:04d}"
    metrics = [f"m{j:03d}" for j in range(min(4, args.metrics))]
    with local_postgres() as new_catalog, tempfile.TemporaryDirectory(prefix="moeproxy-bench-reads-") as tmp:
        for layout in ("plain", "partitioned by run_id"):
            data = Path(tmp) / layout.split()[0]
            store = Store(new_catalog(f"reads_{layout.split()[0]}"), data_path=str(data))
            with store.write():
                pass  # the tables made
            with store.read() as con:  # (a new catalog's tables are partitioned: moeproxy.store.lake.PARTITIONS)
                con.execute("ALTER TABLE scalars " + ("RESET PARTITIONED BY" if layout == "plain"
                                                      else "SET PARTITIONED BY (run_id)"))
            seconds = fill(store, args.runs, args.steps, args.metrics, args.commits)
            files = list(data.glob("**/*.parquet"))
            size = sum(f.stat().st_size for f in files)
            listed = timed(store.runs_overview, args.repeat)
            frame = timed(lambda: store.run_frame(run), args.repeat)
            chart = timed(lambda: m4_series(store, run, metrics, None, None, 1200), args.repeat)
            n = len(store.run_frame(run))
            print(f"\n== {layout}: written and compacted in {seconds:.1f} s; {len(files):,} Parquet files, "
                  f"{size / 2**20:,.0f} MiB")
            print(f"runs list ({args.runs:,} runs): {listed[0] * 1000:,.0f} ms (max {listed[1] * 1000:,.0f})")
            print(f"one run's series ({n:,} rows): {frame[0] * 1000:,.0f} ms (max {frame[1] * 1000:,.0f})")
            print(f"Triage chart, M4 of {len(metrics)} metrics: {chart[0] * 1000:,.0f} ms (max {chart[1] * 1000:,.0f})")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
