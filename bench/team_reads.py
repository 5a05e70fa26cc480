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
  series the Triage chart asks for (``moeproxy.store.downsample.m4_series``, 4 metrics, 1,200 buckets);
- the Triage page: every read it makes for a run, uncached (dashboard/app_pages/triage.py: the runs
  list, findings, metric names, wall time or not, comparable runs, step range, the chart, the routing
  heat map, the live runs).

Usage: python bench/team_reads.py [--runs 1000] [--steps 1000] [--metrics 20] [--commits 10] [--repeat 5]
       [--layouts plain partitioned moeproxy] [--bulk [--full-runs K --full-steps N]] [--keep DIR]
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


def add_runs(store, runs: int, steps: int, metrics: int) -> None:
    """The runs, their sources and metric names (one transaction)."""
    with store.write() as tx:
        con = tx.con
        con.execute("INSERT INTO runs SELECT i, printf('run%04d', i), 'other', NULL, 'bench', 'jsonl', now(), '{}' "
                    "FROM range(1, ? + 1) r(i)", [runs])
        con.execute("INSERT INTO sources SELECT i, i, printf('/jobs/run%04d/metrics.jsonl', i), 'x', 'jsonl', 'bench', "
                    "? * ?, ?, ?, 0, 1, 0, false, now(), 0 FROM range(1, ? + 1) r(i)", [steps, metrics, steps, metrics, runs])
        con.execute("INSERT INTO metric_names SELECT r.i, printf('m%03d', m.j), printf('m%03d', m.j) "
                    "FROM range(1, ? + 1) r(i), range(?) m(j)", [runs, metrics])


def fill(store, runs: int, steps: int, metrics: int, commits: int) -> float:
    """Write the catalog's runs, sources, names and ``commits`` interleaved slices of scalars; seconds."""
    t = time.perf_counter()
    add_runs(store, runs, steps, metrics)
    per = steps // commits
    for c in range(commits):
        with store.write() as tx:
            tx.con.execute(
                "INSERT INTO scalars SELECT r.i, printf('m%03d', m.j), s.k, sin(s.k / 50 + m.j) + r.i / 1000, 0, -1, "
                "NULL, r.i FROM range(?, ?) s(k), range(1, ? + 1) r(i), range(?) m(j)",
                [c * per, (c + 1) * per, runs, metrics])
    store.compact(keep_minutes=0)
    return time.perf_counter() - t


# one run's values as a job logs them: float32 curves that decay with noise, every fifth metric a
# piecewise-constant schedule (a learning rate), a wall time per step; step-major, as watchers write
TEMPLATE = """
SELECT printf('m%03d', m.j) AS metric, s.k AS step,
       CASE WHEN m.j % 5 = 0 THEN (1e-6 * (1 + s.k // 1000))::FLOAT
            ELSE (exp(-s.k / 30000) * (1 + m.j / 100) + 0.02 * sin(s.k * 1.7 + m.j)
                  + 0.01 * hash(s.k, m.j) / 1.8e19)::FLOAT END::DOUBLE AS value,
       1.7e9 + s.k * 1.31 AS wall_time
FROM range(?) s(k), range(?) m(j) ORDER BY s.k, m.j
"""


