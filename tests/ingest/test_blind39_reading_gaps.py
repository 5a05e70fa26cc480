"""Shapes of real logs that earlier sets showed unread, each made here (not copied): an episode
counter framed on a line of its own with the episode's numbers on the lines below it (a notebook
printing one block an episode), and TensorFlow 1's ``tf.Print`` lines behind glog's prefix
(``I tensorflow/core/kernels/logging_ops.cc:64] CrossE[472.02966]``)."""

from __future__ import annotations

from moeproxy.diagnose.diagnosis import diagnose_frame
from moeproxy.ingest import parse_file


def _series(parsed, name):
    frame = parsed.frame
    part = frame[frame.metric == name]
    return dict(zip(part.step, part.value))


def test_an_episode_block_between_rules_is_that_episodes_record(tmp_path):
    lines = []
    for episode in range(30):
        lines += ["=" * 42, f"Episode:  {episode}", f"Reward:  {10.0 + episode}", f"Mean Reward {10.0 + episode / 2}",
                  f"Max reward so far:  {10.0 + episode}"]
        if episode % 10 == 0:
            lines.append("Model saved")
    log = tmp_path / "reinforce.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "text" and not parsed.step_from_index
    reward = _series(parsed, "reward")
    assert sorted(reward) == list(range(30)) and reward[7] == 17.0
    assert _series(parsed, "mean reward")[4] == 12.0


def test_tf_print_lines_behind_the_glog_prefix_are_read(tmp_path):
    values = [2.30, 2.28, 2.31, 2.27, 2.29, 2.30, 4.1, 6.8, 9.5, 12.2]
    log = tmp_path / "tf1.log"
    log.write_text("".join(f"I tensorflow/core/kernels/logging_ops.cc:79] Loss[{v}]\n" for v in values)
                   + "I0604 12:34:56.789012  1234 logging_ops.cc:79] Loss[nan]\n")
    parsed = parse_file(log)
    xent = _series(parsed, "loss")
    assert [xent[i] for i in range(10)] == values and xent[10] != xent[10]  # the NaN, last
    # and it is the run's loss, read as one: a loss that climbs five-fold and turns NaN
    result = diagnose_frame(parsed.frame)
    critical = [f for f in result["findings"] if f["severity"] == "critical"]
    assert result["verdict"] in ("divergence", "overflow") and critical[0]["metric"] == "loss"


def test_a_bracketed_list_is_no_value(tmp_path):
    # ``lr=[1e-05, 1e-05]`` and ``name[1 2 3]`` hold several values: no one of them is the metric
    log = tmp_path / "lists.log"
    log.write_text("".join(f"step {s} loss: {2 - s / 100:.3f} probs[0.1 0.2 0.7]\n" for s in range(12)))
    names = set(parse_file(log).frame.metric.unique())
    assert "loss" in names and not any(n.startswith("probs") for n in names)


def test_an_index_in_brackets_is_no_value(tmp_path):
    # a debug line naming the sample it prints (``[DEBUG] step=50, sample[0]``): an index
    log = tmp_path / "debug.log"
    log.write_text("".join(f"step={s}, loss: {2 - s / 100:.3f}\n[DEBUG] step={s}, sample[0]\n" for s in range(12)))
    names = set(parse_file(log).frame.metric.unique())
    assert "loss" in names and "sample" not in names
