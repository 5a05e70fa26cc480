"""Browser tests (Chromium) for what makes triage trustworthy at a glance: a shared link reproduces
the view in a fresh browser, the healthy band of unrelated runs leaves a run's axis alone, `/runs`
opens the Runs page, a click on a run opens it in Triage, nothing is requested from outside the
machine, and a watched run that turns to inf raises one alert that every page shows (how soon is
measured by ``bench/watch.py``, not asserted here: a timed assertion fails on a loaded machine)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlparse

import pytest
from dashboard_server import app_env, box_select_on_triage, browser_page, dashboard_server, sync_api, wait_for_app
from synthetic_runs import write_run_log

from moeproxy.diagnose.record import diagnose_and_record
from moeproxy.ingest import ingest_paths
from moeproxy.store import Store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trust")
    db = tmp / "runs.duckdb"
    store = Store(db)
    ingest_paths(store, [write_run_log(tmp / "rl.jsonl", steps=300, fault_step=200, seed=1)], run="rl-run")
    diagnose_and_record(store, "rl-run")
    empty_demo = tmp / "no-demo"
    empty_demo.mkdir()
    env = app_env(MOEPROXY_DEMO_DIR=str(empty_demo), MOEPROXY_JOBS=str(tmp / "jobs"),
                  MOEPROXY_ALLOWED_ROOTS=str(tmp))
    with dashboard_server(db, tmp, env) as url:
        yield {"url": url, "db": db, "tmp": tmp}


def outside_requests(page, url: str) -> list[str]:
    """Every request the page makes to anything but the dashboard's own server (blocked, recorded)."""
    own = urlparse(url).netloc
    seen: list[str] = []

    def route(r):
        target = urlparse(r.request.url)
        if target.scheme in ("data", "blob") or target.netloc == own:
            r.continue_()
        else:
            seen.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return seen


def y_range(page) -> list[float]:
    spec = page.evaluate("() => document.querySelector('.st-key-triage_chart .js-plotly-plot').layout.yaxis2.range")
    return [float(v) for v in spec]


def test_a_shared_link_reproduces_run_metrics_and_zoom_in_a_fresh_browser(served):
    url = served["url"]
    with browser_page(1440, 1900) as page:
        page.goto(f"{url}/triage?run=rl-run")
        wait_for_app(page)
        page.get_by_test_id("stMultiSelect").filter(has_text="Metrics (type to search").locator("input").fill("reward_mean")
        page.get_by_role("option", name="reward_mean", exact=True).click()
        page.keyboard.press("Escape")  # close the drop-down
        wait_for_app(page)
        box_select_on_triage(page, 0.5, 0.8)
        page.wait_for_timeout(500)
        shared = page.url
    query = parse_qs(urlparse(shared).query)
    assert query["run"] == ["rl-run"] and "reward_mean" in query["metrics"][0] and re.fullmatch(r"\d+-\d+", query["zoom"][0])
    lo, hi = map(int, query["zoom"][0].split("-"))
    with browser_page(1440, 900) as fresh:  # another browser: no session state, only the link
        fresh.goto(shared)
        wait_for_app(fresh)
        sync_api.expect(fresh.locator(".st-key-triage_run")).to_match_aria_snapshot('- combobox "Run": rl-run')
        sync_api.expect(fresh.get_by_text(f"steps {lo:,} - {hi:,}")).to_be_visible()
        titles = fresh.evaluate("() => document.querySelector('.st-key-triage_chart .js-plotly-plot')"
                                ".layout.annotations.filter(a => a.name === 'panel title').map(a => a.text)")
        assert any("reward_mean" in t for t in titles)


