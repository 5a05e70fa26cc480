"""Readings blind32's misses asked for, on made-up logs of the shape: a reward stuck at one value
from the first record (MountainCar's -200 every episode) beside a policy entropy that collapses is an
entropy collapse, not a run that never learned (LABELS.md's chain ends in the vanishing gradient);
the same stuck reward with nothing else lasting never learned."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _stuck(entropy: np.ndarray) -> dict:
    n = len(entropy)
    steps = (np.arange(n) + 1) * 2048
    return {"reward_mean": dict(zip(steps.tolist(), np.full(n, -200.0))),
            "policy_entropy": dict(zip(steps.tolist(), entropy))}


def test_a_stuck_reward_beside_a_collapsing_entropy_is_the_collapse():
    rng = np.random.default_rng(11)
    n = 50
    entropy = np.concatenate([np.full(15, 1.09), np.geomspace(1.09, 0.02, 15), np.full(20, 0.02)])
    res = diagnose_series(_stuck(entropy + rng.normal(0, 0.002, n)))
    assert res["verdict"] == "entropy_collapse", [(f["rule"], f["onset_step"]) for f in res["findings"][:3]]
    assert any(f["rule"] == "reward_at_floor" for f in res["findings"])  # still said, not the cause


def test_a_stuck_reward_with_an_entropy_that_holds_never_learned():
    rng = np.random.default_rng(12)
    res = diagnose_series(_stuck(1.09 + rng.normal(0, 0.01, 50)))
    assert res["verdict"] == "vanishing_gradient" and res["findings"][0]["rule"] == "reward_at_floor"
