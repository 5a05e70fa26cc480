"""moeproxy diagnose: classify what went wrong in a run, from which step, and why.

TARGET is a run in the database (its result is saved with the detector version, so the
dashboard shows it without recomputing), else a log file or directory in any supported format,
which is ingested into a temporary in-memory store: nothing is written to the user's database.
"""

from __future__ import annotations

import json
from pathlib import Path

from moeproxy.commands.common import add_db_option
from moeproxy.errors import InputError, NotFound

HELP = "classify a run's failure (overflow, divergence, mismatch, routing/entropy/reward collapse) with onset and evidence"


def add_arguments(parser) -> None:
    parser.add_argument("target", metavar="TARGET", nargs="?",
                        help="a run name in the database, else a log file or directory (not stored)")
    parser.add_argument("--detectors", action="store_true",
                        help="list the registered detectors and the categories they report, then exit")
    parser.add_argument("--json", action="store_true",
                        help='print {"verdict", "onset_step", "findings": [...]} as JSON')
    parser.add_argument("--reference", metavar="TARGET",
                        help="a run or log that should match TARGET (same seed and data, another device or "
                             "precision): report where they part")
    add_db_option(parser)


def load_target(target: str, db: str | None):
    """(run name, long frame, the store holding it or None) for a stored run or a log path (the
    first run, when the file holds several: ``diagnose_target`` diagnoses each)."""
    name, frames, store = load_runs(target, db)
    return name, frames[name], store


def load_runs(target: str, db: str | None):
    """(first run name, {run name: long frame}, the store or None) for a stored run or a log path."""
    from moeproxy.store import Store, default_db_path

    db_path = Path(db).expanduser() if db else default_db_path()
    if db_path.exists():
        store = Store(db_path)
        if store.has_run(target):
            return target, {target: store.run_frame(target)}, store
    path = Path(target)
    if not path.exists():
        where = f"the database {db_path}" if db_path.exists() else f"a database (none at {db_path})"
        raise NotFound(f"{target}: no run of that name in {where}, and no such file or directory")
    from moeproxy.ingest import ingest_paths

    scratch = Store(":memory:")
    name = path.resolve().name
    runs = list(dict.fromkeys(s.run for s in ingest_paths(scratch, [path], run=name)))
    return runs[0], {run: scratch.run_frame(run) for run in runs}, None


def worst_of(results: dict[str, dict]) -> tuple[str, dict]:
    """The run whose failure starts first (else the first run), with every run's verdict in
    ``runs`` when there are several."""
    failed = [(r["onset_step"] if r["onset_step"] is not None else 1 << 62, name)
              for name, r in results.items() if r["verdict"] != "healthy"]
    name = min(failed)[1] if failed else next(iter(results))
    result = dict(results[name])
    if len(results) > 1:
        result["run"] = name
        result["runs"] = {n: {"verdict": r["verdict"], "onset_step": r["onset_step"],
                              "confidence": r.get("confidence")} for n, r in results.items()}
    return name, result


def diagnose_target(target: str, db: str | None, reference: str | None = None) -> tuple[str, dict, bool]:
    """(run name, result, stored?) for a stored run or a log path; a stored run's result is saved
    (not when compared with a reference: that result is about the pair)."""
    from moeproxy.diagnose import DETECTOR_VERSION, diagnose_frame, diagnose_pair

    name, frames, store = load_runs(target, db)
    if reference is not None:
        ref_name, ref_frame, _ = load_target(reference, db)
        return name, diagnose_pair(frames[name], ref_frame, label=name, reference_label=ref_name), False
    name, result = worst_of({run: diagnose_frame(frame) for run, frame in frames.items()})
    if store is not None:
        store.save_findings(name, result, DETECTOR_VERSION)
    return name, result, store is not None


def run(args) -> int:
    from moeproxy.diagnose import all_detectors, render_text

    if args.detectors:
        for detector in all_detectors().values():
            print(f"{detector.name:<20} {detector.description}")
        return 0
    if args.target is None:
        raise InputError("diagnose needs a TARGET: a run name in the database or a log file")

    name, result, _stored = diagnose_target(args.target, args.db, args.reference)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print(render_text(result, run=name), end="")
    return 0
