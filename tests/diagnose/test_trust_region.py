"""The new-vs-old KL of a PPO update, in absolute terms: at 1 nat or more per update from some record
to the end, every update leaves the region PPO's clipping keeps it in (a divergence, even from the
first update, where there is no early level to rise from); a rise from tiny first updates to PPO's
usual 0.01-0.03 is training, however many times its first records."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series


def _ppo(kl, reward):
    steps = np.arange(2048, 2048 * (len(kl) + 1), 2048)
    return {"ppo_kl": pd.Series(kl, index=steps), "reward_mean": pd.Series(reward, index=steps)}  # as stored


def test_a_kl_out_of_the_trust_region_from_the_first_update_is_divergence():
    rng = np.random.default_rng(3)
    n = 200
    kl = np.exp(rng.normal(np.log(6.0), 0.6, n))           # 2-20 nats per update, from the first one
    kl[:5] = [161, 55, 35, 353, 1022]
    reward = -2e-5 - 1e-6 * np.arange(n) + rng.normal(0, 2e-6, n)
    res = diagnose_series(_ppo(kl, reward))
    assert res["verdict"] == "divergence" and res["onset_step"] == 2048, res["findings"]
    assert res["findings"][0]["rule"] == "ppo_kl_out_of_region"


def test_a_kl_rising_from_tiny_first_updates_to_its_usual_level_is_training():
    rng = np.random.default_rng(4)
    n = 300
    kl = np.exp(rng.normal(np.log(0.015), 0.5, n))
    kl[:3] = [0.0008, 0.0009, 0.0008]
    kl[5] = 0.05                                             # one larger update early on
    reward = 500 + 2 * np.arange(n) + rng.normal(0, 20, n)
    res = diagnose_series(_ppo(kl, reward))
    assert res["verdict"] == "healthy", res["findings"]


def test_steps_with_no_policy_gradient_are_no_baseline_for_a_spike():
    # GRPO on a model that already solves most tasks: on most steps every group's rewards are equal,
    # the policy loss is exactly 0 and the grad norm is only an MoE load-balancing loss's (~0.004);
    # the steps that do learn show grad norms of 0.3-1.5. Those are not spikes x300 over 0.004
    rng = np.random.default_rng(14)
    n = 45
    learn = np.zeros(n, dtype=bool)
    learn[[0, 4, 10, 13, 21, 24, 26, 27, 28, 30, 33, 35, 41]] = True
    grad = np.where(learn, rng.uniform(0.1, 1.5, n), rng.uniform(0.0025, 0.0045, n))
    loss = np.where(learn, rng.normal(-0.001, 0.0005, n), 0.0)
    reward = np.where(learn, rng.uniform(0.95, 0.99, n), 1.0)
    steps = np.arange(1, n + 1)
    res = diagnose_series({"grad_norm": pd.Series(grad, index=steps), "loss": pd.Series(loss, index=steps),
                           "reward_mean": pd.Series(reward, index=steps)})
    assert res["verdict"] == "healthy", res["findings"]


def test_a_stretch_of_updates_far_out_of_the_trust_region_is_divergence_even_if_it_comes_back():
    # LABELS.md: a spike that recovers within a few records is healthy; eleven updates in a row at
    # hundreds to thousands of nats is a policy that blew up, whatever the KL did afterwards
    rng = np.random.default_rng(5)
    n = 60
    kl = np.exp(rng.normal(np.log(0.02), 0.4, n))
    kl[30:41] = np.exp(rng.uniform(np.log(800), np.log(6000), 11))
    reward = 10 + 0.05 * np.arange(n) + rng.normal(0, 0.3, n)
    res = diagnose_series(_ppo(kl, reward))
    assert res["verdict"] == "divergence" and res["onset_step"] == 2048 * 31, res["findings"][:3]
    assert res["findings"][0]["rule"] == "ppo_kl_stretch"
    # two such updates, then back, with the return unmoved: a spike that recovered, a warning
    kl[32:41] = kl[:9]
    res = diagnose_series(_ppo(kl, reward))
    assert res["verdict"] == "healthy", res["findings"][:3]
    assert any(f["rule"] == "ppo_kl_spike" for f in res["findings"])
