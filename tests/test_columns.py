"""The numpy long table (moeproxy.columns) and the store's grouping of rows by metric: the same
answers as the pandas frame and a stable sort, without pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeproxy.columns import Columns, arrow_array, arrow_strings
from moeproxy.store import Store, _grouped_order


def _rows(codes, names, steps=None) -> Columns:
    n = len(codes)
    steps = np.arange(n) if steps is None else steps
    return Columns(steps, codes, names, np.arange(n) * 0.5, np.zeros(n, np.int32), np.full(n, -1, np.int32),
                   np.full(n, np.nan))


@settings(max_examples=60, deadline=None)
@given(st.one_of(
    st.lists(st.integers(0, 6), max_size=60),  # any order
    st.tuples(st.permutations(list(range(5))), st.integers(1, 12)).map(lambda t: list(t[0]) * t[1]),  # one layout
    st.tuples(st.permutations(list(range(4))), st.integers(1, 5)).map(lambda t: list(t[0][:3]) * t[1] + [t[0][0]]),
))
def test_grouping_by_metric_is_a_stable_sort_whatever_the_shortcut(codes):
    code = np.asarray(codes, np.int32)
    column = np.arange(len(code)) * 10
    if not len(code):
        return
    assert np.array_equal(_grouped_order(code, None)(column), column[np.argsort(code, kind="stable")])


def test_records_of_one_layout_are_transposed_not_sorted():
    layout = np.asarray([3, 0, 2, 1], np.int32)
    code = np.tile(layout, 5)
    order = _grouped_order(code, None)
    assert np.array_equal(order(code), np.repeat(np.arange(4), 5))
    assert np.array_equal(order(np.arange(20)), np.argsort(code, kind="stable"))


def test_counts_match_pandas():
    rng = np.random.default_rng(0)
    n = 500
    codes = rng.integers(0, 7, n).astype(np.int32)
    rows = Columns(rng.integers(-5, 40, n), codes, [f"m{i}" for i in range(9)], rng.normal(size=n),
                   rng.integers(0, 3, n), np.full(n, -1), np.full(n, np.nan))
    rows.value[::17] = np.nan
    rows.value[::23] = np.inf
    frame = rows.to_frame()
    assert rows.counts() == {"rows": n, "steps": frame["step"].nunique(), "metrics": frame["metric"].nunique(),
                             "nonfinite": int((~np.isfinite(frame["value"])).sum()),
                             "attempts": frame["attempt"].nunique()}
    far = Columns(np.asarray([0, 2**62, 5, 5]), np.zeros(4), ["a"], np.zeros(4), np.zeros(4), np.zeros(4), np.zeros(4))
    assert far.counts()["steps"] == 3  # a span too wide to mark: sorted instead


def test_renaming_two_names_to_one_merges_their_codes_and_the_frame_round_trips():
    rows = _rows(np.asarray([0, 1, 2, 0, 1, 2], np.int32), ["a", "b", "c"])
    renamed = rows.renamed({"a": "x", "c": "x"})
    assert renamed.names == ["x", "b"]
    assert renamed.code.tolist() == [0, 1, 0, 0, 1, 0]
    back = Columns.from_frame(renamed.to_frame())
    assert back.names == renamed.names and back.code.tolist() == renamed.code.tolist()
    assert np.array_equal(back.value, renamed.value) and np.array_equal(back.wall_time, renamed.wall_time, equal_nan=True)
    plain = Columns.from_frame(pd.DataFrame({"step": [1, 2], "metric": ["q", "r"], "value": [1.0, 2.0]}))
    assert plain.names == ["q", "r"] and plain.attempt.tolist() == [0, 0] and plain.rank.tolist() == [-1, -1]


def test_arrow_arrays_without_pandas_hold_the_same_values():
    values = np.asarray([1.5, np.nan, -np.inf, 0.0])
    assert arrow_array(values).to_pylist()[2] == -np.inf
    assert np.array_equal(arrow_array(values).to_numpy(), values, equal_nan=True)
    assert arrow_array(np.arange(10, dtype=np.int32)[::3]).to_pylist() == [0, 3, 6, 9]  # a strided view copied
    assert arrow_strings(["a", "", "é/ü", "x" * 300]).to_pylist() == ["a", "", "é/ü", "x" * 300]
    with pytest.raises(UnicodeEncodeError):
        arrow_strings(["\udc80"])


def test_several_runs_in_one_insert_are_stored_grouped_and_whole(tmp_path):
    store = Store(tmp_path / "db.duckdb")
    with store.write() as tx:
        a = tx.ensure_run("a", "other", None, "x", "x")
        b = tx.ensure_run("b", "other", None, "x", "x")
        sa = tx.add_source(a, {"path": "a", "sha256": "1", "format": "x", "framework": "x", "rows": 6, "steps": 3,
                               "metrics": 2, "nonfinite": 0, "attempts": 1, "skipped_lines": 0, "step_from_index": False})
        sb = tx.add_source(b, {"path": "b", "sha256": "2", "format": "x", "framework": "x", "rows": 4, "steps": 2,
                               "metrics": 2, "nonfinite": 0, "attempts": 1, "skipped_lines": 0, "step_from_index": False})
        tx.add_scalar_parts([(a, sa, _rows(np.asarray([0, 1] * 3, np.int32), ["loss", "grad_norm"], np.repeat([1, 2, 3], 2))),
                             (b, sb, _rows(np.asarray([1, 0] * 2, np.int32), ["loss", "grad_norm"], np.repeat([1, 2], 2)))])
    with store.read() as con:
        stored = con.execute("SELECT run_id, metric, step, value, source_id FROM scalars").fetchall()
    assert [(r, m) for r, m, *_ in stored] == [(a, "grad_norm")] * 3 + [(a, "loss")] * 3 + \
        [(b, "grad_norm")] * 2 + [(b, "loss")] * 2
    assert [s for _, m, s, _, _ in stored if m == "loss"] == [1, 2, 3, 1, 2]
    assert {(r, s) for r, *_, s in stored} == {(a, sa), (b, sb)}


def test_numbers_read_from_arrow_buffers_keep_nulls_as_nan_and_slices_in_place():
    import pyarrow as pa

    from moeproxy.columns import numpy_of

    floats = pa.array([1.5, None, -np.inf, 4.0, None])
    assert np.array_equal(numpy_of(floats), [1.5, np.nan, -np.inf, 4.0, np.nan], equal_nan=True)
    assert np.array_equal(numpy_of(floats.slice(1, 3)), [np.nan, -np.inf, 4.0], equal_nan=True)
    assert numpy_of(pa.array([7, 8, 9], pa.int64()).slice(1)).tolist() == [8, 9]
    assert np.array_equal(numpy_of(pa.array([1, None], pa.int32())), [1.0, np.nan], equal_nan=True)
    lists = pa.array([[1.0, 2.0], [], [3.0]], pa.list_(pa.float64()))
    assert numpy_of(lists.offsets).tolist() == [0, 2, 2, 3]
    assert numpy_of(lists.slice(1).offsets).tolist() == [2, 2, 3]
