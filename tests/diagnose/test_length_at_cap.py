"""The longest response of a batch at the generation cap from some step to the end: a runaway when
the run's answers were shorter before and the mean length follows; nothing when the longest answer
touched the cap in most records before (a short cap, a few long answers in every batch)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series

CAP = 200.0


def _run(max_len, mean_len, reward):
    steps = np.arange(1, len(max_len) + 1)
    return {"response_length_max": pd.Series(max_len, index=steps),
            "response_length_mean": pd.Series(mean_len, index=steps),
            "reward_mean": pd.Series(reward, index=steps),
            "kl": pd.Series(np.linspace(0.0, 0.08, len(steps)), index=steps)}


def _rules(res, severity=None):
    return {f["rule"] for f in res["findings"] if severity is None or f["severity"] == severity}


def test_answers_that_run_away_to_the_cap_are_a_length_blowup():
    n, rng = 250, np.random.default_rng(11)
    max_len = np.minimum(CAP, rng.normal(140, 12, n))
    mean_len = rng.normal(90, 6, n)
    max_len[200:] = CAP                                    # pinned from step 201 on
    mean_len[200:] = np.linspace(110, 185, 50)             # and the mean follows it up
    reward = np.r_[np.linspace(0.1, 0.8, 200), np.linspace(0.8, 0.3, 50)] + rng.normal(0, 0.03, n)
    res = diagnose_series(_run(max_len, mean_len, reward))
    assert "length_pinned" in _rules(res, "critical"), res["findings"][:3]


def test_a_longest_answer_at_the_cap_as_often_before_ran_nowhere():
    n, rng = 250, np.random.default_rng(12)
    at_cap = rng.random(n) < 0.65                          # a batch's longest answer truncated in most steps
    max_len = np.where(at_cap, CAP, rng.uniform(120, 199, n))
    max_len[-6:] = CAP                                     # ... and in the last six in a row
    mean_len = np.r_[np.linspace(199, 140, 60), rng.normal(140, 20, n - 60)]
    mean_len[-6:] = rng.normal(196, 2, 6)                  # the last batches long again, as they were at first
    reward = np.linspace(0.0, 2.0, n) + rng.normal(0, 0.4, n)
    res = diagnose_series(_run(max_len, mean_len, reward))
    assert "length_pinned" not in _rules(res), res["findings"][:3]
    assert "length_max_at_cap" in _rules(res, "warning")
    assert res["verdict"] == "healthy", res["findings"][:3]
