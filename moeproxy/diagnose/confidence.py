"""How sure a diagnosis is: ``high``, ``medium`` or ``low``, with the reason in one phrase.

The verdict rules fire on what a log shows; how much a log shows varies from a 200,000-iteration
Megatron file to eight records pasted in an issue. Each diagnosis is put in one of a few situations,
its *basis*: another reading (``alternatives``: for a failure, another lasting category starting with the
cause; for any verdict, the verdict forest's other label, ``forest.py``), a tentative rule alone
(``Rule.tentative``: a return that never rose), a failure from the first record, a short run, a decisive rule (``Rule.decisive``: non-finite values,
an overflow storm, a blow-up of two orders of magnitude), several findings agreeing, one rule; for a
healthy verdict, no core metric logged, a short run, a warning that almost made a finding, a long
run, a middling one.

The level of each basis is measured, not guessed: ``confidence_table.json`` holds how often a
verdict of that basis was right on every real labelled log (``bench/calibrate_confidence.py`` writes
it and checks it by leave-one-source-out cross-validation): right on ``calibration_high`` (80 %) or
more of its logs is ``high``, on ``calibration_medium`` (60 %) or more ``medium``, else ``low``. A
basis measured on fewer than ``calibration_min_logs`` logs keeps the level it was designed with.
A verdict with alternatives is ``low`` whatever was measured (issue 20: where the evidence supports
more than one reading, the tool must not be loudly sure), and one read from fewer than ``short_run``
records is ``medium`` at most.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.catalog import rule_of
from moeproxy.diagnose.render import alt_text
from moeproxy.diagnose.rules import label_of
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, HEALTHY, WARNING, Finding

thresholds(
    short_run=(10, "confidence: fewer records and bands rest on a handful of points"),
    long_run=(30, "confidence: enough history for every rule's baseline"),
    calibration_high=(0.8, "confidence: a basis right on this share of the labelled logs or more is high"),
    calibration_medium=(0.6, "confidence: ... on this share or more medium, below it low"),
    calibration_min_logs=(15, "confidence: a basis measured on fewer labelled logs keeps its designed level"),
)

TABLE = Path(__file__).with_name("confidence_table.json")

# basis -> the level it was designed with (used where the table has too few logs of it)
DESIGNED = {
    "healthy_no_core": "low", "healthy_short": "low", "healthy_near_warning": "medium",
    "healthy_long": "high", "healthy_mid": "medium",
    "alternatives": "low", "tentative": "medium", "first_record": "low", "short_decisive": "medium", "short": "low",
    "decisive_overflow": "high", "decisive": "high", "agreeing": "high", "one_rule": "medium",
}


# a handful of records is never called certain, whatever such logs scored: a new short paste has too
# few points to judge its noise by
SHORT_BASES = frozenset({"healthy_short", "short", "short_decisive"})
# ... nor is a reading of what never happened (``Rule.tentative``)
CAPPED_BASES = frozenset({*SHORT_BASES, "tentative"})


@lru_cache(maxsize=1)
def measured() -> dict[str, dict]:
    """basis -> {"right": n, "total": m} as last measured (``bench/calibrate_confidence.py``)."""
    if not TABLE.is_file():
        return {}
    return json.loads(TABLE.read_text())["bases"]


def level_of(basis: str, cfg: DiagnoseConfig, table: dict[str, dict] | None = None) -> str:
    """The level a basis earns by its measured share of right verdicts (its designed level when it
    was measured on too few logs); ``alternatives`` is always low."""
    if basis == "alternatives":
        return "low"
    entry = (measured() if table is None else table).get(basis)
    if not entry or entry["total"] < cfg.calibration_min_logs:
        return DESIGNED[basis]
    share = entry["right"] / entry["total"]
    level = "high" if share >= cfg.calibration_high else "medium" if share >= cfg.calibration_medium else "low"
    return "medium" if level == "high" and basis in CAPPED_BASES else level

CORE_SIGNALS = ("loss", "grad_norm", "reward_mean", "policy_entropy", "logprob_diff_mean")


def records(run: RunSeries) -> int:
    """Logged records of the run's best-covered core signal (any metric when none is logged)."""
    counts = [len(found[1]) for name in CORE_SIGNALS if (found := run.resolve(name)) is not None]
    if not counts:
        counts = [len(run.get(n)) for n in run.names] or [0]
    return max(counts)


def basis_of(run: RunSeries, verdict: str, onset: int | None, findings: list[Finding],
             alternatives: list[dict] | None = None, config: DiagnoseConfig | None = None) -> tuple[str, str]:
    """(basis, why): the situation the diagnosis is in, and the reason in one phrase."""
    cfg = config or DiagnoseConfig()
    n = records(run)
    if alternatives:  # (a healthy verdict too, when the verdict forest reads a failure)
        others = ", ".join(alt_text(a) for a in alternatives)
        return "alternatives", f"another reading fits too: {others}"
    if verdict == HEALTHY:
        if not any(run.resolve(name) is not None for name in CORE_SIGNALS):
            return "healthy_no_core", "no loss, grad norm, reward, entropy or mismatch metric is logged"
        if n < cfg.short_run:
            return "healthy_short", f"only {n} records"
        near = [f for f in findings if f.severity == WARNING and rule_of(f.rule, f.category).damage]
        if near:
            return "healthy_near_warning", f"{n} records; a warning ({near[0].rule}) that did not last"
        return ("healthy_long", f"{n} records of the core metrics") if n >= cfg.long_run else ("healthy_mid", f"{n} records")
    cause_findings = [f for f in findings if f.severity == CRITICAL and label_of(f.category) == verdict
                      and f.onset_step == onset]
    decisive = any(rule_of(f.rule, f.category).decisive for f in cause_findings)
    agreeing = sum(1 for f in findings if f.severity == CRITICAL and label_of(f.category) == verdict)
    if cause_findings and all(rule_of(f.rule, f.category).tentative for f in cause_findings):
        return "tentative", ("read from what never happened (a return that never rose, a loss that never left its band): "
                             "a slow run reads alike")
    if onset is not None and onset <= run.first_step and not decisive:
        return "first_record", "the failure shows from the first record: no healthy stretch to compare with"
    if n < cfg.short_run:
        return ("short_decisive", f"a decisive signal in only {n} records") if decisive else ("short", f"only {n} records")
    if decisive:
        # non-finite values (overflow) are another kind of evidence than a blow-up's size
        return ("decisive_overflow" if verdict == "overflow" else "decisive"), "a decisive signal"
    if n >= cfg.long_run and agreeing >= 2:
        return "agreeing", f"{agreeing} findings agree over {n} records"
    return "one_rule", f"{n} records, one rule"


def assess(run: RunSeries, verdict: str, onset: int | None, findings: list[Finding],
           alternatives: list[dict] | None = None, config: DiagnoseConfig | None = None) -> tuple[str, str, str]:
    """(confidence, why, basis)."""
    cfg = config or DiagnoseConfig()
    basis, why = basis_of(run, verdict, onset, findings, alternatives, cfg)
    return level_of(basis, cfg), why, basis
