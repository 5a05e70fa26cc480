"""verl file-logger JSONL parsed by DuckDB's JSON reader: the fast path of ``verl-jsonl``.

One streaming query reads ``{"step": N, "data": {...}}`` lines with ``read_json`` into, per line,
the step, which of the head's key lists ``data`` has (or, for a list the head does not show, its
JSON text) and the list of its values (``data`` read as JSON,
its values cast to DOUBLE: JSON null is NULL, stored as NaN; true/false are 1.0/0.0 as
``float(bool)``; numbers are parsed by DuckDB, which reads them whole and correctly rounded,
``1e400`` as inf as ``float()`` does). Lines come back in file order; each distinct key list is
decoded once (DuckDB compares each line's keys with the head's lists; texts of other lists are
grouped by Arrow's dictionary encoding, which compares them whole), so no metric name crosses into
Python per value. The sha256, the check for NUL bytes and
the byte counts below run over the same bytes in a thread meanwhile.

DuckDB and the careful path (``jsonl.parse_verl_jsonl_line_by_line``) differ at the edges, so this
path only claims files it reads exactly as the careful path would, and returns None for everything
else, which the careful path then reads or rejects with its own line-numbered message:

* a line DuckDB cannot read (not JSON, a value that is text DuckDB cannot cast, an object as a
  value, invalid UTF-8, a line over 16 MiB); a step that is not an integer of 64 bits, a record
  without ``data`` or whose ``data`` is not an object (the careful path counts it as skipped);
  a key given twice in ``data`` (the careful path keeps the last value at the first place);
* what DuckDB reads but Python's json refuses or reads otherwise, found by counting bytes: a
  line of k data keys that holds only what it needs has exactly 2 (k + 2) ``"``, k + 2 ``:`` and
  max(k - 1, 0) + 1 ``,`` (every such byte outside a string is required by the line's structure,
  so the file's counts reach these sums only when no line holds more). Any string value (DuckDB
  casts ``"1.5"``; the careful path parses text with its own rules), any member besides ``step``
  and ``data``, a trailing comma (``{"a": 1,}``, which DuckDB reads), an escaped quote or a ``:``
  or ``,`` in a key makes the counts differ: the careful path, at worst a false alarm. A ``[``
  anywhere (a list) and a ``\\r`` that does not end a line (DuckDB reads it as a space, the careful
  path as a line break) send the file there too;
* with strings and extra members so excluded, a literal can only be a data value: DuckDB reads
  nan / inf / infinity in any case and with a ``-``, Python only ``NaN``, ``Infinity`` and
  ``-Infinity`` (as nan, inf, -inf). When some value that is not null came back NaN or +-inf, the
  file's value literals are checked to be exactly null, true, false, NaN, Infinity or -Infinity;
* a NUL byte, a file that does not end with a newline (its last line may be cut), and a file that
  changed while it was read (DuckDB reads the path, so the file's size, inode and modification
  time are compared before and after).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import threading

import numpy as np

from moeproxy.columns import numpy_of as _numbers
from moeproxy.ingest.source import SourceFile

# smaller files are read by the careful path: starting DuckDB costs more than it saves there
MIN_BYTES = 4 << 20
MAX_LINE = 16 << 20
CHUNK = 8 << 20
BATCH_ROWS = 2048  # lines per Arrow batch: small, so that DuckDB's results do not pile up
HEAD_LAYOUTS = 32  # key lists taken from the head's lines; a line of another gives its keys as text

QUERY = """
SELECT coalesce(json_type(step) IN ('UBIGINT', 'BIGINT') AND TRY_CAST(step AS BIGINT) IS NOT NULL
                AND starts_with(data::VARCHAR, '{'), false) AS ok,
       TRY_CAST(step AS BIGINT) AS step,
       list_position(CAST($layouts AS VARCHAR[][]), json_keys(data)) AS layout,
       CASE WHEN layout IS NULL THEN to_json(json_keys(data))::VARCHAR END AS keys,
       CAST(json_extract(data, '$.*') AS DOUBLE[]) AS v
FROM read_json($path, columns = {'step': 'JSON', 'data': 'JSON'},
               format = 'newline_delimited', maximum_object_size = $max_line)
