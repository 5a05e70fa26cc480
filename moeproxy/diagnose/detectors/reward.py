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
    smooth = r.rolling(max(3, min(9, len(r) // 10)), min_periods=1, center=True).median().to_numpy()
    start = head_level(vals, share=0.05)
    peak_i = int(np.argmax(smooth))
    peak = float(smooth[peak_i])
    gain = peak - start
    need = max(cfg.reward_drop_fraction * gain, 0.2 * abs(peak), 1e-12)
    final = tail_level(vals)
    shift = sustained_shift(r, -1, delta=need, z=cfg.robust_z, min_history=cfg.min_history,
                            min_records=max(3, len(r) // 20))
    if shift is not None and shift.baseline - final >= 0.8 * need:
        return [Finding(REWARD_COLLAPSE, shift.onset_step, CRITICAL, name, "reward_drop",
                        f"{name} rose from {fmt(start)} to {fmt(peak)}, then fell from "
                        f"{fmt(shift.baseline)} to {fmt(shift.peak)} from step {shift.onset_step} "
                        f"and stayed down (last level {fmt(final)}; a drop of {fmt(need)} counts)")]
    # a rising reward makes the rolling median lag below the peak: also compare with the peak
    diffs = np.diff(vals)
    noise = (np.quantile(diffs, 0.75) - np.quantile(diffs, 0.25)) / 1.349 / np.sqrt(2) if diffs.size >= 4 else 0.0
    after = r.iloc[peak_i + 1:]
    if len(after) >= 2 and peak - final >= max(need, cfg.robust_z * noise):
        low = after.to_numpy() < peak - need / 2
        # the first record from which the reward stays below the bar (95% of what follows):
        # noisy dips below it before the decline are not the onset
        share_below_from = np.cumsum(low[::-1])[::-1] / np.arange(len(low), 0, -1)
        stays = np.flatnonzero(low & (share_below_from >= 0.95))
        if stays.size:
            onset = int(after.index[stays[0]])
            return [Finding(REWARD_COLLAPSE, onset, CRITICAL, name, "reward_below_peak",
                            f"{name} rose from {fmt(start)} to a peak of {fmt(peak)} (step "
                            f"{int(r.index[peak_i])}), then fell below {fmt(peak - need / 2)} at step "
                            f"{onset} and stayed down (last level {fmt(final)})")]
    return []
