"""verl JSONL read by DuckDB (moeproxy.ingest.jsonl_duckdb) gives exactly what the careful
line-by-line path gives, or hands the file to it: never a third answer."""

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
from moeproxy.ingest.jsonl import parse_verl_jsonl_line_by_line
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


def _both(path):
    """(fast columns or None, the careful ParsedLog or the InputError it raised)."""
    fast = jsonl_duckdb.read_verl_jsonl(open_source(path))
    try:
        careful = parse_verl_jsonl_line_by_line(open_source(path))
    except (InputError, ValueError) as exc:  # ValueError: a step out of range, named by parse_file
        careful = exc
    return fast, careful


values = st.one_of(
    st.floats(allow_nan=False), st.none(), st.integers(-2**70, 2**70), st.booleans(),
    st.sampled_from(["1.5", "nan", "inf", "-Infinity", "abc", " 2 ", "1e5", "12%", "3ms", "1_000", "0x10", "", "null"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
keys = st.one_of(st.sampled_from(["actor/grad_norm", "actor/pg_loss", "critic/score/mean", "timing_s/gen"]),
                 st.text(max_size=8))
records = st.tuples(st.one_of(st.integers(-5, 50), st.integers(2**62, 2**64), st.floats(0, 10), st.none(),
                              st.just("3")),
                    st.one_of(st.dictionaries(keys, values, max_size=5), st.none(), st.just([1])))


def _line(step, data) -> str:
    obj = {}
    if step is not None:
        obj["step"] = step
    if data is not None:
        obj["data"] = data
    return json.dumps(obj)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(records, min_size=1, max_size=30), st.booleans(), st.sampled_from(["\n", "\n\n", "\n  "]))
def test_the_duckdb_path_agrees_with_the_careful_path(tmp_path, any_size, recs, nan_literal, gap):
    lines = [_line(step, data) for step, data in recs]
    if nan_literal:
        lines.append(json.dumps({"step": 99, "data": {"x": math.nan}}))  # Python's NaN: not JSON, DuckDB refuses
    path = tmp_path / "run.jsonl"
    path.write_text(gap.join(lines) + "\n")
    fast, careful = _both(path)
    if fast is None:
        return
    assert not isinstance(careful, Exception), careful
    if careful.frame.empty:
        assert len(fast[0]) == 0
        return
    parsed = parse_file(path, "verl-jsonl")  # the fast path, as ingest takes it
    _frames_equal(parsed.frame, careful.frame)
    assert parsed.sha256 == careful.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert parsed.skipped_lines == careful.skipped_lines


def test_a_typical_verl_file_takes_the_fast_path_with_nan_restarts_and_names(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    with open(path, "w") as fh:
        for step in list(range(1, 31)) + list(range(21, 41)):  # a restart from step 20's checkpoint
            data = {"actor/grad_norm": None if step == 25 else step * 0.5, "actor/pg_loss": 1.0 / step,
                    "critic/score/mean": float(step)}
            if step % 10 == 0:
                data["val/test_score"] = 0.5
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
    fast, careful = _both(path)
    assert fast is not None
    parsed = parse_file(path)
    _frames_equal(parsed.frame, careful.frame)
    assert parsed.frame["attempt"].max() == 1
    store = Store(tmp_path / "db.duckdb")
    [summary] = ingest_paths(store, [path], run="v")
    assert summary.attempts == 2 and summary.nonfinite == 2
    series = store.series("v", "grad_norm").set_index("step")["value"]
    assert math.isnan(series[25]) and series[30] == 15.0 and len(series) == 40


@pytest.mark.parametrize("tail, why", [
    ('{"step": 3, "data": {"a": 1', "cut"),  # no newline at the end: the careful path decides
    ('{"step": 3, "data": {"a": 1, "a": 2}}\n', "a key given twice"),
    ('{"step": 3, "data": {"a": [1, 2]}}\n', "a list"),
    ('{"step": 3, "data": {"a": 1, }}\n', "a trailing comma (DuckDB reads it, Python's json does not)"),
    ('{"step": 3, "data": {"a": 1}, "x": [1,\t]}\n', "a trailing comma outside data"),
    ('{"step": 3, "data": {"a": -inf}}\n', "an inf literal"),
    ('{"step": 3, "data": {"a": nan}}\n', "a nan literal"),
    ('{"step": 3, "data": {"a": 1}}\nsome prose\n', "prose"),
    ('{"step": 3.5, "data": {"a": 1}}\n', "fractional step"),
    ('{"step": 3, "data": {"a": "12%"}}\n', "text value"),
])
def test_what_duckdb_reads_otherwise_goes_to_the_careful_path(tmp_path, any_size, tail, why):
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "data": {"a": 2}}\n' + tail)
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None, why


numbers = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.none(), st.integers(-2**70, 2**70), st.booleans(),
                    st.sampled_from(["1.5", "nan", "-inf", "1e5"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(-3, 40), st.dictionaries(st.sampled_from(["actor/grad_norm", "a b", "x@1", "é"]),
                                                                numbers, min_size=1, max_size=6)),
                min_size=1, max_size=40))
def test_numbers_nulls_and_restarts_take_the_fast_path_and_agree(tmp_path, any_size, recs):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(_line(step, data) + "\n" for step, data in recs))
    fast, careful = _both(path)
    assert fast is not None
    _frames_equal(parse_file(path, "verl-jsonl").frame, careful.frame)


