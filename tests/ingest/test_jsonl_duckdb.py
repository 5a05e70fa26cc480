"""verl JSONL read by DuckDB (moeproxy.ingest.formats.jsonl_duckdb) gives exactly what the careful
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
from moeproxy.ingest import ingest_paths, parse_file
from moeproxy.ingest.formats import jsonl_duckdb
from moeproxy.ingest.formats.jsonl import parse_verl_jsonl_line_by_line
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


def _both(path):
    """(fast columns or None, the careful ParsedLog or the InputError it raised)."""
    fast = jsonl_duckdb.read_verl_jsonl(open_source(path))
    try:
        careful = parse_verl_jsonl_line_by_line(open_source(path))
    except (InputError, ValueError) as exc:  # ValueError: a step out of range, named by parse_file
        careful = exc
    return fast, careful


values = st.one_of(
    st.floats(), st.none(), st.integers(-2**70, 2**70), st.booleans(),
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
    _fast_agrees_or_is_none(path)


def _fast_agrees_or_is_none(path) -> bool:
    """Whether the fast path read the file; when it did, it agrees with the careful path exactly."""
    fast, careful = _both(path)
    if fast is None:
        return False
    assert not isinstance(careful, Exception), careful
    assert careful.skipped_lines == 0
    if careful.frame.empty:
        assert len(fast[0]) == 0
        return True
    parsed = parse_file(path, "verl-jsonl")  # the fast path, as ingest takes it
    _frames_equal(parsed.frame, careful.frame)
    assert parsed.sha256 == careful.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert parsed.skipped_lines == careful.skipped_lines
    return True


# JSON text spelled by hand: mostly what both paths read alike, now and then (1 in 20 choices) what
# DuckDB reads and Python's json does not, or reads otherwise
def _pick(draw, plain: list[str], odd: list[str]) -> str:
    return draw(st.sampled_from(odd if draw(st.integers(0, 19)) == 13 else plain))


@st.composite
def spelled_lines(draw) -> str:
    def value() -> str:
        return _pick(draw, ["1", "-0", "0.5", "-0.0", "-1.5e-3", "1E+2", "1e400", "-1e400", "18446744073709551616",
                            "null", "true", "false", "NaN", "Infinity", "-Infinity"],
                     ["nan", "-nan", "inf", "-inf", "INF", "infinity", "-NaN", "NAN", '"1.5"', '"abc"', '"nan"', "[]",
                      "[1]", "{}", '{"b": 1}'])

    keys = draw(st.lists(st.sampled_from(['"a"', '"b"', '"a b"', '"\\u00e9"', '"a\\u0022b"', '"c/d"']),
                         unique=True, max_size=4))
    keys = [_pick(draw, [k], ['"a:b"', '"a,b"', '"a\\"b"', '"\\u0061"', '"b"']) for k in keys]  # odd: a key twice too
    members = [k + ":" + _pick(draw, ["", " ", "\t"], ["\r"]) + value() for k in keys]
    data = "{" + ", ".join(members) + _pick(draw, [""], [",", " ,"]) + "}"
    data = _pick(draw, [data], ["5", "true", "null", '"x"', "[1]"])
    step = _pick(draw, ["1", "2", "-3", "7"], ["2.0", "true", '"4"', "18446744073709551615"])
    top = [f'"step": {step}', f'"data": {data}']
    if draw(st.integers(0, 19)) == 13:
        top.append(draw(st.sampled_from(['"x": 1', '"x": nan', '"x": "s"', '"step": 5', '"data": {}'])))
    sep = _pick(draw, [", ", ",", ", \t"], [",\r"])
    return "{" + sep.join(draw(st.permutations(top))) + _pick(draw, ["", " "], [",", "\r"]) + "}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(spelled_lines(), min_size=1, max_size=6))
def test_spelled_json_is_read_as_the_careful_path_reads_it_or_left_to_it(tmp_path, any_size, lines):
    path = tmp_path / "run.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    _fast_agrees_or_is_none(path)


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
    ('{"step": 3, "data": {"a": [1, 2]}}\n', "a list"),
    ('{"step": 3, "data": {"a": 1}}\nsome prose\n', "prose"),
    ('{"step": 3.5, "data": {"a": 1}}\n', "fractional step"),
    ('{"step": 3, "data": {"a": "12%"}}\n', "text DuckDB cannot cast"),
    ('{"step": 3, "data": {"a": {"b": 1}}}\n', "an object as a value"),
    ('{"step": 3, "data": {"a": 1}, "step": 4}\n', "a top-level key given twice"),
])
def test_what_duckdb_reads_otherwise_goes_to_the_careful_path(tmp_path, any_size, tail, why):
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "data": {"a": 2}}\n' + tail)
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None, why


numbers = st.one_of(st.floats(), st.none(), st.integers(-2**70, 2**70), st.booleans(),
                    st.sampled_from([10**400, -10**400, 2**1024 - 2**970 - 1, 2**63, -2**63 - 1]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(-3, 40), st.dictionaries(st.sampled_from(["actor/grad_norm", "a b", "x@1", "é"]),
                                                                numbers, min_size=1, max_size=6)),
                min_size=1, max_size=40))
def test_numbers_nulls_nonfinite_and_restarts_take_the_fast_path_and_agree(tmp_path, any_size, recs):
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
    parsed = parse_file(path)  # the careful path reads around it and names the byte
    at = len("\n".join(lines[:3000])) + 1 + lines[3000].index("\x00")
    assert any(w.startswith(f"bytes {at}-{at + 1}: 1 NUL") for w in parsed.warnings), parsed.warnings
    assert 3001 not in set(parsed.frame["step"]) and {3000, 3002} <= set(parsed.frame["step"])


def test_a_malformed_line_after_the_first_batch_is_named_by_the_careful_path(tmp_path, any_size):
    path = tmp_path / "run.jsonl"
    lines = [json.dumps({"step": s, "data": {"a": s}}) for s in range(1, 70001)]
    lines[68999] = '{"step": 69000, "data": {"a": 1,}}'
    path.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    with pytest.raises(InputError, match=r"line 69000: malformed JSON"):
        parse_file(path)


def _with_tail(tmp_path, tail: str):
    path = tmp_path / "run.jsonl"
    path.write_bytes(('{"step": 1, "data": {"a": 1}}\n{"step": 2, "data": {"a": 2}}\n' + tail).encode())
    return path


@pytest.mark.parametrize("tail, why", [
    ('{"step": 3, "data": {"a": "1.5"}}\n', "a string value, even one DuckDB casts: text is the careful path's"),
    ('{"step": 3, "data": {"a": 1, }}\n', "a trailing comma inside data (DuckDB reads it, Python's json does not)"),
    ('{"step": 3, "data": {"a": 1},}\n', "a trailing comma outside data"),
    ('{"step": 3, "data": {"a": 1}, "x": nan}\n', "an extra member (DuckDB skips it, Python's json refuses nan)"),
])
def test_what_the_byte_counts_catch_goes_to_the_careful_path(tmp_path, any_size, tail, why):
    assert jsonl_duckdb.read_verl_jsonl(open_source(_with_tail(tmp_path, tail))) is None, why


def test_a_key_given_twice_in_data_goes_to_the_careful_path(tmp_path, any_size):
    path = _with_tail(tmp_path, '{"step": 3, "data": {"a": 1, "b": 5, "a": 2}}\n')  # json_keys lists it twice
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    # the careful path: the last value, at the first place
    assert parse_file(path, "verl-jsonl").frame["value"].tolist() == [1.0, 2.0, 2.0, 5.0]


@pytest.mark.parametrize("data", ["5", "true", "null", "{}"])
def test_data_that_is_not_an_object_goes_to_the_careful_path_which_counts_it_skipped(tmp_path, any_size, data):
    path = _with_tail(tmp_path, '{"step": 3, "data": %s}\n' % data)
    if data == "{}":  # an object without members: no record on both paths, none skipped
        assert _fast_agrees_or_is_none(path)
        return
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    assert parse_file(path, "verl-jsonl").skipped_lines == 1


@pytest.mark.parametrize("literal", ["nan", "-nan", "NAN", "-NaN", "inf", "-inf", "INF", "Inf", "infinity", "-infinity",
                                     "INFINITY"])
def test_nan_and_inf_literals_python_refuses_go_to_the_careful_path(tmp_path, any_size, literal):
    path = _with_tail(tmp_path, '{"step": 3, "data": {"a": 1.5, "b": %s, "c": null}}\n' % literal)
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    with pytest.raises(InputError, match=r"line 3: malformed JSON"):
        parse_file(path, "verl-jsonl")


def test_nan_infinity_and_overflow_take_the_fast_path_and_agree(tmp_path, any_size):
    path = _with_tail(tmp_path, '{"step": 3, "data": {"a": NaN, "b": Infinity, "c": -Infinity, "d": 1e400, '
                                '"e": -1e400, "f": true, "g": false, "h": null, "i": -0.0, "j": -0}}\n'
                                '{"step": 4, "data": {"a":NaN,"b":\tInfinity ,"c":-Infinity}}\n')
    assert _fast_agrees_or_is_none(path)
    values = parse_file(path, "verl-jsonl").frame["value"].tolist()[2:]
    assert [str(v) for v in values] == ["nan", "inf", "-inf", "inf", "-inf", "1.0", "0.0", "nan", "-0.0", "0.0",
                                        "nan", "inf", "-inf"]


def test_a_carriage_return_inside_a_line_goes_to_the_careful_path(tmp_path, any_size):
    path = _with_tail(tmp_path, '{"step": 3,\r"data": {"a": 1}}\n')  # DuckDB: a space; Python: a line break
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
    with pytest.raises(InputError, match=r"line 3: malformed JSON"):
        parse_file(path, "verl-jsonl")


@pytest.mark.parametrize("chunk", [3, 64, 100, 1 << 20])
def test_the_byte_counts_hold_across_chunk_boundaries(tmp_path, any_size, monkeypatch, chunk):
    monkeypatch.setattr(jsonl_duckdb, "CHUNK", chunk)
    lines = [json.dumps({"step": s, "data": {"a": s, "b": None, "c": -s, "d": 10 ** (s % 5)}}) for s in range(1, 300)]
    good = tmp_path / "good.jsonl"
    for newline in ("\n", "\r\n"):
        text = (newline.join(lines) + newline).encode()
        if newline == "\r\n" and chunk < len(text):  # a \r\n split by a chunk boundary
            assert any(text[at - 1:at + 1] == b"\r\n" for at in range(chunk, len(text), chunk))
        good.write_bytes(text)
        assert _fast_agrees_or_is_none(good), repr(newline)
    for at in (0, 1, 150, 298):
        for bad_line in ('{"step": 1, "data": {"a": 1, }}', '{"step": 1, "data": {"a": "1"}}',
                         '{"step": 1, "data": {"a": 1}, "x": 1}', '{"step": 1,\r"data": {"a": 1}}',
                         '{"step": 1, "data": {"a":   nan}}'):
            bad = tmp_path / "bad.jsonl"
            bad.write_bytes(("\n".join(lines[:at] + [bad_line] + lines[at + 1:]) + "\n").encode())
            assert jsonl_duckdb.read_verl_jsonl(open_source(bad)) is None, (at, bad_line)


def test_key_lists_first_seen_after_the_head_are_read_by_their_text(tmp_path, any_size, monkeypatch):
    """The head's key lists are compared in DuckDB; a list that first shows up later (validation
    metrics from step 3000, a new metric) comes back as text, and a late key given twice still
    goes to the careful path."""
    lines = []
    for step in range(1, 4001):
        data = {"actor/grad_norm": step * 0.5, "actor/pg_loss": 1.0 / step}
        if step >= 3000 and step % 10 == 0:
            data["val/test_score"] = 0.25
        if step >= 3500:
            data = {"critic/score/mean": float(step)} | data
        lines.append(json.dumps({"step": step, "data": data}))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > len(open_source(path).head)  # the late lists are past the head
    fast, careful = _both(path)
    assert fast is not None
    _frames_equal(parse_file(path).frame, careful.frame)
    for head_layouts in (0, 1):  # none known: every list as text; the usual case
        monkeypatch.setattr(jsonl_duckdb, "HEAD_LAYOUTS", head_layouts or 32)
        if not head_layouts:
            monkeypatch.setattr(jsonl_duckdb, "_head_layouts", lambda src: [])
        _frames_equal(parse_file(path).frame, careful.frame)
    lines[3900] = '{"step": 3901, "data": {"actor/grad_norm": 1.0, "actor/grad_norm": 2.0, "actor/pg_loss": 0.5}}'
    path.write_text("\n".join(lines) + "\n")
    assert jsonl_duckdb.read_verl_jsonl(open_source(path)) is None
