"""The last-resort reader: lines repeating one template, with a counter and named numbers. Made-up
logs in shapes no dedicated reader knows; prose, a config and a table of unnamed numbers are not
read as logs."""

from __future__ import annotations

import math

import pytest

from moeproxy.errors import InputError
from moeproxy.ingest import parse_file
from moeproxy.ingest.formats.line_templates import parse_line_templates
from moeproxy.ingest.source import open_source


def _by_metric(parsed):
    return {m: dict(zip(g["step"], g["value"])) for m, g in parsed.frame.groupby("metric", observed=True)}


def test_a_repeated_line_with_a_counter_and_named_numbers(tmp_path):
    log = tmp_path / "train.out"
    lines = ["starting job 7 on 4 nodes"]
    lines += [f">> upd#{u} ~ Loss -> {3.0 - u / 100:.4f} ~ Norm -> {0.5 + u / 1000:.3f} ~ {u * 10} samples" for u in range(1, 13)]
    lines += [">> upd#13 ~ Loss -> nan ~ Norm -> inf ~ 130 samples"]
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "line-templates"
    metrics = _by_metric(parsed)
    # "upd#" numbers the records (the step); the sample count has no word before it: not a metric
    assert set(metrics) == {"loss", "norm"}
    assert metrics["loss"][1] == pytest.approx(2.99) and math.isnan(metrics["loss"][13])
    assert metrics["norm"][13] == math.inf and parsed.skipped_lines == 1


def test_two_record_types_share_the_counter(tmp_path):
    log = tmp_path / "log.txt"
    rows = []
    for s in range(0, 40):
        rows.append(f"[{s:05d}] train_ce={2.0 - s / 100:.3f}")
        if s % 8 == 0:
            rows.append(f"[{s:05d}] heldout_ce={2.1 - s / 100:.3f} (best so far)")
    log.write_text("\n".join(rows) + "\n")
    metrics = _by_metric(parse_file(log, fmt="line-templates"))
    assert len(metrics["train_ce"]) == 40 and sorted(metrics["heldout_ce"]) == [0, 8, 16, 24, 32]


@pytest.mark.parametrize("text", [
    "The quick brown fox jumps over 3 lazy dogs.\nIt was 1999 and then 2001.\n" * 3,
    "".join(f"{i} {i * 2} {i * 3}\n" for i in range(20)).replace(" ", "\t\t"),  # numbers with no names
    "".join(f"option_{i} = {i}\n" for i in range(20)),  # a config: every line its own template
])
def test_prose_configs_and_unnamed_numbers_are_not_logs(tmp_path, text):
    path = tmp_path / "notes.txt"
    path.write_text(text)
    with pytest.raises(InputError, match="notes.txt"):
        _only_templates(path)


def _only_templates(path):
    from moeproxy.ingest.formats.line_templates import parse_line_templates, sniff_line_templates
    from moeproxy.ingest.source import open_source

    if sniff_line_templates(open_source(path)) == 0:
        raise InputError(f"{path}: not a log of repeated lines")
    return parse_line_templates(open_source(path))


def test_a_metric_named_before_its_counter(tmp_path):
    # the deep-learning course's loop prints ``Cost after iteration N: V``: the number after the
    # counter has no word of its own, the words before the counter name it
    log = tmp_path / "course.txt"
    lines = [f"Cost after iteration {i * 500}: {0.7 - 0.01 * i:.6f}" for i in range(12)]
    log.write_text("\n".join(lines[:1] + ["  a warning printed in between"] + lines[1:] + ["Accuracy: 0.91"]) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "line-templates"
    loss = _by_metric(parsed)["cost"]  # (stored as the loss: ``cost`` is one of its aliases)
    assert loss[0] == pytest.approx(0.7) and loss[5500] == pytest.approx(0.59) and len(loss) == 12
    # a loss at a step reads the same; a line whose number after the counter has a word keeps that word
    log.write_text("\n".join(f"loss at step {i}: {1.0 / (i + 1):.4f}" for i in range(8)) + "\n")
    assert {m for m in parse_file(log).frame["metric"]} == {"loss"}
    log.write_text("\n".join(f"Cost after iteration {i}: acc {0.5 + i / 100:.3f}" for i in range(8)) + "\n")
    assert {m for m in parse_file(log).frame["metric"]} == {"acc"}


def test_a_key_of_several_words_before_a_colon_is_the_metric_s_name(tmp_path):
    # ``[  1000] Critic Loss1: ... | Actor Loss: ...``: each field's key, as the text reader names a
    # key (not its last word: ``loss1``, ``loss``), so that a critic's loss is told from an actor's
    log = tmp_path / "out.txt"
    rows = [f"[{s * 1000:6d}] Critic Loss1: {0.01 * s:.4e} | Critic Loss2: {0.02 * s:.4e} | Actor Loss: {-0.1 * s:.4f} "
            f"| KL: {0.2:.4f} | Time: {4.5 * s:.1f}s" for s in range(1, 12)]
    log.write_text("\n".join(rows) + "\n")
    parsed = parse_line_templates(open_source(log))
    metrics = _by_metric(parsed)
    assert {"critic loss1", "critic loss2", "actor loss", "kl", "time"} <= set(metrics), sorted(metrics)
    assert metrics["critic loss2"][3000] == pytest.approx(0.06)