def test_a_file_that_grows_while_duckdb_reads_it_goes_to_the_careful_path(tmp_path, any_size, monkeypatch):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": {"a": s}}) + "\n" for s in range(1, 50)))
    query = jsonl_duckdb._query

    def growing(src):
        with open(path, "a") as fh:
            fh.write(json.dumps({"step": 50, "data": {"a": 50}}) + "\n")
        return query(src)

    monkeypatch.setattr(jsonl_duckdb, "_query", growing)
    parsed = parse_file(path)
    assert parsed.frame["step"].max() == 49  # the size seen at open, as the careful path reads it
    assert parsed.sha256 == hashlib.sha256(path.read_bytes()[: parsed.bytes_parsed]).hexdigest()


def test_a_nul_byte_leaves_the_file_to_the_careful_path_which_names_it(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    lines = [json.dumps({"step": s, "data": {"a": s}}) for s in range(1, 4000)]  # past the 64 KiB head
    lines[3000] = lines[3000].replace('"a"', '"a\x00"')
    path.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    with pytest.raises(InputError, match=r"line 3001: NUL byte"):
        parse_file(path)


def test_a_malformed_line_after_the_first_batch_is_named_by_the_careful_path(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    lines = [json.dumps({"step": s, "data": {"a": s}}) for s in range(1, 70001)]
    lines[68999] = '{"step": 69000, "data": {"a": 1,}}'
    path.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    with pytest.raises(InputError, match=r"line 69000: malformed JSON"):
        parse_file(path)


@pytest.mark.parametrize("chunk", [3, 64, 100, 1 << 20])
def test_the_strict_json_check_holds_across_chunk_boundaries(tmp_path, any_size, monkeypatch, chunk):
    monkeypatch.setattr(jsonl_duckdb, "CHUNK", chunk)
    lines = [json.dumps({"step": s, "data": {"a": s, "b": None, "c": -s}}) for s in range(1, 300)]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_verl_jsonl(open_source(good)) is not None
    for at in (0, 1, 150, 298):
        for bad_line in ('{"step": 1, "data": {"a": 1, }}', '{"step": 1, "data": {"a":   nan}}',
                         '{"step": 1, "data": {"a": -Infinity}}'):
            bad = tmp_path / "bad.jsonl"
            bad.write_text("\n".join(lines[:at] + [bad_line] + lines[at + 1:]) + "\n")
            assert jsonl_duckdb.read_verl_jsonl(open_source(bad)) is None, (at, bad_line)
