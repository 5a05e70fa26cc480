"""Alerts: what the watcher says when a run's diagnosis names a failure, and where it says it.

``make_alert(run, result, last_step)`` turns a diagnosis (the findings contract) into the alert
contract of shared/DESIGN.md: ``{"run", "verdict", "onset_step", "severity", "confidence",
"evidence", "last_step", "detected_at"}``. An ``AlertSink`` delivers one: a JSON line appended to
the alerts file (flushed and fsynced), a human line on stdout, and a POST of the same JSON to the
webhook from a background thread (a timeout and retries with back-off; ingest never waits for it).

Lifecycle: the watcher records an alert in the store first, then emits it. A watcher killed in
between finds, when started again, a stored alert missing from the alerts file: ``missing()`` names
it and it is emitted then, so the file gets each alert exactly once. The webhook is told at least
once in that case only if the POST had not gone out; a POST in flight when the process is killed
is not repeated.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ALERT_KEYS = ("run", "verdict", "onset_step", "severity", "confidence", "evidence", "last_step", "detected_at")


def make_alert(run: str, result: dict, last_step: int | None) -> dict:
    """The alert for a diagnosis whose verdict is a failure: the verdict's own finding gives the
    severity and evidence (the earliest of that category)."""
    verdict = result["verdict"]
    own = [f for f in result.get("findings", []) if f.get("category") == verdict]
    first = min(own, key=lambda f: (f.get("severity") != "critical", f.get("onset_step") or 0), default={})
    return {
        "run": run, "verdict": verdict, "onset_step": result.get("onset_step"),
        "severity": first.get("severity", "critical"), "confidence": result.get("confidence"),
        "evidence": first.get("evidence", ""), "last_step": last_step,
        "detected_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    }


def alert_key(alert: dict) -> tuple:
    return alert["run"], alert["verdict"], alert["onset_step"], alert["detected_at"]


def alert_line(alert: dict) -> str:
    """One line for people (the run name is printed as given, inside quotes)."""
    onset = "" if alert["onset_step"] is None else f" from step {alert['onset_step']}"
    return (f"ALERT run {alert['run']!r}: {alert['verdict']}{onset} ({alert['severity']}, "
            f"{alert['confidence']} confidence; last step {alert['last_step']}): {alert['evidence']}")


class AlertSink:
    def __init__(self, alerts_path: str | Path | None = None, webhook: str | None = None, out=None, err=None,
                 timeout: float = 5.0, retries: int = 3) -> None:
        self.path = Path(alerts_path) if alerts_path else None
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.webhook = WebhookSender(webhook, timeout, retries, self.err) if webhook else None

    def emit(self, alert: dict) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(alert, allow_nan=False, default=str) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        print(alert_line(alert), file=self.out, flush=True)
        if self.webhook is not None:
            self.webhook.send(alert)

    def missing(self, stored: list[dict]) -> list[dict]:
        """The stored alerts that the alerts file does not hold (the watcher was killed between
        recording one and writing it); all of them when there is no file to check."""
        if self.path is None:
            return []
        written = set()
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    written.add(alert_key(json.loads(line)))
                except (ValueError, KeyError, TypeError):
                    continue
        return [a for a in stored if alert_key(a) not in written]

    def close(self, wait: float = 10.0) -> None:
        if self.webhook is not None:
            self.webhook.close(wait)


class WebhookSender:
    """POSTs alerts, in order, from one daemon thread: ``timeout`` seconds per try, ``retries``
    more tries after a failure (1 s, 2 s, 4 s ... apart, given up when the watcher stops); a
    failure is one line on stderr."""

    def __init__(self, url: str, timeout: float, retries: int, err) -> None:
        self.url, self.timeout, self.retries, self.err = url, timeout, retries, err
        self.queue: queue.Queue = queue.Queue()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._run, name="moeproxy-webhook", daemon=True)
        self.thread.start()

    def send(self, alert: dict) -> None:
        self.queue.put(alert)

    def close(self, wait: float) -> None:
        """Stop after the queued alerts went out, waiting at most ``wait`` seconds; an alert
        waiting to be tried again is given up (and named) rather than waited for."""
        self.closing.set()
        self.queue.put(None)
        self.thread.join(wait)

    def _run(self) -> None:
        while (alert := self.queue.get()) is not None:
            body = json.dumps(alert, allow_nan=False, default=str).encode()
            for attempt in range(self.retries + 1):
                try:
                    request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"}, method="POST")
                    with urllib.request.urlopen(request, timeout=self.timeout) as response:
                        response.read()
                    break
                except (urllib.error.URLError, OSError, ValueError) as exc:
                    if attempt == self.retries or self.closing.wait(2 ** attempt):
                        print(f"moeproxy watch: webhook {self.url}: alert for run {alert['run']!r} not delivered "
                              f"after {attempt + 1} tr{'y' if attempt == 0 else 'ies'} ({exc})", file=self.err, flush=True)
                        break
