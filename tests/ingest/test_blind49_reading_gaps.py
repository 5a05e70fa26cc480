"""Shapes of real logs that blind49 showed unread, each made here (not copied): Megatron-LM's older
golden-values files (values as a list under ``start_step``/``step_interval``, or just ``values``
under a metric name ending in a colon; one object of metrics per step keyed by the step, with
summary numbers beside them), and DeepXDE's ``loss.dat``."""

from __future__ import annotations

import json

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file


def _series(parsed, name):
    frame = parsed.frame
    part = frame[frame.metric == name]
    return dict(zip(part.step.tolist(), part.value.tolist()))


def test_golden_values_as_a_list_take_their_steps_from_start_and_interval(tmp_path):
    log = tmp_path / "golden_values.json"
    log.write_text(json.dumps({"lm loss": {"start_step": 10, "end_step": 50, "step_interval": 10,
                                           "values": [10.9, 10.1, 9.4, 8.8, 8.5]},
                               "num-zeros": {"start_step": 10, "end_step": 50, "step_interval": 10,
                                             "values": [0, 0, 3, 0, 0]}}))
    parsed = parse_file(log)
    assert parsed.format == "megatron-golden"
    assert _series(parsed, "lm loss") == {10: 10.9, 20: 10.1, 30: 9.4, 40: 8.8, 50: 8.5}


def test_golden_values_with_only_a_list_count_from_step_0_and_drop_the_printed_colon(tmp_path):
    log = tmp_path / "gold.json"
    log.write_text(json.dumps({"lm loss:": {"values": [12.3, 12.3, 14.8, 15.1, 14.3, 13.3]}}))
    parsed = parse_file(log)
    assert parsed.format == "megatron-golden"
    assert _series(parsed, "lm loss") == {0: 12.3, 1: 12.3, 2: 14.8, 3: 15.1, 4: 14.3, 5: 13.3}


def test_one_object_per_step_is_read_by_its_step_keys_and_summaries_are_set_aside(tmp_path):
    data = {str(s): {"lm loss": 11.9 - 0.1 * s, "elapsed time per iteration (ms)": 230.0 + s}
            for s in range(12)}
    data["max_alloc"] = 61.2
    log = tmp_path / "golden.json"
    log.write_text(json.dumps(data, indent=4))
    parsed = parse_file(log)
    assert parsed.format == "megatron-golden"
    loss = _series(parsed, "lm loss")
    assert sorted(loss) == list(range(12)) and loss[5] == pytest.approx(11.4)
    assert "max_alloc" not in set(parsed.frame.metric)


def test_a_list_with_a_broken_interval_is_named(tmp_path):
    log = tmp_path / "golden_values.json"
    log.write_text(json.dumps({"lm loss": {"start_step": 0, "step_interval": 0, "values": [1.0, 2.0, 3.0]}}))
    with pytest.raises(InputError, match="lm loss.*step_interval"):
        parse_file(log)


def _dat(rows) -> str:
    return "# step, loss_train, loss_test, metrics_test\n" + "".join(
        " ".join(f"{v:.18e}" for v in row) + "\n" for row in rows)


def test_deepxde_loss_terms_are_summed_into_the_loss_the_optimiser_minimises(tmp_path):
    # five loss terms on the training points, the same five on the test points, no metric
    rows = [[1000.0 * s, *(t * (0.9 ** s) for t in (59.5, 309.4, 0.02, 0.1, 1e-7)),
             *(t * (0.9 ** s) for t in (60.1, 310.0, 0.03, 0.1, 1e-7))] for s in range(8)]
    log = tmp_path / "loss.dat"
    log.write_text(_dat(rows))
    parsed = parse_file(log)
    assert parsed.format == "deepxde"
    total = _series(parsed, "loss_train")
    assert sorted(total) == [1000 * s for s in range(8)]
    assert total[0] == pytest.approx(59.5 + 309.4 + 0.02 + 0.1 + 1e-7)
    assert _series(parsed, "loss_train_1")[2000] == pytest.approx(309.4 * 0.81)
    assert "metrics_test" not in set(parsed.frame.metric)


def test_deepxde_one_term_and_one_metric(tmp_path):
    log = tmp_path / "loss.dat"
    log.write_text(_dat([[1000.0 * s, 1.12 - 0.01 * s, 0.64, 4.2] for s in range(6)]))
    parsed = parse_file(log)
    assert _series(parsed, "loss_train")[3000] == pytest.approx(1.09)
    assert _series(parsed, "metrics_test")[0] == pytest.approx(4.2)
