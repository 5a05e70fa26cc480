"""A table with no step key steps by its epoch or episode counter when that counter rises row after
row (Spinning Up's ``Epoch``, a script's ``episode`` list), never by a column that goes back; and a log
that writes a canonical name means that metric, whatever alias of it stands beside it."""

from __future__ import annotations

import json

from moeproxy.ingest import parse_file


def _by_metric(parsed):
    frame = parsed.frame
    return {m: dict(zip(g["step"], g["value"])) for m, g in frame.groupby("metric", observed=True)}


def test_a_tab_table_with_an_epoch_column_steps_by_it(tmp_path):
    log = tmp_path / "progress.txt"
    rows = ["Epoch\tAverageEpRet\tLossQ"] + [f"{e}\t{100 + e}\t{0.5 * e}" for e in range(1, 21)]
    log.write_text("\n".join(rows) + "\n")
    parsed = parse_file(log)
    metrics = _by_metric(parsed)
    assert not parsed.step_from_index and sorted(metrics["LossQ"]) == list(range(1, 21))
    assert "Epoch" not in metrics


def test_an_epoch_column_that_goes_back_is_no_step(tmp_path):
    log = tmp_path / "batches.csv"
    rows = ["epoch,loss"] + [f"{b // 5},{2.0 - b / 100}" for b in range(20)]  # five rows an epoch
    log.write_text("\n".join(rows) + "\n")
    parsed = parse_file(log)
    assert parsed.step_from_index and len(_by_metric(parsed)["loss"]) == 20


def test_columnar_json_steps_by_its_episode_list(tmp_path):
    log = tmp_path / "training_metrics.json"
    episodes = list(range(0, 500, 10))
    log.write_text(json.dumps({"episode": episodes, "avg_reward": [1.0 + e / 100 for e in episodes],
                               "policy_entropy": [1.6 - e / 400 for e in episodes]}))
    metrics = _by_metric(parse_file(log))
    assert sorted(metrics["avg_reward"]) == episodes


def test_a_canonical_name_outranks_an_alias_of_it():
    from moeproxy.ingest.names import resolve_names

    # thompson_entropy would stand for the policy entropy (a run label before "entropy") if the log
    # had no better name for it; the column named policy_entropy itself is that metric
    assert resolve_names(["thompson_entropy", "policy_entropy"]) == {
        "thompson_entropy": "thompson_entropy", "policy_entropy": "policy_entropy"}
    assert resolve_names(["thompson_entropy"]) == {"thompson_entropy": "policy_entropy"}


def test_stable_baselines_2_flat_boxes_after_a_preamble(tmp_path):
    # stable-baselines (version 2) PPO2: flat boxes (no sections), one env's reward printed as [x],
    # after a long preamble of warnings; a Markdown table (with its |---| separator) is not a box
    box = ["-" * 40, "| approxkl           | 0.0009     |", "| episode_reward     | [{r}] |",
           "| n_updates          | {u}          |", "| policy_entropy     | {e}     |",
           "| total_timesteps    | {t}        |", "| value_loss         | 0.54      |", "-" * 40, "0"]
    lines = [f"/opt/site-packages/tf/dtypes.py:{i}: FutureWarning: Passing (type, 1)" for i in range(120)]
    for u in range(1, 41):
        lines += [row.format(r=-600.0 + u, u=u, e=0.69 * 0.95 ** u, t=128 * u) for row in box]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "key-value-boxes"
    metrics = _by_metric(parsed)
    assert sorted(metrics["episode_reward"].values()) == [-600.0 + u for u in range(1, 41)]
    assert sorted(metrics["policy_entropy"]) == [128 * u for u in range(1, 41)]  # stepped by total_timesteps


