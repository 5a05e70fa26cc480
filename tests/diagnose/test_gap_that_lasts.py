"""A train/rollout gap is judged at the departure that lasts: a bump of a few learning steps that came
back under the limit before the fault is not where the gap opened (a 50 M MoE's routing mismatch read
as a divergence because its gap was taken at such a bump)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series


def test_a_gap_that_opens_for_good_after_an_early_bump_is_the_mismatch():
    n = 45
    rng = np.random.default_rng(2)
    steps = np.arange(1, n + 1)
    gap = 1e-5 * np.exp(rng.normal(0, 0.1, n))
    gap[4:10] = 8e-5                                   # learning steps 5-10: a bump, back under the limit
    gap[22:] = np.geomspace(3e-3, 0.2, n - 22)         # from step 23: opens and grows for good
    reward = np.r_[np.full(26, 0.9), np.full(n - 26, 0.3)] + rng.normal(0, 0.01, n)
    res = diagnose_series({"logprob_diff_mean": pd.Series(gap, index=steps), "reward_mean": pd.Series(reward, index=steps)})
    assert res["verdict"] == "precision_mismatch" and res["onset_step"] == 23, res["findings"]


def test_a_bump_that_came_back_alone_is_no_mismatch():
    n = 45
    rng = np.random.default_rng(3)
    steps = np.arange(1, n + 1)
    gap = 1e-5 * np.exp(rng.normal(0, 0.1, n))
    gap[4:10] = 8e-5
    res = diagnose_series({"logprob_diff_mean": pd.Series(gap, index=steps)})
    assert res["verdict"] == "healthy", res["findings"]
