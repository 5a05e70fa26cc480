"""Query time of each dashboard view on a large store: 2 runs x 100,000 steps x 200 metrics (40 M rows).

Builds the store once under bench/out/ (reused when present; --rebuild to redo), then times, per
view, the store reads that view makes (nothing cached in Streamlit): the first call (which, for the
first view of a run, also builds the run's series row-id index, once per data version) and the best
of the next --repeat calls. Target: under 200 ms per view on the 2-core dev machine.

    python bench/dashboard.py [--steps 100000] [--metrics 200] [--repeat 3] [--rebuild]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from moeproxy.store import downsample
from moeproxy.store.downsample import layer_heatmap, m4_series, metric_names
from moeproxy.store import GLOBAL_RANK, Store

OUT = Path(__file__).resolve().parent / "out"
PANELS = ["grad_norm", "loss", "routing_entropy"]


def bench_metric_names(n: int, layers: int = 48) -> list[str]:
    names = PANELS + [f"routing_entropy/layer_{i}" for i in range(layers)]
    names += [f"extra/metric_{i:03d}" for i in range(n - len(names))]
    return names[:n]


def build(path: Path, steps: int, n_metrics: int) -> None:
    if path.exists():
        path.unlink()
    store = Store(path, lock_timeout=60)
    names = bench_metric_names(n_metrics)
    rng = np.random.default_rng(0)
    step = np.arange(1, steps + 1, dtype=np.int64)
    for run, role, proxy_of, fault in (("big-full", "full", None, int(steps * 0.8)),
                                       ("big-proxy", "proxy", "big-full", int(steps * 0.82))):
        with store.write() as tx:
            run_id = tx.ensure_run(run, role, proxy_of, "bench", "synthetic")
            source_id = tx.add_source(run_id, {"path": f"<bench {run}>", "sha256": f"bench-{run}", "format": "synthetic",
                                               "framework": "bench", "rows": steps * n_metrics, "steps": steps,
                                               "metrics": n_metrics, "nonfinite": 0, "attempts": 1,
                                               "skipped_lines": 0, "step_from_index": False})
            tx.add_metric_names(run_id, {m: m for m in names})
            for chunk_start in range(0, n_metrics, 20):
                chunk = names[chunk_start:chunk_start + 20]
                values = rng.normal(1.0, 0.05, size=(len(chunk), steps))
                values[:, rng.integers(0, steps, 50)] *= 40.0  # spikes
                for i, m in enumerate(chunk):
                    if m == "grad_norm":
                        values[i, fault:] = np.inf
                        values[i, fault - 500:fault] *= np.geomspace(1, 1e5, 500)
                    if m == "loss":
                        values[i, fault:] = np.nan
                n = len(chunk) * steps
                frame = pd.DataFrame({
                    "metric": pd.Categorical(np.repeat(chunk, steps), categories=chunk),
                    "step": np.tile(step, len(chunk)), "value": values.ravel(),
                    "attempt": np.zeros(n, np.int16), "rank": np.full(n, GLOBAL_RANK, np.int32),
                    "wall_time": np.full(n, np.nan)})
                tx.add_scalars(run_id, source_id, frame)
        print(f"built {run}: {steps:,} steps x {n_metrics} metrics", flush=True)


def timed(fn, repeat: int) -> tuple[float, float, object]:
    """(first call ms, best of the next ``repeat`` calls ms, result)."""
    t = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t
    best = first
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return first * 1000, best * 1000, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--metrics", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / f"dashboard-{args.steps}x{args.metrics}.duckdb"
    if args.rebuild or not path.exists():
        t = time.perf_counter()
        build(path, args.steps, args.metrics)
        print(f"build: {time.perf_counter() - t:.1f} s, {path.stat().st_size / 2**20:.0f} MiB")
    store = Store(path)
    lo, hi = args.steps // 2, args.steps // 2 + 2_000
    views = {
        "open + data_version (every page)": lambda: store.data_version(),
        "runs list (Runs page, runs_overview)": lambda: store.runs_overview(),
        "metric list of a run (search box)": lambda: metric_names(store, "big-full"),
        "triage: M4 grad_norm/loss/routing_entropy": lambda: m4_series(store, "big-full", PANELS),
        "triage: + 3 searched metrics": lambda: m4_series(store, "big-full", PANELS + bench_metric_names(args.metrics)[-3:]),
        "triage: per-layer heatmap (48 layers)": lambda: layer_heatmap(store, "big-full"),
        "triage: zoom to 2,000 steps": lambda: m4_series(store, "big-full", PANELS, lo, hi),
        "compare: M4 of both runs": lambda: (m4_series(store, "big-full", PANELS),
                                             m4_series(store, "big-proxy", PANELS)),
    }
    t = time.perf_counter()
    rows = store.runs()["rows"].sum()
    print(f"(for reference, Store.runs(), which scans every value: {(time.perf_counter() - t) * 1000:.0f} ms)")
    print(f"store: {path.name}, {rows:,} scalar rows; target < 200 ms per view")
    print(f"{'view':45s} {'first':>8}    {'best of ' + str(args.repeat):>8}")
    downsample._SERIES_INDEX.clear()
    t = time.perf_counter()
    with store.read() as con:
        downsample._series_ranges(con, store, 1)
    print(f"{'(series row-id index of one run, once per data version)':45s} {(time.perf_counter() - t) * 1000:8.1f} ms")
    downsample._SERIES_INDEX.clear()
    for name, fn in views.items():
        first, ms, result = timed(fn, args.repeat)
        points = ""
        if isinstance(result, pd.DataFrame) and "kind" in result.columns:
            per = result.groupby("metric").size()
            points = f"  ({len(result):,} points, max {per.max():,} per trace, {int((result['kind'] != 'finite').sum())} non-finite)"
        print(f"{name:45s} {first:8.1f} ms {ms:8.1f} ms{points}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
