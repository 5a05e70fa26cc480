"""TensorBoard ``Event`` protobufs decoded for many records at once, with numpy over their bytes.

The wire format is walked field by field for every record of a window together (one vector
operation per field position, not per event): ``Event`` (wall_time 1, step 2, summary 5),
``Summary`` (value 1, repeated), ``Summary.Value`` (tag 1, simple_value 2, tensor 8; images,
histograms and audio are counted as skipped) and a scalar ``TensorProto`` (dtype 1 = float or
2 = double, an empty shape, one value in float_val 5 / double_val 6, packed or not, or in
tensor_content 4). That covers every writer's scalar layout: ``simple_value`` (tensorboardX, TF1,
torch's default, Megatron) and 0-d tensors (TF2, torch ``new_style``, float or double).

What the walk does not settle exactly (another dtype, a shape, a field given twice, a multi-byte
tag, bytes that do not parse) goes to the careful path: that record, or that value, is decoded by
the ``protobuf`` library and read as TensorBoard itself reads it, so an odd record costs time,
never a wrong value; a record protobuf cannot parse is an error naming its offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeproxy.errors import InputError
from moeproxy.ingest.formats.tensorboard.tfrecord import read_at


@dataclass
class EventColumns:
    """The scalars of one window: per record (step, wall time), per value (record, tag code, value)."""

    steps: np.ndarray  # int64, per record
    walls: np.ndarray  # float64, per record
    item_record: np.ndarray  # int64, per scalar value: index of its record (ascending)
    item_tag: np.ndarray  # int32 codes into ``tags``
    item_value: np.ndarray  # float64
    tags: list[str]
    skipped: int  # summary values that are not scalars (images, histograms, text ...)


def _varint(buf: np.ndarray, at: np.ndarray, end: np.ndarray):
    """(value uint64, position after, ok) of the varint at each position (one-byte varints, the
    usual case, in a few whole-array operations)."""
    b = buf[at]
    value = (b & 0x7F).astype(np.uint64)
    pos = at + 1
    ok = at < end
    more = np.flatnonzero(b >= 0x80)
    if not len(more):
        return value, pos, ok
    ok[more] = False
    live = more
    for k in range(1, 10):
        inside = pos[live] < end[live]
        live = live[inside]
        if not len(live):
            break
        b = buf[pos[live]]
        value[live] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        pos[live] += 1
        done = b < 0x80
        ok[live[done]] = True
        live = live[~done]
    return value, pos, ok


def _fields(buf: np.ndarray, pos: np.ndarray, end: np.ndarray):
    """One field of each message at ``pos``: (field number, wire type, value position, position
    after the field, length-delimited length or varint value, ok). Not ok: a multi-byte tag, a
    group or unknown wire type, or a field running past ``end``. When every message is at the same
    field (a regular layout), field and wire type come back as scalars and the work is a few
    whole-array operations."""
    tag = buf[pos]
    t0 = int(tag[0])
    if t0 < 0x80 and (t0 & 7) in (0, 1, 2, 5) and bool(np.all(tag == tag[0])):
        field, wire = np.int64(t0 >> 3), t0 & 7
        start = pos + 1
        if wire == 1 or wire == 5:
            after = start + (8 if wire == 1 else 4)
            return field, np.int64(wire), start, after, np.zeros(len(pos), np.uint64), after <= end
        number, vend, ok = _varint(buf, start, end)
        if wire == 0:
            return field, np.int64(wire), start, vend, number, ok & (vend <= end)
        ok &= number <= np.uint64(1 << 40)
        after = vend + np.where(ok, number, 0).astype(np.int64)
        return field, np.int64(wire), vend, after, number, ok & (after <= end)
    tag = tag.astype(np.int64)
    field = tag >> 3
    wire = tag & 7
    ok = tag < 0x80
    start = pos + 1
    after = start.copy()
    number = np.zeros(len(pos), dtype=np.uint64)
    is_var = (wire == 0) | (wire == 2)
    if is_var.any():
        w = np.flatnonzero(is_var & ok)
        value, vend, vok = _varint(buf, start[w], end[w])
        number[w] = value
        ok[w] &= vok
        after[w] = vend
        start[w] = np.where(wire[w] == 2, vend, start[w])
        long = w[wire[w] == 2]
        size = number[long]
        too_long = size > np.uint64(1 << 40)
        ok[long[too_long]] = False
        after[long] = vend[wire[w] == 2] + np.where(too_long, 0, size).astype(np.int64)
    after = np.where(wire == 1, start + 8, after)
    after = np.where(wire == 5, start + 4, after)
    ok &= (wire == 0) | (wire == 1) | (wire == 2) | (wire == 5)
    ok &= after <= end
    return field, wire, start, after, number, ok


def decode_window(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray,
                  path) -> EventColumns:
    """The scalars of the records ``buf[starts : starts + lengths]`` (``offsets``: their file
    offsets, for errors)."""
    n = len(starts)
    steps = np.zeros(n, dtype=np.int64)
    walls = np.zeros(n)  # proto3: a field left out is its default, 0
    careful = np.zeros(n, dtype=bool)
    sum_start = np.full(n, -1, dtype=np.int64)
    sum_end = np.zeros(n, dtype=np.int64)
    pos = starts.astype(np.int64)
    end = pos + lengths
    live = np.flatnonzero(pos < end)
    while len(live):
        field, wire, start, after, number, ok = _fields(buf, pos[live], end[live])
        bad = ~ok | ((field == 1) & (wire != 1)) | ((field == 2) & (wire != 0)) | ((field == 5) & (wire != 2))
        summary = ok & (field == 5) & (wire == 2)
        bad |= summary & (sum_start[live] >= 0)  # two summaries: protobuf merges them
        careful[live[bad]] = True
        good = ~bad
        w = good & (field == 1)
        walls[live[w]] = read_at(buf, start[w], "<f8")
        w = good & (field == 2)
        steps[live[w]] = number[w].view(np.int64)
        w = good & summary
        sum_start[live[w]] = start[w]
        sum_end[live[w]] = after[w]
        pos[live] = after
        live = live[good & (after < end[live])]

    # Summary: repeated Value (field 1)
    rec = np.flatnonzero((sum_start >= 0) & ~careful)
    item_rec, item_start, item_end = [], [], []
    p, e = sum_start[rec], sum_end[rec]
    live = np.flatnonzero(p < e)
    while len(live):
        field, wire, start, after, _, ok = _fields(buf, p[live], e[live])
        bad = ~ok | (field != 1) | (wire != 2)
        careful[rec[live[bad]]] = True
        good = ~bad
        item_rec.append(rec[live[good]])
        item_start.append(start[good])
        item_end.append(after[good])
        p[live] = after
        live = live[good & (after < e[live])]
    if item_rec:
        item_rec, item_start, item_end = (np.concatenate(a) if len(a) > 1 else a[0]
                                          for a in (item_rec, item_start, item_end))
        if len(item_rec) > 1 and not bool(np.all(item_rec[1:] >= item_rec[:-1])):
            order = np.argsort(item_rec, kind="stable")  # records in order, values in their order
            item_rec, item_start, item_end = item_rec[order], item_start[order], item_end[order]
        keep = ~careful[item_rec]
        if not keep.all():
            item_rec, item_start, item_end = item_rec[keep], item_start[keep], item_end[keep]
    else:
        item_rec = item_start = item_end = np.empty(0, dtype=np.int64)

    values, tag_start, tag_len, kind = _values(buf, item_start, item_end)
    # kind: 0 scalar, 1 not a scalar (skipped), 2 careful
    fast = kind == 0
    tags, codes = _factorize_tags(buf, tag_start[fast], tag_len[fast])
    columns = _Assembler(buf, path, offsets)
    columns.add(item_rec[fast], np.flatnonzero(fast), codes, values[fast], tags)
    skipped = int((kind == 1).sum())
    for i in np.flatnonzero(kind == 2).tolist():
        skipped += columns.add_careful_value(int(item_rec[i]), i, buf[item_start[i]:item_end[i]].tobytes())
    for r in np.flatnonzero(careful).tolist():
        record = buf[starts[r]:starts[r] + lengths[r]].tobytes()
        step, wall, skip = columns.add_careful_event(r, record)
        steps[r], walls[r] = step, wall
        skipped += skip
    record, tag, value, names = columns.result()
    return EventColumns(steps, walls, record, tag, value, names, skipped)


def _values(buf: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Per Summary.Value: (value, tag start, tag length, kind 0 scalar / 1 other / 2 careful)."""
    m = len(start)
    value = np.full(m, np.nan)
    tag_start = np.zeros(m, dtype=np.int64)
    tag_len = np.full(m, -1, dtype=np.int64)
    kind = np.full(m, 1, dtype=np.int8)  # no value field at all: not a scalar
    has_value = np.zeros(m, dtype=bool)
    tensor_start = np.full(m, -1, dtype=np.int64)
    tensor_end = np.zeros(m, dtype=np.int64)
    careful = np.zeros(m, dtype=bool)
    p = start.copy()
    live = np.flatnonzero(p < end)
    while len(live):
        field, wire, fstart, after, number, ok = _fields(buf, p[live], end[live])
        is_value = (field >= 2) & (field <= 6) | (field == 8)
        bad = ~ok | ((field == 1) & ((wire != 2) | (tag_len[live] >= 0))) | (is_value & has_value[live])
        bad |= ((field == 2) & (wire != 5)) | ((field == 8) & (wire != 2))
        careful[live[bad]] = True
        good = ~bad
        w = good & (field == 1)
        tag_start[live[w]] = fstart[w]
        tag_len[live[w]] = (after - fstart)[w]
        w = good & (field == 2)
        value[live[w]] = read_at(buf, fstart[w], "<f4")
        kind[live[w]] = 0
        w = good & (field == 8)
        tensor_start[live[w]], tensor_end[live[w]] = fstart[w], after[w]
        has_value[live[good & is_value]] = True
        p[live] = after
        live = live[good & (after < end[live])]
    t = np.flatnonzero((tensor_start >= 0) & ~careful)
    if len(t):
        tv, tok = _tensor_scalars(buf, tensor_start[t], tensor_end[t])
        value[t] = tv
        kind[t] = np.where(tok, 0, 2)
    kind[careful] = 2
    kind[(kind == 0) & (tag_len < 0)] = 2  # a value without a tag: as protobuf reads it
    return value, tag_start, tag_len, kind


