"""KL blow-up detector: KL to the reference or new-vs-old KL explodes and stays up, which
shared/LABELS.md calls a divergence (the policy blew up). PPO practice stops at ~1.5x a target of
0.01 (Spinning Up); here a sustained 10x rise of new-vs-old KL above 0.05 is critical
(shared/research/logs-and-failures.md §2 row 7). KL to the reference is 0 at the start by
construction and grows by design: a climb from there counts when it rises ``kl_ref_blowup`` (100x)
over its early level to above ``kl_ref_runaway_floor`` (0.5 nat) and stays there (GRPO runs whose KL
to the reference climbs from ~0.001 to 0.1-0.3 while the reward holds are healthy); a sudden rise of
``kl_factor`` from a settled level counts above ``kl_ref_floor`` (0.1).
"""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import evidence as ev
from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt, head_level, holds_from, tail_level
from moeproxy.diagnose.series import RunSeries, few_records
from moeproxy.diagnose.shifts import sustained_shift
from moeproxy.diagnose.taxonomy import CRITICAL, DIVERGENCE, WARNING, Finding
from moeproxy.diagnose.rules import declare

thresholds(
    kl_factor=(10.0, "new-vs-old KL rise (times its early level) that counts, staying"),
    kl_ref_blowup=(100.0, "LABELS.md: KL to the reference x100 over its early level and staying"),
    kl_floor=(0.05, "new-vs-old KL (ppo_kl): ~1.5x a target of 0.01 is already large"),
    kl_ref_floor=(0.1, "KL to the reference grows from 0 by design; only large values count"),
    kl_ref_runaway_floor=(0.5, "KL to the reference that climbed from ~0 (policy = reference) counts as run away "
                               "only at this level by the end (nats; GRPO runs settle at 0.1-0.3 while they learn)"),
    ppo_kl_runaway_floor=(0.15, "new-vs-old KL whose level by the end is at least this (10x the ~0.015 PPO's early "
                                "stopping aims at) after a climb of kl_factor over its first records: runaway"),
    ppo_kl_ceiling=(1.0, "new-vs-old KL per update at or above this (20x the 0.05 PPO already stops at), from a "
                         "record on to the end at its median: every update leaves the trust region"),
)

RULES = declare(DIVERGENCE, {
    "kl_rise": "new-vs-old KL (or KL to the reference) 10x its median and staying",
    "kl_ref_blowup": "KL to the reference 100x its early level and staying",
    "ppo_kl_out_of_region": "new-vs-old KL at 1 nat or more per update, staying: no update stays in the trust region",
    "ppo_kl_spike": "new-vs-old KL at 1 nat or more for a few updates, then back: a warning unless a lasting change starts with it",
    "ppo_kl_runaway": "new-vs-old KL climbing (however slowly) to 10x its first records' level and 0.15 nat or more by the end",
    "ppo_kl_stretch": "new-vs-old KL at 1 nat or more for more than a few updates in a row: the policy blew up, even if it came back",
}, damage=("kl_rise", "kl_ref_blowup", "ppo_kl_out_of_region", "ppo_kl_runaway", "ppo_kl_stretch"), spike=("ppo_kl_spike",),
   thresholds={"kl_rise": ("kl_factor", "kl_floor", "kl_ref_floor"), "kl_ref_blowup": ("kl_ref_blowup", "kl_ref_runaway_floor"),
               "ppo_kl_out_of_region": ("ppo_kl_ceiling",), "ppo_kl_runaway": ("kl_factor", "ppo_kl_runaway_floor"), "ppo_kl_spike": ("ppo_kl_ceiling",),
               "ppo_kl_stretch": ("ppo_kl_ceiling", "spike_recover_records", "spike_log_share")})


