"""moeproxy runs: list the runs in the database."""

from __future__ import annotations

import json

from moeproxy.commands.common import add_db_option, open_store
from moeproxy.terminal import shown

HELP = "list the runs in the database with role, format, size and latest verdict"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    add_db_option(parser)


def run(args) -> int:
    store = open_store(args)
    table = store.runs()
    if args.json:
        records = json.loads(table.to_json(orient="records", date_format="iso"))
        print(json.dumps(records, indent=2))
        return 0
    if table.empty:
        print(f"no runs in {store.label}; add some with `moeproxy ingest PATH`")
        return 0
    columns = ["run", "role", "proxy_of", "framework", "format", "steps", "metrics", "rows", "nonfinite",
               "attempts", "verdict"]
    table = table[columns].fillna("")
    for column in ("run", "proxy_of", "framework", "format"):  # names from logs and users, printed safely
        table[column] = table[column].map(shown)
    print(table.to_string(index=False))
    return 0
