"""Reading gaps blind25 showed, on made-up files of the shape: a text log that opens with a printed
Lua table (``{`` on its first line) is no JSON document - its records are read by the format they
are in; a console log whose metrics stand one per line under a header line holding the step
(Coqui TTS), after a preamble of hundreds of lines. A broken file of lines keeps its clear error."""

from __future__ import annotations

import json

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file


def test_a_text_log_opening_with_a_printed_table_is_read_by_its_records(tmp_path):
    head = ["{", "  batchSize : 128", "  epoch_step : ", "    {", "      1 : 60", "    }", "  model : \"wide-resnet\"", "}",
            "==> loading data"]
    rows = [f"json_stats: {json.dumps({'epoch': e, 'loss': 2.0 / e, 'test_acc': 50 + e / 4, 'lr': 0.1})}"
            for e in range(1, 121)]
    path = tmp_path / "log.txt"
    path.write_text("\n".join(head + rows) + "\n")
    frame = parse_file(path).rows.to_frame()
    loss = frame[frame.metric == "loss"]
    assert len(loss) == 120 and loss.value.iloc[0] == 2.0


def test_metrics_one_per_line_under_a_header_with_the_global_step(tmp_path):
    lines = [f" | > Layer missing in the checkpoint: disc.nets.{i}.bias" for i in range(300)]
    for k in range(1, 41):
        lines += ["", f"   --> STEP: {k % 36}/36 -- GLOBAL_STEP: {1000000 + 25 * k}",
                  f"     | > loss_disc: {3.0 - k / 100:.5f}  ({3.4:.5f})",
                  f"     | > loss_gen: {1.6 + k / 100:.5f}  ({1.9:.5f})",
                  f"     | > grad_norm_0: {0.5 + k / 50:.5f}  ({2.7:.5f})"]
    path = tmp_path / "trainer_0_log.txt"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    gen = frame[frame.metric == "loss_gen"]
    assert list(gen.step)[:2] == [1000025, 1000050] and len(gen) == 40


def test_a_file_of_lines_broken_on_one_line_keeps_its_error(tmp_path):
    lines = [json.dumps({"step": s, "data": {"a": s}}) for s in range(1, 400)]
    lines[200] = '{"step": 201, "data": {"a": 1,}}'
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"line 201: malformed JSON"):
        parse_file(path)
