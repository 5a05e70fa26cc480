"""Readings blind23's misses asked for, each on a made-up log of the shape: an onset is the first
record that left the plateau, not the bend's last record on it; a Lightning loss named
``train_loss_batch`` frozen at one value; a validation loss repeated exactly beside a noisy training
loss that never improves; a loss whose epoch copy never moves while its four batches repeat one cycle;
per-worker copies of the loss (``Loss_device/train_<n>``) that go NaN on their own counters; a critic
whose early bootstrapping cluster came back before the real blow-up; an offline critic still
climbing at the end while the evaluation return stands still; a loss that passes through 65504 on
its way up is no fp16 saturation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.semantics import read_data, training_loss_by_name
from moeproxy.diagnose.series import RunSeries


def _rules(res):
    return {(f["rule"], f["severity"]) for f in res["findings"]}


def test_the_onset_is_the_first_record_off_the_plateau():
    # a return held at its ceiling 200 for 30 iterations, then 199.5, 170, 143, ... down to ~45
    reward = np.r_[np.linspace(20, 200, 20), np.full(30, 200.0), [199.5, 170, 143, 126, 120, 112, 104, 96, 90, 81,
                                                                   70, 54, 47, 44], np.full(20, 45.0)]
    res = diagnose_series({"reward_mean": dict(enumerate(reward))})
    assert res["verdict"] == "reward_collapse", res["findings"]
    assert res["onset_step"] == 51, res["findings"]     # 170's record (199.5 at 50 is within the noise)


def test_a_loss_named_train_loss_batch_is_the_training_loss():
    assert training_loss_by_name(["train_loss_batch", "epoch"]) == "train_loss_batch"
    assert training_loss_by_name(["Loss/train", "Loss/val"]) == "Loss/train"
    assert training_loss_by_name(["val_loss_batch", "epoch"]) is None
    steps = range(1299, 1299 + 74 * 50, 50)
    res = diagnose_series({"train_loss_batch": {s: 16.74222755432129 for s in steps}})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 1299, res["findings"]


def test_a_validation_loss_repeated_beside_a_noisy_loss_that_never_improves_never_learned():
    rng = np.random.default_rng(4)
    train = 6.1875 * rng.integers(2, 12, 60)              # quantized, no trend, from 12.4 to 68
    steps = np.arange(49, 49 + 60 * 50, 50)
    val = {int(s) + 20: 47.489749908447266 for s in steps[2::3]}
    # (ingest stores the training loss under its canonical name)
    res = diagnose_series({"loss": dict(zip(steps, train)), "val_loss": val})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 49, res["findings"]
    # the same validation loss while the training loss falls: printed stale, not frozen
    falling = {int(s): 60.0 * np.exp(-i / 15) + rng.normal(0, 0.5) for i, s in enumerate(steps)}
    res = diagnose_series({"loss": falling, "val_loss": val})
    assert res["verdict"] == "healthy", res["findings"]


def test_a_loss_whose_epoch_copy_never_moves_never_learned():
    cycle = np.array([289056064.0, 288427552.0, 254835184.0, 211427632.0])
    steps = np.arange(272)
    per_step = np.concatenate([cycle * (1 - 2e-6 * e) for e in range(68)])
    per_epoch = {4 * e + 3: 268777408.0 * (1 - 2e-6 * e) for e in range(68)}
    # (ingest stores the per-step copy under the canonical name)
    res = diagnose_series({"loss": dict(zip(steps, per_step)), "train_loss_epoch": per_epoch})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 3, res["findings"]
    # an epoch copy that falls by a tenth over the run learned
    learning = {k: v * (1 - 0.1 * k / 271) for k, v in per_epoch.items()}
    res = diagnose_series({"loss": dict(zip(steps, per_step * np.repeat(np.linspace(1, 0.9, 68), 4))),
                           "train_loss_epoch": learning})
    assert res["verdict"] == "healthy", res["findings"]


def test_per_worker_copies_are_set_aside_and_the_run_loss_decides():
    rng = np.random.default_rng(5)
    n = 600
    loss = 0.018 * np.exp(rng.normal(0, 0.03, n))
    loss[380:] = 0.018 * np.exp(np.linspace(0, 30, n - 380))       # climbs from 380 on
    loss[560:] = np.nan                                              # and turns NaN
    series = {"Loss/train": dict(enumerate(loss))}
    for w in range(20):                  # each worker's copy: a few records on its own counter, NaN early
        own = 0.018 * np.exp(rng.normal(0, 0.03, 12))
        own[11:] = np.nan
        series[f"Loss_device/train_{w}"] = dict(enumerate(own))
    run, reading = read_data(RunSeries(series))
    assert reading.replicas == {"Loss_device/train_<n>": 20}
    assert run.names == ["Loss/train"]
    res = diagnose_series(series)
    assert res["verdict"] == "divergence" and 370 <= res["onset_step"] <= 400, res["findings"][:3]
    assert res["data"]["replicas"] == {"Loss_device/train_<n>": 20}
    # numbered series as dense as the run (per-layer statistics of one counter) are kept
    dense = {f"layer_{i}/grad_norm_{i}": dict(enumerate(np.full(n, 1.0))) for i in range(10)}
    _, reading = read_data(RunSeries(series | dense))
    assert set(reading.replicas) == {"Loss_device/train_<n>"}


def _sac(n=400, seed=6):
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1) * 5000
    critic = 0.005 * np.exp(rng.normal(0, 0.3, n))
    critic[:8] = 0.002
    critic[10:30] = 0.8 * np.exp(rng.normal(0, 0.3, 20))   # the first bootstrapping epochs, then back
    reward = np.r_[np.linspace(-100, 300, 150), np.full(n - 150, 310.0)] + rng.normal(0, 5, n)
    return steps, critic, reward


def test_a_critic_blow_up_is_dated_by_the_excursion_that_lasts_not_an_early_cluster():
    steps, critic, reward = _sac()
    critic[300:] = 0.005 * np.exp(np.linspace(0, 40, 100))
    reward[303:] = -110 + np.random.default_rng(7).normal(0, 5, 97)
    res = diagnose_series({"train/critic_loss": dict(zip(steps, critic)), "reward_mean": dict(zip(steps, reward))})
    assert res["verdict"] == "divergence", res["findings"][:3]
    assert steps[295] <= res["onset_step"] <= steps[305], res["findings"][:3]


def test_an_offline_critic_still_climbing_while_the_eval_return_stands_still_diverged():
    rng = np.random.default_rng(8)
    n = 200
    steps = np.arange(1, n + 1) * 250
    critic = np.r_[np.linspace(1.4, 1.2, 8), 1.2 * np.exp(np.linspace(0, 8, n - 8))] * np.exp(rng.normal(0, 0.05, n))
    ret = np.r_[np.linspace(4.5, 2.0, 10), np.linspace(2.0, 6.5, 10), np.full(n - 20, 6.8)] + rng.normal(0, 0.3, n)
    series = {"loss/critic1": dict(zip(steps, critic)), "eval/normalized_episode_reward": dict(zip(steps, ret)),
              "eval/normalized_episode_reward_std": dict(zip(steps, np.full(n, 0.7)))}
    res = diagnose_series(series)
    assert res["verdict"] == "divergence", res["findings"][:3]
    assert ("value_loss_blowup", "critical") in _rules(res)
    # a critic that grew with the return early and then settled: learning
    settled = np.r_[np.linspace(1.4, 30, 60), np.full(n - 60, 30.0)] * np.exp(rng.normal(0, 0.05, n))
    series["loss/critic1"] = dict(zip(steps, settled))
    res = diagnose_series(series)
    assert res["verdict"] == "healthy", res["findings"][:3]


def test_a_loss_passing_through_65504_on_its_way_up_is_no_fp16_saturation():
    steps = np.arange(1, 101) * 1000
    critic = np.r_[np.full(30, 1600.0), 1600 * np.exp(np.linspace(0, 40, 70))]
    critic[45] = 65530.0                                   # one record lands next to the fp16 maximum
    res = diagnose_series({"loss/critic1": dict(zip(steps, critic)),
                           "reward_mean": dict(zip(steps, np.r_[np.linspace(0, 20, 30), np.full(70, 3.0)]))})
    assert ("saturated_value", "critical") not in _rules(res), res["findings"][:3]
    # a calm loss that lands on the maximum and stays clamped there is saturation
    clamped = np.r_[np.full(45, 2.0), np.full(55, 65504.0)] * np.r_[np.exp(np.random.default_rng(9).normal(0, 0.05, 45)),
                                                                     np.ones(55)]
    res = diagnose_series({"loss": pd.Series(clamped, index=steps)})
    assert res["verdict"] == "overflow" and res["onset_step"] == steps[45], res["findings"][:3]
    assert ("saturated_value", "critical") in _rules(res)


def test_an_evaluation_return_by_another_name_but_not_its_extremes():
    def reward_of(names):
        found = RunSeries({n: {1: 1.0, 2: 2.0, 3: 3.0} for n in names}).resolve_reward()
        return found[0] if found else None

    assert reward_of(["eval/normalized_episode_reward"]) == "eval/normalized_episode_reward"
    assert reward_of(["eval/min_reward", "eval/normalized_episode_reward_std", "eval/std_return"]) is None
