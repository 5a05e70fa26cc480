"""Readings blind30's misses asked for, on made-up logs of the shape: a reward that slides down
steadily from its peak for good, giving back a fifth of its level but not half of its gain; the
return of CleanRL (``charts/episodic_return``) and of the on-policy MAPPO code
(``average_episode_rewards``) is the reward."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.ingest.names import canonical_of


def _rise_then_slide(n: int = 200, noise: float = 8.0, slide: float = 600.0, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    up = np.linspace(20, 3000, 60)
    flat = np.full(40, 3000.0)
    down = np.linspace(3000, 3000 - slide, n - 100)
    return np.concatenate([up, flat, down]) + rng.normal(0, noise, n)


def test_a_reward_that_slides_down_steadily_for_good_collapsed():
    res = diagnose_series({"reward_mean": _rise_then_slide()})
    assert res["verdict"] == "reward_collapse", res["findings"][:2]
    hit = res["findings"][0]
    assert hit["rule"] == "reward_slide" and 100 <= hit["onset_step"] <= 199, hit
    assert "noise widths" in hit["evidence"] and "rank correlation" in hit["evidence"]


def test_a_level_noisy_reward_or_a_small_sag_is_no_slide():
    # the same run whose reward holds its level (noisy) after the rise, and one that sags 3 %
    level = _rise_then_slide(slide=0.0, noise=60.0)
    assert diagnose_series({"reward_mean": level})["verdict"] == "healthy"
    sag = _rise_then_slide(slide=90.0)
    assert not any(f["rule"] == "reward_slide" for f in diagnose_series({"reward_mean": sag})["findings"])
    # a reward that dips and climbs back above its old peak is no slide either
    back = np.concatenate([_rise_then_slide(n=150), np.linspace(2700, 3200, 50)])
    assert not any(f["rule"] == "reward_slide" for f in diagnose_series({"reward_mean": back})["findings"])


def test_cleanrl_and_mappo_returns_are_the_reward():
    assert canonical_of("charts/episodic_return")[0] == "reward_mean"
    assert canonical_of("average_episode_rewards")[0] == "reward_mean"


def _legged(std: np.ndarray, seed: int = 6) -> dict:
    rng = np.random.default_rng(seed)
    n = len(std)
    reward = np.concatenate([np.linspace(0, 12, n // 3), np.full(n - n // 3, 12.0)]) + rng.normal(0, 0.3, n)
    return {"Policy/mean_noise_std": dict(enumerate(std)), "Train/mean_reward": dict(enumerate(reward)),
            "Loss/value_function": dict(enumerate(np.abs(rng.normal(0.01, 0.002, n))))}


def test_an_action_std_that_climbs_for_good_is_a_policy_blow_up():
    # rsl_rl logs the Gaussian policy's std, no entropy: x7 and still climbing
    rng = np.random.default_rng(7)
    std = np.exp(np.linspace(0, np.log(7.0), 500)) * (1 + rng.normal(0, 0.003, 500))
    res = diagnose_series(_legged(std))
    assert res["verdict"] == "divergence", res["findings"][:2]
    hit = res["findings"][0]
    assert hit["rule"] == "action_std_blowup" and hit["onset_step"] < 40, hit


def test_a_std_that_falls_as_the_policy_learns_or_rises_a_little_is_no_blow_up():
    rng = np.random.default_rng(8)
    falls = np.exp(np.linspace(0, np.log(0.3), 500)) * (1 + rng.normal(0, 0.003, 500))
    assert diagnose_series(_legged(falls))["verdict"] == "healthy"
    rises = np.linspace(1.0, 1.6, 500) * (1 + rng.normal(0, 0.003, 500))   # x1.6: under x2.5
    assert not any(f["rule"] == "action_std_blowup" for f in diagnose_series(_legged(rises))["findings"])


def test_a_metric_the_run_names_as_its_reward_is_the_reward_when_no_framework_name_is():
    # a DQN whose return is logged as ``training_reward.avg``: an RL run, so its TD loss rising with
    # the returns is no supervised loss's divergence
    rng = np.random.default_rng(9)
    n = 300
    reward = np.concatenate([np.full(50, -19.0), np.linspace(-19, 16, 150), np.full(100, 16.0)]) + rng.normal(0, 1, n)
    loss = np.concatenate([np.full(60, 0.0017), np.full(120, 0.005), np.full(120, 0.0008)]) * np.exp(rng.normal(0, 0.1, n))
    res = diagnose_series({"training_reward.avg": reward, "training_reward.max": reward + 3, "loss": loss})
    assert res["data"].get("read_as") == {"reward_mean": "training_reward.avg"}, res["data"]
    # two different reward-named metrics leave it open
    res = diagnose_series({"reward_a.avg": reward, "reward_b.avg": -reward, "loss": loss})
    assert "reward_mean" not in (res["data"].get("read_as") or {})
