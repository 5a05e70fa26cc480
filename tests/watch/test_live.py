"""The Done-when of issue 12, with real processes: a job appends to its log from another process
with an overflow from step 150; `moeproxy watch` raises one alert (overflow, onset 150) within 5 s
of that step being written; `kill -9` of the watcher and restarts leave every step stored exactly
once and raise no second alert. Also: SIGTERM stops it cleanly, readers get in while it watches,
and a webhook receives the same JSON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import duckdb

from moeproxy.store import Store

WRITER = r"""
import json, sys, time
path, marker, last, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
with open(path, "a") as fh:
    for step in range(1, last + 1):
        bad = step >= 150
        line = json.dumps({"step": step, "loss": float("nan") if bad else 2.0 - step / 1000,
                           "grad_norm": float("inf") if bad else 1.0 + (step % 5) / 10, "lr": 1e-5})
        half = len(line) // 2
        fh.write(line[:half]); fh.flush()  # a line is half written for a moment
        time.sleep(pause / 2)
        fh.write(line[half:] + "\n"); fh.flush()
        if step == 150:
            with open(marker, "w") as m:
                m.write(repr(time.time()))
        time.sleep(pause / 2)
"""


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start_watcher(tmp_path, run_dir, *extra):
    out = open(tmp_path / "watch.out", "a")
    return subprocess.Popen(
        [sys.executable, "-m", "moeproxy", "watch", str(run_dir), "--db", str(tmp_path / "runs.duckdb"),
         "--alerts", str(tmp_path / "alerts.jsonl"), "--interval", "0.2", *extra],
        stdout=out, stderr=subprocess.STDOUT, text=True)


def alert_lines(tmp_path) -> list[dict]:
    path = tmp_path / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_overflow_is_alerted_once_within_5_s_and_kill_9_loses_and_repeats_nothing(tmp_path):
    run_dir = tmp_path / "grpo-run"
    run_dir.mkdir()
    log = run_dir / "metrics.jsonl"
    log.write_text("")
    marker = tmp_path / "step150.time"
    watcher = start_watcher(tmp_path, run_dir)
    wait_for(lambda: "watching" in (tmp_path / "watch.out").read_text(), 30, "the watcher to start")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(marker), "300", "0.02"])
    try:
        alerts = wait_for(lambda: alert_lines(tmp_path), 30, "an alert")
        arrived = time.time()
        written = float(marker.read_text())
        alert = alerts[0]
        assert set(alert) == {"run", "verdict", "onset_step", "severity", "confidence", "evidence", "last_step",
                              "detected_at", "revision"} and alert["revision"] == 1
        assert (alert["run"], alert["verdict"], alert["onset_step"], alert["severity"]) == \
            ("grpo-run", "overflow", 150, "critical")
        assert alert["last_step"] >= 150 and "grad_norm" in alert["evidence"]
        assert arrived - written < 5.0, f"alert {arrived - written:.2f} s after step 150 was written"
        # the dashboard, `moeproxy runs`: another process reads the store while the watcher writes
        runs = subprocess.run([sys.executable, "-m", "moeproxy", "runs", "--db", str(tmp_path / "runs.duckdb")],
                              capture_output=True, text=True, timeout=60)
        assert runs.returncode == 0 and "grpo-run" in runs.stdout
        # kill -9 while the job still writes, three times, each at another moment
        for pause in (0.0, 0.35, 0.8):
            time.sleep(pause)
            watcher.send_signal(signal.SIGKILL)
            watcher.wait(10)
            watcher = start_watcher(tmp_path, run_dir)
        assert writer.wait(60) == 0
        store = Store(tmp_path / "runs.duckdb")
        wait_for(lambda: (store.runs()["last_step"] == 300).all(), 30, "the watcher to catch up")
    finally:
        writer.kill()
        watcher.send_signal(signal.SIGTERM)
        code = watcher.wait(20)
    assert code == 0 and "moeproxy watch: stopped" in (tmp_path / "watch.out").read_text()
    with duckdb.connect(str(tmp_path / "runs.duckdb")) as con:
        rows = con.execute("SELECT metric, count(*), count(DISTINCT step), min(step), max(step), max(attempt) "
                           "FROM scalars GROUP BY metric ORDER BY metric").fetchall()
    assert rows == [(m, 300, 300, 1, 300, 0) for m in ("grad_norm", "loss", "lr")]
    assert len(alert_lines(tmp_path)) == 1
    assert len(Store(tmp_path / "runs.duckdb").alerts("grpo-run")) == 1


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_webhook_gets_the_same_json_and_a_dead_one_blocks_nothing(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    run_dir = tmp_path / "hooked"
    run_dir.mkdir()
    lines = [{"step": s, "loss": 2.0 if s < 40 else float("nan"), "grad_norm": 1.0 if s < 40 else float("inf")}
             for s in range(1, 60)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    url = f"http://127.0.0.1:{server.server_port}/alert"
    try:
        proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run_dir), "--db", str(tmp_path / "a.duckdb"),
                               "--alerts", str(tmp_path / "alerts.jsonl"), "--webhook", url, "--once"],
                              capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert "ALERT run 'hooked': overflow from step 40" in proc.stdout
    assert _Hook.received == [("application/json", alert_lines(tmp_path)[0])]
    # nothing listens on this port: the alert is still written at once, the POST fails in the background
    (run_dir / "more.jsonl").write_text("")
    dead = f"http://127.0.0.1:{server.server_port}/gone"
    os.remove(tmp_path / "alerts.jsonl")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "moeproxy", "watch", str(run_dir), "--db", str(tmp_path / "b.duckdb"),
                             "--alerts", str(tmp_path / "alerts.jsonl"), "--webhook", dead, "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: alert_lines(tmp_path), 30, "the alert with a dead webhook")
        assert time.monotonic() - started < 20
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop too
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "moeproxy watch: stopped" in out
    assert f"webhook http://127.0.0.1:{server.server_port}/…: alert for run 'hooked' not delivered" in err  # path redacted
    assert time.monotonic() - started < 20  # stopping does not wait out the retries
