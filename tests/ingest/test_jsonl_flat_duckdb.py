"""Flat JSON records (the ``jsonl`` format: ``{"step": N, "loss": ..., ...}`` per line) read by
DuckDB (``jsonl_duckdb.read_flat_jsonl``) give exactly what the careful line-by-line path gives,
or hand the file to it: never a third answer."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeproxy.errors import InputError
from moeproxy.ingest import ingest_paths, jsonl_duckdb, parse_file
from moeproxy.ingest.jsonl import STEP_KEYS, parse_jsonl_line_by_line
from moeproxy.ingest.source import open_source
from moeproxy.store import Store

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def any_size(monkeypatch):
    monkeypatch.setattr(jsonl_duckdb, "MIN_BYTES", 0)


def _frames_equal(a, b) -> None:
    assert len(a) == len(b)
    for column in ("step", "attempt", "rank"):
        assert a[column].tolist() == b[column].tolist(), column
    assert a["metric"].astype(str).tolist() == b["metric"].astype(str).tolist()
    va, vb = a["value"].to_numpy(), b["value"].to_numpy()
    assert np.array_equal(va, vb, equal_nan=True)
    assert np.array_equal(np.signbit(va), np.signbit(vb))  # -0.0 too


def _fast_agrees_or_is_none(path) -> bool:
    """Whether the fast path read the file; when it did, it agrees with the careful path exactly."""
    fast = jsonl_duckdb.read_flat_jsonl(open_source(path))
    try:
        careful = parse_jsonl_line_by_line(open_source(path))
    except (InputError, ValueError) as exc:  # ValueError: a step out of range, named by parse_file
        careful = exc
    if fast is None:
        return False
    assert not isinstance(careful, Exception), careful
    assert careful.skipped_lines == 0
    if careful.frame.empty:  # no values: both paths agree there is nothing (parse_file refuses the file)
        assert len(fast[0][0]) == 0
        return True
    parsed = parse_file(path, "jsonl")  # the fast path, as ingest takes it
    _frames_equal(parsed.frame, careful.frame)
    assert parsed.sha256 == careful.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (parsed.skipped_lines, parsed.step_from_index) == (careful.skipped_lines, careful.step_from_index)
    assert parsed.framework == careful.framework
    return True


values = st.one_of(
    st.floats(), st.none(), st.integers(-2**70, 2**70), st.booleans(),
    st.sampled_from(["1.5", "nan", "abc", ""]), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
keys = st.one_of(st.sampled_from(["loss", "grad_norm", "train/learning_rate", "rewards/mean", "a b"]),
                 st.sampled_from(STEP_KEYS), st.text(max_size=6))
steps = st.one_of(st.integers(-5, 60), st.integers(2**52, 2**64), st.floats(0, 10), st.none(), st.booleans(),
                  st.just("3"))
records = st.tuples(st.sampled_from(["step", "global_step", "_step", "iteration", None]), steps,
                    st.dictionaries(keys, values, max_size=5))


def _line(step_key, step, metrics) -> str:
    obj = {} if step_key is None else {step_key: step}
    obj.update(metrics)
    return json.dumps(obj)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(records, min_size=1, max_size=30), st.booleans(), st.sampled_from(["\n", "\n\n", "\n  "]))
def test_the_duckdb_path_agrees_with_the_careful_path(tmp_path, any_size, recs, nan_literal, gap):
    lines = [_line(*rec) for rec in recs]
    if nan_literal:
        lines.append(json.dumps({"step": 99, "x": math.nan}))  # Python's NaN: not JSON, DuckDB refuses
    path = tmp_path / "run.jsonl"
    path.write_text(gap.join(lines) + "\n")
    _fast_agrees_or_is_none(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["step", "global_step", "train/global_step", None]), st.integers(-3, 40),
                          st.dictionaries(st.sampled_from(["loss", "grad_norm", "a b", "x@1", "é", "iteration"]),
                                          st.one_of(st.floats(), st.none(), st.integers(-10, 10)), max_size=4)),
                min_size=1, max_size=40))
def test_numbers_nulls_nonfinite_restarts_and_indexes_take_the_fast_path_and_agree(tmp_path, any_size, recs):
    """What flat loggers write (numbers, null, NaN / Infinity from Python's json, a step key or
    none, a restart) is read by DuckDB, and as the careful path reads it."""
    recs = [(k, s, {m: v for m, v in metrics.items() if m not in STEP_KEYS}) for k, s, metrics in recs]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(_line(*rec) + "\n" for rec in recs))
    assert _fast_agrees_or_is_none(path)


# JSON text spelled by hand: mostly what both paths read alike, now and then (1 in 20 choices) what
# DuckDB reads and Python's json does not, or reads otherwise
def _pick(draw, plain: list[str], odd: list[str]) -> str:
    return draw(st.sampled_from(odd if draw(st.integers(0, 19)) == 13 else plain))


@st.composite
def spelled_lines(draw) -> str:
    def value() -> str:
        return _pick(draw, ["1", "-0", "0.5", "-0.0", "-1.5e-3", "1E+2", "1e400", "-1e400", "18446744073709551616",
                            "null", "NaN", "Infinity", "-Infinity"],
                     ["true", "false", "nan", "-nan", "inf", "INF", "infinity", "-NaN", '"1.5"', '"abc"', "[]", "[1]",
                      "{}", '{"b": 1}'])

    keys = draw(st.lists(st.sampled_from(['"a"', '"b"', '"a b"', '"\\u00e9"', '"a\\u0022b"', '"c/d"', '"epoch"']),
                         unique=True, max_size=4))
    keys = [_pick(draw, [k], ['"a:b"', '"a,b"', '"a\\"b"', '"\\u0061"', '"b"', '"step"', '"_step"']) for k in keys]
    members = [k + ":" + _pick(draw, ["", " ", "\t"], ["\r"]) + value() for k in keys]
    step_key = _pick(draw, ['"step"', '"global_step"', '"iteration"'], ['"Step"', '"iter"', ""])
    if step_key:
        step = _pick(draw, ["1", "2", "-3", "7", "1e1"], ["2.0", "2.5", "true", '"4"', "null", "18446744073709551615"])
        members.insert(draw(st.integers(0, len(members))), f"{step_key}: {step}")
    sep = _pick(draw, [", ", ",", ", \t"], [",\r"])
    return "{" + sep.join(members) + _pick(draw, ["", " "], [",", "\r"]) + "}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(spelled_lines(), min_size=1, max_size=6))
def test_spelled_json_is_read_as_the_careful_path_reads_it_or_left_to_it(tmp_path, any_size, lines):
    path = tmp_path / "run.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    _fast_agrees_or_is_none(path)


def test_a_typical_trainer_log_takes_the_fast_path_with_its_restart_and_names(tmp_path, any_size):
    lines = [json.dumps({"step": s, "loss": 2.0 - s / 100, "grad_norm": 1.0 if s != 40 else math.inf,
                         "learning_rate": 1e-5, "epoch": s / 50}) for s in range(1, 61)]
    lines += [json.dumps({"step": s, "loss": 1.5, "grad_norm": None, "learning_rate": 1e-5}) for s in range(30, 41)]
    path = tmp_path / "trainer.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert _fast_agrees_or_is_none(path)
    parsed = parse_file(path)
    assert parsed.format == "jsonl" and not parsed.step_from_index
    frame = parsed.frame
    assert sorted(set(frame["metric"])) == ["epoch", "grad_norm", "learning_rate", "loss"]  # the step is no metric
    assert frame["attempt"].max() == 1  # the restart at step 30
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [path], run="trainer")
    assert store.run_info("trainer")["attempts"] == 2


def test_records_without_a_step_key_are_numbered_by_their_index(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({"loss": 1.0 / (i + 1), "reward": i}) + "\n" for i in range(50))
                    + "\n" + json.dumps({}) + "\n" + json.dumps({"loss": 0.5}) + "\n")
    assert _fast_agrees_or_is_none(path)
    parsed = parse_file(path)
    assert parsed.step_from_index
    assert parsed.frame["step"].max() == 51  # the empty record counts: the careful path numbers it too


def test_the_first_step_key_in_order_is_the_step_and_every_step_key_leaves_the_metrics(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({"global_step": 1000 + s, "loss": 1.0, "step": s, "iteration": -s}) + "\n"
                            for s in range(1, 40)))
    assert _fast_agrees_or_is_none(path)
    frame = parse_file(path).frame
    assert frame["step"].tolist() == list(range(1, 40)) and set(frame["metric"]) == {"loss"}


def _with_tail(tmp_path, tail: str):
    path = tmp_path / "run.jsonl"
    path.write_bytes(('{"step": 1, "loss": 1}\n{"step": 2, "loss": 2}\n' + tail).encode())
    return path


@pytest.mark.parametrize("tail, why", [
    ('{"step": true, "loss": 3}\n', "a boolean step: the careful path passes it over, DuckDB reads 1.0"),
    ('{"step": 3, "done": false}\n', "any boolean (the bytes are searched, not the step alone)"),
    ('{"step": null, "loss": 3}\n', "a step key without a number: the careful path keeps it as a metric"),
    ('{"step": NaN, "loss": 3}\n', "a NaN step: the careful path passes it over"),
    ('{"step": 2.5, "loss": 3}\n', "a step that is no whole number: the careful path refuses it"),
    ('{"step": 9007199254740993, "loss": 3}\n', "an integer step a float does not hold exactly"),
    ('{"step": 3, "loss": "1.5"}\n', "a string value: text is the careful path's"),
    ('{"step": 3, "loss": 1, }\n', "a trailing comma (DuckDB reads it, Python's json does not)"),
    ('{"step": 3, "loss": {"a": 1}}\n', "a nested object: the careful path flattens it"),
    ('{"step": 3, "loss": 1, "loss": 2}\n', "a key given twice"),
    ('[1, 2]\n', "a line that is no object"),
    ('{"step": 3,\r"loss": 1}\n', "a carriage return inside a line (DuckDB: a space; Python: a line break)"),
    ('{"step": 3, "loss": nan}\n', "a NaN literal Python's json refuses"),
])
def test_what_duckdb_reads_otherwise_goes_to_the_careful_path(tmp_path, any_size, tail, why):
    path = _with_tail(tmp_path, tail)
    assert jsonl_duckdb.read_flat_jsonl(open_source(path)) is None, why
    try:
        careful = parse_jsonl_line_by_line(open_source(path))
    except (InputError, ValueError):
        return  # refused and named: the fast path must not read it either (it did not)
    _frames_equal(parse_file(path, "jsonl").frame, careful.frame)


def test_nan_infinity_and_overflow_take_the_fast_path_and_agree(tmp_path, any_size):
    path = _with_tail(tmp_path, '{"step": 3, "a": NaN, "b": Infinity, "c": -Infinity, "d": 1e400, "e": -1e400, '
                                '"h": null, "i": -0.0, "j": -0}\n{"step": 4, "a":NaN,"b":\tInfinity ,"c":-Infinity}\n')
    assert _fast_agrees_or_is_none(path)
    values = parse_file(path, "jsonl").frame["value"].tolist()[2:]
    assert [str(v) for v in values] == ["nan", "inf", "-inf", "inf", "-inf", "nan", "-0.0", "0.0", "nan", "inf", "-inf"]


@pytest.mark.parametrize("chunk", [3, 5, 64, 1 << 20])
def test_the_byte_counts_and_the_boolean_search_hold_across_chunk_boundaries(tmp_path, any_size, monkeypatch, chunk):
    monkeypatch.setattr(jsonl_duckdb, "CHUNK", chunk)
    lines = [json.dumps({"step": s, "a": s, "b": None, "c": -s, "d": 10 ** (s % 5)}) for s in range(1, 300)]
    good = tmp_path / "good.jsonl"
    for newline in ("\n", "\r\n"):
        good.write_bytes((newline.join(lines) + newline).encode())
        assert _fast_agrees_or_is_none(good), repr(newline)
    for at in (0, 1, 150, 298):
        for bad_line in ('{"step": 1, "a": 1, }', '{"step": 1, "a": "1"}', '{"step": true, "a": 1}',
                         '{"step": 1, "a": false}', '{"step": 1,\r"a": 1}', '{"step": 1, "a":   nan}'):
            bad = tmp_path / "bad.jsonl"
            bad.write_bytes(("\n".join(lines[:at] + [bad_line] + lines[at + 1:]) + "\n").encode())
            assert jsonl_duckdb.read_flat_jsonl(open_source(bad)) is None, (at, bad_line)


def test_key_lists_first_seen_after_the_head_are_read_by_their_text(tmp_path, any_size, monkeypatch):
    lines = []
    for step in range(1, 4001):
        record = {"step": step, "loss": 1.0 / step, "grad_norm": step * 0.5}
        if step >= 3000 and step % 10 == 0:
            record["eval/loss"] = 0.25
        if step >= 3500:
            record = {"reward": float(step)} | record
        lines.append(json.dumps(record))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > len(open_source(path).head)  # the late lists are past the head
    assert _fast_agrees_or_is_none(path)
    monkeypatch.setattr(jsonl_duckdb, "_head_layouts", lambda src, flat: [])  # none known: every list as text
    careful = parse_jsonl_line_by_line(open_source(path))
    _frames_equal(parse_file(path).frame, careful.frame)
    lines[3900] = '{"step": 3901, "loss": 1.0, "loss": 2.0, "grad_norm": 0.5}'
    path.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_flat_jsonl(open_source(path)) is None


def test_a_malformed_line_deep_in_a_large_file_is_named_by_the_careful_path(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    lines = [json.dumps({"step": s, "loss": 1.0 / s}) for s in range(1, 70001)]
    lines[68999] = '{"step": 69000, "loss": 1,}'
    path.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_flat_jsonl(open_source(path)) is None
    with pytest.raises(InputError, match=r"line 69000: malformed JSON"):
        parse_file(path)
