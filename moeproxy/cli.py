"""The one ``moeproxy`` command: a thin dispatcher over subcommand modules.

Each subcommand lives in ``moeproxy/commands/<name>.py`` and defines ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``. Command modules must stay light at import
time (no torch, no transformers): heavy imports belong inside ``run``, so that
``moeproxy ingest`` starts in well under a second. Adding a subcommand is one module plus one
line in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from moeproxy.errors import MoeproxyError

# name -> module; the order is the order in --help.
COMMANDS: dict[str, str] = {
    "ingest": "moeproxy.commands.ingest",
    "watch": "moeproxy.commands.watch",
    "runs": "moeproxy.commands.runs",
    "export": "moeproxy.commands.export",
    "formats": "moeproxy.commands.formats",
    "diagnose": "moeproxy.commands.diagnose",
    "families": "moeproxy.commands.families",
    "plan": "moeproxy.commands.plan",
    "build": "moeproxy.commands.build",
    "dashboard": "moeproxy.commands.dashboard",
    "report": "moeproxy.commands.report",
    "repro": "moeproxy.commands.repro",
    "compare": "moeproxy.commands.compare",
    "evaluate": "moeproxy.commands.evaluate",
    "store": "moeproxy.commands.store",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or (``only``) of one: ``moeproxy ingest`` then imports the
    ingest command's module and no other (start-up of a one-shot command stays short)."""
    parser = argparse.ArgumentParser(
        prog="moeproxy",
        description="Triage failed MoE RL post-training runs and reproduce them on small proxies.",
    )
    from moeproxy import __version__

    parser.add_argument("--version", action="version", version=f"moeproxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    # a known command first: only its module is needed (help and errors without one list them all)
    parser = build_parser(given[0] if given and given[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        from moeproxy.commands.common import apply_data_path

        apply_data_path(args)
        return int(args._module.run(args) or 0)
    except MoeproxyError as exc:
        print(f"moeproxy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"moeproxy {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`moeproxy formats | head -1`): stop quietly
        import os

        # Python would flush stdout again at exit and fail once more: point it at /dev/null
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command a closed pipe stopped


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
