"""Readings blind24's misses asked for, on made-up logs of the shape: an RL TD loss that blows up
from its second record (QMIX: 0.49, 5.7, 1419, 5.7e5, ... 1e28) is dated against its first records,
not against a median already inside the blow-up; an actor loss (-Q) that grows x200 with the return
is no blow-up."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def test_a_td_loss_blown_up_from_its_first_records_is_dated_where_it_left_them():
    steps = np.arange(1, 56) * 10_000
    loss = np.r_[[0.49, 5.7, 1419.0, 5.7e5, 3e7, 9e8, 2e9, 6.9e10, 3e12], 10 ** np.linspace(13, 28, 46)]
    reward = np.linspace(1.3, 14.5, 55)
    res = diagnose_series({"loss": dict(zip(steps, loss)), "reward_mean": dict(zip(steps, reward))})
    assert res["verdict"] == "divergence", res["findings"][:2]
    assert res["onset_step"] <= steps[2], res["findings"][:2]


def test_an_actor_loss_growing_with_the_return_is_no_blow_up():
    rng = np.random.default_rng(11)
    steps = np.arange(1, 401) * 500
    ret = np.r_[np.linspace(0, 1900, 300), np.full(100, 1900.0)] + rng.normal(0, 20, 400)
    actor = -(8.4 + ret) * np.exp(rng.normal(0, 0.05, 400))     # -Q follows the return up x200
    res = diagnose_series({"loss": dict(zip(steps, actor)), "reward_mean": dict(zip(steps, ret))})
    assert not any(f["rule"] == "policy_loss_blowup" and f["severity"] == "critical" for f in res["findings"]), \
        res["findings"][:2]


def test_a_kl_term_blown_up_within_its_first_twentieth_is_dated_from_its_first_records():
    steps = np.arange(1950, 1950 + 839 * 50, 50)
    kl = np.r_[[0.392, 4.86, 50.6, 156.0, 400.0, 900.0, 1513.0], np.geomspace(2e3, 2e15, 400), np.full(432, 2.5e6)]
    loss = np.linspace(10.7, 2.8, 839)
    res = diagnose_series({"kl": dict(zip(steps, kl)), "loss": dict(zip(steps, loss))})
    assert res["verdict"] == "divergence" and res["onset_step"] <= 2050, res["findings"][:2]


def test_a_reward_dip_the_run_came_back_from_for_a_dozen_records_is_not_where_it_fell_for_good():
    # blind25's shape: a return at ~1000 with dips that recover; one record at 522 (130), back at
    # ~1000 for twelve records, then down to ~300 for good from 142
    rng = np.random.default_rng(12)
    ret = np.r_[np.linspace(40, 1000, 40), np.full(102, 1000.0), np.full(400, 300.0)] + rng.normal(0, 30, 542)
    ret[130] = 522.0
    res = diagnose_series({"reward_mean": dict(enumerate(ret))})
    assert res["verdict"] == "reward_collapse" and 141 <= res["onset_step"] <= 143, res["findings"][:2]


def test_the_record_the_reward_stays_below_from_skips_a_dip_it_came_back_from():
    from moeproxy.diagnose.detectors.reward import _stays_below

    low = np.r_[np.zeros(130), [1], np.zeros(11), np.ones(400)].astype(bool)
    share = np.cumsum(low[::-1])[::-1] / np.arange(len(low), 0, -1)
    assert share[130] >= 0.95                       # 95 % of what follows alone would date the dip
    assert _stays_below(low)[0] == 142


def test_a_validation_loss_at_a_uniform_guess_beside_a_training_loss_that_never_improved():
    rng = np.random.default_rng(13)
    steps = np.arange(49, 49 + 400 * 25, 25)
    train = 0.78 + rng.normal(0, 0.08, 400)                         # noisy, never below ln 2, no trend
    val = {int(s) + 10: float(np.log(2) + rng.normal(0, 1e-4)) for s in steps[8::8]}
    res = diagnose_series({"loss": dict(zip(steps, train)), "val_loss": val})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 49, res["findings"][:2]
    # the same validation loss while the training loss falls: it learns on what it trains on
    falling = dict(zip(steps, 0.78 * np.exp(-np.arange(400) / 150) + rng.normal(0, 0.01, 400)))
    res = diagnose_series({"loss": falling, "val_loss": val})
    assert res["verdict"] != "vanishing_gradient", res["findings"][:2]


def test_an_evaluation_metrics_score_is_no_reward():
    from moeproxy.ingest.names import canonical_of

    assert canonical_of("r2_score") is None and canonical_of("f1_score") is None
    assert canonical_of("score") == ("reward_mean", canonical_of("score")[1])
