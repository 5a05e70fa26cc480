"""The detectors and their rules, loaded: the one module that imports every detector.

``registry`` and ``rules`` are the containers the detectors register into (below them); this module
sits above both and the detectors, so no import runs back up: whoever needs the whole catalog (the
diagnosis, the verdict, confidence, the CLI) imports it from here.
"""

from __future__ import annotations

import moeproxy.diagnose.detectors  # noqa: F401  (every detector registers its function and declares its rules)
from moeproxy.diagnose.registry import DETECTORS, Detector
from moeproxy.diagnose.rules import RULES, Rule


def all_detectors() -> dict[str, Detector]:
    """The registered detectors."""
    return dict(DETECTORS)


def rule_of(name: str, category: str) -> Rule:
    """The declared rule; an undeclared name (a finding made by hand) gets the plain properties
    of its category."""
    rule = RULES.get(name)
    return rule if rule is not None else Rule(name, category, "undeclared")
