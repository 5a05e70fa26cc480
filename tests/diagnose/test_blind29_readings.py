"""Readings blind29's misses asked for, on made-up logs of the shape: a team reward logged beside a
per-agent reward that is 0 in every record (Unity ML-Agents' POCA trainer) is the run's reward; a
reward at one time-out penalty in every record, give or take a sliver, never learned."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _poca(team: np.ndarray) -> dict:
    steps = (np.arange(len(team)) + 1) * 60000
    rng = np.random.default_rng(5)
    return {"Environment/Cumulative Reward": dict.fromkeys(steps.tolist(), 0.0),
            "Environment/Group Cumulative Reward": dict(zip(steps.tolist(), team)),
            "policy_entropy": dict(zip(steps.tolist(), 1.42 + rng.normal(0, 0.01, len(team))))}


def test_a_team_reward_is_read_when_the_agents_own_reward_was_never_computed():
    rng = np.random.default_rng(4)
    team = np.concatenate([np.linspace(-12, 25, 40), np.full(30, 25.0), np.full(60, 5.0)]) + rng.normal(0, 1.0, 130)
    res = diagnose_series(_poca(team))
    assert res["data"].get("read_as") == {"reward_mean": "Environment/Group Cumulative Reward"}, res["data"]
    assert res["verdict"] == "reward_collapse" and 70 * 60000 <= res["onset_step"] <= 73 * 60000, res["findings"][:2]
    # the agents' own reward, when it has numbers, stays the reward: nothing is read in its place
    both = _poca(team)
    both["Environment/Cumulative Reward"] = dict(zip(both["Environment/Cumulative Reward"], np.linspace(-1, 1, 130)))
    assert "reward_mean" not in (diagnose_series(both)["data"].get("read_as") or {})


def test_a_reward_at_one_time_out_penalty_in_every_record_never_learned():
    team = np.full(17, -30.0)
    team[[3, 9, 12]] = -29.95                       # an agent brushed against something now and then
    res = diagnose_series(_poca(team))
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 60000, res["findings"][:2]
    assert res["findings"][0]["rule"] == "reward_at_floor"
    # a reward that moves off the penalty for good is not stuck at it
    team[8:] = np.linspace(-25, 10, 9)
    assert diagnose_series(_poca(team))["verdict"] != "vanishing_gradient"
