"""Following one growing log file: which of its bytes are new and complete, parsed by the reader
that ``moeproxy ingest`` uses.

A ``FollowedFile`` is one file, known by device and inode, so that a rotated file is still itself
under its new name; its open descriptor keeps a file renamed or deleted away readable to its end.
``pending()`` reads the bytes after the committed position up to the last complete line (text
formats) or the last complete record (TensorBoard's length-prefixed records): a trailing
half-written line or record waits for its end. The bytes are parsed through a scratch copy, with
the file's format (detected once, on its first bytes) and the file's header (a CSV's first line,
put back before each chunk); record-index steps run on from where the last chunk ended.
``commit(chunk)`` advances the position, line count and running sha256; the watcher calls it only
once the store transaction holding the chunk's rows and that position has committed, so until then
the same bytes are read again. A file that shrank, or whose bytes just before the position changed,
was rewritten from the start: it is read again from 0 as a new source (its steps become a new
attempt of the run where they repeat steps already stored). A log cut by copy-and-truncate that a
writer without ``O_APPEND`` goes on writing at its old offset starts with a hole of NUL bytes: the
hole is skipped, not read as a malformed line; the state the file had before the cut is kept
(``before_rewrite``) so that the copy can take it over (the watcher decides which copy).

Descriptors: a file holds one only while it is among the ``OpenFiles.limit`` most recently read;
the others are opened by path when read (their device and inode checked: a different file at that
path is not this one) and closed again, so a watcher follows any number of files with a bounded
number of descriptors.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

from moeproxy.errors import InputError
from moeproxy.ingest import ParsedLog, parse_file
from moeproxy.ingest.detect import open_and_detect
from moeproxy.ingest.registry import FORMATS
from moeproxy.ingest.source import HEAD_BYTES, SNIFF_BYTES, SNIFF_MIN_LINES

TAIL_CHECK = 64  # bytes before the position compared at each poll (a rewrite changes them)
MAX_DROPPED_PER_CHUNK = 100
_LINE = re.compile(r"\bline (\d+)\b")


class FollowError(InputError):
    """This file cannot be followed further (the message names it); others go on."""


class FileGone(FollowError):
    """The file is no longer at its path (deleted, or rotated away while it held no descriptor)."""


class OpenFiles:
    """At most ``limit`` followed files hold a descriptor; the least recently read one is closed
    first. ``shrink`` halves the limit when the process ran out of descriptors anyway."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, int(limit))
        self.lru: OrderedDict[int, "FollowedFile"] = OrderedDict()

    def used(self, f: "FollowedFile") -> None:
        self.lru[id(f)] = f
        self.lru.move_to_end(id(f))
        while len(self.lru) > self.limit:
            _, old = self.lru.popitem(last=False)
            old.close()

    def forget(self, f: "FollowedFile") -> None:
        self.lru.pop(id(f), None)

    def shrink(self) -> bool:
        if self.limit <= 1 or not self.lru:
            return False
        self.limit = max(1, self.limit // 2)
        while len(self.lru) > self.limit:
            _, old = self.lru.popitem(last=False)
            old.close()
        return True


@dataclass
class Chunk:
    """New complete bytes of one file, parsed: ``frame`` is empty when they hold no metric values."""

    file: "FollowedFile"
    start: int
    end: int
    data: bytes
    lines: int
    parsed: ParsedLog | None
    index_base: int  # the record index the next chunk starts from
    warnings: list[str] = field(default_factory=list)
    more: bool = False  # the file held more bytes than one look reads

    def sha256(self) -> str:
        h = self.file.hasher.copy()
        h.update(self.data)
        return h.hexdigest()


@dataclass
class FollowedFile:
    path: Path
    run: str
    scratch: Path  # a private folder for the scratch copies
    fd: int = -1
    identity: tuple[int, int] = (0, 0)
    position: int = 0
    lines: int = 0
    format: str | None = None
    header: bytes = b""
    index_base: int = 0
    source_id: int | None = None
    totals: dict = field(default_factory=dict)
    hasher: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    tail: bytes = b""
    failed: str | None = None  # why the file is no longer followed
    unrecognised_at: int = -1  # the size at which detection last failed
    fresh_start: bool = False  # read again from 0 after a rewrite: the caller says so
    pool: OpenFiles | None = None
    before_rewrite: dict | None = None  # the state before the last rewrite (a copy may take it over)
    copy_of: "FollowedFile | None" = None  # a copy of this file's bytes: not read while that holds
    seen: tuple | None = None  # (size, mtime, ctime) at the last scan
    looked: tuple | None = None  # ... when the last read found nothing new
    header_at: int = 0  # where the header lines start (after a hole of NUL bytes, not at 0)
    carry: dict | None = None  # the reader's context after the bytes read (``ParsedLog.carry``)

    @classmethod
    def open(cls, path: Path, run: str, scratch: Path, pool: OpenFiles | None = None) -> "FollowedFile":
        fd = open_regular(path)
        st = os.fstat(fd)
        f = cls(path, run, scratch, fd, (st.st_dev, st.st_ino), pool=pool)
        if pool is not None:
            pool.used(f)
        return f

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def let_go(self) -> None:
        self.close()
        if self.pool is not None:
            self.pool.forget(self)

    def descriptor(self) -> int:
        """The file's descriptor, opened again by path when it held none (FileGone when the path
        now names another file or none)."""
        if self.fd < 0:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                raise FileGone(f"{self.path}: gone") from None
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self.identity:
                os.close(fd)
                raise FileGone(f"{self.path}: now another file")
            self.fd = fd
        if self.pool is not None:
            self.pool.used(self)
        return self.fd

    def size(self) -> int:
        return os.fstat(self.descriptor()).st_size

    def snapshot(self) -> dict:
        """The state reached (what a copy of the file's bytes up to ``position`` continues from)."""
        return {"position": self.position, "lines": self.lines, "hasher": self.hasher.copy(),
                "format": self.format, "header": self.header, "index_base": self.index_base,
                "source_id": self.source_id, "totals": dict(self.totals), "header_at": self.header_at,
                "carry": self.carry}

    def prefix_hasher(self, length: int):
        """A sha256 hasher fed the first ``length`` bytes; None when the file holds fewer."""
        h = hashlib.sha256()
        at = 0
        while at < length:
            data = os.pread(self.descriptor(), min(1 << 20, length - at), at)
            if not data:
                return None
            h.update(data)
            at += len(data)
        return h

    def prefix_sha(self, length: int) -> str | None:
        """sha256 of the first ``length`` bytes; None when the file holds fewer."""
        h = self.prefix_hasher(length)
        return None if h is None else h.hexdigest()

    def adopt(self, state: dict) -> bool:
        """Go on from another file's state when this file starts with exactly the bytes that file
        had read (a copy of it): True, and the next read starts at that position."""
        position = state["position"]
        if position <= 0 or self.size() < position or self.prefix_sha(position) != state["hasher"].hexdigest():
            return False
        self.position, self.lines, self.hasher = position, state["lines"], state["hasher"].copy()
        self.format, self.header, self.index_base = state["format"], state["header"], state["index_base"]
        self.source_id, self.totals, self.header_at = state["source_id"], dict(state["totals"]), state["header_at"]
        self.carry = state.get("carry")
        self.tail = os.pread(self.descriptor(), min(TAIL_CHECK, position), position - min(TAIL_CHECK, position))
        return True

    @property
    def binary(self) -> bool:
        return self.format is not None and FORMATS[self.format].binary

    # -- resuming after a restart --------------------------------------------------------------
    def resume(self, saved: dict) -> bool:
        """Take up a stored position when the file still holds exactly the bytes read up to it
        (their sha256 matches); False (and nothing changed) when it was rewritten meanwhile."""
        position = int(saved["position"])
        if self.size() < position:
            return False
        h = self.prefix_hasher(position)
        if h is None or h.hexdigest() != saved["sha256"]:
            return False
        self.position, self.lines, self.hasher = position, int(saved["lines"]), h
        self.format, self.header = saved["format"], bytes(saved["header"] or b"")
        self.index_base, self.source_id = int(saved["index_base"]), int(saved["source_id"])
        self.totals = {k: saved[k] for k in ("rows", "steps", "metrics", "nonfinite", "attempts", "skipped_lines")}
        self.tail = os.pread(self.descriptor(), min(TAIL_CHECK, position), position - min(TAIL_CHECK, position))
        return True

    # -- reading ---------------------------------------------------------------------------------
    def rewritten(self, size: int) -> bool:
        if size < self.position:
            return True
        return bool(self.tail) and os.pread(self.descriptor(), len(self.tail), self.position - len(self.tail)) != self.tail

    def restart_from_zero(self) -> None:
        self.position = self.lines = self.index_base = 0
        self.format, self.header, self.source_id, self.totals = None, b"", None, {}
        self.hasher, self.tail, self.unrecognised_at = hashlib.sha256(), b"", -1
        self.fresh_start, self.header_at, self.carry = True, 0, None

    def pending(self, max_bytes: int = 16 << 20) -> Chunk | None:
        """The new complete bytes, parsed; None when there are none (or the format is not yet
        recognisable). Raises FollowError when the file cannot be followed."""
        size = self.size()
        if self.rewritten(size):
            self.before_rewrite = self.snapshot()
            self.restart_from_zero()
        if (self.fresh_start or (self.format is not None and not self.binary)) and size > self.position:
            self._skip_hole(size)
        if size <= self.position or (self.format is None and size == self.unrecognised_at):
            return None
        if self.format is None:  # the first look: enough to tell the format (a 10 GB checkpoint is not read)
            max_bytes = min(max_bytes, 4 * HEAD_BYTES)
        data = os.pread(self.descriptor(), min(size - self.position, max_bytes), self.position)
        if self.format is None and data.count(b"\n") < SNIFF_MIN_LINES and len(data) < size - self.position:
            # records wider than the head (thousands of per-layer, per-expert metrics a line): read on,
            # as ingest's detection does, until enough whole lines are there, within SNIFF_BYTES
            more = min(size - self.position, SNIFF_BYTES)
            while data.count(b"\n") < SNIFF_MIN_LINES and len(data) < more:
                data += os.pread(self.descriptor(), min(len(data), more - len(data)), self.position + len(data))
            max_bytes = max(max_bytes, len(data))
        if self.format is None:
            self._detect(data, size)
            if self.format is None:
                return None
        data = self._complete(data, size, max_bytes)
        if not data:
            return None
        chunk = self._parse(data)
        chunk.more = size - self.position > max_bytes
        return chunk

    def _skip_hole(self, size: int) -> None:
        """Step over NUL bytes at the position: the hole a writer without O_APPEND leaves when it
        goes on at its old offset after its file was truncated (never text a log line starts with).
        The bytes count in the position and sha256 as any others."""
        at = self.position
        while at < size:
            data = os.pread(self.descriptor(), min(1 << 20, size - at), at)
            if not data:
                break
            kept = data.lstrip(b"\0")
            skipped = len(data) - len(kept)
            self.hasher.update(data[:skipped])
            self.tail = (self.tail + data[:skipped])[-TAIL_CHECK:]
            at += skipped
            if kept:
                break
        self.position = at

    def _detect(self, data: bytes, size: int) -> None:
        """The format of the file's first bytes (complete lines only): waits while too few lines
        are there to tell, gives up (FollowError) once the first 64 KiB tell nothing."""
        head = data if self._looks_binary_records(data) else data[: data.rfind(b"\n") + 1]
        try:  # no complete line yet: a whole JSON document (one line, no newline) is still named
            fmt = self._detect_bytes((head or data)[:max(HEAD_BYTES, len(head))])
        except InputError as exc:
            if len(head) >= HEAD_BYTES or size >= 4 * HEAD_BYTES:
                raise FollowError(self._real(str(exc), 0)) from None
            self.unrecognised_at = size
            return
        if not FORMATS[fmt].appendable:  # a whole document rewritten at each save
            raise FollowError(f"{self.path}: a {fmt} file is rewritten whole, not appended to: not followed "
                              "(ingest it with `moeproxy ingest` when it is complete)")
        if not head:
            self.unrecognised_at = size
            return
        self.format = fmt
        self.header_at = self.position
        if FORMATS[fmt].header_lines:
            self.header = b"".join(data.splitlines(keepends=True)[: FORMATS[fmt].header_lines])

    @staticmethod
    def _looks_binary_records(data: bytes) -> bool:
        return b"brain.Event:" in data[:256]

    def _complete(self, data: bytes, size: int, max_bytes: int) -> bytes:
        """The longest prefix of complete lines (or records) of the bytes read."""
        if self.binary:
            complete = data[: complete_records(data, self.path, self.position)]
        else:
            complete = data[: data.rfind(b"\n") + 1]
        if not complete and len(data) >= max_bytes:  # never read it again and again
            raise FollowError(f"{self.path}: line {self.lines + 1}: longer than {max_bytes:,} bytes "
                              f"(from byte {self.position:,}); not a training log line")
        return complete

    def _parse(self, data: bytes) -> Chunk:
        skip_header = self.position == self.header_at and bool(self.header)
        body = data[len(self.header):] if skip_header else data
        dropped: list[str] = []
        # a line of the scratch copy is this many lines later in the file (the header line put
        # back in front of a later chunk is the file's first line, counted already)
        header_lines = FORMATS[self.format].header_lines
        lines_before = self.lines - (header_lines if self.header and not skip_header else 0)
        while True:
            try:
                parsed = self._parse_bytes(self.header + body if self.header else body, self.format)
                break
            except InputError as exc:
                message = str(exc)
                m = _LINE.search(message)
                line = int(m.group(1)) - (header_lines if self.header else 0) if m else 0
                body_lines = body.splitlines(keepends=True)
                if self.binary or not 1 <= line <= len(body_lines) or len(dropped) >= MAX_DROPPED_PER_CHUNK:
                    raise FollowError(self._real(message, lines_before)) from None
                dropped.append(self._real(message, lines_before) + ": line skipped")
                body = b"".join(body_lines[: line - 1] + [b"\n"] + body_lines[line:])  # line count kept
        index_base = self.index_base
        if parsed.step_from_index and len(parsed.rows) and "index" not in (parsed.carry or {}):
            # (a reader that carries its record index across chunks numbers them itself)
            rows = parsed.columns
            parsed.rows = replace(rows, step=rows.step + self.index_base)
            index_base = int(parsed.rows.step.max()) + 1
        return Chunk(self, self.position, self.position + len(data), data, data.count(b"\n"),
                     parsed, index_base, dropped + [self._real(w, lines_before) for w in parsed.warnings])

    def _parse_bytes(self, data: bytes, fmt: str) -> ParsedLog:
        return self._with_copy(data, lambda copy: parse_file(copy, fmt, allow_empty=True, carry=self.carry))

    def _detect_bytes(self, data: bytes) -> str:
        def detect(copy: Path) -> str:
            src, log_format = open_and_detect(copy)
            return log_format.name

        return self._with_copy(data, detect)

    def _with_copy(self, data: bytes, read):
        """``read(path)`` of the bytes written as a file of their own, in a folder named like the
        file's (readers that take a rank from the folder name see the same name)."""
        folder = self.scratch / (self.path.parent.name or "root")
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / self.path.name
        copy.write_bytes(data)
        try:
            return read(copy)
        finally:
            copy.unlink(missing_ok=True)

    def _real(self, message: str, lines_before: int) -> str:
        """A reader's message about the scratch copy, about the file: its path and line numbers."""
        copy = str(self.scratch / (self.path.parent.name or "root") / self.path.name)
        message = message.replace(copy, str(self.path))
        if not message.startswith(str(self.path)):
            message = f"{self.path}: {message}"
        return _LINE.sub(lambda m: f"line {int(m.group(1)) + lines_before}", message)

    def commit(self, chunk: Chunk) -> None:
        """The chunk's rows and position are stored: move on past it."""
        self.hasher.update(chunk.data)
        self.position, self.lines, self.index_base = chunk.end, self.lines + chunk.lines, chunk.index_base
        self.carry = chunk.parsed.carry if chunk.parsed is not None else self.carry
        self.tail = (self.tail + chunk.data)[-TAIL_CHECK:]
        self.fresh_start = False


def complete_records(data: bytes, path: Path, offset: int) -> int:
    """How many leading bytes of ``data`` are whole TensorBoard records (``length (8) | crc (4) |
    payload | crc (4)``); a length whose checksum is wrong is a FollowError naming its offset."""
    from moeproxy.ingest.formats.tensorboard.crc32c import crc32c, masked  # the ingest reader's own (no tensorboard needed)

    at = 0
    while at + 12 <= len(data):
        length, length_crc = struct.unpack_from("<QI", data, at)
        if int(masked(crc32c(data[at:at + 8]))) != length_crc:
            raise FollowError(f"{path}: record at offset {offset + at}: corrupt (length checksum mismatch)")
        if at + 12 + length + 4 > len(data):
            break
        at += 12 + length + 4
    return at


def open_regular(path: Path) -> int:
    """A read descriptor of a regular file (never blocking on a FIFO); InputError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path}: not a regular file; not followed")
    return fd
