"""Loss-scaler overflow lines without a step counter (DeepSpeed, fairseq, apex): one skipped update
each, stored at the step being attempted, in file order with the records around them."""

from __future__ import annotations

from moeproxy.ingest import parse_file


def _overflows(parsed) -> dict[int, float]:
    frame = parsed.frame
    scale = frame[frame.metric == "deepspeed/reduced_loss_scale"].set_index("step")["value"]
    steps = frame[frame.metric == "deepspeed/overflow"]["step"].tolist()
    return {int(s): float(scale[s]) for s in steps}


def test_fairseq_warnings_follow_the_last_update(tmp_path):
    log = tmp_path / "fairseq.log"
    lines = [f"| epoch 001:  {u} / 600 loss=2.30, num_updates={u}, gnorm=7.7, loss_scale=64.000\n"
             for u in (100, 125)]
    lines.insert(1, "| WARNING: overflow detected, setting loss scale to: 32.0\n")
    lines += [f"| WARNING: overflow detected, setting loss scale to: {s}\n" for s in (16.0, 8.0, 4.0)]
    log.write_text("".join(lines))
    parsed = parse_file(log)
    assert parsed.format == "text"
    # after update 100 the next update is attempted; three in a row after 125 are three attempts
    assert _overflows(parsed) == {101: 32.0, 126: 16.0, 127: 8.0, 128: 4.0}
    assert parsed.frame["attempt"].max() == 0  # the events keep file order: no false restart
    assert sorted(parsed.frame[parsed.frame.metric == "loss"]["step"]) == [100, 125]


def test_apex_gradient_overflow_lines(tmp_path):
    log = tmp_path / "apex.log"
    log.write_text("step 7 loss=3.1 grad_norm=0.9\n"
                   "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0\n"
                   "step 8 loss=3.0 grad_norm=0.8\n")
    assert _overflows(parse_file(log)) == {8: 16384.0}


def test_deepspeed_overflow_after_a_tqdm_bar_takes_the_bar_step(tmp_path):
    log = tmp_path / "ds.log"
    bar = " 14%|#4        | {n}/2724 [13:55:57<86:19:20, 132.41s/it]"
    over = ("[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
            "Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {r}")
    log.write_text(bar.format(n=377) + "\n"
                   + bar.format(n=378) + over.format(a=64, r=32) + "\n"
                   + bar.format(n=379) + over.format(a=32, r=16) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "megatron"
    assert _overflows(parsed) == {379: 32.0, 380: 16.0}
    attempted = parsed.frame[parsed.frame.metric == "deepspeed/attempted_loss_scale"]["value"].tolist()
    assert attempted == [64.0, 32.0]


def test_a_line_that_only_mentions_overflow_is_not_an_event(tmp_path):
    log = tmp_path / "talk.log"
    log.write_text("step 1 loss=2.0\nusing dynamic loss scaling to avoid overflow detected early\n"
                   "step 2 loss=1.9\n")
    parsed = parse_file(log)
    assert "deepspeed/overflow" not in set(parsed.frame.metric)
    assert parsed.skipped_lines == 1


def test_a_run_stopped_by_an_error_on_nan_values_overflowed_at_the_step_under_way(tmp_path):
    log = tmp_path / "ppo.log"
    records = "".join(f"Epoch: {e}, global_step={e * 1024}\nSampling new architecture\n"
                      f"SPS: 2690, pg_loss={0.02 + 0.001 * e:.4f}, v_loss=0.15\n" for e in range(1, 30))
    crash = ("Epoch: 30, global_step=30720\nTraceback (most recent call last):\n"
             '  File "ppo.py", line 204, in get_action_and_value\n'
             "ValueError: Expected parameter loc (Tensor of shape (3200, 7)) of distribution Normal(loc: "
             "torch.Size([3200, 7])) to satisfy the constraint Real(), but found invalid values:\n"
             "tensor([[nan, nan, nan,  ..., nan, nan, nan],\n        [nan, nan, nan,  ..., nan, nan, nan]], "
             "device='cuda:0',\n       grad_fn=<CatBackward0>)\n")
    log.write_text(records + crash)
    frame = parse_file(log).frame
    nan_iters = frame[frame.metric == "nan_iters"]
    assert nan_iters["step"].tolist() == [30720] and nan_iters["value"].tolist() == [1.0]
    from moeproxy.diagnose.record import diagnose_target

    _, result, _ = diagnose_target(str(log), db=":memory:")
    assert result["verdict"] == "overflow" and result["onset_step"] == 30720, result["findings"]
    # a tensor printed with finite values, or talk of NaN, is no event
    log.write_text(records + "tensor([[0.1, 0.2]])\nchecking for nan values in the batch\n")
    assert "nan_iters" not in set(parse_file(log).frame.metric)


def test_deepspeed_skipping_every_step_is_overflow_and_a_start_up_search_is_not(tmp_path):
    from moeproxy.diagnose.record import diagnose_target

    line = ("[2025-04-09 03:43:30,861] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={k}, "
            "lr=[1e-05, 1e-05], mom=[(0.9, 0.99), (0.9, 0.99)]\n")
    log = tmp_path / "rm.log"
    log.write_text("".join(line.format(s=s, k=s) for s in range(10, 400, 10)))   # every step skipped
    _, result, _ = diagnose_target(str(log), db=":memory:")
    assert result["verdict"] == "overflow" and result["onset_step"] == 10, result["findings"]
    log.write_text("".join(line.format(s=s, k=min(s, 12)) for s in range(10, 400, 10)))  # 12 at start-up
    _, result, _ = diagnose_target(str(log), db=":memory:")
    assert result["verdict"] == "healthy", result["findings"]
