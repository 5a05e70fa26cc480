"""moeproxy diagnose: classify what went wrong in a run, from which step, and why.

TARGET is a run in the database (its result is saved with the detector version, so the
dashboard shows it without recomputing), else a log file or directory in any supported format,
which is ingested into a temporary in-memory store: nothing is written to the user's database.
"""

from __future__ import annotations

import json
from pathlib import Path

from moeproxy.commands.common import add_db_option
from moeproxy.errors import NotFound

HELP = "classify a run's failure (overflow, divergence, mismatch, routing/entropy/reward collapse) with onset and evidence"


def add_arguments(parser) -> None:
    parser.add_argument("target", metavar="TARGET",
                        help="a run name in the database, else a log file or directory (not stored)")
    parser.add_argument("--json", action="store_true",
                        help='print {"verdict", "onset_step", "findings": [...]} as JSON')
    add_db_option(parser)


def diagnose_target(target: str, db: str | None) -> tuple[str, dict, bool]:
    """(run name, result, stored?) for a stored run or a log path."""
    from moeproxy.diagnose import DETECTOR_VERSION, diagnose_frame
    from moeproxy.store import Store, default_db_path

    db_path = Path(db).expanduser() if db else default_db_path()
    if db_path.exists():
        store = Store(db_path)
        if store.has_run(target):
            result = diagnose_frame(store.run_frame(target))
            store.save_findings(target, result, DETECTOR_VERSION)
            return target, result, True
    path = Path(target)
    if not path.exists():
        where = f"the database {db_path}" if db_path.exists() else f"a database (none at {db_path})"
        raise NotFound(f"{target}: no run of that name in {where}, and no such file or directory")
    from moeproxy.ingest import ingest_paths

    scratch = Store(":memory:")
    name = path.resolve().name
    ingest_paths(scratch, [path], run=name)
    return name, diagnose_frame(scratch.run_frame(name)), False


def run(args) -> int:
    from moeproxy.diagnose import render_text

    name, result, _stored = diagnose_target(args.target, args.db)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print(render_text(result, run=name), end="")
    return 0
