"""moeproxy ingest: parse training logs (format auto-detected) into the run database."""

from __future__ import annotations

import json
from functools import partial

from moeproxy.terminal import shown
from moeproxy.commands.common import add_db_option, add_run_options, open_store, progress_printer

HELP = "ingest training logs (any supported format, auto-detected) into the run database"


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files or directories (walked recursively)")
    add_run_options(parser)
    parser.add_argument("--format", dest="fmt", default="auto", metavar="NAME",
                        help="auto (sniff the content, default) or a format name from `moeproxy formats`")
    parser.add_argument("--diagnose", action="store_true",
                        help="diagnose every run that received data and record its findings (as the "
                             "dashboard's upload does); print each run's verdict")
    parser.add_argument("--json", action="store_true", help="print the per-file summaries as JSON")
    add_db_option(parser)


def run(args) -> int:
    import gc

    from moeproxy.ingest import ingest_paths

    # A one-shot command: the imported modules live until exit, so the cyclic collector need not
    # walk them again and again while millions of values are parsed (about 0.2 s on a large log).
    gc.freeze()
    # the store (and pandas, DuckDB with it) is opened only once every file parsed: a large log's
    # parse overlaps those imports
    options = dict(run=args.run, role=args.role, proxy_of=args.proxy_of, fmt=args.fmt, progress=progress_printer())
    verdicts: dict[str, dict] = {}
    if args.diagnose:
        from moeproxy.diagnose.record import ingest_and_diagnose

        summaries, results = ingest_and_diagnose(partial(open_store, args), args.paths, **options)
        for run, result in results.items():
            verdicts[run] = ({"error": result} if isinstance(result, str) else
                             {k: result.get(k) for k in ("verdict", "onset_step", "onset_epoch", "onset_counters",
                                                         "confidence")})
    else:
        summaries = ingest_paths(partial(open_store, args), args.paths, **options)
    # every file of a directory that was not ingested is named, with its reason, in both forms
    if args.json:
        rows = [s.to_dict() for s in summaries] + [f.to_dict() for f in summaries.skipped]
        for row in rows:
            if row.get("run") in verdicts:
                row["diagnosis"] = verdicts[row["run"]]
        print(json.dumps(rows, indent=2))
    else:
        for s in summaries:
            print(s.line())
        for f in summaries.skipped:
            print(f.line())
        if verdicts:
            from moeproxy.diagnose.render import verdict_line
        for run, v in verdicts.items():
            if "error" in v:
                print(f"{shown(run)}: not diagnosed ({shown(v['error'])}); its data is stored")
            else:
                print(f"{shown(run)}: {verdict_line(v)} (confidence {v.get('confidence')})")
        print(f"database: {open_store(args).label}")
    return 0
