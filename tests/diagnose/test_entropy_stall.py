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
