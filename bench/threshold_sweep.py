"""Choose a diagnosis threshold by evidence: score every value of it on the real labelled logs, tuned
on the older sets and checked on the newer ones.

    python bench/threshold_sweep.py NAME=V1,V2,... [NAME=...] [--held-out-from blind20] [--refresh]
                                    [--save FILE] [--against FILE]

Each log is read once (``moeproxy diagnose FILE``'s reader) and its runs cached as pickled frames
under the temp directory (keyed by path, size, mtime and the readers' code; ``--refresh`` rereads); each value is then
diagnosed on every log with that one threshold changed (``DiagnoseConfig(NAME=V)``). Printed per
value: verdicts and onsets on the development sets (``collected``, ``shared`` and the blind sets
before ``--held-out-from``), on the held-out sets (that one and every later blind set), and in all.
A value is worth taking only where it wins on development AND holds on the held-out sets; the
held-out figure is what a new user would see, the development one what was tuned.
``--save`` keeps the defaults' reading of every log (JSON: verdict, onset and a digest of the runs read);
``--against`` lists the logs whose verdict or onset came out otherwise than in a saved reading (a code
change checked log by log) and counts those whose runs were read otherwise (a reader change that
must not move a reading: ``--refresh --against``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
CACHE = Path(tempfile.gettempdir()) / "moeproxy-sweep-cache"


def _set_number(name: str) -> int:
    m = re.fullmatch(r"blind(\d*)", name)
    return (int(m.group(1)) if m.group(1) else 1) if m else -1


def _readers_version() -> str:
    """A digest of the readers' code (``moeproxy/ingest``, the vocabulary): a change to it makes every
    cached reading stale."""
    pkg = ROOT / "moeproxy"
    digest = hashlib.sha1()
    for f in sorted([*pkg.joinpath("ingest").rglob("*.py"), pkg / "vocabulary.py"]):
        digest.update(f.read_bytes())
    return digest.hexdigest()


def _cached_frames(path: Path, refresh: bool, version: str | None = None):
    from moeproxy.diagnose.record import load_runs

    st = path.stat()
    version = version or _readers_version()
    key = hashlib.sha1(f"{path}:{st.st_size}:{st.st_mtime_ns}:{version}".encode()).hexdigest()
    cached = CACHE / f"{key}.pkl"
    if cached.is_file() and not refresh:
        return pickle.loads(cached.read_bytes())
    try:
        _, frames, _ = load_runs(str(path), None)
    except Exception as exc:  # a log the readers refuse is a miss at every value
        frames = f"{type(exc).__name__}: {exc}"
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(pickle.dumps(frames))
    return frames


def _digest(frames) -> str:
    """A digest of what was read from a log: each run's name, columns and values."""
    if isinstance(frames, str):
        return frames
    digest = hashlib.sha1()
    for run in sorted(frames):
        digest.update(f"{run}\n".encode())
        digest.update(frames[run].to_csv().encode())
    return digest.hexdigest()


def _diagnose_all(job):
    """(verdict, onset, epoch, counters) of every log for one config (a worker's share)."""
    overrides, items = job
    from moeproxy.diagnose.config import DiagnoseConfig
    from moeproxy.diagnose.diagnosis import diagnose_frame
    from moeproxy.diagnose.record import worst_of

    cfg = DiagnoseConfig(**overrides)
    out = []
    for key, frames in items:
        if isinstance(frames, str):
            out.append((key, "error", None, None, {}))
            continue
        try:
            _, r = worst_of({run: diagnose_frame(f, cfg) for run, f in frames.items()})
            out.append((key, r["verdict"], r["onset_step"], r.get("onset_epoch"), r.get("onset_counters") or {}))
        except Exception as exc:  # counted as a miss, said once
            out.append((key, "error", None, None, {"error": str(exc)[:80]}))
    return out


