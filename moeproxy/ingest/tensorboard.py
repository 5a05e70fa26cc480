"""TensorBoard event files (``events.out.tfevents.*``), read with the ``tensorboard`` package's
own event-file loader: no TensorFlow needed.

Scalars come either as ``simple_value`` (tensorboardX, TF1 summaries, Megatron's writer) or as
0-d tensors with the ``scalars`` plugin (TF2 / torch.utils.tensorboard); both are read. Each
event keeps its step and wall time. A file cut short by a crash is read up to the last whole
record, as TensorBoard itself does.
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


def parse_tensorboard(src: SourceFile) -> ParsedLog:
    import logging

    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    table = LogTable()
    skipped = 0
    try:
        for event in EventFileLoader(str(src.path)).Load():
            if not event.HasField("summary"):
                continue
            record: dict[str, float] = {}
            for value in event.summary.value:
                scalar = _scalar(value)
                if scalar is None:
                    skipped += 1
                else:
                    record[value.tag] = scalar
            if record:
                table.add_dict(event.step, record, wall_time=event.wall_time)
    except Exception as exc:  # corrupt record, bad protobuf: name the file
        raise InputError(f"{src.path}: unreadable TensorBoard event file ({type(exc).__name__}: {exc})") from None
    return ParsedLog(src.path, "tensorboard", guess_framework(table.metric_names), src.sha256, table.frame(), skipped)


def sniff_tensorboard(src: SourceFile) -> float:
    return 0.99 if b"brain.Event:" in src.head[:256] else 0.0


register(LogFormat("tensorboard", "TensorBoard event files (scalars)", sniff_tensorboard, parse_tensorboard,
                   binary=True))
