"""Readings blind28's misses asked for, on made-up logs of the shape: a supervised training loss of
exactly 0 in every record gives no gradient (no update ever made); a log that holds only a
validation loss which never left its first records' band never learned."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def test_a_training_loss_of_exactly_zero_in_every_record_is_no_update():
    steps = np.arange(1, 331) * 50 - 1
    res = diagnose_series({"train_loss": dict.fromkeys(steps.tolist(), 0.0)})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 49, res["findings"][:2]


def test_an_rl_loss_of_zero_with_a_reward_is_not_that_rule():
    rng = np.random.default_rng(2)
    res = diagnose_series({"loss": dict.fromkeys(range(200), 0.0),
                           "reward_mean": dict(enumerate(np.linspace(0, 1, 200) + rng.normal(0, 0.05, 200)))})
    assert not any(f["rule"] == "loss_zero_throughout" for f in res["findings"]), res["findings"][:2]


def test_a_validation_loss_alone_that_never_moved_never_learned():
    rng = np.random.default_rng(3)
    steps = np.arange(1, 51) * 1244 - 1
    val = 6.46 + rng.normal(0, 0.004, 50)
    res = diagnose_series({"val_loss": dict(zip(steps.tolist(), val))})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 1243, res["findings"][:2]


def test_a_validation_loss_alone_that_fell_is_healthy():
    rng = np.random.default_rng(4)
    steps = np.arange(1, 51) * 1244 - 1
    val = 6.46 * np.exp(-np.arange(50) / 15) + 0.5 + rng.normal(0, 0.01, 50)
    res = diagnose_series({"val_loss": dict(zip(steps.tolist(), val))})
    assert res["verdict"] == "healthy", res["findings"][:2]
