"""Shapes real logs carry that a reader must take as they are (LABELS.md "Data before signals"):
a bracketed progress counter, values padded away from their keys, a pasted config table before
the training lines, and a console capture whose progress bar runs into the logged dict."""

from __future__ import annotations

import math

from moeproxy.ingest import parse_file
from moeproxy.ingest.names import canonical_of


def _wide(parsed):
    return parsed.frame.pivot_table(index="step", columns="metric", values="value", aggfunc="first", dropna=False)


def test_a_bracketed_progress_counter_is_the_step_and_the_epoch_fraction_is_not(tmp_path):
    log = tmp_path / "pretrain.log"
    log.write_text("".join(f"[2024-01-01 10:00:0{i}][train.py][INFO] Epoch:[0/2]({i * 500}/90000) "
                           f"loss:{5.0 - 0.1 * i:.3f} lr:0.0001000\n" for i in range(6)))
    parsed = parse_file(log)
    assert parsed.format == "text" and not parsed.step_from_index
    assert sorted(parsed.frame["step"].unique()) == [0, 500, 1000, 1500, 2000, 2500]
    assert _wide(parsed).loc[1500, "loss"] == 4.7


def test_a_value_padded_away_from_its_key_is_still_its_value(tmp_path):
    log = tmp_path / "gpt2.log"
    log.write_text("".join(f"step {s:4d}/40 | loss     {v} (+nanz)| norm    {v} (+nanz)| lr 3.00e-04 | 36.5 ms\n"
                           for s, v in [(1, "4.2100"), (2, "nan"), (3, "nan")]))
    wide = _wide(parse_file(log))
    assert wide.loc[1, "loss"] == 4.21 and wide.loc[1, "norm"] == 4.21
    assert math.isnan(wide.loc[2, "loss"]) and math.isnan(wide.loc[3, "norm"])


def test_a_pasted_config_table_before_the_training_lines_does_not_hide_them(tmp_path):
    table = "".join(f"| {k:<12} | {v:<10} |\n" for k, v in
                    [("Parameter", "Value"), ("------------", "----------"), ("max_steps", "-1"),
                     ("lr", "0.0006"), ("batch", "32"), ("warmup", "700")])
    steps = "".join(f"step {s:4d}/100 | loss {3.0 - 0.01 * s:.4f} | norm 0.9 | lr 1e-4\n" for s in range(1, 13))
    log = tmp_path / "run.log"
    log.write_text(table + "\nallocated 1024 MiB\n" + steps)
    parsed = parse_file(log)
    assert parsed.format == "text"
    assert sorted(parsed.frame["step"].unique()) == list(range(1, 13))


