"""TFRecord framing, read in bulk: ``length (8) | masked crc(length) (4) | data | masked crc(data) (4)``.

``record_windows(src)`` reads the file in windows of whole records (bounded memory) and yields, for
each window, the bytes as a uint8 array, the offset of the window in the file, and the start and
length of each record's data in it. Every record is checked (both checksums, in bulk:
``moeproxy.ingest.formats.tensorboard.crc32c``) before its window is yielded; a bad checksum is an error naming the
record's file offset. A last record cut short (a file still being written, or cut by a crash) is
dropped with a warning naming its offset, and the sha256 recorded is that of the whole records.

Finding where records start is a chain (each length says where the next record is). It is walked
in Python for a few dozen records, then guessed ahead in bulk from the period of the lengths seen
(one writer logging the same tags writes the same lengths over and over) and the guess is checked
in bulk: every accepted start is a record start whose length field says so.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from moeproxy.errors import InputError
from moeproxy.ingest.formats.tensorboard.crc32c import crc32c, crc32c_equal_length, crc32c_long, masked
from moeproxy.ingest.source import SourceFile, _RangeReader

WINDOW = 32 << 20  # bytes read at a time (a longer record gets a window of its own)
_HEAD = struct.Struct("<QI")
_WALK = 48  # records walked one by one before each bulk guess
_MAX_PERIOD = 24


def read_at(buf: np.ndarray, at: np.ndarray, dtype: str) -> np.ndarray:
    """Little-endian numbers of ``dtype`` (``<u4``, ``<u8``, ``<f4``, ``<f8``) at byte positions
    ``at`` of ``buf``: one view of the buffer per alignment, one gather per view; floats come back
    as float64."""
    dt = np.dtype(dtype)
    width = dt.itemsize
    out = np.empty(len(at), dtype=dt)
    if len(at):
        align = at % width
        first = int(align[0])
        uniform = bool(np.all(align == first))
        for r in [first] if uniform else range(width):
            view = np.frombuffer(buf, dtype=dt, offset=r, count=(len(buf) - r) // width)
            if uniform:
                out[:] = view[(at - r) // width]
            elif (m := align == r).any():
                out[m] = view[(at[m] - r) // width]
    return out.astype(np.float64) if dt.kind == "f" else out


def _period(lengths: list[int]) -> int | None:
    """The smallest period of the last lengths walked (checked over two periods at least)."""
    n = len(lengths)
    for p in range(1, min(_MAX_PERIOD, n // 2) + 1):
        if lengths[n - 2 * p:n - p] == lengths[n - p:]:
            return p
    return None


def _walk(data: bytes, buf: np.ndarray, stop: int) -> tuple[np.ndarray, int]:
    """Record starts in ``data[:stop]`` from 0, and where the walk ended (the start of the first
    record that does not end by ``stop``, or ``stop``)."""
    unpack = struct.Struct("<Q").unpack_from
    parts: list[np.ndarray] = []
    o = 0
    ahead = 256
    while True:
        starts: list[int] = []
        lengths: list[int] = []
        while len(starts) < _WALK and o + 12 <= stop:
            length = unpack(data, o)[0]
            if o + 16 + length > stop:
                break
            starts.append(o)
            lengths.append(length)
            o += 16 + length
        parts.append(np.asarray(starts, dtype=np.int64))
        if len(starts) < _WALK:
            break
        period = _period(lengths)
        if period is None:
            continue
        # guess the next records from the period, check each guess's length field, keep the prefix
        # of guesses that hold (each one proves where the next starts)
        steps = np.asarray(lengths[-period:], dtype=np.int64) + 16
        reps = -(-ahead // period)
        guess = o + np.concatenate([[0], np.cumsum(np.tile(steps, reps))])
        predicted = np.tile(steps, reps + 1)[: len(guess)]
        fits = guess + predicted <= stop
        guess, predicted = guess[fits], predicted[fits]
        if len(guess) == 0:
            continue
        actual = read_at(buf, guess, "<u8").astype(np.int64) + 16
        bad = np.flatnonzero(actual != predicted)
        good = int(bad[0]) if len(bad) else len(guess)
        if good:
            parts.append(guess[:good])
            o = int(guess[good - 1] + predicted[good - 1])
        ahead = min(ahead * 4, 1 << 20) if good == len(guess) else 256
    return np.concatenate(parts), o


def _check(src: SourceFile, buf: np.ndarray, base: int, starts: np.ndarray) -> np.ndarray:
    """Both checksums of every record starting at ``starts``; returns the data lengths."""
    lengths = read_at(buf, starts, "<u8").astype(np.int64)
    stored_length_crc = read_at(buf, starts + 8, "<u4")
    first_bad = None
    uniq, inverse = np.unique(lengths, return_inverse=True)
    expected = np.asarray([masked(crc32c(struct.pack("<Q", int(n)))) for n in uniq], dtype=np.uint32)
    bad = np.flatnonzero(expected[inverse] != stored_length_crc)
    if len(bad):
        first_bad = (int(starts[bad[0]]), "length")
    stored = read_at(buf, starts + 12 + lengths, "<u4")
    for k, length in enumerate(uniq.tolist()):
        members = np.flatnonzero(inverse == k)
        data_starts = starts[members] + 12
        if length > 1024:
            crcs = np.asarray([crc32c_long(buf[s:s + length]) for s in data_starts.tolist()], dtype=np.uint32)
        elif len(members) < 8:
            crcs = np.asarray([crc32c(buf[s:s + length].tobytes()) for s in data_starts.tolist()], dtype=np.uint32)
        else:
            crcs = crc32c_equal_length(buf, data_starts, length)
        wrong = np.flatnonzero(masked(crcs) != stored[members])
        if len(wrong):
            at = int(starts[members[wrong[0]]])
            if first_bad is None or at < first_bad[0]:
                first_bad = (at, "data")
    if first_bad is not None:
        raise CorruptRecord(base + first_bad[0], first_bad[1])
    return lengths


class CorruptRecord(Exception):
    """A record whose length or data checksum does not match (``offset``: its first byte)."""

    def __init__(self, offset: int, what: str):
        super().__init__(offset, what)
        self.offset, self.what = offset, what


def _cut_at(src: SourceFile, bad: CorruptRecord, read: int, h) -> None:
    """A corrupt record after ``read`` good records' bytes (hashed into ``h``): the file is read up to
    it (as TensorBoard's own loader stops at its first bad record) and the rest named in a warning; a
    file corrupt from its first record is refused, nothing stored."""
    if bad.offset == 0 or read == 0:
        raise InputError(f"{src.path}: record at offset {bad.offset}: corrupt ({bad.what} checksum mismatch); "
                         "nothing stored")
    src.warnings.append(f"record at offset {bad.offset}: corrupt ({bad.what} checksum mismatch): bytes "
                        f"{bad.offset}-{src.size} not read; the records before it are kept")
    src.parsed_end = read
    src.set_sha256(h.hexdigest(), read)


def _header_ok(src: SourceFile, rest: bytes, offset: int, h) -> bool:
    """``_check_header``; a corrupt header ends the read there (``_cut_at``): False."""
    try:
        _check_header(src, rest, offset)
    except CorruptRecord as bad:
        _cut_at(src, bad, offset, h)
        return False
    return True


def record_windows(src: SourceFile):
    """(window bytes as uint8, window's file offset, data starts, data lengths) per window of whole,
    checked records; sets the sha256 and ``parsed_end`` to the end of the last whole record."""
    h = hashlib.sha256()
    offset = 0
    carry = b""
    with _RangeReader(src, 0, src.size) as raw:
        while True:
            data = carry + (raw.read(max(WINDOW - len(carry), 0)) or b"")
            if len(data) >= 12:  # a record longer than the window: read it whole
                need = 16 + _HEAD.unpack_from(data, 0)[0]
                if len(data) < need <= src.size - offset:
                    data += raw.read(need - len(data))
            buf = np.frombuffer(data, dtype=np.uint8)
            starts, end = _walk(data, buf, len(data))
            if len(starts):
                try:
                    lengths = _check(src, buf, offset, starts)
                except CorruptRecord as bad:
                    keep = starts < bad.offset - offset
                    if keep.any():
                        h.update(memoryview(data)[:bad.offset - offset])
                        yield buf, offset, starts[keep] + 12, _check(src, buf, offset, starts[keep])
                    _cut_at(src, bad, bad.offset, h)
                    return
                h.update(memoryview(data)[:end])
                yield buf, offset, starts + 12, lengths
            carry = data[end:]
            offset += end
            if offset + len(carry) >= src.size:
                break
            if len(carry) >= 12:
                if not _header_ok(src, carry, offset, h):
                    return
                if 16 + _HEAD.unpack_from(carry, 0)[0] > src.size - offset:  # it cannot end in this file
                    break
    if carry:
        if not _header_ok(src, carry, offset, h):
            return
        src.warnings.append(f"offset {offset}: the last record is cut (bytes {offset}-{src.size} of a file "
                            "still being written, or cut by a crash): skipped")
    src.parsed_end = offset
    src.set_sha256(h.hexdigest(), offset)


def _check_header(src: SourceFile, rest: bytes, offset: int) -> None:
    """The length checksum of the record at ``offset`` (its first bytes ``rest``), if all 12 are there."""
    if len(rest) >= 12:
        length_crc = _HEAD.unpack_from(rest, 0)[1]
        if masked(crc32c(rest[:8])) != length_crc:
            raise CorruptRecord(offset, "length")
