"""One watcher per log and store: a log that one ``moeproxy watch`` follows into a run database is
claimed, and a second watcher of the same log into the same database is refused with the first
one's PID (two would store every row, and raise every alert, twice).

A claim is a POSIX record lock on one byte of a lock file beside the database
(``runs.duckdb.watch-lock``): the byte at an offset derived from the log's device and inode (a
62-bit hash, so two logs practically never share one). The lock file stays empty; one descriptor
holds every claim of a process, however many logs it follows. The kernel drops the locks of a
process that exits or is killed (``kill -9`` included), so a watcher started again takes its logs
back at once; ``F_GETLK`` names the holder's PID. Record locks do not tell two watchers of one
process apart, so claims made in this process are also kept in a table of their own. A store in
memory is private to its process: only that table applies.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import sys
from pathlib import Path

from moeproxy.errors import InputError

LOCK_SUFFIX = ".watch-lock"
_IN_PROCESS: dict[tuple, int] = {}  # (lock file, offset) -> id() of the Claims holding it here
# one descriptor per lock file and process: closing any descriptor of a file drops all of the
# process's record locks on it, so watchers of one process share it (lock file -> [fd, users])
_SHARED_FDS: dict[tuple, list] = {}
# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhxxxxqqixxxx"


def _offset(identity: tuple[int, int]) -> int:
    digest = hashlib.blake2b(f"{identity[0]}:{identity[1]}".encode(), digest_size=8).digest()
    return 1 + (int.from_bytes(digest, "big") >> 2)


class Claims:
    """The logs this watcher follows, claimed in the store's lock file (see the module docstring)."""

    def __init__(self, store_path: Path | None) -> None:
        self.path = Path(str(store_path) + LOCK_SUFFIX) if store_path is not None else None
        self.fd = -1
        self.key: tuple = ("memory", id(self))
        self.held: set[int] = set()
        if self.path is None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
            st = os.fstat(fd)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot create the watch lock file beside the run database "
                             f"({exc.strerror or exc})") from None
        self.key = (st.st_dev, st.st_ino)
        shared = _SHARED_FDS.setdefault(self.key, [fd, 0])
        if shared[0] != fd:
            os.close(fd)
        shared[1] += 1
        self.fd = shared[0]

    def claim(self, identity: tuple[int, int]) -> int | None:
        """None when this watcher now follows the log; else the PID of the process that does
        (0 when it cannot be told)."""
        offset = _offset(identity)
        if offset in self.held:
            return None
        mine = _IN_PROCESS.get((self.key, offset))
        if mine is not None and mine != id(self):
            return os.getpid()
        if self.fd >= 0:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise InputError(f"{self.path}: cannot lock ({exc.strerror or exc})") from None
                return self._holder(offset)
        self.held.add(offset)
        _IN_PROCESS[(self.key, offset)] = id(self)
        return None

    def release(self, identity: tuple[int, int]) -> None:
        offset = _offset(identity)
        if offset not in self.held:
            return
        self.held.discard(offset)
        _IN_PROCESS.pop((self.key, offset), None)
        if self.fd >= 0:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, offset)
            except OSError:
                pass

    def close(self) -> None:
        for offset in self.held:
            _IN_PROCESS.pop((self.key, offset), None)
        if self.fd >= 0:
            for offset in self.held:
                try:
                    fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, offset)
                except OSError:
                    pass
            shared = _SHARED_FDS[self.key]
            shared[1] -= 1
            if shared[1] == 0:
                del _SHARED_FDS[self.key]
                os.close(self.fd)
            self.fd = -1
        self.held.clear()

    def _holder(self, offset: int) -> int:
        if not sys.platform.startswith("linux"):
            return 0
        try:
            answer = fcntl.fcntl(self.fd, fcntl.F_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, 0, offset, 1, 0))
            l_type, _, _, _, pid = struct.unpack(_FLOCK, answer)
        except (OSError, struct.error):
            return 0
        return pid if l_type != fcntl.F_UNLCK else 0