"""

# A value literal that Python's json does not read as DuckDB does: after a ``:`` (and JSON
# spaces), a ``-`` not followed by a digit or ``Infinity``, or a byte that starts neither a number,
# an object nor exactly null / true / false / NaN / Infinity.
_END = rb"[ \t\r\n,}]"
_BAD_LITERAL = re.compile(
    rb":[ \t\r\n]*(?:-(?![0-9]|Infinity" + _END + rb")|(?![-0-9{]|(?:null|true|false|NaN|Infinity)" + _END
    + rb")[^ \t\r\n])")


def _identity(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _Hasher(threading.Thread):
    """The sha256 of the file's bytes [0, size) and the counts of ``"``, ``:`` and ``,`` in them,
    in a thread (hashlib and numpy release the GIL while they work); a NUL byte, a ``[``, a ``\\r``
    not followed by ``\\n``, a head that is not the one seen at open (rewritten) or a file that ends
    early (shrunk) leave ``digest`` None: the file goes to the careful path, which names the problem."""

    def __init__(self, src: SourceFile) -> None:
        super().__init__(daemon=True)
        self.src = src
        self.digest: str | None = None
        self.counts = (0, 0, 0)  # '"', ':', ','
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            h = hashlib.sha256()
            left = self.src.size
            quotes = colons = commas = 0
            cr = crlf = 0
            last = b""  # the previous chunk's last byte (a \r\n across chunks)
            same = np.empty(min(CHUNK, max(left, 1)), dtype=bool)
            with self.src.open_checked() as fh:
                first = True
                while left > 0:
                    chunk = fh.read(min(CHUNK, left))
                    if (not chunk or b"\x00" in chunk or b"[" in chunk
                            or (first and not chunk.startswith(self.src.head[:len(chunk)]))):
                        return
                    first = False
                    h.update(chunk)
                    left -= len(chunk)
                    if b"\r" in chunk or last == b"\r":
                        cr += chunk.count(b"\r")
                        crlf += chunk.count(b"\r\n") + (last == b"\r" and chunk[:1] == b"\n")
                    last = chunk[-1:]
                    b = np.frombuffer(chunk, dtype=np.uint8)
                    out = same[:len(b)]
                    quotes += int(np.count_nonzero(np.equal(b, 34, out=out)))
                    colons += int(np.count_nonzero(np.equal(b, 58, out=out)))
                    commas += int(np.count_nonzero(np.equal(b, 44, out=out)))
            if cr != crlf:
                return
            self.counts = (quotes, colons, commas)
            self.digest = h.hexdigest()
        except BaseException as exc:  # noqa: BLE001  (reported in the caller's thread)
            self.error = exc


def read_verl_jsonl(src: SourceFile):
    """(steps, counts, codes, names, values) of a verl JSONL file, or None for the careful path."""
    if src.encoding != "utf-8" or src.size < MIN_BYTES or not src.ends_with_newline:
        return None
    before = _identity(src.path)
    if before is None or before[2] != src.size or (before[0], before[1]) != src.identity:
        return None
    from moeproxy.ingest.preload import import_in_background

    import_in_background()  # what storing needs loads while DuckDB reads
    hasher = _Hasher(src)
    hasher.start()
    try:
        read = _query(src)
    finally:
        hasher.join()
    if hasher.error is not None:
        raise hasher.error
    if read is None or hasher.digest is None:
        return None
    columns, lines, nonfinite = read
    steps, counts, codes, names, values = columns
    # the byte counts a file of ``lines`` records with these key counts has when it holds nothing else
    n_values, nonempty = int(counts.sum()), len(steps)
    if hasher.counts != (2 * (n_values + 2 * lines), n_values + 2 * lines, n_values - nonempty + lines):
        return None
    if nonfinite and not _plain_literals(src):
        return None
    if _identity(src.path) != before:
        return None
    src.parsed_end = src.size
    src.set_sha256(hasher.digest, src.size)
    return columns


def _plain_literals(src: SourceFile) -> bool:
    """Whether every value literal of the file is one Python's json reads as DuckDB does (the bytes
    read again: the file's identity is compared after)."""
    with src.open_checked() as fh:
        try:
            data = mmap.mmap(fh.fileno(), src.size, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # shrunk meanwhile
            return False
        with data:
            return _BAD_LITERAL.search(data) is None


def _head_layouts(src: SourceFile) -> list[list[str]]:
    """The distinct key lists of ``data`` in the head's complete lines (at most ``HEAD_LAYOUTS``):
    DuckDB compares each line's keys with them, so a line of a known list sends no key text back.
    What the head holds does not matter for correctness: an unknown list comes back as text."""
    import orjson

    seen: dict[tuple, None] = {}
    for line in src.sniff_head().split(b"\n")[:-1]:  # whole lines, however wide (per-expert metrics)
        try:
            data = orjson.loads(line).get("data")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(data, dict) and data:
            seen.setdefault(tuple(data), None)
            if len(seen) >= HEAD_LAYOUTS:
                break
    return [list(keys) for keys in seen]


def _positions(array) -> tuple[np.ndarray, bool]:
    """The positions ``list_position`` gave (int64, null as 0) and whether any was null."""
    if not array.null_count:
        return _numbers(array).astype(np.int64), False
    return _numbers(array.fill_null(0)).astype(np.int64), True


def _query(src: SourceFile):
    """((steps, counts, codes, names, values), lines read, whether a value that is not null came
    back NaN or +-inf), or None."""
    import duckdb
    import orjson
    import pyarrow as pa
    import pyarrow.compute as pc

    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        known = _head_layouts(src)
        reader = con.sql(QUERY, params={"path": str(src.path), "max_line": MAX_LINE, "layouts": known}
                         ).to_arrow_reader(BATCH_ROWS)
        steps, counts, values, layout_of = [], [], [], []
        layouts: dict[str, int] = {}  # key lists not in the head: their JSON text -> id (after the known ones)
        nonfinite = False
        for batch in reader:
            if not batch.num_rows:
                continue
            ok = batch.column(0)
            if ok.false_count or ok.null_count:
                return None
            steps.append(_numbers(batch.column(1)))
            lists = batch.column(4)
            offsets = _numbers(lists.offsets)
            counts.append(np.diff(offsets))
            flat = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
            v = _numbers(flat)  # nulls as NaN
            values.append(v)
            if not nonfinite and len(v) - int(np.count_nonzero(np.isfinite(v))) > flat.null_count:
                nonfinite = True
            ids, unknown = _positions(batch.column(2))  # 1-based positions in ``known``; 0: not there
            if unknown:
                keys = pc.dictionary_encode(batch.column(3))
                remap = np.fromiter((len(known) + 1 + layouts.setdefault(k, len(layouts))
                                     for k in keys.dictionary.to_pylist()), dtype=np.int64, count=len(keys.dictionary))
                indices = _numbers(keys.indices.fill_null(0))
                ids = np.where(ids == 0, remap[indices] if len(remap) else 0, ids)
            layout_of.append(ids - 1)
    # a reading error comes through Arrow's reader as OSError; DuckDB's message, when it cuts a line's
    # text inside a UTF-8 sequence, as UnicodeDecodeError
    except (duckdb.Error, pa.ArrowException, OSError, UnicodeDecodeError):
        return None
    finally:
        con.close()
    if not steps:
        return None
    index: dict[str, int] = {}
    layout_codes = []
    for keys in known + list(layouts):
        if isinstance(keys, str):
            try:
                keys = orjson.loads(keys)
            except orjson.JSONDecodeError:
                return None
        if len(set(keys)) != len(keys):  # a key given twice: the careful path keeps one
            return None
        layout_codes.append(np.asarray([index.setdefault(k, len(index)) for k in keys], dtype=np.int32))
    names = list(index)
    layout_of = np.concatenate(layout_of)
    counts = np.concatenate(counts).astype(np.int64)
    lines = len(counts)
    if len(layout_codes) == 1:
        codes = np.tile(layout_codes[0], lines)
    else:
        codes = np.concatenate([layout_codes[k] for k in layout_of.tolist()])
    values = np.concatenate(values).astype(np.float64, copy=False)
    steps = np.concatenate(steps).astype(np.int64)
    if not counts.all():  # ``"data": {}`` is no record (as LogTable.add skips it)
        steps, counts = steps[counts > 0], counts[counts > 0]
    return (steps, counts, codes, names, values), lines, nonfinite
