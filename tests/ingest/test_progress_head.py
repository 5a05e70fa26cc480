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
    assert len(loss) == 29 and loss["step"].min() == 1
