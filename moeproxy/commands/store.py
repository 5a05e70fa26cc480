"""moeproxy store: move a run store between a DuckDB file and a DuckLake catalog."""

from __future__ import annotations

from moeproxy.commands.common import add_db_option

HELP = "copy a run store between a DuckDB file and a DuckLake catalog (ducklake:...); compact a catalog"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="store_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("copy", help="copy every table of SRC into the empty DST, then check each table's row count",
                       description="Copy every table of SRC into the empty DST (one transaction), then check "
                                   "each table's row count on both sides.")
    p.add_argument("src", metavar="SRC", help="a run database file, or a DuckLake catalog (ducklake:...)")
    p.add_argument("dst", metavar="DST", help="an empty or new run database file, or a DuckLake catalog")
    p.add_argument("--src-data-path", metavar="DIR", default=None,
                   help="SRC's Parquet files, for a catalog (default: $MOEPROXY_DATA_PATH, else FILE.files)")
    p.add_argument("--dst-data-path", metavar="DIR", default=None,
                   help="DST's Parquet files, for a catalog (default: $MOEPROXY_DATA_PATH, else FILE.files)")
    c = sub.add_parser("compact", help="a DuckLake catalog's upkeep: inlined rows written out, small files merged, "
                                        "files no recent snapshot needs deleted (the watcher does it every 10 min)")
    c.add_argument("--keep-minutes", type=float, default=None,
                   help="keep snapshots (and their files) this long for readers mid-query (default 10)")
    add_db_option(c)


def run(args) -> int:
    if args.store_command == "compact":
        return _compact(args)
    import sys

    from moeproxy.commands.common import progress_printer
    from moeproxy.errors import InputError
    from moeproxy.store import Store, resolve_db, store_exists
    from moeproxy.store.copy import copy_store

    if not store_exists(args.src):
        raise InputError(f"{args.src}: no such run database")
    src = Store(resolve_db(args.src), data_path=args.src_data_path)
    dst = Store(resolve_db(args.dst), data_path=args.dst_data_path)
    counts = copy_store(src, dst, progress=progress_printer())
    print(f"copied {src.label} -> {dst.label}: " + ", ".join(f"{t} {n:,}" for t, n in counts.items()),
          file=sys.stdout)
    return 0


def _compact(args) -> int:
    from moeproxy.commands.common import open_store
    from moeproxy.store import lake

    from moeproxy.errors import InputError

    keep = lake.KEEP_MINUTES if args.keep_minutes is None else args.keep_minutes
    if not 0 <= keep <= 525600:
        raise InputError(f"--keep-minutes {keep:g}: must be between 0 and 525600 (a year)")
    store = open_store(args)
    done = store.compact(keep_minutes=keep)
    if not done:
        print(f"{store.label}: a DuckDB file (checkpointed); compaction is a DuckLake catalog's upkeep")
    else:
        print(f"{store.label}: {done['files_before']} -> {done['files_after']} data files")
    return 0
