"""Browser: the Runs page shows each run's verdict beside its loss and grad-norm sparklines (issue 12),
in a real Chromium over a dashboard server on a store made here (two runs, one failed with a NaN)."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest
from dashboard_server import browser_page, dashboard_server, sync_api, wait_for_app

from moeproxy.ingest import ingest_paths
from moeproxy.store import Store

pytestmark = pytest.mark.e2e


def _svg(src: str) -> str:
    head, _, data = src.partition(",")
    return base64.b64decode(data).decode() if head.endswith(";base64") else urllib.parse.unquote(data)


@pytest.fixture(scope="module")
def glance_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("glance")
    store = Store(tmp / "runs.duckdb")
    for name, bad in (("steady-run", None), ("<b>nan-run</b>", 60)):
        log = tmp / f"{len(name)}.jsonl"
        log.write_text("".join(json.dumps({"step": s, "loss": float("nan") if bad and s >= bad else 2 - s / 100,
                                           "grad_norm": 1.0 + (s % 3) / 10}) + "\n" for s in range(1, 101)))
        ingest_paths(store, [log], run=name)
        store.save_findings(name, {"verdict": "overflow" if bad else "healthy", "onset_step": bad, "findings": []}, "t")
    with dashboard_server(tmp / "runs.duckdb", tmp) as url:
        yield url


def test_the_runs_page_shows_sparklines_next_to_each_verdict(glance_server):
    with browser_page(height=1400) as page:
        page.goto(f"{glance_server}/runs")
        wait_for_app(page)
        assert page.get_by_test_id("stException").count() == 0
        rows = {}
        for i in range(2):
            row = page.locator(f".st-key-glance_{i}")
            sync_api.expect(row.locator("img")).to_have_count(2)
            name = row.get_by_test_id("stText").inner_text().strip()
            rows[name] = (row.inner_text(), [_svg(img.get_attribute("src")) for img in row.locator("img").all()])
    assert set(rows) == {"steady-run", "<b>nan-run</b>"}  # the hostile name shown as typed, as text
    text, (loss, grad) = rows["<b>nan-run</b>"]
    assert "overflow" in text
    assert ", 41 non-finite" in loss and loss.count("<line") == 41  # steps 60-100 are NaN: each marked
    assert ", 0 non-finite" in grad and grad.count("<line") == 0 and "<polyline" in grad
    text, (loss, grad) = rows["steady-run"]
    assert "healthy" in text and "<line" not in loss and "<polyline" in loss and "<polyline" in grad
