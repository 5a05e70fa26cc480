"""Alerts: what the watcher says when a run's diagnosis names a failure, and where it says it.

``make_alert(run, result, last_step)`` turns a diagnosis (the findings contract) into the alert
contract of shared/DESIGN.md: ``{"run", "verdict", "onset_step", "severity", "confidence",
"evidence", "last_step", "detected_at"}``. An ``AlertSink`` delivers one: a JSON line appended to
the alerts file (flushed and fsynced), a human line on stdout, and a POST of the same JSON to the
webhook from a background thread (``webhook.WebhookSender``; ingest never waits for it).

One alert per failure: a run's first failing diagnosis raises it (``revision`` 1); a later
diagnosis that reads the same failure differently *updates* it (``revision`` 2, 3 ..., with
``replaces``: the verdict and onset it corrects) only when it explains more — it starts earlier, or
at the same record and upstream in LABELS.md's causal chain — and never when it merely moves the
onset back a record or two before the first non-finite value of an overflow (the first inf stays
the root cause unless something clearly earlier explains it). Anything else (a consequence, a
later or downstream reading) raises nothing: ``next_alert`` decides.

An alert is one (run, verdict, onset step): the alerts file gets each at most once, across
restarts too (the file's alerts are read when it is first used). Before each append the file's end
is repaired: a last line cut short (a kill or a full disk mid-write) is completed when it is a whole
alert that lost only its newline, else dropped (the alert it held is written again whole). A write
that fails (a full disk) is one line on stderr, the partial line is cut off at once, and the alert
is kept and tried again at each cycle; the watcher goes on.

Lifecycle: the watcher records an alert in the store first, then emits it. A watcher killed in
between finds, when started again, a stored alert missing from the alerts file: ``missing()`` names
it and it is emitted then, so the file gets each alert exactly once. The webhook is told at least
once in that case only if the POST had not gone out; a POST in flight when the process is killed
is not repeated.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path

from moeproxy.terminal import shown
from moeproxy.watch.webhook import WebhookSender, redact_url

ALERT_KEYS = ("run", "verdict", "onset_step", "severity", "confidence", "evidence", "last_step", "detected_at",
              "revision")  # and "replaces" on an update
REPAIR_WINDOW = 1 << 20  # bytes before the end searched for the last newline when the last line is cut

__all__ = ["ALERT_KEYS", "AlertSink", "WebhookSender", "alert_key", "alert_line", "make_alert", "next_alert",
           "redact_url"]


def make_alert(run: str, result: dict, last_step: int | None, previous: dict | None = None) -> dict:
    """The alert for a diagnosis whose verdict is a failure: the verdict's own finding gives the
    severity and evidence (the earliest of that category). With ``previous`` (the run's open alert),
    an update of it: the next revision, and what it replaces."""
    verdict = result["verdict"]
    own = [f for f in result.get("findings", []) if f.get("category") == verdict]
    first = min(own, key=lambda f: (f.get("severity") != "critical", f.get("onset_step") or 0), default={})
    alert = {
        "run": run, "verdict": verdict, "onset_step": result.get("onset_step"),
        "severity": first.get("severity", "critical"), "confidence": result.get("confidence"),
        "evidence": first.get("evidence", ""), "last_step": last_step,
        "detected_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "revision": 1 if previous is None else int(previous.get("revision", 1)) + 1,
    }
    if previous is not None:
        alert["replaces"] = {"verdict": previous["verdict"], "onset_step": previous["onset_step"]}
    return alert


def next_alert(open_alert: dict | None, run: str, result: dict, last_step: int | None,
               tie_steps: float = 0.0) -> dict | None:
    """The alert (new, or an update of ``open_alert``) a diagnosis calls for, or None. ``tie_steps``:
    how many steps two records apart are (two records of the log), within which two onsets count as
    the same start."""
    verdict, onset = result.get("verdict"), result.get("onset_step")
    if verdict in (None, "healthy") or onset is None:
        return None
    if open_alert is None:
        return make_alert(run, result, last_step)
    old_verdict, old_onset = open_alert["verdict"], open_alert.get("onset_step")
    if (verdict, onset) == (old_verdict, old_onset):
        return None
    if old_onset is None:
        return make_alert(run, result, last_step, open_alert)
    from moeproxy.diagnose.rules import chain_rank

    if old_verdict == "overflow":  # the first non-finite value: only something clearly earlier explains it
        explains = onset < old_onset - tie_steps
    else:
        explains = onset < old_onset - tie_steps or (
            abs(onset - old_onset) <= tie_steps and chain_rank(verdict) < chain_rank(old_verdict))
    return make_alert(run, result, last_step, open_alert) if explains else None


def alert_key(alert: dict) -> tuple:
    """What makes two alerts the same alert: the run, the verdict and the onset step."""
    return str(alert["run"]), str(alert["verdict"]), alert["onset_step"]


def alert_line(alert: dict) -> str:
    """One line for people (the run name is printed as given, inside quotes)."""
    onset = "" if alert["onset_step"] is None else f" from step {alert['onset_step']}"
    replaced = alert.get("replaces")
    if replaced:
        was = "" if replaced.get("onset_step") is None else f" from step {replaced['onset_step']}"
        onset += f" (update {alert.get('revision')}: was {replaced.get('verdict')}{was})"
    return shown(f"ALERT run {alert['run']!r}: {alert['verdict']}{onset} ({alert['severity']}, "
                 f"{alert['confidence']} confidence; last step {alert['last_step']}): {alert['evidence']}")


class AlertSink:
    def __init__(self, alerts_path: str | Path | None = None, webhook: str | None = None, out=None, err=None,
                 timeout: float = 5.0, retries: int = 3) -> None:
        self.path = Path(alerts_path) if alerts_path else None
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.webhook = WebhookSender(webhook, timeout, retries, self.err) if webhook else None
        self.written: set | None = None  # keys of the alerts in the file (read at first use)
        self.unwritten: list[dict] = []  # alerts whose append failed: tried again at each cycle
        self._failing = False

    # -- the alerts file ---------------------------------------------------------------------
    def _say(self, message: str) -> None:
        print(f"moeproxy watch: alerts file {shown(self.path)}: {message}", file=self.err, flush=True)

    def _known(self) -> set:
        """The keys of the alerts the file holds (its last line repaired first)."""
        if self.written is None:
            self.written = set()
            try:
                fd = self._open()
            except OSError as exc:
                self._say(f"cannot be read ({exc.strerror or exc}); alerts are written when it can")
                return self.written
            try:
                self._repair(fd)
                with open(fd, "rb", closefd=False) as fh:
                    fh.seek(0)
                    for line in fh:
                        try:
                            self.written.add(alert_key(json.loads(line)))
                        except (ValueError, KeyError, TypeError):
                            continue
            except OSError as exc:
                self._say(f"cannot be read ({exc.strerror or exc})")
            finally:
                os.close(fd)
        return self.written

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(0, "not a regular file any more")
        return fd

    def _repair(self, fd: int) -> None:
        """A cut last line completed (a whole alert without its newline) or dropped."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        start = max(0, size - REPAIR_WINDOW)
        tail = os.pread(fd, size - start, start)
        cut_at = start + tail.rfind(b"\n") + 1 if b"\n" in tail else start
        last = tail[cut_at - start:]
        try:
            record = json.loads(last)
            whole = isinstance(record, dict) and set(ALERT_KEYS) <= set(record)
        except ValueError:
            whole = False
        if whole:
            self._write_all(fd, b"\n")
            self._say("its last line had lost its newline; completed")
        else:
            os.ftruncate(fd, cut_at)
            self._say(f"its last line was cut short ({len(last):,} bytes); dropped before appending")

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _append(self, alert: dict) -> None:
        """One alert's line appended, flushed and fsynced; OSError when it could not be (nothing
        of it is left in the file then)."""
        fd = self._open()
        try:
            self._repair(fd)
            before = os.fstat(fd).st_size
            try:
                self._write_all(fd, (json.dumps(alert, allow_nan=False, default=str) + "\n").encode())
                os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, before)
                except OSError:
                    pass  # the next append repairs the cut line
                raise
        finally:
            os.close(fd)

    def _write(self, alert: dict) -> bool:
        key = alert_key(alert)
        if key in self._known():
            return True
        try:
            self._append(alert)
        except OSError as exc:
            if alert not in self.unwritten:
                self.unwritten.append(alert)
            if not self._failing:
                self._say(f"cannot append ({exc.strerror or exc}); the alert for run {alert['run']!r} is in the "
                          "store and written when the file can be appended to again")
            self._failing = True
            return False
        self.written.add(key)
        return True

    def retry(self) -> None:
        """Write the alerts whose append failed before (at each cycle)."""
        if not self.unwritten:
            return
        pending, self.unwritten = self.unwritten, []
        done = 0
        for alert in pending:
            if not self._write(alert):
                # this one and those after it, in order; those written before it are done
                self.unwritten = pending[done:]
                return
            done += 1
        self._failing = False
        self._say(f"appended again; {done} alert{'s' if done != 1 else ''} written that could not be before")

    # -- delivery ----------------------------------------------------------------------------
    def emit(self, alert: dict) -> None:
        if self.path is not None:
            if self.unwritten:
                self.retry()
            if self.unwritten:
                if alert not in self.unwritten:
                    self.unwritten.append(alert)
            else:
                self._write(alert)
        print(alert_line(alert), file=self.out, flush=True)
        if self.webhook is not None:
            self.webhook.send(alert)

    def missing(self, stored: list[dict]) -> list[dict]:
        """The stored alerts that the alerts file does not hold (the watcher was killed between
        recording one and writing it); none when there is no file to check."""
        if self.path is None:
            return []
        known = self._known()
        return [a for a in stored if alert_key(a) not in known]

    def close(self, wait: float = 10.0) -> None:
        if self.webhook is not None:
            self.webhook.close(wait)
