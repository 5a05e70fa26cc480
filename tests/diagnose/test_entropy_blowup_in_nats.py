"""An entropy blow-up is the policy's output spreading toward uniform: x3 over its start and up by a
measurable amount (``entropy_blowup_min_rise`` nats). A near-deterministic policy at 0.001 nats a
token that fluctuates to 0.004 tripled and is as deterministic as before; a blow-up that grew out
of such a fluctuation is dated where it became visible."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(entropy) -> dict:
    steps = range(1, len(entropy) + 1)
    return diagnose_series({"policy_entropy": dict(zip(steps, [float(e) for e in entropy])),
                            "reward_mean": dict(zip(steps, [1.0] * len(entropy)))})


def _blowups(result: dict) -> list[dict]:
    return [f for f in result["findings"] if f["rule"] == "entropy_blowup" and f["severity"] == "critical"]


def test_a_thousandth_of_a_nat_tripled_is_no_blowup():
    rng = np.random.default_rng(3)
    entropy = np.r_[[0.0009, 0.0008, 0.001], 0.0025 + 0.001 * rng.random(42)]
    assert not _blowups(_run(entropy))


def test_a_blowup_that_grew_out_of_such_a_fluctuation_is_dated_where_it_became_visible():
    rng = np.random.default_rng(4)
    entropy = np.r_[[0.0009, 0.0008, 0.001], 0.0025 + 0.001 * rng.random(15), np.linspace(0.06, 0.4, 27)]
    found = _blowups(_run(entropy))
    assert found and found[0]["onset_step"] == 19


def test_a_differential_entropy_that_rises_many_nats_blew_up():
    # a continuous policy's Gaussian entropy sits at -6 nats (small action stds), then jumps to about
    # 0 at step 33 and stays: no ratio to a negative start means anything, the nats do
    rng = np.random.default_rng(5)
    entropy = np.r_[-6.0 + 0.3 * rng.standard_normal(32), -0.5 + 0.3 * rng.standard_normal(40)]
    found = _blowups(_run(entropy))
    assert found and found[0]["onset_step"] == 33, found
    # the same series wobbling by a nat around -6 is no blow-up
    assert not _blowups(_run(-6.0 + 0.5 * rng.standard_normal(72)))
