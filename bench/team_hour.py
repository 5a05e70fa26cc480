"""Benchmark an hour of watching into one DuckLake catalog, compressed in time: does the file count
stay bounded?

N watchers (``moeproxy watch``) follow N growing logs into one catalog in a local PostgreSQL server
(Parquet files in a folder). A watcher on a catalog commits calm rows every ``--commit-every``
seconds (default 3) and compacts every ``--compact-minutes`` (default 10); here both, and the look
interval, are divided by ``--speed`` (default 10), so ``--seconds`` of wall time hold ``speed`` times
as many commits and compactions as they would at the defaults: 360 s at speed 10 is an hour of a
watcher's commits (1,200 each) and six compactions. Every ``--sample`` seconds the Parquet files under
the data path are counted.

Printed: each watcher's cycles, the Parquet file count and the catalog database's size over the run
(max, at the end: small appends are inlined in the catalog until a compaction writes them out), rows
stored against rows written and rows stored twice, the compactions each watcher reported.

Usage: python bench/team_hour.py [--watchers 4] [--rate 5] [--metrics 20] [--seconds 360] [--speed 10]
Figures only; nothing here is asserted. Needs the ``team`` extra and PostgreSQL (Debian's package).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from team import counts, stop_all  # bench/team.py: rows stored (twice, per run); stopping watchers
from watch import WRITER  # bench/watch.py: the same jobs


def parquet_files(root: Path) -> int:
    return sum(1 for _ in root.rglob("*.parquet"))


def files_by_table(root: Path) -> dict[str, int]:
    """Parquet files per table (the folder under the schema's), deletion files apart."""
    out: dict[str, int] = {}
    for f in root.rglob("*.parquet"):
        parts = f.relative_to(root).parts
        table = parts[1] if len(parts) > 2 else parts[0]
        key = table + (" (deletes)" if f.name.endswith("-delete.parquet") else "")
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--watchers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=5.0, help="steps per second per run")
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=360.0, help="wall seconds the jobs write")
    ap.add_argument("--speed", type=float, default=10.0, help="how much faster than the defaults the watchers "
                                                             "look, commit and compact")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between file counts")
    args = ap.parse_args()

    from moeproxy.store import lake
    from moeproxy.store.local_postgres import local_postgres

    if lake.available() is not None:
        print(f"skipped: {lake.available()}")
        return 0
    commit_every, compact_minutes, interval = 3.0 / args.speed, 10.0 / args.speed, 1.0 / args.speed
    simulated = args.seconds * args.speed
    print(f"bench/team_hour.py: {args.watchers} watchers, {args.rate:g} steps/s x {args.metrics} metrics per run, "
          f"{args.seconds:g} s of writing at speed {args.speed:g} (look every {interval:g} s, commit every "
          f"{commit_every:g} s, compact every {compact_minutes:g} min): {simulated / 60:.0f} minutes of a watcher's "
          f"default cadence; {os.cpu_count()} CPUs", flush=True)
    with local_postgres() as new_catalog, tempfile.TemporaryDirectory(prefix="moeproxy-bench-hour-") as tmp:
        root = Path(tmp)
        db, data_path = new_catalog("hour"), str(root / "parquet")
        dirs = []
        for i in range(args.watchers):
            d = root / f"run{i:02d}"
            d.mkdir()
            (d / "metrics.jsonl").write_text("")
            dirs.append(d)
        common = ["--db", db, "--data-path", data_path]
        watchers = [subprocess.Popen([sys.executable, "-m", "moeproxy", "watch", str(d), *common,
                                      "--interval", f"{interval:g}", "--commit-every", f"{commit_every:g}",
                                      "--compact-minutes", f"{compact_minutes:g}"],
                                     stdout=open(root / f"watch{i:02d}.out", "a"), stderr=subprocess.STDOUT)
                    for i, d in enumerate(dirs)]
        deadline = time.time() + 120
        while time.time() < deadline and not all("watching" in (root / f"watch{i:02d}.out").read_text()
                                                  for i in range(args.watchers)):
            time.sleep(0.1)
        started = time.time()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(args.watchers), str(args.rate),
                                   str(args.metrics), str(args.seconds)])
        samples: list[tuple[float, int, float]] = []

        def sample() -> None:
            size = float(new_catalog.psql("hour", "SELECT pg_database_size('hour')").strip() or 0) / 2**20
            samples.append((time.time() - started, parquet_files(Path(data_path)), size))
            print(f"  {samples[-1][0]:6.0f} s: {samples[-1][1]} Parquet files, catalog {size:.1f} MiB", flush=True)

        next_sample = started
        while writer.poll() is None:
            if time.time() >= next_sample:
                sample()
                next_sample += args.sample
            time.sleep(0.2)
        info = json.loads((root / "writer.json").read_text())
        written = info["steps"] * args.metrics
        deadline = time.time() + 120
        while time.time() < deadline:
            rows, twice, per_run = counts(db, data_path)
            if all(per_run.get(d.name, 0) >= written for d in dirs):
                break
            time.sleep(1.0)
        sample()
        stop_all(watchers)
        rows, twice, per_run = counts(db, data_path)
        outs = [(root / f"watch{i:02d}.out").read_text() for i in range(args.watchers)]
        compactions = [o.count("watch: compacted") for o in outs]
        # one upkeep per period for the catalog: the others see it done and skip it
        skipped = sum(o.count("was compacted by") for o in outs)
        failed = sum(o.count("compaction of") for o in outs)
        why = next((l for o in outs for l in o.splitlines() if "compaction of" in l), "")
        cycles = []
        for o in outs:
            line = next((l for l in o.splitlines() if "stopped after" in l), "")
            cycles.append(int(line.split("stopped after ")[1].split()[0]) if line else 0)
        print(f"\n{info['seconds']:.0f} s of writing, {info['steps']} steps per run; watcher cycles {cycles} "
              f"(~{int(info['seconds'] / commit_every)} commit slots each at --commit-every {commit_every:g})")
        print(f"Parquet files: at most {max(s[1] for s in samples)} during the run, {samples[-1][1]} at the end; "
              f"the catalog database at most {max(s[2] for s in samples):.1f} MiB, {samples[-1][2]:.1f} MiB at the end; "
              f"compactions per watcher {compactions}, skipped (done by another) {skipped}, failed {failed}" + (f" (first: {why.strip()[:300]})" if why else ""))
        print(f"rows stored {rows} of {written * args.watchers} written, stored twice {twice}")
        for i, o in enumerate(outs):
            if "stopped after" not in o:  # a watcher that did not stop cleanly: what it said last
                print(f"watcher {i} did not stop cleanly (exit {watchers[i].returncode}); its last lines:\n  "
                      + "\n  ".join(o.splitlines()[-8:]))
        print(f"files over time: {', '.join(f'{s[0]:.0f}s:{s[1]}' for s in samples[:: max(1, len(samples) // 12)])}")
        print(f"files by table at the end: {files_by_table(Path(data_path))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
