"""TensorBoard event files read in bulk (moeproxy.ingest.formats.tensorboard.tfrecord, event_columns): the same values,
steps and wall times as TensorBoard's own EventAccumulator on every writer's layout, and as the
protobuf library on any Event the bulk decoder is given (including the ones it leaves to the
careful path); checksums, cut records and restarts as the README promises."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeproxy.errors import InputError
from moeproxy.ingest import ingest_paths, parse_file
from moeproxy.ingest.formats.tensorboard.crc32c import crc32c, crc32c_equal_length, crc32c_long, masked
from moeproxy.store import Store

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]

event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: E402
from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

VALUES = [0.5, -1.25, math.nan, math.inf, -math.inf, 3.0e38, 1e-45, 0.1]


def _accumulator(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    """tag -> [(step, wall_time, value)] as TensorBoard reads it, scalars and scalar tensors."""
    ea = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=False)
    ea.Reload()
    out = {tag: [(e.step, e.wall_time, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}
    for tag in ea.Tags()["tensors"]:
        out.setdefault(tag, []).extend((e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto)))
                                       for e in ea.Tensors(tag))
    return out


def _ours(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    frame = parse_file(path).frame
    out: dict[str, list] = {}
    for step, wall, metric, value in zip(frame["step"], frame["wall_time"], frame["metric"], frame["value"]):
        out.setdefault(str(metric), []).append((int(step), float(wall), float(value)))
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for tag in a:
        assert len(a[tag]) == len(b[tag]), tag
        for (s1, w1, v1), (s2, w2, v2) in zip(a[tag], b[tag]):
            assert s1 == s2 and w1 == w2 and (v1 == v2 or (math.isnan(v1) and math.isnan(v2))), (tag, s1, v1, v2)


def _only_file(d: Path) -> Path:
    [path] = d.glob("events.out.tfevents.*")
    return path


# --- every writer's layout, against EventAccumulator ---------------------------------------------

def test_tensorboardx_simple_values_match_event_accumulator(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    w = tbx.SummaryWriter(str(tmp_path / "tb"))
    for step in range(300):  # steps past 127 and 255: two-byte varints, records of new lengths
        for i, tag in enumerate(("train/loss", "train/grad_norm", "a much longer tag name/with parts")):
            w.add_scalar(tag, VALUES[(step + i) % len(VALUES)], step)
    w.close()
    path = _only_file(tmp_path / "tb")
    _same(_ours(path), _accumulator(path))


@pytest.mark.parametrize("style", [{}, {"new_style": True}, {"new_style": True, "double_precision": True}])
def test_torch_writer_layouts_match_event_accumulator(tmp_path, style):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "tb"))
    for step in range(200):
        w.add_scalar("lm loss", VALUES[step % len(VALUES)], step, **style)
        w.add_scalar("grad-norm", 1.0 / (step + 1), step, **style)
    w.close()
    path = _only_file(tmp_path / "tb")
    ours = _ours(path)
    _same(ours, _accumulator(path))
    if style.get("double_precision"):  # a double is kept as a double, not cut to float32
        assert ours["grad-norm"][2][2] == 1.0 / 3


def _write_events(path: Path, events) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        writer = RecordWriter(fh)
        writer.write(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
        for event in events:
            writer.write(event if isinstance(event, bytes) else event.SerializeToString())
        writer.flush()
    return path


def _tensor(value: float, dtype: int, how: str) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto()
    t = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape)
    fmt = "<f" if dtype == 1 else "<d"
    if how == "content":
        with np.errstate(over="ignore"):  # float32 overflow: inf, as protobuf does
            t.tensor_content = np.asarray(value, dtype=fmt).tobytes()
    elif dtype == 1:
        t.float_val.append(value)
    else:
        t.double_val.append(value)
    return t


def _scalars_metadata() -> summary_pb2.SummaryMetadata:
    return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def test_tf1_summaries_with_many_values_and_tf2_tensors_match_event_accumulator(tmp_path):
    """TF1 merges summaries (several values per event, images and histograms among them); TF2
    writes 0-d tensors, as tensor_content or float_val/double_val."""
    events = []
    for step in range(150):
        values = [summary_pb2.Summary.Value(tag=f"tf1/v{i}", simple_value=VALUES[(step + i) % 8]) for i in range(5)]
        values.insert(2, summary_pb2.Summary.Value(tag="tf1/hist", histo=summary_pb2.HistogramProto(min=0, max=1)))
        events.append(event_pb2.Event(step=step, wall_time=1000.0 + step, summary=summary_pb2.Summary(value=values)))
        for tag, dtype, how in (("tf2/float", 1, "val"), ("tf2/double", 2, "val"), ("tf2/content_f", 1, "content"),
                                ("tf2/content_d", 2, "content")):
            value = summary_pb2.Summary.Value(tag=tag, tensor=_tensor(VALUES[step % 8] * 3, dtype, how),
                                              metadata=_scalars_metadata())
            events.append(event_pb2.Event(step=step, wall_time=2000.5 + step, summary=summary_pb2.Summary(value=[value])))
    path = _write_events(tmp_path / "tb" / "events.out.tfevents.1.tf", events)
    parsed = parse_file(path)
    assert parsed.skipped_lines == 150  # the histograms
    _same(_ours(path), _accumulator(path))


def test_a_run_directory_of_several_files_is_one_run_with_the_restart_as_an_attempt(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    run = tmp_path / "run"
    for first, last, value in ((0, 60, 1.0), (40, 100, 2.0)):  # the second launch re-logs 40..59
        w = tbx.SummaryWriter(str(run), filename_suffix=f".{first}")
        for step in range(first, last):
            w.add_scalar("loss", value + step, step)
        w.close()
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    store = Store(tmp_path / "db.duckdb")
    summaries = ingest_paths(store, [run])
    assert {s.run for s in summaries} == {"run"}
    series = store.series("run", "loss")
    assert len(series) == 100
    assert series.set_index("step")["value"][45] == 2.0 + 45 and series.set_index("step")["value"][10] == 1.0 + 10


# --- any Event, against the protobuf library -------------------------------------------------------

def _reference(path: Path) -> list[tuple[int, float, str, float]]:
    """(step, wall, tag, value) of every scalar, one event at a time with protobuf."""
    from moeproxy.ingest.formats.tensorboard.event_columns import scalar_of

    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
        for value in event.summary.value:
            scalar = scalar_of(value)
            if scalar is not None:
                out.append((event.step, event.wall_time, value.tag, scalar))
        at += 16 + length
    return out


def _ours_rows(path: Path) -> list[tuple[int, float, str, float]]:
    frame = parse_file(path).frame
    return list(zip(frame["step"].tolist(), frame["wall_time"].tolist(), frame["metric"].astype(str).tolist(),
                    frame["value"].tolist()))


def _rows_equal(a, b) -> bool:
    return len(a) == len(b) and all(
        x[:3] == y[:3] and (x[3] == y[3] or (math.isnan(x[3]) and math.isnan(y[3]))) for x, y in zip(a, b))


tags = st.text(min_size=0, max_size=40)
floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
values = st.one_of(
    st.builds(lambda t, v: summary_pb2.Summary.Value(tag=t, simple_value=v), tags, floats),
    st.builds(lambda t, v, d, how: summary_pb2.Summary.Value(tag=t, tensor=_tensor(v, d, how), metadata=_scalars_metadata()),
              tags, floats, st.sampled_from([1, 2]), st.sampled_from(["val", "content"])),
    # the careful path: other dtypes, shapes, several values
    st.builds(lambda t, v: summary_pb2.Summary.Value(tag=t, tensor=tensor_util.make_tensor_proto(v)), tags,
              st.one_of(st.integers(-2**31, 2**31 - 1), st.lists(floats, min_size=1, max_size=3))),
    st.builds(lambda t: summary_pb2.Summary.Value(tag=t, image=summary_pb2.Summary.Image(height=1)), tags),
    st.builds(lambda t: summary_pb2.Summary.Value(tag=t, node_name="n"), tags),
)
events = st.builds(
    lambda step, wall, vals, extra: event_pb2.Event(step=step, wall_time=wall, summary=summary_pb2.Summary(value=vals),
                                                    **extra),
    st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False, min_value=0, max_value=2e9),
    st.lists(values, max_size=4),
    st.sampled_from([{}, {"file_version": "x"}, {"source_metadata": event_pb2.SourceMetadata(writer="w")}]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events, min_size=1, max_size=60), st.integers(1, 30))
def test_the_bulk_decoder_reads_what_protobuf_reads(tmp_path, evs, repeat):
    path = _write_events(tmp_path / f"events.out.tfevents.{os.getpid()}", evs * (1 + repeat % 3))
    expected = _reference(path)
    if not expected:
        with pytest.raises(InputError, match="holds no metric values"):
            parse_file(path)
        return
    assert _rows_equal(_ours_rows(path), expected)


def test_unknown_fields_long_tags_and_a_repeated_field_take_the_careful_path(tmp_path):
    event = event_pb2.Event(step=5, wall_time=2.0, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="x" * 300, simple_value=1.5)]))
    raw = event.SerializeToString()
    unknown = raw + b"\x80\x01\x07"  # field 16, varint 7: a two-byte tag protobuf keeps as unknown
    twice = raw + b"\x10\x09"  # step given again: the last one counts
    path = _write_events(tmp_path / "events.out.tfevents.9.x", [raw, unknown, twice] * 20)
    rows = _ours_rows(path)
    assert _rows_equal(rows, _reference(path))
    assert [r[0] for r in rows[:3]] == [5, 5, 9]


def test_a_record_protobuf_cannot_parse_is_an_error_naming_its_offset(tmp_path):
    good = event_pb2.Event(step=1, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag="loss", simple_value=1.0)])).SerializeToString()
    bad = good + b"\x0a\x05ab"  # a field whose length runs past the message
    path = _write_events(tmp_path / "events.out.tfevents.1.x", [good] * 10 + [bad] + [good] * 10)
    offset = 16 + len(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
    offset += 10 * (16 + len(good))
    with pytest.raises(InputError, match=rf"record at offset {offset}: not a TensorBoard event"):
        parse_file(path)


# --- framing ------------------------------------------------------------------------------------

def test_crc32c_matches_tensorboard_in_bulk_and_for_long_records():
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 63, 64, 65, 1000, 70000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert masked(crc32c(data)) == masked_crc32c(data)
        assert crc32c_long(np.frombuffer(data, np.uint8)) == crc32c(data)
    buf = rng.integers(0, 256, 50000, dtype=np.uint8)
    buf[::7] = 3  # columns that agree and columns that differ
    starts = np.arange(0, 49000, 97)
    assert crc32c_equal_length(buf, starts, 90).tolist() == [crc32c(buf[s:s + 90].tobytes()) for s in starts]


@pytest.mark.parametrize("where", [0.0, 0.05, 0.5, 0.97])
def test_a_flipped_byte_stops_the_read_at_its_record_with_a_warning(tmp_path, where):
    """A record whose checksum does not match (a crash mid-write, a bad disk block): the records before
    it are kept and the warning names the record's offset and the bytes not read (TensorBoard's own
    loader stops at its first bad record too); corrupt from the first record, nothing is stored."""
    tbx = pytest.importorskip("tensorboardX")
    w = tbx.SummaryWriter(str(tmp_path / "tb"))
    for step in range(2000):
        w.add_scalar("loss", step * 0.5, step)
    w.close()
    path = _only_file(tmp_path / "tb")
    data = bytearray(path.read_bytes())
    starts, o = [], 0
    while o < len(data):
        starts.append(o)
        o += 16 + struct.unpack_from("<Q", data, o)[0]
    at = int(len(data) * where)
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    record = max(s for s in starts if s <= at)
    if record == 0:
        with pytest.raises(InputError, match=r"record at offset 0: corrupt"):
            parse_file(path)
        return
    parsed = parse_file(path)
    assert any(f"record at offset {record}: corrupt" in w and f"bytes {record}-{len(data)} not read" in w
               for w in parsed.warnings), parsed.warnings
    steps = sorted(set(parsed.frame["step"]))
    kept = sum(1 for s in starts if s < record) - 1          # the first record is the file version
    assert steps == list(range(kept)), (len(steps), kept)


def test_the_bench_writer_writes_what_tensorboardx_writes(tmp_path):
    """bench/ingest.py writes its large event file itself (tensorboardX takes minutes for 2M
    scalars); it must be byte for byte what tensorboardX writes."""
    tbx = pytest.importorskip("tensorboardX")
    # bench/ingest.py by its path: bench/ on sys.path would shadow the dashboard package with bench/dashboard.py
    spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    write_event_file = bench.write_event_file

    tags = ["train/a", "train/bb"]
    value_of = lambda step, i: math.sin(step + i)  # noqa: E731
    ours = write_event_file(tmp_path / "ours", 300, tags, value_of)
    w = tbx.SummaryWriter(str(tmp_path / "tbx"))
    for step in range(1, 301):
        for i, tag in enumerate(tags):
            w.add_scalar(tag, value_of(step, i), step, walltime=1.7e9 + step * 0.01)
    w.close()
    theirs = _only_file(tmp_path / "tbx").read_bytes()
    first = 16 + struct.unpack_from("<Q", theirs)[0]  # the file_version event carries the time of writing
    assert ours.read_bytes()[first:] == theirs[first:]


def test_a_cut_last_record_is_named_and_whole_records_are_kept(tmp_path):
    path = _write_events(tmp_path / "events.out.tfevents.1.x", [
        event_pb2.Event(step=s, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="l", simple_value=s)]))
        for s in range(100)])
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) - 4, len(data) - 12, len(data) - 17):  # inside the last record (29 bytes)
        path.write_bytes(data[:cut])
        parsed = parse_file(path)
        assert re.search(r"offset \d+: the last record is cut", parsed.warnings[0])
        assert parsed.frame["step"].tolist() == list(range(len(parsed.frame)))
        assert len(parsed.frame) == 99


@pytest.mark.parametrize("window", [64, 1000, 1 << 20])
def test_windows_of_any_size_read_the_same_records(tmp_path, monkeypatch, window):
    """Records cut by a window's end, and records longer than a window (a graph), read the same."""
    from moeproxy.ingest.formats.tensorboard import tfrecord

    monkeypatch.setattr(tfrecord, "WINDOW", window)
    evs = []
    for step in range(400):
        evs.append(event_pb2.Event(step=step, wall_time=float(step), summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=f"t{step % 7}", simple_value=step * 0.25)])))
        if step % 97 == 0:
            evs.append(event_pb2.Event(step=step, graph_def=os.urandom(5000)))
    path = _write_events(tmp_path / "events.out.tfevents.1.x", evs)
    assert _rows_equal(_ours_rows(path), _reference(path))
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    parsed = parse_file(path)
    assert len(parsed.frame) == 399 and "the last record is cut" in parsed.warnings[0]


