"""A loss exactly 0 in its first record is an RL surrogate's, not a model's error: TRL's GRPO loss is
its KL term, 0 at the reference policy before the first update, and its progress table may log it
with no reward beside it. Its climb from 0 to the KL's usual level, and its one-record spikes, are
no divergence; a supervised loss (never 0 before training) is judged as before."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.semantics import loss_starts_at_zero, read_data
from moeproxy.diagnose.series import RunSeries


def _grpo_loss(n: int = 600) -> pd.Series:
    rng = np.random.default_rng(5)
    kl_level = 0.02 * (1 - np.exp(-np.arange(n) / 40.0))               # beta * KL grows from 0, then holds
    loss = kl_level * rng.lognormal(0.0, 0.5, n)
    loss[:3] = 0.0                                                      # before the first update
    for at, size in ((213, 2.1), (309, 7.5), (475, 3.6)):              # one-batch KL spikes, back next record
        loss[at] = size
    return pd.Series(loss, index=np.arange(1, n + 1))


def test_a_grpo_loss_that_starts_at_zero_is_read_as_an_rl_surrogate():
    loss = _grpo_loss()
    run, _ = read_data(RunSeries({"loss": loss}))
    assert run.surrogate_loss and run.is_rl
    res = diagnose_series({"loss": loss})
    assert res["verdict"] == "healthy", res["findings"][:3]


def test_a_supervised_loss_that_climbs_is_still_a_divergence():
    n = 600
    rng = np.random.default_rng(6)
    loss = np.concatenate([np.linspace(2.5, 1.2, 300), np.linspace(1.2, 7.0, 300)]) * rng.lognormal(0, 0.02, n)
    series = pd.Series(loss, index=np.arange(1, n + 1))
    assert not loss_starts_at_zero(RunSeries({"loss": series}))
    res = diagnose_series({"loss": series})
    assert res["verdict"] == "divergence", res["findings"][:3]


def test_a_running_average_printed_0_before_the_first_batch_is_a_models_loss():
    # a loop that prints its running average at step 0 (0.0), then the loss as it learns, then climbs
    n = 60
    loss = np.r_[0.0, np.linspace(2.3, 0.8, 30), np.linspace(0.8, 3.5, n - 31)]
    series = pd.Series(loss, index=np.arange(n) * 100)
    assert not loss_starts_at_zero(RunSeries({"loss": series}))
    assert diagnose_series({"loss": series})["verdict"] == "divergence"


def test_a_loss_zero_in_most_records_or_too_short_is_not_a_surrogate():
    zeros = pd.Series(np.r_[0.0, np.zeros(40), np.full(9, 0.3)], index=np.arange(50))   # mostly 0: another reading
    short = pd.Series([0.0, 0.01, 0.02, 0.02, 0.03], index=np.arange(5))
    assert not loss_starts_at_zero(RunSeries({"loss": zeros}))
    assert not loss_starts_at_zero(RunSeries({"loss": short}))


def test_a_policy_loss_that_swings_while_the_reward_climbs_broke_nothing():
    # a GRPO surrogate over group-normalised advantages swings to x100 its usual size on a few
    # records (groups of near-equal rewards over a tiny std) while the reward climbs to the end
    n, rng = 300, np.random.default_rng(8)
    steps = np.arange(1, n + 1)
    loss = rng.normal(0.0, 0.6, n)
    for at in (40, 95, 150, 205, 260, 290):
        loss[at] = -rng.uniform(70, 170)
    reward = np.linspace(0.2, 0.9, n) + rng.normal(0, 0.05, n)
    res = diagnose_series({"loss": pd.Series(loss, index=steps), "reward_mean": pd.Series(reward, index=steps)})
    rules = {f["rule"]: f["severity"] for f in res["findings"]}
    assert rules.get("policy_loss_swings_reward_up") == "warning", res["findings"][:3]
    assert res["verdict"] == "healthy", res["findings"][:3]
    # the same swings with the reward falling away after them: the policy blew up
    fallen = reward.copy()
    fallen[45:] = np.linspace(0.3, 0.05, n - 45) + rng.normal(0, 0.02, n - 45)
    res = diagnose_series({"loss": pd.Series(loss, index=steps), "reward_mean": pd.Series(fallen, index=steps)})
    assert res["verdict"] == "divergence", res["findings"][:3]
