"""A train/rollout gap that opens with an entropy blow-up is a symptom of the policy blowing up;
one that opens while the policy is still sharp is a precision fault."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series

STEPS = 40
ONSET = 20


def _run(entropy_jump_at: int | None, reward_falls_at: int | None, seed: int = 0,
         gap_opens_at: int = ONSET) -> dict:
    rng = np.random.default_rng(seed)
    steps = np.arange(STEPS)
    gap = np.where(steps < gap_opens_at, 0.008, 0.15) + rng.normal(0, 0.0005, STEPS)
    entropy = 0.3 - 0.004 * steps + rng.normal(0, 0.005, STEPS)  # the healthy slow fall
    if entropy_jump_at is not None:
        entropy = np.where(steps < entropy_jump_at, entropy, 4.0 + 0.05 * (steps - entropy_jump_at))
    reward = 0.8 + rng.normal(0, 0.02, STEPS)
    if reward_falls_at is not None:
        reward = np.where(steps < reward_falls_at, reward, 0.0)
    series = {"logprob_diff_mean": gap, "policy_entropy": entropy, "reward_mean": reward}
    return diagnose_series({k: dict(zip(steps.tolist(), v.tolist())) for k, v in series.items()})


def _rules(result: dict) -> dict[str, str]:
    return {f["rule"]: f["severity"] for f in result["findings"] if f["category"] == "precision_mismatch"}


def test_gap_opening_after_an_entropy_blowup_is_a_symptom_of_the_blowup():
    # LABELS.md: the policy blew up (entropy x13 and staying), the reward fell after it (divergence),
    # and a gap that opens only after the blow-up is its symptom
    result = _run(entropy_jump_at=ONSET, reward_falls_at=ONSET + 1, gap_opens_at=ONSET + 1)
    assert result["verdict"] == "divergence" and result["onset_step"] == ONSET
    assert _rules(result).get("mismatch_with_blowup") == "warning"


def test_gap_opening_while_the_policy_is_sharp_is_a_precision_fault():
    # the same gap and the same collapse, but entropy blows up only 10 records later
    result = _run(entropy_jump_at=ONSET + 10, reward_falls_at=ONSET + 1)
    assert result["verdict"] == "precision_mismatch" and result["onset_step"] == ONSET
    assert "mismatch_with_blowup" not in _rules(result)


def test_with_nothing_else_wrong_the_gap_stays_the_verdict():
    result = _run(entropy_jump_at=None, reward_falls_at=None)
    assert result["verdict"] == "precision_mismatch" and result["onset_step"] == ONSET
