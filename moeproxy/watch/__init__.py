"""Live triage: follow the logs of running jobs, store only what they append, re-diagnose the runs
that grew, and alert at a run's first critical finding.

``follow`` reads a growing file's new complete lines or records through the ingest readers;
``watcher`` runs the cycles (store, diagnose, alert) with restart-safe positions; ``alerts``
builds the alert contract and delivers it (JSON lines file, stdout, ``webhook``); ``outputs``
checks the alerts path and names the watcher's own files (never followed); ``claims`` keeps one
watcher per log and store.
"""

from moeproxy.watch.alerts import ALERT_KEYS, AlertSink, alert_line, make_alert
from moeproxy.watch.follow import FollowedFile, FollowError
from moeproxy.watch.watcher import CycleReport, WatchConfig, Watcher

__all__ = ["ALERT_KEYS", "AlertSink", "CycleReport", "FollowError", "FollowedFile", "WatchConfig", "Watcher",
           "alert_line", "make_alert"]