def test_the_bar_before_a_dict_on_the_same_line_dates_it(tmp_path):
    log = tmp_path / "trl.log"
    bar = "  {p}%|#         | {n}/300 [00:12<11:24,  2.32s/it]"
    log.write_text("".join(bar.format(p=n // 3, n=n - 1) + "\r" + bar.format(p=n // 3, n=n)
                           + "   {'loss': '0.01', 'grad_norm': '0.2', 'entropy': '0.3', 'epoch': '0.1'}\n"
                           for n in (5, 10, 15, 20)))
    parsed = parse_file(log)
    assert not parsed.step_from_index
    assert sorted(parsed.frame["step"].unique()) == [5, 10, 15, 20]


def test_markdown_tables_in_any_dialect(tmp_path):
    bodies = {
        "outer.md": "| step | loss | grad_norm |\n|:--|--:|:-:|\n" + "".join(
            f"| {s} | {3 - 0.01 * s:.2f} | 0.9 |\n" for s in range(1, 8)),
        "bare.md": "step | loss | grad_norm\n--|--|--\n" + "".join(f"{s} | {3 - 0.01 * s:.2f} | 0.9\n" for s in range(1, 8)),
    }
    for name, body in bodies.items():
        path = tmp_path / name
        path.write_text("Results of the run:\n\n" + body)
        parsed = parse_file(path)
        assert parsed.format == "table", name
        assert sorted(parsed.frame["step"].unique()) == list(range(1, 8)), name
        assert _wide(parsed).loc[3, "loss"] == 2.97, name


def test_a_step_prefix_with_its_colon_before_the_number_dates_the_dict(tmp_path):
    log = tmp_path / "webui.log"
    log.write_text("Starting training...\n" + "".join(
        f"Step: {s:6d} {{'loss': 2.4, 'grad_norm': inf, 'learning_rate': 1e-05, 'epoch': 0.1}}\n" for s in (3, 7, 11)))
    parsed = parse_file(log)
    assert parsed.format == "printed-dicts" and not parsed.step_from_index
    assert sorted(parsed.frame["step"].unique()) == [3, 7, 11]


def test_a_batch_counter_that_restarts_each_epoch_runs_on_across_epochs(tmp_path):
    log = tmp_path / "word_lm.log"
    log.write_text("".join(f"| epoch {e:3d} | {b:5d}/ 2983 batches | lr 20.00 | ms/batch 11.61 | loss {5 - 0.1 * e:5.2f} | ppl 99.0\n"
                           for e in (1, 2) for b in (200, 400)))
    assert sorted(parse_file(log).frame["step"].unique()) == [200, 400, 3183, 3383]


def test_a_progress_fraction_that_opens_the_line_is_the_step(tmp_path):
    log = tmp_path / "rl.log"
    log.write_text("[job] Loading...\n" + "".join(f"[job]  {s:3d}/100 | loss={0.1 * s:.4f} | reward={0.01 * s:.3f}\n"
                                                  for s in range(1, 11)))
    parsed = parse_file(log)
    assert not parsed.step_from_index and sorted(parsed.frame["step"].unique()) == list(range(1, 11))


def test_a_split_tag_names_the_records_metrics(tmp_path):
    log = tmp_path / "seq2seq.log"
    log.write_text("".join(f"[2020-07-29T13:59:2{i}] Step {s} stats, train: loss = {t}\n"
                           f"[2020-07-29T13:59:3{i}] Step {s} stats, val: loss = {v}\n...\n"
                           for i, (s, t, v) in enumerate([(100, 1.13, 3.32), (200, 0.92, 3.54), (300, 2.30, 4.65)])))
    wide = _wide(parse_file(log))
    # the validation record at the same step does not overwrite the training loss
    assert wide.loc[200, "loss"] == 0.92 and wide.loc[200, "val/loss"] == 3.54  # named as JSON lines name it
    # each tag names the pairs up to the next one, on one line too
    from moeproxy.ingest.formats.text import pairs_of_split
    assert pairs_of_split(" train: loss=1.0, val: loss=2.0, value_loss=0.3") == {
        "loss": 1.0, "val/loss": 2.0, "val/value_loss": 0.3}


def test_a_keras_epoch_header_dates_the_progress_line_after_it(tmp_path):
    log = tmp_path / "keras.log"
    log.write_text("".join(f"Epoch {e}/400\n50000/50000 [==============================] - 455s - "
                           f"loss: {2.3030 - 0.0001 * e:.4f} - acc: 0.0971 - val_loss: 2.3026 - val_acc: 0.1000\n"
                           for e in range(34, 40)))
    parsed = parse_file(log)
    assert sorted(parsed.frame["step"].unique()) == list(range(34, 40))
    assert math.isclose(_wide(parsed).loc[36, "loss"], 2.3030 - 0.0036)


def test_every_structured_format_takes_its_step_from_the_one_vocabulary(tmp_path):
    import pytest

    from moeproxy.vocabulary import STEP_KEYS

    for i, key in enumerate(STEP_KEYS):
        steps = [7, 14, 21]
        csv = tmp_path / f"export{i}.csv"
        csv.write_text(f"{key},loss\n" + "".join(f"{s},{3.0 - 0.1 * n}\n" for n, s in enumerate(steps)))
        jsonl = tmp_path / f"metrics{i}.jsonl"
        jsonl.write_text("".join(f'{{"{key}": {s}, "loss": {3.0 - 0.1 * n}}}\n' for n, s in enumerate(steps)))
        for path in (csv, jsonl):
            parsed = parse_file(path)
            assert sorted(parsed.frame["step"].unique()) == steps, (key, path.suffix)
            assert _wide(parsed).loc[14, "loss"] == pytest.approx(2.9), (key, path.suffix)


def test_ms_swift_logging_jsonl_is_json_lines_dated_by_its_progress_string(tmp_path):
    log = tmp_path / "logging.jsonl"
    rows = [f'{{"loss": {v}, "grad_norm": 2.0, "epoch": {s / 438:.4f}, "global_step/max_steps": "{s}/438"}}\n'
            for s, v in [(1, 20.5), (10, 3.9), (20, 0.24), (30, 0.27)]]
    # the last line is a summary whose log_history repeats the records: not a trainer_state.json
    rows.append('{"last_model_checkpoint": "/out/checkpoint-438", "best_metric": 0.129, "global_step": 438, '
                '"log_history": [{"loss": 20.5, "step": 1}], "memory": 16.5}\n')
    log.write_text("".join(rows))
    parsed = parse_file(log)
    assert parsed.format == "jsonl"
    assert {1, 10, 20, 30} <= set(parsed.frame["step"].unique())
    assert _wide(parsed).loc[20, "loss"] == 0.24


def test_a_json_line_per_epoch_is_dated_by_its_epoch(tmp_path):
    log = tmp_path / "log.txt.jsonl"
    log.write_text('{"config": "dino_vits16", "seed": 0}\n'     # a header line without an epoch
                   + "".join(f'{{"train_loss": 11.090352058410645, "train_lr": {7e-5 - e * 1e-6}, "epoch": {e}}}\n'
                             for e in range(251, 262)))
    parsed = parse_file(log)
    assert sorted(parsed.frame["step"].unique()) == list(range(251, 262))
    assert "epoch" not in set(parsed.frame["metric"])


def test_a_norm_of_something_else_is_not_the_grad_norm():
    from moeproxy.ingest.names import canonical_of

    assert canonical_of("norm")[0] == "grad_norm"            # llm.c prints the grad norm as 'norm'
    assert canonical_of("baseline/grad_norm")[0] == "grad_norm"  # an arm label in front is dropped
    for other in ("param_norm", "weight_norm", "actor/weight_norm", "update_norm"):
        assert canonical_of(other) is None, other


def test_a_counter_on_a_line_of_its_own_dates_the_pairs_below_it(tmp_path):
    # an RL homework logger: a framed iteration header, then one ``Key : value`` a line
    blocks = []
    for it in range(12):
        loss = "nan" if it >= 9 else f"{-0.01 * it:.4f}"
        blocks.append(f"\n********** Iteration {it} ************\n\nCollecting data for eval...\n"
                      f"Eval_AverageReturn : {20.0 + it}\nTrain_AverageReturn : {18.0 + it}\n"
                      f"Actor Loss : {loss}\nTrain_EnvstepsSoFar : {1000 * (it + 1)}\nDone logging...\n\n")
    log = tmp_path / "pg.log"
    log.write_text("########\nlogging outputs to data/pg\n########\n" + "".join(blocks))
    parsed = parse_file(log)
    assert parsed.format == "text" and not parsed.step_from_index
    wide = _wide(parsed)
    assert list(wide.index) == list(range(12))
    assert wide.loc[3, "train_averagereturn"] == 21.0
    assert math.isnan(wide.loc[9, "actor loss"]) and wide.loc[8, "actor loss"] == -0.08


def test_a_progress_bar_inside_a_named_epoch_is_dated_by_the_epoch(tmp_path):
    # tqdm's description names the epoch and holds the pairs; the bar's 469/469 is within the epoch
    bar = "█" * 40
    lines = ["\n  0%|          | 0/469 [00:00<?, ?it/s]\n"]
    for epoch, loss in enumerate(["1.5296", "3.7050", "4.1570", "nan", "nan"]):
        lines.append("\n" * 30 + f"Epoch: [{epoch}/400] Loss: {loss} Acc: 0.05: 100%|{bar}| 469/469 "
                     f"[07:02<00:00,  1.11it/s]\n")
    log = tmp_path / "output.log"
    log.write_text("".join(lines))
    wide = _wide(parse_file(log))
    assert list(wide.index) == [0, 1, 2, 3, 4]
    assert wide.loc[1, "loss"] == 3.705 and math.isnan(wide.loc[3, "loss"])


def test_a_gym_monitor_file_is_a_table_of_episode_returns(tmp_path):
    # Stable-Baselines3's Monitor: a JSON comment line, then r (return), l (length), t (seconds)
    rows = "".join(f"{-100 + 2 * i:.2f},{200 - i},{0.1 * i:.4f}\n" for i in range(30))
    log = tmp_path / "monitor.csv"
    log.write_text('#{"t_start": 1778540287.43, "env_id": "Parking-v0"}\nr,l,t\n' + rows)
    parsed = parse_file(log)
    assert parsed.format == "csv" and parsed.step_from_index
    wide = _wide(parsed)
    assert wide.loc[5, "episode_return"] == -90.0 and wide.loc[5, "episode_length"] == 195
    assert canonical_of("episode_return")[0] == "reward_mean"


def test_a_step_column_is_found_in_any_case_and_rllab_returns_are_the_reward(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("Time\tIteration\tAverageReturn\tTimestepsSoFar\n"
                   + "".join(f"{1.5 * i:.3f}\t{10 * i}\t{5.0 + i}\t{1000 * i}\n" for i in range(12)))
    parsed = parse_file(log)
    assert not parsed.step_from_index
    wide = _wide(parsed)
    assert list(wide.index)[:3] == [0, 10, 20] and wide.loc[30, "AverageReturn"] == 8.0
    assert canonical_of("AverageReturn")[0] == "reward_mean"
    assert canonical_of("LastEpReturn")[0] == canonical_of("AverageEpRet")[0] == "reward_mean"  # Spinning Up


def test_a_lightning_per_step_copy_is_the_metric_and_its_epoch_mean_is_not(tmp_path):
    # PyTorch Lightning logs a metric kept per step and per epoch as <name>_step and <name>_epoch
    assert canonical_of("train_loss_step")[0] == "loss"
    assert canonical_of("train_loss_epoch") is None
    assert canonical_of("val_loss_step") is None            # a validation loss stays a validation loss
    log = tmp_path / "metrics.csv"
    log.write_text("epoch,step,train_loss_epoch,train_loss_step,val_loss\n"
                   + "".join(f"0,{49 + 50 * i},,{7.6 - 0.01 * i:.3f},\n" for i in range(8))
                   + "0,399,7.55,,7.58\n")
    from moeproxy.ingest.names import resolve_names

    wide = _wide(parse_file(log))
    assert wide.loc[99, "train_loss_step"] == 7.59
    stored = resolve_names(list(wide.columns))
    assert stored["train_loss_step"] == "loss" and stored["train_loss_epoch"] == "train_loss_epoch"


def test_a_counter_line_dates_the_name_and_number_lines_below_it(tmp_path):
    # the Berkeley deep-RL homework's DQN log: "Timestep N" alone, then "name value" lines
    blocks = "".join(f"Timestep {60000 + 10000 * i}\nmean reward (100 episodes) {-20.2 + 0.5 * i:.6f}\n"
                     f"best mean reward {'-inf' if i < 2 else f'{-20.0 + 0.5 * i:.6f}'}\nepisodes {64 + 11 * i}\n"
                     f"exploration {0.946 - 0.009 * i:.6f}\nlearning_rate 0.000100\n" for i in range(12))
    log = tmp_path / "atari_model.txt"
    log.write_text("AVAILABLE GPUS:  ['device: 0, name: GeForce GT 650M']\n" + blocks)
    parsed = parse_file(log)
    assert parsed.format == "text" and not parsed.step_from_index
    wide = _wide(parsed)
    assert list(wide.index)[:2] == [60000, 70000]
    assert wide.loc[70000, "mean reward (100 episodes)"] == -19.7 and wide.loc[70000, "episodes"] == 75
    assert canonical_of("mean reward (100 episodes)")[0] == "reward_mean"
    assert canonical_of("best mean reward") is None     # a running best is not the reward


def test_the_step_column_that_never_goes_back_is_the_step(tmp_path):
    # Stable-Baselines3 called learn() in chunks: time/iterations starts again, total timesteps runs on
    rows = "".join(f"{1 + i % 5},{500 * (i + 1)},{-1.6 + 0.01 * i:.3f}\n" for i in range(20))
    log = tmp_path / "progress.csv"
    log.write_text("time/iterations,time/total_timesteps,train/entropy_loss\n" + rows)
    parsed = parse_file(log)
    assert sorted(parsed.frame["step"].unique())[:3] == [500, 1000, 1500]
    assert parsed.frame["step"].nunique() == 20
    # a counter that only grows keeps its place ahead of the timesteps (the rollout step)
    log.write_text("time/iterations,time/total_timesteps,train/entropy_loss\n"
                   + "".join(f"{1 + i},{500 * (i + 1)},-1.0\n" for i in range(6)))
    assert sorted(parse_file(log).frame["step"].unique()) == [1, 2, 3, 4, 5, 6]


def test_the_update_counter_is_the_step_when_every_step_column_starts_again(tmp_path):
    # learn() called again and again, each call counting its iterations and timesteps from 0: only
    # Stable-Baselines3's train/n_updates runs on (2,000 rows must not collapse onto two steps)
    rows = "".join(f"{100 * (1 + i % 2)},{500 * (1 + i % 2)},{-1.38 + 0.0005 * i:.4f},{100 * i + 99}\n"
                   for i in range(2000))
    log = tmp_path / "progress.csv"
    log.write_text("time/iterations,time/total_timesteps,train/entropy_loss,train/n_updates\n" + rows)
    steps = parse_file(log).frame["step"]
    assert steps.nunique() == 2000 and steps.min() == 99 and steps.max() == 199999
    # an update counter that goes back too leaves the first step key (a resumed run) as before
    log.write_text("time/iterations,time/total_timesteps,train/entropy_loss,train/n_updates\n"
                   + "".join(f"{1 + i % 3},{500 * (1 + i % 3)},-1.0,{i % 3}\n" for i in range(9)))
    assert sorted(parse_file(log).frame["step"].unique()) == [1, 2, 3]


def test_bar_redraws_with_terminal_controls_do_not_hide_the_records_after_them(tmp_path):
    # tqdm's nested bars end each redraw with ESC[A: 400 such lines before the first logged dict
    bars = "".join(f" {i % 100:2d}%|██▎       | {i % 13}/13 [00:00<00:02,  4.23it/s]\x1b[A\n" for i in range(420))
    dicts = "".join(f"{{'loss': {-1.2 - 0.3 * i:.4f}, 'grad_norm': {3.0 * 2 ** i:.4f}, 'learning_rate': 1e-05, "
                    f"'epoch': {0.4 * (i + 1):.2f}}}\n" for i in range(8))
    log = tmp_path / "run.log"
    log.write_text(bars + dicts)
    parsed = parse_file(log)
    assert parsed.format == "printed-dicts"
    assert _wide(parsed)["grad_norm"].max() == 3.0 * 2 ** 7


def test_a_headerless_csv_of_two_counters_and_a_value_is_read(tmp_path):
    # d3rlpy writes each metric to its own headerless CSV: epoch, total step, value
    log = tmp_path / "critic_loss.csv"
    log.write_text("".join(f"{e},{1000 * e},{100.0 + e:.4f}\n" for e in range(1, 40)))
    parsed = parse_file(log)
    wide = _wide(parsed)
    assert list(wide.index)[:2] == [1, 2] and wide.loc[2, "loss"] == 102.0


def test_keras_batch_lines_inside_an_epoch_count_on_across_epochs(tmp_path):
    # Keras 3's progress bar printed per batch (a docs page or a notebook keeps every line), the
    # ``Epoch N/M`` header on a line of its own, code fences and HTML around them (keras.io's pages)
    lines = []
    for epoch in (1, 2):
        lines += ["<div class=\"k-default-codeblock\">", "```", f"Epoch {epoch}/2", "```", "</div>"]
        for k in (1, 4, 7, 9):
            lines.append(f"   {k}/10 ━━━━━━━━━━━━━━━━━━━━  8s 17ms/step - accuracy: 0.{epoch}{k} - loss: "
                         f"{3.0 - 0.1 * k - epoch:.4f} - moe_loss: {epoch * 10 + k}.5")
        lines.append(f"  10/10 ━━━━━━━━━━━━━━━━━━━━ 9s 18ms/step - accuracy: 0.5 - loss: 0.7 - moe_loss: 3.1")
    log = tmp_path / "moe_mnist.md"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "text" and not parsed.step_from_index
    wide = _wide(parsed)
    # batch k of epoch e is step (e - 1) x 10 + k; each epoch's closing 10/10 summary is not a batch
    assert sorted(wide.index) == [1, 4, 7, 9, 11, 14, 17, 19]
    assert wide.loc[14, "moe_loss"] == 24.5 and wide.loc[19, "epoch"] == 2
    # a log of epoch summaries alone stays read by epoch
    summary = tmp_path / "vae.log"
    summary.write_text("".join(f"Epoch {e}/3\n 250/250 ━━━━━━━━━━━━━━━━━━━━ 110s 439ms/step - loss: {400 - e}.5\n"
                               for e in (1, 2, 3)))
    assert sorted(_wide(parse_file(summary)).index) == [1, 2, 3]


def test_a_keras_log_of_epoch_summaries_cut_short_mid_epoch_stays_read_by_epoch(tmp_path):
    # a notebook's 31 epoch summaries, then the 32nd epoch's bar printed once as the cell was stopped
    # (``18/375 ... ETA: 5s - loss: 0.7351``): one counted line after the epochs' records is no
    # change of counter; read by epoch as before it, that line left out
    lines = []
    for e in range(1, 32):
        lines += [f"Epoch {e}/40",
                  f"375/375 [==============================] - 7s 19ms/step - loss: 0.73{35 - e // 8} - val_loss: 0.7399"]
    lines += ["Epoch 32/40", " 18/375 [>.............................] - ETA: 5s - loss: 0.7351",
              "<Figure size 640x480 with 10 Axes>"]
    log = tmp_path / "vae.log"
    log.write_text("\n".join(lines) + "\n")
    wide = _wide(parse_file(log))
    assert sorted(wide.index) == list(range(1, 32)), sorted(wide.index)[:5]
    assert wide.loc[31, "val_loss"] == 0.7399
