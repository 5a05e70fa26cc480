"""Hostile input, as a user with bad (or malicious) files would try it: every case ends in exit 0
or 2 within a bounded time, never a traceback or a hang; a failed ingest leaves the store as it
was; nothing is stored that the file does not spell (never part of a cut number); every record or
file that is left out is named. One section per promise of the README's ingest guarantees;
bench/hostile_ingest.py runs the same kinds of input through the command and prints the tally.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeproxy.cli import main
from moeproxy.errors import InputError
from moeproxy.ingest import FORMATS, ingest_paths, parse_file
from moeproxy.ingest.source import open_source
from moeproxy.store import Store

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
pytestmark = pytest.mark.timeout(60)


def _digest(store: Store) -> tuple:
    with store.read() as con:
        return tuple(tuple(map(tuple, con.execute(f"SELECT * EXCLUDE ({x}) FROM {t} ORDER BY ALL").fetchall()))
                     for t, x in (("runs", "created_at"), ("sources", "ingested_at"), ("scalars", "wall_time")))


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["ingest", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _values(frame) -> dict:
    return {(int(r.step), str(r.metric), int(r.attempt)): float(r.value) for r in frame.itertuples()}


# --- 1. an unterminated last line: never part of a number -------------------------------------

LINE_FORMATS = {
    "text": lambda s: f"step={s} loss={3.21 + s / 1000:.5f} lr=3.5e-4",
    "megatron": lambda s: f" iteration {s:>8}/ 1000 | lm loss: {3.21 + s / 1000:.6E} | grad norm: 41.{s:03d} |",
    "verl-console": lambda s: f"step:{s} - actor/grad_norm:{41.5 + s / 1000:.4f} - critic/score/mean:0.{s:03d}",
    "printed-dicts": lambda s: f"{{'loss': {3.21 + s / 1000:.4f}, 'grad_norm': 12.{s:02d}5, 'step': {s}}}",
    "mindspeed-rl": lambda s: f"iteration: {s} / 100 | actor/pg_loss : {0.1 + s / 1000:.4f} | grad_norm : 12.35{s}",
    "jsonl": lambda s: json.dumps({"step": s, "loss": 3.21 + s / 1000, "lr": 3e-4}),
    "verl-jsonl": lambda s: json.dumps({"step": s, "data": {"actor/grad_norm": 41.5 + s / 1000}}),
    "csv": lambda s: f"{s},{3.21 + s / 1000:.5f},12.35" if s else "step,loss,grad_norm",
}


def _full(fmt: str) -> str:
    return "".join(LINE_FORMATS[fmt](s) + "\n" for s in range(0 if fmt == "csv" else 1, 6))


@pytest.mark.parametrize("fmt", sorted(LINE_FORMATS))
def test_a_cut_last_line_stores_no_part_of_a_number(fmt, tmp_path):
    full = _full(fmt)
    whole = tmp_path / "full.log"
    whole.write_text(full)
    truth = _values(parse_file(whole, fmt).frame)
    last = LINE_FORMATS[fmt](5)
    start = len(full) - len(last) - 1
    for cut in range(1, len(last) + 1):  # every byte of the last line, up to the full line without "\n"
        path = tmp_path / "cut.log"
        path.write_text(full[: start + cut])
        parsed = parse_file(path, fmt)
        got = _values(parsed.frame)
        wrong = {k: v for k, v in got.items() if k not in truth or truth[k] != v}
        assert not wrong, f"cut at {cut}: {wrong}"
        data = path.read_bytes()
        assert parsed.sha256 == hashlib.sha256(data[: parsed.bytes_parsed]).hexdigest()
        if parsed.bytes_parsed < len(data):  # the last line was dropped: named, with its line number
            assert any("line 5" in w or "line 6" in w for w in parsed.warnings), parsed.warnings
            assert parsed.bytes_parsed == start


def test_the_issue_reproduction_drops_the_cut_line_with_a_warning(tmp_path, capsys):
    path = tmp_path / "cut.log"
    path.write_bytes(b"step=1 loss=3.21 lr=3e-4\nstep=2 loss=3.10 lr=3e")
    rc, out, err = _cli(capsys, path, "--db", tmp_path / "db.duckdb")
    assert rc == 0 and "line 2: no newline at the end of the file" in out and str(path) in out
    with duckdb.connect(str(tmp_path / "db.duckdb"), read_only=True) as con:
        assert con.execute("SELECT max(step), count(*) FROM scalars").fetchone() == (1, 2)
        assert con.execute("SELECT bytes FROM sources").fetchone() == (25,)


@pytest.mark.parametrize("text, kept", [
    (" iteration 1/ 10 | lm loss: 2.5 |\n iteration 2/ 10 | lm loss: 2.4 |", True),  # closes with '|'
    ("{'loss': 1.0, 'step': 1}\n{'loss': 2.0, 'step': 2}", True),  # closes with '}'
    ('{"step": 1, "loss": 1}\n{"step": 2, "loss": 2}', True),  # a whole JSON object
    ('{"step": 1, "loss": 1}\n{"step": 2, "loss": {"a": 2}', False),  # ends in '}', but not closed
    ("step=1 loss=2.5\nstep=2 loss=2.4", False),  # a digit last: 2.4 of 2.45?
    ("step=1 loss=2.5\nstep=2 loss=2.4 \x00\x00\x00", False),  # a crash-filled block
    ("step=1 loss=2.5\nstep=2 loss=2.4\xc3", False),  # cut inside a character (bytes below)
])
def test_an_unterminated_last_line_is_kept_only_when_it_closes_itself(tmp_path, text, kept):
    path = tmp_path / "x.log"
    path.write_bytes(text.encode("latin-1") if "\xc3" in text else text.encode())
    parsed = parse_file(path)
    assert (parsed.frame["step"].max() == 2) == kept
    assert bool(parsed.warnings) != kept
    assert parsed.bytes_parsed == (path.stat().st_size if kept else text.index("\n") + 1)


def test_a_file_still_growing_keeps_no_unterminated_line(tmp_path):
    path = tmp_path / "m.log"
    path.write_text(" iteration 1/ 10 | lm loss: 2.5 |\n iteration 2/ 10 | lm loss: 2.4 |")
    src = open_source(path)
    with open(path, "a") as fh:
        fh.write(" grad norm: 1.0 |\n")  # the line was still being written
    parsed = FORMATS["megatron"].parse(src)
    assert parsed.frame["step"].max() == 1 and "still being written" in src.warnings[0]


# --- 2. a log that grows, shrinks or is replaced while it is read ------------------------------

def _megatron_log(path: Path, steps: int) -> None:
    path.write_text("".join(f" iteration {s:>8}/ 99999 | lm loss: {1 + s / 1e5:.6E} | grad norm: 1.5 |\n"
                            for s in range(1, steps + 1)))


@pytest.mark.parametrize("two_processes", [False, True])
def test_lines_appended_after_open_are_not_read_and_the_hash_is_of_the_bytes_parsed(tmp_path, monkeypatch,
                                                                                    two_processes):
    from moeproxy.ingest.formats import megatron

    monkeypatch.setattr(megatron, "PARALLEL_MIN_BYTES", 0 if two_processes else 1 << 40)
    path = tmp_path / "grow.log"
    _megatron_log(path, 3000)
    src = open_source(path)
    size = src.size
    with open(path, "a") as fh:  # the job writes on while we read
        fh.write(" iteration     3001/ 99999 | lm loss: 9.0E+00 | grad norm: 9.0 |\n" * 1000)
    parsed = FORMATS["megatron"].parse(src)
    assert parsed.frame["step"].nunique() == 3000
    assert src.checked_sha256() == hashlib.sha256(path.read_bytes()[:size]).hexdigest()
    assert src.end == size


@pytest.mark.parametrize("change, says", [("truncate", "shrank"), ("replace", "replaced"), ("rewrite", "rewritten")])
@pytest.mark.parametrize("two_processes", [False, True])
def test_a_log_truncated_replaced_or_rewritten_while_read_is_an_error(tmp_path, monkeypatch, change, says,
                                                                      two_processes):
    from moeproxy.ingest.formats import megatron

    monkeypatch.setattr(megatron, "PARALLEL_MIN_BYTES", 0 if two_processes else 1 << 40)
    path = tmp_path / "log.log"
    _megatron_log(path, 3000)
    src = open_source(path)
    if change == "truncate":
        os.truncate(path, 1000)
    elif change == "replace":
        other = tmp_path / "other.log"
        _megatron_log(other, 3000)
        os.replace(other, path)
    else:  # same inode, same size, other bytes: a job restarted into the same file
        path.write_text(path.read_text().replace("lm loss", "lm LOSS"))
    with pytest.raises(InputError, match=says):
        FORMATS["megatron"].parse(src)


# --- 3. TensorBoard: a corrupt record is an error naming its offset; a cut last one is named ----

def _event_file(d: Path, steps: int = 100) -> Path:
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(d))
    for s in range(steps):
        w.add_scalar("loss", 1.0 + s, s)
    w.close()
    return next(d.glob("events.out.tfevents.*"))


@pytest.mark.parametrize("where", [0.3, 0.6, 0.9])
def test_a_corrupt_tensorboard_record_stops_the_read_there_and_is_named(tmp_path, where, capsys):
    """A record whose checksum fails mid-file (a crash mid-write, a bad block): the records before it
    are stored, the warning names its offset and the bytes not read, and what was stored before is
    unchanged (TensorBoard's own loader stops at its first bad record too)."""
    path = _event_file(tmp_path / "tb")
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0xFF
    path.write_bytes(bytes(data))
    store = Store(tmp_path / "db.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="keep")
    before = _digest(store)
    rc, out, err = _cli(capsys, path, "--db", store.path, "--run", "cut")
    m = re.search(r"record at offset (\d+): corrupt \((?:length|data) checksum mismatch\): bytes (\d+)-(\d+) not read",
                  out + err)
    assert rc == 0 and m, (rc, out, err)
    assert int(m.group(1)) == int(m.group(2)) <= int(len(data) * where) and int(m.group(3)) == len(data)
    after = _digest(store)
    assert set(before[2]) <= set(after[2]) and set(before[0]) <= set(after[0])   # the kept run untouched
    runs = store.runs().set_index("run")
    assert "keep" in runs.index and 0 < runs.loc["cut", "steps"] < 100
    parsed = parse_file(path)
    assert list(parsed.frame.sort_values("step")["value"]) == [1.0 + s for s in range(parsed.frame["step"].nunique())]


@pytest.mark.parametrize("where", [0.3, 0.6, 0.99])
def test_a_cut_tensorboard_file_keeps_the_whole_records_and_names_the_cut(tmp_path, where):
    path = _event_file(tmp_path / "tb")
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * where)])
    parsed = parse_file(path)
    n = parsed.frame["step"].nunique()
    assert 0 < n < 100 and re.search(r"offset \d+: the last record is cut", parsed.warnings[0])
    assert list(parsed.frame.sort_values("step")["value"]) == [1.0 + s for s in range(n)]
    assert parsed.sha256 == hashlib.sha256(data[: parsed.bytes_parsed]).hexdigest()


