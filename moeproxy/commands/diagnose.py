"""moeproxy diagnose: classify what went wrong in a run, from which step, and why.

TARGET is a run in the database (its result is saved with the detector version, so the
dashboard shows it without recomputing), else a log file or directory in any supported format,
which is ingested into a temporary in-memory store: nothing is written to the user's database.
The work is ``moeproxy.diagnose.record.diagnose_target``'s; this module only parses and prints.
"""

from __future__ import annotations

import json

from moeproxy.commands.common import add_db_option
from moeproxy.errors import InputError

HELP = "classify a run's failure (overflow, divergence, mismatch, routing/entropy/reward collapse) with onset and evidence"


def add_arguments(parser) -> None:
    parser.add_argument("target", metavar="TARGET", nargs="?",
                        help="a run name in the database, else a log file or directory (not stored)")
    parser.add_argument("--detectors", action="store_true",
                        help="list the registered detectors and the categories they report, then exit")
    parser.add_argument("--json", action="store_true",
                        help='print {"verdict", "onset_step", "findings": [...]} as JSON (a stored run also gets '
                             '"normal": the percentile of the healthy runs in the store its verdict metric sits at)')
    parser.add_argument("--reference", metavar="TARGET",
                        help="a run or log that should match TARGET (same seed and data, another device or "
                             "precision): report where they part")
    add_db_option(parser)


def run(args) -> int:
    from moeproxy.diagnose import all_detectors, render_text
    from moeproxy.diagnose.record import diagnose_target

    if args.detectors:
        for detector in all_detectors().values():
            print(f"{detector.name:<20} {detector.description}")
        return 0
    if args.target is None:
        raise InputError("diagnose needs a TARGET: a run name in the database or a log file")

    name, result, stored = diagnose_target(args.target, args.db, args.reference)
    if args.json:
        if stored:  # where the run sits among the healthy runs of the store, on the verdict's metric
            from moeproxy.commands.common import open_store
            from moeproxy.reference import verdict_metric, where_normal

            metric = verdict_metric(result)
            result["normal"] = where_normal(open_store(args), name, metric, result.get("onset_step")) if metric else None
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print(render_text(result, run=name), end="")
    return 0
