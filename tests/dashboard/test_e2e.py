"""Browser end-to-end: `moeproxy dashboard` in a real Chromium (Debian's /usr/bin/chromium) via Playwright.

One server per module on a free port over a fresh store; the app loads the demo runs (the bundled
data/demo/ when present, else synthetic demo logs), and the test walks every page: the demo run's
charts and finding render, Compare overlays the proxy, a proxy build of the tiny checkpoint runs
to the end as a background job, the report can be downloaded. Screenshots of each page go to
artifacts/screenshots/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from dashboard_server import REPO, app_env, box_select_on_triage, browser_page, dashboard_server, sync_api, wait_for_app

from moeproxy.demo import DEMO_DIR, demo_runs
from moeproxy.diagnose import CATEGORIES

pytestmark = pytest.mark.e2e
SHOTS = REPO / "artifacts" / "screenshots"
SERVER: dict = {}  # what the server fixture started: its database


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    extra = {}
    if DEMO_DIR.is_dir() and demo_runs(DEMO_DIR):  # the bundled demo (a copy: it may be regenerated meanwhile)
        extra["MOEPROXY_DEMO_DIR"] = str(shutil.copytree(DEMO_DIR, tmp / "demo", ignore=shutil.ignore_patterns(".*")))
    else:  # synthetic demo logs
        from synthetic_runs import write_demo_dir

        extra["MOEPROXY_DEMO_DIR"] = str(write_demo_dir(tmp / "demo"))
    extra["MOEPROXY_JOBS"] = str(tmp / "jobs")
    extra["MOEPROXY_ALLOWED_ROOTS"] = f"{tmp}{os.pathsep}{REPO / 'data'}"
    SERVER["db"] = tmp / "runs.duckdb"
    with dashboard_server(SERVER["db"], tmp, app_env(**extra)) as url:
        yield url


@pytest.fixture(scope="module")
def page(server):
    with browser_page() as page:
        yield page


def shoot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def open_page(page, server, path: str) -> None:
    page.goto(f"{server}/{path}")
    wait_for_app(page)
    assert page.get_by_test_id("stException").count() == 0, page.get_by_test_id("stException").first.inner_text()


def test_runs_triage_compare(page, server):
    open_page(page, server, "")  # Runs is the default page, served at /
    sync_api.expect(page.get_by_test_id("stDataFrame")).to_be_visible()  # the runs table (a canvas grid)
    verdicts = re.compile("|".join(CATEGORIES))
    glance = page.locator(".st-key-glance_0")  # the first run's row "at a glance": its verdict badge
    sync_api.expect(glance.get_by_test_id("stMarkdownContainer").filter(has_text=verdicts)).to_be_visible()
    shoot(page, "01-runs")

    open_page(page, server, "triage")
    chart = page.locator(".st-key-triage_chart .js-plotly-plot")
    sync_api.expect(chart).to_be_visible()
    assert chart.locator(".scatterlayer .trace").count() >= 3  # grad_norm, loss, routing_entropy (+ markers)
    banner = page.locator(".st-key-verdict_banner")  # the answer first: above the fold, before the chart
    sync_api.expect(banner.get_by_text(re.compile("confidence"))).to_be_visible()
    assert banner.bounding_box()["y"] + banner.bounding_box()["height"] < 900
    assert banner.bounding_box()["y"] < chart.bounding_box()["y"]
    shoot(page, "02-triage")
    routed = next((r.name for r in demo_runs(DEMO_DIR) if r.name == "overflow-full"), None) \
        if DEMO_DIR.is_dir() and demo_runs(DEMO_DIR) else "demo-full"
    open_page(page, server, f"triage?run={routed}")  # a run with per-layer routing entropy: its heatmap
    sync_api.expect(page.locator(".st-key-triage_heatmap .js-plotly-plot")).to_be_visible()
    chart = page.locator(".st-key-triage_chart .js-plotly-plot")

    box_select_on_triage(page, 0.55, 0.85)  # a step range on the top panel: the page re-queries it
    shoot(page, "03-triage-zoomed")

    open_page(page, server, "compare")
    chart = page.locator(".st-key-compare_chart .js-plotly-plot")
    sync_api.expect(chart).to_be_visible()
    page.locator(".st-key-compare_align").get_by_text("fraction of run").click()
    wait_for_app(page)
    sync_api.expect(page.locator(".st-key-compare_chart").get_by_text("fraction of run")).to_be_visible()
    shoot(page, "04-compare")


def test_proxy_build_and_report(page, server):
    open_page(page, server, "proxy")
    button = page.locator(".st-key-start_build button")
    sync_api.expect(button).to_be_visible()
    shoot(page, "05-proxy-plan")
    button.click()
    wait_for_app(page)
    # the fragment polls every 2 s; the tiny checkpoint builds (and verifies) in well under 3 minutes.
    # Meanwhile the progress text never reads "0/0" (it said "starting 0/0" for 10 s) and each stage
    # counts its own steps (it numbered two log lines "[verify] 5/6")
    done = page.get_by_test_id("stMain").get_by_text("`succeeded`", exact=False).or_(
        page.get_by_test_id("stMain").get_by_text("succeeded")).first
    texts: list[str] = []
    deadline = time.monotonic() + 240
    while not done.is_visible() and time.monotonic() < deadline:
        texts += [t for t in page.get_by_test_id("stProgress").all_inner_texts() if t not in texts[-1:]]
        page.wait_for_timeout(300)
    done.wait_for(timeout=5_000)
    assert texts and not [t for t in texts if re.search(r"\b0/0\b", t)], texts
    counts = [re.search(r"^(.*?) (\d+)/(\d+)$", t.strip()) for t in texts]
    for m in filter(None, counts):
        assert int(m.group(2)) <= int(m.group(3)), texts
    wait_for_app(page)
    sync_api.expect(page.get_by_test_id("stMain").get_by_text("Proxy written to")).to_be_visible()
    shoot(page, "06-proxy-built")

    # reload: the finished job is still there (state in files, not in the browser session)
    page.reload()
    wait_for_app(page)
    sync_api.expect(page.get_by_test_id("stMain").get_by_text("succeeded").first).to_be_visible()

    open_page(page, server, "report")
    sync_api.expect(page.locator(".st-key-report_download button")).to_be_visible()
    shoot(page, "07-report")


def test_hostile_run_names_fetch_nothing(page, server, tmp_path):
    """A run named like a Markdown image or an HTML tag is shown as those characters: the browser
    requests nothing from the URL inside it (the beacon server counts every request)."""
    import http.server
    import threading

    hits = []

    class Beacon(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    beacon = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Beacon)
    threading.Thread(target=beacon.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{beacon.server_address[1]}"
    names = [f"![b]({base}/markdown.png)", f'<img src="{base}/html.png">']
    try:
        from synthetic_runs import write_run_log

        from moeproxy.ingest import ingest_paths
        from moeproxy.store import Store

        for i, name in enumerate(names):
            ingest_paths(Store(SERVER["db"]), [write_run_log(tmp_path / f"h{i}.jsonl", steps=30 + i, fault_step=None)],
                         run=name)
        open_page(page, server, "")
        page.wait_for_timeout(1500)
        assert hits == [], hits
        rows = page.locator("[class*='st-key-glance_'] [data-testid='stText']")
        for name in names:  # in the rows "at a glance", as typed
            sync_api.expect(rows.filter(has_text=name).first).to_have_text(name)
        open_page(page, server, "triage")
        page.wait_for_timeout(1500)
        assert hits == [], hits
    finally:
        beacon.shutdown()


def test_a_watched_run_grows_on_triage_without_a_reload(page, server, tmp_path):
    """A run that `moeproxy watch` follows shows as live on Triage; its chart and 'Last step' grow
    while the page stays open (a fragment re-reads the new steps), drawn over the healthy runs' band."""
    from synthetic_runs import write_run_log

    from moeproxy.diagnose.record import diagnose_and_record
    from moeproxy.ingest import ingest_paths
    from moeproxy.store import Store

    store = Store(SERVER["db"])
    for i in range(3):  # healthy history for the band (three comparable runs: the same framework and kind)
        name = f"healthy-{i}"
        ingest_paths(store, [write_run_log(tmp_path / f"{name}.jsonl", steps=300, fault_step=None, seed=10 + i)],
                     run=name)
        assert diagnose_and_record(store, name)["verdict"] == "healthy"
    records = write_run_log(tmp_path / "all.jsonl", steps=300, fault_step=None, seed=3).read_text().splitlines()
    log = tmp_path / "growing" / "train.jsonl"
    log.parent.mkdir()
    log.write_text("\n".join(records[:60]) + "\n")
    watcher = subprocess.Popen([sys.executable, "-m", "moeproxy", "watch", str(log), "--run", "live-run",
                                "--db", str(SERVER["db"]), "--interval", "0.5"], env=app_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "live-run" not in _runs_now(store):
            assert time.monotonic() < deadline and watcher.poll() is None, "the watcher stored nothing"
            time.sleep(0.5)
        open_page(page, server, "triage")
        page.locator(".st-key-triage_run").click()
        page.get_by_role("option", name="live-run").click()
        wait_for_app(page)
        main = page.get_by_test_id("stMain")
        sync_api.expect(main.get_by_text("a watcher is adding steps to this run")).to_be_visible()
        chart = page.locator(".st-key-triage_chart .js-plotly-plot")
        sync_api.expect(chart.get_by_text("healthy runs 5-95 %").first).to_be_visible()
        sync_api.expect(main.get_by_text(re.compile(r"Last step 60\b"))).to_be_visible()
        shoot(page, "08-triage-live-before")
        with open(log, "a") as fh:  # the job logs on; the page is not reloaded
            fh.write("\n".join(records[60:200]) + "\n")
        sync_api.expect(main.get_by_text(re.compile(r"Last step 200\b"))).to_be_visible(timeout=60_000)
        sync_api.expect(chart.get_by_text("healthy runs 5-95 %").first).to_be_visible()
        shoot(page, "09-triage-live-after")

        # the Runs page marks the run live (the grid's accessible cells carry the table's text)
        open_page(page, server, "")
        grid = page.get_by_test_id("stDataFrame")
        sync_api.expect(grid.locator("[role=gridcell]", has_text="live-run").first).to_be_attached()
        texts = grid.locator("[role=gridcell]").all_inner_texts()
        at = texts.index("live-run")
        assert texts[at + 1] == "live", texts[at:at + 12]
        assert "healthy-0" in texts and texts[texts.index("healthy-0") + 1] == ""  # not watched
        shoot(page, "10-runs-live")
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)


def _runs_now(store) -> list[str]:
    try:
        return store.runs()["run"].tolist()
    except Exception:  # the watcher holds the file for a moment: ask again
        return []
