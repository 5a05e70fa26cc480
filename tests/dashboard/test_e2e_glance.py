"""Browser: the Runs page shows each run's verdict beside its loss and grad-norm sparklines (issue 12),
in a real Chromium over a dashboard server on a store made here (two runs, one failed with a NaN)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from test_e2e import CHROMIUM, _free_port, sync_api, wait_for_app  # noqa: F401  (skips without chromium)

from moeproxy.ingest import ingest_paths
from moeproxy.store import Store

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    port = _free_port()
    with open(tmp / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moeproxy", "dashboard", "--db", str(tmp / "runs.duckdb"),
                                 "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"dashboard did not start:\n{(tmp / 'server.log').read_text()[-3000:]}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(15)


def test_the_runs_page_shows_sparklines_next_to_each_verdict(glance_server):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = browser.new_context(viewport={"width": 1400, "height": 1400}).new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{glance_server}/runs")
        wait_for_app(page)
        assert page.get_by_test_id("stException").count() == 0
        rows = {}
        for i in range(2):
            row = page.locator(f".st-key-glance_{i}")
            sync_api.expect(row.locator("img")).to_have_count(2)
            name = row.get_by_test_id("stText").inner_text().strip()
            rows[name] = (row.inner_text(), [_svg(img.get_attribute("src")) for img in row.locator("img").all()])
        browser.close()
    assert set(rows) == {"steady-run", "<b>nan-run</b>"}  # the hostile name shown as typed, as text
    text, (loss, grad) = rows["<b>nan-run</b>"]
    assert "overflow" in text
    assert ", 41 non-finite" in loss and loss.count("<line") == 41  # steps 60-100 are NaN: each marked
    assert ", 0 non-finite" in grad and grad.count("<line") == 0 and "<polyline" in grad
    text, (loss, grad) = rows["steady-run"]
    assert "healthy" in text and "<line" not in loss and "<polyline" in loss and "<polyline" in grad
