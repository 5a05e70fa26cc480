"""Readings that used to keep one record of a log that holds a series (logs of the blind sets read
as one record at first sight): a Trainer table's ``No Log`` cells, a printed config beside a
series under names the vocabulary does not know, a JSON document whose lists hold the series, and
an exported run of ``{"step", "value"}`` records."""

import json

from moeproxy.ingest import parse_file


def _notebook(html: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": ["trainer.train()"], "outputs": [
        {"output_type": "display_data", "data": {"text/html": [html], "text/plain": ["<IPython.core.display.HTML object>"]}}]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_no_log_cells_of_a_trainer_table_are_values_not_logged(tmp_path):
    head = "<tr><th>Step</th><th>Training Loss</th><th>reward</th><th>kl</th></tr>"
    rows = "".join(f"<tr><td>{s}</td><td>0.000000</td><td>{0.5 + 0.01 * s:.6f}</td>"
                   f"<td>{'No Log' if s % 10 else '0.000011'}</td></tr>" for s in range(5, 55, 5))
    path = tmp_path / "grpo.ipynb"
    path.write_text(json.dumps(_notebook(f'<table border="1" class="dataframe"><thead>{head}</thead>'
                                         f"<tbody>{rows}</tbody></table>")))
    frame = parse_file(path).rows.to_frame()
    assert sorted(frame[frame.metric == "reward"].step) == list(range(5, 55, 5))
    assert sorted(frame[frame.metric == "kl"].step) == [10, 20, 30, 40, 50]


def test_a_config_dict_does_not_take_over_a_series_under_unknown_names(tmp_path):
    lines = ["Logging to /tmp/run", "{'lr': 0.001, 'buffer_size': 1000000, 'polyak': 0.95, 'batch_size': 256}"]
    for epoch in range(12):
        lines += ["-" * 40, f"| epoch              | {epoch:<10} |", f"| test/success_rate  | {0.05 * (epoch % 2):<10} |",
                  f"| test/mean_Q        | {-0.9 - 0.2 * epoch:<10.3f} |", "-" * 40]
    path = tmp_path / "her.txt"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    assert frame.step.nunique() == 12 and "test/success_rate" in set(frame.metric)


def test_a_json_object_of_lists_read_as_one_record_is_read_as_columns(tmp_path):
    doc = {"task": "atari_pong", "seed": "4", "steps": [1e6 * i for i in range(1, 41)],
           "scores": [float(i % 7) for i in range(40)]}
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(doc))
    parsed = parse_file(path)
    assert parsed.format == "json-columns" and parsed.rows.to_frame().step.nunique() == 40


def test_an_exported_run_of_step_value_records_keeps_every_metric(tmp_path):
    metrics = {"value_loss": [{"step": s, "value": 0.1 + 0.001 * s} for s in range(50)],
               "reward": [{"step": s, "value": 1.0 + 0.01 * s} for s in range(0, 50, 2)]}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"run": "a", "note": "exported", "metrics": metrics}))
    frame = parse_file(path).rows.to_frame()
    assert sorted(frame[frame.metric == "value_loss"].step) == list(range(50))
    assert sorted(frame[frame.metric == "reward"].step) == list(range(0, 50, 2))
