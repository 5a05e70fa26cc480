"""The data stage (shared/LABELS.md "Data before signals"): what a run's numbers mean, read before
any rule fires."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.semantics import read_data, re_recorded_steps
from moeproxy.diagnose.series import RunSeries


def _series(values, start=0):
    return pd.Series(np.asarray(values, dtype=float), index=np.arange(start, start + len(values)))


def _healthy_loss(n=40):
    return 3.0 - 0.01 * np.arange(n) + np.random.default_rng(0).normal(0, 0.01, n)


def test_an_auxiliary_metric_never_computed_is_no_evidence_but_the_loss_is():
    run = RunSeries({"loss": _series(_healthy_loss()), "kl": _series([np.nan] * 40),
                     "reward_component": _series([0.0] * 40)})
    kept, reading = read_data(run)
    assert set(kept.names) == {"loss"}
    assert set(reading.never_computed) == {"kl", "reward_component"}
    assert diagnose_series({"loss": _healthy_loss(), "kl": [np.nan] * 40})["verdict"] == "healthy"
    # the training loss non-finite from its first record, the run going on: overflow from the start
    res = diagnose_series({"loss": [np.nan] * 40, "lr": np.linspace(1e-4, 1e-3, 40)})
    assert res["verdict"] == "overflow"


def test_a_lone_nonfinite_first_record_is_an_artefact_a_nan_out_of_a_calm_run_is_not():
    loss = _healthy_loss()
    first = loss.copy()
    first[0] = np.nan
    res = diagnose_series({"loss": first})
    assert res["verdict"] == "healthy" and res["data"]["masked"] == {"loss": [0]}
    later = loss.copy()
    later[25:] = np.nan
    assert diagnose_series({"loss": later})["verdict"] == "overflow"


def test_a_partial_last_record_is_an_artefact_a_whole_one_is_not():
    loss, grad = _healthy_loss(), np.full(40, 1.0)
    cut = loss.copy()
    cut[-1] = np.nan
    # the last record holds the loss only (the grad norm was never written): partial
    res = diagnose_series({"loss": cut, "grad_norm": dict(enumerate(grad[:-1]))})
    assert res["verdict"] == "healthy"
    whole = grad.copy()
    whole[-1] = np.nan
    assert diagnose_series({"loss": cut, "grad_norm": whole})["verdict"] == "overflow"


def test_updates_with_nothing_to_learn_mask_the_zeros_of_other_metrics():
    n = 30
    loss, grad = np.full(n, 0.1), np.full(n, 0.5)
    entropy = np.linspace(1.0, 0.9, n)
    loss[:3] = grad[:3] = entropy[:3] = 0.0  # GRPO rows with no active sequence
    kept, reading = read_data(RunSeries({k: _series(v) for k, v in
                                         {"loss": loss, "grad_norm": grad, "policy_entropy": entropy}.items()}))
    assert reading.masked == {"policy_entropy": [0, 1, 2]}
    assert kept.get("policy_entropy").index[0] == 3


def test_json_records_of_several_kinds_are_separate_series_on_the_outer_counter(tmp_path):
    from moeproxy.ingest import parse_file

    lines = [{"type": "config", "lr": 1e-5}]
    for step in range(1, 6):
        lines.append({"type": "rollout", "grpo_step": step, "reward": 0.5 + 0.01 * step})
        for update in range(2):
            lines.append({"type": "train", "grpo_step": step, "optimizer_step": 2 * step + update,
                          "loss": 0.1, "grad_norm": 1.0, "reference_kl": None})
        if step % 2 == 0:
            lines.append({"type": "eval", "grpo_step": step, "reward": 0.3})
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    frame = parse_file(path).frame
    assert sorted(frame["step"].unique()) == [1, 2, 3, 4, 5]  # the rollout counter, not the optimizer's
    metrics = set(frame["metric"])
    assert {"eval/reward", "loss", "grad_norm"} <= metrics and ({"reward_mean", "reward"} & metrics)
    assert "lr" not in metrics  # the config record carries no series
    evals = frame[frame["metric"] == "eval/reward"]
    assert sorted(evals["step"]) == [2, 4]


def test_a_policy_loss_whose_size_blows_up_again_and_again_is_divergence_dated_by_the_cluster():
    rng = np.random.default_rng(1)
    n = 300
    loss = rng.normal(0, 0.05, n)
    loss[[40, 120]] = [30.0, -45.0]              # early spikes that came back
    for k in range(200, n, 3):                   # from 200 on it blows up again and again
        loss[k] = 10 ** rng.uniform(5, 7) * (-1) ** k
    reward = 0.6 + rng.normal(0, 0.02, n)
    res = diagnose_series({"loss": loss, "reward_mean": reward})
    assert res["verdict"] == "divergence" and 200 <= res["onset_step"] <= 215
    assert any(f["rule"] == "policy_loss_blowup" for f in res["findings"])
    # a GRPO loss of 1e-5 that reaches 0.1 is not a blow-up: it never left O(1)
    small = rng.normal(0, 1e-5, n)
    small[[50, 90, 91, 92, 150]] = 0.1
    assert diagnose_series({"loss": small, "reward_mean": reward})["verdict"] == "healthy"


def test_no_update_ever_applied_and_a_frozen_loss_are_vanishing_gradient():
    zeros = diagnose_series({"loss": [0.0] * 11, "grad_norm": [0.0] * 11, "lr": np.linspace(1e-7, 1e-6, 11)})
    assert zeros["verdict"] == "vanishing_gradient" and zeros["onset_step"] == 0
    # a trainer that logs 0 for a norm it never computed, while the loss falls: nothing wrong
    assert diagnose_series({"loss": _healthy_loss(), "grad_norm": [0.0] * 40})["verdict"] == "healthy"
    rng = np.random.default_rng(2)
    train = 1.3863 + rng.normal(0, 0.01, 60)     # never below its start: the run never learns
    frozen = np.r_[1.3863 + rng.normal(0, 1e-4, 20), [1.3862943649291992] * 40]
    res = diagnose_series({"loss": train, "eval_loss": frozen})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 0
    # a loss printed with three digits repeats by chance: no finding
    coarse = np.r_[_healthy_loss(30), [2.31] * 10]
    assert diagnose_series({"loss": coarse})["verdict"] != "vanishing_gradient"


def test_every_update_empty_with_the_reward_at_its_floor_is_vanishing_gradient_not_at_its_ceiling():
    rng = np.random.default_rng(3)
    n = 100
    loss = np.zeros(n)
    hits = rng.choice(n, 8, replace=False)
    loss[hits] = rng.normal(0, 3, 8)
    reward = np.zeros(n)
    reward[hits] = 0.25
    res = diagnose_series({"loss": loss, "reward_mean": reward})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 0
    assert res["findings"][0]["rule"] == "updates_empty"
    # every group scoring full marks: converged, not stuck
    assert diagnose_series({"loss": loss, "reward_mean": 1.0 - reward})["verdict"] == "healthy"
    # scattered empty updates in a learning run: normal
    learning = rng.normal(0, 0.05, n)
    learning[::3] = 0.0
    assert diagnose_series({"loss": learning, "reward_mean": np.linspace(0.1, 0.6, n)})["verdict"] == "healthy"


def test_entropy_falling_after_the_reward_reached_its_ceiling_is_convergence():
    n = 100
    entropy = 0.8 * np.exp(-np.arange(n) / 5.0) + 1e-4
    reward = np.minimum(1.0, 0.6 + 0.1 * np.arange(n))
    assert diagnose_series({"policy_entropy": entropy, "reward_mean": reward})["verdict"] == "healthy"
    # the same entropy fall with a reward that stalls low is a collapse
    stalled = 0.3 + np.random.default_rng(4).normal(0, 0.02, n)
    assert diagnose_series({"policy_entropy": entropy, "reward_mean": stalled})["verdict"] == "entropy_collapse"


def test_a_loss_that_never_moves_from_the_runs_start_never_learned():
    rng = np.random.default_rng(5)
    flat = 4.69 + rng.normal(0, 0.008, 34)           # 34 records from step 20: within 1 % of its level
    steps = {"loss": pd.Series(flat, index=20 * np.arange(1, 35)),
             "grad_norm": pd.Series(8.6 + rng.normal(0, 0.1, 34), index=20 * np.arange(1, 35))}
    res = diagnose_series(steps)
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 20
    assert res["findings"][0]["rule"] == "loss_never_moved"
    # the same flat stretch late in a run (a plateau after learning) is no finding
    late = {name: pd.Series(s.to_numpy(), index=s.index + 48_000) for name, s in steps.items()}
    assert diagnose_series(late)["verdict"] == "healthy"
    # a loss that moves a few percent as minibatches do, and falls, is healthy
    assert diagnose_series({"loss": _healthy_loss()})["verdict"] == "healthy"


def test_a_loss_frozen_at_ln_k_is_a_uniform_guess():
    rng = np.random.default_rng(6)
    loss = np.log(10) + rng.uniform(1e-4, 5e-4, 9)   # 2.3028-2.3030 from epoch 34 on
    res = diagnose_series({"loss": pd.Series(loss, index=np.arange(34, 43))})
    assert res["verdict"] == "vanishing_gradient" and res["onset_step"] == 34
    assert res["findings"][0]["rule"] == "loss_at_uniform_guess"
    # a loss near ln(10) that keeps moving by more than the tolerance is not frozen
    moving = np.log(10) + np.linspace(0.0, -0.05, 9)
    assert diagnose_series({"loss": moving})["verdict"] == "healthy"


def test_an_sft_token_entropy_does_not_make_a_run_rl():
    n = 30
    sft = RunSeries({"loss": _series(_healthy_loss(n)), "policy_entropy": _series(np.linspace(1.2, 0.9, n)),
                     "mean_token_accuracy": _series(np.linspace(0.4, 0.6, n))})
    assert not sft.is_rl
    grpo = RunSeries({"loss": _series(np.zeros(n)), "policy_entropy": _series(np.linspace(1.2, 0.9, n))})
    assert grpo.is_rl


def test_answers_that_lengthen_as_the_reward_climbs_are_learning_not_a_blow_up():
    rng = np.random.default_rng(7)
    n = 20
    reward = np.r_[[-2.9, -2.6, -2.7], np.linspace(-0.5, 2.4, n - 3)] + rng.normal(0, 0.1, n)
    truncation = np.r_[[0.07, 0.08, 0.075], np.full(n - 3, 0.17)] + rng.normal(0, 0.005, n)
    steps = 5 * np.arange(1, n + 1)
    series = {"reward_mean": pd.Series(reward, index=steps), "truncation_rate": pd.Series(truncation, index=steps),
              "loss": pd.Series(rng.normal(0, 0.02, n), index=steps)}
    res = diagnose_series(series)
    assert res["verdict"] == "healthy"
    assert any(f["rule"] == "length_with_reward" for f in res["findings"])
    # the same truncation rise while the reward stays where it was is a length blow-up
    series["reward_mean"] = pd.Series(0.3 + rng.normal(0, 0.02, n), index=steps)
    assert diagnose_series(series)["verdict"] == "divergence"


def test_a_grad_norm_burst_that_comes_back_below_100x_is_a_warning_not_divergence():
    rng = np.random.default_rng(8)
    grad = 2.0 + rng.normal(0, 0.1, 13)
    grad[7:11] = [10.7, 7.2, 15.0, 6.7]          # x5-x7 for four records, then back
    loss = 0.09 + rng.normal(0, 0.005, 13)
    res = diagnose_series({"grad_norm": grad, "loss": loss})
    assert res["verdict"] == "healthy"
    assert any(f["rule"] == "grad_excursion" and f["severity"] == "warning" for f in res["findings"])
    # a burst at x1000 is a blow-up however briefly it lasts
    grad[7:11] = [900.0, 2000.0, 1500.0, 800.0]
    assert diagnose_series({"grad_norm": grad, "loss": loss})["verdict"] == "divergence"


def test_a_loss_that_converged_to_a_printed_zero_is_not_the_nan_filter():
    n = 60
    loss = np.r_[np.linspace(0.17, 0.1, 30), 0.1 * np.exp(-np.arange(20) / 2.5), np.zeros(10)]  # memorised
    grad = np.r_[np.linspace(0.5, 3e-3, 50), np.full(10, 5e-4)]
    assert diagnose_series({"loss": loss, "grad_norm": grad})["verdict"] == "healthy"
    # from where the loss was straight to 0.0 and staying, in the HF Trainer's records (its fractional
    # epoch): its NaN filter, overflow
    jump = np.r_[_healthy_loss(50), np.zeros(10)]
    res = diagnose_series({"loss": jump, "grad_norm": np.full(n, 1.0), "epoch": np.arange(1, n + 1) * 0.05})
    assert res["verdict"] == "overflow" and res["onset_step"] == 50


def test_a_loss_printed_zero_throughout_beside_a_nan_validation_loss_overflowed_from_the_start():
    loss = pd.Series(np.zeros(11), index=np.arange(11))
    val = pd.Series([np.nan, np.nan], index=[1, 7])
    res = diagnose_series({"loss": loss, "eval_loss": val, "lr": np.full(11, 1.05e-7)})
    assert res["verdict"] == "overflow" and res["onset_step"] == 0
    assert res["findings"][0]["rule"] == "nan_filtered_from_start"
    # an evaluation loss never computed (NaN everywhere) beside a loss that learns is no evidence
    assert diagnose_series({"loss": _healthy_loss(11), "eval_loss": val})["verdict"] == "healthy"


def test_an_entropy_rise_that_lasts_is_found_after_one_that_came_back():
    rng = np.random.default_rng(9)
    entropy = 0.4 + rng.normal(0, 0.05, 120)
    entropy[10:20] = 2.5                      # spreads out for ten updates, then sharpens again
    entropy[60:] = np.linspace(3.5, 11.9, 60)  # blows up toward uniform output for good
    res = diagnose_series({"policy_entropy": entropy, "reward_mean": 0.5 + rng.normal(0, 0.02, 120)})
    assert res["verdict"] == "divergence" and 58 <= res["onset_step"] <= 61


def test_a_training_loss_no_framework_names_is_read_as_the_loss():
    from moeproxy.diagnose.semantics import training_loss_by_name

    # TensorBoard tags of a project's own: Train/EpochLoss beside Val/EpochLoss
    assert training_loss_by_name(["Train/EpochLoss", "Val/EpochLoss", "Train/lrs"]) == "Train/EpochLoss"
    assert training_loss_by_name(["batch loss", "aux_loss"]) == "batch loss"
    assert training_loss_by_name(["g_loss", "d_loss"]) is None        # two networks' losses: neither
    assert training_loss_by_name(["Batch Energy"]) is None
    assert training_loss_by_name(["Loss/train", "Loss/val"]) == "Loss/train"   # TensorBoard's usual tags
    assert training_loss_by_name(["Loss/kl", "loss_scale"]) is None
    epochs = np.arange(1, 151)
    loss = np.where(epochs < 56, 2460.0 / epochs, 2500.0)             # falls to ~45, jumps x50, stays
    res = diagnose_series({"Train/EpochLoss": pd.Series(loss, index=epochs),
                           "Val/EpochLoss": pd.Series(np.full(150, 3000.0), index=epochs)})
    assert res["verdict"] == "divergence" and res["onset_step"] == 56, res["findings"]
    assert res["data"]["read_as"] == {"loss": "Train/EpochLoss"}


def test_a_per_step_copy_sparser_than_the_epoch_copy_gives_way_to_it(tmp_path):
    # PyTorch Lightning logs train_loss_step every 50 steps and train_loss_epoch every epoch of 9
    # steps: over 20 epochs the step copy has 3 records, the epoch copy 20, which blow up from 14
    rows = ["epoch,step,train_loss_epoch,train_loss_step"]
    for epoch in range(20):
        step = 9 * epoch + 8
        level = 0.7 * 0.8 ** epoch if epoch < 14 else 0.8 * 2.0 ** (epoch - 13)
        rows.append(f"{epoch},{step},{level:.4f},")
        if step % 50 < 9:
            rows.append(f"{epoch},{step - step % 50},,{level:.4f}")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(rows) + "\n")
    from moeproxy.diagnose.evaluation import diagnose_path

    res = diagnose_path(path)
    assert res["data"]["read_as"] == {"loss": "train_loss_epoch"}
    assert res["verdict"] == "divergence" and res["onset_step"] == 9 * 14 + 8, res["findings"]
    # a step copy as dense as the epoch copy stays the metric
    dense = {"loss": _series(_healthy_loss()), "loss_epoch": _series(_healthy_loss()[::2])}
    _, reading = read_data(RunSeries(dense))
    assert "loss" not in reading.read_as


def test_a_loss_falling_steadily_but_slowly_over_its_first_records_is_learning():
    # a live run's first 20 records: 2.0 -> 1.98, one thousandth a step, no noise; a watcher must not
    # call it "never learned" (a noisy loss level from start to end still is)
    steps = np.arange(1, 21)
    res = diagnose_series({"loss": dict(zip(steps, 2.0 - steps / 1000)),
                           "grad_norm": dict(zip(steps, 1.0 + (steps % 5) / 10))})
    assert res["verdict"] == "healthy", res["findings"]
    flat = 2.3 + np.random.default_rng(0).normal(0, 0.005, 60)
    assert diagnose_series({"loss": dict(zip(np.arange(1, 61), flat))})["verdict"] == "vanishing_gradient"


def test_rare_policy_loss_spikes_the_policy_came_back_from_are_no_divergence():
    # a GRPO loss carrying one update's KL to the reference x1e6, back at the next record (once two
    # records), four times in 250 steps while the reward keeps rising: spikes, not a blow-up
    rng = np.random.default_rng(4)
    n = 250
    loss = rng.normal(0, 3e-4, n)
    spikes = [105, 113, 163, 164]
    loss[spikes] = [1.5e5, 2.0e3, 3.9e4, 25.0]
    kl = np.abs(rng.normal(0.01, 0.003, n))
    kl[spikes] = loss[spikes] / 0.04  # the loss is beta x KL there
    reward = np.linspace(0.05, 0.2, n) + rng.normal(0, 0.03, n)

    def blowup(series):
        res = diagnose_series(series)
        return res, any(f["rule"] == "policy_loss_blowup" and f["severity"] == "critical" for f in res["findings"])

    res, hit = blowup({"loss": loss, "kl": kl, "reward_mean": reward})
    assert res["verdict"] == "healthy" and not hit, res["findings"][:3]
    # the same spikes with the reward down after them: the policy did not come back
    assert blowup({"loss": loss, "kl": kl, "reward_mean": np.r_[reward[:105], reward[105:] - 0.15]})[1]
    # a spike that lasts (four records) is no spike
    lasting, lasting_kl = loss.copy(), kl.copy()
    lasting[105:109], lasting_kl[105:109] = 1.5e5, 3.7e6
    assert blowup({"loss": lasting, "kl": lasting_kl, "reward_mean": reward})[1]
    # spikes of the loss itself (no KL term blown up with them; an A2C loss on unnormalised returns)
    assert blowup({"loss": loss, "kl": np.abs(rng.normal(0.01, 0.003, n)), "reward_mean": reward})[1]
    assert blowup({"loss": loss, "reward_mean": reward})[1]


def test_records_that_re_record_the_last_logged_values_count_once():
    # a callback that records TRL's last log at each of the ten steps between two logging steps:
    # every value repeats exactly ten times, so the loss's last ten records are one measurement, not
    # a loss frozen for ten steps
    rng = np.random.default_rng(3)
    logged = np.arange(11, 1001, 10)
    loss = np.abs(rng.normal(0.02, 0.01, logged.size)).round(9)
    reward = (0.40 + 0.09 * (1 - np.exp(-logged / 200.0))).round(6)
    steps = np.arange(11, 1001)
    block = np.searchsorted(logged, steps, side="right") - 1
    series = {"loss": pd.Series(loss[block], index=steps), "reward_mean": pd.Series(reward[block], index=steps),
              "kl": pd.Series((0.03 * (1 - np.exp(-logged / 100.0)))[block], index=steps)}
    copies = re_recorded_steps(RunSeries(series))
    assert len(copies) == steps.size - logged.size and 11 not in copies and 12 in copies
    res = diagnose_series(series)
    assert res["verdict"] == "healthy", res["findings"]
    assert res["data"]["copies"] == len(copies)
    # a loss frozen at the end with everything else (one block): no blocks of a usual length, kept
    frozen = {k: pd.Series(np.r_[v.to_numpy()[:500:10], np.full(30, v.to_numpy()[500])],
                            index=np.arange(80)) for k, v in series.items()}
    assert re_recorded_steps(RunSeries(frozen)) == []


def test_an_rl_loss_column_of_zeros_beside_a_policy_loss_that_moves_was_never_filled():
    # a CSV whose ``loss`` column is 0 on every row while ``actor_pg_loss`` moves: no update was empty
    n = 60
    rng = np.random.default_rng(12)
    steps = range(1, n + 1)
    pg = np.where(rng.random(n) < 0.3, 0.0, rng.normal(0, 0.05, n))
    res = diagnose_series({"loss": dict(zip(steps, [0.0] * n)), "actor_pg_loss": dict(zip(steps, pg.tolist())),
                           "reward_mean": dict(zip(steps, np.where(pg == 0, 0.0, 0.1 * rng.random(n)).tolist())),
                           "policy_entropy": dict(zip(steps, (1.1 + 0.1 * rng.random(n)).tolist()))})
    assert "loss" in res["data"]["never_computed"]
    assert not any(f["rule"] == "updates_empty" for f in res["findings"])
    assert res["data"]["read_as"].get("loss") == "actor_pg_loss"


def test_rl_games_curves_against_epochs_and_seconds_are_set_aside():
    # rl_games logs its mean reward against frames (``rewards/step``, read as the reward), epochs
    # (``rewards/iter``) and seconds (``rewards/time``): on one step counter the epochs and seconds
    # would double the records and shrink the step gap to 1
    frames = np.arange(1, 41) * 8192
    reward = np.linspace(-2.0, 40.0, 40)
    run = RunSeries({"reward_mean": pd.Series(reward, index=frames),
                     "rewards/iter": pd.Series(reward, index=np.arange(1, 41)),
                     "rewards/time": pd.Series(reward, index=np.arange(1, 41) * 37),
                     "episode_lengths/step": pd.Series(np.full(40, 360.0), index=frames),
                     "episode_lengths/iter": pd.Series(np.full(40, 360.0), index=np.arange(1, 41)),
                     "losses/c_loss": pd.Series(np.linspace(0.3, 0.1, 40), index=frames)})
    out, reading = read_data(run)
    assert reading.other_axes == {"rewards/iter": "reward_mean", "rewards/time": "reward_mean",
                                  "episode_lengths/iter": "episode_lengths/step"}
    assert set(out.names) == {"reward_mean", "episode_lengths/step", "losses/c_loss"}
    assert reading.records == 40 and reading.step_gap == 8192
