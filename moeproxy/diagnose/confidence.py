"""How sure a diagnosis is: ``high``, ``medium`` or ``low``, with the reason in one phrase.

The verdict rules fire on what a log shows; how much a log shows varies from a 200,000-iteration
Megatron file to eight records pasted in an issue. Confidence is low when the evidence supports
another reading (``alternatives``: another lasting category starts with the cause), when the run is
short (few records to judge noise against), when the failure starts at the first record (no healthy
stretch to compare with), or when a healthy verdict was reached without the metrics that would show
the usual failures. It is high for a decisive rule (``Rule.decisive``: non-finite values, an
overflow storm, a blow-up of two orders of magnitude) or for a long run whose verdict several
findings agree on; a healthy verdict with warnings that almost made a finding is medium at most.
"""

from __future__ import annotations

from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.catalog import rule_of
from moeproxy.diagnose.rules import label_of
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, HEALTHY, WARNING, Finding

thresholds(
    short_run=(10, "confidence: fewer records and bands rest on a handful of points"),
    long_run=(30, "confidence: enough history for every rule's baseline"),
)

CORE_SIGNALS = ("loss", "grad_norm", "reward_mean", "policy_entropy", "logprob_diff_mean")


def records(run: RunSeries) -> int:
    """Logged records of the run's best-covered core signal (any metric when none is logged)."""
    counts = [len(found[1]) for name in CORE_SIGNALS if (found := run.resolve(name)) is not None]
    if not counts:
        counts = [len(run.get(n)) for n in run.names] or [0]
    return max(counts)


def assess(run: RunSeries, verdict: str, onset: int | None, findings: list[Finding],
           alternatives: list[dict] | None = None, config: DiagnoseConfig | None = None) -> tuple[str, str]:
    """(confidence, why)."""
    cfg = config or DiagnoseConfig()
    n = records(run)
    if verdict == HEALTHY:
        if not any(run.resolve(name) is not None for name in CORE_SIGNALS):
            return "low", "no loss, grad norm, reward, entropy or mismatch metric is logged"
        if n < cfg.short_run:
            return "low", f"only {n} records"
        near = [f for f in findings if f.severity == WARNING and rule_of(f.rule, f.category).damage]
        if near:
            return "medium", f"{n} records; a warning ({near[0].rule}) that did not last"
        return ("high", f"{n} records of the core metrics") if n >= cfg.long_run else ("medium", f"{n} records")
    if alternatives:
        others = ", ".join(f"{a['category']} from step {a['onset_step']}" for a in alternatives)
        return "low", f"another reading fits too: {others}"
    cause_findings = [f for f in findings if f.severity == CRITICAL and label_of(f.category) == verdict
                      and f.onset_step == onset]
    decisive = any(rule_of(f.rule, f.category).decisive for f in cause_findings)
    agreeing = sum(1 for f in findings if f.severity == CRITICAL and label_of(f.category) == verdict)
    if onset is not None and onset <= run.first_step and not decisive:
        return "low", "the failure shows from the first record: no healthy stretch to compare with"
    if n < cfg.short_run:
        return ("medium", f"a decisive signal in only {n} records") if decisive else ("low", f"only {n} records")
    if decisive or (n >= cfg.long_run and agreeing >= 2):
        return "high", "a decisive signal" if decisive else f"{agreeing} findings agree over {n} records"
    return "medium", f"{n} records, one rule"
