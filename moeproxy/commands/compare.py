"""``moeproxy compare FULL_RUN PROXY_RUN``: does the proxy reproduce the full run's failure?"""

from __future__ import annotations

import json

from moeproxy.commands.common import add_db_option

HELP = "Compare two stored runs (full vs proxy): verdicts, onset steps, metric correlations, cost."


def add_arguments(parser) -> None:
    parser.add_argument("full_run", metavar="FULL_RUN", help="stored run name of the full model")
    parser.add_argument("proxy_run", metavar="PROXY_RUN", help="stored run name of the proxy")
    add_db_option(parser)
    parser.add_argument("--smooth", type=int, default=5, help="rolling-mean window in records (default 5)")
    parser.add_argument("--json", action="store_true", help="print the fidelity JSON")


def run(args) -> int:
    from moeproxy.errors import InputError
    from moeproxy.fidelity import compare_runs, format_comparison
    from moeproxy.store import Store

    if args.smooth < 1:
        raise InputError(f"--smooth must be >= 1, got {args.smooth}")
    result = compare_runs(Store(args.db), args.full_run, args.proxy_run, smooth=args.smooth)
    print(json.dumps(result, indent=2) if args.json else format_comparison(result))
    return 0
