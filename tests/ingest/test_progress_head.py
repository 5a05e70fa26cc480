"""A console capture that opens with thousands of progress-bar redraws (``\\r``) before its first
metrics line is still recognised: detection looks past the bars."""

from __future__ import annotations

from moeproxy.ingest import parse_file
from moeproxy.ingest.source import HEAD_BYTES


def _bars(n: int) -> str:
    return "".join(f"  1%|▏         | {i}/1875 [{i // 60:02d}:{i % 60:02d}<35:17:45, 68.65s/it]\r"
                   for i in range(n))


def test_printed_dicts_after_a_long_run_of_bar_redraws(tmp_path):
    bars = _bars(2000)
    assert len(bars.encode()) > HEAD_BYTES  # the first record lies beyond the usual head
    dicts = "".join(f"{{'loss': {0.1 * i:.1f}, 'grad_norm': {1.0 + i}, 'reward': 0.5, 'epoch': {i / 100}}}\n"
                    for i in range(1, 11))
    log = tmp_path / "console.log"
    log.write_text(bars + "\n" + dicts)
    parsed = parse_file(log)
    assert parsed.format == "printed-dicts"
    grad = parsed.frame[parsed.frame.metric == "grad_norm"]["value"].tolist()
    assert grad == [float(1 + i) for i in range(1, 11)]


def test_a_bar_that_carries_metrics_is_a_record_not_a_redraw(tmp_path):
    log = tmp_path / "bar.log"
    log.write_text(_bars(2000) + "".join(
        f"Epoch 1: {i}%|#   | {i}/100 [00:{i:02d}<01:40, 1.2it/s, loss={3.0 - 0.01 * i:.2f}]\n"
        for i in range(1, 30)))
    parsed = parse_file(log)
    loss = parsed.frame[parsed.frame.metric == "loss"]
    # (Lightning's "Epoch 1" is the second epoch: its batches run on from the first's 100)
    assert len(loss) == 29 and loss["step"].min() == 101


def test_a_lightning_bar_counts_the_batches_of_the_epoch_it_names(tmp_path):
    # PyTorch Lightning prints its bar per batch, the epoch first: the step runs on across epochs
    lines = [f"Epoch {e}:  {100 * b // 4}%|▉         | {b}/4 [00:0{b}<00:01,  2.17it/s, v_num=11, train_loss={5 - e - b / 10:.3f}]"
             for e in range(3) for b in range(1, 5)]
    path = tmp_path / "lightning.log"
    path.write_text("\n".join(lines) + "\n")
    frame = parse_file(path).frame
    loss = frame[frame["metric"] == "train_loss"]
    assert loss["step"].tolist() == [4 * e + b for e in range(3) for b in range(1, 5)]
    assert loss["value"].tolist()[:2] == [4.9, 4.8] and loss["attempt"].eq(0).all()
