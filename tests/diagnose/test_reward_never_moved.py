"""LABELS.md "the run never learns at all", read on an RL reward: a penalty every sample earns (-0.1
for an answer that never terminates) from the first record to the last is nothing learned; a reward
flat at a positive level (a converged run at its ceiling) is not read this way."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(reward: np.ndarray) -> dict:
    steps = range(1, len(reward) + 1)
    rng = np.random.default_rng(4)
    return diagnose_series({"reward_mean": dict(zip(steps, reward.tolist())),
                            "kl": dict(zip(steps, (1e-4 + 1e-4 * rng.random(len(reward))).tolist())),
                            "policy_entropy": dict(zip(steps, (0.3 + 0.02 * rng.random(len(reward))).tolist()))})


def test_a_penalty_on_every_sample_from_start_to_end_is_nothing_learned():
    rng = np.random.default_rng(5)
    reward = np.full(100, -0.1)
    reward[rng.choice(100, 8, replace=False)] = [-0.1025, -0.101, -0.1055, -0.1015, -0.102, -0.1025, -0.103, -0.101]
    result = _run(reward)
    assert result["verdict"] == "vanishing_gradient" and result["onset_step"] == 1
    assert any(f["rule"] == "reward_never_moved" for f in result["findings"])


def test_a_reward_flat_at_a_positive_level_is_not():
    rng = np.random.default_rng(6)
    result = _run(0.92 + 0.002 * rng.standard_normal(100))
    assert not any(f["rule"] == "reward_never_moved" for f in result["findings"])


def test_a_penalty_that_the_run_climbs_out_of_is_learning():
    rng = np.random.default_rng(7)
    reward = np.concatenate([np.full(40, -0.1), np.linspace(-0.1, -0.02, 60)]) + 0.0005 * rng.standard_normal(100)
    result = _run(reward)
    assert not any(f["rule"] == "reward_never_moved" for f in result["findings"])