# --- 4. every skipped member of a directory is named, in text and JSON ------------------------

def test_every_skipped_directory_member_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "good.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1 / s}) + "\n" for s in range(1, 9)))
    (run / "malformed.jsonl").write_text('{"step": 1, "loss": 1}\n{"step": 2, "loss": ,}\n{"step": 3, "loss": 1}\n')
    (run / "notes.txt").write_text("nothing to see\n")
    (run / "empty.log").write_text("")
    os.mkfifo(run / "pipe.log")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(run / "sock"))
    (run / "dangling.log").symlink_to(tmp_path / "nowhere")
    names = ["malformed.jsonl", "notes.txt", "empty.log", "pipe.log", "sock", "dangling.log"]
    rc, out, err = _cli(capsys, run, "--db", tmp_path / "db.duckdb")
    assert rc == 0 and all(f"skipped {run / n}" in out for n in names), out
    assert "FIFO" in out and "socket" in out and "line 2: malformed JSON" in out
    rc, out, err = _cli(capsys, run, "--json", "--db", tmp_path / "db2.duckdb")
    skipped = {Path(e["path"]).name: e["reason"] for e in json.loads(out) if e["skipped"]}
    assert rc == 0 and sorted(skipped) == sorted(names)
    sock.close()


# --- 5. restarts beyond 32,767 --------------------------------------------------------------------

