"""Reading gaps blind27 showed, on made-up files of the shape: sacred / PyMARL's info.json keeps each
metric's own counter beside it (``return_mean`` and ``return_mean_T``) and writes NumPy scalars the
way jsonpickle does."""

from __future__ import annotations

import json

from moeproxy.ingest import parse_file


def _np(x: float) -> dict:
    return {"dtype": "float64", "py/object": "numpy.float64", "value": x}


def test_sacred_info_json_reads_each_metric_at_its_own_counter(tmp_path):
    doc = {
        "loss": [0.33, 0.028, 0.024, 0.76], "loss_T": [741, 10757, 20761, 50775],
        "return_mean": [_np(1.4), _np(2.0), _np(3.1), _np(4.2), _np(5.0)],
        "return_mean_T": [23, 10026, 20031, 30040, 40052],
        "grad_norm": [{"py/reduce": [{"py/function": "torch._utils._rebuild_tensor_v2"}]}] * 4,
        "grad_norm_T": [741, 10757, 20761, 50775],
        "episode": [90, 180, 273], "episode_T": [2018, 4020, 6025],
    }
    path = tmp_path / "info.json"
    path.write_text(json.dumps(doc, indent=2))  # as sacred writes it
    parsed = parse_file(path)
    assert parsed.format == "json-columns"
    names = set(parsed.rows.names)
    assert {"loss", "return_mean", "episode"} <= names
    assert not any(n.endswith("_T") for n in names)      # counters are steps, not metrics
    assert "grad_norm" not in names                        # a pickled tensor is no number
    frame = parsed.rows.to_frame()
    assert frame[frame.metric == "loss"].step.tolist() == [741, 10757, 20761, 50775]
    assert frame[frame.metric == "return_mean"].value.tolist() == [1.4, 2.0, 3.1, 4.2, 5.0]
    assert frame.attempt.nunique() == 1                   # one run: no step going back


def test_a_semicolon_table_of_numbers_without_a_header_is_read_by_place(tmp_path):
    # blind29's shape: three runs' evaluation returns side by side, one row per evaluation, no header
    path = tmp_path / "returns.csv"
    path.write_text("".join(f"{10 + i};{16 + i / 2};{9.5 + i * 0.25}\n" for i in range(40)))
    parsed = parse_file(path)
    assert parsed.format == "csv"
    assert parsed.rows.names == ["column_1", "column_2", "column_3"]
    frame = parsed.rows.to_frame()
    first = frame[frame.metric == "column_1"]
    assert first.step.tolist() == list(range(40)) and first.value.iloc[0] == 10.0   # the first row is data


def test_a_comma_table_with_a_header_is_read_as_before(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n" + "".join(f"{i},{1 / (i + 1)}\n" for i in range(10)))
    parsed = parse_file(path)
    assert parsed.rows.names == ["loss"]


def test_pymarls_t_env_is_a_step_counter_reported_beside_the_onset(tmp_path):
    from moeproxy.diagnose.record import diagnose_target

    lines = []
    for i in range(1, 61):
        lines.append(f"[INFO 10:45:44] my_main Recent Stats | t_env:  {i * 12000:>9} | Episode:  {i * 30:>6}")
        loss = 0.2 if i < 40 else 0.2 * 10 ** ((i - 39) / 4)
        lines.append(f"loss:  {loss:.4f}\treturn_mean:  {5 + i / 10:.4f}\tq_taken_mean:  {1 + i / 100:.4f}")
    path = tmp_path / "cout.txt"
    path.write_text("\n".join(lines) + "\n")
    _, result, _ = diagnose_target(str(path), db=":memory:")
    assert "t_env" in (result.get("onset_counters") or {}), result
