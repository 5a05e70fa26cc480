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
