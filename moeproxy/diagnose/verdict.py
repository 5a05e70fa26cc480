"""The verdict: shared/LABELS.md "Root cause", read from the findings and their rules' properties.

1. The lasting anomalies are the critical findings (a rule's finding is critical when what it saw
   lasted; a spike that recovered is a warning), plus a recovered spike (``Rule.spike``) with which
   a lasting change (``Rule.damage``) started: that update broke the policy.
2. The root cause is the earliest of them.
3. Findings that start within the same record or two (at the log's own resolution) are together:
   the one upstream in the causal chain (``Rule.rank``: precision mismatch / routing -> overflow ->
   divergence -> entropy collapse -> reward collapse -> vanishing gradient) is the cause.
4. Another label whose lasting finding starts together with the cause is listed in
   ``alternatives`` (only the causal order put it downstream).

Before that, a lasting finding that is a symptom of damage that started before it
(``Rule.symptom_of``; LABELS.md: a train/rollout gap that opens after the policy blew up) is a warning.
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose.catalog import rule_of
from moeproxy.diagnose.robust import tail_level
from moeproxy.diagnose.rules import label_of
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, DIVERGENCE, MAIN_CATEGORIES, SEVERITIES, WARNING, Finding

def tie_window(run: RunSeries, tie_records: int) -> float:
    """Steps within which two onsets are "together": ``tie_records`` records at the log's own
    resolution (``RunSeries.step_gap``)."""
    return tie_records * run.step_gap


def promote_damaging_spikes(findings: list[Finding], tie: float) -> list[Finding]:
    """A spike that recovered (``Rule.spike``) is the cause when a lasting change (``Rule.damage``)
    starts with it: reported as a critical divergence."""
    damage = [f for f in findings if f.severity == CRITICAL and rule_of(f.rule, f.category).damage]
    out = []
    for f in findings:
        if f.severity != CRITICAL and rule_of(f.rule, f.category).spike:
            hit = next((d for d in damage if 0 <= d.onset_step - f.onset_step <= tie), None)
            if hit is not None:
                f = Finding(DIVERGENCE, f.onset_step, CRITICAL, f.metric, "damaging_spike",
                            f"{f.evidence}, but {hit.metric} changed for good from step {hit.onset_step} "
                            f"({hit.category}): the update at step {f.onset_step} diverged the policy")
        out.append(f)
    return out


def fall_end(run: RunSeries | None, finding: Finding, done_share: float, level_records: int) -> int | None:
    """The step a fall (``Rule.falls``) completed: the first record from its onset on where the
    series' rolling median (``level_records`` records) is within ``done_share`` of the drop from its
    level just before the onset to its last tenth's level; the onset itself when the series is not
    logged or did not fall."""
    s = run.get(finding.metric) if run is not None else None
    if s is None or finding.onset_step is None:
        return finding.onset_step
    s = s[np.isfinite(s.to_numpy(dtype=float))]
    k = max(1, int(level_records))
    before = s[s.index < finding.onset_step].to_numpy(dtype=float)[-k:]
    after = s[s.index >= finding.onset_step]
    if not before.size or len(after) < 2:
        return finding.onset_step
    top, final = float(np.median(before)), tail_level(after.to_numpy(dtype=float))
    if not top > final:
        return finding.onset_step
    level = after.rolling(k, min_periods=1).median().to_numpy()
    done = np.flatnonzero(level <= final + done_share * (top - final))
    return int(after.index[int(done[0])]) if done.size else int(after.index[-1])


def demote_symptoms(findings: list[Finding], run: RunSeries | None = None, done_share: float = 0.0,
                    level_records: int = 1) -> list[Finding]:
    """A lasting finding whose rule names it a possible symptom (``Rule.symptom_of``) becomes a
    warning when lasting damage of that label (a ``Rule.damage`` rule: the policy blowing up; or a
    decisive one: a blow-up of orders of magnitude) started before it (LABELS.md: "a gap that opens
    only after the policy has already blown up"; a gap that opens with the blow-up is upstream of it
    in the chain): a near-uniform policy samples the low-probability tokens where the trainer and
    the rollout engine disagree most. A fall (``Rule.falls``) is a symptom of damage that started
    before it completed (``fall_end``): the return was still on its way down when the critic blew up,
    and it fell the rest of the way with the blow-up. The finding becomes its rule's
    ``Rule.symptom_rule``."""
    damage = [f for f in findings if f.severity == CRITICAL and f.onset_step is not None
              and (rule_of(f.rule, f.category).damage or rule_of(f.rule, f.category).decisive)]
    out = []
    for f in findings:
        rule = rule_of(f.rule, f.category)
        labels = rule.symptom_of if f.severity == CRITICAL and f.onset_step is not None else ()
        # (a fall's symptom is of a main category's damage: a response length running away is how a
        # reward collapse shows, not what explains it)
        upstream = [d for d in damage if label_of(d.category) in labels
                    and (d.category in MAIN_CATEGORIES or not rule.falls)]
        by = fall_end(run, f, done_share, level_records) if upstream and rule.falls else f.onset_step
        hit = next((d for d in upstream if d.onset_step < by), None)
        if hit is not None:
            during = f", before {f.metric} had finished falling (step {by})" if rule.falls else ""
            f = Finding(f.category, f.onset_step, WARNING, f.metric, rule.symptom_rule,
                        f"{f.evidence}; but {hit.metric} [{hit.rule}] changed for good from step {hit.onset_step}"
                        f"{during}; read as its symptom: {rule_of(rule.symptom_rule, f.category).measures}")
        out.append(f)
    return out


def lasting(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == CRITICAL and f.onset_step is not None]


def candidates(findings: list[Finding]) -> list[Finding]:
    """The lasting findings that compete for the root cause: those of the main categories; the
    secondary ones (a length change, a vanished gradient, a run that never learned) only when no
    main category lasted: a response length that runs away or collapses is how a reward collapse or
    a blow-up shows, and a reward that never moved beside an entropy that collapsed is the collapse
    (LABELS.md's chain ends in the vanishing gradient; raters of MountainCar runs stuck at -200 whose
    entropy fell to nothing name the entropy collapse)."""
    pool = lasting(findings)
    main = [f for f in pool if f.category in MAIN_CATEGORIES]
    return main or pool


def causal_choice(findings: list[Finding], tie: float) -> Finding | None:
    """The root-cause finding by LABELS.md's order, or None (healthy)."""
    pool = candidates(findings)
    if not pool:
        return None
    first = min(f.onset_step for f in pool)
    near = [f for f in pool if f.onset_step - first <= tie]
    return min(near, key=lambda f: (rule_of(f.rule, f.category).rank, f.onset_step))


