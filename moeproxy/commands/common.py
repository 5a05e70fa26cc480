"""Options shared by several subcommands."""

from __future__ import annotations

import argparse
import sys


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="FILE", default=None,
        help="run database (DuckDB file); default: $MOEPROXY_DB, else ~/.local/share/moeproxy/runs.duckdb",
    )


def open_store(args):
    from moeproxy.store import Store

    return Store(args.db)


def progress_printer():
    """A progress callback that writes to stderr when a person is watching, else nothing."""
    if not sys.stderr.isatty():
        return None
    return lambda message: print(f"  {message}", file=sys.stderr, flush=True)
