"""TensorBoard event files (``events.out.tfevents.*``), read in bulk: no TensorFlow, and no Python
loop over events.

The TFRecord framing and both checksums of every record are checked in bulk
(``moeproxy.ingest.formats.tensorboard.tfrecord``); the ``Event`` protobufs are decoded column-wise with numpy
(``moeproxy.ingest.formats.tensorboard.event_columns``), with the ``protobuf`` library as the careful path for what the
bulk decoder does not settle. Scalars come either as ``simple_value`` (tensorboardX, TF1 summaries,
torch's default, Megatron's writer) or as 0-d tensors (TF2 / torch ``new_style``, float or
double); both are read, NaN and +-inf kept. Each event keeps its step and wall time; a run
directory's several event files are each a source of the run (restarts become attempts).

A last record cut short (a file still being written, or cut by a crash) is dropped with a warning
naming its offset, as an unterminated last line of a text log is; a record whose checksum or
protobuf is wrong anywhere is an error naming its offset (TensorBoard's own loader stops there and
says so only at debug level, which cut runs silently).
"""

from __future__ import annotations

import numpy as np

from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.formats.tensorboard.tfrecord import record_windows


def parse_tensorboard(src: SourceFile) -> ParsedLog:
    from moeproxy.ingest.formats.tensorboard.event_columns import decode_window
    from moeproxy.ingest.preload import import_in_background
    from moeproxy.ingest.table import build_columns

    if src.size > 1 << 20:
        import_in_background()  # the store's modules load while numpy decodes

    names: list[str] = []
    index: dict[str, int] = {}
    steps, walls, counts, codes, values = [], [], [], [], []
    skipped = 0
    for buf, base, starts, lengths in record_windows(src):
        window = decode_window(buf, starts, lengths, base + starts - 12, src.path)
        skipped += window.skipped
        remap = np.asarray([index.setdefault(tag, len(index)) for tag in window.tags], dtype=np.int32)
        names = list(index)
        per_record = np.bincount(window.item_record, minlength=len(starts))
        has = per_record > 0  # events without scalars (the file header, graphs, images) add no record
        steps.append(window.steps[has])
        walls.append(window.walls[has])
        counts.append(per_record[has])
        codes.append(remap[window.item_tag] if len(remap) else window.item_tag)
        values.append(window.item_value)
    steps_all = np.concatenate(steps) if steps else np.empty(0, np.int64)
    rows = build_columns(steps_all, np.full(len(steps_all), -1, dtype=np.int64),
                         np.concatenate(walls) if walls else np.empty(0),
                         np.concatenate(counts) if counts else np.empty(0, np.int64),
                         np.concatenate(codes) if codes else np.empty(0, np.int32), names,
                         np.concatenate(values) if values else np.empty(0))
    return ParsedLog(src.path, "tensorboard", guess_framework(names), src.sha256, rows, skipped)


def sniff_tensorboard(src: SourceFile) -> float:
    """An event file opens with its ``brain.Event:2`` version record; some writers leave it out, so
    a file whose first record is a whole TFRecord (its length's and its payload's checksums right)
    holding an Event's wall time (field 1, a double) is one too."""
    head = src.head
    if b"brain.Event:" in head[:256]:
        return 0.99
    if len(head) < 12 + 9 + 4:
        return 0.0
    import struct

    from moeproxy.ingest.formats.tensorboard.crc32c import crc32c, masked

    length, length_crc = struct.unpack_from("<QI", head, 0)
    if int(masked(crc32c(head[:8]))) != length_crc or not 9 <= length <= len(head) - 16:
        return 0.0
    payload = head[12:12 + length]
    (payload_crc,) = struct.unpack_from("<I", head, 12 + length)
    return 0.99 if int(masked(crc32c(payload))) == payload_crc and payload[0] == 0x09 else 0.0


register(LogFormat("tensorboard", "TensorBoard event files (scalars)", sniff_tensorboard, parse_tensorboard,
                   binary=True, top_score=0.99, priority=50))
