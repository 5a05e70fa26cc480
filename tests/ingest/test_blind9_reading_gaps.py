"""Shapes of real logs that were not read at all when blind9 was scored (tests/fixtures/real/blind9),
each with lines quoted from those logs: a tqdm bar drawn without its bar (no terminal), apex's older
``Grad overflow on iteration N`` / ``Using dynamic loss scale of X`` pair, a script's own
``skipping update`` guard, and a whitespace table whose first row leaves trailing cells empty and
whose last column is free-text notes."""

from __future__ import annotations

import math

from moeproxy.diagnose.evaluation import diagnose_path
from moeproxy.ingest import parse_file

# m2_03_apex-amp-gradoverflow-scale-storm.log, lines 1-9 and 22-27
APEX = ("Epoch 1/20\n  0% 0/184 [00:00<?, ?it/s]\nGrad overflow on iteration 0\nUsing dynamic loss scale of 65536\n"
        "  1% 1/184 [00:00<01:34,  1.93it/s, loss=4.215]\nGrad overflow on iteration 1\nUsing dynamic loss scale of 32768.0\n"
        "  1% 2/184 [00:00<01:24,  2.15it/s, loss=4.174]\nGrad overflow on iteration 2\nUsing dynamic loss scale of 16384.0\n"
        "  4% 8/184 [00:03<01:14,  2.35it/s, loss=4.251]\nGrad overflow on iteration 8\nUsing dynamic loss scale of 8192.0\n"
        "  8% 14/184 [00:05<01:02,  2.72it/s, loss=3.725]\nGrad overflow on iteration 14\nUsing dynamic loss scale of 4096.0\n"
        "  8% 15/184 [00:05<00:58,  2.87it/s, loss=3.562]\nGrad overflow on iteration 15\nUsing dynamic loss scale of 2048.0\n"
        "  9% 16/184 [00:06<01:10,  2.38it/s, loss=3.418]\nGrad overflow on iteration 16\nUsing dynamic loss scale of 1024.0\n"
        "  9% 17/184 [00:06<01:09,  2.41it/s, loss=3.292]\nGrad overflow on iteration 17\nUsing dynamic loss scale of 512.0\n")

# m3_01_gpt2-124m-github-code-loss-rise-unrecovered.md, lines 5-13
TABLE = ("    Step  Train Loss    Val Loss   \u0394 Train  Notes\n"
         "------------------------------------------------------------------------\n"
         "  262000      3.0952      3.0265\n  263000      3.3459      3.2922    +0.251\n"
         "  264000      3.6089      3.3886    +0.263\n  265000      3.8677      3.7542    +0.259\n"
         "  266000      3.9365      3.8930    +0.069\n  267000      5.0157      5.0602    +1.079  <<< SPIKE\n"
         "  268000      5.0102      5.1968    -0.005  <<< SPIKE\n")

# m1_01_grpo-every-update-skipped-gradnorm.log, lines 1-10
SKIPPING = "".join(f"Warning: Gradient norm too large: {v}, skipping update\n" for v in
                   ("3680.00", "3648.00", "3776.00", "3056.00", "3568.00", "3056.00", "2672.00", "3664.00",
                    "3056.00", "3712.00"))


def _series(path):
    parsed = parse_file(path)
    frame = parsed.columns.to_frame()
    return parsed.format, {m: dict(zip(g["step"], g["value"])) for m, g in frame.groupby("metric")}


def test_a_bar_drawn_without_its_bar_and_apex_overflow_lines(tmp_path):
    log = tmp_path / "apex.log"
    log.write_text(APEX)
    fmt, series = _series(log)
    assert fmt == "text"
    assert series["loss"] == {1: 4.215, 2: 4.174, 8: 4.251, 14: 3.725, 15: 3.562, 16: 3.418, 17: 3.292}
    # iteration N is attempted after N updates: stored at N + 1, with the scale it fell to
    assert sorted(series["deepspeed/overflow"]) == [1, 2, 3, 9, 15, 16, 17, 18]
    assert series["deepspeed/reduced_loss_scale"][9] == 8192.0
    # three halvings on the first iterations are the search; halving again after a pause is a storm
    result = diagnose_path(log)
    assert (result["verdict"], result["onset_step"]) == ("overflow", 9)


def test_a_table_whose_first_row_leaves_cells_empty_and_whose_last_column_is_notes(tmp_path):
    log = tmp_path / "analysis.md"
    log.write_text(TABLE)
    fmt, series = _series(log)
    assert fmt == "table"
    # ("Train Loss" and "Val Loss" are the splits of one run, not two arms: both columns of one run)
    assert series["train loss"][262000] == 3.0952 and series["train loss"][268000] == 5.0102
    assert "val loss" in series
    assert not [k for k in series if "notes" in k.lower()]  # the notes carry no values
    delta = series["\u03b4 train"]
    assert 262000 not in delta or math.isnan(delta[262000])
    assert delta[267000] == 1.079


def test_a_script_that_skips_every_update_for_its_grad_norm_is_an_overflow_storm(tmp_path):
    log = tmp_path / "grpo.log"
    log.write_text(SKIPPING)
    fmt, series = _series(log)
    assert fmt == "text"
    assert series["grad_norm"] == {k + 1: float(v) for k, v in enumerate(
        ("3680.00", "3648.00", "3776.00", "3056.00", "3568.00", "3056.00", "2672.00", "3664.00", "3056.00", "3712.00"))}
    result = diagnose_path(log)
    assert (result["verdict"], result["onset_step"]) == ("overflow", 1)
    assert "start-up search" not in result["findings"][0]["evidence"]
