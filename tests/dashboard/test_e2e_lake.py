"""The dashboard on a DuckLake catalog (issue "Team scale on DuckLake"): the same pages over a store
whose rows are Parquet files and whose catalog is a local ``.ducklake`` file, in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dashboard_server import app_env, browser_page, dashboard_server, sync_api, wait_for_app

from moeproxy.store import lake

if lake.available() is not None:  # no wheels, or wheels of another DuckDB release than this one
    pytest.skip(lake.available(), allow_module_level=True)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_runs_and_triage_read_a_ducklake_catalog(tmp_path, monkeypatch):
    from moeproxy.cli import main

    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    catalog = f"ducklake:{tmp_path / 'team.ducklake'}"
    assert main(["ingest", str(LOGS / "megatron.log"), str(LOGS / "verl_file.jsonl"), "--diagnose",
                 "--db", catalog]) == 0
    assert main(["store", "compact", "--db", catalog]) == 0  # rows as Parquet files, not only inlined
    assert list((tmp_path / "team.ducklake.files").glob("**/*.parquet"))
    with dashboard_server(catalog, tmp_path, app_env()) as url, browser_page() as page:
        page.goto(url)
        wait_for_app(page)
        assert page.get_by_test_id("stException").count() == 0
        sync_api.expect(page.get_by_test_id("stDataFrame")).to_be_visible()
        # the runs table is a canvas grid: its cells are in the page (for screen readers), not "visible"
        page.get_by_text(re.compile("verl_file")).first.wait_for(state="attached")
        page.goto(f"{url}/triage?run=megatron")
        wait_for_app(page)
        assert page.get_by_test_id("stException").count() == 0, page.get_by_test_id("stException").first.inner_text()
        chart = page.locator(".st-key-triage_chart .js-plotly-plot")
        sync_api.expect(chart).to_be_visible()
        assert chart.locator(".scatterlayer .trace").count() >= 1
        sync_api.expect(page.locator(".st-key-verdict_banner").get_by_text(re.compile("confidence"))).to_be_visible()
        page.screenshot(path=str(tmp_path / "triage-on-a-catalog.png"))
