"""Length-blowup detector (secondary): responses grow until they hit the length limit.

Rules (shared/research/logs-and-failures.md §2 row 8): the truncated share (clip ratio) rising
above 0.1 and staying there, or the mean response length doubling and staying up. A run where most
responses are truncated from the start gets a warning (the length limit is too short), not a verdict.
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt, head_level, tail_level
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.shifts import sustained_shift
from moeproxy.diagnose.taxonomy import CRITICAL, LENGTH_BLOWUP, WARNING, Finding


@register_detector("length_blowup", "response length doubles or truncation rises above 10%")
def detect_length_blowup(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    out: list[Finding] = []
    found = run.resolve("response_length_mean")
    if found:
        name, s = found
        s = s[np.isfinite(s.to_numpy())]
        shift = sustained_shift(s, +1, factor=cfg.length_factor, z=cfg.robust_z, min_history=cfg.min_history)
        if shift is not None and not shift.recovered:
            out.append(Finding(LENGTH_BLOWUP, shift.onset_step, CRITICAL, name, "length_rise",
                               f"{name} grew from a median of {fmt(shift.baseline)} to {fmt(shift.peak)} "
                               f"from step {shift.onset_step} and stayed up"))
    found = run.resolve("truncation_rate")
    if found:
        name, s = found
        s = s[np.isfinite(s.to_numpy())]
        if len(s) > cfg.min_history:
            start, end = head_level(s.to_numpy()), tail_level(s.to_numpy())
            if float(s.median()) > 0.5:
                out.append(Finding(LENGTH_BLOWUP, int(s.index[0]), WARNING, name, "truncation_high",
                                   f"{name} has a median of {fmt(float(s.median()))} (first {fmt(start)}, last "
                                   f"{fmt(end)}): most responses hit the length limit, so rewards and "
                                   f"advantages are computed on cut-off answers"))
            elif start < cfg.truncation_limit < end:
                shift = sustained_shift(s, +1, delta=cfg.truncation_limit / 2, z=cfg.robust_z,
                                        min_history=cfg.min_history)
                onset = shift.onset_step if shift else int(s.index[int(np.argmax(s.to_numpy() > cfg.truncation_limit))])
                out.append(Finding(LENGTH_BLOWUP, onset, CRITICAL, name, "truncation_rise",
                                   f"{name} rose from {fmt(start)} to {fmt(end)} (limit "
                                   f"{fmt(cfg.truncation_limit)}) from step {onset}"))
    return out
