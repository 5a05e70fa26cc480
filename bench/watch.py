"""Benchmark `moeproxy watch` on many growing runs: alert latency, watcher CPU, rows ingested per second.

A writer process appends one JSON line per step to each of RUNS run directories at RATE steps/s
per run, each line holding METRICS metrics; run i overflows (grad_norm inf, loss nan) from step
150 + 5 i, and the writer records when that line was written. One `moeproxy watch` process follows
every run directory. Printed:

- alert latency: from the overflow line being written (flushed) to its alert line appearing in the
  alerts file (polled every 20 ms), p50 / p95 / max over the runs, and how many runs alerted;
- watcher CPU: user + system seconds of the watcher process over the whole run (from /proc), as
  cores (CPU seconds per wall second), with the machine's load beside it;
- a reader meanwhile: the time a `Store.runs_overview()` from another process takes, lock waits
  included, every 0.5 s while the watcher works (what the dashboard sees);
- rows per second: rows stored by the end / seconds the writer ran (what the jobs offered is
  RUNS x RATE x METRICS), and the catch-up rate: a second watcher started on the finished logs
  with --once, its rows / its wall time (the backlog rate).

Usage: python bench/watch.py [--runs 20] [--rate 10] [--metrics 50] [--seconds 32] [--interval 1]
Figures only; nothing here is asserted.
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
from pathlib import Path

WRITER = r"""
import json, math, sys, time
root, runs, rate, metrics, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
names = ["loss", "grad_norm", "lr", "policy_entropy", "kl", "reward_mean", "response_length_mean"]
names += [f"extra/metric_{i}" for i in range(max(0, metrics - len(names)))]
names = names[:metrics]
files = [open(f"{root}/run{i:02d}/metrics.jsonl", "a") for i in range(runs)]
written = {}
start = time.time()
step = 0
while time.time() - start < seconds:
    step += 1
    for i, fh in enumerate(files):
        bad = step >= 150 + 5 * i
        record = {"step": step}
        for k, name in enumerate(names):
            record[name] = 0.5 + 0.01 * math.sin(step / 7 + k) + 0.001 * k
        record["loss"] = float("nan") if bad else 2.0 - step / 1000
        record["grad_norm"] = float("inf") if bad else 1.0 + 0.05 * math.sin(step)
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        if step == 150 + 5 * i:
            written[f"run{i:02d}"] = time.time()
    next_at = start + step / rate
    time.sleep(max(0.0, next_at - time.time()))
