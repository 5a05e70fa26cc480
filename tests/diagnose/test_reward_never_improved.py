"""LABELS.md "the run never learns at all", read on an RL return that varies as an untrained policy's
returns do: its level never rose above where the run started (``reward_never_improved``, a tentative
rule: confidence medium at most). A return that learns slowly, one that rose and fell back, one at its
ceiling and a short run are not read this way."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(reward: np.ndarray, seed: int = 3) -> dict:
    steps = range(1, len(reward) + 1)
    rng = np.random.default_rng(seed)
    return diagnose_series({"reward_mean": dict(zip(steps, reward.tolist())),
                            "policy_entropy": dict(zip(steps, (1.2 + 0.05 * rng.random(len(reward))).tolist())),
                            "value_loss": dict(zip(steps, (40 + 5 * rng.random(len(reward))).tolist()))})


def _rules(result: dict) -> set[str]:
    return {f["rule"] for f in result["findings"] if f["severity"] == "critical"}


def test_a_noisy_return_that_never_rises_never_learned():
    rng = np.random.default_rng(1)
    result = _run(-1000 + 300 * rng.standard_normal(2000))  # (its level read over 200 records at a time)
    assert result["verdict"] == "vanishing_gradient" and result["onset_step"] == 1
    assert "reward_never_improved" in _rules(result)
    assert result["confidence"] == "medium"  # a reading of what never happened is never loud


def test_a_return_that_learns_slowly_is_learning():
    rng = np.random.default_rng(2)
    result = _run(np.linspace(-1000, -700, 400) + 300 * rng.standard_normal(400))
    assert "reward_never_improved" not in _rules(result)


def test_a_return_that_rose_and_fell_back_is_no_such_run():
    rng = np.random.default_rng(3)
    level = np.concatenate([np.linspace(-1000, -300, 200), np.linspace(-300, -1000, 50), np.full(150, -1000.0)])
    result = _run(level + 50 * rng.standard_normal(400))
    assert "reward_never_improved" not in _rules(result)


def test_a_return_at_its_ceiling_is_converged():
    rng = np.random.default_rng(4)
    steady = 0.92 + 0.002 * rng.standard_normal(400)
    assert "reward_never_improved" not in _rules(_run(steady))
    capped = np.where(rng.random(400) < 0.7, 500.0, rng.uniform(0, 500, 400))  # CartPole's 500 on most episodes
    assert "reward_never_improved" not in _rules(_run(capped))


def test_a_short_run_is_not_judged():
    rng = np.random.default_rng(5)
    assert "reward_never_improved" not in _rules(_run(-1000 + 300 * rng.standard_normal(40)))
