"""The watcher's own files: the alerts path, checked before anything is followed, and the files
the watcher writes, which it never follows.

``check_alerts_path`` refuses, with one line each, an alerts path that is a directory, lies under a
file, is a FIFO, a device or a socket (looked at with ``stat`` and opened non-blocking: never waited
on), cannot be created or written (a read-only or unwritable folder), or is a log the watcher
follows (the alerts would be appended to the training log). What passes exists afterwards as a
regular file (created empty, with its folders, when it was missing).

``OwnFiles`` names what a scan skips: the alerts file, the run database and its sidecar files
(``runs.duckdb.wal``, the watch lock), the scratch folder, and a file that stdout or stderr is
redirected to, even when they lie inside a watched directory.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from moeproxy.errors import InputError
from moeproxy.outputs import check_target
from moeproxy.terminal import shown


def check_alerts_path(given: str, watched: list[str]) -> Path:
    """The absolute alerts path, after the checks of the module docstring (InputError otherwise):
    what any output path must pass (``moeproxy.outputs.check_target``), then what only the alerts
    file must: not a log this watcher follows, and openable for appending without blocking."""
    path = check_target(Path(str(given)).expanduser().absolute(), "--alerts") if str(given).strip() else None
    if path is None:
        raise InputError(f"--alerts {shown(repr(str(given)))}: not a usable file name")
    name = f"--alerts {shown(path)}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a symlink loop, a folder that cannot be searched
        raise InputError(f"{name}: cannot be used ({exc.strerror or exc})") from None
    _check_not_followed(path, st, watched, name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{name}: cannot create its folder ({exc.strerror or exc})") from None
    try:  # non-blocking: a FIFO put there since the check above answers at once
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        why = "a FIFO" if exc.errno == errno.ENXIO else (exc.strerror or str(exc))
        raise InputError(f"{name}: cannot be written ({why})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{name}: not a regular file (a FIFO, a device or a socket); --alerts needs a file")
    finally:
        os.close(fd)
    return path


def _check_not_followed(path: Path, st: os.stat_result | None, watched: list[str], name: str) -> None:
    """A log the watcher follows is never the alerts file: a PATH given as a file (or a link to it),
    or a file in a watched directory that is not an alerts file already."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return
    for given in watched:
        g = Path(given).expanduser().absolute()
        try:
            g_real = g.resolve()
            g_st = os.stat(g)
        except (OSError, RuntimeError):
            continue
        same = real == g_real or (st is not None and (st.st_dev, st.st_ino) == (g_st.st_dev, g_st.st_ino))
        if stat.S_ISREG(g_st.st_mode) and same:
            raise InputError(f"{name}: is {shown(given)}, a log this watcher follows; the alerts would be "
                             "written into the training log (choose another file)")
        if stat.S_ISDIR(g_st.st_mode) and st is not None and real.is_relative_to(g_real) and st.st_size \
                and not _holds_alerts(path):
            raise InputError(f"{name}: is a log in the watched folder {shown(given)} (it holds no alerts); the "
                             "alerts would be written into it (choose another file)")


def _holds_alerts(path: Path) -> bool:
    """Whether the file's first line is an alert (an alerts file of an earlier watch)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20)
        record = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"run", "verdict"} <= set(record)


@dataclass
class OwnFiles:
    """What the watcher writes: never followed, wherever it lies."""

    alerts: Path | None = None
    store: Path | None = None
    scratch: Path | None = None
    identities: set = field(default_factory=set)  # (device, inode) of files written to

    def __post_init__(self) -> None:
        for fd in (sys.stdout, sys.stderr):  # `moeproxy watch run/ > run/watch.log`
            try:
                st = os.fstat(fd.fileno())
            except (OSError, ValueError, AttributeError):  # io.StringIO in tests, a closed stream
                continue
            if stat.S_ISREG(st.st_mode):
                self.identities.add((st.st_dev, st.st_ino))
        self.refresh()

    def refresh(self) -> None:
        """Take note of the alerts file's identity (it may have been created or replaced)."""
        if self.alerts is not None:
            try:
                st = os.stat(self.alerts)
                self.identities.add((st.st_dev, st.st_ino))
            except OSError:
                pass

    def owns(self, path: Path, identity: tuple[int, int]) -> bool:
        if identity in self.identities or path == self.alerts:
            return True
        if self.store is not None and path.parent == self.store.parent and path.name.startswith(self.store.name):
            return True
        return self.scratch is not None and path.is_relative_to(self.scratch)