def _tensor_scalars(buf: np.ndarray, start: np.ndarray, end: np.ndarray):
    """(value, ok) of 0-d float / double TensorProtos; not ok: anything else (the careful path)."""
    m = len(start)
    dtype = np.zeros(m, dtype=np.int64)
    value = np.full(m, np.nan)
    count = np.zeros(m, dtype=np.int64)
    width = np.zeros(m, dtype=np.int64)  # 4 or 8: the width of the value read
    ok = np.ones(m, dtype=bool)
    p = start.copy()
    live = np.flatnonzero(p < end)
    while len(live):
        field, wire, fstart, after, number, fok = _fields(buf, p[live], end[live])
        size = after - fstart
        known = fok & (
            ((field == 1) & (wire == 0)) | ((field == 2) & (wire == 2) & (size == 0)) | ((field == 3) & (wire == 0))
            | ((field == 4) & (wire == 2) & ((size == 4) | (size == 8)))
            | ((field == 5) & (((wire == 2) & (size == 4)) | (wire == 5)))
            | ((field == 6) & (((wire == 2) & (size == 8)) | (wire == 1))))
        ok[live[~known]] = False
        w = known & (field == 1)
        dtype[live[w]] = number[w].astype(np.int64)
        w = known & ((field == 4) | (field == 5) | (field == 6))
        widths = np.where(field == 4, size, np.where(field == 5, 4, 8))
        for width_k in (4, 8):
            sel = w & (widths == width_k)
            value[live[sel]] = read_at(buf, fstart[sel], "<f4" if width_k == 4 else "<f8")
            width[live[sel]] = width_k
        count[live[w]] += 1
        p[live] = after
        live = live[known & (after < end[live])]
    ok &= count == 1
    ok &= ((dtype == 1) & (width == 4)) | ((dtype == 2) & (width == 8))
    return value, ok


