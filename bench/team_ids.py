"""Benchmark new runs created at the same moment on one DuckLake catalog: what id allocation costs.

A catalog has no sequences: a write that creates a run takes the next free id and bumps the store's
data version, so two writers that create runs at the same time conflict at commit and the loser
writes again (``Store.retrying``). Here N processes (N in --writers) each ingest a log of its own (a new
run, 1,000 steps x 2 metrics) into one catalog in a local PostgreSQL, all starting at the same instant.
Printed per N: seconds until each had stored (median, max), commits lost and written again, runs
stored and whether their ids are distinct.

Usage: python bench/team_ids.py [--writers 1 4 16]
Figures only; nothing here is asserted. Needs the ``team`` extra and PostgreSQL.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path


def writer(catalog: str, data: str, log: str, run: str, start_at: float, results) -> None:
    from moeproxy.ingest import ingest_paths
    from moeproxy.store import Store

    store = Store(catalog, data_path=data)
    lost = [0]
    retrying = store.retrying

    def counted(write, attempts: int = 30):
        def once():
            try:
                return write()
            except Exception:
                lost[0] += 1  # a commit that lost (retrying writes again) or the last failure
                raise
        return retrying(once, attempts)

    store.retrying = counted
    with store.read():
        pass  # the catalog attached before the start
    while time.time() < start_at:
        time.sleep(0.001)
    t = time.time()
    ingest_paths(store, [log], run=run)
    results.put((time.time() - t, lost[0]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 4, 16])
    args = ap.parse_args()
    from moeproxy.store import Store, lake
    from moeproxy.store.local_postgres import local_postgres

    if lake.available() is not None:
        print(f"bench/team_ids.py: skipped ({lake.available()})")
        return 0
    with local_postgres() as new_catalog, tempfile.TemporaryDirectory(prefix="moeproxy-bench-ids-") as tmp:
        for n in args.writers:
            catalog, data = new_catalog(f"ids{n}"), f"{tmp}/lake{n}"
            Store(catalog, data_path=data).compact()  # the catalog made before the race
            logs = []
            for i in range(n):  # (each log its own content: the same file twice is skipped by its sha256)
                path = Path(tmp) / f"job{n}_{i}.jsonl"
                path.write_text("".join(f'{{"step": {s}, "loss": {2.0 + i - s / 1000}, "grad_norm": 0.5}}\n'
                                        for s in range(1, 1001)))
                logs.append(str(path))
            results = mp.Queue()
            start_at = time.time() + 3 + n * 0.3
            procs = [mp.Process(target=writer, args=(catalog, data, logs[i], f"r{i}", start_at, results))
                     for i in range(n)]
            for p in procs:
                p.start()
            got = [results.get() for _ in procs]
            for p in procs:
                p.join()
            seconds = [g[0] for g in got]
            runs = Store(catalog, data_path=data).runs()
            print(f"{n:2d} new runs at once: stored in {statistics.median(seconds):.2f} s (median), max "
                  f"{max(seconds):.2f} s; commits lost and written again {sum(g[1] for g in got)}; runs stored "
                  f"{len(runs)}, rows {int(runs['rows'].sum()):,}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
