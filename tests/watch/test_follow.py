"""moeproxy.watch in one process: growing files of each line format and TensorBoard, half-written
lines, CSV headers, rotation, rewrites, restarts, malformed lines, and the schema migration."""

from __future__ import annotations

import io
import json
import os

import duckdb
import pytest

from moeproxy.store import SCHEMA_VERSION, Store
from moeproxy.watch import WatchConfig, Watcher


def make_watcher(tmp_path, *paths, **options):
    out, err = io.StringIO(), io.StringIO()
    w = Watcher(WatchConfig(paths=[str(p) for p in paths], **options), Store(tmp_path / "runs.duckdb"), out, err)
    w.start()
    return w


def stored(tmp_path, run=None) -> list[tuple]:
    """(metric, step, value, attempt) of every stored row, sorted."""
    with duckdb.connect(str(tmp_path / "runs.duckdb")) as con:
        where = f"WHERE run_id = (SELECT run_id FROM runs WHERE name = '{run}')" if run else ""
        return sorted(con.execute(f"SELECT metric, step, value, attempt FROM scalars {where}").fetchall())


def append(path, text: str | bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(text.encode() if isinstance(text, str) else text)


def jsonl(steps, **fixed) -> str:
    return "".join(json.dumps({"step": s, "loss": 2.0 - s / 100, **fixed}) + "\n" for s in steps)


def test_a_half_written_line_waits_for_its_end(tmp_path):
    log = tmp_path / "run1" / "metrics.jsonl"
    log.parent.mkdir()
    append(log, jsonl(range(1, 4)) + '{"step": 4, "loss": 1.9')
    w = make_watcher(tmp_path, log.parent)
    w.cycle()
    assert [r[1] for r in stored(tmp_path)] == [1, 2, 3]
    append(log, '6}\n')
    w.cycle()
    assert [(r[1], r[2]) for r in stored(tmp_path)] == [(1, 1.99), (2, 1.98), (3, 1.97), (4, 1.96)]
    w.cycle()  # nothing new: nothing added
    assert len(stored(tmp_path)) == 4
    assert Store(tmp_path / "runs.duckdb").runs()["run"].tolist() == ["run1"]
    w.close()


def test_a_csv_header_is_kept_per_file(tmp_path):
    run = tmp_path / "csvrun"
    run.mkdir()
    (run / "a.csv").write_text("step,loss,grad_norm\n1,2.0,0.5\n")
    (run / "b.csv").write_text("step,reward_mean\n1,0.1\n")
    w = make_watcher(tmp_path, run)
    w.cycle()
    append(run / "a.csv", "2,1.9,0.6\n3,1.8,")  # the third row is half written
    append(run / "b.csv", "2,0.2\n")
    w.cycle()
    rows = [(m, s, v) for m, s, v, _ in stored(tmp_path)]
    assert rows == [("grad_norm", 1, 0.5), ("grad_norm", 2, 0.6), ("loss", 1, 2.0), ("loss", 2, 1.9),
                    ("reward_mean", 1, 0.1), ("reward_mean", 2, 0.2)]
    append(run / "a.csv", "0.7\n")
    w.cycle()
    assert ("grad_norm", 3, 0.7, 0) in stored(tmp_path) and ("loss", 3, 1.8, 0) in stored(tmp_path)
    w.close()


def test_a_text_log_grows_line_by_line(tmp_path):
    log = tmp_path / "train.log"
    append(log, "starting up\niter 1: loss 2.50, time 40.0ms\n")
    w = make_watcher(tmp_path, log, run="nano")
    w.cycle()
    append(log, "iter 2: loss 2.40, time 41.0ms\niter 3: loss 2.3")
    w.cycle()
    assert [(m, s, v) for m, s, v, _ in stored(tmp_path) if m == "loss"] == [("loss", 1, 2.5), ("loss", 2, 2.4)]
    append(log, "0, time 40.5ms\n")
    w.cycle()
    assert ("loss", 3, 2.3, 0) in stored(tmp_path)
    w.close()


def test_a_rotated_file_is_read_to_its_end_and_the_new_one_from_its_start(tmp_path):
    run = tmp_path / "rot"
    run.mkdir()
    log = run / "metrics.jsonl"
    append(log, jsonl(range(1, 6)))
    w = make_watcher(tmp_path, run)
    w.cycle()
    append(log, jsonl(range(6, 9)))  # written just before the rotation, not yet read
    os.rename(log, run / "metrics.jsonl.1")
    append(log, jsonl(range(9, 12)))
    w.cycle()
    w.cycle()
    steps = [s for m, s, _, a in stored(tmp_path) if m == "loss"]
    assert steps == list(range(1, 12))
    assert {a for *_, a in stored(tmp_path)} == {0}
    w.close()


def test_a_file_rewritten_from_the_start_is_a_new_attempt(tmp_path):
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    append(log, jsonl(range(1, 6)))
    w = make_watcher(tmp_path, log.parent)
    w.cycle()
    log.write_text(jsonl(range(1, 3), kl=0.5))  # truncated and written again: the job restarted
    w.cycle()
    rows = stored(tmp_path)
    assert [(s, a) for m, s, _, a in rows if m == "loss"] == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (4, 0), (5, 0)]
    assert "rewritten from the start" in w.out.getvalue()
    w.close()


