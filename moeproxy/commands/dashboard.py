"""moeproxy dashboard: start the Streamlit triage app on this machine (loopback by default)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from moeproxy.commands.common import add_db_option

HELP = "open the triage dashboard (Streamlit) on the run database; loads the demo runs into an empty store"
APP = Path(__file__).resolve().parent.parent.parent / "dashboard" / "app.py"


def add_arguments(parser) -> None:
    add_db_option(parser)
    parser.add_argument("--port", type=int, default=8501, help="port to listen on (default 8501)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; use an SSH tunnel)")
    parser.add_argument("--grid", metavar="FILE", default=None,
                        help="a fidelity grid's results.json (bench/fidelity.py) shown on the Compare page "
                             "(default: $MOEPROXY_GRID)")


def streamlit_argv(app: Path, host: str, port: int) -> list[str]:
    """The server command line: safe settings explicit here as well as in dashboard/.streamlit/config.toml."""
    return [sys.executable, "-m", "streamlit", "run", str(app),
            f"--server.address={host}", f"--server.port={port}", "--server.headless=true",
            "--server.enableXsrfProtection=true", "--server.enableCORS=true", "--server.fileWatcherType=none",
            "--browser.gatherUsageStats=false", "--global.developmentMode=false"]


def run(args) -> int:
    from moeproxy.errors import InputError
    from moeproxy.store import default_db_path, resolve_db

    if not 0 < args.port < 65536:
        raise InputError(f"--port {args.port}: must be 1..65535")
    if not APP.exists():
        raise InputError(f"{APP}: the dashboard app is missing from this install")
    env = dict(os.environ)
    db = resolve_db(args.db) if args.db else default_db_path()
    env["MOEPROXY_DB"] = str(db.resolve()) if isinstance(db, Path) else db
    if args.grid:
        from moeproxy.fidelity_grid import load_grid

        load_grid(args.grid)  # a bad file is one line here, not a warning found later on a page
        env["MOEPROXY_GRID"] = str(Path(args.grid).resolve())
    print(f"moeproxy dashboard on http://{args.host}:{args.port} (store {env['MOEPROXY_DB']}); Ctrl-C stops it",
          file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # The server replaces this process, so a signal sent to `moeproxy dashboard` (Ctrl-C, a
    # service manager's SIGTERM) reaches Streamlit itself and no orphaned server is left behind.
    argv = streamlit_argv(APP, args.host, args.port)
    os.execve(argv[0], argv, env)
    return 0  # not reached
