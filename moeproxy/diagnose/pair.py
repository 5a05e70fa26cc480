"""Two runs that should match (same seed and data, another device, precision or kernel) but do
not: the first step from which their shared metrics disagree beyond tolerance, and stay apart.

Relative difference |a - b| / max(|a|, |b|) at common steps; tolerances are per metric (loss 1%,
grad norm 5%, others 5%) since cross-device runs agree to ~1e-3 at the start (msprobe's API checks
ask for cosine > 0.99) and bitwise-deterministic runs match exactly. Reported as
``precision_mismatch`` with the step, the two values and the metric.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.diagnosis import decide, diagnose_run
from moeproxy.diagnose.robust import fmt
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, PRECISION_MISMATCH, Finding

PAIR_TOLERANCE: dict[str, float] = {"loss": 0.01, "grad_norm": 0.05, "policy_entropy": 0.05,
                                    "reward_mean": 0.05, "logprob_diff_mean": 0.25}


def compare_runs(a: RunSeries, b: RunSeries, label_a: str = "run", label_b: str = "reference",
                 min_records: int = 2) -> list[Finding]:
    findings: list[Finding] = []
    for canonical, tol in PAIR_TOLERANCE.items():
        fa, fb = a.resolve(canonical), b.resolve(canonical)
        if fa is None or fb is None:
            continue
        joined = pd.concat([fa[1], fb[1]], axis=1, join="inner").dropna()
        joined = joined[np.isfinite(joined.to_numpy()).all(axis=1)]
        if len(joined) < min_records:
            continue
        x, y = joined.iloc[:, 0].to_numpy(), joined.iloc[:, 1].to_numpy()
        scale = np.maximum(np.maximum(np.abs(x), np.abs(y)), 1e-12)
        rel = np.abs(x - y) / scale
        apart = rel > tol
        # first step from which most of the remaining common records stay apart
        for i in np.flatnonzero(apart):
            rest = apart[i:]
            if rest.sum() >= min(min_records, len(rest)) and rest.mean() >= 0.7:
                step = int(joined.index[i])
                findings.append(Finding(
                    PRECISION_MISMATCH, step, CRITICAL, fa[0], "pair_disagreement",
                    f"{fa[0]} of {label_a} and {label_b} should match but differ by {fmt(100 * rel[i])}% at "
                    f"step {step} ({fmt(x[i])} vs {fmt(y[i])}; tolerance {fmt(100 * tol)}%), and by a median "
                    f"{fmt(100 * float(np.median(rel[i:])))}% afterwards; before it, at most "
                    f"{fmt(100 * float(rel[:i].max()) if i else 0.0)}%"))
                break
    return findings


def diagnose_pair(frame: pd.DataFrame, reference: pd.DataFrame, config: DiagnoseConfig | None = None,
                  label: str = "run", reference_label: str = "reference") -> dict:
    """The run's own diagnosis plus the comparison with a run that should match it."""
    config = config or DiagnoseConfig()
    run, ref = RunSeries.from_frame(frame), RunSeries.from_frame(reference)
    own = diagnose_run(run, config)
    findings = [Finding(**f) for f in own["findings"]] + compare_runs(run, ref, label, reference_label)
    return decide(run, findings, config)
