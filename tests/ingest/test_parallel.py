"""The two-process Megatron parse gives exactly what the one-process parse gives."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeproxy.ingest.formats.megatron as megatron
from moeproxy.ingest import parse_file
from moeproxy.ingest.source import open_source


def _log(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _iteration(it, rank=0, loss="2.0E+00", extra=""):
    return (f"[default{rank}]: iteration {it:6d}/ 1000 | consumed samples: {it * 8} | lm loss: {loss} | "
            f"loss scale: 1.0 | grad norm: {1.0 + it / 100:.3f} |{extra}")


def _both(path, monkeypatch):
    monkeypatch.setattr(megatron, "PARALLEL_MIN_BYTES", 0)
    assert megatron._parallel_scan(open_source(path)) is not None  # the parallel path really runs
    parallel = parse_file(path)
    monkeypatch.setattr(megatron, "PARALLEL_MIN_BYTES", 1 << 60)
    sequential = parse_file(path)
    return parallel, sequential


@pytest.mark.parametrize("case", ["plain", "ranks_restart_layouts", "overflow_at_the_cut"])
def test_parallel_parse_equals_sequential(case, tmp_path, monkeypatch):
    if case == "plain":
        lines = [_iteration(it) for it in range(1, 401)]
    elif case == "ranks_restart_layouts":
        lines = [_iteration(it, rank=it % 2) for it in range(1, 201)]
        lines += ["some prose between records", _iteration(150, loss="INF"), _iteration(151, loss="nan")]
        lines += [_iteration(it, extra=" number of skipped iterations:   1 |") for it in range(152, 260)]
        lines += ["[default0]: iteration    260/ 1000 | lm loss: not-a-number | grad norm: 2.0 |"]
    else:  # DeepSpeed OVERFLOW lines right where the file is cut: their step comes from the part before
        lines = [_iteration(it) for it in range(1, 151)]
        lines += ["[default0]: [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"] * 200
        lines += [_iteration(it) for it in range(351, 501)]
    path = _log(tmp_path / f"{case}.log", lines)
    if case == "overflow_at_the_cut":
        src = open_source(path)
        cut = src.line_boundary(int(src.size * (1 - megatron.CHILD_SHARE)))
        assert megatron._scan_range(src, cut, src.size, None).needs_last_step  # the case is really hit
    parallel, sequential = _both(path, monkeypatch)
    pd.testing.assert_frame_equal(parallel.frame, sequential.frame)
    assert (parallel.skipped_lines, parallel.framework, parallel.sha256) == \
        (sequential.skipped_lines, sequential.framework, sequential.sha256)


def test_no_fork_while_other_threads_run(tmp_path, monkeypatch):
    import threading

    path = _log(tmp_path / "m.log", [_iteration(it) for it in range(1, 50)])
    monkeypatch.setattr(megatron, "PARALLEL_MIN_BYTES", 0)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert megatron._parallel_scan(open_source(path)) is None
    finally:
        stop.set()
        worker.join()


def test_unbracketed_rank_tags_are_read_per_line(tmp_path):
    path = _log(tmp_path / "ranks.log", [f"rank{r}: iteration {it:4d}/ 100 | lm loss: 2.0 | grad norm: 1.0 |"
                                         for it in range(1, 4) for r in (0, 1)])
    frame = parse_file(path).frame
    assert sorted(frame["rank"].unique()) == [0, 1]
    assert len(frame[(frame["rank"] == 1) & (frame["metric"] == "lm loss")]) == 3


_HEAD_TOKENS = ["iteration", "iterations", " ", "  ", "\t", "12", "0", "/", "|", "x", "_", "[default0]:", ":", "\r",
                "٣", "lm loss: 1.0 |", "\n"]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_HEAD_TOKENS), max_size=12).map("".join))
def test_iteration_head_agrees_with_the_regex(line):
    at = line.find("iteration")
    if at < 0:
        return
    m = megatron.ITERATION.search(line, at)
    expected = (int(m.group(1)), m.group(2)) if m else None
    assert megatron._iteration_head(line, at) == expected


def test_crash_padding_keeps_the_files_own_hash_and_its_warning_on_both_paths(tmp_path, monkeypatch):
    import hashlib

    lines = [_iteration(it) for it in range(1, 301)]
    path = tmp_path / "padded.log"
    path.write_bytes(("\n".join(lines[:250]) + "\n").encode() + b"\0" * 64 + ("\n".join(lines[250:]) + "\n").encode())
    real = hashlib.sha256(path.read_bytes()).hexdigest()
    parallel, sequential = _both(path, monkeypatch)
    for parsed in (parallel, sequential):
        assert parsed.sha256 == real  # duplicates are found by the file's bytes, NULs included
        assert sum("NUL byte(s)" in w for w in parsed.warnings) == 1, parsed.warnings
    pd.testing.assert_frame_equal(parallel.frame, sequential.frame)
