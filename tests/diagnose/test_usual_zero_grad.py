"""A final run of zero grad norms is a vanishing gradient only when zero was not already the run's
usual value (TRL logs the last micro-step's norm: in GRPO that is often a zero-advantage group)."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _verdict(grad: np.ndarray) -> dict:
    steps = range(len(grad))
    reward = 0.85 + 0.05 * np.sin(np.arange(len(grad)))
    return diagnose_series({"grad_norm": dict(zip(steps, grad.tolist())),
                            "reward_mean": dict(zip(steps, reward.tolist()))})


def _vanished(result: dict) -> bool:
    return any(f["rule"] == "grad_norm_vanished" and f["severity"] == "critical" for f in result["findings"])


def test_zeros_that_were_usual_from_the_start_are_not_a_vanishing_gradient():
    grad = np.zeros(40)
    grad[[4, 6, 8, 18, 20, 22, 27]] = [3.6, 0.18, 0.28, 0.18, 0.14, 0.23, 0.36]
    result = _verdict(grad)
    assert not _vanished(result) and result["verdict"] == "healthy"


def test_a_gradient_that_was_alive_and_stops_is_one():
    grad = np.full(40, 0.3) + 0.01 * np.arange(40)
    grad[28:] = 0.0
    result = _verdict(grad)
    assert _vanished(result) and result["onset_step"] == 28