def test_unity_ml_agents_names():
    from moeproxy.ingest.names import resolve_names

    # ML-Agents' TensorBoard tags: the episode return is Environment/Cumulative Reward (its
    # Policy/Extrinsic Reward is one reward signal's, beside curiosity), the entropy Policy/Entropy
    got = resolve_names(["Policy/Extrinsic Reward", "Environment/Cumulative Reward", "Policy/Entropy",
                         "Losses/Policy Loss", "Losses/Value Loss"])
    assert got["Environment/Cumulative Reward"] == "reward_mean"
    assert got["Policy/Extrinsic Reward"] == "Policy/Extrinsic Reward"
    assert got["Policy/Entropy"] == "policy_entropy" and got["Losses/Policy Loss"] == "loss"


def test_unity_ml_agents_is_named_as_the_framework():
    from moeproxy.ingest.names import guess_framework

    assert guess_framework(["Environment/Cumulative Reward", "Policy/Entropy", "Losses/Value Loss"]) == "ml-agents"


def test_a_cross_entropy_is_no_policy_entropy():
    from moeproxy.ingest.names import canonical_of

    # Marian prints its validation loss as ``[valid] Ep. 2 : Up. 5000 : cross-entropy : 238.694``:
    # "cross" is no run label in front of "entropy", it says what is measured
    for name in ("cross-entropy", "cross_entropy", "binary_cross_entropy", "softmax_entropy"):
        assert canonical_of(name) is None, name
    assert canonical_of("run3_entropy") == ("policy_entropy", 201)


def test_a_key_with_hyphens_for_underscores_is_its_alias():
    from moeproxy.ingest.names import canonical_of

    assert canonical_of("kl-penalty")[0] == "kl" and canonical_of("policy-loss")[0] == "loss"
    assert canonical_of("kl-penalty")[1] > canonical_of("kl_penalty")[1]  # the key itself outranks it
    assert canonical_of("cross-entropy") is None and canonical_of("val-loss") is None


def test_two_counters_with_totals_are_nested_loops_and_the_step_runs_on(tmp_path):
    # ``Iteration 1/1, Step 5/500``: the outer loop first; read by its first counter alone, every
    # record fell on step 1 (a 500-step GRPO notebook read as one record)
    lines = []
    for it in (1, 2):
        for step in range(1, 21):
            lines.append(f"Iteration {it}/2, Step {step}/20, GRPO iter 1/1, loss: {0.1 * step:.4f}")
    log = tmp_path / "grpo.log"
    log.write_text("\n".join(lines) + "\n")
    loss = _by_metric(parse_file(log))["loss"]
    assert sorted(loss) == list(range(1, 41))
    assert loss[25] == 0.5  # iteration 2, step 5


def test_two_bare_counters_keep_the_first_as_the_step(tmp_path):
    # litgpt's ``iter 1152 step 144``: no totals, no nesting to read; the first counter is the step
    log = tmp_path / "litgpt.log"
    log.write_text("\n".join(f"iter {8 * s} step {s}: loss {3 - s / 50:.4f}" for s in range(1, 21)) + "\n")
    assert sorted(_by_metric(parse_file(log))["loss"]) == [8 * s for s in range(1, 21)]


def test_a_known_pair_a_few_lines_after_each_step_is_that_steps_and_one_far_off_is_not(tmp_path):
    lines = []
    for step in range(1, 31):
        lines += [f"Step {step}/30, loss: {1 / step:.4f}", "Input batch size: 7, Device before model: cuda:0",
                  f"Average Reward: {0.02 * step:.4f}"]
    log = tmp_path / "near.log"
    log.write_text("\n".join(lines) + "\n")
    reward = _by_metric(parse_file(log))["average reward"]
    assert len(reward) == 30 and reward[1] == 0.02
    # the same pair behind a page of prose lines: not read as the step's (it was read pair by
    # pair on every such line before, seconds on a 3 MB log)
    far = []
    for step in range(1, 31):
        far += [f"Step {step}/30, loss: {1 / step:.4f}"] + [f"note {i} about the batch" for i in range(6)] \
            + [f"Average Reward: {0.02 * step:.4f}"]
    log2 = tmp_path / "far.log"
    log2.write_text("\n".join(far) + "\n")
    metrics = _by_metric(parse_file(log2))
    assert "loss" in metrics and "average reward" not in metrics
