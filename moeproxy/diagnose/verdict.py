"""The verdict: the root cause is the earliest critical finding, not the loudest.

Critical findings of the main categories compete first; secondary categories (KL, length,
vanishing gradient) only decide when no main category fired. Findings whose onsets lie within
``tie_fraction`` of the run's step range of the earliest are treated as simultaneous and the
causal order breaks the tie (mismatch and router move first, then gradients, then loss/entropy,
then reward/length), so an overflow that follows a divergence is reported as its consequence.
"""

from __future__ import annotations

from moeproxy.diagnose.taxonomy import (CAUSAL_ORDER, CRITICAL, HEALTHY, MAIN_CATEGORIES,
                                        SEVERITIES, Finding)


def choose_verdict(findings: list[Finding], span: int, tie_fraction: float) -> tuple[str, int | None]:
    critical = [f for f in findings if f.severity == CRITICAL]
    pool = [f for f in critical if f.category in MAIN_CATEGORIES] or critical
    if not pool:
        return HEALTHY, None
    first = min(f.onset_step for f in pool)
    tie = max(0.0, tie_fraction * span)
    near = [f for f in pool if f.onset_step - first <= tie]
    cause = min(near, key=lambda f: (CAUSAL_ORDER.index(f.category), f.onset_step))
    return cause.category, int(cause.onset_step)


def order_findings(findings: list[Finding], verdict: str) -> list[Finding]:
    """Critical first, then warnings, then notes; within each, by onset; the verdict's own
    finding leads."""

    def key(f: Finding):
        return (SEVERITIES.index(f.severity), f.category != verdict,
                f.onset_step if f.onset_step is not None else 1 << 62, f.category, f.metric)

    return sorted(findings, key=key)