def test_a_malformed_line_inside_the_file_is_skipped_and_named(tmp_path):
    log = tmp_path / "crash" / "metrics.jsonl"
    log.parent.mkdir()
    # a crash cut line 3; the restarted job went on on the same line
    append(log, jsonl(range(1, 3)) + '{"step": 3, "lo' + jsonl(range(3, 5)))
    w = make_watcher(tmp_path, log.parent)
    w.cycle()
    assert [s for m, s, _, _ in stored(tmp_path) if m == "loss"] == [1, 2, 4]
    assert f"{log}: line 3: malformed JSON" in w.err.getvalue()
    append(log, jsonl([5]))
    w.cycle()
    assert [s for m, s, _, _ in stored(tmp_path) if m == "loss"] == [1, 2, 4, 5]
    w.close()


def test_tensorboard_records_are_read_only_when_whole(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    source = tmp_path / "tb-writer"
    writer = tbx.SummaryWriter(str(source))
    for step in range(1, 6):
        writer.add_scalar("train/loss", 3.0 - step / 10, step)
    writer.close()
    data = next(source.iterdir()).read_bytes()
    run = tmp_path / "tbrun"
    run.mkdir()
    event = run / "events.out.tfevents.1.host"
    cut = len(data) - 7  # inside the last record
    event.write_bytes(data[:cut])
    w = make_watcher(tmp_path, run)
    w.cycle()
    assert [s for m, s, _, _ in stored(tmp_path)] == [1, 2, 3, 4]
    append(event, data[cut:])
    w.cycle()
    assert [(s, round(v, 3)) for _, s, v, _ in stored(tmp_path)] == [(1, 2.9), (2, 2.8), (3, 2.7), (4, 2.6), (5, 2.5)]
    w.close()


def test_a_restart_takes_up_each_file_where_it_was(tmp_path):
    run = tmp_path / "resumed"
    run.mkdir()
    log = run / "metrics.jsonl"
    append(log, jsonl(range(1, 11)))
    w = make_watcher(tmp_path, run)
    w.cycle()
    w.close()
    append(log, jsonl(range(11, 16)))
    w = make_watcher(tmp_path, run)
    w.cycle()
    assert "taken up at byte" in w.out.getvalue()
    assert [(s, a) for m, s, _, a in stored(tmp_path) if m == "loss"] == [(s, 0) for s in range(1, 16)]
    w.close()
    # rewritten while no watcher ran: the sha256 of the bytes read no longer matches, read again
    log.write_text(jsonl(range(1, 4), kl=0.1))
    w = make_watcher(tmp_path, run)
    w.cycle()
    assert "taken up" not in w.out.getvalue()
    assert sorted({a for m, s, _, a in stored(tmp_path) if s <= 3}) == [0, 1]
    w.close()


def test_what_the_watcher_knows_of_a_format_is_a_field_of_the_format(tmp_path, monkeypatch):
    """A format added with two header lines is followed with both put in front of every later chunk,
    and one declared a whole document is refused: the watcher holds no list of format names."""
    from moeproxy.ingest.formats.csvfmt import parse_csv
    from moeproxy.ingest.registry import FORMATS, LogFormat

    def sniff(src):
        return 1.0 if src.head.startswith(b"# two-header table") else 0.0

    def parse(src):  # the CSV reader after the title line
        from moeproxy.ingest.source import open_source

        body = tmp_path / "body.csv"
        body.write_bytes(src.path.read_bytes().split(b"\n", 1)[1])
        parsed = parse_csv(open_source(body))
        parsed.format = "two-header"
        return parsed

    monkeypatch.setitem(FORMATS, "two-header", LogFormat("two-header", "test", sniff, parse, header_lines=2))
    log = tmp_path / "two" / "t.log"
    log.parent.mkdir()
    append(log, "# two-header table\nstep,loss\n1,2.0\n")
    w = make_watcher(tmp_path, log.parent)
    w.cycle()
    append(log, "2,1.9\n3,1.8\n")
    w.cycle()
    assert [(m, s, v) for m, s, v, _ in stored(tmp_path)] == [("loss", 1, 2.0), ("loss", 2, 1.9), ("loss", 3, 1.8)]
    w.close()
    monkeypatch.setitem(FORMATS, "two-header", LogFormat("two-header", "test", sniff, parse, appendable=False))
    other = tmp_path / "other"
    other.mkdir()
    append(other / "t.log", "# two-header table\nstep,loss\n1,2.0\n")
    (tmp_path / "store2").mkdir()
    w = make_watcher(tmp_path / "store2", other)
    w.cycle()
    assert "a two-header file is rewritten whole" in w.err.getvalue()
    w.close()


def test_a_whole_document_format_is_named_and_not_followed(tmp_path):
    run = tmp_path / "hf"
    run.mkdir()
    (run / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 2.0}]}))
    (run / "metrics.jsonl").write_text(jsonl([1]))
    w = make_watcher(tmp_path, run)
    w.cycle()
    assert "rewritten whole, not appended to" in w.err.getvalue()
    assert [m for m, *_ in stored(tmp_path)] == ["loss"]
    w.close()


