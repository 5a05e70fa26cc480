"""LABELS.md "the run never learns at all", read on an RL policy's entropy: one value to seven
digits in every record from the run's start (ln 7 for a uniform policy over seven actions) says no
update ever reached the policy. An entropy that moved first, or one printed too short to tell, is not."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series


def _a2c(entropy, reward, steps):
    return {"entropy": pd.Series(entropy, index=steps), "episode_reward": pd.Series(reward, index=steps),
            "policy_loss": pd.Series(np.random.default_rng(1).normal(0, 3e-3, len(steps)), index=steps),
            "value_loss": pd.Series(np.abs(np.random.default_rng(2).normal(0, 1e-3, len(steps))), index=steps)}


def test_an_entropy_at_one_value_from_the_first_record_to_the_last_never_learned():
    n = 121
    steps = np.arange(1, n + 1) * 80
    reward = np.random.default_rng(3).uniform(0.0, 0.06, n)              # a sparse task: tiny returns, no trend
    res = diagnose_series(_a2c(np.full(n, np.log(7.0)), reward, steps))
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 80, res["findings"][:3]
    assert any(f["rule"] == "entropy_frozen" for f in res["findings"])


def test_an_entropy_that_moved_before_it_settled_or_is_printed_short_is_not_frozen():
    n = 121
    steps = np.arange(1, n + 1) * 80
    reward = np.linspace(0.0, 0.9, n)
    moved = np.full(n, 0.6931472)
    moved[:30] = np.linspace(1.9459101, 0.6931472, 30)       # sharpened, then settled
    res = diagnose_series(_a2c(moved, reward, steps))
    assert not any(f["rule"] == "entropy_frozen" for f in res["findings"]), res["findings"][:3]
    res = diagnose_series(_a2c(np.full(n, 1.9), reward, steps))   # two digits repeat by chance
    assert not any(f["rule"] == "entropy_frozen" for f in res["findings"]), res["findings"][:3]
