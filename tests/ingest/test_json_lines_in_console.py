"""JSON records as real logs carry them (blind59): two records written on one line with no line
break between them, and console output that prints JSON records and cuts long ones at its width."""

import json

import pytest

from moeproxy.ingest import parse_file
from moeproxy.errors import InputError


def _records(n, kind="train"):
    return [json.dumps({"type": kind, "step": s, "loss": 2.0 / s, "grad_norm": 0.5}) for s in range(1, n + 1)]


def test_two_records_on_one_line_are_both_read_and_named(tmp_path):
    lines = _records(20)
    lines[9] = lines[9] + lines[10]  # a flush that lost its newline
    del lines[10]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    parsed = parse_file(path)
    loss = parsed.rows.to_frame().query("metric == 'train/loss' or metric == 'loss'")
    assert sorted(loss.step) == list(range(1, 21))
    assert any("line 10: 2 JSON records with no line break between them" in w for w in parsed.warnings), parsed.warnings


def test_a_record_cut_by_the_console_is_skipped_and_named_in_console_output(tmp_path):
    config = json.dumps({"type": "event", "step": 0, "event": "config", "args": {"lr": 1e-3, "note": "x" * 600}})
    lines = ["Initialized. View run at https://example.invalid/run", "gpu: A10G", config[:400],
             *_records(30), "App completed."]
    path = tmp_path / "console.txt"
    path.write_text("\n".join(lines) + "\n")
    parsed = parse_file(path)
    assert parsed.rows.to_frame().step.nunique() == 30
    assert any(w.startswith("line 3: not a whole JSON record") and "skipped" in w for w in parsed.warnings), parsed.warnings


def test_a_jsonl_file_keeps_refusing_a_malformed_record(tmp_path):
    lines = ["not json at all", *_records(30)]
    lines[5] = lines[5][:40]
    path = tmp_path / "run.jsonl"  # named a JSON-lines file: every line is a record
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"line 6: malformed JSON"):
        parse_file(path)


def test_console_output_whose_records_are_mostly_cut_is_refused(tmp_path):
    lines = ["banner", *[r[:30] for r in _records(10)], *_records(3)]
    path = tmp_path / "console.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"line 2: malformed JSON"):
        parse_file(path, "jsonl")
