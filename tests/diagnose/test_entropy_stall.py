"""LABELS.md's entropy collapse is "entropy < 10-20 % of its start, reward flat or falling after": an
entropy that fell while the reward was still climbing becomes a collapse where the reward stopped
improving for good (not where the entropy first fell), and a reward still climbing to the end keeps
it a sharpening. The onset is also given in the log's other counters (an RL library's environment
steps), where a reader of its plots dates it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series


def _run(reward_after_60):
    steps = np.arange(100, 20100, 100)                       # a rollout counter, 200 records
    n = len(steps)
    rng = np.random.default_rng(3)
    entropy = 1.38 * np.exp(-np.arange(n) / 6.0) + 0.005      # to under 15 % of its start by record 12
    reward = np.where(np.arange(n) < 60, 0.6 + 3.0 * np.arange(n) / 60, 0.0)
    reward[60:] = reward_after_60(np.arange(n - 60))
    reward = reward + rng.normal(0, 0.02, n)
    return {"policy_entropy": pd.Series(entropy, index=steps), "reward_mean": pd.Series(reward, index=steps),
            "time/total_timesteps": pd.Series(steps * 5.0, index=steps)}


def test_entropy_gone_then_the_reward_stalls_is_a_collapse_from_the_stall():
    res = diagnose_series(_run(lambda k: 3.6 + 0.2 * k / len(k)))  # +0.2 after a rise of 3.0: stalled
    assert res["verdict"] == "entropy_collapse", res["findings"]
    assert 5000 <= res["onset_step"] <= 7000
    assert res["onset_counters"] == {"time/total_timesteps": 5 * res["onset_step"]}


def test_entropy_gone_while_the_reward_climbs_to_the_end_is_sharpening():
    res = diagnose_series(_run(lambda k: 3.6 + 3.0 * k / len(k)))  # still climbing as fast
    assert res["verdict"] == "healthy", res["findings"]
    assert any(f["rule"] == "entropy_drop_reward_rising" for f in res["findings"])


def _critic(value_loss, reward):
    steps = np.arange(100, 100 * (len(reward) + 1), 100)
    return {"train/value_loss": pd.Series(value_loss, index=steps), "reward_mean": pd.Series(reward, index=steps),
            "policy_entropy": pd.Series(np.linspace(1.6, 1.2, len(reward)), index=steps)}


def test_a_value_loss_blowing_up_as_the_reward_falls_is_divergence():
    n = 200
    value_loss = np.full(n, 300.0) + np.random.default_rng(1).normal(0, 50, n)
    value_loss[18:140] = 1e5 * (1 + np.arange(122) % 5)          # x300-1500 its early level, for long
    reward = np.where(np.arange(n) < 18, -300.0, -5000.0)
    reward[140:] = -400.0                                         # it recovers late: still a blow-up
    res = diagnose_series(_critic(value_loss, reward))
    assert res["verdict"] == "divergence" and res["onset_step"] == 1900, res["findings"]
    assert res["findings"][0]["rule"] == "value_loss_blowup"


def test_a_value_loss_growing_with_a_climbing_return_is_learning():
    n = 200
    reward = np.linspace(5, 200, n)
    value_loss = 0.5 * (reward / 5) ** 2                            # the critic's error grows with the return's scale
    res = diagnose_series(_critic(value_loss, reward))
    assert not any(f["rule"] == "value_loss_blowup" for f in res["findings"]), res["findings"]


def test_an_evaluation_reward_stands_in_for_a_training_reward_that_is_not_logged():
    # Stable-Baselines3 with an EvalCallback and no episode monitor: the only reward is eval/mean_reward.
    # A critic that fits a constant return at once (value loss ~1e-8) and later wobbles to 1e-3 is
    # 1e5x its early level, but the return did not fall: no blow-up; the entropy gone with the
    # evaluation reward flat is the collapse
    n = 400
    steps = np.arange(500, 500 * (n + 1), 500)
    rng = np.random.default_rng(5)
    value_loss = np.abs(rng.normal(1e-8, 5e-9, n))
    value_loss[100:] = np.abs(rng.normal(5e-4, 3e-4, n - 100))
    entropy = 1.6 * np.exp(-np.arange(n) / 40.0) + 3e-5
    series = {"train/value_loss": pd.Series(value_loss, index=steps),
              "policy_entropy": pd.Series(entropy, index=steps),
              "eval/mean_reward": pd.Series(np.full(n, -3.0), index=steps)}
    res = diagnose_series(series)
    assert not any(f["rule"] == "value_loss_blowup" for f in res["findings"]), res["findings"]
    assert res["verdict"] == "entropy_collapse", res["findings"]
    # without the evaluation reward there is no reward at all, and the blow-up rule has nothing to check
    del series["eval/mean_reward"]
    assert any(f["rule"] == "value_loss_blowup" for f in diagnose_series(series)["findings"])


def test_spinning_up_critic_losses_are_value_losses():
    from moeproxy.diagnose.detectors.divergence import VALUE_LOSS
    from moeproxy.ingest.names import canonical_of

    assert all(VALUE_LOSS.search(n) for n in ("LossQ", "LossQ1", "LossV", "train/q_loss"))
    assert not any(VALUE_LOSS.search(n) for n in ("LossPi", "loss_quality"))
    assert canonical_of("LossPi")[0] == "loss"


def test_an_entropy_sliding_down_from_the_first_record_is_dated_where_it_neared_the_floor():
    # Stable-Baselines3 PPO on a game: the entropy falls from uniform at the first rollout, the return
    # stalls, and the policy ends deterministic. Its fall began at the first record; the collapse is
    # visible where it got down near the floor (LABELS.md: entropy under 10-20 % of its start)
    n = 300
    steps = np.arange(512, 512 * (n + 1), 512)
    k = np.arange(n)
    entropy = 1.93 * np.exp(-k / 40.0) + 1e-5
    rng = np.random.default_rng(11)
    reward = np.where(k < 60, 1500 + 13 * k, 2280 - 8 * np.clip(k - 60, 0, 100)) + rng.normal(0, 20, n)
    res = diagnose_series({"policy_entropy": pd.Series(entropy, index=steps), "reward_mean": pd.Series(reward, index=steps)})
    assert res["verdict"] == "entropy_collapse", res["findings"]
    into = int(np.argmax(entropy <= 0.3 * entropy[:15].mean()))  # the first record under twice the floor
    assert abs(res["onset_step"] / 512 - 1 - into) <= 2, (res["onset_step"], into)