def alternatives(findings: list[Finding], cause: Finding | None, tie: float) -> list[dict]:
    """Other readings the evidence supports: each other label with a lasting finding that starts
    together with the cause (within the tie window), which only the causal order put downstream.
    A finding that starts later is what the cause led to, not another reading, and so is a
    non-decisive finding beside a decisive cause (a reward that falls as the loss turns NaN)."""
    if cause is None:
        return []
    verdict = label_of(cause.category)
    decisive = rule_of(cause.rule, cause.category).decisive
    out: dict[str, dict] = {}
    for f in sorted(candidates(findings), key=lambda f: f.onset_step):
        label = label_of(f.category)
        if label == verdict or label in out or f.onset_step - cause.onset_step > tie:
            continue
        if decisive and not rule_of(f.rule, f.category).decisive:
            continue
        out[label] = {"category": label, "onset_step": int(f.onset_step), "rule": f.rule,
                      "why": f"{f.metric} [{f.rule}] starts with the cause (step {int(f.onset_step)}); "
                             f"LABELS.md's causal order puts {label} downstream of {verdict}"}
    return list(out.values())


def order_findings(findings: list[Finding], verdict: str) -> list[Finding]:
    """Critical first, then warnings, then notes; within each, by onset; the verdict's own
    finding leads."""

    def key(f: Finding):
        return (SEVERITIES.index(f.severity), label_of(f.category) != verdict,
                f.onset_step if f.onset_step is not None else 1 << 62, f.category, f.metric)

    return sorted(findings, key=key)


__all__ = ["alternatives", "candidates", "causal_choice", "demote_symptoms", "fall_end", "lasting", "order_findings",
           "promote_damaging_spikes", "tie_window"]