def _factorize_tags(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """Distinct tag byte strings and each value's code, exactly (byte by byte, no hashing)."""
    if not len(start):
        return [], np.empty(0, dtype=np.int32)
    code = np.unique(length, return_inverse=True)[1].astype(np.int64)
    longest = int(length.max())
    for k in range(longest):
        inside = length > k
        byte = np.zeros(len(start), dtype=np.int64)
        byte[inside] = buf[start[inside] + k]
        key = code * 256 + byte
        space = int(key.max()) + 1
        if space <= 1 << 24:
            present = np.zeros(space, dtype=bool)
            present[key] = True
            code = (np.cumsum(present) - 1)[key]
        else:
            code = np.unique(key, return_inverse=True)[1].astype(np.int64)
    uniq, first = np.unique(code, return_index=True)
    tags = [buf[start[i]:start[i] + length[i]].tobytes() for i in first.tolist()]
    remap = np.zeros(int(uniq.max()) + 1, dtype=np.int32)
    remap[uniq] = np.arange(len(uniq), dtype=np.int32)
    return tags, remap[code]


class _Assembler:
    """Fast-path values and careful-path values of one window, merged in record order."""

    def __init__(self, buf, path, offsets) -> None:
        self.path, self.offsets = path, offsets
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (record, order, code, value)
        self.extra: list[tuple[int, int, int, float]] = []

    def _code(self, name: str) -> int:
        code = self.index.get(name)
        if code is None:
            code = self.index[name] = len(self.names)
            self.names.append(name)
        return code

    def add(self, record: np.ndarray, order: np.ndarray, codes: np.ndarray, values: np.ndarray,
            tags: list[bytes]) -> None:
        remap = np.empty(len(tags), dtype=np.int32)
        for i, raw in enumerate(tags):
            try:
                remap[i] = self._code(raw.decode("utf-8"))
            except UnicodeDecodeError:
                r = int(record[np.flatnonzero(codes == i)[0]])
                raise InputError(f"{self.path}: record at offset {int(self.offsets[r])}: not a TensorBoard event "
                                 "(a tag is not valid UTF-8)") from None
        self.parts.append((record, order, remap[codes] if len(codes) else codes, values))

    def _fail(self, record: int, exc: Exception):
        return InputError(f"{self.path}: record at offset {int(self.offsets[record])}: not a TensorBoard event "
                          f"({exc})")

    def add_careful_value(self, record: int, order: int, raw: bytes) -> int:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import summary_pb2

        try:
            value = summary_pb2.Summary.Value.FromString(raw)
        except DecodeError as exc:
            raise self._fail(record, exc) from None
        return self._careful_values(record, [value], order)

    def add_careful_event(self, record: int, raw: bytes) -> tuple[int, float, int]:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import event_pb2

        try:
            event = event_pb2.Event.FromString(raw)
        except DecodeError as exc:
            raise self._fail(record, exc) from None
        skipped = self._careful_values(record, event.summary.value) if event.HasField("summary") else 0
        return event.step, event.wall_time, skipped

    def _careful_values(self, record: int, values, order: int = 0) -> int:
        skipped = 0
        for value in values:
            try:
                scalar = scalar_of(value)
            except Exception as exc:  # a tensor proto that does not decode: name where
                raise InputError(f"{self.path}: record at offset {int(self.offsets[record])}: unreadable value of "
                                 f"{value.tag!r} ({type(exc).__name__})") from None
            if scalar is None:
                skipped += 1
            else:
                self.extra.append((record, order, self._code(value.tag), scalar))
                order += 1
        return skipped

    def result(self):
        parts = list(self.parts)
        if self.extra:
            rec, order, code, value = zip(*self.extra)
            # a careful value inside a fast record keeps its place among the record's values
            parts.append((np.asarray(rec, dtype=np.int64), np.asarray(order, dtype=np.int64),
                          np.asarray(code, dtype=np.int32), np.asarray(value, dtype=np.float64)))
        if not parts:
            return np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0), self.names
        rec = np.concatenate([p[0] for p in parts])
        order = np.concatenate([p[1] for p in parts])
        code = np.concatenate([p[2] for p in parts]).astype(np.int32)
        value = np.concatenate([p[3] for p in parts])
        if self.extra:
            o = np.lexsort((order, rec))
            rec, code, value = rec[o], code[o], value[o]
        return rec, code, value, self.names


def scalar_of(value) -> float | None:
    """A Summary.Value's scalar as TensorBoard reads it: ``simple_value``, or a one-element numeric
    tensor; None for anything else (images, histograms, text)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        from tensorboard.util import tensor_util

        arr = tensor_util.make_ndarray(value.tensor)
        if arr.size == 1 and arr.dtype.kind in "fiub":
            return float(arr.reshape(()))
    return None
