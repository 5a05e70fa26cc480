"""Ingest of a directory of many small logs: the per-file cost of ``moeproxy ingest DIR``.

Builds, in a temporary directory (``--dir`` chooses where), ``--files`` small logs of ``--lines``
lines each, a mix of the shapes a team's job folder holds: verl JSONL (``{"step": N, "data":
{...}}``), flat JSON records, Megatron iteration lines and ``step N ... key=value`` text lines, a
few metrics each. Then times ``moeproxy ingest DIR`` into a new DuckDB file in a fresh process
(start-up included) and prints files, seconds, ms per file and values stored. A second ingest of
the same directory (every file a duplicate) is timed too. With ``--watch``, ``moeproxy watch --once``
then follows every job folder (one run per folder, as a watched job tree is laid out) into another
new DuckDB file, and the values each store holds are counted side by side.

    python bench/ingest_many.py [--files 20000] [--lines 20] [--dir /dev/shm] [--watch]

To time another checkout (a before and after), run it with ``--checkout PATH``: ``moeproxy`` then
runs from that directory (``python -m moeproxy`` puts the working directory first on sys.path).
Prints figures only; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = ("verl", "records", "megatron", "text")


def write_log(path: Path, shape: str, lines: int, seed: int) -> int:
    """One small log of ``lines`` records in ``shape``; returns the number of values in it."""
    rng = random.Random(seed)
    out = []
    for step in range(1, lines + 1):
        loss, grad, lr = 2.0 + rng.random(), rng.random() * 3, 1e-4 * rng.random()
        if shape == "verl":
            out.append(json.dumps({"step": step, "data": {"actor/pg_loss": loss, "actor/grad_norm": grad,
                                                          "actor/lr": lr, "critic/score/mean": rng.random()}}))
        elif shape == "records":
            out.append(json.dumps({"step": step, "train/loss": loss, "train/grad_norm": grad,
                                   "train/learning_rate": lr, "train/epoch": step / lines}))
        elif shape == "megatron":
            out.append(f" [2024-05-01 10:00:{step % 60:02d}] iteration {step:8d}/{lines:8d} | consumed samples: "
                       f"{step * 32:10d} | elapsed time per iteration (ms): {100 + rng.random():.1f} | "
                       f"learning rate: {lr:.6E} | global batch size: 32 | lm loss: {loss:.6E} | "
                       f"loss scale: 1.0 | grad norm: {grad:.3f} | number of skipped iterations: 0 | "
                       "number of nan iterations: 0 |")
        else:
            out.append(f"step {step} loss={loss:.5f} grad_norm={grad:.4f} lr={lr:.3e}")
    path.write_text("\n".join(out) + "\n")
    return lines * {"verl": 4, "records": 4, "megatron": 7, "text": 3}[shape]


def build(root: Path, files: int, lines: int) -> int:
    """``files`` logs under ``root`` (100 per subfolder, as a job tree holds them)."""
    total = 0
    for i in range(files):
        shape = SHAPES[i % len(SHAPES)]
        folder = root / f"job_{i // 100:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        suffix = {"verl": ".jsonl", "records": ".jsonl"}.get(shape, ".log")
        total += write_log(folder / f"rank_{i:06d}{suffix}", shape, lines, i)
    return total


def time_ingest(checkout: Path, root: Path, db: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "moeproxy", "ingest", str(root), "--db", str(db), "--json"],
                          cwd=checkout, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def time_watch(checkout: Path, root: Path, db: Path) -> tuple[float, subprocess.CompletedProcess]:
    folders = sorted(str(p) for p in root.iterdir() if p.is_dir())
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", *folders, "--db", str(db), "--once"],
                          cwd=checkout, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def stored_values(db: Path) -> tuple[int, int]:
    """(values, files) a store holds."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return (con.execute("SELECT count(*) FROM scalars").fetchone()[0],
                con.execute("SELECT count(*) FROM sources").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--dir", default=None, help="where the temporary folder goes (default: the system's)")
    parser.add_argument("--watch", action="store_true", help="also time `watch --once` over every job folder")
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parents[1]),
                        help="the moeproxy checkout to time (default: this one)")
    args = parser.parse_args()
    checkout = Path(args.checkout)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "logs"
        t0 = time.perf_counter()
        values = build(root, args.files, args.lines)
        print(f"built {args.files:,} files x {args.lines} lines ({values:,} values) in "
              f"{time.perf_counter() - t0:.1f} s under {root}")
        print(f"checkout: {checkout}")
        print("| ingest | files | seconds | ms per file | stored | duplicates | skipped |")
        print("|---|---|---|---|---|---|---|")
        db = Path(tmp) / "runs.duckdb"
        for label in ("first", "again (all duplicates)"):
            seconds, proc = time_ingest(checkout, root, db)
            if proc.returncode != 0:
                print(f"| {label} | {args.files:,} | failed (exit {proc.returncode}): "
                      f"{proc.stderr.strip().splitlines()[-1:]} |")
                return
            result = json.loads(proc.stdout)
            stored = sum(1 for r in result if not r.get("skipped") and not r.get("duplicate"))
            duplicates = sum(1 for r in result if r.get("duplicate"))
            skipped = sum(1 for r in result if r.get("skipped"))
            print(f"| {label} | {args.files:,} | {seconds:.1f} | {1000 * seconds / args.files:.2f} | "
                  f"{stored:,} | {duplicates:,} | {skipped:,} |")
        if args.watch:
            watched = Path(tmp) / "watched.duckdb"
            seconds, proc = time_watch(checkout, root, watched)
            if proc.returncode != 0:
                print(f"watch --once failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
                return
            (iv, ifiles), (wv, wfiles) = stored_values(db), stored_values(watched)
            print(f"\nwatch --once over {len(list(root.iterdir())):,} job folders: {seconds:.1f} s "
                  f"({1000 * seconds / args.files:.2f} ms a file); files followed and stored: {wfiles:,} "
                  f"(ingest: {ifiles:,}); values stored: {wv:,} (ingest: {iv:,})")


if __name__ == "__main__":
    main()
