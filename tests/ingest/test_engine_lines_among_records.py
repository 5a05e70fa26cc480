"""A file whose head looks like one format while its records are another's: DeepSpeed's engine
lines among DeepSpeed-Chat's own step lines, a pretty-printed config of dicts before verl's step
lines. The reader that reads the records takes over when it loses none of the evidence."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_frame
from moeproxy.ingest import parse_file

OVERFLOW = ("[2023-04-18 08:48:05,282] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
            "Skipping step. Attempted loss scale: {a}, reducing to {r}")


def _dschat_log(path, steps=300, two_engines=True):
    """DeepSpeed-Chat step 3 (PPO): actor and critic engines each search their fp16 loss scale at
    start-up (each overflow printed once per engine), then overflow now and then; the reward climbs."""
    rng = np.random.default_rng(0)
    lines = ["***** Running training *****"]
    scale = {0: 65536, 1: 65536}
    for step in range(steps):
        if step < 3 or step in (60, 150):
            for engine in (0, 1) if two_engines else (0,):
                lines.append(OVERFLOW.format(a=scale[engine], r=scale[engine] // 2))
                scale[engine] //= 2
        lines.append(f"epoch: 0|step: {step}|ppo_ep: 1|act_loss: {0.2 * rng.standard_normal():.6f}|"
                     f"cri_loss: {0.1 + 0.02 * rng.random():.6f}|unsuper_loss: 0.0")
        lines.append(f"average reward score: {min(4.0, step / 50) + 0.3 * rng.standard_normal():.6f}")
        lines.append("-" * 85)
        lines.append("|E2E latency=3.91s |Gather latency=0.00s (0.00%) |Generate time=2.79s (71.38%) "
                     "|Training time=0.82s (20.99%) |Others=0.30 (7.63%)|CurSamplesPerSec=16.35")
        if step % 10 == 9:
            lines.append(f"[2023-04-18 08:48:36,035] [INFO] [logging.py:96:log_dist] [Rank 0] step={step + 1}, "
                         f"skipped=3, lr=[5.79e-07, 5.79e-07], mom=[(0.9, 0.95), (0.9, 0.95)]")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_deepspeed_chat_step_lines_are_read_with_the_engine_events(tmp_path):
    parsed = parse_file(_dschat_log(tmp_path / "step3.log"))
    names = set(parsed.frame.metric.unique())
    assert parsed.format == "text"
    # the step lines, the reward on the line after each, and DeepSpeed's overflow events and counts
    assert {"act_loss", "cri_loss", "average reward score", "deepspeed/overflow",
            "deepspeed/skipped_total"} <= names
    reward = parsed.frame[parsed.frame.metric == "average reward score"]
    assert len(reward) == 300 and sorted(reward.step)[:3] == [0, 1, 2]


def test_two_engines_searching_their_loss_scale_and_occasional_overflows_are_healthy(tmp_path):
    frame = parse_file(_dschat_log(tmp_path / "step3.log")).frame
    result = diagnose_frame(frame)
    # the same scale tried twice at start-up is the two engines' search, and overflow events
    # scattered over hundreds of logged steps are no storm
    assert result["verdict"] == "healthy", [f["rule"] for f in result["findings"] if f["severity"] == "critical"]


def test_a_metric_line_now_and_then_is_not_a_step_of_its_own(tmp_path):
    # a summary line that follows a few steps only (a rollout's entropy every tenth step) is not
    # merged into the step before it
    lines = []
    for step in range(100):
        lines.append(f"step: {step} | loss: {2 - step / 100:.4f} | grad_norm: 0.5")
        if step % 10 == 0:
            lines.append(f"entropy: {0.7 - step / 1000:.4f}")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    assert "entropy" not in set(parse_file(log).frame.metric.unique())


def test_a_validation_loss_line_after_every_kth_step_is_that_steps(tmp_path):
    # a validation pass every 10th logged step prints its loss on a line of its own just after the
    # step's record (then checkpoint lines): that step's validation loss, not a skipped line; the
    # same line once in a log is no line of the run's own
    lines = []
    for step in range(50, 5050, 50):
        lines.append(f"2026-02-13 14:54:54,206 - trainer - INFO - Step {step} | Loss: {step / 1e6:.4f} | LR: 1.00e-04")
        if step % 500 == 0:
            lines.append(f"2026-02-13 14:55:51,064 - trainer - INFO - Validation loss: {0.03 - step / 1e6:.4f}")
            lines.append(f"2026-02-13 14:55:52,229 - trainer - INFO - Saved checkpoint to ckpt_step_{step}.pt")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    frame = parse_file(log).frame
    val = frame[frame.metric == "validation loss"]
    assert sorted(val.step.tolist()) == list(range(500, 5500, 500)), sorted(frame.metric.unique())
    once = [line for line in lines if "Validation" not in line]
    once.insert(40, "2026-02-13 14:55:51,064 - trainer - INFO - Validation loss: 0.0200")
    log.write_text("\n".join(once) + "\n")
    assert "validation loss" not in set(parse_file(log).frame.metric.unique())


def test_a_printed_config_before_verl_step_lines_does_not_hide_them(tmp_path):
    lines = ["(TaskRunner pid=1) {'actor_rollout_ref': {'actor': {'ppo_epochs': 1,"]
    lines += [f"(TaskRunner pid=1)    'key_{i}': {{'a_{i}': {i}, 'b_{i}': {i + 0.5}, 'c_{i}': {i * 2}}}," for i in range(60)]
    lines += ["(TaskRunner pid=1)    'last': 1}}}"]
    lines += [f"(TaskRunner pid=1) noise line {i} without numbers worth reading" for i in range(900)]
    rng = np.random.default_rng(1)
    for step in range(1, 121):
        lines.append(f"(TaskRunner pid=1) step:{step} - actor/entropy:{0.35 - step / 1000:.3f} - "
                     f"actor/grad_norm:{0.2 + 0.01 * rng.random():.3f} - actor/pg_loss:{0.01 * rng.standard_normal():.4f} - "
                     f"critic/score/mean:{0.5 + step / 400:.3f} - response_length/mean:{300 + step:.1f}")
    log = tmp_path / "verl.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    names = set(parsed.frame.metric.unique())
    assert {"actor/entropy", "critic/score/mean"} <= names
    assert len(parsed.frame[parsed.frame.metric == "critic/score/mean"]) == 120


def test_a_trainers_steps_lines_between_deepspeed_engine_lines_are_the_records(tmp_path):
    # diffusion-pipe prints ``steps: N loss: X`` between DeepSpeed's ``step=N, skipped=0, lr=[...]``
    lines = []
    for step in range(16, 24):
        lines.append(f"steps: {step} loss: {'nan' if step >= 18 else f'{0.8 - step / 100:.4f}'} iter time (s): 3.181 "
                     f"samples/sec: 0.314")
        lines.append(f"[2026-07-30 09:16:29,681] [INFO] [logging.py:123:log_dist] [Rank 0] step={step + 1}, "
                     f"skipped=0, lr=[1e-06], mom=[0.0]")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    frame = parse_file(log).frame
    loss = frame[frame.metric == "loss"]
    assert sorted(loss.step) == list(range(16, 24)) and loss[loss.step >= 18].value.isna().all()
    assert diagnose_frame(frame)["verdict"] == "overflow"


def test_a_bars_percentage_after_its_description_is_no_step(tmp_path):
    log = tmp_path / "sd.log"
    log.write_text("Steps:   0%|          | 0/3000 [00:00<?, ?it/s]\n" + "".join(
        f"Steps:   0%|          | {s}/3000 [01:30<22:57:31, 27.58s/it, loss={v}, lr=0.002]\n"
        for s, v in [(1, 0.146), (2, 0.146), (3, 0.0955), (4, "nan"), (5, "nan")]))
    loss = parse_file(log).frame
    assert sorted(loss[loss.metric == "loss"].step) == [1, 2, 3, 4, 5]


def test_episode_lines_of_an_rl_script_are_its_records(tmp_path):
    # ``Episode N reward R eps E``: the episode counts the records where the log has no other counter;
    # an episode count after another counter (PyMARL's ``t_env: 10050 | Episode: 52``) is a stat
    rng = np.random.default_rng(4)
    lines = [f"[INFO] 2025-11-03 10:47:02 Episode {i} reward {-20 + i / 10 + rng.normal():.3f} eps {0.995 ** i:.3f}"
             for i in range(120)]
    log = tmp_path / "dqn.log"
    log.write_text("\n".join(lines) + "\n")
    frame = parse_file(log).frame
    reward = frame[frame.metric == "reward"]
    assert len(reward) == 120 and sorted(reward.step)[:3] == [0, 1, 2]
    from moeproxy.ingest.formats.text import find_epoch
    assert find_epoch("Recent Stats | t_env:      10050 | Episode:       52") is None
