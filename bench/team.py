"""Benchmark the team store: N watchers on N growing logs into one store, N dashboards reading.

For each store kind (the single DuckDB file, and a DuckLake catalog in a local PostgreSQL server
with its Parquet files in a folder) and each N in --watchers: N run directories are written by one
writer process (one JSON line per step per run at --rate steps/s, --metrics metrics each; run i
overflows from step 150 + 5 i: ``bench/watch.py``'s writer), each followed by its own
``moeproxy watch`` process, while N reader processes do what a dashboard does every half second
(the runs list, then one run's series: the Triage view's read) on the same store. With --kill, the
watcher of run 0 is killed with SIGKILL half-way through the writing and started again 2 s later.

Printed per store and N:
- rows per second stored over the writing, what the jobs offered, and after the writers stop and the
  watchers catch up: rows stored vs rows written, and rows stored twice (exactly once = 0 and 0);
- alert latency: from the overflow line written to its alert line in the watcher's alerts file,
  p50 / p95 / max, and how many runs alerted;
- view latency: the readers' runs list and one-run series (a run the list shows), p50 / p95 / max, and failed
  reads (--readers sets how many dashboards read; default one per watcher);
- files on disk under the store (the DuckDB file and its WAL; the catalog's Parquet files), before
  and after ``moeproxy store compact``;
- CPU seconds the watchers, the readers and PostgreSQL used until the watchers caught up, beside what
  the machine's CPUs could give in that time (on a small machine N watchers and N readers compete
  for the same cores: where the time goes says what a bigger one, or one host per job, would change).

Usage: python bench/team.py [--watchers 1 4 16] [--rate 5] [--metrics 20] [--seconds 50] [--kill]
       [--stores file catalog] [--sample-files SECONDS] [--json FILE]
(An hour at real speed: --stores catalog --watchers 4 --readers 1 --seconds 3600 --sample-files 60: the
watchers' own upkeep, every 10 minutes, is what keeps the file count bounded.)
Figures only; nothing here is asserted. The catalog needs the ``team`` extra and PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from watch import WRITER, cpu_seconds, percentile  # bench/watch.py: the same jobs

READER = r"""
import json, signal, sys, time
from moeproxy.store import Store
db, data_path, runs, out, seconds = sys.argv[1], sys.argv[2] or None, sys.argv[3].split(","), sys.argv[4], float(sys.argv[5])
lists, views, failed = [], [], []
store = Store(db, data_path=data_path)
end = time.time() + seconds
i = 0
while time.time() < end:
    try:
        t = time.perf_counter()
        listed = store.runs_overview()
        t1 = time.perf_counter()
        lists.append(t1 - t)
        present = [r for r in runs if r in set(listed["run"])]  # a dashboard shows the runs that exist
        if present:
            store.run_frame(present[i % len(present)])
            views.append(time.perf_counter() - t1)
    except Exception as exc:
        failed.append(f"{type(exc).__name__}: {str(exc)[:120]}")
    i += 1
    time.sleep(0.5)
