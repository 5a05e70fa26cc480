"""A JSON document cut off (a job killed while writing its ``trainer_state.json``, a log pasted in
part) is read up to its last complete record, with a warning naming the line it was cut after; a
document cut before its first record is refused, and one malformed elsewhere too."""

from __future__ import annotations

import json

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file

RECORDS = [{"epoch": 0.05 * i, "learning_rate": 2e-4, "loss": round(1.2 - 0.03 * i, 4), "step": 10 * i}
           for i in range(1, 8)]


def _state(records) -> str:
    return json.dumps({"best_metric": None, "global_step": 70, "log_history": records}, indent=2)


@pytest.mark.parametrize("cut", [0.55, 0.8, 0.97])
def test_a_trainer_state_cut_mid_record_reads_its_complete_records(tmp_path, cut):
    text = _state(RECORDS)
    end = int(len(text) * cut)
    path = tmp_path / "trainer_state.json"
    path.write_text(text[:end])
    parsed = parse_file(path)
    frame = parsed.frame
    # every record whose closing brace is before the cut, and no other
    complete = [r["step"] for r in RECORDS if text.index("}", text.index(f'"step": {r["step"]}')) < end]
    assert complete and sorted(set(frame["step"].tolist())) == complete
    assert set(frame["metric"].astype(str)) >= {"loss", "learning_rate"}
    assert any("cut off" in w and w.startswith("line ") for w in parsed.warnings), parsed.warnings


def test_a_list_of_records_cut_off_reads_up_to_the_cut(tmp_path):
    path = tmp_path / "log.json"
    path.write_text(json.dumps(RECORDS, indent=2)[:-60])
    parsed = parse_file(path)
    assert sorted(set(parsed.frame["step"].tolist())) == [10 * i for i in range(1, 7)]
    assert parsed.warnings


def test_a_document_cut_before_its_first_record_is_refused(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": [{"loss": 1.0, "st')
    with pytest.raises(InputError, match="truncated JSON document"):
        parse_file(path)


def test_a_document_malformed_before_its_end_is_refused(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text(_state(RECORDS).replace('"loss": 1.14', '"loss": 1.14,,', 1))
    with pytest.raises(InputError, match="malformed JSON"):
        parse_file(path)
