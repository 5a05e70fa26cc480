"""A truncated share that ends at a level the run had already reached now and then is no rise: with
four samples a step the share moves in quarters (0, 0.25, 0.5)."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(clipped) -> dict:
    steps = range(1, len(clipped) + 1)
    rng = np.random.default_rng(3)
    reward = rng.normal(0.0, 3.0, len(clipped))
    return diagnose_series({"truncation_rate": dict(zip(steps, map(float, clipped))),
                            "reward_mean": dict(zip(steps, reward.tolist())),
                            "response_length_mean": dict(zip(steps, rng.uniform(200, 1200, len(clipped)).tolist()))})


def _rules(result):
    return {f["rule"] for f in result["findings"] if f["severity"] == "critical"}


def test_a_share_of_quarters_that_ends_where_it_had_been_is_no_rise():
    clipped = [0, 0, 0, 0, 0.5, 0, 0.25, 0, 0, 0, 0.25, 0, 0.25, 0, 0, 0, 0, 0, 0, 0.25, 0, 0, 0, 0, 0.25, 0.25, 0.25]
    assert "truncation_rise" not in _rules(_run(clipped))


def test_a_share_that_climbs_beyond_anything_before_is_one():
    clipped = [0.0] * 20 + [0.02, 0.0] * 5 + [0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.6, 0.65]
    assert "truncation_rise" in _rules(_run(clipped))
