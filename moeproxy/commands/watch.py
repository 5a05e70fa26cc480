"""moeproxy watch: follow the logs of running jobs, ingest what they append, alert at the first
critical finding; stops cleanly on SIGTERM or Ctrl-C."""

from __future__ import annotations

import os
import threading

HELP = "follow growing training logs: ingest new lines as they come, re-diagnose, alert at the first critical finding"


def add_arguments(parser) -> None:
    from moeproxy.commands.common import add_db_option, add_run_options

    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="log files or run directories (one run per directory, named after it)")
    add_run_options(parser)
    parser.add_argument("--alerts", metavar="FILE.jsonl", help="append each alert to this file as one JSON line")
    parser.add_argument("--webhook", metavar="URL", help="POST each alert's JSON to this URL (background, with retries)")
    parser.add_argument("--interval", metavar="SECONDS", type=float, default=1.0,
                        help="seconds between looks at the files (default: 1)")
    parser.add_argument("--commit-every", metavar="SECONDS", type=float, default=None,
                        help="on a DuckLake catalog, store calm rows at most this often; rows with a first "
                             "NaN/inf or an out-of-range value are stored and diagnosed at once (default: 3 on a "
                             "catalog, 0 = every look on a file)")
    parser.add_argument("--compact-minutes", metavar="MINUTES", type=float, default=10.0,
                        help="on a DuckLake catalog, compact every this many minutes: inlined rows written out, "
                             "small files merged, snapshots older than that expired (default: 10)")
    parser.add_argument("--once", action="store_true",
                        help="ingest what the files hold now, diagnose, alert, and exit (no following)")
    add_db_option(parser)


class SignalStop:
    """A SIGTERM/SIGINT handler that sets ``stop``. A handler runs in the main thread between two
    bytecodes, possibly inside ``stop.wait()`` while that holds the event's (non-reentrant) lock:
    ``stop.set()`` there waits for it forever (a watcher that ignored SIGTERM, seen under load). So the
    handler only writes a byte to a pipe, which takes no lock; a thread blocked on the pipe sets the
    event. ``close()`` ends that thread and closes the pipe."""

    def __init__(self, stop) -> None:
        self._read, self._write = os.pipe()
        self._thread = threading.Thread(target=self._relay, args=(stop,), name="moeproxy-watch-stop", daemon=True)
        self._thread.start()

    def _relay(self, stop) -> None:
        try:
            if os.read(self._read, 1) == b"\1":
                stop.set()
        except OSError:
            pass

    def __call__(self, signum, frame) -> None:
        try:
            os.write(self._write, b"\1")
        except OSError:
            pass

    def close(self) -> None:
        try:
            os.write(self._write, b"\0")  # ends the relay thread without setting anything
        except OSError:
            pass
        self._thread.join(timeout=5)
        os.close(self._write)
        os.close(self._read)


def run(args) -> int:
    import signal

    from moeproxy.commands.common import open_store
    from moeproxy.watch import WatchConfig, Watcher

    config = WatchConfig(paths=args.paths, run=args.run, role=args.role, proxy_of=args.proxy_of,
                         alerts=args.alerts, webhook=args.webhook, interval=args.interval,
                         commit_every=args.commit_every, compact_minutes=args.compact_minutes)
    store = open_store(args)
    stop = threading.Event()

    stop_watching = SignalStop(stop)
    previous = {sig: signal.signal(sig, stop_watching) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        watcher = Watcher(config, store)
        watcher.start()
        if not args.once:
            print(f"watching {len(args.paths)} path{'s' if len(args.paths) != 1 else ''} into {store.label} "
                  f"every {config.interval:g} s (Ctrl-C or SIGTERM stops)", flush=True)
        watcher.run(stop, once=args.once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_watching.close()
    if not args.once:
        held = sorted(watcher.held) or [0.0]
        print(f"moeproxy watch: stopped after {len(watcher.held)} cycles; the database was held "
              f"{1000 * sum(held) / len(held):.0f} ms per cycle on average, at most {1000 * held[-1]:.0f} ms", flush=True)
    return 0
