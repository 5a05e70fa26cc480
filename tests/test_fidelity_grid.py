"""A fidelity grid's results.json read back: checked loading (bad files named, with what is wrong),
the per scenario x arm summary against the replica's ceiling, its table and heat map."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "dashboard"))
from synthetic_runs import grid_row, grid_rows, write_grid  # noqa: E402

from moeproxy.errors import InputError
from moeproxy.fidelity_grid import (arm_label, grid_markdown, grid_rows as table_rows, grid_table_html, load_grid,
                                    summarise_grid, write_grid_figure)
from moeproxy.figures import fidelity_grid_figure

REPO = Path(__file__).resolve().parents[1]


def test_a_grid_is_summarised_per_scenario_and_arm_against_the_replica(tmp_path):
    cells = summarise_grid(load_grid(write_grid(tmp_path / "results.json")))
    assert [(c.scenario, c.arm) for c in cells] == [
        ("overflow", "cluster 1/4"), ("overflow", "random 1/4"), ("overflow", "replica"),
        ("routing_collapse", "cluster 1/4"), ("routing_collapse", "random 1/4"), ("routing_collapse", "replica")]
    cluster, random, replica = cells[:3]
    assert (cluster.matches, cluster.pairs, cluster.match_level) == (2, 2, "all")
    assert cluster.onset_gap_mean == pytest.approx(0.1) and cluster.onset_gap_max == pytest.approx(0.1)
    assert cluster.r == pytest.approx({"grad_norm": 0.5, "loss": 0.6, "reward": 0.9})
    assert cluster.ceiling == pytest.approx({"grad_norm": 0.7, "loss": 0.8, "reward": 1.0})  # the replica's
    assert cluster.agreement == pytest.approx(2.0 / 3) and cluster.ceiling_agreement == pytest.approx(2.5 / 3)
    assert cluster.step_time_ratio == pytest.approx(0.5) and cluster.model_state_ratio == pytest.approx(0.25)
    assert (random.matches, random.match_level, random.verdicts_proxy) == (1, "some", {"overflow": 1, "divergence": 1})
    assert random.onset_gap_max == pytest.approx(0.5) and random.step_time_ratio == pytest.approx(1.1)
    assert replica.ratio is None and replica.ceiling is None
    collapse_random = cells[4]
    assert collapse_random.match_level == "none" and collapse_random.onset_gap_mean is None  # no proxy onset
    assert collapse_random.ceiling["grad_norm"] == pytest.approx(0.6)


def test_the_table_marks_matches_and_shows_the_ceiling(tmp_path):
    rows = table_rows(summarise_grid(grid_rows()))
    first = rows[0]
    assert first["verdict match"] == "✓ 2/2" and first["match_level"] == "all"
    assert first["onset gap mean/max"] == "10%/10%"
    assert first["r reward"] == "+0.90 (ceiling +1.00)" and first["step time proxy/full"] == "0.50"
    assert rows[1]["verdict match"] == "◐ 1/2" and rows[4]["verdict match"] == "✗ 0/2"
    assert rows[2]["r reward"] == "+1.00"  # the replica is its own ceiling: no "(ceiling ...)"
    text = grid_markdown(summarise_grid(grid_rows()))
    assert text.splitlines()[0].startswith("| scenario | arm | seeds | verdict match |")
    assert len(text.splitlines()) == 2 + 6 and "match_level" not in text


def test_without_a_replica_there_is_no_ceiling_and_ratios_are_labelled():
    cells = summarise_grid([grid_row("healthy", "cluster", 0.125, 0, "healthy", "healthy"),
                            grid_row("healthy", "dense", 0.3, 0, "healthy", "healthy", r=(None, float("nan"), 0.2))])
    assert [c.arm for c in cells] == ["cluster 1/8", "dense 0.3"] and all(c.ceiling is None for c in cells)
    assert cells[1].r == {"grad_norm": None, "loss": None, "reward": pytest.approx(0.2)}  # NaN is no r
    assert "ceiling" not in table_rows(cells)[0]["r loss"]
    assert arm_label("cluster", 0.5) == "cluster 1/2" and arm_label("random", 1.0) == "random 1"


def test_the_real_50m_grid_loads():
    cells = summarise_grid(load_grid(REPO / "bench" / "results" / "fidelity50m" / "results.json"))
    assert cells and all(c.pairs >= 1 for c in cells)


@pytest.mark.parametrize("content, message", [
    (b"{not json", "invalid JSON at line 1"),
    (b"\xff\xfe", "not UTF-8"),
    (json.dumps({"full": {}}).encode(), "holds a JSON object, not a list of grid rows (pass results.json"),
    (b"[]", "no rows"),
    (json.dumps([1]).encode(), "row 1: a JSON integer, not a row object"),
    (json.dumps([{k: v for k, v in grid_row("a", "cluster", 0.25, 0, "healthy", "healthy").items()
                  if k not in ("verdict_match", "r_loss")}]).encode(), "row 1: no verdict_match, r_loss"),
    (json.dumps([grid_row("a", "cluster", 0.25, 0, "h", "h"), dict(grid_row("a", "cluster", 0.25, 1, "h", "h"),
                                                                   verdict_match="yes")]).encode(),
     "row 2: verdict_match is string 'yes', expected boolean"),
    (json.dumps([dict(grid_row("a", "cluster", 0.25, 0, "h", "h"), seed=True)]).encode(), "seed is boolean"),
    (json.dumps([dict(grid_row("a", "cluster", 0.25, 0, "h", "h"), ratio=4)]).encode(), "ratio 4 is not a keep ratio"),
    (json.dumps([dict(grid_row("a", "cluster", 0.25, 0, "h", "h"), scenario="")]).encode(), "must not be empty"),
    (json.dumps([grid_row("a", "cluster", 0.25, 0, "h", "h")] * 2).encode(), "row 2 repeats row 1"),
])
def test_a_bad_grid_file_is_named_with_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "results.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match="grid file") as caught:
        load_grid(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_a_missing_file_directory_or_fifo_is_refused_without_blocking(tmp_path):
    with pytest.raises(InputError, match="No such file"):
        load_grid(tmp_path / "absent.json")
    with pytest.raises(InputError, match="a directory"):
        load_grid(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="not a regular file"):
        load_grid(tmp_path / "fifo")


def test_the_heat_map_and_its_file(tmp_path):
    cells = summarise_grid(grid_rows())
    fig = fidelity_grid_figure(cells)
    heat = fig.data[0]
    assert heat.type == "heatmap" and list(heat.x) == ["cluster 1/4", "random 1/4", "replica"]
    assert list(heat.y) == ["overflow", "routing_collapse"]
    assert [list(row) for row in heat.z] == [[1.0, 0.5, 1.0], [1.0, 0.0, 1.0]]
    assert heat.text[1][1] == "0/2" and "replica +0.83" in heat.hovertext[0][0]
    written, note = write_grid_figure(cells, tmp_path)
    assert written and all(p.is_file() and p.stat().st_size > 0 for p in written)
    if written[0].suffix == ".html":  # no static export here: a standalone page that says so
        assert "kaleido" in note and "Plotly.newPlot" in written[0].read_text()
    else:
        assert {p.suffix for p in written} == {".png", ".svg"}


def test_hostile_names_are_text_in_the_figure_and_the_html_table():
    cells = summarise_grid([grid_row("<b>x</b>", "cluster", 0.25, 0, "healthy", "healthy"),
                            grid_row("<b>x</b>", "random", 0.25, 0, "healthy", "overflow")])
    fig = fidelity_grid_figure(cells)
    assert list(fig.data[0].y) == ["&lt;b&gt;x&lt;/b&gt;"] and "<b>" not in fig.data[0].hovertext[0][0]
    table = grid_table_html(cells)
    assert "<b>" not in table and table.count("&lt;b&gt;x&lt;/b&gt;") == 2
    assert table.count('class="match-all"') == 1 and table.count('class="match-none"') == 1
    assert table.count("<tr>") == 3 and "<th" in table
