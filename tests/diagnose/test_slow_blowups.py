"""Blow-ups that build up slowly, as deep-RL logs show them: a policy entropy climbing over hundreds
of records (it never leaves a rolling band that follows it, so it is measured against its start), and
a critic whose squared error grows from the first epochs (dated from where the lasting climb began,
not before the return stopped rising)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series


def _policy(entropy, reward):
    steps = np.arange(len(entropy))
    return {"policy_entropy": pd.Series(entropy, index=steps), "reward_mean": pd.Series(reward, index=steps)}


def test_an_entropy_climbing_slowly_for_good_is_a_blow_up_dated_where_its_climb_began():
    # found where it doubled, dated where the climb that got it there began (its level above 1.3x
    # its start without a break): the raters date a policy spreading out from its first updates
    # from there, and a reward that falls on the way comes after the blow-up, not before it
    n = 1000
    rng = np.random.default_rng(4)
    entropy = 0.92 * np.exp(np.arange(n) / 400.0) + rng.normal(0, 0.02, n)  # x12 by the end, never a jump
    reward = rng.normal(1.0, 0.8, n)                                          # flat and noisy
    res = diagnose_series(_policy(entropy, reward))
    assert res["verdict"] == "divergence", res["findings"]
    assert res["findings"][0]["rule"] == "entropy_blowup"
    start = np.median(entropy[:50])
    began = int(np.argmax(entropy >= 1.3 * start))
    doubled = int(np.argmax(entropy >= 2 * start))
    assert abs(res["onset_step"] - began) <= 15 and res["onset_step"] < doubled - 100, (res["onset_step"], began)


def test_an_entropy_rise_that_held_a_third_of_the_run_then_came_back_still_counts():
    n = 900
    rng = np.random.default_rng(6)
    entropy = np.concatenate([np.full(100, 1.0), np.linspace(1.0, 5.0, 250), np.linspace(5.0, 0.4, 550)])
    entropy = entropy + rng.normal(0, 0.03, n)
    res = diagnose_series(_policy(entropy, rng.normal(1.0, 0.5, n)))
    # (its climb began at record 100; it stood 1.3x its start from about 119 on, doubled at 162)
    assert res["verdict"] == "divergence" and 110 <= res["onset_step"] <= 135, res["findings"]


def test_a_log_that_opens_in_the_entropy_early_fall_shows_no_rise():
    n = 300
    rng = np.random.default_rng(8)
    entropy = 0.08 + 0.6 * np.exp(-np.arange(n) / 6.0) + rng.normal(0, 0.005, n)  # 0.68 -> 0.08 at once
    res = diagnose_series(_policy(entropy, np.linspace(0.2, 0.8, n) + rng.normal(0, 0.02, n)))
    assert not any(f["rule"] in ("entropy_blowup", "entropy_rise") for f in res["findings"]), res["findings"]


def _critic(value_loss, reward):
    steps = np.arange(1, len(reward) + 1)
    return {"LossQ": pd.Series(value_loss, index=steps), "reward_mean": pd.Series(reward, index=steps)}


def test_a_critic_growing_from_the_start_is_dated_after_the_return_stopped_rising():
    n = 200
    value_loss = 3.0 * 1.9 ** np.arange(n)                     # x4 an epoch early on, from the first epoch
    reward = np.concatenate([[50, 60, 800, 6300, 4800, 2900, 2300], np.full(n - 7, 450.0)])
    res = diagnose_series(_critic(value_loss, reward))
    assert res["verdict"] == "divergence", res["findings"]
    assert res["findings"][0]["rule"] == "value_loss_blowup"
    assert res["onset_step"] == 5, res["findings"][0]          # the record after the return's best stretch


def test_a_critic_blowing_up_beside_a_return_that_never_improved_is_divergence():
    n = 50
    rng = np.random.default_rng(2)
    value_loss = np.concatenate([np.abs(rng.normal(0.05, 0.03, 25)), 1.4 * 3.0 ** np.arange(25)])
    reward = np.full(n, -150.0) + rng.normal(0, 1.0, n)        # the goal is never reached
    res = diagnose_series(_critic(value_loss, reward))
    assert res["verdict"] == "divergence" and 24 <= res["onset_step"] <= 27, res["findings"]
    # the same growth that stays small beside that return (its root below every return seen) is no blow-up
    small = np.concatenate([np.full(25, 1e-8), np.full(25, 1e-3)])
    assert not any(f["rule"] == "value_loss_blowup" for f in diagnose_series(_critic(small, reward))["findings"])


def test_a_critic_whose_error_dwarfs_every_return_blew_up_whatever_the_return_did():
    # ML-Agents PPO: the value loss sits at ~0.03 while the return climbs 0.5 -> 4, then jumps to
    # 1e7-1e12 and stays; the return is still rising (and its last episodes end at the blow-up,
    # so one record follows it). A critic error (root of its loss) of 1e5 beside returns of 4
    # followed no return: it blew up
    rng = np.random.default_rng(31)
    steps = np.arange(2, 202) * 1000
    calm = np.abs(rng.normal(0.03, 0.005, 90))
    value_loss = np.concatenate([calm, 10.0 ** rng.uniform(7, 12, 110)])
    reward = np.linspace(0.5, 4.0, 91) + rng.normal(0, 0.3, 91)      # logged up to the blow-up
    series = {"Losses/Value Loss": pd.Series(value_loss, index=steps),
              "reward_mean": pd.Series(reward, index=steps[:91])}
    res = diagnose_series(series)
    assert res["verdict"] == "divergence", res["findings"]
    assert res["findings"][0]["rule"] == "value_loss_blowup"
    assert 90_000 <= res["onset_step"] <= 94_000, res["findings"][0]
    # the same jump to a loss whose root stays within the returns' scale (x100 of 0.03, an error of
    # 1.7 beside returns of 4) is no blow-up while the return rises
    mild = np.concatenate([calm, np.full(110, 3.0)])
    mild_res = diagnose_series({**series, "Losses/Value Loss": pd.Series(mild, index=steps)})
    assert not any(f["rule"] == "value_loss_blowup" for f in mild_res["findings"]), mild_res["findings"]


def test_a_critic_climbing_through_its_first_tenth_is_measured_from_its_first_records():
    # Stable-Baselines3 DDPG: the critic's loss climbs x1e5 over the first fifth (already x1e4 by the
    # end of the first tenth, so a tenth's median hides it) while the return never gets better
    n = 1000
    rng = np.random.default_rng(12)
    value_loss = np.concatenate([17.0 * 1.25 ** np.arange(60), np.full(n - 60, 17.0 * 1.25 ** 60)])
    value_loss = value_loss * np.exp(rng.normal(0, 0.1, n))
    reward = -7800 + rng.normal(0, 400, n)
    res = diagnose_series(_critic(value_loss, reward))
    assert res["verdict"] == "divergence", res["findings"]
    # with no reward logged, learning cannot be told from a blow-up: the first tenth is the yardstick
    assert not any(f["rule"] == "value_loss_blowup"
                   for f in diagnose_series({"LossQ": pd.Series(value_loss, index=np.arange(1, n + 1))})["findings"])


def test_a_critic_whose_error_grew_with_the_return_it_learned_is_no_blow_up():
    # DDPG learning: the return climbs x9 (200 -> 1800) and the critic's squared error x80 with it
    # (its root x9); later the return wobbles down by noise. The error grew with the return's scale
    n = 600
    rng = np.random.default_rng(13)
    ramp = np.minimum(np.arange(n) / 100.0, 1.0)
    reward = 200 + 1600 * ramp + rng.normal(0, 120, n)
    value_loss = 300.0 * (1 + 8 * ramp) ** 2 * np.exp(rng.normal(0, 0.3, n))
    res = diagnose_series(_critic(value_loss, reward))
    assert not any(f["rule"] == "value_loss_blowup" for f in res["findings"]), res["findings"]


def test_a_critic_loss_named_as_only_rl_names_it_is_judged_when_no_reward_is_read():
    # rlkit's CQL logs several returns (exploration and evaluation, averages and means), none of
    # which is read as the run's reward; its twin critics' ``trainer/QF1 Loss`` still says the run is
    # RL's, and a critic that settles at ~60 and then climbs x1e9 diverged
    n = 400
    rng = np.random.default_rng(21)
    steps = np.arange(n)
    qf = np.concatenate([60 + rng.normal(0, 6, 200), 60 * 1.12 ** np.arange(1, 201)])
    returns = 500 + rng.normal(0, 150, n)
    series = {"trainer/QF1 Loss": pd.Series(qf, index=steps),
              "exploration/Average Returns": pd.Series(returns, index=steps),
              "exploration/Rewards Mean": pd.Series(returns / 1000, index=steps)}
    res = diagnose_series(series)
    critic = [f for f in res["findings"] if f["rule"] == "value_loss_blowup"]
    assert res["verdict"] == "divergence" and critic, res["findings"]
    assert 195 <= critic[0]["onset_step"] <= 215 and 195 <= res["onset_step"] <= 215, critic
    # a VQ model's ``q_loss`` (its codebook loss) is no critic: without a reward it is not judged so
    vq = {"q_loss": pd.Series(qf, index=steps), "rec_loss": pd.Series(1 + rng.normal(0, 0.01, n), index=steps)}
    assert not any(f["rule"] == "value_loss_blowup" for f in diagnose_series(vq)["findings"])


def test_a_td_loss_that_grew_with_the_returns_it_learned_is_no_blow_up():
    # SB3 DQN: train/loss (a TD loss) grows 0.2 -> 175 while the return climbs 0.2 -> 4950: the loss
    # scales with the returns learned, not a blow-up; the same loss beside a return that never
    # improved is one
    n = 400
    rng = np.random.default_rng(41)
    ramp = np.clip((np.arange(n) - 200) / 100.0, 0.0, 1.0)
    reward = 0.2 + 4950 * ramp + np.abs(rng.normal(0, 0.05, n))
    loss = np.where(np.arange(n) < 240, 0.3, 120.0) * np.exp(rng.normal(0, 0.3, n))
    steps = np.arange(1, n + 1) * 500
    series = {"loss": pd.Series(loss, index=steps), "reward_mean": pd.Series(reward, index=steps)}
    res = diagnose_series(series)
    assert not any(f["rule"] == "policy_loss_blowup" for f in res["findings"]), res["findings"]
    flat = {**series, "reward_mean": pd.Series(0.2 + rng.normal(0, 0.05, n), index=steps)}
    assert any(f["rule"] == "policy_loss_blowup" for f in diagnose_series(flat)["findings"])


def test_a_critic_named_as_rsl_rl_or_a_printed_line_names_it_is_read_and_a_zero_return_gives_it_no_scale():
    # rsl_rl (legged_gym) logs its critic's loss as ``Loss/value_function``; a printed
    # ``Critic Loss1: ...`` is read as ``critic loss1``: both are value losses
    n = 50
    rng = np.random.default_rng(2)
    value_loss = np.concatenate([np.abs(rng.normal(0.05, 0.03, 25)), 1.4 * 3.0 ** np.arange(25)])
    reward = np.full(n, -150.0) + rng.normal(0, 1.0, n)
    steps = np.arange(1, n + 1)
    for name in ("Loss/value_function", "critic loss1"):
        res = diagnose_series({name: pd.Series(value_loss, index=steps), "reward_mean": pd.Series(reward, index=steps)})
        assert res["verdict"] == "divergence" and res["findings"][0]["rule"] == "value_loss_blowup", (name, res["findings"][:2])
    # a return of 0 in every record (set aside as never computed): a critic fitting it from 1e-7 to
    # 1e-2 is rounding in no unit of a return, no blow-up
    tiny = np.concatenate([np.full(25, 1.5e-7), np.abs(rng.normal(3e-3, 1e-3, 25))])
    res = diagnose_series({"Loss/value_function": pd.Series(tiny, index=steps), "Train/mean_reward": pd.Series(0.0, index=steps)})
    assert not any(f["rule"] == "value_loss_blowup" for f in res["findings"]), res["findings"][:2]
    res = diagnose_series({"Loss/value_function": pd.Series(tiny, index=steps)})   # no return logged at all: it counts
    assert any(f["rule"] == "value_loss_blowup" for f in res["findings"]), res["findings"][:2]
