"""Options shared by several subcommands."""

from __future__ import annotations

import argparse
import sys


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="FILE", default=None,
        help="run database: a DuckDB file, or a DuckLake catalog (ducklake:postgres:dbname=... host=..., "
             "ducklake:FILE.ducklake); default: $MOEPROXY_DB, else ~/.local/share/moeproxy/runs.duckdb",
    )
    parser.add_argument(
        "--data-path", metavar="DIR", default=None,
        help="a DuckLake catalog's Parquet files (a folder every host sees, or s3://...); default: "
             "$MOEPROXY_DATA_PATH, else FILE.files beside a local catalog",
    )


def apply_data_path(args) -> None:
    """``--data-path`` reaches every store the command opens (and the jobs it starts) as
    ``$MOEPROXY_DATA_PATH``."""
    import os

    if getattr(args, "data_path", None):
        os.environ["MOEPROXY_DATA_PATH"] = args.data_path


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """--run, --role (``contracts.ROLES``) and --proxy-of: what the ingested rows belong to."""
    from moeproxy.contracts import ROLES

    parser.add_argument("--run", metavar="NAME", help="run name for all PATHs (default: derived from each path)")
    parser.add_argument("--role", choices=ROLES, default="other",
                        help="full run, proxy run, or other (default: other)")
    parser.add_argument("--proxy-of", metavar="RUN", help="for a proxy run: the full run it stands in for")


def add_keep_options(parser: argparse.ArgumentParser, required: bool) -> None:
    """--keep-ratio | --keep-experts (exactly one when ``required``; the rule:
    ``moeproxy.proxy.constraints.ratio_or_count_problem``), --top-k and --ep-size: how a proxy prunes."""
    from moeproxy.proxy.constraints import TOP_K_MODES

    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--keep-ratio", type=float, help="fraction of routed experts kept per MoE layer")
    group.add_argument("--keep-experts", type=int, help="routed experts kept per MoE layer")
    parser.add_argument("--top-k", choices=TOP_K_MODES, default="keep",
                        help="keep num_experts_per_tok (default; pruning == masking) or scale it by E'/E")
    parser.add_argument("--ep-size", type=int, default=1, help="expert-parallel size the kept count must divide by")


def open_store(args):
    from moeproxy.store import Store

    return Store(args.db)


def progress_printer():
    """A progress callback that writes to stderr when a person is watching, else nothing."""
    if not sys.stderr.isatty():
        return None
    return lambda message: print(f"  {message}", file=sys.stderr, flush=True)
