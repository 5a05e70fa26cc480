"""CRC-32C (Castagnoli), as TFRecord framing uses it, computed for many records at once with numpy.

A record's CRC is affine in its bytes: ``crc(x) = crc(ref) ^ lin(x ^ ref)`` for any record ``ref``
of the same length, where ``lin`` is the CRC without its initial and final inversion, and ``lin``
of a message is the XOR of one table entry per byte position (``position_tables``). Records of one
length are checked together, one byte column at a time: a column that equals the reference's byte
in every record (a tag name, the field headers) costs one comparison and adds nothing. Scalar event
files hold a handful of record lengths, so the whole file is a few dozen vector operations per
length. Long records (graphs, histograms) are checked one by one in 64-byte rows (``crc32c_long``).

``masked`` is TFRecord's masking of a stored CRC.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _byte_table() -> np.ndarray:
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(POLY), crc >> 1).astype(np.uint32)
    return crc


TABLE = _byte_table()
_TABLE_LIST = TABLE.tolist()


def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C of ``data`` (byte by byte; for short messages and tests)."""
    crc ^= 0xFFFFFFFF
    table = _TABLE_LIST
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    """TFRecord's masked CRC (works on ints and uint32 arrays)."""
    if isinstance(crc, np.ndarray):
        crc = crc.astype(np.uint32)
        return (((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)).astype(np.uint32)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _feed_zero(c: np.ndarray) -> np.ndarray:
    """The linear CRC state after one more zero byte."""
    return TABLE[c & 0xFF] ^ (c >> np.uint32(8))


@lru_cache(maxsize=256)
def position_tables(length: int) -> np.ndarray:
    """(length, 256) uint32: row i, entry b = lin of a ``length``-byte message that is b at
    position i and zero elsewhere."""
    out = np.empty((length, 256), dtype=np.uint32)
    row = TABLE.copy()
    for i in range(length - 1, -1, -1):
        out[i] = row
        row = _feed_zero(row)
    return out


def crc32c_equal_length(buf: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """The CRC-32C of each ``buf[s:s+length]`` (uint8 ``buf``), for many starts at once."""
    n = len(starts)
    if n == 0:
        return np.empty(0, dtype=np.uint32)
    ref_start = int(starts[0])
    ref = buf[ref_start:ref_start + length]
    ref_crc = crc32c(ref.tobytes()) if length <= 4096 else crc32c_long(ref)
    acc = np.zeros(n, dtype=np.uint32)
    if length == 0:
        return acc
    tables = position_tables(length) if length <= 1024 else None
    index = starts.astype(np.int64, copy=True)
    for i in range(length):
        column = buf[index]
        diff = column ^ ref[i]
        if diff.any():
            table = tables[i] if tables is not None else _position_row(length, i)
            acc ^= table[diff]
        index += 1
    return acc ^ np.uint32(ref_crc)


def _position_row(length: int, i: int) -> np.ndarray:
    """Row i of ``position_tables(length)`` without the whole table (long lengths)."""
    row = TABLE.copy()
    for _ in range(length - 1 - i):
        row = _feed_zero(row)
    return row


_ROW = 64


@lru_cache(maxsize=1)
def _shift_tables() -> np.ndarray:
    """(4, 256): the linear map 'feed 64 zero bytes' on a 32-bit state, one table per state byte."""
    out = np.empty((4, 256), dtype=np.uint32)
    for k in range(4):
        state = np.arange(256, dtype=np.uint32) << np.uint32(8 * k)
        for _ in range(_ROW):
            state = _feed_zero(state)
        out[k] = state
    return out


def crc32c_long(data: np.ndarray) -> int:
    """The CRC-32C of one long message (uint8 array): its 64-byte rows' linear CRCs at once, then
    folded row by row."""
    data = np.asarray(data, dtype=np.uint8)
    rows = len(data) // _ROW
    if rows < 4:
        return crc32c(data.tobytes())
    body = data[: rows * _ROW].reshape(rows, _ROW)
    tables = position_tables(_ROW)
    lin = np.zeros(rows, dtype=np.uint32)
    for i in range(_ROW):
        lin ^= tables[i][body[:, i]]
    shift = _shift_tables().tolist()
    state = 0
    for value in lin.tolist():  # lin(A || B) = shift_64(lin(A)) ^ lin(B)
        state = (shift[0][state & 0xFF] ^ shift[1][(state >> 8) & 0xFF] ^ shift[2][(state >> 16) & 0xFF]
                 ^ shift[3][state >> 24]) ^ value
    # the initial inversion is the linear CRC of 0xFFFFFFFF fed through the whole body
    init = 0xFFFFFFFF
    for _ in range(rows):
        init = (shift[0][init & 0xFF] ^ shift[1][(init >> 8) & 0xFF] ^ shift[2][(init >> 16) & 0xFF]
                ^ shift[3][init >> 24])
    crc = (state ^ init) ^ 0xFFFFFFFF  # the CRC of the body, as crc32c() would return it
    return crc32c(data[rows * _ROW:].tobytes(), crc)
