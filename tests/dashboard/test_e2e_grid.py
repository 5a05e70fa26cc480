"""Browser test (Chromium): the Compare page shows the fidelity grid that `moeproxy dashboard --grid
FILE` names: the table with its verdict-match cells marked (symbol and colour) and the curves beside
the replica's ceiling, and the verdict-match heat map drawn by plotly."""

from __future__ import annotations

import pytest
from dashboard_server import app_env, browser_page, dashboard_server, sync_api, wait_for_app
from synthetic_runs import write_grid, write_run_log

from moeproxy.ingest import ingest_paths
from moeproxy.store import Store

pytestmark = pytest.mark.e2e


def test_compare_shows_the_fidelity_grid_table_and_heat_map(tmp_path):
    db = tmp_path / "runs.duckdb"
    store = Store(db)
    ingest_paths(store, [write_run_log(tmp_path / "full.jsonl", steps=120, fault_step=80, seed=1)], run="full-run",
                 role="full")
    ingest_paths(store, [write_run_log(tmp_path / "proxy.jsonl", steps=120, fault_step=82, seed=2)], run="proxy-run",
                 role="proxy", proxy_of="full-run")
    grid = write_grid(tmp_path / "grid" / "results.json")
    (tmp_path / "no-demo").mkdir()
    env = app_env(MOEPROXY_DEMO_DIR=str(tmp_path / "no-demo"), MOEPROXY_JOBS=str(tmp_path / "jobs"),
                  MOEPROXY_ALLOWED_ROOTS=str(tmp_path))
    env.pop("MOEPROXY_GRID", None)
    with dashboard_server(db, tmp_path, env, args=("--grid", str(grid))) as url, browser_page(1440, 1200) as page:
        page.goto(f"{url}/compare")
        wait_for_app(page)
        table = page.locator(".st-key-fidelity_grid_table table")
        table.scroll_into_view_if_needed()
        sync_api.expect(table).to_contain_text("cluster 1/4")
        sync_api.expect(table).to_contain_text("+0.90 (ceiling +1.00)")
        cells = {text: table.locator("td", has_text=text) for text in ("✓ 2/2", "◐ 1/2", "✗ 0/2")}
        backgrounds = {text: cell.first.evaluate("c => getComputedStyle(c).backgroundColor")
                       for text, cell in cells.items()}
        assert backgrounds == {"✓ 2/2": "rgb(200, 230, 201)", "◐ 1/2": "rgb(255, 224, 178)",
                               "✗ 0/2": "rgb(255, 205, 210)"}, backgrounds
        assert table.locator("tbody tr").count() == 6
        chart = page.locator(".st-key-fidelity_grid_chart .js-plotly-plot")
        chart.scroll_into_view_if_needed()
        sync_api.expect(chart.locator(".hm image, .heatmaplayer image").first).to_be_attached()
        data = chart.evaluate("p => ({type: p.data[0].type, x: p.data[0].x, y: p.data[0].y, z: p.data[0].z})")
        assert data["type"] == "heatmap" and data["x"] == ["cluster 1/4", "random 1/4", "replica"]
        assert data["z"] == [[1, 0.5, 1], [1, 0, 1]]
        texts = chart.evaluate("p => [...p.querySelectorAll('text')].map(t => t.textContent)")
        assert "0/2" in texts and "routing_collapse" in texts, texts
