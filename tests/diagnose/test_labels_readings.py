"""Readings of shared/LABELS.md that a careful engineer makes on sight, each on a made-up run: a spike
that came back is not a divergence however tall, a rise must matter on the scale the metric ran at,
a schedule that decays to 0 is not a vanishing gradient, and a reward pinned at its floor in every
quarter of an RL run is "every GRPO group's rewards equal on every step"."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _noise(n, seed=0, width=0.05):
    return np.exp(np.random.default_rng(seed).normal(0, width, n))


def _rules(result):
    return {(f["rule"], f["severity"]) for f in result["findings"]}


def test_a_150x_grad_spike_that_comes_back_is_not_a_divergence_but_one_that_ends_the_log_is():
    n = 120
    loss = 2.0 - 0.005 * np.arange(n) + np.random.default_rng(1).normal(0, 0.01, n)
    grad = 0.12 * _noise(n)
    grad[80] = 19.0  # 150x, back at the next record
    res = diagnose_series({"loss": loss, "grad_norm": grad})
    assert res["verdict"] == "healthy"
    assert ("large_spike", "warning") in _rules(res)
    # the same spike as the last record: it never had the chance to come back
    res = diagnose_series({"loss": loss[:81], "grad_norm": grad[:81]})
    assert res["verdict"] == "divergence" and res["onset_step"] == 80
    assert ("huge_spike", "critical") in _rules(res)


def test_a_memorised_loss_rising_from_1e_5_to_7e_5_has_not_left_its_range():
    n = 200
    fitted = 5.0 * np.exp(-np.arange(150) / 12.0) + 1e-5
    loss = np.r_[fitted, 7e-5 * _noise(50, seed=2)]  # x6 its best, but 1e-5 of where it started
    res = diagnose_series({"loss": loss})
    assert res["verdict"] == "healthy", res["findings"]
    # a loss that climbs back far on its own scale still diverged
    loss = np.r_[2.0 - 0.01 * np.arange(100), 3.0 * _noise(100, seed=3)]
    res = diagnose_series({"loss": loss})
    assert res["verdict"] == "divergence" and 99 <= res["onset_step"] <= 101


def test_grad_norm_running_back_to_its_early_level_for_a_few_records_is_an_excursion():
    n = 300
    grad = np.r_[27.0 * _noise(100, seed=4), 0.01 * _noise(200, seed=5)]  # fits its data: norms shrink
    grad[250:254] = [13.8, 14.6, 12.0, 11.0]                              # back to below 27, then down
    loss = np.r_[np.linspace(1.0, 0.2, 100), 1e-3 * _noise(200, seed=6)]
    res = diagnose_series({"loss": loss, "grad_norm": grad})
    assert res["verdict"] == "healthy", res["findings"]
    # four records up, then back: a spike that came back (LABELS.md "within a few records")
    assert {("grad_excursion", "warning"), ("large_spike", "warning")} & _rules(res)
    # the same excursion to 30x the early level is a blow-up
    grad[250:254] = 800.0
    assert diagnose_series({"loss": loss, "grad_norm": grad})["verdict"] == "divergence"


def test_large_grad_norms_in_the_first_records_while_the_loss_falls_fast_are_start_up():
    n = 100
    grad = 2.0 * _noise(n, seed=7)
    grad[:4] = [480.0, 476.0, 478.0, 276.0]
    loss = np.r_[[5.0, 4.9, 3.9, 2.4], 1.0 - 0.002 * np.arange(n - 4)]
    assert diagnose_series({"loss": loss, "grad_norm": grad})["verdict"] == "healthy"
    # the same norms later in the run, with the loss not falling over them, blew up repeatedly
    grad = 2.0 * _noise(n, seed=7)
    grad[50:53] = 480.0
    loss = 1.0 - 0.002 * np.arange(n)
    assert diagnose_series({"loss": loss, "grad_norm": grad})["verdict"] == "divergence"


def test_a_learning_rate_that_decayed_to_0_is_the_schedule_ending_but_one_cut_to_0_is_not():
    n = 60
    loss = 2.0 - 0.01 * np.arange(n)
    decayed = np.r_[1e-5 * np.cos(np.linspace(0, np.pi / 2, 50)) ** 2 + 1e-8, np.zeros(10)]
    assert diagnose_series({"loss": loss, "lr": decayed})["verdict"] == "healthy"
    cut = np.r_[np.full(50, 1e-5), np.zeros(10)]
    res = diagnose_series({"loss": loss, "lr": cut})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 50


def test_a_grpo_reward_pinned_at_its_floor_in_every_quarter_never_learns():
    rng = np.random.default_rng(8)
    n = 60
    reward = np.full(n, -0.10)
    reward[[13, 14, 24, 36, 51]] = 0.17              # a lucky group now and then
    loss = np.where(reward > 0, rng.normal(0, 0.01, n), rng.uniform(0, 2e-4, n))
    res = diagnose_series({"loss": loss, "reward_mean": reward})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 0
    assert ("reward_at_floor", "critical") in _rules(res)
    # a reward that learned for a while in the middle and fell back is not "never learned"
    reward[20:40] = np.where(rng.random(20) < 0.5, 0.17, -0.10)
    assert ("reward_at_floor", "critical") not in _rules(diagnose_series({"loss": loss, "reward_mean": reward}))
    # 0 in every record was never computed (LABELS.md "Data before signals"): no evidence; one value
    # other than 0 in every record was computed, and no update ever had anything else to learn from
    assert diagnose_series({"loss": loss, "reward_mean": np.zeros(n)})["verdict"] != "vanishing_gradient"
    assert ("reward_at_floor", "critical") in _rules(diagnose_series({"loss": loss, "reward_mean": np.full(n, -0.10)}))


def test_groups_alike_from_the_start_with_a_reward_of_few_values_never_learn():
    # two samples a group, one-word answers: both samples alike on 174 of 179 steps; the reward takes
    # a few discrete values (its quarters' medians jump from 1.77 to 2.36 with no trend in its means)
    rng = np.random.default_rng(6)                   # quarters' medians 1.771 and 2.357
    n = 179
    levels = np.array([0.886, 1.471, 1.771, 2.357, 2.943])
    reward = rng.choice(levels, n, p=[0.05, 0.1, 0.4, 0.4, 0.05])
    std = np.zeros(n)
    std[[1, 2, 5, 8, 31]] = 2.08
    res = diagnose_series({"reward_mean": reward, "reward_std": std, "loss": np.where(std > 0, 2e-4, 0.0)})
    assert ("groups_all_equal", "critical") in _rules(res), res["findings"]
    # the same groups with a reward that rose over the run learned to score alike
    rising = reward + np.linspace(0, 2.0, n)
    res = diagnose_series({"reward_mean": rising, "reward_std": std, "loss": np.where(std > 0, 2e-4, 0.0)})
    assert ("groups_all_equal", "critical") not in _rules(res)


def test_groups_all_equal_on_nearly_every_step_never_learn_even_beside_a_later_grad_excursion():
    rng = np.random.default_rng(9)
    n = 72
    varied = np.zeros(n, bool)
    varied[[3, 5, 7, 10, 12, 13, 24, 26, 54, 66]] = True   # a few steps where some group differed
    zero_std = np.where(varied, 0.875, 1.0)
    reward = np.where(varied, -0.125, 0.0)
    grad = np.where(varied, rng.uniform(0.1, 0.3, n), rng.uniform(1e-6, 1e-3, n))
    loss = np.where(varied, rng.normal(0, 0.01, n), 0.0)
    series = {"loss": loss, "reward_mean": reward, "grad_norm": grad, "zero_std_share": zero_std,
              "reward_std": np.where(varied, 0.2, 0.0)}
    res = diagnose_series(series)
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 0, res["findings"][:2]
    assert ("groups_all_equal", "critical") in _rules(res)
    # every group at full marks on nearly every step: converged at its ceiling, not stuck
    converged = dict(series, reward_mean=np.where(varied, 0.875, 1.0))
    assert ("groups_all_equal", "critical") not in _rules(diagnose_series(converged))
    assert diagnose_series(converged)["verdict"] != "vanishing_gradient"
    # a reward that collapsed (and then every group scores 0) is a collapse, not a run that never learned
    falling = np.r_[np.full(12, 0.6), np.zeros(n - 12)]
    collapsed = dict(series, reward_mean=falling, zero_std_share=np.r_[np.full(12, 0.5), np.ones(n - 12)])
    assert ("groups_all_equal", "critical") not in _rules(diagnose_series(collapsed))


def test_an_evaluation_loss_printed_unchanged_while_the_training_loss_falls_is_stale_not_frozen():
    n = 20
    loss = 3.66 * np.exp(-np.arange(n) / 8.0) + 2.4
    res = diagnose_series({"loss": loss, "val_loss": np.full(n, 4.2905)})
    assert res["verdict"] == "healthy", res["findings"]
    # the same repetition with the training loss stuck too: the weights stopped changing
    res = diagnose_series({"loss": 4.29 + np.random.default_rng(1).normal(0, 1e-3, n),
                           "val_loss": np.full(n, 4.2905)})
    assert res["verdict"] == "vanishing_gradient"


def test_a_kl_to_the_reference_that_spikes_once_and_settles_low_is_not_a_divergence():
    rng = np.random.default_rng(10)
    n = 250
    kl = np.r_[np.full(75, 0.001), np.linspace(0.002, 0.08, n - 75)] * np.exp(rng.normal(0, 0.2, n))
    kl[205] = 0.935
    reward = np.linspace(0.2, 1.6, n) + rng.normal(0, 0.1, n)
    res = diagnose_series({"kl": kl, "reward_mean": reward, "loss": rng.normal(0, 0.02, n)})
    assert "divergence" != res["verdict"], res["findings"][:2]
    # the same rise that goes on to settle high (0.5) did run away from the reference
    kl[150:] = 0.5 * np.exp(rng.normal(0, 0.1, n - 150))
    assert diagnose_series({"kl": kl, "reward_mean": reward, "loss": rng.normal(0, 0.02, n)})["verdict"] == "divergence"


def test_one_nan_loss_mid_run_did_not_last_and_the_loss_is_read_past_it():
    """LABELS.md root cause 1: anomalies that last. One NaN loss mid-run with finite records at the
    same level after it is a spike (a warning); a lasting jump later is the divergence."""
    n = 60
    loss = 14.7 - 0.03 * np.arange(n) + np.random.default_rng(5).normal(0, 0.1, n)
    loss[20] = np.nan
    res = diagnose_series({"loss": loss})
    assert res["verdict"] == "healthy"
    assert ("lone_nonfinite", "warning") in _rules(res)
    jumped = loss.copy()
    jumped[45:] = 23.0 + np.random.default_rng(6).normal(0, 0.3, n - 45)
    res = diagnose_series({"loss": jumped})
    assert res["verdict"] == "divergence" and res["onset_step"] == 45
    two = loss.copy()
    two[40] = np.nan  # two NaNs: no longer one record that did not last
    assert diagnose_series({"loss": two})["verdict"] == "overflow"


def test_one_huge_finite_record_that_comes_back_is_a_spike_not_saturation():
    n = 80
    rng = np.random.default_rng(8)
    summed = 2000 + rng.normal(0, 300, n)  # a loss summed over tokens
    summed[60] = 6e11
    res = diagnose_series({"loss:sum": summed, "reward_mean": 0.5 + rng.normal(0, 0.05, n)})
    assert res["verdict"] == "healthy"
    assert ("saturated_value", "warning") in _rules(res)
    # finite however large, it never left the representable range (LABELS.md overflow): three records
    # that come back are a spike that recovered; the same value to the end is a blow-up that lasted
    stuck = summed.copy()
    stuck[60:63] = 6e11
    assert diagnose_series({"loss:sum": stuck, "reward_mean": 0.5 + rng.normal(0, 0.05, n)})["verdict"] == "healthy"
    stuck[60:] = 6e11
    res = diagnose_series({"loss": stuck, "reward_mean": 0.5 + rng.normal(0, 0.05, n)})
    assert res["verdict"] == "divergence" and res["onset_step"] == 60, res["findings"]


def test_a_noisy_level_reward_is_not_a_collapse_against_a_baseline_of_its_first_records():
    """LABELS.md: a reward collapse is down several noise widths for good; a noisy reward whose first
    records happen to be high has no downward trend."""
    n = 100
    rng = np.random.default_rng(11)
    reward = -1.4 + 0.003 * np.arange(n) + rng.normal(0, 0.6, n)
    reward[:3] = [-0.9, -0.75, -1.0]
    res = diagnose_series({"reward_mean": reward, "loss": rng.normal(0, 0.01, n), "kl": np.full(n, 0.002)})
    assert res["verdict"] == "healthy", res["findings"]
    fell = reward.copy()
    fell[70:] = -3.5 + rng.normal(0, 0.1, n - 70)  # the same noise, then down by ~3 sigma for good
    res = diagnose_series({"reward_mean": fell, "loss": rng.normal(0, 0.01, n), "kl": np.full(n, 0.002)})
    assert res["verdict"] == "reward_collapse"


def test_a_printed_jump_the_validation_loss_does_not_show_unless_one_part_of_the_loss_blew_up():
    rng = np.random.default_rng(3)
    n = 60
    task = 0.5 * np.exp(-np.arange(n) / 30) + 0.2 + rng.normal(0, 0.005, n)
    val = {s: float(task[s]) + 0.05 for s in range(0, n, 5)}
    # the printed loss ten times higher from step 30 (accumulated over one micro-step instead of
    # ten), every printed part of it alike, the validation loss flat: an artefact, no failure
    printed = np.where(np.arange(n) >= 30, 10.0, 1.0)
    res = diagnose_series({"loss": task * printed, "train_task_loss": task * printed, "val_loss": val})
    assert res["verdict"] == "healthy", res["findings"]
    assert any(f["rule"] == "contradicted_by_validation" for f in res["findings"])
    # an adversarial part of the loss blows up from 0.15 to its clamp of 50 at step 30, the total
    # follows, the task's validation loss does not see it: a divergence of the objective
    domain = np.where(np.arange(n) >= 30, 50.0, 0.15 + rng.normal(0, 0.005, n))
    res = diagnose_series({"loss": task + 0.1 * domain, "train_task_loss": task,
                           "train_domain_loss": domain, "val_loss": val})
    assert res["verdict"] == "divergence" and res["onset_step"] == 30, res["findings"]


def test_a_validation_loss_that_had_come_down_and_rises_with_the_jump_confirms_it():
    # a classifier's loss falls 0.69 -> 0.31, then jumps back to ~0.7 and stays; its evaluation loss
    # was high while the model was untrained (0.72-0.80), came down to 0.47 and rises with the jump:
    # measured against its untrained records (their median) it "did not rise", against the level it
    # had come down to it did - a divergence, no printing artefact
    rng = np.random.default_rng(5)
    n = 50
    loss = np.concatenate([np.linspace(0.67, 0.31, 30), np.full(n - 30, 0.70)]) + rng.normal(0, 0.02, n)
    steps = 10 * np.arange(1, n + 1)
    val = {60: 0.738, 120: 0.722, 180: 0.803, 240: 0.466, 300: 0.45, 360: 0.744, 420: 0.789, 480: 0.714}
    res = diagnose_series({"loss": dict(zip(steps, loss)), "eval_loss": val})
    assert res["verdict"] == "divergence" and 300 <= res["onset_step"] <= 320, res["findings"]
    assert not any(f["rule"] == "contradicted_by_validation" for f in res["findings"])


def test_groups_alike_from_the_first_record_never_learn_whatever_they_score():
    # every group's answers score alike (std 0) from the first records on, at a positive level the
    # reward never rises above: no update ever had anything to learn from (LABELS.md), which a run
    # that climbed to its ceiling and then scores alike (converged) is not
    rng = np.random.default_rng(11)
    n = 69
    varied = np.zeros(n, bool)
    varied[[30, 43, 44, 51, 60]] = True
    series = {"loss": np.where(varied, 0.004, 0.0015) + 0.0005 * rng.random(n),
              "grad_norm": rng.uniform(0.05, 0.4, n),
              "reward_mean": np.where(varied, -0.05, 0.5),
              "reward_std": np.where(varied, 0.5, 0.0),
              "zero_std_share": np.where(varied, 0.8, 1.0)}
    res = diagnose_series(series)
    assert ("groups_all_equal", "critical") in _rules(res) and res["verdict"] == "vanishing_gradient"
    climbed = dict(series, reward_mean=np.r_[np.linspace(-0.5, 0.5, 25), np.full(n - 25, 0.5)],
                   reward_std=np.r_[np.full(25, 0.4), np.zeros(n - 25)],
                   zero_std_share=np.r_[np.full(25, 0.3), np.ones(n - 25)])
    assert ("groups_all_equal", "critical") not in _rules(diagnose_series(climbed))
