"""The detector registry: every failure detector registers here by name, once.

A detector is a pure function ``(run: RunSeries, config: DiagnoseConfig) -> list[Finding]``.
Adding one is one module under ``moeproxy/diagnose/detectors/`` decorated with
``@register_detector("name", "one line")`` plus its import line in ``detectors/__init__.py``.
``diagnose_frame`` runs them all; the CLI and the dashboard list ``DETECTORS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import Finding
from moeproxy.registry import Registry

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
