"""Readings blind27's misses asked for, on made-up logs of the shape: a diffusion model's loss logged
only as ``MSE`` is the training loss (NaN in every record: overflow from the start); a loss that only
ever came down to a uniform guess (ln 2) never learned, from the run's start."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def test_a_lone_error_measure_nan_in_every_record_is_an_overflow_from_the_start():
    res = diagnose_series({"MSE": {i: float("nan") for i in range(300)}})
    assert res["verdict"] == "overflow" and res["onset_step"] == 0, res["findings"][:2]
    assert res["data"]["read_as"] == {"loss": "MSE"}


def test_a_lone_error_measure_is_read_as_the_loss_but_two_leave_it_open():
    rng = np.random.default_rng(1)
    falling = np.geomspace(1.0, 0.01, 200) * np.exp(rng.normal(0, 0.1, 200))
    one = diagnose_series({"MSE": dict(enumerate(falling))})
    assert one["data"].get("read_as") == {"loss": "MSE"} and one["verdict"] == "healthy"
    two = diagnose_series({"mse": dict(enumerate(falling)), "mae": dict(enumerate(np.sqrt(falling)))})
    assert "loss" not in (two["data"].get("read_as") or {})


def test_a_loss_that_only_came_down_to_ln2_never_learned_from_the_start():
    loss = np.r_[[0.793, 0.6997, 0.6959, 0.6950, 0.6947, 0.6944, 0.6941], 0.6931 + np.linspace(0.0009, 0.0001, 31)]
    res = diagnose_series({"loss": dict(enumerate(loss))})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 0, res["findings"][:2]


def test_a_loss_that_learned_then_went_back_to_ln2_is_dated_where_it_went_back():
    loss = np.r_[np.linspace(0.69, 0.35, 30), np.linspace(0.40, 0.6935, 6), np.full(40, 0.6931)]
    res = diagnose_series({"loss": dict(enumerate(loss))})
    hit = [f for f in res["findings"] if f["category"] == "vanishing_gradient"]
    assert hit and all(f["onset_step"] >= 30 for f in hit), res["findings"][:2]


def test_lightnings_per_step_copy_of_an_error_measure_is_the_loss():
    # blind29's shape: Lightning's ``mse_step`` beside its per-epoch copies, no loss by name; it
    # jumps from 0.06 to 1.0 and stays
    steps = np.arange(1, 55) * 50 - 1
    mse = np.r_[np.geomspace(0.72, 0.062, 27), np.full(27, 1.0)]
    res = diagnose_series({"mse_step": dict(zip(steps.tolist(), mse)),
                           "mse_epoch_step": dict(zip(steps.tolist(), mse))})
    assert res["data"].get("read_as") == {"loss": "mse_step"}, res["data"]
    assert res["verdict"] == "divergence" and res["onset_step"] == steps[27], res["findings"][:2]
