"""Overflow detector: non-finite loss/grad values, loss-scale collapse, skipped/NaN iterations
beyond the fp16 loss-scale search at start-up, and values saturated at the dtype maximum.

Rules (shared/research/logs-and-failures.md §2 row 1): any non-finite value in a loss/grad key
is critical (the first step and key are reported); bf16 runs need no scaler, so any skipped or
NaN iteration is critical; fp16 runs start with a loss-scale search (2^32 halved on every
skipped step) that is not a failure, and afterwards an isolated skip is ordinary dynamic
scaling, but >= 3 halvings within the loss-scale window or reaching the minimum scale (1.0) is a
collapse; Ascend saturation mode produces no inf, only |x| at the fp16 maximum (65504) or huge
values (msprobe's 1e10 alarm). Megatron drops a NaN loss from its line: a complete record without
the loss (and without a skipped iteration) is read as a NaN loss.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from moeproxy.diagnose import evidence as ev
from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt
from moeproxy.diagnose.semantics import dropped_to_zero, fractional_epochs, loss_printed_zero_throughout, startup_end_step
from moeproxy.vocabulary import is_validation_loss
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, INFO, OVERFLOW, WARNING, Finding
from moeproxy.diagnose.rules import declare

thresholds(
    saturation_abs=(1e10, "msprobe AnomalyNan magnitude threshold"),
    fp16_max=(65504.0, "the largest finite fp16 value: a loss or grad norm above it cannot be fp16"),
    dtype_max_floor=(3.38e38, "bf16's largest finite value is 3.3895e38, fp32's 3.4028e38: a value at or above "
                              "this was clamped to its dtype's maximum (saturation mode), not computed"),
    loss_scale_window=(1000, "Megatron default: growth/halving window (iterations)"),
    loss_scale_collapse_halvings=(3, "halvings of the loss scale below its start-up search that make a collapse"),
    loss_scale_collapse_records=(5, "... within this many of the run's logged steps (halvings tens of steps apart, "
                                    "each an occasional overflow the scaler grows back from, are no collapse)"),
    storm_records=(3, "consecutive iterations skipped for overflow after start-up: a storm"),
    skipped_share=(0.25, "non-finite grad norms (or DeepSpeed's skipped steps) on more records (steps) than this "
                         "are no longer occasional"),
    startup_skip_records=(5, "... back to back only within this many first records (a scaler's start-up search)"),
    scattered_nonfinite_share=(0.02, "non-finite loss records mid-run, each alone or in a pair with finite records "
                                     "after it, on at most this share of the records: spikes that did not last"),
    converged_share=(0.01, "a loss already below this share of its median before it printed 0.0 converged"),
    zero_loss_records=(2, "a loss exactly 0 to the end after being positive, for this many records"),
)

RUNNING_SKIPPED = "deepspeed/skipped_total"  # the megatron reader's name for DeepSpeed's running count

RULES = declare(OVERFLOW, {
    "nonfinite_value": "loss or grad norm inf/NaN after being finite (or the loss from its first record)",
    "lone_nonfinite": "one non-finite record mid-run, finite from the next on, or a few scattered such (each alone or "
                      "in a pair, finite records after it): spikes that did not last",
    "saturated_value": "a value at the fp16 (or bf16 / fp32) maximum: saturation mode's overflow (msprobe's 1e10 alarm: noted only)",
    "loss_scale_min": "the fp16 loss scale driven to its minimum",
    "loss_scale_collapse": "the fp16 loss scale halving far below its start-up search",
    "skipped_iters_bf16": "skipped iterations in a run without a loss scale (bf16: never expected)",
    "nan_iters_bf16": "NaN iterations in a run without a loss scale",
    "nan_iters_fp16": "NaN iterations counted by an fp16 run",
    "skipped_iters_fp16": "iterations skipped by the fp16 scaler (a note: the scaler's search)",
    "overflow_storm": "an iteration skipped for overflow on (nearly) every logged iteration",
    "loss_vanished": "the loss stops being printed (Megatron leaves NaN iterations out)",
    "loss_zero_nan_filter": "the loss printed as exactly 0 where a NaN filter zeroes it",
    "nan_filtered_from_start": "the loss printed 0 in every record and the validation loss NaN: non-finite from the start",
    "fp16_startup_search": "the fp16 loss-scale search at start-up (not a failure)",
    "nonfinite_lasting": "another logged metric inf/NaN from one record to the last, after being finite",
}, decisive=("nonfinite_value", "overflow_storm", "loss_scale_min", "saturated_value"), spike=("lone_nonfinite",),
   # a storm is the mechanism of the loss printed with it; a scaler that halves a few times and
   # settles is what a loss spike looks like from the scaler's side: downstream of divergence
   chain={"overflow_storm": 1.5, "loss_scale_collapse": 3.5},
   thresholds={"saturated_value": ("saturation_abs", "fp16_max", "dtype_max_floor", "tie_records", "grad_blowup_factor"),
               "loss_scale_collapse": ("loss_scale_window", "loss_scale_collapse_halvings", "loss_scale_collapse_records",
                                       "startup_min_scale"),
               "fp16_startup_search": ("startup_min_scale",), "overflow_storm": ("storm_records", "skipped_share"),
               "skipped_iters_bf16": ("skipped_share",),
               "nonfinite_value": ("skipped_share", "startup_skip_records"), "lone_nonfinite": ("tie_records", "scattered_nonfinite_share"), "nonfinite_lasting": ("tie_records", "large_spike"), "loss_zero_nan_filter": ("zero_loss_records", "converged_share")})

_VALIDATION_TOKENS = frozenset({"val", "eval", "test", "validation", "val-core", "val-aux"})


def is_numeric_health_key(name: str) -> bool:
    """Loss and gradient keys (plus entropy/KL, which go non-finite with them); not validation,
    not the loss scale itself."""
    low = name.lower()
    if _VALIDATION_TOKENS.intersection(re.split(r"[/_\s:]+", low)) or low.startswith("val"):
        return False
    if "scale" in low or "coef" in low or low.endswith("lr"):
        return False
    return ("loss" in low or "grad_norm" in low or "grad norm" in low or "grad-norm" in low
            or low in ("policy_entropy", "kl", "ppo_kl"))


def _records_before(series: pd.Series, step: int, last: int = 20) -> pd.Series:
    """The (up to ``last``) finite records before ``step``: the level a jump is measured from."""
    prior = series[series.index < step]
    return prior[np.isfinite(prior.to_numpy())].tail(last)


def _loss_scale_findings(run: RunSeries, cfg: DiagnoseConfig, start_end: int | None) -> list[Finding]:
    found = run.resolve("loss_scale")
    if found is None:
        return []
    name, scale = found[0], found[1].dropna()
    if not (scale > 1).any():
        return []
    steps, values = scale.index.to_numpy(), scale.to_numpy()
    out: list[Finding] = []
    floor_hits = np.flatnonzero(values <= 1.0)
    if floor_hits.size:
        j = int(floor_hits[0])
        i = j
        while i > 0 and (values[i - 1] > values[i]
                         or (values[i - 1] == values[i] and i > 1 and values[i - 2] > values[i - 1])):
            i -= 1
        i = min(i + 1, j)  # the first record that shows a halving
        if start_end is not None and steps[i] <= start_end:
            i = 0
        out.append(Finding(OVERFLOW, int(steps[i]), CRITICAL, name, "loss_scale_min",
                           f"{name} fell from {fmt(values[max(i - 1, 0)])} at step {int(steps[max(i - 1, 0)])} "
                           f"to the minimum {fmt(values[j])} at step {int(steps[j])}: overflows persist even "
                           f"without scaling"))
        return out
    post = steps > (start_end if start_end is not None else steps[0] - 1)
    need = 2.0 ** cfg.loss_scale_collapse_halvings
    window = min(cfg.loss_scale_window, cfg.loss_scale_collapse_records * run.step_gap)
    for j in np.flatnonzero(post):
        if j == 0 or values[j] >= values[j - 1]:
            continue
        in_window = (steps >= steps[j] - window) & (steps <= steps[j]) & post
        cand = np.flatnonzero(in_window)
        top = cand[int(np.argmax(values[cand]))]
        if values[top] / values[j] >= need:
            first_drop = next(k for k in range(top + 1, j + 1) if values[k] < values[k - 1])
            out.append(Finding(OVERFLOW, int(steps[first_drop]), CRITICAL, name, "loss_scale_collapse",
                               f"{name} halved {int(round(np.log2(values[top] / values[j])))} times "
                               f"within {int(steps[j] - steps[top])} steps ({fmt(values[top])} at step "
                               f"{int(steps[top])} -> {fmt(values[j])} at step {int(steps[j])}), beyond the "
                               f"start-up search"))
            break
    return out


def _counter_findings(run: RunSeries, cfg: DiagnoseConfig, start_end: int | None, fp16: bool) -> list[Finding]:
    out: list[Finding] = []
    for canonical in ("nan_iters", "skipped_iters"):
        found = run.resolve(canonical)
        if found is None and canonical == "skipped_iters" and run.get(RUNNING_SKIPPED) is not None:
            # DeepSpeed's engine line counts the skipped steps since the start (``step=20,
            # skipped=20``): the steps skipped since the record before (a restart starts it again)
            total = run.get(RUNNING_SKIPPED).dropna()
            steps = float(total.index[-1]) if len(total) else 0.0
            # an fp16 scaler's start-up search skips a few steps of every run: only a count that
            # grows with the run (over ``skipped_share`` of its steps) is evidence
            if len(total) and steps > 0 and float(total.iloc[-1]) >= cfg.skipped_share * steps:
                found = RUNNING_SKIPPED, total.diff().fillna(total).clip(lower=0)
        if found is None:
            continue
        name, counts = found
        counts = counts.dropna()
        if start_end is not None:
            counts = counts[counts.index > start_end]
        hits = counts[counts > 0]
        if hits.empty:
            continue
        first, total = int(hits.index[0]), float(hits.sum())
        where = " after the fp16 loss-scale search" if start_end is not None else ""
        if not fp16:
            out.append(Finding(OVERFLOW, first, CRITICAL, name, f"{canonical}_bf16",
                               f"{name} = {fmt(hits.iloc[0])} at step {first}{where} "
                               f"(a total of {fmt(total)} in {len(hits)} records); a run without loss scaling "
                               f"should skip none"))
        elif canonical == "nan_iters":
            sev = CRITICAL if len(hits) >= 2 else WARNING
            out.append(Finding(OVERFLOW, first, sev, name, "nan_iters_fp16",
                               f"{name} = {fmt(hits.iloc[0])} at step {first}{where} "
                               f"(a total of {fmt(total)} NaN iterations in {len(hits)} records)"))
        else:
            out.append(Finding(OVERFLOW, first, INFO, name, "skipped_iters_fp16",
                               f"a total of {fmt(total)} skipped iterations in {len(hits)} records from step "
                               f"{first}{where}: ordinary fp16 dynamic loss scaling unless the "
                               f"scale collapses"))
    return out


def _value_findings(run: RunSeries, cfg: DiagnoseConfig, start_end: int | None, fp16: bool) -> list[Finding]:
    out: list[Finding] = []
    read_as_loss = run.aliases.get("loss")  # the training loss the data stage found under another name
    for name, series in run.matching(lambda n: is_numeric_health_key(n) or n == read_as_loss):
        s = series if start_end is None else series[series.index > start_end]
        vals = s.to_numpy()
        bad = np.flatnonzero(~np.isfinite(vals))
        if bad.size:
            j = int(bad[0])
            step = int(s.index[j])
            isolated = j + 1 < len(vals) and np.isfinite(vals[j + 1:]).all() and bad.size == 1
            grad_key = "grad" in name.lower()
            sev = WARNING if (fp16 and grad_key and isolated) else CRITICAL
            note = " (an isolated skipped fp16 step)" if sev == WARNING else ""
            if sev == CRITICAL and grad_key and not fp16 and _skipped_steps(vals, run, cfg):
                sev, note = WARNING, (" (each followed by a finite record, the loss finite throughout: "
                                      "steps skipped by dynamic loss scaling, not applied)")
            prior = _records_before(series, step)
            # LABELS.md root cause 1: anomalies that last. One non-finite record mid-run, every record
            # after it finite (at least the tie window of them): it did not last; a spike that is the
            # cause only if a lasting change starts with it
            lone = sev == CRITICAL and len(prior) > 0 and (
                (isolated and len(vals) - j - 1 >= cfg.tie_records) or _scattered(vals, bad, cfg))
            lead = (f"{name} went from {ev.rec(prior, prior.index[-1])} (a median of {fmt(float(prior.median()))} "
                    f"over {ev.steps_of(prior.index)}) to {fmt(vals[j])} at step {step}"
                    if len(prior) else f"{name} is {fmt(vals[j])} at step {step}, its first record")
            if lone:
                why = (f"the only non-finite record of {len(vals)}, finite from the next record on "
                       f"({ev.rec(s, s.index[j + 1])}): it did not last" if bad.size == 1 else
                       f"{bad.size} non-finite of {len(vals)} records (at steps "
                       f"{', '.join(str(int(s.index[b])) for b in bad[:6])}), each alone or in a pair with finite "
                       f"records after it, the last {len(vals) - 1 - int(bad[-1])} finite: spikes that did not last")
                out.append(Finding(OVERFLOW, step, WARNING, name, "lone_nonfinite", f"{lead}; {why}"))
            else:
                out.append(Finding(OVERFLOW, step, sev, name, "nonfinite_value",
                                   f"{lead}; {bad.size} non-finite of {len(vals)} records{note}"))
            vals = vals[:j]  # saturation before the first non-finite value still counts
        with np.errstate(invalid="ignore"):
            mag = np.abs(vals)
            near_max = (mag >= cfg.fp16_max * 0.999) & (mag <= cfg.fp16_max * 1.001)
            at_dtype_max = mag >= cfg.dtype_max_floor  # bf16 / fp32 maxima: clamped
            huge = mag >= cfg.saturation_abs
            if near_max.any() and (mag[int(np.flatnonzero(near_max)[0]) + 1:] > cfg.fp16_max * 1.001).any():
                # values past the fp16 maximum later on were not clamped to it: the series passed
                # through 65504 on its way up (a critic's loss growing without bound), no saturation
                near_max[:] = False
            near_max |= at_dtype_max
        sat = np.flatnonzero(near_max | huge)
        if sat.size and not near_max[int(sat[0])] and _scale_or_climb(mag, int(sat[0]), cfg):
            sat = np.empty(0, int)
        if sat.size:
            j = int(sat[0])
            step = int(s.index[j])
            why = ("a bf16 / fp32 maximum" if mag[j] >= cfg.dtype_max_floor
                   else f"the fp16 maximum, limit {fmt(cfg.fp16_max)}" if near_max[j]
                   else f"above the alarm limit {fmt(cfg.saturation_abs)}")
            prior = _records_before(series, step)
            # LABELS.md: a single spike that recovers is not a failure. One huge record (not the
            # fp16 maximum itself, saturation mode's signature) with the records after it back
            # below the alarm limit is a spike: a warning
            after = mag[j + 1:j + 1 + cfg.tie_records]
            lone = (sat.size == 1 and not near_max[j] and len(after) == cfg.tie_records
                    and bool((after < cfg.saturation_abs).all()) and not bad.size)
            # LABELS.md: overflow is numbers leaving the representable range. A finite 1e10 (msprobe's
            # alarm) has not: on its own it is a value blown up, which the divergence rules read by its
            # growth and whether it lasts; noted here, never the verdict (it was decisive in 4 real logs,
            # all of them labelled divergence). Only a value clamped to a dtype's maximum is saturation.
            clamped = bool(near_max[j])
            tail = ("saturation-mode overflow produces no non-finite value" if clamped
                    else "one record, the next ones back below the limit: a spike" if lone
                    else "finite, so no overflow by itself: a blow-up, if it grew and lasted")
            out.append(Finding(OVERFLOW, step, CRITICAL if clamped else WARNING, name, "saturated_value",
                               f"{name} reached {fmt(vals[j])} at step {step} ({why}; "
                               f"{ev.median_of(prior) if len(prior) else 'no record'} before): {tail}"))
    return out




def _scattered(vals: np.ndarray, bad: np.ndarray, cfg: DiagnoseConfig) -> bool:
    """Non-finite records scattered mid-run (YOLOv5's NaN epochs 167, 176 and 177 of 300): each run of
    them at most ``tie_records`` long, finite records after each, at least ``tie_records`` finite at the
    end, and no more than ``scattered_nonfinite_share`` of the records: LABELS.md's anomalies that
    recover within a few records, not ones that last."""
    if bad.size < 2 or bad.size > cfg.scattered_nonfinite_share * len(vals):
        return False
    if len(vals) - 1 - int(bad[-1]) < cfg.tie_records:
        return False
    runs = np.split(bad, np.flatnonzero(np.diff(bad) > 1) + 1)
    return all(len(r) <= cfg.tie_records for r in runs)


def _search_events_end(run: RunSeries, events, cfg: DiagnoseConfig) -> float:
    """Where no loss scale is logged on the step lines: the overflow events that open the run on
    consecutive steps, the scale they fell to (where printed) still at ``startup_min_scale`` or more,
    and then a pause are the scaler's start-up search (LABELS.md: "the scale halves a few times,
    then holds"). The last step of that search, or -inf when there is none."""
    steps = events[events > 0].index.to_numpy()
    if not steps.size or steps[0] > run.first_step + run.step_gap:
        return float("-inf")
    k = 0
    while k + 1 < steps.size and steps[k + 1] - steps[k] <= run.step_gap:
        k += 1
    if k + 1 == steps.size:  # skipping on every step to the end: no search, a storm from the start
        return float("-inf")
    scale = run.get("deepspeed/reduced_loss_scale")
    if scale is not None:
        during = scale[(scale.index >= steps[0]) & (scale.index <= steps[k])].dropna()
        if len(during) and float(during.min()) < cfg.startup_min_scale:
            return float("-inf")
    return float(steps[k])


def _storm_findings(run: RunSeries, cfg: DiagnoseConfig, start_end: int | None) -> list[Finding]:
    """An overflow storm: DeepSpeed's ``OVERFLOW! ... Skipping step`` (or a skipped-iterations count)
    on ``storm_records`` or more consecutive logged iterations after the start-up search. fp16
    dynamic scaling skips one step now and then; skipping every step means the gradients overflow
    at any scale the scaler tries."""
    for name in ("deepspeed/overflow", *(f[0] for f in [run.resolve("skipped_iters")] if f)):
        s = run.get(name)
        if s is None:
            continue
        s = s.dropna()
        if name == "deepspeed/overflow" and _running_count_calm(run, start_end, cfg):
            continue
        if name == "deepspeed/overflow":
            # an event is logged only where it happened: the steps the run logged without one were
            # not skipped (six events over 200 logged steps are no storm)
            logged = [run.get(n).index for n in run.names if not n.startswith("deepspeed/")]
            if logged:
                steps = s.index.union(np.unique(np.concatenate([i.to_numpy() for i in logged])))
                s = s.reindex(steps, fill_value=0.0)
        after = start_end if start_end is not None or name != "deepspeed/overflow" else _search_events_end(run, s, cfg)
        searched = after is not None and after != float("-inf")
        if searched:
            s = s[s.index > after]
        flags = s.to_numpy() > 0
        steps = s.index.to_numpy()
        k = 0
        while k < len(flags):
            if not flags[k]:
                k += 1
                continue
            j = k
            while j + 1 < len(flags) and (flags[j + 1] or (j + 2 < len(flags) and flags[j + 2])):
                j += 1
            count = int(flags[k:j + 1].sum())
            if count >= cfg.storm_records:
                return [Finding(OVERFLOW, int(steps[k]), CRITICAL, name, "overflow_storm",
                                f"{name}: {count} of the {j - k + 1} logged iterations over steps {int(steps[k])}-"
                                f"{int(steps[j])} were skipped for overflow"
                                + (" (after the start-up search)" if searched else ""))]
            k = j + 1
    return []




def _running_count_calm(run: RunSeries, start_end: int | None, cfg: DiagnoseConfig) -> bool:
    """DeepSpeed's running count of skipped steps (``step=2000, skipped=8``), logged at two records or
    more after start-up, grew by less than ``skipped_share`` of the steps between each two, or (eight
    records or more) over the whole run and over its last quarter: the scaler probed a higher scale
    now and then and dropped back (dynamic loss scaling at work), or got over a burst. Its
    ``OVERFLOW!`` lines carry no step, so the reader numbers them one after another; the count says
    how far apart they were."""
    total = run.get(RUNNING_SKIPPED)
    if total is None:
        return False
    total = total.dropna()
    if start_end is not None:
        total = total[total.index >= start_end]
    if len(total) < 2:
        return False
    values, at = total.to_numpy(dtype=float), total.index.to_numpy(dtype=float)
    grew, steps = np.diff(values), np.diff(at)
    if np.all(grew < cfg.skipped_share * steps):
        return True
    # a burst the scaler got over (three steps skipped in ten mid-run, then the scale grows back
    # for hundreds of steps): over the whole run, and over its last quarter, the count grew by less
    # than that share of the steps (LABELS.md: anomalies that last)
    q = len(values) // 4  # (a last quarter of two records at least)
    return bool(q >= 2 and values[-1] - values[0] < cfg.skipped_share * (at[-1] - at[0])
                and values[-1] - values[-q] < cfg.skipped_share * (at[-1] - at[-q]))


def _skipped_steps(grad: np.ndarray, run: RunSeries, cfg: DiagnoseConfig) -> bool:
    """Scattered non-finite grad norms that the loss never follows: each is followed by a finite
    record and the loss stays finite, so the updates were skipped (fp16 AMP's GradScaler, or a
    trainer that drops non-finite steps), not applied - when training goes on after them (a norm
    frozen at one value from the first non-finite record on is no skipped step)."""
    bad = ~np.isfinite(grad)
    # back to back only in the first records: a scaler's start-up search skips several steps in a row
    together = np.flatnonzero(bad[:-1] & bad[1:])
    if not bad.any() or bad[-1] or bad.mean() > cfg.skipped_share or (together >= cfg.startup_skip_records).any():
        return False
    after = grad[int(np.flatnonzero(bad)[0]) + 1:]
    if np.ptp(after[np.isfinite(after)]) == 0:
        return False  # the norm sits at one value from there on (exactly 0): no training went on after it
    loss = run.resolve("loss")
    return loss is not None and bool(np.isfinite(loss[1].to_numpy()).all())


def _vanished_loss_findings(run: RunSeries, start_end: int | None) -> list[Finding]:
    """Megatron-style lines print the loss only when it is finite (>= 0): a record that has the
    loss scale but no loss, and skipped no iteration, had a NaN loss."""
    found, scale = run.resolve("loss"), run.resolve("loss_scale")
    if found is None or scale is None:
        return []
    name, loss = found
    skipped = run.resolve("skipped_iters")
    present = set(loss.index.tolist())
    first_loss = int(loss.index[0])
    for step in scale[1].index:
        step = int(step)
        if step <= first_loss or step in present or (start_end is not None and step <= start_end):
            continue
        if skipped is not None and step in skipped[1].index and skipped[1].loc[step] > 0:
            continue  # a skipped fp16 iteration carries no loss either
        return [Finding(OVERFLOW, step, CRITICAL, name, "loss_vanished",
                        f"{name} is missing from the record at step {step} (last value "
                        f"{ev.rec(loss, loss.index[loss.index < step][-1])}) while the line is otherwise "
                        f"complete and skipped nothing: Megatron prints only finite losses, so it was NaN")]
    return []




def _nan_filtered_from_start(run: RunSeries) -> list[Finding]:
    """LABELS.md "the training loss itself non-finite from the very first record, with the run
    otherwise going on (validation NaN too)": HF Trainer prints a window of NaN losses as 0.0, so a
    loss of exactly 0 in every record beside a validation loss that is non-finite in every record
    is a computation that overflowed from the start."""
    if not loss_printed_zero_throughout(run):
        return []
    for name, s in run.matching(is_validation_loss):
        v = s.to_numpy(dtype=float)
        if v.size and not np.isfinite(v).any():
            loss_name, loss = run.resolve("loss")
            first = int(loss.index[0])
            return [Finding(OVERFLOW, first, CRITICAL, loss_name, "nan_filtered_from_start",
                            f"{loss_name} is exactly 0 in all {len(loss)} records and {name} is non-finite in all "
                            f"{v.size} of its records: HF Trainer prints 0.0 for a window of NaN losses, so the "
                            f"computation overflowed from step {first}")]
    return []


def _zero_loss_findings(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """HF Trainer's ``logging_nan_inf_filter`` (on by default) leaves NaN/inf step losses out of the
    logged average; when every step of a logging window was non-finite nothing is left and it logs
    a loss of exactly 0.0. A loss that was positive and is exactly 0 on every record to the end is
    such a run. Not in RL, where a zero loss is a group whose rewards were all equal; and only in a
    log that carries the Trainer's fractional epoch (``'epoch': 0.62``): a loss a trainer without
    that filter prints as exactly 0 epoch after epoch (Keras' ``loss: 0.0000e+00``) is 0, no update
    (LABELS.md: losses repeating exactly)."""
    if run.is_rl or not fractional_epochs(run):
        return []
    found = run.resolve("loss")
    if found is None:
        return []
    name, loss = found
    # (a loss that converged and then printed as 0.0 is not the filter: a NaN-filtered window drops to
    # 0 from where the loss was)
    dropped = dropped_to_zero(loss, int(cfg.zero_loss_records), cfg.converged_share)
    if dropped is None:
        return []
    step, before = dropped
    tail = int((loss.index >= step).sum())
    return [Finding(OVERFLOW, step, CRITICAL, name, "loss_zero_nan_filter",
                    f"{name} went from {ev.rec(loss, before)} to exactly 0 at step {step} and stayed 0 for the "
                    f"last {tail} records: HF Trainer logs 0.0 when every step loss of a logging window was NaN "
                    f"or infinite")]


def _lasting_nonfinite_findings(run: RunSeries, cfg: DiagnoseConfig, start_end: int | None) -> list[Finding]:
    """A metric other than the loss and grad norm (a running normaliser, a Q estimate, a reward
    statistic) that was finite and then reads inf/NaN on every record to the last: the numbers left
    the representable range and stayed out (LABELS.md overflow), whatever the metric is called.
    One that comes back is not this (it did not last); a metric never finite was never computed."""
    out: list[Finding] = []
    found = run.resolve("loss")
    loss = found[1].dropna() if found is not None else None

    def loss_blown_up(step: int) -> bool:
        """The training loss at this record already far above its level (a perplexity, exp of a loss
        of 1e7, is inf): the non-finite metric follows the loss's blow-up, it is not its cause."""
        if loss is None:
            return False
        upto = loss[loss.index <= step]
        if len(upto) < 2 or not np.isfinite(upto.iloc[-1]):
            return False
        prior = upto.iloc[:-1][np.isfinite(upto.iloc[:-1].to_numpy())].tail(20)
        return len(prior) > 0 and abs(float(upto.iloc[-1])) >= cfg.large_spike * abs(float(prior.median()))

    for name in run.names:
        if is_numeric_health_key(name) or "scale" in name.lower() or name.lower().startswith(("val", "eval", "test")):
            continue
        s = run.get(name)
        if start_end is not None:
            s = s[s.index > start_end]
        vals = s.to_numpy(dtype=float)
        bad = ~np.isfinite(vals)
        if not bad.any():
            continue
        j = int(np.flatnonzero(bad)[0])
        if (j <= cfg.tie_records or not bad[j:].all() or len(vals) - j <= cfg.tie_records
                or loss_blown_up(int(s.index[j]))):
            continue
        prior = _records_before(s, int(s.index[j]))
        out.append(Finding(OVERFLOW, int(s.index[j]), CRITICAL, name, "nonfinite_lasting",
                           f"{name} went from {ev.rec(prior, prior.index[-1])} (a median of "
                           f"{fmt(float(prior.median()))} over {ev.steps_of(prior.index)}) to {fmt(vals[j])} at step "
                           f"{int(s.index[j])} and stayed non-finite in all {len(vals) - j} records to the last"))
    return out


@register_detector("overflow", "non-finite loss/grad, loss-scale collapse, skipped/NaN iterations, saturation")
def detect_overflow(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    start_end = startup_end_step(run, cfg)
    found = run.resolve("loss_scale")
    fp16 = bool(found is not None and (found[1].dropna() > 1).any())
    findings = _value_findings(run, cfg, start_end, fp16)
    findings += _loss_scale_findings(run, cfg, start_end)
    findings += _counter_findings(run, cfg, start_end, fp16)
    findings += _vanished_loss_findings(run, start_end)
    findings += _storm_findings(run, cfg, start_end)
    findings += _zero_loss_findings(run, cfg) or _nan_filtered_from_start(run)
    findings += _lasting_nonfinite_findings(run, cfg, start_end)
    if start_end is not None:
        findings.append(Finding(OVERFLOW, int(run.first_step), INFO, found[0], "fp16_startup_search",
                                f"fp16 loss-scale search at start-up up to step {start_end} is not a "
                                f"failure ({found[0]} {ev.rec(found[1], found[1].dropna().index[0])} -> "
                                f"{ev.rec(found[1], found[1].loc[:start_end].dropna().index[-1])})"))
    return findings


def _scale_or_climb(mag: np.ndarray, j: int, cfg: DiagnoseConfig) -> bool:
    """A value above the alarm limit that is no saturation: the series' own scale (its first record
    is already there: a physics loss of 1e13), or the top of a climb (the record before it already
    ``grad_blowup_factor`` times the median of those before: a loss growing for several records is
    LABELS.md's divergence, not saturation mode's jump from normal values)."""
    if j == 0:
        return True
    before = mag[:j - 1]
    return bool(before.size) and float(mag[j - 1]) >= cfg.grad_blowup_factor * float(np.median(before))
