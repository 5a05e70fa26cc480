"""Unit tests of the detectors, the verdict and the contract on small hand-built series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moeproxy.diagnose import (CATEGORIES, DETECTOR_VERSION, DiagnoseConfig, RunSeries, all_detectors,
                               diagnose_frame, diagnose_series, render_text)
from moeproxy.errors import InputError

CONTRACT_KEYS = {"category", "onset_step", "severity", "metric", "rule", "evidence"}


def noisy(n=200, level=0.8, sigma=0.15, seed=0):
    rng = np.random.default_rng(seed)
    return level * np.exp(rng.normal(0, sigma, n))


def series(values, every=1):
    return pd.Series(np.asarray(values, dtype=float), index=every * np.arange(1, len(values) + 1))


def test_registry_lists_every_category_detector():
    names = set(all_detectors())
    assert {"overflow", "divergence", "precision_mismatch", "routing_collapse", "entropy_collapse",
            "reward_collapse", "kl_explosion", "length_blowup", "vanishing_gradient"} <= names
    assert DETECTOR_VERSION


def test_contract_shape_and_json_safe():
    g = noisy()
    g[150:] = np.inf
    res = diagnose_series({"grad_norm": series(g)})
    assert set(res) == {"verdict", "onset_step", "confidence", "confidence_reason", "confidence_basis", "verdict_basis", "alternatives", "findings", "config", "data"}
    assert res["confidence"] in ("high", "medium", "low")
    assert res["verdict"] == "overflow" and res["onset_step"] == 151
    for f in res["findings"]:
        assert set(f) == CONTRACT_KEYS and f["category"] in CATEGORIES
    first = res["findings"][0]
    assert "inf at step 151" in first["evidence"] and "median of 0.8" in first["evidence"]
    text = render_text(res, run="r1")
    assert text.startswith("r1: overflow from step 151") and "grad_norm" in text


def test_single_blips_are_not_divergence():
    g = noisy(300)
    for i in (60, 140, 220):
        g[i] *= 25
    res = diagnose_series({"grad_norm": series(g)})
    assert res["verdict"] == "healthy"
    spikes = [f for f in res["findings"] if f["rule"] in ("isolated_spike", "large_spike")]
    assert spikes and all(f["severity"] == "warning" for f in spikes)


def test_sustained_blowup_then_nan_is_divergence_first():
    g = noisy(300)
    g[200:] *= np.exp(0.2 * np.arange(100))
    g[260:] = np.nan
    res = diagnose_series({"grad_norm": series(g, every=10)})
    assert res["verdict"] == "divergence"
    assert abs(res["onset_step"] - 2010) <= 0.05 * 2990
    cats = [f["category"] for f in res["findings"] if f["severity"] == "critical"]
    assert "overflow" in cats  # reported, but as the consequence


def test_sudden_nan_is_overflow_not_divergence():
    g = noisy(100)
    g[70:] = np.nan
    res = diagnose_series({"grad_norm": series(g)})
    assert res["verdict"] == "overflow" and res["onset_step"] == 71


def test_one_record_spike_into_nan_is_reported_as_its_precursor_not_a_recovered_blip():
    loss = list(10.0 * np.exp(-np.arange(9) / 6.0) + 5.0) + [20.0, np.nan, np.nan, np.nan]
    res = diagnose_series({"loss": series(loss, every=10)})
    assert res["verdict"] == "overflow" and res["onset_step"] == 110
    (warning,) = [f for f in res["findings"] if f["category"] == "divergence"]
    assert warning["rule"] == "spike_before_nonfinite" and warning["onset_step"] == 100
    assert "recovered" not in warning["evidence"] and "nan at step 110" in warning["evidence"]


def test_early_high_grad_norms_are_warmup():
    g = noisy(120) * (1 + 20 * np.exp(-np.arange(120) / 5))
    assert diagnose_series({"grad_norm": series(g)})["verdict"] == "healthy"


def test_fp16_loss_scale_search_is_not_a_failure_but_collapse_is():
    n = 60
    scale = np.r_[2.0 ** (32 - np.arange(12)), np.full(n - 12, 2.0 ** 20)]
    skipped = np.r_[np.ones(12), np.zeros(n - 12)]
    g = noisy(n)
    g[:12] = np.nan
    base = {"loss_scale": series(scale), "skipped_iters": series(skipped), "grad_norm": series(g)}
    assert diagnose_series(base)["verdict"] == "healthy"
    scale2, skipped2 = scale.copy(), skipped.copy()
    scale2[40:] = 2.0 ** 20 / 2.0 ** np.arange(1, n - 39)
    scale2 = np.maximum(scale2, 1.0)
    skipped2[40:] = 1
    res = diagnose_series({**base, "loss_scale": series(scale2), "skipped_iters": series(skipped2)})
    assert res["verdict"] == "overflow" and res["onset_step"] == 41


def test_bf16_skipped_iterations_are_overflow():
    n = 40
    skipped = np.zeros(n)
    skipped[30] = 2
    res = diagnose_series({"loss_scale": series(np.ones(n)), "skipped_iters": series(skipped),
                           "grad_norm": series(noisy(n))})
    assert res["verdict"] == "overflow" and res["onset_step"] == 31


def test_saturation_at_fp16_max_is_overflow():
    g = noisy(80)
    g[50:] = 65504.0
    res = diagnose_series({"grad_norm": series(g)})
    assert res["verdict"] == "overflow" and res["onset_step"] == 51
    assert any(f["rule"] == "saturated_value" for f in res["findings"])


def test_scattered_zero_grad_norms_are_healthy_but_vanishing_is_not():
    g = noisy(200)
    g[::17] = 0.0
    assert diagnose_series({"grad_norm": series(g)})["verdict"] == "healthy"
    g[150:] = 0.0
    res = diagnose_series({"grad_norm": series(g)})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 151


def test_entropy_collapse_needs_a_stalled_reward():
    n = 100
    h = 1.0 * np.exp(-np.clip(np.arange(n) - 60, 0, None) / 3)
    h = np.maximum(h, 0.02)
    flat = 0.4 + 0.01 * np.sin(np.arange(n))
    rising = np.linspace(0.1, 0.9, n)
    res = diagnose_series({"policy_entropy": series(h), "reward_mean": series(flat)})
    # dated by its fall into the floor (LABELS.md: the collapse is the entropy under 10-20 % of its
    # start): from under 15 % at k = 66 back to the record after the last above 30 %, k = 64 (step 65)
    assert res["verdict"] == "entropy_collapse" and abs(res["onset_step"] - 65) <= 1
    res = diagnose_series({"policy_entropy": series(h), "reward_mean": series(rising)})
    assert res["verdict"] == "healthy"
    assert any(f["rule"] == "entropy_drop_reward_rising" for f in res["findings"])


def test_reward_collapse_and_recovered_dip():
    rng = np.random.default_rng(1)
    r = np.r_[np.linspace(0.1, 0.7, 60), np.full(40, 0.7)] + rng.normal(0, 0.02, 100)
    dip = r.copy()
    dip[70:73] = 0.2
    assert diagnose_series({"reward_mean": series(dip)})["verdict"] == "healthy"
    r[80:] = 0.05
    res = diagnose_series({"reward_mean": series(r)})
    assert res["verdict"] == "reward_collapse" and res["onset_step"] == 81


def test_mismatch_precedes_its_consequences():
    rng = np.random.default_rng(2)
    n = 120
    d = 0.002 * np.exp(rng.normal(0, 0.1, n)) * np.exp(np.clip(np.arange(n) - 50, 0, 20) * 0.15)
    g = noisy(n)
    g[80:] *= 20
    res = diagnose_series({"logprob_diff_mean": series(d), "grad_norm": series(g)})
    assert res["verdict"] == "precision_mismatch" and abs(res["onset_step"] - 51) <= 6


def test_routing_entropy_drop_and_single_layer():
    rng = np.random.default_rng(3)
    n = 100
    e = 0.9 + rng.normal(0, 0.01, n)
    e[60:] -= 0.5
    res = diagnose_series({"routing_entropy/layer_3": series(e), "routing_entropy/layer_0": series(0.9 + 0 * e)})
    assert res["verdict"] == "routing_collapse" and res["onset_step"] == 61
    assert res["findings"][0]["metric"] == "routing_entropy/layer_3"


def test_simultaneous_onsets_follow_causal_order():
    rng = np.random.default_rng(4)
    n = 100
    e = 0.9 + rng.normal(0, 0.01, n)
    e[60:] -= 0.5
    g = noisy(n)
    g[60:] *= 30
    res = diagnose_series({"routing_entropy": series(e), "grad_norm": series(g)})
    assert res["verdict"] == "routing_collapse"


def test_short_sparse_run():
    g = np.array([3.1, 1.2, 0.9, 0.8, 0.85, 0.82, 0.9, 9.5, 31.0, 88.0, 250.0])
    res = diagnose_series({"grad_norm": series(g, every=50)})
    assert res["verdict"] == "divergence" and res["onset_step"] == 400


def test_frame_reduction_latest_attempt_and_nonfinite_rank_wins():
    frame = pd.DataFrame({
        "step": [1, 1, 2, 2, 2],
        "metric": ["grad_norm"] * 5,
        "value": [5.0, 1.0, 2.0, np.nan, 2.0],
        "attempt": [0, 1, 0, 0, 0],
        "rank": [-1, -1, 0, 1, 2],
    })
    s = RunSeries.from_frame(frame).get("grad_norm")
    assert s.loc[1] == 1.0 and np.isnan(s.loc[2])


def test_bad_frames_and_configs_raise_clear_errors():
    with pytest.raises(InputError, match="lacks column"):
        diagnose_frame(pd.DataFrame({"step": [1], "value": [1.0]}))
    with pytest.raises(InputError, match="non-numeric"):
        diagnose_frame(pd.DataFrame({"step": [1], "metric": ["loss"], "value": ["abc"]}))
    with pytest.raises(ValueError, match="unknown key"):
        DiagnoseConfig.from_dict({"robust_zz": 3})
    with pytest.raises(ValueError, match="must be >= 0"):
        DiagnoseConfig(robust_z=-1)
    with pytest.raises(ValueError, match="unknown detector"):
        diagnose_series({"loss": series([1, 2, 3])}, detectors=["nope"])


def test_empty_and_tiny_runs_are_healthy():
    assert diagnose_frame(pd.DataFrame(columns=["step", "metric", "value"]))["verdict"] == "healthy"
    assert diagnose_series({"grad_norm": series([1.0, 1.1])})["verdict"] == "healthy"


def test_megatron_loss_missing_from_a_complete_line_is_a_nan_loss():
    n = 20
    loss = series(np.linspace(2.0, 1.5, n))
    base = {"loss_scale": series(np.ones(n)), "skipped_iters": series(np.zeros(n)),
            "grad_norm": series(noisy(n)), "loss": loss.drop(index=[16, 17, 18])}
    res = diagnose_series(base)
    assert res["verdict"] == "overflow" and res["onset_step"] == 16
    assert res["findings"][0]["rule"] == "loss_vanished"
    skipped = np.zeros(n)
    skipped[15:18] = 1  # fp16 skipped iterations carry no loss either: that is not a NaN loss
    res = diagnose_series({**base, "loss_scale": series(np.full(n, 65536.0)), "skipped_iters": series(skipped)})
    assert not any(f["rule"] == "loss_vanished" for f in res["findings"])


def test_divergence_onset_may_start_before_the_history_is_full():
    loss = [1.593, 1.406, 3.316, 6.437, 5.478, 4.857, 4.874, 4.604]  # shape of a short pasted log
    res = diagnose_series({"loss": series(loss, every=25)})
    assert res["verdict"] == "divergence" and res["onset_step"] == 75


def test_kl_to_reference_growing_from_zero_is_normal_but_a_blowup_is_not():
    n = 40
    kl = series(np.r_[0.0, np.geomspace(1e-5, 0.05, n - 1)])
    assert diagnose_series({"kl": kl})["verdict"] == "healthy"
    rng = np.random.default_rng(5)
    calm = 0.01 * np.exp(rng.normal(0, 0.1, n))
    calm[30:] *= 40
    res = diagnose_series({"kl": series(calm)})
    # LABELS.md: KL to the reference exploding and staying is the policy blowing up: divergence
    assert res["verdict"] == "divergence" and res["onset_step"] == 31


def test_mostly_truncated_responses_are_a_warning():
    res = diagnose_series({"truncation_rate": series(np.full(30, 0.95))})
    assert res["verdict"] == "healthy"
    assert res["findings"][0]["rule"] == "truncation_high" and res["findings"][0]["severity"] == "warning"


def test_entropy_doubling_is_a_warning_and_x3_a_divergence():
    # LABELS.md: "entropy x3 or more and climbing" is the policy blowing up; doubling is a warning
    rng = np.random.default_rng(6)
    h = 0.6 * np.exp(rng.normal(0, 0.03, 60))
    h[40:] *= 2.2
    res = diagnose_series({"policy_entropy": series(h)})
    assert res["verdict"] == "healthy"
    assert res["findings"][0]["rule"] == "entropy_rise" and res["findings"][0]["onset_step"] == 41
    h[40:] *= 2
    res = diagnose_series({"policy_entropy": series(h)})
    assert res["verdict"] == "divergence" and res["onset_step"] == 41
    assert res["findings"][0]["rule"] == "entropy_blowup"


def test_config_round_trips_through_json():
    import json

    cfg = DiagnoseConfig(robust_z=4.0)
    assert DiagnoseConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    res = diagnose_series({"grad_norm": series(noisy(50))}, config=cfg)
    assert res["verdict"] == "healthy"


def test_a_spike_that_leaves_lasting_damage_is_divergence():
    rng = np.random.default_rng(8)
    n = 40
    g = 6.5 * np.exp(rng.normal(0, 0.2, n))
    g[16], g[17] = 100.0, 30.0                       # the bad update, then back in band
    kl = 0.03 * np.exp(rng.normal(0, 0.3, n))
    kl[16:] = 3.0 * np.exp(rng.normal(0, 0.2, n - 16))  # the policy moved away for good
    reward = 0.68 + 0.05 * rng.normal(0, 1, n)
    reward[17:] = 0.02
    res = diagnose_series({"grad_norm": series(g), "kl": series(kl), "reward_mean": series(reward)})
    assert res["verdict"] == "divergence" and res["onset_step"] == 17
    assert res["findings"][0]["rule"] == "damaging_spike"


def test_knee_index_agrees_with_ruptures_binseg_clinear():
    """knee_index is ruptures' one-break Binseg with the clinear cost, written out for start-up time."""
    import numpy as np
    import ruptures

    from moeproxy.diagnose.robust import knee_index

    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(6, 60))
        y = np.cumsum(rng.normal(size=n)) if trial % 2 else np.r_[np.zeros(n // 2), np.arange(n - n // 2) * 0.7]
        y = y + rng.normal(scale=0.1, size=n)
        want = ruptures.Binseg(model="clinear", min_size=2, jump=1).fit(y).predict(n_bkps=1)[0]
        assert knee_index(y) == (want if want < n else None), (trial, n)


def test_a_reward_that_loses_most_of_its_level_collapses_however_large_its_rise():
    # a random policy's episodes score -10 (penalties); learning brings 0.8; then 0.2 for good: a
    # sliver of the rise, three quarters of the level, many noise widths
    rng = np.random.default_rng(21)
    r = np.r_[np.linspace(-10.4, 0.8, 50), np.full(30, 0.8), np.full(400, 0.2)] + rng.normal(0, 0.08, 480)
    res = diagnose_series({"reward_mean": series(r)})
    assert res["verdict"] == "reward_collapse" and 79 <= res["onset_step"] <= 83, res["findings"]
    # a dip of the same size that comes back is not one
    dip = np.r_[np.linspace(-10.4, 0.8, 50), np.full(430, 0.8)] + rng.normal(0, 0.08, 480)
    dip[100:103] = 0.2
    assert diagnose_series({"reward_mean": series(dip)})["verdict"] == "healthy"


def test_a_success_rate_that_rose_then_fell_to_zero_for_good_is_a_reward_collapse():
    # goal-conditioned RL (TD3 + HER): the test success rate is 0 while the agent explores, 1.0 once
    # it learned, then 0 for good; the return logged beside it hardly moves
    success = np.r_[np.zeros(2), np.ones(15), np.zeros(150)]
    ret = -27.0 + np.random.default_rng(22).normal(0, 0.5, 167)
    res = diagnose_series({"TestSuccess": series(success), "reward_mean": series(ret)})
    assert res["verdict"] == "reward_collapse" and res["onset_step"] == 18, res["findings"]
    # one that rose and stays is no collapse
    kept = np.r_[np.zeros(2), np.ones(165)]
    assert diagnose_series({"TestSuccess": series(kept), "reward_mean": series(ret)})["verdict"] == "healthy"


def test_kl_to_reference_climbing_from_zero_to_a_moderate_level_is_grpo_learning_not_a_runaway():
    # KL to the reference starts at ~0 (policy = reference): 0.0006 -> 0.2 over 60 GRPO steps while
    # the reward holds is what a learning run does; the same climb to 2 nats has run away
    n = 60
    rng = np.random.default_rng(8)
    reward = series(0.1 + 0.05 * rng.random(n))
    entropy = series(1.1 + 0.1 * rng.random(n))
    climb = np.geomspace(6e-4, 0.2, n) * np.exp(rng.normal(0, 0.2, n))
    res = diagnose_series({"kl": series(climb), "reward_mean": reward, "policy_entropy": entropy})
    assert not any(f["rule"] == "kl_ref_blowup" for f in res["findings"])
    runaway = np.geomspace(6e-4, 2.0, n) * np.exp(rng.normal(0, 0.2, n))
    res = diagnose_series({"kl": series(runaway), "reward_mean": reward, "policy_entropy": entropy})
    assert any(f["rule"] == "kl_ref_blowup" for f in res["findings"]) and res["verdict"] == "divergence"
