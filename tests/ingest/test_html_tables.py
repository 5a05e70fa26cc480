"""The Hugging Face Trainer's notebook progress table, rendered as HTML: in a saved web page and as
a notebook output's text/html (whose text/plain is only ``<IPython.core.display.HTML object>``)."""

from __future__ import annotations

import json

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file

HEADER = ["Step", "Training Loss", "reward", "reward_std", "kl", "rewards / xmlcount_reward_func"]


def _table(rows: int) -> str:
    head = "".join(f"<th>{h}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{v}</td>" for v in (s, f"{0.001 * s:.6f}", f"{0.1 + s / 100:.6f}", "0.300000",
                                                    f"{0.0005 * s:.6f}", "0.125000")) + "</tr>\n"
        for s in range(1, rows + 1))
    return (f"<div><progress value='{rows}' max='500'></progress> [ {rows}/500 1:02:03 &lt; 2:00:00, Epoch 0.1/1]</div>\n"
            f'<table border="1" class="dataframe">\n<thead>\n<tr style="text-align: left;">{head}</tr>\n</thead>\n'
            f"<tbody>\n{body}</tbody>\n</table>\n")


def _check(parsed, rows: int) -> None:
    frame = parsed.frame
    reward = frame[frame.metric == "reward"]
    assert sorted(reward.step) == list(range(1, rows + 1))
    assert reward[reward.step == 10].value.iloc[0] == pytest.approx(0.2)
    # the HTML's spaced metric name is the Trainer's own, one metric (not two arms of a comparison)
    assert "rewards/xmlcount_reward_func" in set(frame.metric) and not parsed.arms


def test_a_saved_page_with_the_trainers_table(tmp_path):
    page = tmp_path / "grpo-run.html"
    page.write_text("<html><body><h1>My GRPO run</h1><p>Training went like this:</p>\n" + _table(30)
                    + "<p>step 5 looked odd: loss 3.2</p></body></html>\n")
    parsed = parse_file(page)
    assert parsed.format == "html-table"
    _check(parsed, 30)


def test_a_notebook_whose_table_is_html_only(tmp_path):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": ["trainer.train()"], "metadata": {}, "execution_count": 3,
         "outputs": [{"output_type": "display_data", "metadata": {},
                      "data": {"text/plain": ["<IPython.core.display.HTML object>"], "text/html": [_table(25)]}}]}]}
    path = tmp_path / "grpo.ipynb"
    path.write_text(json.dumps(nb))
    parsed = parse_file(path)
    assert parsed.format == "notebook/table"
    _check(parsed, 25)


def test_a_notebooks_table_after_thousands_of_printed_lines_is_read(tmp_path):
    # a GRPO notebook prints its sampled completions (prose, 9,000 lines: further than detection
    # looks past a preamble) before the Trainer's HTML table, and a TrainOutput dict after it: the
    # outputs' tables are read on their own and take over from the thin reading of the text
    samples = [f"Question {i}: how many apples does Ann have left after giving {i % 7} away?\n" for i in range(9000)]
    closing = "TrainOutput(global_step=30, training_loss=0.0123, metrics={'train_runtime': 812.5, 'train_loss': 0.0123})\n"
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": ["trainer.train()"], "metadata": {}, "execution_count": 3,
         "outputs": [{"output_type": "stream", "name": "stdout", "text": samples},
                     {"output_type": "display_data", "metadata": {},
                      "data": {"text/plain": ["<IPython.core.display.HTML object>"], "text/html": [_table(30)]}},
                     {"output_type": "execute_result", "metadata": {}, "execution_count": 3,
                      "data": {"text/plain": [closing]}}]}]}
    path = tmp_path / "grpo-samples.ipynb"
    path.write_text(json.dumps(nb))
    parsed = parse_file(path)
    assert parsed.format == "notebook/table"
    assert any("HTML tables" in note for note in parsed.notes), parsed.notes
    _check(parsed, 30)


def test_a_page_without_a_table_of_rows_is_refused_by_name(tmp_path):
    page = tmp_path / "empty.html"
    page.write_text("<html><body><table><tr><th>Step</th><th>Loss</th></tr></table></body></html>\n")
    with pytest.raises(InputError, match="empty.html"):
        parse_file(page, fmt="html-table")
