"""Measure what each confidence basis is worth on the real labelled logs, and write the table the tool
reads (``moeproxy/diagnose/confidence_table.json``).

    python bench/calibrate_confidence.py [--write] [--workers N] [--refresh]

Every labelled log under ``tests/fixtures/real`` is diagnosed as ``moeproxy diagnose`` does (its runs
read once and cached, as ``bench/threshold_sweep.py`` caches them); a verdict is right when a rater
gave it and its onset is not out of range. Printed: per basis, right / total and the level that
share earns; then the check that matters, leave-one-source-out cross-validation: for each source
(a repository or site), the levels come from a table measured on every other source, and the
held-out source's logs are scored by level; beside it the same logs by the levels as designed.
``--write`` stores the table measured on every log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from threshold_sweep import REAL, _cached_frames, _readers_version  # noqa: E402


def _diagnose(items):
    from moeproxy.diagnose.config import DiagnoseConfig
    from moeproxy.diagnose.diagnosis import diagnose_frame
    from moeproxy.diagnose.record import worst_of

    cfg = DiagnoseConfig()
    out = []
    for key, frames in items:
        if isinstance(frames, str):
            out.append((key, None))
            continue
        _, r = worst_of({run: diagnose_frame(f, cfg) for run, f in frames.items()})
        out.append((key, r))
    return out


def _levels(rows, table, cfg, by_basis):
    tally = defaultdict(lambda: [0, 0])
    for basis, right in rows:
        level = by_basis(basis, table)
        tally[level][0] += right
        tally[level][1] += 1
    return tally


def _show(tally) -> str:
    return ", ".join(f"{k} {tally[k][0]}/{tally[k][1]} ({100 * tally[k][0] / tally[k][1]:.0f} %)"
                     for k in ("high", "medium", "low") if tally.get(k) and tally[k][1])


def main(argv=None) -> int:
    from moeproxy.diagnose.confidence import DESIGNED, TABLE, level_of
    from moeproxy.diagnose.config import DiagnoseConfig
    from moeproxy.diagnose.evaluation import case_of, load_labels, onset_right

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"store the table measured on every log in {TABLE.name}")
    ap.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--refresh", action="store_true", help="reread every log (after a reader change)")
    args = ap.parse_args(argv)
    cfg = DiagnoseConfig()
    t0 = time.perf_counter()
    cases, items = {}, []
    version = _readers_version()
    for folder in sorted({p.parent for p in REAL.glob("*/labels*.json")}):
        for entry in load_labels(folder):
            case = case_of(entry, folder.name)
            key = f"{folder.name}/{case.file}"
            cases[key] = case
            items.append((key, _cached_frames(folder / entry["file"], args.refresh, version)))
    chunks = [items[i::args.workers] for i in range(args.workers)]
    with ProcessPoolExecutor(args.workers) as pool:
        results = {k: r for part in pool.map(_diagnose, chunks) for k, r in part}
    rows = []  # (source, basis, right)
    for key, r in results.items():
        if r is None:
            continue  # not read: no confidence to judge
        case = cases[key]
        right = r["verdict"] in case.labels and onset_right(case, r["verdict"], r["onset_step"], r.get("onset_epoch"),
                                                            r.get("onset_counters")) is not False
        rows.append((case.source, r["confidence_basis"], bool(right)))
    print(f"{len(rows)} labelled logs read of {len(items)}, {len({s for s, _, _ in rows})} sources "
          f"({time.perf_counter() - t0:.0f} s)")

    def table_of(subset):
        t = defaultdict(lambda: {"right": 0, "total": 0})
        for _, basis, right in subset:
            t[basis]["right"] += int(right)
            t[basis]["total"] += 1
        return dict(t)

    full = table_of(rows)
    print(f"\n{'basis':<22}{'right':>12}  share  level (designed)")
    for basis in DESIGNED:
        e = full.get(basis, {"right": 0, "total": 0})
        share = f"{100 * e['right'] / e['total']:4.0f} %" if e["total"] else "    -"
        print(f"{basis:<22}{e['right']:>5}/{e['total']:<6} {share}  {level_of(basis, cfg, full)} ({DESIGNED[basis]})")

    measured_cv = defaultdict(lambda: [0, 0])
    for source in sorted({s for s, _, _ in rows}):
        train = table_of([r for r in rows if r[0] != source])
        for _, basis, right in (r for r in rows if r[0] == source):
            level = level_of(basis, cfg, train)
            measured_cv[level][0] += right
            measured_cv[level][1] += 1
    designed = _levels([(b, r) for _, b, r in rows], None, cfg, lambda b, _: DESIGNED[b])
    print("\nright by level, leave-one-source-out (levels from the other sources' table): " + _show(measured_cv))
    print("right by level, as designed:                                                " + _show(designed))
    if args.write:
        TABLE.write_text(json.dumps({
            "measured_on": f"{len(rows)} real labelled logs of {len({s for s, _, _ in rows})} sources "
                           f"(tests/fixtures/real), right = a rater's verdict with its onset in range",
            "bases": {b: full[b] for b in DESIGNED if b in full}}, indent=1) + "\n")
        print(f"\nwrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
