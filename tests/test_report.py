"""The HTML post-mortem: self-contained, findings with evidence, proxy overlay and recipe, CLI."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "dashboard"))
from synthetic_runs import grid_row, write_demo_dir, write_grid, write_run_log  # noqa: E402

from moeproxy.cli import main
from moeproxy.demo import load_demo
from moeproxy.errors import InputError, NotFound
from moeproxy.report import render_report, write_report
from moeproxy.store import Store


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    load_demo(store, write_demo_dir(tmp_path / "demo"))
    return store


def test_report_is_self_contained_with_findings(store):
    html = render_report(store, "demo-full")
    assert html.startswith("<!DOCTYPE html>")
    assert "<script src=" not in html and "<script src=\x27" not in html  # plotly.js inlined: opens offline
    assert html.count("Plotly.newPlot") == 2  # triage panels + per-layer heatmap
    assert "routing_entropy fell from" in html  # evidence sentence
    assert "routing_collapse" in html


def test_report_with_proxy_has_overlay_card_and_recipe(store, tmp_path):
    recipe = {"family": "qwen3_moe", "experts_before": 32, "experts_after": 8, "spec": {"keep_ratio": 0.25}}
    html = render_report(store, "demo-full", "demo-proxy", proxy_report=recipe)
    assert html.count("Plotly.newPlot") == 3
    assert "Fidelity card" in html and "verdict match" in html
    assert "Proxy recipe" in html and "experts_after" in html
    with pytest.raises(InputError, match="the run itself"):
        render_report(store, "demo-full", "demo-full")


def test_store_text_is_escaped(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    from moeproxy.ingest import ingest_paths

    ingest_paths(store, [write_run_log(tmp_path / "x.jsonl", steps=60, fault_step=None)], run="<script>x</script>")
    html = render_report(store, "<script>x</script>")
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


def test_cli_writes_the_report(store, tmp_path, capsys):
    (tmp_path / "proxy_report.json").write_text(json.dumps({"family": "qwen3_moe", "experts_after": 8}))
    target = tmp_path / "out" / "pm.html"
    rc = main(["report", "demo-full", "--proxy", "demo-proxy", "--proxy-report", str(tmp_path / "proxy_report.json"),
               "-o", str(target), "--db", str(store.path)])
    assert rc == 0 and target.exists() and "wrote" in capsys.readouterr().out
    assert main(["report", "nope", "-o", str(target), "--db", str(store.path)]) == 2
    assert "no run named 'nope'" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"\.html"):
        write_report(store, "demo-full", tmp_path / "pm.pdf")
    with pytest.raises(NotFound):
        render_report(store, "demo-full", "missing-proxy")


def test_cli_report_with_a_grid_shows_its_table_marked_and_its_heat_map(store, tmp_path, capsys):
    grid = write_grid(tmp_path / "grid" / "results.json")
    target = tmp_path / "pm.html"
    assert main(["report", "demo-full", "--grid", str(grid), "-o", str(target), "--db", str(store.path)]) == 0
    html = target.read_text()
    assert "<h2>Fidelity grid</h2>" in html and html.count("Plotly.newPlot") == 3  # triage, heatmap, grid
    for level, text, colour in (("all", "✓ 2/2", "#c8e6c9"), ("some", "◐ 1/2", "#ffe0b2"), ("none", "✗ 0/2", "#ffcdd2")):
        assert re.search(f'<td class="match-{level}" style="[^"]*background:{colour}[^"]*">{text}</td>', html), level
    assert "+0.90 (ceiling +1.00)" in html
    # a bad grid is one line naming the file, and no report is written
    bad = write_grid(tmp_path / "bad.json", [dict(grid_row("<s>", "cluster", 0.25, 0, "h", "h"), seed="0")])
    assert main(["report", "demo-full", "--grid", str(bad), "-o", str(tmp_path / "bad.html"),
                 "--db", str(store.path)]) == 2
    assert "bad.json: row 1: seed is string" in capsys.readouterr().err and not (tmp_path / "bad.html").exists()
    # names from the grid file are text
    hostile = write_grid(tmp_path / "hostile.json", [grid_row("<script>x</script>", "cluster", 0.25, 0, "h", "h")])
    assert "<script>x</script>" not in render_report(store, "demo-full", grid=json.loads(hostile.read_text()))
