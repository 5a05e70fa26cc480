"""Vanishing-gradient detector (secondary): the policy stops updating.

Rules (shared/research/logs-and-failures.md §2 row 9): grad norm below 1e-3 of its early median
(or exactly 0) for at least ``vanishing_min_records`` consecutive records through the end of the
run; learning rate exactly 0 after it was positive. Scattered zero grad norms are normal in GRPO
(groups whose rewards are all equal have no advantage) and are only noted, and so is a final run of
zeros in a run where zero was already the usual value.
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, INFO, VANISHING_GRADIENT, Finding
from moeproxy.diagnose.rules import declare

RULES = declare(VANISHING_GRADIENT, {
    "grad_norm_vanished": "grad norm ~0 for the rest of the run",
    "scattered_zero_grad": "grad norm ~0 on scattered GRPO steps (a note: normal)",
    "lr_zero": "learning rate 0 after being positive",
}, thresholds={"grad_norm_vanished": ("vanishing_fraction", "vanishing_min_records")})


def _tail_run(mask: np.ndarray) -> int:
    """Length of the run of True at the end of ``mask``."""
    if not mask.size or not mask[-1]:
        return 0
    false = np.flatnonzero(~mask)
    return int(mask.size - (false[-1] + 1 if false.size else 0))


# When most records before a final run of ~0 grad norms were ~0 already, zero is the run's usual value
# (GRPO windows whose groups all had equal rewards; a trainer that logs the last micro-step's norm),
# and the final run is no departure from it.
USUAL_ZERO_SHARE = 0.5


@register_detector("vanishing_gradient", "grad norm ~0 or lr 0 for the rest of the run")
def detect_vanishing_gradient(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    out: list[Finding] = []
    found = run.resolve("grad_norm")
    if found:
        name, s = found
        s = s[np.isfinite(s.to_numpy())]
        vals = s.to_numpy()
        positive = vals[vals > 0]
        if len(vals) > cfg.min_history and positive.size:
            early = float(np.median(positive[: max(3, positive.size // 10)]))
            tiny = vals <= cfg.vanishing_fraction * early
            run_len = _tail_run(tiny)
            need = max(min(cfg.vanishing_min_records, max(3, len(vals) // 4)), 0.1 * len(vals))
            before = tiny[: len(vals) - run_len]
            usual = before.size >= 3 and before.mean() > USUAL_ZERO_SHARE
            if run_len >= need and not usual:
                onset = int(s.index[len(vals) - run_len])
                out.append(Finding(VANISHING_GRADIENT, onset, CRITICAL, name, "grad_norm_vanished",
                                   f"{name} fell from a median of {fmt(early)} to <= {fmt(cfg.vanishing_fraction * early)} "
                                   f"at step {onset} and stayed there for the last {run_len} records"))
            elif tiny.sum():
                out.append(Finding(VANISHING_GRADIENT, int(s.index[int(np.argmax(tiny))]), INFO, name,
                                   "scattered_zero_grad",
                                   f"{int(tiny.sum())} records with {name} ~0 (e.g. GRPO groups with zero "
                                   f"reward variance): normal when scattered"))
    found = run.resolve("lr")
    if found:
        name, s = found
        vals = s[np.isfinite(s.to_numpy())]
        pos = np.flatnonzero(vals.to_numpy() > 0)
        if pos.size:
            after = vals.iloc[pos[0]:]
            zero_run = _tail_run(after.to_numpy() == 0)
            if zero_run >= cfg.vanishing_min_records:
                onset = int(after.index[len(after) - zero_run])
                out.append(Finding(VANISHING_GRADIENT, onset, CRITICAL, name, "lr_zero",
                                   f"{name} is exactly 0 from step {onset} after being positive"))
    return out
