"""The verdict: the root cause is the earliest critical finding, not the loudest.

Critical findings of the main categories compete first; secondary categories (KL, length,
vanishing gradient) only decide when no main category fired. Findings whose onsets lie within
``tie_fraction`` of the run's step range of the earliest are treated as simultaneous and the
causal order breaks the tie (mismatch and router move first, then gradients, then loss/entropy,
then reward/length), so an overflow that follows a divergence is reported as its consequence.
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose.robust import fmt
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import (CAUSAL_ORDER, CRITICAL, DIVERGENCE, ENTROPY_COLLAPSE, HEALTHY,
                                        KL_EXPLOSION, LENGTH_BLOWUP, MAIN_CATEGORIES, PRECISION_MISMATCH,
                                        REWARD_COLLAPSE, SEVERITIES, WARNING, Finding)


# Lasting changes that a single bad update can leave behind.
DAMAGE_CATEGORIES = (KL_EXPLOSION, REWARD_COLLAPSE, ENTROPY_COLLAPSE, LENGTH_BLOWUP)


def promote_damaging_spikes(findings: list[Finding], span: int, tie_fraction: float) -> list[Finding]:
    """A large grad-norm/loss spike that recovers is a blip, unless a lasting change (KL to the
    reference, reward, entropy, length) starts with it: then the spike was the update that
    diverged the policy, and it is reported as a critical divergence."""
    tie = max(0.0, tie_fraction * span)
    damage = [f for f in findings if f.severity == CRITICAL and f.category in DAMAGE_CATEGORIES]
    out = []
    for f in findings:
        if f.rule in ("large_spike", "grad_excursion") and f.severity != CRITICAL:
            hit = next((d for d in damage if 0 <= d.onset_step - f.onset_step <= tie), None)
            if hit is not None:
                f = Finding(f.category, f.onset_step, CRITICAL, f.metric, "damaging_spike",
                            f"{f.evidence}, but {hit.metric} changed for good from step {hit.onset_step} "
                            f"({hit.category}): the update at step {f.onset_step} diverged the policy")
        out.append(f)
    return out


BLOWUP_FACTOR = 2.0  # entropy doubled and stayed doubled: the entropy detector's blow-up, too


def entropy_blowup_start(run: RunSeries, before_step: int) -> int | None:
    """The first step from which the policy entropy stays at least ``BLOWUP_FACTOR`` times its recent
    level before ``before_step`` (the median of the last tenth of the records before it, at least
    three: healthy GRPO entropy drifts down, so the run's start is no baseline) to the end of the
    run, or None (no entropy logged, fewer than two records before, or no lasting blow-up)."""
    found = run.resolve("policy_entropy")
    if found is None:
        return None
    s = found[1][np.isfinite(found[1].to_numpy())]
    base = s[s.index < before_step].to_numpy()
    base = base[-max(3, len(s) // 10):]
    if len(base) < 2 or not np.median(base) > 0:
        return None
    up = s.to_numpy() >= BLOWUP_FACTOR * float(np.median(base))
    if not up[-1]:
        return None
    down = np.flatnonzero(~up)
    first = int(down[-1]) + 1 if down.size else 0
    return int(s.index[first])


def demote_blowup_mismatch(findings: list[Finding], run: RunSeries, tie_fraction: float) -> list[Finding]:
    """A train/rollout gap that opens together with an entropy blow-up is a symptom of the policy
    blowing up, not a precision fault: a near-uniform policy samples low-probability tokens, where
    the two engines' log-probs disagree most (shared/research/logs-and-failures.md §2 row 3). A
    precision fault opens the gap while the policy is still sharp and entropy follows later, if at
    all. Such a mismatch finding becomes a warning when another critical main finding names the
    lasting outcome (reward collapse, divergence, ...); alone it stays the verdict."""
    tie = max(0.0, tie_fraction * run.span)
    others = [f for f in findings if f.severity == CRITICAL and f.category in MAIN_CATEGORIES
              and f.category != PRECISION_MISMATCH]
    if not others:
        return findings
    out = []
    for f in findings:
        if f.category == PRECISION_MISMATCH and f.severity == CRITICAL and f.onset_step is not None:
            start = entropy_blowup_start(run, f.onset_step)
            if start is not None and start - f.onset_step <= tie:
                f = Finding(f.category, f.onset_step, WARNING, f.metric, "mismatch_with_blowup",
                            f"{f.evidence}; but the policy entropy blew up with it (x{fmt(BLOWUP_FACTOR)} and "
                            f"staying from step {start}): a gap opened by the policy blowing up, not by "
                            f"the engines' precision")
        out.append(f)
    return out


def choose_verdict(findings: list[Finding], span: int, tie_fraction: float) -> tuple[str, int | None]:
    critical = [f for f in findings if f.severity == CRITICAL]
    pool = [f for f in critical if f.category in MAIN_CATEGORIES] or critical
    if not pool:
        return HEALTHY, None
    first = min(f.onset_step for f in pool)
    tie = max(0.0, tie_fraction * span)
    near = [f for f in pool if f.onset_step - first <= tie]
    cause = min(near, key=lambda f: (causal_rank(f), f.onset_step))
    return cause.category, int(cause.onset_step)


# An fp16 overflow storm (an iteration skipped for overflow on every logged iteration) is the
# mechanism, not a symptom: the loss printed in those iterations comes from updates that overflowed,
# so it outranks a loss jump that starts with it. A loss-scale drop alone does not (a scaler that
# halves a few times and settles is what a loss spike looks like from the scaler's side).
OVERFLOW_STORM_RULES = frozenset({"overflow_storm"})


def causal_rank(f: Finding) -> float:
    rank = float(CAUSAL_ORDER.index(f.category))
    if f.rule in OVERFLOW_STORM_RULES:
        rank = min(rank, CAUSAL_ORDER.index(DIVERGENCE) - 0.5)
    return rank


def order_findings(findings: list[Finding], verdict: str) -> list[Finding]:
    """Critical first, then warnings, then notes; within each, by onset; the verdict's own
    finding leads."""

    def key(f: Finding):
        return (SEVERITIES.index(f.severity), f.category != verdict,
                f.onset_step if f.onset_step is not None else 1 << 62, f.category, f.metric)

    return sorted(findings, key=key)
