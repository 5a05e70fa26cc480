"""Readings taken from blind60's misses at first sight (shared/LABELS.md), on series and logs made
here."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.ingest import parse_file


def test_a_counter_closed_by_a_full_stop_is_the_step_not_part_of_a_name(tmp_path):
    lines = [f"Epoch {e}. Train Loss: {2.3 - 0.1 * e:.6f}, Train Acc: {0.1 + 0.04 * e:.6f}, "
             f"Valid Loss: {2.3 - 0.08 * e:.6f}, Valid Acc: 0.099585, Time 00:00:32" for e in range(20)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    assert set(frame.metric) == {"train loss", "train acc", "valid loss", "valid acc"}
    assert sorted(frame[frame.metric == "train loss"].step) == list(range(20))


def _skips(burst_then):
    """DeepSpeed's per-rank overflow lines (16 ranks print each skipped step) and its running count
    every 10 steps: three steps skipped in ten at step 480, then ``burst_then``."""
    steps = list(range(0, 1850, 10))
    total, count = [], 11.0
    for s in steps:
        if s == 490:
            count += 3
        elif s > 490:
            count += burst_then(s)
        total.append(count)
    events = {}
    at = 2000  # the reader numbers step-less event lines one after another
    for _ in range(3 * 16):
        events[at] = 1.0
        at += 1
    return {"deepspeed/skipped_total": dict(zip(steps, total)), "deepspeed/overflow": events,
            "lr": {s: 4e-5 for s in steps}}


def test_a_burst_of_skipped_steps_the_scaler_got_over_is_no_storm():
    res = diagnose_series(_skips(lambda s: 1.0 if s in (560, 570, 1770) else 0.0))
    assert res["verdict"] == "healthy", res["findings"][:2]


def test_skipped_steps_that_keep_coming_to_the_end_are_a_storm():
    res = diagnose_series(_skips(lambda s: 5.0 if s >= 1400 else 0.0))
    assert res["verdict"] == "overflow"


def test_a_gan_discriminator_at_its_equilibrium_is_no_classifier_at_chance():
    # blind61: a vanilla GAN's D loss sits at 2 ln 2 = ln 4 and its G loss at ln 2 - the game's
    # equilibrium, not a 4-way classifier that never learned (raters parted on the run)
    rng = np.random.default_rng(4)
    steps = np.arange(1, 301, 25)
    d = np.log(4) + rng.normal(0, 0.004, steps.size)
    g = np.log(2) + rng.normal(0, 0.004, steps.size)
    res = diagnose_series({"d loss": dict(zip(steps, d)), "g loss": dict(zip(steps, g))})
    assert not any(f["rule"] in ("loss_at_chance", "loss_at_uniform_guess") for f in res["findings"])
    assert res["confidence"] != "high"
    # the same loss alone, a classifier's, is at chance
    res = diagnose_series({"loss": dict(zip(steps, d))})
    assert any(f["rule"] == "loss_at_chance" for f in res["findings"])
