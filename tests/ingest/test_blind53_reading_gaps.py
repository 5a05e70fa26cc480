"""What blind53's logs carried that the readers misread (read since its first-sight score)."""

from moeproxy.ingest import parse_file
from moeproxy.ingest.prefixes import without_timestamps


def _series(path, metric):
    rows = parse_file(path).rows.to_frame()
    return rows[rows.metric == metric].set_index("step").value


def test_keras3_epoch_bars_are_read_by_epoch_beside_a_batch_line(tmp_path):
    # Keras 3 draws its bar with box characters; a warning printed into the first batch's line left
    # that line in the log: the epochs' closing bars (``2/2 ━━━━``) are the records, one an epoch
    lines = ["Epoch 1/30", "1/2 ━━━━━━━━━━━━━━━━━━━━ 0s 762ms/step - loss: 0.9 - mae: 0.5[WARNING] absl - saving"]
    for epoch in range(1, 31):
        if epoch > 1:
            lines.append(f"Epoch {epoch}/30")
        lines.append(f"2/2 ━━━━━━━━━━━━━━━━━━━━ 0s 23ms/step - loss: {1 / epoch:.4f} - mae: 0.3 - "
                     f"val_loss: {1.5 / epoch:.4f} - learning_rate: 0.0010")
    path = tmp_path / "fit.txt"
    path.write_text("\n".join(lines) + "\n")
    loss = _series(path, "loss")
    assert list(loss.index) == list(range(1, 31))
    assert loss[4] == 0.25 and _series(path, "val_loss")[2] == 0.75


def test_an_iteration_in_brackets_after_the_epoch_is_the_step(tmp_path):
    # ``epoch 0[4500], loss: nan``: the bracketed iteration, not the epoch, counts the records
    path = tmp_path / "train.log"
    path.write_text("".join(f"epoch {i // 5000}[{i}], loss: {60 / (1 + i / 500):.3f}, lr: 0.00010 \n"
                            for i in range(0, 8500, 500)))
    loss = _series(path, "loss")
    assert list(loss.index) == list(range(0, 8500, 500))
    assert loss[4500] == float(f"{60 / 10:.3f}")


def test_a_bracketed_count_that_restarts_each_epoch_runs_on(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("".join(f"Epoch {e}[{i}] loss: {1 / (e * 10 + i):.4f}\n" for e in (1, 2, 3) for i in (10, 20)))
    assert list(_series(path, "loss").index) == [10, 20, 30, 40, 50, 60]


def test_a_zone_after_the_clock_is_the_timestamps_and_so_is_the_bar_after_it(tmp_path):
    assert without_timestamps("2017-06-05 23:08:05.311669 EDT | Iteration 0").strip() == "| Iteration 0"
    assert without_timestamps("2025-06-12 13:31:12 INFO step 3").strip() == "INFO step 3"
    # rllab's debug log: timestamped ``itr #N |`` lines, then a table of ``Key value`` rows per iteration
    lines = []
    for itr in range(12):
        stamp = f"2017-06-05 22:{10 + itr:02d}:25.503447 EDT | "
        lines += [stamp + f"itr #{itr} | Obtaining samples...", stamp + f"itr #{itr} | Saved",
                  stamp + "-----------------------  ---------------", stamp + f"Iteration                    {itr}",
                  stamp + f"AverageReturn            {-1000 + 10 * itr}", stamp + "Entropy                      2.83788",
                  stamp + "-----------------------  ---------------"]
    path = tmp_path / "debug.log"
    path.write_text("\n".join(lines) + "\n")
    ret = _series(path, "averagereturn")
    assert list(ret.index) == list(range(12)) and ret[0] == -1000 and ret[11] == -890


def test_a_notebooks_longest_cell_is_read_on_its_own_when_it_holds_more(tmp_path):
    # an earlier cell's ``Episode: 1/50, Score: 28`` lines set the format of the whole output text;
    # the training cell's Stable-Baselines tables are the log
    import json

    first = "".join(f"Episode: {i}/50, Score: {20 + i}, Epsilon: 0.9\n" for i in range(1, 51))
    boxes = []
    for i in range(1, 121):
        boxes += ["----------------------------------", "| rollout/            |          |",
                  f"|    ep_rew_mean      | {20 + i % 40:<8} |", "| time/               |          |",
                  f"|    total_timesteps  | {i * 256:<8} |", "| train/              |          |",
                  f"|    loss             | {1 / i:<8.4f} |", "----------------------------------"]
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout", "text": first}]},
                    {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                                       "text": "\n".join(boxes) + "\n"}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "dqn.ipynb"
    path.write_text(json.dumps(nb))
    parsed = parse_file(path)
    assert parsed.format == "notebook/key-value-boxes"
    rows = parsed.rows.to_frame()
    assert rows[rows.metric == "rollout/ep_rew_mean"].step.nunique() == 120


def test_a_keras_log_with_its_bar_erased_by_backspaces_is_text(tmp_path):
    # blind54: Keras' console output captured with the terminal's backspaces (a fifth of the bytes):
    # each bar is erased with backspaces and drawn again; the last drawing is the line
    erase = "\b" * 120
    text = "".join(f"Epoch {e}/30\n\r1/1 [====] - ETA: 0s - loss: {1 / e:.4f} - mse: {1 / e:.4f}{erase}"
                   f"\r1/1 [====] - 0s 40ms/step - loss: {1 / e:.4f} - mse: {1 / e:.4f} - val_loss: {2 / e:.4f}\n"
                   for e in range(1, 31))
    path = tmp_path / "fit.log"
    path.write_bytes(text.encode())
    val = _series(path, "val_loss")
    assert list(val.index) == list(range(1, 31)) and val[4] == 0.5