def fill_bulk(store, runs: int, steps: int, metrics: int, full_runs: int = 0, full_steps: int = 0) -> float:
    """Runs, sources, names, then each run's values in a commit of its own (one run's template, shifted
    per run): the fast way to a catalog of 1e9+ values, each run's rows in files of their own; seconds."""
    t = time.perf_counter()
    add_runs(store, runs, steps, metrics)
    import duckdb

    template = duckdb.execute(TEMPLATE, [max(steps, full_steps if full_runs else 0), metrics]).to_arrow_table()
    for i in range(1, runs + 1):
        with store.write() as tx:
            tx.con.register("template", template)
            tx.con.execute("INSERT INTO scalars SELECT ?, metric, step, value + ? * 1e-4, 0, -1, wall_time + ?, ? "
                           "FROM template WHERE step < ?", [i, i, i, i, full_steps if i <= full_runs else steps])
            if i % max(1, runs // 20) == 0 or i == runs:
                done = time.perf_counter() - t
                print(f"  {i:,}/{runs:,} runs written, {done:,.0f} s, ~{done / i * (runs - i):,.0f} s left", flush=True)
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
    ap.add_argument("--layouts", nargs="+", default=["plain", "partitioned", "moeproxy"],
                    choices=["plain", "partitioned", "moeproxy"],
                    help="plain: every file any run's rows; partitioned: a run's rows in files of their own; "
                         "moeproxy (a new catalog's): partitioned, each run's files sorted by (metric, step), zstd")
    ap.add_argument("--full-runs", type=int, default=0, metavar="K",
                    help="the first K runs have --full-steps steps (the others --steps): a few full-size runs "
                         "in a catalog of many, where the disk does not hold every run at full size")
    ap.add_argument("--full-steps", type=int, default=100_000)
    ap.add_argument("--bulk", action="store_true",
                    help="write each run in a commit of its own from a template (1e9+ values in minutes, not hours)")
    ap.add_argument("--keep", metavar="DIR", help="build the catalogs' data under DIR (a disk with room), not /tmp")
    args = ap.parse_args()
    from moeproxy.store import Store, lake
    from moeproxy.reference import comparable_runs
    from moeproxy.store.downsample import has_wall_time, layer_heatmap, m4_series, metric_names, step_range
    from moeproxy.store.local_postgres import local_postgres

    if lake.available() is not None:
        print(f"bench/team_reads.py: skipped ({lake.available()})")
        return 0
    full = min(args.full_runs, args.runs) if args.bulk else 0
    rows = ((args.runs - full) * args.steps + full * args.full_steps) * args.metrics
    print(f"bench/team_reads.py: {args.runs:,} runs x {args.steps:,} steps x {args.metrics} metrics"
          + (f" ({full} of them {args.full_steps:,} steps)" if full else "") + f" = {rows:,} rows, "
          + ("written a run per commit (--bulk)" if args.bulk else f"written in {args.commits} interleaved commits")
          + f", then compacted; warm reads: median / max of {args.repeat}", flush=True)
    run = "run0001" if full else f"run{args.runs // 2:04d}"  # a full-size run when there are some
    metrics = [f"m{j:03d}" for j in range(min(4, args.metrics))]
    with local_postgres() as new_catalog, tempfile.TemporaryDirectory(prefix="moeproxy-bench-reads-",
                                                                      dir=args.keep) as tmp:
        for layout in args.layouts:
            data = Path(tmp) / layout
            store = Store(new_catalog(f"reads_{layout}"), data_path=str(data))
            with store.write():
                pass  # the tables made
            with store.write() as tx:  # a new catalog is laid out as moeproxy.store.lake makes it ("moeproxy")
                con = tx.con
                if layout == "plain":
                    con.execute("ALTER TABLE scalars RESET PARTITIONED BY")
                if layout != "moeproxy":  # the layouts of earlier moeproxy releases: no sort, the default codec
                    con.execute("ALTER TABLE scalars RESET SORTED BY")
                    con.execute(f"CALL {lake.ALIAS}.set_option('parquet_compression', 'snappy')")
            if args.bulk:
                seconds = fill_bulk(store, args.runs, args.steps, args.metrics, args.full_runs, args.full_steps)
                t = time.perf_counter()
                store.compact(keep_minutes=0)
                seconds += time.perf_counter() - t
            else:
                seconds = fill(store, args.runs, args.steps, args.metrics, args.commits)
            files = list(data.glob("**/*.parquet"))
            size = sum(f.stat().st_size for f in files)
            listed = timed(store.runs_overview, args.repeat)
            frame = timed(lambda: store.run_frame(run), args.repeat)
            chart = timed(lambda: m4_series(store, run, metrics, None, None, 1200), args.repeat)

            def triage_view():  # every read the Triage page makes for a run (dashboard/app_pages/triage.py), uncached
                store.runs_overview()
                store.findings(run)
                metric_names(store, run)
                has_wall_time(store, run)
                comparable_runs(store, run)
                step_range(store, run, metrics)
                m4_series(store, run, metrics, None, None, 1200)
                layer_heatmap(store, run)
                store.live_runs()

            view = timed(triage_view, args.repeat)
            n = len(store.run_frame(run))
            print(f"\n== {layout}: written and compacted in {seconds:.1f} s; {len(files):,} Parquet files, "
                  f"{size / 2**20:,.0f} MiB")
            print(f"runs list ({args.runs:,} runs): {listed[0] * 1000:,.0f} ms (max {listed[1] * 1000:,.0f})")
            print(f"one run's series ({n:,} rows): {frame[0] * 1000:,.0f} ms (max {frame[1] * 1000:,.0f})")
            print(f"Triage chart, M4 of {len(metrics)} metrics: {chart[0] * 1000:,.0f} ms (max {chart[1] * 1000:,.0f})")
            print(f"Triage page, all its reads (runs list, findings, names, wall time?, comparable runs, step range, "
                  f"chart, routing heat map, live runs): {view[0] * 1000:,.0f} ms (max {view[1] * 1000:,.0f})")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