def test_more_than_32767_restarts_are_kept_in_order(tmp_path):
    one = tmp_path / "a" / "r.jsonl"
    two = tmp_path / "b" / "r.jsonl"
    for path, sign in ((one, 1), (two, -1)):
        path.parent.mkdir()
        path.write_text("".join(json.dumps({"step": 1, "loss": sign * float(i)}) + "\n" for i in range(20000)))
    store = Store(tmp_path / "db.duckdb")
    ingest_paths(store, [one], run="r")
    ingest_paths(store, [two], run="r")
    series = store.series("r", "loss", attempts="all")
    assert len(series) == 40000 and series["attempt"].max() == 39999
    assert store.series("r", "loss")["value"].tolist() == [-19999.0]  # the latest attempt is the last written


def test_a_schema_1_store_is_migrated_on_open(tmp_path):
    db = tmp_path / "old.duckdb"
    store = Store(db)
    ingest_paths(store, [LOGS / "megatron.log"], run="m")
    with duckdb.connect(str(db)) as con:  # as moeproxy with schema 1 left it
        con.execute("ALTER TABLE sources DROP COLUMN bytes")
        con.execute("ALTER TABLE scalars ALTER attempt SET DATA TYPE SMALLINT")
        con.execute("ALTER TABLE routing ALTER attempt SET DATA TYPE SMALLINT")
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    before = store.series("m", "loss")
    ingest_paths(store, [LOGS / "verl_file.jsonl"], run="v")
    assert store.series("m", "loss").equals(before)
    with duckdb.connect(str(db), read_only=True) as con:
        assert dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_name = 'scalars'").fetchall())["attempt"] == "INTEGER"
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(InputError, match="schema 99"):
        store.runs()


