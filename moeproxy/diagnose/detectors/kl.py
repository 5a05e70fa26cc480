"""KL-explosion detector (secondary): KL to the reference or new-vs-old KL grows by an order of
magnitude and stays up. PPO practice stops at ~1.5x a target of 0.01 (Spinning Up); here a
sustained 10x rise of new-vs-old KL above 0.05 is critical (shared/research/logs-and-failures.md §2
row 7). KL to the reference is 0 at the start by construction, so its first 10% is not a baseline
and only a rise above 0.1 counts.
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.shifts import sustained_shift
from moeproxy.diagnose.taxonomy import CRITICAL, KL_EXPLOSION, Finding


@register_detector("kl_explosion", "KL to reference or new-vs-old KL grows 10x and stays up")
def detect_kl_explosion(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    out: list[Finding] = []
    for canonical in ("ppo_kl", "kl"):
        found = run.resolve(canonical)
        if found is None:
            continue
        name, s = found
        s = s[np.isfinite(s.to_numpy())]
        floor = cfg.kl_floor
        if canonical == "kl":
            # KL to the reference starts at 0 (policy == reference) and grows by design: judge it
            # after the first 10% of the run, and only at a level that is large in absolute terms
            s = s.iloc[len(s) // 10:]
            floor = cfg.kl_ref_floor
        shift = sustained_shift(s, +1, factor=cfg.kl_factor, z=cfg.robust_z, min_history=cfg.min_history)
        if shift is None or shift.peak < floor:
            continue
        out.append(Finding(KL_EXPLOSION, shift.onset_step, CRITICAL, name, "kl_rise",
                           f"{name} rose from a median of {fmt(shift.baseline)} to {fmt(shift.peak)} "
                           f"({fmt(shift.peak / max(shift.baseline, 1e-12))}x) from step {shift.onset_step}"))
    return out
