"""moeproxy export: write one run's stored values to CSV or Parquet."""

from __future__ import annotations

from moeproxy.commands.common import add_db_option, open_store

HELP = "export a run's values (every attempt and rank, with original names) to .csv or .parquet"


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN", help="run name (see `moeproxy runs`)")
    parser.add_argument("--to", required=True, metavar="FILE", help="output file, .csv or .parquet")
    parser.add_argument("--series", action="store_true",
                        help="one value per metric and step as the run is read (latest attempt; a global value "
                             "over per-rank ones, else their mean): the values the dashboard and diagnose see")
    add_db_option(parser)


def run(args) -> int:
    rows = open_store(args).export(args.run, args.to, series=args.series)
    print(f"wrote {rows} rows of run {args.run!r} to {args.to}")
    return 0
