"""A Jupyter notebook whose cell outputs hold the training log: the outputs' text is read as a log
of its own (its format detected as for any file) and stored under the notebook's path and bytes."""

from __future__ import annotations

import json

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file


def _table(step, entropy, reward):
    rows = [("rollout/", ""), ("   ep_rew_mean", f"{reward:.4g}"), ("time/", ""), ("   total_timesteps", str(step)),
            ("train/", ""), ("   entropy_loss", f"{-entropy:.4g}"), ("   value_loss", "12.5")]
    line = "-" * 40
    return "\n".join([line] + [f"| {k:<24} | {v:<9} |" for k, v in rows] + [line]) + "\n"


def _notebook(outputs) -> dict:
    return {"cells": [{"cell_type": "code", "source": ["model.learn(100000)\n"], "execution_count": 3,
                       "metadata": {}, "outputs": outputs},
                      {"cell_type": "markdown", "source": ["# notes | loss | 0.5 |\n"], "metadata": {}}],
            "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def test_the_cell_outputs_are_read_as_the_log(tmp_path):
    text = "".join(_table(2048 * (i + 1), 1.9 * 0.9 ** i, 100 + i) for i in range(30))
    lines = text.splitlines(keepends=True)
    path = tmp_path / "Mario.ipynb"
    path.write_text(json.dumps(_notebook([
        {"output_type": "stream", "name": "stdout", "text": lines[: len(lines) // 2]},
        {"output_type": "stream", "name": "stdout", "text": "".join(lines[len(lines) // 2:])},
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}},
    ])))
    parsed = parse_file(path)
    assert parsed.format.startswith("notebook/") and parsed.path == path
    frame = parsed.frame
    entropy = frame[frame["metric"] == "train/entropy_loss"].set_index("step")["value"]
    assert len(entropy) == 30 and entropy.index.min() == 2048 and entropy.index.max() == 61440
    assert any("cell output" in note for note in parsed.notes)


def test_a_notebook_with_no_output_says_so(tmp_path):
    path = tmp_path / "empty.ipynb"
    path.write_text(json.dumps(_notebook([])))
    with pytest.raises(InputError, match="no cell output"):
        parse_file(path)
    bad = tmp_path / "broken.ipynb"
    bad.write_text('{"cells": [')
    with pytest.raises(InputError, match="not valid JSON"):
        parse_file(bad)