json.dump({"lists": lists, "views": views, "failed": failed}, open(out, "w"))
"""


def alerts_of(root: Path, runs: int, seen: dict) -> None:
    now = time.time()
    for i in range(runs):
        path = root / f"alerts{i:02d}.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                alert = json.loads(line)
                seen.setdefault(alert["run"], (now, alert))


def postgres_cpu() -> float:
    """CPU seconds used so far by PostgreSQL: every ``postgres`` process's own time, plus the time of
    the backends the server has reaped (its children's time)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(postgres)" not in text:
            continue
        fields = text.rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def files_on_disk(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file() and (p.suffix in (".duckdb", ".wal", ".parquet")))


def counts(db: str, data_path: str | None) -> tuple[int, int, dict[str, int]]:
    from moeproxy.store import Store

    with Store(db, data_path=data_path).read() as con:
        rows, twice = con.execute(
            "SELECT count(*), count(*) - count(DISTINCT (run_id, metric, step)) FROM scalars").fetchone()
        per_run = dict(con.execute(
            "SELECT r.name, count(*) FROM scalars s JOIN runs r USING (run_id) GROUP BY r.name").fetchall())
    return rows, twice, per_run


def stop_all(watchers: list[subprocess.Popen]) -> None:
    """SIGTERM every watcher (each stores what it read and stops), then wait; kill one that hangs."""
    for w in watchers:
        w.send_signal(signal.SIGTERM)
    for w in watchers:
        try:
            w.wait(60)
        except subprocess.TimeoutExpired:
            w.kill()


def one_case(kind: str, db: str, data_path: str | None, n: int, args, root: Path) -> dict:
    dirs = []
    for i in range(n):
        d = root / f"run{i:02d}"
        d.mkdir()
        (d / "metrics.jsonl").write_text("")
        dirs.append(d)
    common = ["--db", db] + (["--data-path", data_path] if data_path else [])

    def start_watcher(i: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "moeproxy", "watch", str(dirs[i]), *common, "--alerts",
                                 str(root / f"alerts{i:02d}.jsonl"), "--interval", "1"],
                                stdout=open(root / f"watch{i:02d}.out", "a"), stderr=subprocess.STDOUT)

    watchers = [start_watcher(i) for i in range(n)]
    deadline = time.time() + 120
    while time.time() < deadline and not all("watching" in (root / f"watch{i:02d}.out").read_text() for i in range(n)):
        time.sleep(0.1)
    started = time.time()
    pg_before = postgres_cpu()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(n), str(args.rate), str(args.metrics),
                               str(args.seconds)])
    readers = [subprocess.Popen([sys.executable, "-c", READER, db, data_path or "", ",".join(d.name for d in dirs),
                                 str(root / f"reader{i:02d}.json"), str(args.seconds)])
               for i in range(n if args.readers is None else args.readers)]
    seen: dict = {}
    killed_at = restarted_at = None
    files_over_time: list[tuple[float, int]] = []  # (seconds since the writing began, files on disk)
    while writer.poll() is None:
        alerts_of(root, n, seen)
        if args.sample_files and (not files_over_time or
                                  time.time() - started - files_over_time[-1][0] >= args.sample_files):
            files_over_time.append((round(time.time() - started, 1), files_on_disk(root)))
            if len(files_over_time) % 10 == 1:
                print(f"  {files_over_time[-1][0]:.0f} s: {files_over_time[-1][1]} files on disk", flush=True)
        if args.kill and killed_at is None and time.time() - started >= args.seconds / 2:
            watchers[0].send_signal(signal.SIGKILL)
            watchers[0].wait()
            killed_at = time.time() - started
        if killed_at is not None and restarted_at is None and time.time() - started >= killed_at + 2:
            watchers[0] = start_watcher(0)
            restarted_at = time.time() - started
        time.sleep(0.05)
    info = json.loads((root / "writer.json").read_text())
    written = info["steps"] * args.metrics  # per run
    # catch up: every row of every run stored (or 120 s), alerts in
    deadline = time.time() + 120
    while time.time() < deadline:
        alerts_of(root, n, seen)
        try:
            rows, twice, per_run = counts(db, data_path)
        except Exception:  # noqa: BLE001 - the store busy with a writer: look again
            time.sleep(0.5)
            continue
        # (a run whose writing ended before its overflow step has no alert to wait for)
        if all(per_run.get(d.name, 0) >= written for d in dirs) and len(seen) >= len(info["written"]):
            break
        time.sleep(0.5)
    caught_up = time.time() - started - info["seconds"]
    cpu = {"watchers": sum(_cpu(w.pid) for w in watchers), "readers": sum(_cpu(r.pid) for r in readers),
           "postgres": postgres_cpu() - pg_before if kind == "catalog" else 0.0,
           "wall": time.time() - started}
    stop_all(watchers)
    for r in readers:
        r.wait(120)
    rows, twice, per_run = counts(db, data_path)
    files_before = files_on_disk(root)
    compact = subprocess.run([sys.executable, "-m", "moeproxy", "store", "compact", *common],
                             capture_output=True, text=True) if kind == "catalog" else None
    files_after = files_on_disk(root)
    lists, views, failed = [], [], []
    for i in range(len(readers)):
        path = root / f"reader{i:02d}.json"
        if path.exists():
            got = json.loads(path.read_text())
            lists += got["lists"]
            views += got["views"]
            failed += got["failed"]
    latencies = [seen[run][0] - t for run, t in info["written"].items() if run in seen]
    return {
        "kind": kind, "n": n, "readers": len(readers), "cpu": cpu, "seconds": info["seconds"], "steps": info["steps"], "rows": rows, "twice": twice,
        "expected": written * n, "short_runs": sorted(d.name for d in dirs if per_run.get(d.name, 0) != written),
        "caught_up_s": caught_up, "latencies": latencies, "alert_runs": len(info["written"]), "alerted": len(seen),
        "lists": lists, "views": views, "failed": failed, "files_before": files_before, "files_after": files_after,
        "compact_rc": None if compact is None else compact.returncode, "killed_at": killed_at,
        "restarted_at": restarted_at, "files_over_time": files_over_time,
    }