def test_a_schema_2_store_is_migrated_to_3_keeping_its_data(tmp_path):
    db = tmp_path / "runs.duckdb"
    log = tmp_path / "old.jsonl"
    log.write_text(jsonl(range(1, 4)))
    from moeproxy.ingest import ingest_paths

    ingest_paths(Store(db), [log], run="old")
    with duckdb.connect(str(db)) as con:  # as schema 2 left it: no watch tables
        con.execute("DROP TABLE watch_files; DROP TABLE alerts")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    store = Store(db)
    assert len(store.run_frame("old")) == 3
    with duckdb.connect(str(db)) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert con.execute("SELECT count(*) FROM watch_files").fetchone()[0] == 0
    assert store.alerts() == []


def test_one_watcher_follows_several_run_directories_and_new_files_in_them(tmp_path):
    a, b = tmp_path / "run-a", tmp_path / "run-b"
    a.mkdir()
    b.mkdir()
    append(a / "metrics.jsonl", jsonl([1, 2]))
    w = make_watcher(tmp_path, a, b)
    w.cycle()
    append(b / "metrics.jsonl", '{"event": "start"}\n')  # a job that starts later, with no metric yet
    append(a / "metrics.jsonl", jsonl([3]))
    w.cycle()
    append(b / "metrics.jsonl", jsonl([1]))
    (a / "rank1.jsonl").write_text(jsonl([3, 4]))  # a second file of run-a: same steps, its own rows
    append(a / "metrics.jsonl", jsonl([4]))
    w.cycle()
    assert [(s, a) for m, s, _, a in stored(tmp_path, "run-a") if m == "loss"] == [(1, 0), (2, 0), (3, 0), (3, 1),
                                                                                 (4, 0), (4, 1)]
    assert [s for m, s, *_ in stored(tmp_path, "run-b") if m == "loss"] == [1]
    w.close()


def test_an_alert_recorded_but_not_written_before_a_kill_is_written_at_restart(tmp_path):
    run = tmp_path / "owed"
    run.mkdir()
    bad = [json.dumps({"step": s, "loss": 2.0, "grad_norm": 1.0 if s < 20 else float("inf")}) + "\n" for s in range(1, 30)]
    append(run / "metrics.jsonl", "".join(bad))
    alerts = tmp_path / "alerts.jsonl"
    w = make_watcher(tmp_path, run, alerts=str(alerts))
    w.cycle()
    w.close()
    (first,) = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert (first["verdict"], first["onset_step"]) == ("overflow", 20)
    alerts.write_text("")  # as if killed after the store recorded it, before the line was written
    w = make_watcher(tmp_path, run, alerts=str(alerts))
    w.cycle()
    w.cycle()
    w.close()
    assert [json.loads(line) for line in alerts.read_text().splitlines()] == [first]  # written once, not raised anew
    assert len(Store(tmp_path / "runs.duckdb").alerts("owed")) == 1


