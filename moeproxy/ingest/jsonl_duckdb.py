"""verl file-logger JSONL parsed by DuckDB's JSON reader: the fast path of ``verl-jsonl``.

One streaming query reads ``{"step": N, "data": {...}}`` lines with ``read_json`` into, per line,
the step, the JSON text of the key list, and the list of values (``data`` read as
``MAP(VARCHAR, DOUBLE)``: JSON null is NULL, stored as NaN; numbers are parsed by DuckDB, which
reads them whole and correctly rounded, ``1e400`` as inf as ``float()`` does). Lines come back in
file order; each distinct key list is decoded once, so no metric name crosses into Python per
value. The sha256 (and the check for NUL bytes) runs over the same bytes in a thread meanwhile.

DuckDB and the careful path (``jsonl.parse_verl_jsonl_line_by_line``) differ at the edges, so this
path only claims files it reads exactly as the careful path would, and returns None for everything
else, which the careful path then reads or rejects with its own line-numbered message: a line
DuckDB cannot read (not JSON, not an object, a value that is text DuckDB cannot cast, a list or an
object, a key given twice, invalid UTF-8, a line over 16 MiB), what DuckDB reads but Python's json
refuses (a trailing comma, ``inf``/``nan`` literals: ``strict_json``), a step that is not an
integer of 64 bits or a record without ``data``, a NUL byte, a file that does not end with a
newline (its last line may be cut), and a file that changed while it was read (DuckDB reads the
path, so the file's size, inode and modification time are compared before and after).
"""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from moeproxy.ingest.source import SourceFile

# smaller files are read by the careful path: starting DuckDB costs more than it saves there
MIN_BYTES = 4 << 20
MAX_LINE = 16 << 20

QUERY = """
SELECT json_type(step) IN ('UBIGINT', 'BIGINT') AND TRY_CAST(step AS BIGINT) IS NOT NULL AND data IS NOT NULL AS ok,
       TRY_CAST(step AS BIGINT) AS step,
       CAST(map_keys(data) AS JSON)::VARCHAR AS keys,
       map_values(data) AS v
FROM read_json($path, columns = {'step': 'JSON', 'data': 'MAP(VARCHAR, DOUBLE)'},
               format = 'newline_delimited', maximum_object_size = $max_line)
"""