def ms(values: list[float]) -> str:
    if not values:
        return "none"
    return (f"p50 {statistics.median(values) * 1000:.0f} ms, p95 {percentile(values, 95) * 1000:.0f} ms, "
            f"max {max(values) * 1000:.0f} ms ({len(values)})")


def report(r: dict, args) -> None:
    offered = r["n"] * args.rate * args.metrics
    print(f"\n== {r['kind']} store, {r['n']} watcher(s), {r['readers']} reader(s): {r['seconds']:.0f} s of writing, "
          f"{r['steps']} steps per run" + (f"; watcher 0 killed (SIGKILL) at {r['killed_at']:.0f} s, restarted at "
                                          f"{r['restarted_at']:.0f} s" if r["killed_at"] is not None else ""))
    print(f"rows: {r['rows']:,} stored of {r['expected']:,} written, {r['twice']} stored twice, runs short: "
          f"{', '.join(r['short_runs']) or 'none'}; {r['rows'] / (r['seconds'] + max(r['caught_up_s'], 0)):,.0f} "
          f"rows/s (jobs offered {offered:,.0f}); caught up {max(r['caught_up_s'], 0):.1f} s after the writing")
    lat = r["latencies"]
    print("alert latency: " + (f"p50 {statistics.median(lat):.2f} s, p95 {percentile(lat, 95):.2f} s, max "
                               f"{max(lat):.2f} s; " if lat else "no alert; ") + f"{r['alerted']}/{r['alert_runs']} runs alerted")
    print(f"readers: runs list {ms(r['lists'])}; one run's series {ms(r['views'])}; failed reads {len(r['failed'])}"
          + (f" (first: {r['failed'][0]})" if r["failed"] else ""))
    print(f"files on disk: {r['files_before']}" + (f", after `store compact` {r['files_after']}"
                                                   if r["compact_rc"] is not None else ""))
    if r["files_over_time"]:
        over = r["files_over_time"]
        half = [f for t, f in over if t >= over[-1][0] / 2]
        print(f"files on disk while watching (every {args.sample_files:g} s, {len(over)} looks): max {max(f for _, f in over)}, "
              f"max in the second half {max(half)}, at the end {over[-1][1]}; "
              + ", ".join(f"{t / 60:.0f} min {f}" for t, f in over[::max(1, len(over) // 12)]))
    c = r["cpu"]
    print(f"CPU seconds over the {c['wall']:.0f} s until caught up ({os.cpu_count()} CPUs: {os.cpu_count() * c['wall']:.0f} "
          f"to share): watchers {c['watchers']:.0f}, readers {c['readers']:.0f}"
          + (f", PostgreSQL {c['postgres']:.0f}" if r["kind"] == "catalog" else "")
          + " (a killed watcher's own time is not counted)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--watchers", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--rate", type=float, default=5.0, help="steps per second per run")
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=50.0, help="how long the jobs write")
    ap.add_argument("--readers", type=int, help="dashboards reading at once (default: as many as watchers)")
    ap.add_argument("--kill", action="store_true", help="SIGKILL run 0's watcher half-way and restart it")
    ap.add_argument("--stores", nargs="+", choices=["file", "catalog"], default=["file", "catalog"])
    ap.add_argument("--sample-files", type=float, default=0, metavar="SECONDS",
                    help="count the files on disk every SECONDS while the jobs write (compaction keeping them bounded)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure to this JSON file")
    args = ap.parse_args()
    if 150 + 5 * (max(args.watchers) - 1) > args.rate * args.seconds - 10:
        print("note: some runs end before their overflow step; raise --seconds or --rate", file=sys.stderr)
    results = []
    with ExitStack() as stack:
        new_catalog = None
        if "catalog" in args.stores:
            from moeproxy.store import lake
            from moeproxy.store.local_postgres import local_postgres

            if lake.available() is not None:
                print(f"catalog: skipped ({lake.available()})")
                args.stores.remove("catalog")
            else:
                new_catalog = stack.enter_context(local_postgres())
        print(f"bench/team.py: {args.rate:g} steps/s x {args.metrics} metrics per run, {args.seconds:g} s of writing, "
              f"{os.cpu_count()} CPUs")
        for kind in args.stores:
            for n in args.watchers:
                with tempfile.TemporaryDirectory(prefix="moeproxy-bench-team-") as tmp:
                    root = Path(tmp)
                    if kind == "file":
                        db, data_path = str(root / "runs.duckdb"), None
                    else:
                        db, data_path = new_catalog(f"team{n}{len(results)}"), str(root / "parquet")
                    result = one_case(kind, db, data_path, n, args, root)
                results.append(result)
                report(result, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
