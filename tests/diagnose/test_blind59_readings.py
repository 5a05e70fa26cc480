"""Readings taken from blind59's misses at first sight (shared/LABELS.md), on series and logs made
here."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.diagnosis import diagnose_frame
from moeproxy.diagnose.semantics import LOG_FLT_MIN
from moeproxy.ingest import parse_file


def _read(path) -> dict:
    return diagnose_frame(parse_file(path).rows.to_frame())


def test_keras_verbose_2_lines_are_read_one_record_per_epoch(tmp_path):
    # ``fit(verbose=2)``: no progress bar, ``625/625 - 2s - loss: ...`` closes each epoch
    lines = []
    for epoch in range(1, 31):
        loss = 0.6868 if epoch == 1 else 0.6858 + 0.0001 * (epoch % 2)
        lines += [f"Epoch {epoch}/30", f"625/625 - 2s - loss: {loss:.4f} - accuracy: 0.5603 - "
                                      f"val_loss: 0.6851 - val_accuracy: 0.5633"]
    path = tmp_path / "fit.log"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    assert sorted(frame[frame.metric == "loss"].step) == list(range(1, 31))
    # LABELS.md: the loss frozen at a two-way choice's chance level from the start: it never learned
    assert diagnose_frame(frame)["verdict"] == "vanishing_gradient"


def test_a_running_average_ranks_after_the_loss_of_the_step(tmp_path):
    # ``Average Loss`` over the epoch so far repeats itself by construction; ``Current Loss`` moves
    rng = np.random.default_rng(0)
    lines = [f"Epoch 149 | Iter {i} | Average Loss 1.146 | Current Loss {1.146 + rng.normal(0, 0.001):.6f}"
             for i in range(1, 141, 10)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    res = diagnose_frame(frame)
    # and a stretch inside epoch 149 is no run's start: a level loss there never "never learned"
    assert res["verdict"] == "healthy", res["findings"][:2]


def test_nan_records_scattered_mid_run_that_each_recover_are_not_overflow():
    n = 300
    loss = pd.Series(0.1 * np.exp(-np.arange(n) / 100) + 0.05, index=range(n))
    loss[[167, 176, 177]] = np.nan
    res = diagnose_series({"loss": loss})
    assert res["verdict"] == "healthy", res["findings"][:2]
    assert any(f["rule"] == "lone_nonfinite" for f in res["findings"])


def test_nan_records_that_keep_coming_are_still_overflow():
    n = 300
    loss = pd.Series(0.1 * np.exp(-np.arange(n) / 100) + 0.05, index=range(n))
    loss[list(range(150, 300, 5))] = np.nan  # every fifth record from the middle on
    assert diagnose_series({"loss": loss})["verdict"] == "overflow"


def test_a_huge_spike_the_run_got_over_is_no_divergence():
    rng = np.random.default_rng(1)
    n = 600
    loss = 1e-5 * (1 + 0.2 * rng.random(n))
    loss[80:100] = 0.05 * np.exp(-np.arange(20) / 4)  # 5000x for 20 records, then back for 500
    loss[80:100] = np.maximum(loss[80:100], 2e-4)
    res = diagnose_series({"loss": pd.Series(loss, index=np.arange(n) * 100)})
    assert res["verdict"] == "healthy", res["findings"][:2]


def test_a_huge_spike_that_stays_up_is_divergence():
    rng = np.random.default_rng(1)
    n = 600
    loss = 1e-5 * (1 + 0.2 * rng.random(n))
    loss[500:] = 0.05
    res = diagnose_series({"loss": pd.Series(loss, index=np.arange(n) * 100)})
    assert res["verdict"] == "divergence"


def test_a_printed_config_dict_is_no_record(tmp_path):
    args = {"lr": 0.001, "steps": 600, "batch": 32, "warmup": 100, "seed": 0, "grad_clip": 1.0}
    lines = [f"args: {json.dumps(args)}", f"model config: {json.dumps({'n_layer': 6, 'd_model': 256})}"]
    lines += [f"step {s:5d} | loss {2.0 - 0.001 * s:.4f} | lr 1.00e-03 | gnorm 0.45" for s in range(20, 620, 20)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    assert len(frame[frame.metric == "loss"]) == 30 and "warmup" not in set(frame.metric)


def test_a_max_load_violation_that_climbs_from_the_first_records_is_routing_collapse():
    steps = np.arange(20, 620, 20)
    maxvio = 6.4 - 5.5 * np.exp(-(steps - 20) / 120)  # 0.9 -> 6.4: experts starving one after another
    loss = 2.04 - 0.1 * (steps / 600)
    res = diagnose_series({"loss": pd.Series(loss, index=steps), "MaxVio": pd.Series(maxvio, index=steps)})
    assert res["verdict"] == "routing_collapse", res["findings"][:2]


def test_a_balanced_max_load_violation_that_wobbles_is_no_collapse():
    rng = np.random.default_rng(3)
    steps = np.arange(20, 620, 20)
    maxvio = 0.05 + 0.05 * rng.random(steps.size)  # 1 + MaxVio stays ~1.05-1.10
    res = diagnose_series({"loss": pd.Series(2.0 - steps / 6000, index=steps), "MaxVio": pd.Series(maxvio, index=steps)})
    assert res["verdict"] == "healthy"


def test_a_loss_printed_as_minus_log_flt_min_is_a_log_of_zero_overflow():
    assert abs(LOG_FLT_MIN - 87.3365) < 1e-4
    steps = np.arange(100, 1100, 100)
    loss = np.r_[np.linspace(13.5, 13.3, 6), np.full(4, 87.3365)]
    res = diagnose_series({"loss": pd.Series(loss, index=steps)})
    assert res["verdict"] == "overflow" and res["onset_step"] == 700
    assert res["data"]["log_of_zero"] == {"loss": [700, 800, 900, 1000]}
