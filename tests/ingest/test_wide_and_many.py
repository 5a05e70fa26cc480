"""Logs at MoE width and team size (issue 22): records of 5,000 metrics (first line over 100 KiB:
per-layer, per-expert routing loads) are detected without --format and every metric stored; a
directory of 2,000 small logs is stored in one transaction with the rows storing them one at a
time gives, a bad file skipped and named, a duplicate stored once. Timings are printed by
bench/ingest_many.py, never asserted here."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from moeproxy.cli import main
from moeproxy.errors import InputError
from moeproxy.ingest import batch, ingest_paths
from moeproxy.ingest.detect import FORMATS, open_and_detect
from moeproxy.ingest.source import HEAD_BYTES, SNIFF_BYTES, open_source
from moeproxy.store import Store

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
WIDE_NAMES = ["actor/entropy", "actor/pg_loss"] + [f"routing/layer_{layer}/expert_{e}/load"
                                                   for layer in range(48) for e in range(104)][:4998]
WIDE_STEPS = 6


def _wide_log(tmp_path: Path, shape: str) -> Path:
    rng = random.Random(0)
    rows = [{name: round(rng.random(), 6) for name in WIDE_NAMES} for _ in range(WIDE_STEPS)]
    if shape == "csv":
        path = tmp_path / "wide.csv"
        path.write_text(",".join(["step"] + WIDE_NAMES) + "\n" + "".join(
            ",".join([str(step)] + [repr(row[n]) for n in WIDE_NAMES]) + "\n" for step, row in enumerate(rows, 1)))
    else:
        path = tmp_path / f"wide_{shape}.jsonl"
        path.write_text("".join(json.dumps({"step": step, "data": row} if shape == "verl" else {"step": step, **row})
                                + "\n" for step, row in enumerate(rows, 1)))
    return path


@pytest.mark.parametrize("shape, fmt", [("verl", "verl-jsonl"), ("flat", "jsonl"), ("csv", "csv")])
def test_wide_records_are_detected_and_every_metric_stored(shape, fmt, tmp_path, capsys):
    path = _wide_log(tmp_path, shape)
    with open(path, "rb") as fh:
        assert len(fh.readline()) > 100 * 1024 > HEAD_BYTES  # wider than the head detection used to read
    assert open_and_detect(path)[1].name == fmt
    db = tmp_path / "runs.duckdb"
    assert main(["ingest", str(path), "--db", str(db)]) == 0  # no --format
    assert f"format {fmt}" in capsys.readouterr().out
    store = Store(db)
    run = store.runs()["run"].iloc[0]
    stored = store.metrics(run)
    assert set(stored["original"]) == set(WIDE_NAMES)
    assert set(stored["points"]) == {WIDE_STEPS}
    rng = random.Random(0)
    first = {name: round(rng.random(), 6) for name in WIDE_NAMES}
    frame = store.run_frame(run, ["routing/layer_47/expert_101/load"])
    assert frame[frame["step"] == 1]["value"].item() == first["routing/layer_47/expert_101/load"]
    assert main(["diagnose", str(path), "--db", str(tmp_path / "scratch.duckdb")]) == 0


def test_detection_reads_a_bounded_budget(tmp_path):
    """A first line longer than the budget is not read whole: the file is refused in one line."""
    path = tmp_path / "one_line.log"
    path.write_bytes(b"x" * (SNIFF_BYTES + 1024) + b"\n")
    src = open_source(path)
    assert len(src.sniff_head()) == SNIFF_BYTES
    with pytest.raises(InputError, match="not a training log format"):
        open_and_detect(path)


def test_every_sniffer_keeps_to_its_top_score(tmp_path):
    """Detection skips a sniffer whose top_score cannot beat the best so far: a sniffer returning
    more would make the answer depend on that shortcut."""
    files = [p for p in LOGS.rglob("*") if p.is_file()]
    files += [_wide_log(tmp_path, shape) for shape in ("verl", "flat", "csv")]
    for path in files:
        src = open_source(path, allow_binary=True)
        for fmt in FORMATS.values():
            if (src.encoding is None) == fmt.binary:
                assert fmt.sniff(src) <= fmt.top_score, (fmt.name, path)


def _small_log(path: Path, shape: int, seed: int) -> int:
    """A 20-line log in one of four shapes; its number of values."""
    rng = random.Random(seed)
    lines = []
    for step in range(1, 21):
        loss, grad = round(2 + rng.random(), 5), round(rng.random(), 4)
        if shape == 0:
            lines.append(json.dumps({"step": step, "data": {"actor/pg_loss": loss, "actor/grad_norm": grad}}))
        elif shape == 1:
            lines.append(json.dumps({"step": step, "train/loss": loss, "train/grad_norm": grad, "train/epoch": step}))
        elif shape == 2:
            lines.append(f" iteration {step:8d}/      20 | lm loss: {loss:.6E} | grad norm: {grad:.3f} |")
        else:
            lines.append(f"step {step} loss={loss} grad_norm={grad}")
    path.write_text("\n".join(lines) + "\n")
    return 20 * (3 if shape == 1 else 2)


def _digest(store: Store) -> tuple:
    with store.read() as con:
        return tuple(tuple(map(tuple, con.execute(f"SELECT * EXCLUDE ({excl}) FROM {t} ORDER BY ALL").fetchall()))
                     for t, excl in (("runs", "created_at, run_id"), ("sources", "ingested_at, source_id, run_id"),
                                     ("scalars", "wall_time, source_id, run_id"), ("metric_names", "run_id")))


def test_a_directory_of_many_small_logs(tmp_path):
    folder = tmp_path / "team"
    values = 0
    for i in range(2000):
        sub = folder / f"job_{i // 100:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        values += _small_log(sub / f"rank_{i:05d}.{'jsonl' if i % 4 < 2 else 'log'}", i % 4, i)
    (folder / "job_07" / "broken.log").write_text("nothing a training log holds\n")
    shutil.copy(folder / "job_03" / "rank_00301.jsonl", folder / "job_19" / "copy_of_301.jsonl")
    store = Store(tmp_path / "runs.duckdb")
    result = ingest_paths(store, [folder])
    assert [s.path for s in result.skipped] == [str(folder / "job_07" / "broken.log")]
    assert "not a training log format" in result.skipped[0].reason
    duplicates = [s for s in result if s.duplicate]
    assert [(s.path, s.duplicate_of) for s in duplicates] == [(str(folder / "job_19" / "copy_of_301.jsonl"), "team")]
    assert len(result) == 2001
    info = store.run_info("team")
    assert len(info["sources"]) == 2000
    assert sum(s["rows"] for s in info["sources"]) == values
    with store.read() as con:
        assert con.execute("SELECT count(*) FROM scalars").fetchone()[0] == values
    # a file that repeats a stored (metric, step) is a new attempt of the directory's run (one that
    # brings only metrics not yet stored at its steps joins the latest): nearly every file here
    assert 1900 < info["attempts"] <= 2000
    # again: every file a duplicate, nothing added
    before = _digest(store)
    again = ingest_paths(store, [folder])
    assert all(s.duplicate for s in again) and len(again.skipped) == 1
    assert _digest(store) == before


@pytest.mark.parametrize("tiny", [False, True])
def test_batch_stores_what_one_file_at_a_time_stores(tiny, tmp_path, monkeypatch):
    """Attempts, name mappings and sources as when each file is ingested on its own, including files
    that repeat steps, grow a run, or arrive after the run was stored (the store answers then);
    ``tiny``: flushes and memory limits hit every few files."""
    if tiny:
        monkeypatch.setattr(batch, "FLUSH_ROWS", 50)
        monkeypatch.setattr(batch, "INDEX_FILE_ROWS", 45)
        monkeypatch.setattr(batch, "INDEX_KEYS", 200)
    folder = tmp_path / "run"
    folder.mkdir()
    files = []
    for i in range(24):
        files.append(folder / f"a{i:02d}.{'jsonl' if i % 4 < 2 else 'log'}")
        _small_log(files[-1], i % 4, i)
    for k in range(6):  # steps that only grow: no restart
        files.append(folder / f"b{k}.log")
        files[-1].write_text("".join(f"step {100 + 10 * k + s} loss={s / 10}\n" for s in range(10)))
    files.append(folder / "c_back.log")  # back to an early step: a restart
    files[-1].write_text("step 105 loss=1.5\nstep 106 loss=1.25\n")
    one_by_one = Store(tmp_path / "one.duckdb")
    ingest_paths(one_by_one, [files[0]], run="run")  # the run exists before the batch
    batched = Store(tmp_path / "batch.duckdb")
    ingest_paths(batched, [files[0]], run="run")
    for path in files[1:]:
        ingest_paths(one_by_one, [path], run="run")
    ingest_paths(batched, files[1:], run="run")
    assert _digest(batched) == _digest(one_by_one)


def test_a_failed_batch_leaves_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "logs"
    folder.mkdir()
    for i in range(40):
        _small_log(folder / f"f{i:02d}.log", 3, i)
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="keep")
    before = _digest(store)
    monkeypatch.setattr(batch, "FLUSH_ROWS", 100)  # several flushes, the third one fails
    calls = []
    flush = batch._Pending.flush

    def failing(self, tx):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return flush(self, tx)

    monkeypatch.setattr(batch._Pending, "flush", failing)
    with pytest.raises(RuntimeError):
        ingest_paths(store, [folder])
    assert len(calls) == 3
    assert _digest(store) == before
    assert not store.has_run("logs")
