"""Reward parts (LABELS.md, reward_collapse: "format reward to 0"): one part of a composite reward
falling to about 0 for good is a reward collapse, even while another part still pays; parts that
rise, parts that were always about 0, penalties and spreads are not read as one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.detectors.reward_parts import is_reward_part
from moeproxy.ingest import parse_file
from moeproxy.diagnose import diagnose_frame

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "shared"


def _grpo(n=80, seed=0):
    rng = np.random.default_rng(seed)
    steps = np.arange(n)
    accuracy = np.clip(0.2 + 0.004 * steps + rng.normal(0, 0.03, n), 0, 1)
    fmt = np.clip(0.3 + 0.02 * steps, 0, 0.95) + rng.normal(0, 0.02, n)
    return {"rewards/accuracy_reward/mean": accuracy, "rewards/format_reward/mean": fmt,
            "rewards/format_reward/std": np.full(n, 0.2), "loss": rng.normal(0, 0.01, n),
            "grad_norm": 0.3 * np.exp(rng.normal(0, 0.1, n)), "entropy": np.full(n, 0.6) + rng.normal(0, 0.01, n)}


def _rules(result):
    return [f["rule"] for f in result["findings"]]


def test_a_format_reward_that_falls_to_zero_and_stays_is_a_reward_collapse_at_its_fall():
    series = _grpo()
    series["rewards/format_reward/mean"][50:] = np.abs(np.random.default_rng(3).normal(0, 0.005, 30))
    result = diagnose_series(series)
    assert result["verdict"] == "reward_collapse", result["findings"]
    assert result["onset_step"] == 50
    hit = next(f for f in result["findings"] if f["rule"] == "reward_part_to_zero")
    assert hit["metric"] == "rewards/format_reward/mean" and "stayed below" in hit["evidence"]


def test_parts_that_rise_or_recover_or_never_paid_are_healthy():
    series = _grpo()
    assert "reward_part_to_zero" not in _rules(diagnose_series(series))
    dip = _grpo(seed=1)
    dip["rewards/format_reward/mean"][40:46] = 0.0  # six records at 0, then back
    assert "reward_part_to_zero" not in _rules(diagnose_series(dip))
    never = _grpo(seed=2)
    never["rewards/format_reward/mean"] = np.r_[np.zeros(78), 0.5, 0.0]  # about 0 from the start: nothing was lost
    assert "reward_part_to_zero" not in _rules(diagnose_series(never))
    short = _grpo(seed=4)
    short["rewards/format_reward/mean"][77:] = 0.0  # the last three records only: not yet for good
    assert "reward_part_to_zero" not in _rules(diagnose_series(short))


def test_what_counts_as_a_part():
    assert is_reward_part("rewards/format_reward/mean") and is_reward_part("format_reward")
    assert is_reward_part("reward/format") and is_reward_part("total_format_reward")
    for whole in ("reward", "critic/score/mean", "rewards/mean", "reward_std", "frac_reward_zero_std"):
        assert not is_reward_part(whole), whole
    for other in ("rewards/format_reward/std", "rewards/len_penalty", "reward_kl", "eval/reward", "critic/rewards/max"):
        assert not is_reward_part(other), other


def test_a_real_grpo_log_whose_format_reward_went_to_zero():
    """shared/117 (CS336 GRPO, off-policy with clipping): both raters read a reward collapse; the total
    reward is printed per batch with its parts, and the format part goes to 0 first."""
    parsed = parse_file(next(REAL.glob("117_*")))
    result = diagnose_frame(parsed.frame)
    assert result["verdict"] == "reward_collapse"
    assert "reward_part_to_zero" in _rules(result)


def test_dpo_implicit_rewards_are_no_reward_parts():
    # DPO (TRL): rewards/chosen is beta times the policy's log-ratio on the chosen answer; it falls
    # below 0 in healthy runs while the margin grows and the loss falls
    assert not any(is_reward_part(n) for n in ("rewards/chosen", "rewards/rejected", "rewards/margins",
                                                "rewards/accuracies", "eval_rewards/chosen"))
    assert is_reward_part("rewards/format_reward/mean") and is_reward_part("reward/format")
    n = 90
    rng = np.random.default_rng(3)
    steps = np.arange(1, n + 1)
    chosen = 0.012 - 0.003 * steps + rng.normal(0, 0.01, n)       # 0.01 -> -0.26
    margins = 2.8 * (1 - np.exp(-steps / 20)) + rng.normal(0, 0.05, n)
    res = diagnose_series({"loss": 0.69 * np.exp(-steps / 33), "rewards/chosen": chosen,
                           "rewards/rejected": chosen - margins, "rewards/margins": margins})
    assert res["verdict"] == "healthy", _rules(res)
