"""A JSON record as the ``jsonl`` format reads it: nested objects flattened with ``/``, lists
dropped, the step taken from the first step key that holds a number and every step key taken out
of the metrics. ``flatten`` and ``split_step`` take shortcuts for flat records (the usual case);
they must give what the plain definition below gives, for any record, keys in file order."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from moeproxy.ingest.formats.jsonl import STEP_KEYS, flatten, split_step


def plain_flatten(obj: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in obj.items():
        if isinstance(value, dict):
            out.update(plain_flatten(value, f"{prefix}{key}/"))
        elif not isinstance(value, list):
            out[f"{prefix}{key}"] = value
    return out


def plain_split_step(record: dict):
    for key in STEP_KEYS:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            return value, {k: v for k, v in record.items() if k not in STEP_KEYS}
    return None, record


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3))
keys = st.one_of(st.sampled_from([*STEP_KEYS, "loss", "a/b", "train"]), st.text(max_size=4))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                       st.dictionaries(keys, inner, max_size=3)), max_leaves=8)


@given(st.dictionaries(keys, values, max_size=8))
@example({"loss": 0.5, "Step": 7, "iteration": 2, "step": None})  # a numeric step key: every step key leaves
def test_flatten_and_split_step_read_any_record_as_the_plain_definition_does(record):
    step, metrics = split_step(flatten(record))
    expected_step, expected = plain_split_step(plain_flatten(record))
    assert step == expected_step or (step != step and expected_step != expected_step)
    assert list(metrics.items()) == list(expected.items()) or (
        list(metrics) == list(expected) and all(a == b or (a != a and b != b)
                                                for a, b in zip(metrics.values(), expected.values())))


def test_a_flat_record_is_copied_not_shared():
    record = {"step": 3, "loss": 1.5}
    flat = flatten(record)
    assert flat == record and flat is not record
    step, metrics = split_step(flat)
    assert (step, metrics) == (3, {"loss": 1.5}) and "step" in flat  # the record itself keeps its step


@given(st.lists(st.sampled_from(STEP_KEYS), unique=True, min_size=1), st.integers(0, 10**6),
       st.dictionaries(st.sampled_from(["loss", "grad_norm", "a/b"]), st.floats(), max_size=3))
def test_every_step_key_leaves_the_metrics_once_one_holds_a_number(step_keys, step, metrics):
    record = {key: step + i for i, key in enumerate(step_keys)} | metrics
    got_step, got = split_step(flatten(record))
    assert got_step == record[next(k for k in STEP_KEYS if k in step_keys)]
    assert list(got) == list(metrics)
