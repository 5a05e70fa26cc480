"""JSON Lines inputs (moeproxy.json_lines): blank lines skipped, a malformed line named by file and line,
for calibration data and evaluation tasks alike."""

from __future__ import annotations

import pytest

from moeproxy.errors import InputError
from moeproxy.json_lines import read_json_lines


def test_values_with_their_line_numbers_and_errors_naming_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n  \n[2]\n"x"\n')
    assert list(read_json_lines(path)) == [(1, {"a": 1}), (4, [2]), (5, "x")]
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(InputError, match=r"d.jsonl:2: invalid JSON"):
        list(read_json_lines(path))


def test_calibration_and_tasks_read_through_it(tmp_path):
    from moeproxy.proxy.calibration import read_calibration
    from moeproxy.repro.evaluation import read_tasks

    calib = tmp_path / "c.jsonl"
    calib.write_text('{"input_ids": [1, 2, 3]}\n\n{"input_ids": [4, 5]}\n')
    assert read_calibration(calib, tmp_path, max_tokens=4, max_len=8) == [[1, 2, 3], [4]]
    calib.write_text('{"input_ids": [1]}\nnot json\n')
    with pytest.raises(InputError, match=r"c.jsonl:2: invalid JSON"):
        read_calibration(calib, tmp_path, max_tokens=4, max_len=8)
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": 3}\n')
    with pytest.raises(InputError, match=r't.jsonl:2: expected \{"prompt": str, "answer": str\}'):
        read_tasks(tasks)
