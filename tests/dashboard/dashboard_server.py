"""What the browser tests share: Chromium (Debian's /usr/bin/chromium) through Playwright, a
`moeproxy dashboard` server started on a free port over a given store, and Streamlit's readiness
signal. Importing this module skips the importing test module when Chromium or Playwright is missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
if CHROMIUM is None:
    pytest.skip("chromium not found; install the Debian package chromium (make chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
sync_api.expect.set_options(timeout=60_000)  # a loaded 2-core machine reruns slowly
BROWSER_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_env(**extra: str) -> dict:
    """The environment for a server or watcher that must import this checkout's code."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env


@contextmanager
def dashboard_server(db: Path, workdir: Path, env: dict | None = None, args: tuple[str, ...] = ()):
    """``moeproxy dashboard --db DB [ARGS]`` on a free port; yields its URL once healthy, stops it after."""
    port = free_port()
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moeproxy", "dashboard", "--db", str(db), "--port", str(port),
                                 *args],
                                stdout=log, stderr=subprocess.STDOUT, env=env or app_env(), cwd=workdir)
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
            pytest.fail(f"dashboard did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def browser_page(width: int = 1400, height: int = 1900, color_scheme: str | None = None):
    """A page of a fresh Chromium (``color_scheme``: "dark" to open as a dark-mode browser)."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        options = {"color_scheme": color_scheme} if color_scheme else {}
        page = browser.new_context(viewport={"width": width, "height": height}, **options).new_page()
        page.set_default_timeout(120_000)
        try:
            yield page
        finally:
            browser.close()


def wait_for_app(page, timeout_ms: int = 120_000) -> None:
    """Streamlit's own readiness signal: connected, script not running, no skeletons left."""
    page.wait_for_timeout(300)
    page.locator("[data-testid='stApp'][data-test-connection-state='CONNECTED']").wait_for(
        state="attached", timeout=timeout_ms)
    page.locator("[data-testid='stApp'][data-test-script-state='notRunning']").wait_for(
        state="attached", timeout=timeout_ms)
    sync_api.expect(page.get_by_test_id("stSkeleton")).to_have_count(0, timeout=timeout_ms)


def box_select_on_triage(page, start: float, end: float) -> None:
    """Drag a box over the Triage chart's top panel from ``start`` to ``end`` (fractions of its
    width) and wait until the page has re-queried that step range (Reset zoom enabled)."""
    page.locator(".st-key-triage_chart .js-plotly-plot").scroll_into_view_if_needed()
    box = page.locator(".st-key-triage_chart .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * start, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * end, box["y"] + box["height"] * 0.5, steps=8)
    page.mouse.up()
    wait_for_app(page)
    sync_api.expect(page.locator(".st-key-triage_reset_zoom button")).to_be_enabled()