def test_an_unrelated_healthy_run_leaves_the_axis_alone_and_runs_opens_and_clicks_open_triage(served):
    url, store, tmp = served["url"], Store(served["db"]), served["tmp"]
    with browser_page(1440, 900) as page:
        page.goto(f"{url}/triage?run=rl-run&metrics=grad_norm,loss")
        wait_for_app(page)
        before = y_range(page)
        # three healthy pretraining logs (another framework and kind, a loss around 10) enter the store:
        # enough for a band, and none of them comparable to an RL run
        for k in range(3):
            log = tmp / f"pretrain-{k}.log"
            log.write_text("".join(f" iteration {i}/ 1000 | lm loss: {10.5 - i / 100 + k / 10:.4f} | grad norm: 1.2 | "
                                   f"loss scale: 1.0 |\n" for i in range(1, 300)))
            ingest_paths(store, [log], run=f"pretrain-{k}")
            assert diagnose_and_record(store, f"pretrain-{k}")["verdict"] == "healthy"
        page.reload()
        wait_for_app(page)
        assert y_range(page) == pytest.approx(before)
        sync_api.expect(page.locator(".st-key-triage_chart").get_by_text("healthy runs 5-95 %")).to_have_count(0)

        page.goto(f"{url}/runs")  # a kept link to /runs opens the Runs page, no "Page not found"
        wait_for_app(page)
        sync_api.expect(page.get_by_text("Page not found")).to_have_count(0)
        grid = page.get_by_test_id("stDataFrame")
        sync_api.expect(grid).to_be_visible()
        grid.locator("[role=gridcell]", has_text="pretrain-0").first.wait_for(state="attached")
        table = grid.bounding_box()
        page.mouse.click(table["x"] + 15, table["y"] + 35 * 2 + 17)  # row 2 (pretrain-0): its selection box
        page.wait_for_url(re.compile(r"/triage\?run=pretrain-0"))
        wait_for_app(page)
        sync_api.expect(page.locator(".st-key-triage_run")).to_match_aria_snapshot('- combobox "Run": pretrain-0')


def test_no_page_requests_anything_from_outside_the_machine(served):
    url = served["url"]
    with browser_page(1440, 900) as page:
        seen = outside_requests(page, url)
        for path in ("", "triage", "compare", "proxy", "report"):
            page.goto(f"{url}/{path}")
            wait_for_app(page)
            page.wait_for_timeout(800)
        assert seen == [], seen
        icon = page.evaluate("() => [...document.querySelectorAll('link[rel~=icon]')].map(l => l.href)")
        assert icon and all(urlparse(h).netloc == urlparse(url).netloc or h.startswith("data:") for h in icon)


WRITER = r"""
import json, sys, time
path, last = sys.argv[1], int(sys.argv[2])
with open(path, "a") as fh:
    for step in range(1, last + 1):
        bad = step >= 150
        fh.write(json.dumps({"step": step, "loss": float("inf") if bad else 2.0 - step / 1000,
                             "grad_norm": float("inf") if bad else 1.0 + (step % 5) / 10}) + "\n")
        fh.flush()
        if step == 150:
            open(path + ".marker", "w").write(repr(time.time()))
        time.sleep(0.02 if step < 140 else 0.1)
"""


def test_a_run_turning_to_inf_raises_one_alert_shown_on_the_open_page(served):
    tmp, db, url = served["tmp"], served["db"], served["url"]
    log = tmp / "live" / "train.jsonl"
    log.parent.mkdir()
    log.touch()
    alerts = tmp / "alerts.jsonl"
    watcher = subprocess.Popen([sys.executable, "-m", "moeproxy", "watch", str(log), "--run", "inf-run", "--db", str(db),
                                "--alerts", str(alerts), "--interval", "0.2"], env=app_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    writer = None
    try:
        with browser_page(1440, 900) as page:
            page.goto(f"{url}/compare")  # any page: the alert is in the sidebar of every one
            wait_for_app(page)
            writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "220"])
            marker = log.with_name("train.jsonl.marker")
            link = page.locator(".st-key-live_alerts").get_by_text(re.compile(r"inf-run: overflow from step 150"))
            try:
                link.wait_for(timeout=60_000)
            except sync_api.TimeoutError:  # say what there was instead
                shown_text = page.locator(".st-key-live_alerts").all_inner_texts()
                written = alerts.read_text() if alerts.exists() else "(no alerts file)"
                pytest.fail(f"no alert shown; sidebar: {shown_text!r}; alerts file: {written[:2000]!r}; "
                            f"watcher running: {watcher.poll() is None}")
            print(f"alert shown {time.time() - float(marker.read_text()):.2f} s after the inf was written")
            sync_api.expect(page).to_have_title(re.compile(r"\(1\) alert"))
            writer.wait(timeout=60)
            time.sleep(3)  # the watcher diagnoses the rest: inf and its consequences
        lines = [json.loads(line) for line in alerts.read_text().splitlines()]
        assert [(a["verdict"], a["onset_step"]) for a in lines] == [("overflow", 150)]
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
        watcher.terminate()
        watcher.wait(timeout=30)