def _identity(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _Hasher(threading.Thread):
    """The sha256 of the file's bytes [0, size) and whether they hold a NUL byte, in a thread
    (hashlib releases the GIL while it hashes); ``nul``, a head that is not the one seen at open
    (rewritten) or a file that ends early (shrunk) leave the file to the careful path, which names
    the problem."""

    def __init__(self, src: SourceFile) -> None:
        super().__init__(daemon=True)
        self.src = src
        self.digest: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            h = hashlib.sha256()
            left = self.src.size
            carry, lo = b"", 0  # the bytes kept for the next chunk; where its unchecked positions start
            with self.src.open_checked() as fh:
                first = True
                while left > 0:
                    chunk = fh.read(min(CHUNK, left))
                    if not chunk or b"\x00" in chunk or (first and not chunk.startswith(self.src.head[:len(chunk)])):
                        return
                    first = False
                    h.update(chunk)
                    left -= len(chunk)
                    data = carry + chunk
                    hi = len(data) if left <= 0 else max(len(data) - OVERLAP, lo)
                    if not strict_json(data, lo, hi):
                        return
                    keep = max(hi - OVERLAP, 0)  # OVERLAP bytes before the first unchecked position
                    carry, lo = data[keep:], hi - keep
            self.digest = h.hexdigest()
        except BaseException as exc:  # noqa: BLE001  (reported in the caller's thread)
            self.error = exc


# DuckDB's JSON reader accepts what Python's does not: trailing commas (``{"a": 1,}``) and the
# literals inf / nan in any case. Without lists (a ``[`` anywhere: the careful path), a value
# follows a ``:`` and starts with one of these bytes (``n`` begins ``null``, ``-`` a number), and a
# ``}`` follows no ``,``. A key holding such bytes sends its file to the careful path too.
_VALUE_START = np.zeros(256, dtype=bool)
_VALUE_START[np.frombuffer(b'0123456789-"ntf{', np.uint8)] = True
_SPACE = np.zeros(256, dtype=bool)
_SPACE[np.frombuffer(b" \t\r\n", np.uint8)] = True
OVERLAP = 64  # bytes read around a checked position, kept from one chunk for the next
CHUNK = 8 << 20


def strict_json(data: bytes, lo: int = 0, hi: int | None = None) -> bool:
    """Whether JSON text has no list, no trailing comma before a ``}`` and no literal other than
    null, true, false as a member's value: the ``:`` and ``}`` at positions [lo, hi) are checked,
    the bytes around them read as far as ``data`` goes (a run of spaces longer than ``OVERLAP``
    counts as a violation)."""
    if b"[" in data:
        return False
    b = np.frombuffer(data, dtype=np.uint8)
    hi = len(b) if hi is None else hi

    def skip_space(at: np.ndarray, step: int) -> np.ndarray | None:
        """The first non-space byte from each ``at + step`` on (None: past the data)."""
        at = at + step
        todo = np.arange(len(at))
        for _ in range(OVERLAP):
            pos = at[todo]
            if len(pos) and (pos.min() < 0 or pos.max() >= len(b)):
                return None
            todo = todo[_SPACE[b[pos]]]
            if not len(todo):
                return at
            at[todo] += step
        return None

    value = skip_space(lo + np.flatnonzero(b[lo:hi] == 58), 1)  # the byte that starts each member's value
    if value is None or not _VALUE_START[b[value]].all():
        return False
    for lead, ok in ((110, lambda x: x == 117), (45, lambda x: (x >= 48) & (x <= 57))):  # n -> u; - -> digit
        after = value[b[value] == lead] + 1
        if (after >= len(b)).any() or not ok(b[after]).all():
            return False
    before = skip_space(lo + np.flatnonzero(b[lo:hi] == 125), -1)  # the byte before each }
    return before is not None and not (b[before] == 44).any()


def read_verl_jsonl(src: SourceFile):
    """(steps, counts, codes, names, values) of a verl JSONL file, or None for the careful path."""
    if src.encoding != "utf-8" or src.size < MIN_BYTES or not src.ends_with_newline:
        return None
    before = _identity(src.path)
    if before is None or before[2] != src.size or (before[0], before[1]) != src.identity:
        return None
    from moeproxy.ingest.preload import import_in_background

    import_in_background()  # pandas and the store load while DuckDB reads
    hasher = _Hasher(src)
    hasher.start()
    try:
        columns = _query(src)
    finally:
        hasher.join()
    if hasher.error is not None:
        raise hasher.error
    if columns is None or hasher.digest is None or _identity(src.path) != before:
        return None
    src.parsed_end = src.size
    src.set_sha256(hasher.digest, src.size)
    return columns


def _query(src: SourceFile):
    import duckdb
    import orjson
    import pyarrow as pa

    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        reader = con.sql(QUERY, params={"path": str(src.path), "max_line": MAX_LINE}).to_arrow_reader(1 << 16)
        steps, counts, values, layout_of = [], [], [], []
        layouts: dict[str, int] = {}
        for batch in reader:
            ok = batch.column(0).to_numpy(zero_copy_only=False)
            if not ok.all():
                return None
            steps.append(batch.column(1).to_numpy())
            lists = batch.column(3)
            offsets = lists.offsets.to_numpy()
            counts.append(np.diff(offsets))
            values.append(lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
                          .to_numpy(zero_copy_only=False))
            layout_of.append(np.fromiter((layouts.setdefault(k, len(layouts)) for k in batch.column(2).to_pylist()),
                                         dtype=np.int64, count=batch.num_rows))
    except (duckdb.Error, pa.ArrowException, OSError):  # a reading error comes through Arrow's reader as OSError
        return None
    finally:
        con.close()
    if not steps:
        return None
    names: list[str] = []
    index: dict[str, int] = {}
    layout_codes = []
    for keys in layouts:
        layout_codes.append(np.asarray([index.setdefault(k, len(index)) for k in orjson.loads(keys)], dtype=np.int32))
    names = list(index)
    layout_of = np.concatenate(layout_of)
    counts = np.concatenate(counts).astype(np.int64)
    if len(layout_codes) == 1:
        codes = np.tile(layout_codes[0], len(layout_of))
    else:
        codes = np.concatenate([layout_codes[k] for k in layout_of.tolist()]) if len(layout_of) else np.empty(0, np.int32)
    values = np.concatenate(values).astype(np.float64, copy=False)
    steps = np.concatenate(steps).astype(np.int64)
    if not counts.all():  # ``"data": {}`` is no record (as LogTable.add skips it)
        steps, counts = steps[counts > 0], counts[counts > 0]
    return steps, counts, codes, names, values