def test_record_index_steps_run_on_across_chunks_and_an_endless_line_is_refused(tmp_path):
    log = tmp_path / "nostep" / "metrics.jsonl"
    log.parent.mkdir()
    append(log, '{"loss": 3.0}\n{"loss": 2.9}\n')
    w = make_watcher(tmp_path, log.parent, max_chunk_bytes=4096)
    w.cycle()
    append(log, '{"loss": 2.8}\n')
    w.cycle()
    assert [(s, v) for _, s, v, _ in stored(tmp_path)] == [(0, 3.0), (1, 2.9), (2, 2.8)]
    append(log, "x" * 5000)  # no newline in sight within the most one look reads
    w.cycle()
    assert f"{log}: line 4: longer than 4,096 bytes" in w.err.getvalue()
    w.close()


def test_once_reads_a_backlog_larger_than_one_look_and_stops(tmp_path):
    log = tmp_path / "backlog" / "metrics.jsonl"
    log.parent.mkdir()
    append(log, jsonl(range(1, 201)))
    w = make_watcher(tmp_path, log.parent, max_chunk_bytes=1000)  # about 30 lines a look
    w.run(once=True)
    assert [s for m, s, *_ in stored(tmp_path) if m == "loss"] == list(range(1, 201))


# Each reader's context that spans a chunk boundary is carried across it (issue 12 follow-up, now
# holding): the last step before a DeepSpeed overflow line (``ParsedLog.carry``), the record index
# of printed dicts, and nanoGPT's 'loss' taking its name over from the step-0 eval line's
# 'train loss' (``resolve_names(takeover=True)``).
LINE_FIXTURES = ["megatron.log", "mindspeed_llm.log", "mindspeed_rl.log", "deepspeed.log", "verl_file.jsonl",
                 "verl_console.log", "nanogpt.log", "torchtitan.log", "openrlhf.log", "slime.log", "hf_console.log",
                 "mlx.log", "wandb_export.csv", "sb3_console.out"]


@pytest.mark.parametrize("name", ["deepspeed.log", "nanogpt.log", "hf_console.log", "sb3_console.out"])
def test_a_context_across_a_chunk_boundary_is_carried_wherever_the_cut_falls(tmp_path, name):
    """The readers whose records depend on earlier lines (a box of key/value rows spans many), cut
    at every line boundary: the rows equal those of one ingest of the whole."""
    from pathlib import Path

    from moeproxy.ingest import ingest_paths

    data = (Path(__file__).resolve().parents[1] / "fixtures" / "logs" / name).read_bytes()
    whole = tmp_path / "whole" / name
    whole.parent.mkdir()
    whole.write_bytes(data)
    ingest_paths(Store(tmp_path / "whole.duckdb"), [whole], run="r")
    query = "SELECT metric, step, CAST(value AS VARCHAR), rank FROM scalars"
    with duckdb.connect(str(tmp_path / "whole.duckdb")) as con:
        expected = sorted(con.execute(query).fetchall())
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    for k, cut in enumerate(ends[:-1]):
        folder = tmp_path / f"cut{k}"
        folder.mkdir()
        log = folder / name
        w = make_watcher(folder, log, run="r")
        append(log, data[:cut])
        w.cycle()
        append(log, data[cut:])
        w.cycle()
        w.close()
        with duckdb.connect(str(folder / "runs.duckdb")) as con:
            assert sorted(con.execute(query).fetchall()) == expected, f"cut after byte {cut}"


@pytest.mark.parametrize("name", LINE_FIXTURES)
def test_a_log_watched_as_it_grows_stores_what_one_ingest_of_it_stores(tmp_path, name):
    """Each line format, written in four pieces cut mid-line: the rows equal `ingest`'s of the whole."""
    from pathlib import Path

    from moeproxy.ingest import ingest_paths

    data = (Path(__file__).resolve().parents[1] / "fixtures" / "logs" / name).read_bytes()
    source = tmp_path / "whole" / name
    source.parent.mkdir()
    source.write_bytes(data)
    ingest_paths(Store(tmp_path / "whole.duckdb"), [source], run="r")
    log = tmp_path / "job" / name
    log.parent.mkdir()
    w = make_watcher(tmp_path, log, run="r")
    written = 0
    for k in range(1, 5):
        cut = len(data) * k // 4
        append(log, data[written:cut])
        written = cut
        w.cycle()
    w.close()
    query = "SELECT metric, step, CAST(value AS VARCHAR), rank FROM scalars"  # NaN compares equal as text
    with duckdb.connect(str(tmp_path / "whole.duckdb")) as con:
        expected = sorted(con.execute(query).fetchall())
    with duckdb.connect(str(tmp_path / "runs.duckdb")) as con:
        got = sorted(con.execute(query).fetchall())
    assert got == expected
