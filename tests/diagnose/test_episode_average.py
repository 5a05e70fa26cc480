"""A run that counts episodes and prints one bare average (``Episode: 9300  Avg: 4782  BestAvg:
5060``) and no loss or reward by name: the average is the episodes' return, read as the reward."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _series(avg: np.ndarray) -> dict:
    steps = np.cumsum(np.full(len(avg), 700)).tolist()
    best = np.maximum.accumulate(avg)
    return {"episode": dict(zip(steps, (100.0 * np.arange(1, len(avg) + 1)).tolist())),
            "avg": dict(zip(steps, avg.tolist())), "bestavg": dict(zip(steps, best.tolist())),
            "secs": dict(zip(steps, np.arange(len(avg), dtype=float).tolist()))}


def test_an_episode_average_that_falls_for_good_is_a_reward_collapse():
    rng = np.random.default_rng(2)
    avg = np.r_[np.linspace(-5500, -400, 50), np.full(10, -400.0), np.full(40, -2200.0)] + 150 * rng.standard_normal(100)
    result = diagnose_series(_series(avg))
    assert result["verdict"] == "reward_collapse"
    assert result["data"]["read_as"]["reward_mean"] == "avg"


def test_without_an_episode_counter_a_bare_average_is_not_read_as_the_reward():
    rng = np.random.default_rng(3)
    avg = np.r_[np.linspace(-5500, -400, 50), np.full(10, -400.0), np.full(40, -2200.0)] + 150 * rng.standard_normal(100)
    series = _series(avg)
    del series["episode"]
    result = diagnose_series(series)
    assert "reward_mean" not in (result["data"].get("read_as") or {})
