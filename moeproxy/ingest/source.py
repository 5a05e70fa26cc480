"""Opening a log file for parsing: existence, hashing, binary and encoding checks, line reading.

Every problem becomes an ``InputError`` whose message names the file (and the line where there
is one), so the CLI can print one clear line and exit 2 without touching the store.
"""

from __future__ import annotations

import codecs
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from moeproxy.errors import InputError

HEAD_BYTES = 64 * 1024


@dataclass
class SourceFile:
    path: Path
    size: int
    head: bytes
    encoding: str | None  # None for binary formats (TensorBoard event files)
    _sha256: str | None = None

    @property
    def sha256(self) -> str:
        """The file's sha256, computed on first use (a parser may have it computed elsewhere)."""
        if self._sha256 is None:
            self._sha256 = _sha256(self.path)
        return self._sha256

    @property
    def head_text(self) -> str:
        """The decoded head (at most HEAD_BYTES), cut at the last complete line when longer."""
        if self.encoding is None:
            return ""
        text = self.head.decode(self.encoding, errors="replace")
        if self.size > len(self.head) and "\n" in text:
            text = text[: text.rfind("\n") + 1]
        return text

    def head_lines(self, limit: int = 400) -> list[str]:
        return self.head_text.splitlines()[:limit]

    def lines(self) -> Iterator[tuple[int, str]]:
        """(1-based line number, line without its newline), strictly decoded."""
        with open(self.path, "r", encoding=self.encoding, newline="") as fh:
            lineno = 0
            try:
                for lineno, line in enumerate(fh, 1):
                    yield lineno, line.rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{self.path}: line {lineno + 1}: not valid {self.encoding} text ({exc.reason})"
                ) from None

    def text_stream(self) -> Iterator[str]:
        """Lines (newline kept) for hot loops that need no line numbers."""
        with open(self.path, "r", encoding=self.encoding, newline="") as fh:
            try:
                yield from fh
            except UnicodeDecodeError as exc:
                raise InputError(f"{self.path}: not valid {self.encoding} text ({exc.reason})") from None

    def line_boundary(self, offset: int) -> int:
        """The offset just after the first newline at or after ``offset`` (the file size if none)."""
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            while chunk := fh.read(1 << 16):
                at = chunk.find(b"\n")
                if at >= 0:
                    return offset + at + 1
                offset += len(chunk)
        return self.size

    def text_range(self, start: int, stop: int) -> Iterator[str]:
        """Lines (newline kept) of bytes [start, stop), which must begin and end at line starts."""
        raw = io.BufferedReader(_RangeReader(self.path, start, stop), 1 << 16)
        with io.TextIOWrapper(raw, encoding=self.encoding, newline="") as fh:
            try:
                yield from fh
            except UnicodeDecodeError as exc:  # as text_stream words it
                raise InputError(f"{self.path}: not valid {self.encoding} text ({exc.reason})") from None

    def read_text(self) -> str:
        try:
            return self.path.read_text(encoding=self.encoding)
        except UnicodeDecodeError as exc:
            line = self.path.read_bytes()[: exc.start].count(b"\n") + 1
            raise InputError(f"{self.path}: line {line}: not valid {self.encoding} text ({exc.reason})") from None

    @property
    def ends_with_newline(self) -> bool:
        if self.size == 0:
            return False
        with open(self.path, "rb") as fh:
            fh.seek(-1, 2)
            return fh.read(1) in (b"\n", b"\r")


class _RangeReader(io.RawIOBase):
    """Bytes [start, stop) of a file as a raw stream."""

    def __init__(self, path: Path, start: int, stop: int) -> None:
        super().__init__()
        self._fh = open(path, "rb", buffering=0)
        self._fh.seek(start)
        self._left = stop - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._left <= 0:
            return 0
        n = self._fh.readinto(memoryview(buffer)[: min(len(buffer), self._left)]) or 0
        self._left -= n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False
    if b"\x00" in head:
        return True
    control = sum(1 for b in head[:4096] if b < 9 or 13 < b < 32)
    return control > len(head[:4096]) * 0.05


def open_source(path: str | Path, *, allow_binary: bool = False) -> SourceFile:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    if p.is_dir():
        raise InputError(f"{p}: is a directory")
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from None
    if size == 0:
        raise InputError(f"{p}: empty file, nothing to ingest")
    if looks_binary(head):
        if allow_binary:
            return SourceFile(p, size, head, None)
        raise InputError(f"{p}: binary file, not a training log this tool knows")
    if head.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8"
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(head) - 4:  # not merely a multibyte character cut by the head limit
                line = head[: exc.start].count(b"\n") + 1
                raise InputError(
                    f"{p}: line {line}: not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start}); "
                    "re-encode the log as UTF-8"
                ) from None
    return SourceFile(p, size, head, encoding)
