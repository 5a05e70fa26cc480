"""A wide CSV (W&B export, generic step table) becomes its long table column by column in numpy
(``csvfmt._wide_rows``); that must be what adding each row's record to a ``LogTable`` gives, for
any table: empty cells, nan/inf/null text, steps that skip their row, W&B prefixes and envelopes,
two columns under one name, columns never filled."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file
from moeproxy.ingest.formats import csvfmt
from moeproxy.ingest.source import open_source

cells = st.one_of(st.sampled_from(["", " ", "nan", "NaN", "inf", "-inf", "null", "abc", "1e400", "-0", "0x10",
                                   "12345678901234567890123", "1_000"]),
                  st.floats(allow_nan=False).map(repr), st.integers(-10**6, 10**6).map(str))
steps = st.one_of(st.integers(-3, 50).map(str), st.sampled_from(["", "x", "2.0", "2.5", "nan", "1e20", "9" * 25]))
headers = st.lists(st.sampled_from(["loss", "run - loss", "run - grad_norm", "run - loss__MIN", "other - kl", "kl",
                                    "a,b", "reward"]), min_size=1, max_size=5, unique=True)


def _csv(step_col, header, rows) -> str:
    quote = lambda c: f'"{c}"' if "," in c else c  # noqa: E731
    lines = [",".join(([step_col] if step_col else []) + [quote(h) for h in header])]
    for step, row in rows:
        lines.append(",".join(([step] if step_col else []) + row))
    return "\n".join(lines) + "\n"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["Step", "step", "_step", None]), headers, st.data())
def test_the_columns_give_what_the_row_records_give(tmp_path, monkeypatch, step_col, header, data):
    rows = data.draw(st.lists(st.tuples(steps, st.lists(cells, min_size=len(header), max_size=len(header))),
                              min_size=1, max_size=12))
    path = tmp_path / "table.csv"
    path.write_text(_csv(step_col, header, rows))
    outcomes = []
    for columns in (True, False):
        with monkeypatch.context() as m:
            if not columns:
                m.setattr(csvfmt, "_wide_rows", lambda *args: None)
            try:
                parsed = csvfmt.parse_csv(open_source(path))
            except (InputError, ValueError) as exc:
                outcomes.append(type(exc).__name__)
                continue
            frame = parsed.frame
            outcomes.append((parsed.format, parsed.framework, parsed.skipped_lines, parsed.step_from_index,
                             sorted(parsed.columns.names),  # the names the run will list
                             frame["step"].tolist(), frame["metric"].astype(str).tolist(),
                             frame["attempt"].tolist(), [repr(v) for v in frame["value"].tolist()]))
    assert outcomes[0] == outcomes[1]


def test_a_wandb_export_takes_the_columns_and_keeps_its_empty_cells_out(tmp_path):
    path = tmp_path / "export.csv"
    path.write_text("Step,run - train/loss,run - train/loss__MIN,run - train/grad_norm,run - never\n"
                    "1,0.5,0.4,1.0,\n2,,0.4,nan,\n3,0.4,0.3,,\n2,0.45,0.3,inf,\n")
    parsed = parse_file(path)
    frame = parsed.frame
    assert parsed.format == "wandb-csv"
    assert frame["metric"].tolist() == ["train/loss", "train/grad_norm", "train/grad_norm", "train/loss",
                                        "train/loss", "train/grad_norm"]
    assert frame["step"].tolist() == [1, 1, 2, 3, 2, 2] and frame["attempt"].tolist() == [0, 0, 0, 0, 1, 1]
    assert np.isnan(frame["value"].iloc[2]) and np.isinf(frame["value"].iloc[5])
    assert "never" not in parsed.columns.names  # a column without a cell names no metric


def test_the_columns_are_used_for_a_wide_table(tmp_path, monkeypatch):
    path = tmp_path / "wide.csv"
    path.write_text("step," + ",".join(f"m{i}" for i in range(50)) + "\n"
                    + "".join(f"{s}," + ",".join(str(s * i) for i in range(50)) + "\n" for s in range(1, 200)))
    monkeypatch.setattr(csvfmt.LogTable, "add_dict", lambda *args, **kwargs: pytest.fail("the row loop ran"))
    assert len(csvfmt.parse_csv(open_source(path)).frame) == 199 * 50


def test_a_rank_out_of_range_in_the_directory_name_is_named_not_wrapped(tmp_path):
    path = tmp_path / "monitor-rank99999999999" / "table.csv"
    path.parent.mkdir()
    path.write_text("step,loss\n1,0.5\n2,0.4\n")
    with pytest.raises(InputError, match="rank 99999999999 is out of range"):
        parse_file(path)


def test_a_wandb_panel_of_several_runs_is_one_run_each(tmp_path):
    # W&B's "Export CSV" of a panel: "<run> - <metric>" for each run shown, envelopes beside
    path = tmp_path / "panel.csv"
    path.write_text('"Step","lr1e-3 - train/loss","lr1e-3 - train/loss__MIN","lr1e-3 - train/loss__MAX",'
                    '"lr3e-2 - train/loss","lr3e-2 - train/loss__MIN","lr3e-2 - train/loss__MAX"\n'
                    + "".join(f'"{s}","{3 - s / 10}","0","9","{3 - s / 10 if s < 6 else 9.0}","0","9"\n'
                              for s in range(12)))
    parsed = parse_file(path)
    assert parsed.format == "wandb-csv" and set(parsed.arms) == {"lr1e-3", "lr3e-2"}
    for arm, frame in parsed.arms.items():
        assert frame["metric"].astype(str).unique().tolist() == ["train/loss"] and frame["step"].tolist() == list(range(12))
    assert parsed.arms["lr3e-2"]["value"].tolist()[-1] == 9.0 and parsed.arms["lr1e-3"]["value"].tolist()[-1] == 1.9
    assert any("2 runs" in note for note in parsed.notes)


def test_a_wandb_panel_with_a_run_of_text_cells_reads_the_runs_with_numbers(tmp_path):
    # a run whose only column holds text names no metric (it was a ValueError: the run had no numeric column)
    path = tmp_path / "panel.csv"
    path.write_text('"Step","a - loss","b - loss","c - note"\n' + "".join(f"{s},{1 + s / 10},{2 + s / 10},x{s}\n"
                                                                         for s in range(1, 6)))
    parsed = parse_file(path)
    assert set(parsed.arms) == {"a", "b"}


def test_rows_wider_than_the_header_name_their_extra_cells_by_place(tmp_path):
    # a logger that met a new key (an evaluation return) after writing its header: from then on every
    # row carries one cell more than the header names, the training rows an empty one
    head = "step,iteration,reward/mean,loss/value,loss/approx_kl"
    rows = [f"{i * 100},{i},{-6 + 0.01 * i},{2.5 - 0.01 * i},{0.02 * i}" for i in range(1, 4)]
    rows.append("400,,,,,-3.5")
    rows += [f"{i * 100},{i},{-6 + 0.01 * i},{2.5 - 0.01 * i},{0.02 * i}," for i in range(5, 13)]
    rows.append("1300,,,,,-3.25")
    path = tmp_path / "metrics.csv"
    path.write_text(head + "\n" + "\n".join(rows) + "\n")
    parsed = parse_file(path)
    frame = parsed.frame
    assert parsed.format == "csv" and not parsed.notes
    evals = frame[frame["metric"] == "column_6"]
    assert evals["step"].tolist() == [400, 1300] and evals["value"].tolist() == [-3.5, -3.25]
    kl = frame[frame["metric"] == "loss/approx_kl"]
    assert kl["step"].tolist() == [i * 100 for i in range(1, 4)] + [i * 100 for i in range(5, 13)]
    # a table whose rows are the header's width but for two run together stays the header's width
    ok = [f"{i},{0.1 * i},{1.0 / i}" for i in range(1, 12)]
    ok[4] = ok[4] + ok[5]
    path.write_text("step,loss,grad_norm\n" + "\n".join(ok) + "\n")
    parsed = parse_file(path)
    assert "column_4" not in parsed.columns.names and parsed.notes
