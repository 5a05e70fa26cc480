"""The entropy's start level is the level it fell from: one PPO update that halves it within the
first twentieth of a long log (8.3 -> 2.7 at the third record of 600) leaves the records before it
as the start; a gradual early decline is the run's own early decay, read on the first twentieth."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(entropy: np.ndarray) -> dict:
    rng = np.random.default_rng(11)
    n = len(entropy)
    steps = [7488 * (i + 2) for i in range(n)]
    reward = np.concatenate([[15000.0, 32650.0], 1700 + 300 * rng.standard_normal(n - 2)])
    return diagnose_series({"policy_entropy": dict(zip(steps, entropy.tolist())),
                            "reward_mean": dict(zip(steps, reward.tolist()))})


def test_one_update_that_halves_the_entropy_at_the_start_of_a_long_log_is_its_collapse():
    rng = np.random.default_rng(12)
    entropy = np.concatenate([[8.29, 8.08, 2.72, 1.42, 1.27], 0.2 + 0.5 * rng.random(595)])
    result = _run(entropy)
    assert result["verdict"] == "entropy_collapse" and result["onset_step"] <= 7488 * 5  # where it fell


def test_a_gradual_early_decline_is_not_read_from_its_first_records():
    rng = np.random.default_rng(12)
    entropy = np.concatenate([np.linspace(8.3, 1.0, 30), 0.9 + 0.1 * rng.random(570)])
    result = _run(entropy)
    assert "entropy_floor" not in {f["rule"] for f in result["findings"] if f["severity"] == "critical"}
