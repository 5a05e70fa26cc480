"""TensorBoard event files (``events.out.tfevents.*``): TFRecord framing read here (so that every
problem has its byte offset), events decoded with the ``tensorboard`` package's protobufs; no
TensorFlow needed.

Scalars come either as ``simple_value`` (tensorboardX, TF1 summaries, Megatron's writer) or as
0-d tensors with the ``scalars`` plugin (TF2 / torch.utils.tensorboard); both are read. Each
event keeps its step and wall time. A record is ``length (8) | crc(length) (4) | data | crc(data) (4)``:
a last record cut short (a file still being written, or cut by a crash) is dropped with a warning
naming its offset, as an unterminated last line of a text log is; a record whose checksum or
protobuf is wrong anywhere is an error naming its offset (TensorBoard's own loader stops there and
says so only at debug level, which cut runs silently).
"""

from __future__ import annotations

from moeproxy.errors import InputError
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable


def _scalar(value) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        from tensorboard.util import tensor_util

        arr = tensor_util.make_ndarray(value.tensor)
        if arr.size == 1 and arr.dtype.kind in "fiub":
            return float(arr.reshape(()))
    return None


def _records(src: SourceFile):
    """(offset, event bytes) of each whole, checksummed record; sets ``src.parsed_end`` and the
    sha256 of the bytes up to the last whole record."""
    import hashlib
    import io
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from moeproxy.ingest.source import _RangeReader

    h = hashlib.sha256()
    offset = 0
    with io.BufferedReader(_RangeReader(src, 0, src.size), 1 << 20) as fh:
        while offset < src.size:
            header = fh.read(12)
            cut = len(header) < 12
            if not cut:
                length, length_crc = struct.unpack("<QI", header)
                if masked_crc32c(header[:8]) != length_crc:
                    raise InputError(f"{src.path}: record at offset {offset}: corrupt (length checksum mismatch); "
                                     "nothing stored")
                cut = offset + 12 + length + 4 > src.size
            if cut:
                src.parsed_end = offset
                src.warnings.append(f"offset {offset}: the last record is cut (bytes {offset}-{src.size} of a file "
                                    "still being written, or cut by a crash): skipped")
                break
            data = fh.read(length)
            (data_crc,) = struct.unpack("<I", fh.read(4))
            if masked_crc32c(data) != data_crc:
                raise InputError(f"{src.path}: record at offset {offset}: corrupt (data checksum mismatch); nothing stored")
            h.update(header)
            h.update(data)
            h.update(struct.pack("<I", data_crc))
            yield offset, data
            offset += 12 + length + 4
    src.set_sha256(h.hexdigest(), offset)


def parse_tensorboard(src: SourceFile) -> ParsedLog:
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    table = LogTable()
    skipped = 0
    for offset, data in _records(src):
        try:
            event = event_pb2.Event.FromString(data)
        except DecodeError as exc:
            raise InputError(f"{src.path}: record at offset {offset}: not a TensorBoard event ({exc})") from None
        if not event.HasField("summary"):
            continue
        record: dict[str, float] = {}
        for value in event.summary.value:
            try:
                scalar = _scalar(value)
            except Exception as exc:  # a tensor proto that does not decode: name where
                raise InputError(f"{src.path}: record at offset {offset}: unreadable value of {value.tag!r} "
                                 f"({type(exc).__name__})") from None
            if scalar is None:
                skipped += 1
            else:
                record[value.tag] = scalar
        if record:
            table.add_dict(event.step, record, wall_time=event.wall_time)
    return ParsedLog(src.path, "tensorboard", guess_framework(table.metric_names), src.sha256, table.frame(), skipped)


def sniff_tensorboard(src: SourceFile) -> float:
    return 0.99 if b"brain.Event:" in src.head[:256] else 0.0


register(LogFormat("tensorboard", "TensorBoard event files (scalars)", sniff_tensorboard, parse_tensorboard,
                   binary=True))