# --- 6, 7. one-line errors, never a rounded step, a traceback or a wrapped number --------------

DEEP = "[" * 5000 + "]" * 5000
HOSTILE_FILES: dict[str, tuple[str, str | bytes]] = {
    "step 1.5 jsonl": ("f.jsonl", '{"step": 0, "loss": 1.0}\n{"step": 1.5, "loss": 2.0}\n'),
    "step 1.5 verl-jsonl": ("f.jsonl", '{"step": 0, "data": {"a": 1}}\n{"step": 1.5, "data": {"a": 2}}\n'),
    "step 1.5 printed dicts": ("f.log", "{'loss': 1.0, 'step': 0}\n{'loss': 2.0, 'step': 1.5}\n"),
    "step -2^63-1 jsonl": ("i.jsonl", '{"step": 0, "loss": 1}\n{"step": -9223372036854775809, "loss": 2}\n'),
    "step 2^63 printed": ("i.log", "{'loss': 1.0, 'step': 9223372036854775808}\n"),
    "deep jsonl": ("d.jsonl", '{"step": 1, "loss": 1.0}\n{"step": 2, "x": ' + DEEP + "}\n"),
    "deep jsonl dicts": ("d.jsonl", '{"step": 1, "loss": 1.0}\n' + '{"a":' * 1500 + "1" + "}" * 1500 + "\n"),
    "deep trainer_state": ("trainer_state.json", '{"log_history": [{"step": 1, "loss": 1.0, "x": ' + DEEP + "}]}"),
    "deep trainer_state dicts": ("trainer_state.json", '{"log_history": [' + '{"a":' * 1500 + "1" + "}" * 1500 + "]}"),
    "deep json-records": ("r.json", '[{"step": 1, "x": ' + DEEP + "}]"),
    "500-digit step jsonl": ("s.jsonl", '{"step": ' + "9" * 500 + ', "loss": 1}\n'),
    "500-digit step text": ("s.log", "step " + "9" * 500 + " loss=1.0\n"),
    "500-digit step megatron": ("s.log", " iteration " + "9" * 500 + "/ 10 | lm loss: 1.0 |\n"),
    "500-digit step printed": ("s.log", "step " + "9" * 500 + ": {'loss': 1.0}\n"),
    "500-digit step verl": ("s.log", "step:" + "9" * 500 + " - a:1.0 - b:2.0\n"),
    "5000-digit step text": ("s.log", "step " + "9" * 5000 + " loss=1.0\n"),
    "5000-digit step megatron": ("s.log", " iteration " + "9" * 5000 + "/ 10 | lm loss: 1.0 |\n"),
    "inf step printed dicts": ("s.log", "{'loss': 1.0, 'step': 1}\n{'loss': 1.0, 'step': inf}\n"),
    "rank tag text": ("r.log", "[rank99999999999]: step=1 loss=1.0\n"),
    "rank tag megatron": ("r.log", "[rank99999999999]: iteration 1/ 10 | lm loss: 1.0 |\n"),
    "rank tag verl": ("r.log", "[rank99999999999]: step:1 - a:1.0 - b:2.0\n"),
    "rank directory csv": ("x-rank99999999999-y/m.csv", "vpp_stage,name,step,norm\n0,a,1,1.0\n"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_hostile_file_gives_one_line_and_leaves_the_store_unchanged(case, tmp_path, capsys):
    name, content = HOSTILE_FILES[case]
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    store = Store(tmp_path / "db.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="keep")
    before = _digest(store)
    rc, out, err = _cli(capsys, LOGS / "verl_console.log", path, "--db", store.path)
    assert rc == 2, out
    assert len(err.strip().splitlines()) == 1 and str(path) in err, err
    assert _digest(store) == before


def test_a_step_is_never_rounded_or_wrapped(tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text("step,loss\n0,1.0\n1.5,2.0\n9223372036854775807,4.0\n")
    frame = parse_file(csv).frame  # a CSV row whose step is no integer is skipped, as one of text or nan
    assert sorted(frame["step"]) == [0, 2**63 - 1] and sorted(frame["value"]) == [1.0, 4.0]
    csv.write_text("step,loss\n0,1.0\n-9223372036854775809,3.0\n")
    with pytest.raises(InputError, match="-9223372036854775809 is out of range"):  # read exactly, never wrapped
        parse_file(csv)


def test_a_value_beyond_the_float_range_is_inf_as_float_reads_it(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text('{"step": 1, "loss": ' + "9" * 400 + ', "kl": -' + "9" * 400 + "}\n")
    assert sorted(parse_file(path).frame["value"]) == [-math.inf, math.inf]


def test_a_closed_stdout_is_no_traceback(tmp_path):
    env = dict(os.environ, MOEPROXY_DB=str(tmp_path / "db.duckdb"))
    for command in ("formats", f"ingest --json {LOGS / 'verl_file.jsonl'}"):
        proc = subprocess.run(["bash", "-c", f"{sys.executable} -m moeproxy {command} | head -c 1"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert proc.stdout and proc.stderr == "", proc.stderr


# --- 8. every parser is linear in its input ------------------------------------------------------

PATTERNS = ["a", "a ", "1 ", "x: ", "key=", "a.", "1e", "{'a': ", "'a':'", "overflow! ", "iteration ",
            "step a ", "a/", "|a: 1", "a" + " " * 40]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fmt", ["auto", "text", "printed-dicts", "megatron", "verl-console", "mindspeed-rl",
                                 "csv", "jsonl"])
def test_a_100kb_line_of_hostile_repeats_parses_in_bounded_time(fmt, tmp_path):
    # a quadratic pattern took minutes on such lines (15 s on 30 KB); linear ones take well under a
    # second for all of them together
    for unit in PATTERNS:
        line = (unit * (100_000 // len(unit) + 1))[:100_000]
        path = tmp_path / "long.log"
        path.write_text("step 1 loss=1.0\n" + line + "\nstep 2 loss=2.0 " + line + "\n")
        try:
            parse_file(path, fmt)
        except InputError:
            pass


# --- 9. special files -------------------------------------------------------------------------------

@pytest.mark.timeout(20)
def test_a_fifo_or_device_is_refused_before_it_is_opened(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.log")  # opening it would block until a writer comes: forever
    for path, says in ((tmp_path / "pipe.log", "FIFO"), (Path("/dev/null"), "character device")):
        rc, out, err = _cli(capsys, path, "--db", tmp_path / "db.duckdb")
        assert rc == 2 and says in err and "not a regular file" in err


@pytest.mark.timeout(20)
def test_odd_paths_give_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "good.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n')
    (run / "up").symlink_to(run)  # a cycle: not walked forever
    (run / "loop_a").symlink_to(run / "loop_b")
    (run / "loop_b").symlink_to(run / "loop_a")
    rc, out, err = _cli(capsys, run, "--db", tmp_path / "db.duckdb")
    assert rc == 0 and "skipped" in out and "loop_a" in out and "symbolic links" in out
    for odd in ("x" * 5000, "a\x00b", str(run / "loop_a")):
        rc, out, err = _cli(capsys, odd, "--db", tmp_path / "db.duckdb")
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot read" in err


# --- fuzz: random logs, random cuts, hostile tokens --------------------------------------------------

NUMBER_TOKEN = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _numbers_in(text: str) -> set[float]:
    """Every float that some maximal numeric run of the text spells (with and without its sign)."""
    out = set()
    for m in NUMBER_TOKEN.finditer(text):
        for t in (m.group(0), m.group(0).lstrip("+-")):
            try:
                out.add(float(t))
                out.add(-float(t))
            except ValueError:
                pass
    return out


TOKENS = st.sampled_from([
    "step", "step=", "iter", "iteration", "|", " - ", ":", "=", ",", "{", "}", "'loss'", '"step"', ":", " ",
    "1", "2.5", "-3e-4", "3e", "41.", "1.2.3", "nan", "inf", "INF", "null", "np.float64(", ")", "[rank3]:",
    "\x00", "\r", "\t", "9" * 30, "a" * 50, "x: " * 5, "key=" * 5, "{'a': " * 5, "[", "]",
])
HOSTILE_LINES = st.lists(st.lists(TOKENS, max_size=12).map("".join), min_size=1, max_size=12).map("\n".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(sorted(LINE_FORMATS)), cut=st.integers(0, 400), noise=HOSTILE_LINES)
def test_fuzz_no_stored_value_is_not_in_the_file(tmp_path, fmt, cut, noise):
    text = _full(fmt)
    text = text[: max(1, len(text) - cut % 60)] if cut % 3 else noise + "\n" + text[: len(text) - cut % 40]
    path = tmp_path / "fuzz.log"
    path.write_bytes(text.encode())
    for forced in ("auto", fmt):
        try:
            parsed = parse_file(path, forced)
        except InputError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            continue
        spelled = _numbers_in(path.read_bytes()[: parsed.bytes_parsed].decode(errors="replace"))
        finite = [v for v in parsed.frame["value"] if math.isfinite(v)]
        assert all(v in spelled for v in finite), [v for v in finite if v not in spelled]


def test_crash_padding_inside_a_text_log_is_skipped_and_named_not_a_refusal(tmp_path):
    """A crash leaves a block of NUL bytes inside the log (at its head or past the first 64 KiB):
    the text around it is read, the run is named by its byte range, the hash covers the bytes."""
    import hashlib

    for lines_before in (10, 6000):
        before = "".join(f"step={s} loss={2 - s * 1e-4:.4f}\n" for s in range(1, lines_before + 1))
        after = "".join(f"step={s} loss=1.5\n" for s in range(lines_before + 1, lines_before + 21))
        data = before.encode() + b"step=9 lo" + b"\x00" * 4096 + after.encode()
        path = tmp_path / f"crash{lines_before}.log"
        path.write_bytes(data)
        parsed = parse_file(path)
        steps = set(parsed.frame["step"])
        assert {1, lines_before, lines_before + 1, lines_before + 20} <= steps
        start = len(before) + len("step=9 lo")
        assert any(f"bytes {start}-{start + 4096}: 4096 NUL" in w for w in parsed.warnings), parsed.warnings
        assert parsed.sha256 == hashlib.sha256(data[: parsed.bytes_parsed]).hexdigest()