json.dump({"written": written, "steps": step, "seconds": time.time() - start}, open(f"{root}/writer.json", "w"))
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alerts_seen(path: Path, seen: dict) -> None:
    if not path.exists():
        return
    now = time.time()
    for line in path.read_text().splitlines():
        alert = json.loads(line)
        seen.setdefault(alert["run"], (now, alert))


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rate", type=float, default=10.0, help="steps per second per run")
    ap.add_argument("--metrics", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=32.0, help="how long the jobs write")
    ap.add_argument("--interval", type=float, default=1.0, help="the watcher's --interval")
    args = ap.parse_args()
    if 150 + 5 * (args.runs - 1) > args.rate * args.seconds - 10:
        print("note: some runs end before their overflow step; raise --seconds", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="moeproxy-bench-watch-") as tmp:
        root = Path(tmp)
        dirs = []
        for i in range(args.runs):
            d = root / f"run{i:02d}"
            d.mkdir()
            (d / "metrics.jsonl").write_text("")
            dirs.append(str(d))
        db, alerts = root / "runs.duckdb", root / "alerts.jsonl"
        out = open(root / "watch.out", "w")
        watcher = subprocess.Popen(
            [sys.executable, "-m", "moeproxy", "watch", *dirs, "--db", str(db), "--alerts", str(alerts),
             "--interval", str(args.interval)], stdout=out, stderr=subprocess.STDOUT)
        while "watching" not in (root / "watch.out").read_text():
            time.sleep(0.05)
        cpu0, wall0, load0 = cpu_seconds(watcher.pid), time.time(), os.getloadavg()[0]
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(args.runs), str(args.rate),
                                   str(args.metrics), str(args.seconds)])
        seen: dict = {}
        from moeproxy.store import Store

        reads, next_read = [], time.time() + 2
        while writer.poll() is None:
            alerts_seen(alerts, seen)
            if time.time() >= next_read:  # a reader in another process (what the dashboard does)
                t = time.perf_counter()
                Store(db).runs_overview()
                reads.append(time.perf_counter() - t)
                next_read = time.time() + 0.5
            time.sleep(0.02)
        deadline = time.time() + 10
        while time.time() < deadline and len(seen) < args.runs:
            alerts_seen(alerts, seen)
            time.sleep(0.02)
        time.sleep(2 * args.interval + 1)  # the last lines stored
        cpu1, wall1, load1 = cpu_seconds(watcher.pid), time.time(), os.getloadavg()[0]
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(60)
        info = json.loads((root / "writer.json").read_text())
        stopped = [line for line in (root / "watch.out").read_text().splitlines() if "stopped after" in line]

        import duckdb

        with duckdb.connect(str(db), read_only=True) as con:
            rows = con.execute("SELECT count(*) FROM scalars").fetchone()[0]
            dup = con.execute("SELECT count(*) - count(DISTINCT (run_id, metric, step)) FROM scalars").fetchone()[0]
        latencies = [seen[run][0] - t for run, t in info["written"].items() if run in seen]
        wrong = [run for run, (_, a) in seen.items() if (a["verdict"], a["onset_step"]) != ("overflow", 150 + 5 * int(run[3:]))]

        # catch-up: the same finished logs into a new store, all at once
        started = time.time()
        proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", *dirs, "--db", str(root / "catchup.duckdb"),
                               "--once"], capture_output=True, text=True)
        catchup_s = time.time() - started
        with duckdb.connect(str(root / "catchup.duckdb"), read_only=True) as con:
            catchup_rows = con.execute("SELECT count(*) FROM scalars").fetchone()[0]

    wall = wall1 - wall0
    print(f"bench/watch.py: {args.runs} runs x {args.rate:g} steps/s x {args.metrics} metrics, "
          f"{info['seconds']:.1f} s of writing ({info['steps']} steps per run), watcher --interval {args.interval:g}")
    if latencies:
        print(f"alert latency (line written -> alert in the file): p50 {statistics.median(latencies):.2f} s, "
              f"p95 {percentile(latencies, 95):.2f} s, max {max(latencies):.2f} s; "
              f"{len(latencies)}/{len(info['written'])} runs alerted, {len(wrong)} with a wrong verdict/onset")
    else:
        print("alert latency: no alert arrived")
    print(f"watcher CPU: {cpu1 - cpu0:.1f} s over {wall:.1f} s = {(cpu1 - cpu0) / wall:.2f} cores "
          f"(load average {load0:.2f} -> {load1:.2f} on {os.cpu_count()} CPUs)")
    if stopped:
        print("watcher: " + stopped[-1].split(": ", 1)[1])
    if reads:
        print(f"a reader meanwhile (Store.runs_overview from the bench process, lock waits included): "
              f"p50 {statistics.median(reads) * 1000:.0f} ms, p95 {percentile(reads, 95) * 1000:.0f} ms, "
              f"max {max(reads) * 1000:.0f} ms over {len(reads)} reads")
    offered = args.runs * args.rate * args.metrics
    print(f"rows ingested: {rows:,} ({rows / info['seconds']:,.0f} rows/s over the writing; jobs offered "
          f"{offered:,.0f} rows/s), {dup} stored twice")
    print(f"catch-up (--once on the finished logs): {catchup_rows:,} rows in {catchup_s:.1f} s = "
          f"{catchup_rows / catchup_s:,.0f} rows/s (process start included)" + ("" if proc.returncode == 0 else
                                                                                   f"; exit {proc.returncode}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
