"""Reward-collapse detector: the mean reward falls sharply (after rising) and stays down.

Rule (shared/research/logs-and-failures.md §2 row 6): a drop that stands out from the reward's
own noise (robust z) and gives back at least half of what the run had gained (or 20% of the
peak level when it never rose), lasting to the end or for several records. Recovered dips are
not collapse.
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt, head_level, tail_level
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.shifts import sustained_shift
from moeproxy.diagnose.taxonomy import CRITICAL, REWARD_COLLAPSE, Finding


@register_detector("reward_collapse", "reward falls sharply after rising and stays down")
def detect_reward_collapse(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    found = run.resolve("reward_mean")
    if found is None:
        return []
    name, r = found
    r = r[np.isfinite(r.to_numpy())]
    if len(r) <= cfg.min_history + 1:
        return []
    vals = r.to_numpy()
    smooth = r.rolling(max(3, len(r) // 20), min_periods=1, center=True).median().to_numpy()
    start = head_level(vals, share=0.05)
    peak_i = int(np.argmax(smooth))
    peak = float(smooth[peak_i])
    gain = peak - start
    need = max(cfg.reward_drop_fraction * gain, 0.2 * abs(peak), 1e-12)
    shift = sustained_shift(r, -1, delta=need, z=cfg.robust_z, min_history=cfg.min_history,
                            min_records=max(3, len(r) // 20))
    if shift is None:
        return []
    final = tail_level(vals)
    if shift.baseline - final < 0.8 * need:  # it came back: a dip, not a collapse
        return []
    return [Finding(REWARD_COLLAPSE, shift.onset_step, CRITICAL, name, "reward_drop",
                    f"{name} rose from {fmt(start)} to {fmt(peak)}, then fell from {fmt(shift.baseline)} "
                    f"to {fmt(shift.peak)} from step {shift.onset_step} and stayed down (last level "
                    f"{fmt(final)}; a drop of {fmt(need)} counts)")]
