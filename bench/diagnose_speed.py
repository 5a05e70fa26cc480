"""Wall time of `moeproxy diagnose FILE` on the largest labelled real logs, as a user runs it (a new
process each time: start-up, reading, diagnosis, printing).

    python bench/diagnose_speed.py [--largest 40] [--repeat 3] [--files F ...] [--reference DIR] [DIR ...]

Prints each log's best-of-``--repeat`` time beside references measured in the same run: a new
Python process that does nothing (`python -c pass`), `moeproxy diagnose` on the smallest labelled
log (start-up and imports), and with ``--reference DIR`` the same command run from another checkout
of moeproxy (``git worktree add DIR COMMIT``: an earlier commit, timed log by log beside this one, so
that a machine that slows down in the middle slows both). The issue's target is under 2 s for every log.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
TARGET = 2.0


def labelled_logs(folders: list[Path]) -> list[Path]:
    from moeproxy.diagnose.evaluation import load_labels

    logs = []
    for folder in folders:
        for entry in load_labels(folder):
            path = folder / entry["file"]
            if path.is_file():
                logs.append(path)
    return logs


def best_time(command: list[str], repeat: int, cwd: Path | None = None, env: dict | None = None) -> tuple[float, int]:
    best, rc = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rc = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        best = min(best, time.perf_counter() - t0)
    return best, rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--largest", type=int, default=40, help="how many of the largest logs to time")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command; the best is kept")
    ap.add_argument("--files", nargs="*", type=Path, default=[], help="time these logs (besides the largest)")
    ap.add_argument("--reference", type=Path, help="a checkout of moeproxy timed beside this one on each log")
    args = ap.parse_args(argv)
    folders = args.folders or sorted({p.parent for p in REAL.glob("*/labels*.json")})
    logs = sorted(labelled_logs(folders), key=lambda p: p.stat().st_size)
    if not logs:
        print("no labelled logs found", file=sys.stderr)
        return 1
    cli = [sys.executable, "-m", "moeproxy.cli", "diagnose"]
    env = dict(os.environ, PYTHONPATH=str(args.reference.resolve())) if args.reference else None

    def timed(path: Path, reference: bool = False) -> tuple[float, int]:
        command = cli + [str(path.resolve())]
        return best_time(command, args.repeat, args.reference, env) if reference else best_time(command, args.repeat)

    nothing, _ = best_time([sys.executable, "-c", "pass"], args.repeat)
    smallest, _ = timed(logs[0])
    print(f"python -c pass: {nothing:.2f} s; moeproxy diagnose on the smallest log "
          f"({logs[0].stat().st_size:,} bytes): {smallest:.2f} s")
    over = []
    rows = []
    chosen = list(reversed(logs[-args.largest:])) if args.largest else []
    chosen += [p for p in args.files if p.resolve() not in {c.resolve() for c in chosen}]
    for n, path in enumerate(chosen, 1):
        seconds, rc = timed(path)
        rows.append((seconds, path, rc))
        if seconds >= TARGET:
            over.append(path)
        beside = ""
        if args.reference:
            ref, ref_rc = timed(path, reference=True)
            beside = f"  (reference {ref:5.2f} s, rc {ref_rc})"
        shown = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
        print(f"[{n}/{len(chosen)}] {seconds:5.2f} s  rc {rc}{beside}  {path.stat().st_size:>11,} B  {shown}", flush=True)
    worst = max(rows, key=lambda r: r[0])
    print(f"\n{len(rows)} of {len(logs)} logs: slowest {worst[0]:.2f} s ({worst[1].name}); "
          f"{len(over)} at or over {TARGET:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
