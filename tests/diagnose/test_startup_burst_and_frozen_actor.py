"""Two readings of LABELS.md's "anomalies that last": grad norms x100 only in a run's first stretch,
the long rest in range, are a start-up transient; an RL actor's loss repeating one value to seven
digits for the rest of the run is a policy that no longer updates (vanishing_gradient)."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _critical(result: dict) -> set[str]:
    return {f["rule"] for f in result["findings"] if f["severity"] == "critical"}


def _rl_run(grad: np.ndarray) -> dict:
    rng = np.random.default_rng(7)
    steps = range(1, len(grad) + 1)
    reward = np.linspace(0, 10, len(grad)) + rng.normal(0, 0.5, len(grad))
    return diagnose_series({"grad_norm": dict(zip(steps, grad.tolist())),
                            "reward_mean": dict(zip(steps, reward.tolist()))})


def test_grad_norms_blown_up_only_at_the_start_of_a_long_run_are_a_transient():
    rng = np.random.default_rng(8)
    grad = 5 + rng.random(1000)
    grad[[0, 9, 18, 27]] = [24569, 8000, 3000, 1500]
    assert "grad_blowup" not in _critical(_rl_run(grad))


def test_the_same_blow_ups_later_in_the_run_are_a_divergence():
    rng = np.random.default_rng(8)
    grad = 5 + rng.random(1000)
    grad[[400, 409, 418, 427]] = [24569, 8000, 3000, 1500]
    result = _rl_run(grad)
    assert "grad_blowup" in _critical(result) and result["onset_step"] == 401


def test_an_actor_loss_frozen_to_seven_digits_is_a_policy_that_no_longer_updates():
    steps = list(range(200, 20400, 200))
    rng = np.random.default_rng(9)
    actor = [0.008841, 0.008852] + [0.008836466819047928] * (len(steps) - 2)
    world = 0.002 * np.exp(-np.arange(len(steps)) / 30) + 0.0002 + 1e-5 * rng.random(len(steps))
    reward = np.linspace(0.01, 0.17, len(steps))
    result = diagnose_series({"loss": dict(zip(steps, world.tolist())), "actor_loss": dict(zip(steps, actor)),
                              "reward_mean": dict(zip(steps, reward.tolist()))})
    assert result["verdict"] == "vanishing_gradient" and "loss_frozen" in _critical(result)
    assert result["onset_step"] == 600  # where it froze