@register_detector("kl_explosion", "KL to reference (x100) or new-vs-old KL (x10) explodes and stays up: divergence")
def detect_kl_explosion(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    out: list[Finding] = []
    for canonical in ("ppo_kl", "kl"):
        found = run.resolve(canonical)
        if found is None:
            continue
        name, s = found
        s = s[np.isfinite(s.to_numpy())]
        floor = cfg.kl_floor
        if canonical == "ppo_kl":
            hit = _out_of_trust_region(name, s, cfg)
            if hit is not None:
                out.append(hit)
                continue
            out += _trust_region_spikes(name, s, cfg)
            # a climb too slow for a shift to stand out (0.008 -> 0.09 -> 0.4 over the run)
            hit = _runaway_from_start(name, s, cfg, cfg.kl_factor, cfg.ppo_kl_runaway_floor, "ppo_kl_runaway",
                                      "the policy moves ever further per update")
            if hit is not None:
                out.append(hit)
                continue
        if canonical == "kl":
            hit = _runaway_from_start(name, s, cfg, cfg.kl_ref_blowup, cfg.kl_ref_runaway_floor, "kl_ref_blowup",
                                      "the policy ran away from the reference")
            if hit is not None:
                out.append(hit)
                continue
            # KL to the reference starts at 0 (policy == reference) and grows by design: judge it
            # after the first 10% of the run, and only at a level that is large in absolute terms
            s = s.iloc[len(s) // 10:]
            floor = cfg.kl_ref_floor
        shift = sustained_shift(s, +1, factor=cfg.kl_factor, z=cfg.robust_z, visible=cfg.onset_visible_share, min_history=cfg.min_history)
        if shift is None or shift.peak < floor:
            continue
        if float(np.median(s[s.index >= shift.onset_step].to_numpy())) < floor:
            # LABELS.md: a KL that rises slowly and settles low is no blow-up (a spike is not its level);
            # a new-vs-old KL settling at PPO's usual 0.01-0.03 after tiny first updates is training
            continue
        base = ev.baseline(s, shift, positive=True)
        after = float(np.median(s[s.index >= shift.onset_step].to_numpy()))
        if after < cfg.kl_factor * ev.median_value(base):
            # "10x its median and staying": the level from the rise on, not one record's peak (a
            # KL that spikes and comes back to a few times its early level has not run away)
            continue
        level = ev.median_of(base, ev.baseline(s, shift))
        out.append(Finding(DIVERGENCE, shift.onset_step, CRITICAL, name, "kl_rise",
                           f"{name} rose {ev.move(s, shift.onset_step)}, peak {ev.rec(s, shift.peak_step)} "
                           f"({ev.ratio(shift.peak, ev.median_value(base))} the {level} before the rise)"))
    return out


def _trust_region_spikes(name: str, s, cfg: DiagnoseConfig) -> list[Finding]:
    """Each stretch of updates whose new-vs-old KL is at ``ppo_kl_ceiling`` or more and then comes
    back: updates that left the trust region. A warning; verdict.py makes it the cause when a lasting
    change (the reward falling for good) starts with it: the update that broke the policy."""
    vals = s.to_numpy(dtype=float)
    out = []
    above = vals >= cfg.ppo_kl_ceiling
    starts = np.flatnonzero(above & ~np.r_[False, above[:-1]])
    # LABELS.md: a spike that recovers "within a few records" is healthy (a few, as the loss's and grad
    # norm's spikes count them)
    few = few_records(len(vals), cfg.spike_recover_records, cfg.spike_log_share)
    for i in starts:
        j = i
        while j + 1 < len(vals) and above[j + 1]:
            j += 1
        top = i + int(np.argmax(vals[i:j + 1]))
        n = j - i + 1
        shown = (f"{name} at {ev.rec(s, int(s.index[i]))}, peak {ev.rec(s, int(s.index[top]))}, "
                 f"{n} update(s) in a row at or above {fmt(cfg.ppo_kl_ceiling)} nat")
        if n >= few:
            out.append(Finding(DIVERGENCE, int(s.index[i]), CRITICAL, name, "ppo_kl_stretch",
                               f"{shown} (more than a few: {few} or more), then back: the policy blew up"))
        else:
            out.append(Finding(DIVERGENCE, int(s.index[i]), WARNING, name, "ppo_kl_spike", f"{shown}, then back"))
    return out


def _out_of_trust_region(name: str, s, cfg: DiagnoseConfig) -> Finding | None:
    """New-vs-old KL at ``ppo_kl_ceiling`` or more from a record on, at its median to the end (and
    that record's value): every update moves the policy far outside the region PPO's clipping is
    meant to keep it in, however early that starts (a run blown up from its first update has no
    early level to rise from)."""
    vals = s.to_numpy(dtype=float)
    above = np.flatnonzero(vals >= cfg.ppo_kl_ceiling)
    if not above.size:
        return None
    i = int(above[0])  # the first record out of the region; later ones have less of the run behind them
    if len(vals) - i <= cfg.min_history or float(np.median(vals[i:])) < cfg.ppo_kl_ceiling:
        return None
    onset = int(s.index[i])
    return Finding(DIVERGENCE, onset, CRITICAL, name, "ppo_kl_out_of_region",
                   f"{name} at {ev.rec(s, onset)} and a {ev.median_of(s[s.index >= onset])} from "
                   f"there (at or above {fmt(cfg.ppo_kl_ceiling)} nat per update, 20x where PPO already "
                   f"stops): every update leaves the trust region")


def _runaway_from_start(name: str, s, cfg: DiagnoseConfig, factor: float, floor: float, rule: str,
                        meaning: str) -> Finding | None:
    """A KL ``factor`` times its early level (the first records: for KL to the reference, where the
    policy is still the reference) by the end of the run, and at ``floor`` or more: dated from the
    first record at ``kl_factor`` times the early level from which it stays above it."""
    vals = s.to_numpy(dtype=float)
    pos = vals[vals > 0]
    if len(vals) <= cfg.min_history or pos.size < 3:
        return None
    start = head_level(pos, share=0.05, minimum=2)
    # a blow-up already under way within that twentieth (a VAE's KL term 0.39, 4.9, 51, 156, ...):
    # the first records are the early level it left
    start = min(start, float(np.median(pos[:cfg.min_history])))
    end = tail_level(vals)
    if not (start > 0 and end >= factor * start and end >= floor):
        return None
    stays = holds_from(vals >= cfg.kl_factor * start, 1.0)
    if not stays.size:
        return None
    onset = int(s.index[stays[0]])
    early = ev.head(s[s > 0], share=0.05, minimum=2)
    return Finding(DIVERGENCE, onset, CRITICAL, name, rule,
                   f"{name} rose {ev.move(s, onset)} and stayed above {fmt(cfg.kl_factor)}x its early level from there; "
                   f"{ev.median_of(early)}{' (positive records only)' if (s.loc[:early.index[-1]] <= 0).any() else ''} "
                   f"vs {ev.median_of(ev.tail(s))} ({fmt(end / start)}x): {meaning}")
