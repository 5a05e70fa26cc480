"""Readings blind26's misses asked for, on made-up logs of the shape: a PPO new-vs-old KL that climbs
slowly from 0.008 to ~0.4 per update (no step stands out, no update reaches 1 nat) is a runaway."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _ppo(kl_end: float, seed: int):
    rng = np.random.default_rng(seed)
    steps = np.arange(2, 70) * 1024
    kl = np.geomspace(0.008, kl_end, 68) * np.exp(rng.normal(0, 0.15, 68))
    ret = np.r_[np.linspace(30, 200, 24), np.full(44, 210.0)] + rng.normal(0, 8, 68)
    return steps, kl, ret


def test_a_slow_new_vs_old_kl_climb_to_half_a_nat_is_a_runaway():
    steps, kl, ret = _ppo(0.5, 1)
    res = diagnose_series({"ppo_kl": dict(zip(steps, kl)), "reward_mean": dict(zip(steps, ret))})
    assert res["verdict"] == "divergence", res["findings"][:2]
    assert any(f["rule"] == "ppo_kl_runaway" for f in res["findings"]), res["findings"][:2]
    # dated where it first stayed at 10x its first records' level, not at its first or last record
    onset = list(steps).index(res["onset_step"])
    assert 20 <= onset <= 50, res["onset_step"]


def test_a_kl_that_climbs_ten_fold_to_ppos_usual_range_is_no_runaway():
    steps, kl, ret = _ppo(0.06, 2)                   # 0.008 -> 0.06: large for PPO, not a runaway
    res = diagnose_series({"ppo_kl": dict(zip(steps, kl)), "reward_mean": dict(zip(steps, ret))})
    assert not any(f["rule"] == "ppo_kl_runaway" for f in res["findings"]), res["findings"][:2]