def test_an_event_file_without_its_version_record_is_still_an_event_file(tmp_path):
    # some writers leave out the leading ``brain.Event:2`` record: a whole first TFRecord holding an
    # Event's wall time is enough to tell the format
    import struct

    from moeproxy.ingest import parse_file
    from moeproxy.ingest.formats.tensorboard.crc32c import crc32c, masked

    def record(payload: bytes) -> bytes:
        head = struct.pack("<Q", len(payload))
        return (head + struct.pack("<I", int(masked(crc32c(head)))) + payload
                + struct.pack("<I", int(masked(crc32c(payload)))))

    def scalar_event(step: int, tag: str, value: float) -> bytes:
        value_msg = b"\x0a" + bytes([len(tag)]) + tag.encode() + b"\x15" + struct.pack("<f", value)
        summary = b"\x0a" + bytes([len(value_msg)]) + value_msg
        return b"\x09" + struct.pack("<d", 1.7e9 + step) + b"\x10" + bytes([step]) + b"\x2a" + bytes([len(summary)]) + summary

    path = tmp_path / "run.tfevents"
    path.write_bytes(b"".join(record(scalar_event(s, "Avg_return", -100.0 + s)) for s in range(1, 20)))
    parsed = parse_file(path)
    assert parsed.format == "tensorboard"
    assert sorted(parsed.frame["step"].unique())[:3] == [1, 2, 3]
    from moeproxy.ingest.names import canonical_of

    assert canonical_of("Avg_return")[0] == "reward_mean"   # a framework's name, capitalised
