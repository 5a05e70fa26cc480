"""Time of the healthy runs' reference band (Triage's band, ``moeproxy diagnose --json``'s "normal")
on a store of 5 healthy runs x 20,000 steps x 50 metrics: three bands (loss, grad_norm, one more),
by fraction of the run. The store is built once under bench/out/reference/ (reused when present).

    python bench/reference_band.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from moeproxy.ingest import ingest_paths
from moeproxy.reference import reference_band
from moeproxy.store import Store

OUT = Path(__file__).resolve().parent / "out" / "reference"
RUNS, STEPS, METRICS = 5, 20_000, 50


def build(db: Path) -> None:
    store = Store(db)
    for r in range(RUNS):
        log = OUT / f"healthy-{r}.jsonl"
        with open(log, "w") as fh:
            for step in range(1, STEPS + 1):
                rec = {"step": step, "loss": 2 - step / STEPS + 0.1 * r, "grad_norm": 1.0 + 0.01 * r}
                rec.update({f"m{k}": 0.1 * k + r for k in range(METRICS - 2)})
                fh.write(json.dumps(rec) + "\n")
        ingest_paths(store, [log], run=f"healthy-{r}")
        store.save_findings(f"healthy-{r}", {"verdict": "healthy", "onset_step": None, "findings": []}, "bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    db = OUT / "runs.duckdb"
    if not db.exists():
        build(db)
    store = Store(db)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for metric in ("loss", "grad_norm", "m3"):
            reference_band(store, metric, by="fraction")
        times.append(time.perf_counter() - start)
    print(f"3 reference bands over {RUNS} healthy runs x {STEPS:,} steps x {METRICS} metrics: "
          f"median {statistics.median(times):.2f} s of {args.repeat}")


if __name__ == "__main__":
    main()