def main(argv=None) -> int:
    from moeproxy.diagnose.evaluation import case_of, load_labels, onset_right

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid", nargs="*", help="NAME=V1,V2,... (a threshold of DiagnoseConfig and the values to try)")
    ap.add_argument("--held-out-from", default="blind20", help="the first blind set held out from tuning")
    ap.add_argument("--refresh", action="store_true", help="reread every log (after a reader change)")
    ap.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--save", type=Path, help="write the defaults' verdict and onset of every log here")
    ap.add_argument("--against", type=Path, help="list the logs read otherwise than in this saved file")
    args = ap.parse_args(argv)
    from moeproxy.diagnose.config import DiagnoseConfig
    from moeproxy.diagnose.diagnosis import diagnose_frame  # noqa: F401 - every detector loaded before
    # the workers fork: they all run the code as it was when the sweep started

    default = DiagnoseConfig()
    grid: list[tuple[str, list[float]]] = []
    for spec in args.grid:
        name, _, values = spec.partition("=")
        if not hasattr(default, name):
            ap.error(f"{name}: no such threshold in DiagnoseConfig")
        kind = type(getattr(default, name))  # an integer threshold (a count of records) stays an integer
        grid.append((name, [kind(float(v)) for v in values.split(",") if v]))
    cut = _set_number(args.held_out_from)
    t0 = time.perf_counter()
    cases, items = [], []
    folders = sorted({p.parent for p in REAL.glob("*/labels*.json")})
    version = _readers_version()
    for i, folder in enumerate(folders, 1):
        for entry in load_labels(folder):
            case = case_of(entry, folder.name)
            cases.append(case)
            items.append((f"{folder.name}/{case.file}", _cached_frames(folder / entry["file"], args.refresh, version)))
        print(f"\rread {i}/{len(folders)} sets, {len(items)} logs", end="", file=sys.stderr, flush=True)
    print(f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    held = {c.set for c in cases if _set_number(c.set) >= cut}

    readings: dict[str, dict] = {}
    digests = {key: _digest(frames) for key, frames in items} if args.save or args.against else {}

    def run(overrides: dict) -> dict:
        chunks = [items[i::args.workers] for i in range(args.workers)]
        with ProcessPoolExecutor(args.workers) as pool:
            got = {k: rest for part in pool.map(_diagnose_all, [(overrides, c) for c in chunks]) for k, *rest in part}
        tally = {"dev": [0, 0, 0, 0], "held": [0, 0, 0, 0]}
        for case in cases:
            verdict, onset, epoch, counters = got[f"{case.set}/{case.file}"]
            t = tally["held" if case.set in held else "dev"]
            t[0] += 1
            t[1] += verdict in case.labels
            ok = onset_right(case, verdict, onset, epoch, counters if isinstance(counters, dict) else None)
            if not overrides:
                readings[f"{case.set}/{case.file}"] = {"verdict": verdict, "onset": onset, "label": case.label,
                                                         "verdict_ok": verdict in case.labels, "onset_ok": ok,
                                                         "epoch": epoch, "counters": counters,
                                                         "read": digests.get(f"{case.set}/{case.file}")}
            if ok is not None:
                t[2] += 1
                t[3] += bool(ok)
        return tally

    def line(label: str, tally: dict) -> str:
        d, h = tally["dev"], tally["held"]
        a = [x + y for x, y in zip(d, h)]
        return (f"{label:<34} dev {d[1]:>3}/{d[0]} onsets {d[3]:>3}/{d[2]}   held-out {h[1]:>3}/{h[0]} onsets "
                f"{h[3]:>3}/{h[2]}   all {a[1]:>3}/{a[0]} ({100 * a[1] / max(a[0], 1):.1f} %) onsets {a[3]}/{a[2]}")

    print(f"development: {len(cases) - sum(c.set in held for c in cases)} logs; held out ({args.held_out_from} "
          f"on): {sum(c.set in held for c in cases)} logs")
    print(line("defaults", run({})), flush=True)
    if args.save:
        args.save.write_text(json.dumps(readings, indent=0))
    if args.against:
        before = json.loads(args.against.read_text())
        for key, now in readings.items():
            was = before.get(key)
            if was is None or (was["verdict"], was["onset"]) != (now["verdict"], now["onset"]):
                mark = ("+" if now["verdict_ok"] and not (was or {}).get("verdict_ok") else
                        "-" if was and was["verdict_ok"] and not now["verdict_ok"] else
                        "o+" if now["onset_ok"] and not (was or {}).get("onset_ok") else
                        "o-" if was and was["onset_ok"] and not now["onset_ok"] else "=")
                print(f"  {mark:<2} {key[:70]:<70} {now['label']:<18} {was and was['verdict']} {was and was['onset']}"
                      f" -> {now['verdict']} {now['onset']}")
        moved = sorted(key for key, now in readings.items() if key in before and before[key].get("read") not in (None, now["read"]))
        print(f"read otherwise than in {args.against.name}: {len(moved)} logs" + "".join(f"\n  {key}" for key in moved))
    for name, values in grid:
        for v in values:
            print(line(f"{name}={v:g} (default {getattr(default, name):g})", run({name: v})), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
