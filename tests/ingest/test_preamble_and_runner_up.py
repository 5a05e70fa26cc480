"""Detection reads real logs as they come: a long shell/Ray preamble before the first training line
does not hide the format, and start-up lines that look like one format before the records of
another do not leave the file unread."""

from __future__ import annotations

from moeproxy.ingest import parse_file


def test_a_preamble_longer_than_the_head_does_not_hide_a_verl_console(tmp_path):
    log = tmp_path / "train.log"
    preamble = "".join(f"++ export VAR_{i}=/data/share/path/{i} # a shell trace line of the launcher\n"
                       for i in range(2000))  # ~130 KB: two heads of prose
    steps = "".join(f"\x1b[36m(TaskRunner pid=678203)\x1b[0m step:{s} - actor/entropy:{0.3 - s / 1000:.3f} - "
                    f"actor/grad_norm:0.32 - critic/score/mean:{0.5 + s / 100:.3f}\n" for s in range(1, 30))
    log.write_text(preamble + steps)
    parsed = parse_file(log)
    assert parsed.format == "verl-console"
    assert sorted(set(parsed.rows.step.tolist())) == list(range(1, 30))


def test_start_up_dicts_then_pipe_records_are_read_by_the_format_that_reads_values(tmp_path):
    log = tmp_path / "run.log"
    head = "".join(f"  Learner: ({{'hosts': 0/1, 'gpus': {i}/8}}, 'rank {i}/8 initialized on cuda:{i}')\n"
                   for i in range(8))
    records = "".join(f"step:{s} | policy_loss={0.001 * s:.4f} | mean_reward={0.15 + s / 100:.4f} | "
                      f"grad_norm={9.6 + s:.4f} | epoch=0\n" for s in range(20))
    log.write_text(head + "Training: 7473 problems, 32 prompts/step\n" + records)
    parsed = parse_file(log)
    assert len(parsed.rows) > 0
    assert sorted(set(parsed.rows.step.tolist())) == list(range(20))


def test_pairs_after_a_double_dash_are_read(tmp_path):
    """A real line (blind8 j5_03, NVIDIA DeepLearningExamples' ALBERT): `` -- `` separates the step
    from its pairs; the first pair (the loss) was dropped with it."""
    line = ("[1,0]<stdout>:2020-12-23 23:07:21,094 __main__    : INFO     Train step 1040 -- Loss: 11.174, "
            "MLM: 10.479, SOP: 0.695, MLM_acc: 0.000, SOP_acc: 0.521 -- It/s: 1.69\n")
    log = tmp_path / "albert.log"
    log.write_text(line + line.replace("step 1040", "step 1050").replace("11.174", "11.175"))
    parsed = parse_file(log)
    rows = parsed.rows
    loss = [v for c, v in zip(rows.code, rows.value) if rows.names[c].lower() == "loss"]
    assert loss == [11.174, 11.175] and sorted(set(rows.step.tolist())) == [1040, 1050]


def test_after_a_thin_winner_the_reader_of_most_known_values_takes_over(tmp_path):
    # DeepSpeed's engine line and its printed config dicts before a script's own step lines: the
    # engine line wins the sniff and reads two values, the config dicts would read two dozen; the
    # step lines, fewer values than ten times those but all of metrics the vocabulary knows, are the run
    lines = ["INFO 01-02 10:00:00 [config.py:10] serving engine started with tasks {'generate', 'score'}."]
    lines += ["[2025-01-02 10:00:05,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=0, skipped=0, lr=[1e-06], mom=[(0.9, 0.999)]"]
    for k in range(2):
        lines += [f"[2025-01-02 10:00:0{6 + k},000] [INFO] [config.py:1005:print]   {name} ... {{'{a}': {v}, '{b}': {w}}}"
                  for name, a, v, b, w in [("aio_config", "block_size", 1048576, "queue_depth", 8),
                                           ("optimizer_params", "lr", 1e-06, "eps", 1e-08),
                                           ("data_efficiency", "seed", 1234, "num_workers", 0),
                                           ("pipeline", "activation_checkpoint_interval", 0, "micro_batches", 4),
                                           ("compression", "schedule_offset", 0, "quantize_groups", 1),
                                           ("flops_profiler", "profile_step", 1, "module_depth", -1)]]
        lines += [f"INFO 01-02 10:00:1{k} [executor_base.py:226] It took 0.{k}5 seconds to wake up"] * 30
    for step in range(12):
        lines += [f"[{step}/100]  loss: {-5.0 + step * 0.3:.4f}, policy_loss: {-5.0 + step * 0.3:.4f}, "
                  f"kl-penalty: {0.01 * 2 ** step:.5f}, entropy:{80.0 - step:.3f}"]
        lines += [f"INFO 01-02 10:01:{10 + step} [worker.py:100] sleep mode freed 30.{step} GiB memory"] * 20
    log = tmp_path / "grpo.txt"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    metrics = set(parsed.frame["metric"])
    assert {"loss", "kl-penalty", "entropy"} <= metrics, (parsed.format, metrics)
    assert parsed.frame[parsed.frame["metric"] == "loss"]["step"].tolist() == list(range(12))


def test_a_progress_bar_line_longer_than_a_window_does_not_stop_the_look_past_a_preamble(tmp_path):
    # a slurm log: an environment dump, warnings, then one line of 30,000 redrawn progress bars
    # (carriage returns, no newline: 2 MB), then the trainer's printed dicts
    preamble = [f"max user processes              (-u) {i}" for i in range(40)] + ["CUDA SETUP: Detected CUDA version 117"]
    bars = "".join(f"  {i // 300}%|          | {i}/30290 [00:{i % 60:02d}<293:53:55, 34.93s/it]\r" for i in range(20000))
    dicts = [f"{{'loss': {2.0 - i / 400:.4f}, 'learning_rate': 9.9e-05, 'rewards/chosen': -16.9, 'epoch': {i / 100:.2f}}}"
             for i in range(300)]
    log = tmp_path / "slurm-66561401.out"
    log.write_text("\n".join(preamble + [bars] + dicts) + "\n")
    frame = parse_file(log).frame
    assert len(frame[frame.metric == "loss"]) == 300


def test_a_closing_summary_dict_does_not_hide_a_progress_table_of_known_metrics(tmp_path):
    # a notebook's printed text: prose and a sample dict, the Trainer's progress table (25 rows of a
    # known metric), then its closing TrainOutput dict; the dicts' six values, none but one a metric
    # the vocabulary knows, won detection and are not a tenth of the table's values: the table's
    # known values, ten times the dicts' and ten at least, take over
    log = tmp_path / "cells.log"
    prose = "".join(f"Problem {p}: she sold {p * 3} clips, then half as many, so {p * 3 // 2} more.\nGround truth: {p}\n"
                    for p in range(50))
    sample = "{'ground_truth': '72', 'prompt': [{'content': 'solve it', 'role': 'user'}]}\n"
    table = "| Step | Training Loss |\n|---|---|\n" + "".join(f"| {s} | 0.000000 |\n" for s in range(2, 52, 2))
    summary = ("{'train_runtime': 17085.29, 'train_samples_per_second': 0.006, 'train_steps_per_second': 0.003, "
               "'total_flos': 0.0, 'train_loss': 0.0}\n")
    log.write_text(sample + prose + table + summary)
    parsed = parse_file(log)
    names = set(parsed.frame["metric"])
    assert "training loss" in names and len(parsed.frame[parsed.frame["metric"] == "training loss"]) == 25, \
        (parsed.format, sorted(names))
