"""The detector registry: every failure detector registers here by name, once.

A detector is a pure function ``(run: RunSeries, config: DiagnoseConfig) -> list[Finding]``.
Adding one is one module under ``moeproxy/diagnose/detectors/`` decorated with
``@register_detector("name", "one line")``, its rules declared with ``declare`` and its thresholds
with ``thresholds``: the folder's package imports every module in it, so nothing else names it.
``diagnose_frame`` runs them all; the CLI and the dashboard list ``DETECTORS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import Finding
from moeproxy.registry import Registry

thresholds(
    robust_z=(3.5, "modified z (0.6745 * dev / MAD) that marks a departure"),
    min_history=(3, "records needed before any departure can be judged"),
    onset_visible_share=(0.05, "a departure's onset record has left the baseline by at least this share of its "
                               "first exceedance (LABELS.md: the first record at which the anomaly is visible)"),
)

DetectFunction = Callable[[RunSeries, DiagnoseConfig], list[Finding]]


@dataclass(frozen=True)
class Detector:
    name: str
    description: str
    detect: DetectFunction


DETECTORS: Registry[Detector] = Registry("detector")


def register_detector(name: str, description: str) -> Callable[[DetectFunction], DetectFunction]:
    def wrap(fn: DetectFunction) -> DetectFunction:
        DETECTORS.add(name, Detector(name, description, fn))
        return fn

    return wrap
