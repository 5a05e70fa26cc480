"""moeproxy report: write a self-contained HTML post-mortem of a run (and its proxy)."""

from __future__ import annotations

from moeproxy.commands.common import add_db_option, open_store

HELP = "write a self-contained HTML post-mortem of a run (figures, findings, proxy recipe)"


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN", help="run name in the database")
    parser.add_argument("--proxy", metavar="RUN", default=None, help="the proxy run to compare with")
    parser.add_argument("--proxy-report", metavar="FILE", default=None,
                        help="proxy_report.json of the proxy checkpoint (the recipe shown in the report)")
    parser.add_argument("--grid", metavar="FILE", default=None,
                        help="a fidelity grid's results.json (bench/fidelity.py): its table and heat map in the report")
    parser.add_argument("-o", "--output", metavar="FILE.html", required=True, help="HTML file to write")
    add_db_option(parser)


def run(args) -> int:
    from moeproxy.report import write_report
    from moeproxy.terminal import shown

    # checked before rendering and written atomically (moeproxy.outputs): a directory, device, FIFO or
    # full disk is one line, and the file there before is left as it was
    target = write_report(open_store(args), args.run, args.output, proxy=args.proxy, proxy_report=args.proxy_report,
                          grid=args.grid)
    print(f"wrote {shown(target)} ({target.stat().st_size / 1e6:.1f} MB)")
    return 0
