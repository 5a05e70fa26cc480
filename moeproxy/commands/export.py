"""moeproxy export: write one run's stored values to CSV or Parquet."""

from __future__ import annotations

from pathlib import Path

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
    from moeproxy.errors import InputError
    from moeproxy.store import OutputError
    from moeproxy.outputs import atomic_path, check_target
    from moeproxy.terminal import shown

    check_target(args.to, "export")  # a directory, device, FIFO or unwritable folder: before any read
    if Path(args.to).suffix.lower() not in (".csv", ".parquet"):  # checked at the edge, again by Store.export
        raise InputError(f"{shown(args.to)}: export writes .csv or .parquet files")
    store = open_store(args)
    with atomic_path(args.to, "export") as temp:  # DuckDB writes the temporary file; renamed when whole
        try:
            rows = store.export(args.run, temp, series=args.series)
        except OutputError as exc:  # writing the output failed (a full disk): name the file given
            raise InputError(f"export {shown(args.to)}: {exc}; nothing was written") from None
    print(f"wrote {rows} rows of run {shown(args.run)!r} to {shown(args.to)}")
    return 0
