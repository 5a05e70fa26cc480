"""A log that prints one metric a line with no counter (Unity ML-Agents' ``Mean Reward: 70.3``
summaries, a script's ``loss: 0.52``) is a series whose record index is the step; a config dump (a
key a line) and prose stay unread."""

from __future__ import annotations

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file


def test_one_metric_a_line_is_a_series_by_record_index(tmp_path):
    values = [2.3, 4.1, 5.4, 6.5, 8.0, 69.9, 70.3, 70.7, 56.7, 52.9, 8.7, 7.5, 0.2, 0.4]
    path = tmp_path / "console.txt"
    path.write_text("".join(f"Mean Reward: {v}\n" + ("\n.\n. Time passes\n.\n\n" if i % 5 == 4 else "")
                            for i, v in enumerate(values)))
    parsed = parse_file(path)
    frame = parsed.frame
    assert parsed.step_from_index
    assert frame["step"].tolist() == list(range(len(values))) and frame["value"].tolist() == values
    assert len(set(frame["metric"].astype(str))) == 1


@pytest.mark.parametrize("text", [
    "".join(f"{key}: {value}\n" for key, value in [("lr", 0.001), ("batch_size", 32), ("epochs", 3), ("seed", 1),
                                                   ("warmup", 100), ("dropout", 0.1), ("layers", 12), ("heads", 8),
                                                   ("hidden", 768)]),
    "loss: 0.5\n" * 3 + "The run was fine.\n",
])
def test_a_config_dump_or_a_few_lines_are_not_a_series(tmp_path, text):
    path = tmp_path / "notes.txt"
    path.write_text(text)
    with pytest.raises(InputError):
        parse_file(path)
