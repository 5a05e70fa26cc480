"""Divergence detector: a loss or grad-norm spike or sustained blow-up that is finite at first.

On log10 of the positive values (zeros, e.g. GRPO groups with zero reward variance, carry no
signal), a departure must stand out from the run's own recent noise (robust z) and move by at
least a factor (3x grad norm, 1.25x loss). It is critical when it lasts: >= 2 records that never
come back (or that run into the first non-finite value: the overflow is then a consequence), or
>= ``spike_recover_records`` (6, and never a tenth of the log) that later recover. Shorter spikes
that recover are blips (LABELS.md "a spike that recovers within a few records"): warnings; a large one (10x,
Megatron's spiky factor) becomes critical only when a lasting change starts with it (verdict.py). Records of the
fp16 loss-scale search at start-up are ignored; RL policy losses (signed, near zero) are skipped.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from moeproxy.diagnose import evidence as ev
from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import diff_noise, find_departures, fmt, head_level, holds_from, log10_positive, quarter_count
from moeproxy.diagnose.semantics import lr_warmup_end_step, startup_end_step, zero_advantage_steps
from moeproxy.vocabulary import is_validation_loss
from moeproxy.diagnose.series import RunSeries, climb_margin, few_records
from moeproxy.diagnose.taxonomy import CRITICAL, DIVERGENCE, WARNING, Finding
from moeproxy.diagnose.rules import declare

thresholds(
    startup_burst_share=(0.05, "records x100 only within this first share of a run that goes on in range: a "
                               "start-up transient, not a blow-up that lasted"),
    grad_norm_factor=(3.0, "sustained grad-norm level rise that counts as divergence"),
    loss_factor=(1.25, "sustained positive-loss level rise that counts as divergence"),
    loss_rise_over_best=(2.0, "loss above this multiple of its best so far, for good: divergence"),
    rise_scale_share=(0.05, "... and by at least this share of the level it ran at before (90th percentile)"),
    rise_level_share=(0.05, "... its best level: the lowest median over this share of the log's consecutive records"),
    rise_level_records=(3, "... and over at least this many once they are a tenth of the log or fewer (a noisy "
                           "loss's luckiest record is no level; 8 sparse records are read one by one)"),
    rise_tail_share=(0.01, "... for at least this share of the log's records (and two)"),
    rise_recent_records=(10, "... and above the median of this many records before the rise (it stayed up)"),
    grad_blowup_factor=(100.0, "LABELS.md: grad norm x100 of the run's median, repeatedly"),
    blowup_cluster_records=(10, "a repeated blow-up dates from three blown-up records within this many"),
    policy_loss_floor=(10.0, "an RL policy loss (O(1) when clipped over normalised advantages) this large has blown up"),
    rare_spike_share=(0.05, "RL policy-loss spikes on at most this share of the records, each back within the tie "
                            "window, the reward no lower after them: spikes the policy came straight back from"),
    validation_rise=(1.25, "a validation loss that rose less than this did not see a train-loss jump"),
    spike_recover_records=(6, "a rise above the noise band that is back within fewer records is a spike (LABELS.md: 'a few')"),
    spike_log_share=(0.1, "... and fewer than this share of the log's records (at least 3)"),
    critic_still_climbing=(2.0, "a value loss growing this many times a quarter over its last quarters, the "
                                "reward standing still: the critic runs away"),
    calm_after_excursion=(10.0, "an excursion back in band for this many times its length (and a tenth of the "
                                "log) was got over: a spike, not a blow-up that stays"),
    calm_share=(0.95, "... calm: this share of the records after it back below the bar (a huge spike's)"),
    large_spike=(10.0, "Megatron's SPIKY_LOSS_FACTOR: a spike that may have done damage"),
    huge_spike=(100.0, "a record this many times the median before it: a blow-up on sight"),
    zero_advantage=(0.01, "RL grad norms below this share of the usual level: equal-reward groups"),
    value_error_share=(0.1, "beside a reward that never improved, a value-loss blow-up counts when the critic's "
                            "error (the root of its squared loss) reaches this share of the largest return seen"),
    value_error_beyond=(100.0, "a critic's error (the root of its squared loss) this many times the largest return "
                               "seen is a blow-up whatever the return did (a return that grew from 0 has no ratio)"),
    part_rise_factor=(2.0, "a logged part of the loss that rose this many times more than the total: the jump is "
                           "in the objective, not in how the loss is printed"),
    chance_start_band=(0.03, "a loss whose first record is within this of ln 2 starts at a two-way choice's chance "
                             "level (DPO's loss is exactly ln 2 while the policy is the reference)"),
    chance_rise=(1.4, "... and whose last quarter's median is this multiple of ln 2 or more ranks worse than chance"),
    chance_stays_share=(0.75, "... with this share of its last quarter above ln 2 (it stayed there)"),
    chance_onset_level=(1.2, "dated from the record after which it stays above this multiple of ln 2 "
                             "(``chance_stays_share`` of the records)"),
    policy_swing_level=(10.0, "a policy loss whose last quarter's size is within this multiple of its first "
                              "quarter's swung on single records and came back each time"),
    value_loss_reward_records=(10, "a value-loss blow-up counts when the reward over this many records from it "
                                   "is below that over as many before it"),
)

RULES = declare(DIVERGENCE, {
    "rise_over_best": "the loss above twice its best so far, for good",
    "sustained_rise": "loss or grad norm above its noise band to the last record",
    "multi_record_spike": "loss or grad norm above its noise band for several records",
    "huge_spike": "one record 100x the median before it that does not come back",
    "grad_blowup": "grad norm 100x the run's median, repeatedly",
    "policy_loss_blowup": "an RL policy loss 100x its usual size, repeatedly (importance ratios blew up)",
    "policy_loss_swings_reward_up": "an RL policy loss 100x its usual size while the reward climbs on: the "
                                    "surrogate's swings broke nothing (a warning)",
    "value_loss_blowup": "an RL critic's value loss 100x its usual size, repeatedly (the value function blew up)",
    "large_spike": "a 10x spike that came back within two records",
    "isolated_spike": "short spikes that came back (not divergence)",
    "spike_before_nonfinite": "the last finite record before a non-finite one stood out",
    "grad_excursion": "a grad norm high for a few updates, then back (below 100x outside RL)",
    "grad_rise_loss_falling": "grad norm rising while the loss keeps falling (not divergence)",
    "contradicted_by_validation": "a train-loss jump the validation loss does not show (printing artefact)",
    "damaging_spike": "a spike with which a lasting change started: the update that broke the policy",
    "worse_than_chance": "a loss that started at ln 2 (a two-way choice at chance: DPO's, a binary classifier's) "
                         "and ends well above it, staying: the model ranks worse than chance",
}, decisive=("huge_spike", "rise_over_best", "grad_blowup", "policy_loss_blowup", "value_loss_blowup"),
   explains=("policy_loss_swings_reward_up", "grad_rise_loss_falling", "contradicted_by_validation"),
   spike=("large_spike", "grad_excursion"),
   thresholds={"rise_over_best": ("loss_rise_over_best", "rise_scale_share", "rise_level_share", "rise_level_records",
                                  "rise_tail_share", "rise_recent_records"), "sustained_rise": ("robust_z", "grad_norm_factor", "loss_factor"),
               "multi_record_spike": ("robust_z", "grad_norm_factor", "loss_factor", "spike_recover_records", "spike_log_share",
                                      "calm_after_excursion"),
               "grad_blowup": ("grad_blowup_factor", "blowup_cluster_records", "zero_advantage", "startup_burst_share"),
               "huge_spike": ("huge_spike", "large_spike", "calm_after_excursion", "calm_share", "spike_log_share"), "large_spike": ("large_spike",),
               "grad_excursion": ("zero_advantage", "grad_blowup_factor"),
               "policy_loss_blowup": ("grad_blowup_factor", "blowup_cluster_records", "policy_loss_floor",
                                      "rare_spike_share", "tie_records"),
               "policy_loss_swings_reward_up": ("grad_blowup_factor", "policy_loss_floor", "policy_swing_level"),
               "value_loss_blowup": ("grad_blowup_factor", "blowup_cluster_records", "value_loss_reward_records",
                                     "value_error_share", "value_error_beyond", "critic_still_climbing"),
               "contradicted_by_validation": ("validation_rise",),
               "worse_than_chance": ("chance_start_band", "chance_rise", "chance_stays_share", "chance_onset_level")})

# an RL critic's loss (Stable-Baselines3, baselines, RLlib, CleanRL, OpenRLHF/verl's critic)
# (Spinning Up names its critics' losses ``LossQ``, ``LossQ1``, ``LossV``; OfflineRL-Kit and rlkit
# ``loss/critic1``, ``qf1_loss``; rsl_rl (legged_gym) ``Loss/value_function``; a printed
# ``Critic Loss1:`` is read as ``critic loss1``; twin critics are numbered)
_CRITIC_NAMES = (r"value_loss|vf_loss|critic\d?[_ ]loss\d?|loss/(?:value|critic\d?)(?:_function)?|value loss|"
                 r"qf\d?_loss|qf\d? loss|lossq\d?|lossv")
VALUE_LOSS = re.compile(rf"(?:^|[/_ ])(?:{_CRITIC_NAMES}|q\d?_loss|loss/q\d?)$", re.IGNORECASE)
# the names no other kind of model uses (not ``q_loss``/``loss/q``: a VQ model's quantisation loss):
# a log holding one is an RL run's even when no reward of it is recognised (rlkit's several returns)
CRITIC_LOSS = re.compile(rf"(?:^|[/_ ])(?:{_CRITIC_NAMES})$", re.IGNORECASE)


def _candidates(run: RunSeries) -> list[tuple[str, str]]:
    """(metric name, kind) pairs: the canonical grad norm and loss, plus other *grad_norm keys.

    In RL runs the "loss" is a policy loss: near zero, signed, on an arbitrary scale, so a factor
    rise means nothing; there the grad norm carries the signal."""
    out: list[tuple[str, str]] = []
    rl = run.is_rl
    for canonical in ("grad_norm",) if rl else ("grad_norm", "loss"):
        found = run.resolve(canonical)
        if found:
            out.append((found[0], "grad" if canonical == "grad_norm" else "loss"))
    seen = {n for n, _ in out}
    for name, _ in run.matching(lambda n: n.endswith("grad_norm") and n not in seen):
        out.append((name, "grad"))
    return out




def _zero_advantage_masked(series, cfg: DiagnoseConfig, idle=None, near_zero: bool = True):
    """GRPO steps whose groups all had equal rewards carry (almost) no gradient: grad norm and loss
    are ~0 there by design. Such records say nothing about stability, and a jump back from them is
    not a spike: they are masked (NaN) for the spike rules. ``idle``: the steps whose policy loss is
    exactly 0 (``semantics.zero_advantage_steps``), masked whatever their grad norm (when most steps
    are idle, the usual level is theirs and a quantile cannot tell them). ``near_zero`` off: only
    those (a policy loss is exactly 0 there; its records far below its 75th percentile may be the
    run before a blow-up that lasts)."""
    if idle is not None and len(idle):
        series = series.mask(series.index.isin(idle))
    if not near_zero:
        return series
    vals = series.to_numpy(dtype=float)
    finite = vals[np.isfinite(vals) & (vals > 0)]
    if finite.size < 3:
        return series
    usual = float(np.quantile(finite, 0.75))
    low = np.isfinite(vals) & (vals < cfg.zero_advantage * usual)
    return series.mask(low) if low.any() else series


def _above_best(name: str, series, cfg: DiagnoseConfig) -> Finding | None:
    """The loss climbs to over ``loss_rise_over_best`` times its best value so far and never comes
    back: what an engineer calls a divergence on sight, however short or sparse the log (8 records
    55 steps apart, or one record before a jump). The z-score rules need a noise history first."""
    vals = series.to_numpy(dtype=float)
    steps = series.index.to_numpy()
    ok = np.isfinite(vals) & (vals > 0)
    v, st = vals[ok], steps[ok]
    if v.size < 3:
        return None
    # its best level so far: the lowest median of ``rise_level_share`` of the log's consecutive
    # records, and of ``rise_level_records`` once they are a tenth of the log (one record in a log of
    # fewer than twenty: 8 sparse records read at their own resolution)
    window = max(1, min(int(cfg.rise_level_records), v.size // 10), int(v.size * cfg.rise_level_share))
    level = pd.Series(v).rolling(window, min_periods=1).median().to_numpy()
    best = np.minimum.accumulate(level)
    # the smallest value from each record to the end: the rise must hold for every later record
    floor_after = np.minimum.accumulate(v[::-1])[::-1]
    # "stays" for at least two records and ``rise_tail_share`` of the log (the last two of a
    # thousand noisy records above twice a level say nothing; the last two of eight do)
    tail = max(2, int(np.ceil(cfg.rise_tail_share * v.size)))
    ks = np.arange(1, max(1, v.size - tail + 1))
    # the cheap condition first, for every record at once; the quantiles only where it holds
    for k in ks[floor_after[ks] >= cfg.loss_rise_over_best * best[ks - 1]]:
        # "far out of its range": the lasting rise must also matter on the scale the loss ran at
        # before (a memorised loss going 1e-5 -> 7e-5 after starting near 5 has not diverged)
        scale = float(np.quantile(v[:k], 0.9))
        # "and stays": every later record above the level the loss ran at just before, not only
        # above its single best record (in a noisy loss the best record is an outlier low, and a
        # short tail's lowest value is compared with a long history's lowest)
        recent = float(np.median(v[max(0, k - cfg.rise_recent_records):k]))
        if (floor_after[k] - best[k - 1] >= cfg.rise_scale_share * scale
                and floor_after[k] > recent):
            top = k + int(np.argmax(v[k:]))
            low = k + int(np.argmin(v[k:]))
            b = int(np.argmin(level[:k]))
            a = max(0, b - window + 1)
            best_at = (f"{fmt(v[b])} at step {int(st[b])}" if a == b else
                       f"a median of {fmt(level[b])} over steps {int(st[a])}-{int(st[b])}")
            return Finding(DIVERGENCE, int(st[k]), CRITICAL, name, "rise_over_best",
                           f"{name} rose from its best, {best_at}, to {fmt(v[k])} at step "
                           f"{int(st[k])} and never came back: over the {v.size - k} records from there, lowest "
                           f"{fmt(v[low])} at step {int(st[low])}, peak {fmt(v[top])} at step {int(st[top])}")
    return None


def _early(vals, upto: int):
    """The finite values of the first quarter of the records before position ``upto``."""
    before = vals[:upto]
    before = before[np.isfinite(before)]
    return before[: max(1, before.size // 4)]


def _within_early_level(vals, upto: int, peak: float) -> bool:
    """A peak no higher than the median of the series' first quarter before ``upto`` (with at least
    eight records there to call it a level)."""
    early = _early(vals, upto)
    return early.size >= 8 and peak <= float(np.median(early))


def _loss_kept_falling(loss, first, last) -> bool:
    """The loss over [first, last] is below its level over as many records just before."""
    loss = loss[np.isfinite(loss.to_numpy())]
    during = loss[(loss.index >= first) & (loss.index <= last)]
    before = loss[loss.index < first].tail(max(len(during), 3))
    if len(during) < 2 or len(before) < 2:
        return False
    return float(during.median()) < float(before.median()) and float(during.max()) <= float(before.max())


def detect_series_divergence(name: str, kind: str, series, cfg: DiagnoseConfig,
                             start_end: int | None, rl: bool = False, loss=None, idle=None) -> list[Finding]:
    """``loss``: the run's loss, given for a grad-norm series of a run that is not RL. ``idle``: an
    RL run's steps with no policy gradient (``_zero_advantage_masked``)."""
    if start_end is not None:
        series = series[series.index > start_end]
    raw = series  # the records as logged: what the evidence quotes
    if rl and kind == "grad":
        series = _zero_advantage_masked(series, cfg, idle)
    vals = series.to_numpy()
    steps = series.index.to_numpy()
    with np.errstate(invalid="ignore"):
        # non-finite, or clamped at fp16's largest value (65504: a saturated half-precision number);
        # a larger finite value is a real one (fp32/bf16 runs climb past 65504 as they blow up)
        bad = ~np.isfinite(vals) | (np.abs(np.abs(vals) - cfg.fp16_max) <= cfg.fp16_max * 0.001)
    if bad.sum() == 1 and 0 < int(bad.argmax()) < len(vals) - cfg.tie_records:
        # one non-finite record mid-run and finite ones after it (overflow's ``lone_nonfinite``: it
        # did not last): the run goes on, so the series is read past it rather than cut there
        series, vals, steps, bad = series[~bad], vals[~bad], steps[~bad], bad[~bad]
    cut = int(np.flatnonzero(bad)[0]) if bad.any() else len(vals)
    prefix = vals[:cut]
    finite = prefix[np.isfinite(prefix)]
    if (finite < 0).any():
        return []
    early = []
    if kind == "loss":
        hit = _above_best(name, series.iloc[:cut], cfg)
        if hit is not None:
            early.append(hit)
    if finite.size <= cfg.min_history:
        return early + _huge_spikes(name, series.iloc[:cut], [], [], cfg, raw)
    factor = cfg.grad_norm_factor if kind == "grad" else cfg.loss_factor
    y = log10_positive(prefix)
    deps = find_departures(y, +1, min_delta=float(np.log10(factor)), z=cfg.robust_z, visible=cfg.onset_visible_share,
                           min_history=cfg.min_history)
    last = int(np.flatnonzero(np.isfinite(y))[-1]) if np.isfinite(y).any() else -1
    truncated = cut < len(vals)
    out: list[Finding] = []
    blips: list[tuple[int, float, tuple[str, str], int]] = []  # step, peak, shown, records up
    final_step = int(steps[last]) if last >= 0 else None
    used = pd.Series(np.where(np.isfinite(y), prefix, np.nan), index=steps[:cut])

    def times(d, j: int) -> str:
        """"31x the median 1.3 over steps 2-11": record j against the departure's baseline."""
        recs = used.iloc[d.base_first:d.base_last + 1]
        # (by its step, as ``against`` prints it: ``raw`` keeps the records ``y`` leaves out)
        return f"{ev.ratio(float(raw.loc[steps[j]]), ev.median_value(recs))} the {ev.median_of(recs, raw)}"

    def against(d, j: int) -> str:
        """"40 at step 12 (31x the median 1.3 over steps 2-11)"."""
        return f"{ev.rec(raw, steps[j])} ({times(d, j)})"

    for d in deps:
        peak = 10 ** (y[d.peak] - d.baseline)
        n_rec = d.count
        at_end = d.end == last
        if at_end and truncated:
            critical, tail = n_rec >= 2, (f"; then {ev.rec(raw, steps[cut])}")
        elif at_end:
            critical, tail = n_rec >= 2, "; it had not come back by the last record"
        else:
            # LABELS.md: "a single spike that recovers within a few records" is healthy
            few = few_records(last + 1, cfg.spike_recover_records, cfg.spike_log_share)
            critical = n_rec >= few
            tail = f"; back in band after step {int(steps[d.end])}"
            # back in band, then calm for far longer than it was up (until the next excursion of
            # as many records, the series' end or its first non-finite record; blips between count
            # as calm): an excursion the run got over, not a
            # blow-up that stays (LABELS.md) - a later lasting failure is its own
            nxt = next((e.first for e in deps if e.first > d.end and e.count >= few), last + 1)
            calm = nxt - d.end - 1
            if critical and calm >= max(cfg.calm_after_excursion * (d.end - d.first + 1),
                                        cfg.spike_log_share * (last + 1)):
                critical = False
        if not critical and at_end and truncated:
            # one record up, then the series turns non-finite: not a blip that recovered. The
            # overflow keeps the verdict unless the spike is large and a lasting change starts with
            # it (verdict.py promotes a large_spike); either way this says what came just before
            what = (f"{name} rose to {against(d, d.first)}, the last finite record before "
                    f"{ev.rec(raw, steps[cut])}")
            rule = "large_spike" if peak >= cfg.large_spike else "spike_before_nonfinite"
            out.append(Finding(DIVERGENCE, int(steps[d.first]), WARNING, name, rule, what))
            continue
        if not critical:
            blips.append((int(steps[d.first]), peak, (ev.rec(raw, steps[d.peak]), times(d, d.peak)), n_rec))
            continue
        if kind == "grad" and not at_end and (rl or peak < cfg.grad_blowup_factor):
            # a grad norm that runs high for a few updates and settles (an RL policy's at any
            # size; otherwise below LABELS.md's x100) came back: a warning, unless a lasting
            # change (loss, reward, entropy, KL, length) starts with it (verdict.py promotes it)
            out.append(Finding(DIVERGENCE, int(steps[d.onset]), WARNING, name, "grad_excursion",
                               f"{name} ran up {ev.move(raw, steps[d.onset])}, peak {against(d, d.peak)}, "
                               f"{n_rec} records above its noise band; back in band after step {int(steps[d.end])}"))
            continue
        if kind == "grad" and not at_end and not rl and _within_early_level(prefix, d.first, peak_value := float(prefix[d.peak])):
            # a few records back up to the level the norm ran at earlier in the run (gradients
            # shrink as a model fits its data), then down again: not out of its range
            out.append(Finding(DIVERGENCE, int(steps[d.onset]), WARNING, name, "grad_excursion",
                               f"{name} ran up {ev.move(raw, steps[d.onset])}, peak {against(d, d.peak)}, "
                               f"no higher than its early level ({fmt(peak_value)} against a median of "
                               f"{fmt(float(np.median(_early(prefix, d.first))))} over its first quarter); back in band "
                               f"after step {int(steps[d.end])}"))
            continue
        if kind == "grad" and loss is not None and not truncated and _loss_kept_falling(loss, steps[d.onset], steps[d.end]):
            # grad norms grow over healthy training (weight norms grow, the lr decays); a rise
            # while the loss keeps improving is not a divergence
            out.append(Finding(DIVERGENCE, int(steps[d.onset]), WARNING, name, "grad_rise_loss_falling",
                               f"{name} rose {ev.move(raw, steps[d.onset])}, peak {against(d, d.peak)}, "
                               f"while the loss kept falling"))
            continue
        rule = "sustained_rise" if at_end else "multi_record_spike"
        top = d.onset + int(np.nanargmax(np.where(np.isfinite(y[d.onset:]), y[d.onset:], -np.inf)))
        if not at_end and not truncated:
            top = d.peak
        out.append(Finding(DIVERGENCE, int(steps[d.onset]), CRITICAL, name, rule,
                           f"{name} went {ev.move(raw, steps[d.onset])}"
                           + (f", up to {against(d, top)}" if top != d.onset else f" ({times(d, top)})")
                           + f", {n_rec} records above its noise band{tail}"))
        blips = [b for b in blips if b[0] < int(steps[d.onset])]
        break
    for step, peak, shown, n_up in blips:
        if peak >= cfg.large_spike:  # reported one by one: verdict.py promotes one that did lasting damage
            after = ("in the last record: the log ends before it could come back or last" if step == final_step
                     else f"and came back after {n_up} record(s) up")
            out.append(Finding(DIVERGENCE, step, WARNING, name, "large_spike",
                               f"{name} spiked to {shown[0]} ({shown[1]}) {after}"))
    out += _huge_spikes(name, series.iloc[:cut], out, [b[0] for b in blips], cfg, raw,
                        early_level=kind == "grad" and not rl)
    blips = [b for b in blips if b[1] < cfg.large_spike]
    if blips:
        step, peak, shown, _ = max(blips, key=lambda b: b[1])
        longest = max(b[3] for b in blips)
        out.append(Finding(DIVERGENCE, blips[0][0], WARNING, name, "isolated_spike",
                           f"{len(blips)} short {name} spike(s) that recovered within {longest} record(s) "
                           f"(largest {shown[0]}, {shown[1]}): not divergence"))
    return early + out


def _huge_spikes(name: str, series, found: list[Finding], blip_steps: list[int], cfg: DiagnoseConfig,
                 raw=None, early_level: bool = False) -> list[Finding]:
    """A record ``huge_spike`` times the median of the records before it (a grad norm of 11,140
    where it ran 8-15) that does not come back below ``large_spike`` times that median within the
    next two records (or ends the log) is a blow-up: critical. ``early_level``: a grad norm of a run
    that is not RL, whose spike no higher than its early level (``_within_early_level``) is passed over. The instability is
    dated from the first earlier spike of the same series, if any."""
    if any(f.severity == CRITICAL for f in found):
        return []
    vals = series.to_numpy(dtype=float)
    steps = series.index.to_numpy()
    ok = np.flatnonzero(np.isfinite(vals) & (vals > 0))
    if ok.size < 3:
        return []
    # a record can only be huge_spike x the median before it if it is that many times the lowest
    # record before it: the medians are taken only there (a 19,000-record log took 1.6 s before)
    lowest = np.minimum.accumulate(vals[ok])
    may = 2 + np.flatnonzero(vals[ok[2:]] >= cfg.huge_spike * lowest[1:-1])
    for j in may:
        before = vals[ok[:j]]
        med = float(np.median(before))
        if vals[ok[j]] >= cfg.huge_spike * med:
            after = vals[ok[j + 1:j + 3]]
            if after.size and (after < cfg.large_spike * med).any():
                continue  # LABELS.md: a single spike that recovers within a few records is not divergence
            if _got_over(vals[ok], j, cfg.large_spike * med, cfg):
                continue  # back below the bar and calm far longer than it was up: it came back
            if early_level and _within_early_level(vals, ok[j], float(vals[ok[j]])):
                continue  # a grad norm back at the level it ran at earlier: not out of its range
            earlier = [s for s in [f.onset_step for f in found] + blip_steps
                       if s is not None and s < steps[ok[j]]]
            onset = min(earlier) if earlier else int(steps[ok[j]])
            lead = (f"; it first spiked at step {onset}" if onset != int(steps[ok[j]]) else "")
            recs = pd.Series(before, index=steps[ok[:j]])
            return [Finding(DIVERGENCE, onset, CRITICAL, name, "huge_spike",
                            f"{name} reached {fmt(vals[ok[j]])} at step {int(steps[ok[j]])}, "
                            f"{fmt(vals[ok[j]] / med)}x the {ev.median_of(recs, raw)} before it{lead}")]
    return []


def _got_over(vals: np.ndarray, j: int, bar: float, cfg: DiagnoseConfig) -> bool:
    """The record at ``j`` blew up, and the series came back below ``bar`` later and stayed there (all
    but ``calm_share`` of the records) for ``calm_after_excursion`` times as long as it was up and a tenth of the
    log: an excursion the run got over (LABELS.md: a blow-up that does not come back is divergence),
    as the excursions of the noise band are judged."""
    back = np.flatnonzero(vals[j + 1:] < bar)
    if not back.size:
        return False
    k = j + 1 + int(back[0])
    rest = vals[k:]
    if rest.size < max(cfg.calm_after_excursion * (k - j), cfg.spike_log_share * vals.size):
        return False
    return float(np.mean(rest < bar)) >= cfg.calm_share


def _blowup_onset(big, cluster: int) -> int:
    """Index (into ``big``, positions of the blown-up records) of the first record of the repeated
    blow-up: the first of three within ``cluster`` records of each other, so that isolated early
    spikes that came back (LABELS.md: "one spike that recovers") do not date it; the first blown-up
    record when they never come three together."""
    for i in range(big.size - 2):
        if big[i + 2] - big[i] <= cluster:
            return i
    return 0


def _repeated_blowup(name: str, series, cfg: DiagnoseConfig, rl: bool, rule: str, shown: str,
                     floor: float = 0.0, loss=None, idle=None, reward=None, kl=None) -> Finding | None:
    """LABELS.md "grad norm x100 repeatedly": at least two records ``grad_blowup_factor`` times the
    run's median (of the magnitudes: an RL policy loss is signed; an RL run's zero-advantage records
    left out), dated by ``_blowup_onset``; a run that starts blown up is dated from its first record.
    ``floor``: an absolute size the blown-up records must also reach. ``loss``: the run's loss, given
    for a grad norm of a run that is not RL: blown-up records that open the log while the loss falls
    by over 10 % are start-up, and records no higher than its early level (``_within_early_level``)
    are not out of its range. ``reward``, ``kl``: an RL run's (name, series), given for its policy
    loss: blown-up records that carry the KL term's spikes and each came back within ``tie_records``,
    while the reward ended no lower than it was before the first of them, are spikes the policy came
    straight back from."""
    full = series.abs() if rl else series
    if rl:
        series = _zero_advantage_masked(series.abs(), cfg, idle, near_zero=floor <= 0)
    vals = series.to_numpy(dtype=float)
    ok = np.isfinite(vals) & (vals > 0)
    if ok.sum() < 4:
        return None
    med = float(np.median(vals[ok]))
    recs = pd.Series(vals[ok], index=series.index.to_numpy()[ok])
    if floor > 0:
        # a policy loss blown up for most of the run has its median inside the blow-up: measured
        # against its first quarter too (the floor keeps a GRPO loss near 0 early from counting)
        head = recs.iloc[:max(cfg.min_history, len(recs) // 4)]
        if float(head.median()) < med:
            med, recs = float(head.median()), head
        if med <= 0:
            return None
    first_recs = recs.iloc[:cfg.min_history]
    if len(recs) >= 4 * cfg.min_history and 0 < float(first_recs.median()) * cfg.grad_blowup_factor < med \
            and float(np.nanmax(vals[ok])) >= cfg.grad_blowup_factor * med:
        # the median itself is x100 the first records', and the peak x100 the median: blown up within
        # the first quarter (a QMIX TD loss 0.49, 5.7, 1419, 5.7e5, ... 1e28): the first records are the
        # level it left (a DDPG actor loss, -Q, growing x200 with the return is not this)
        med, recs = float(first_recs.median()), first_recs
    big = np.flatnonzero(ok & (vals >= max(cfg.grad_blowup_factor * med, floor)))
    steps = series.index.to_numpy()
    if loss is not None and big.size and big[0] == np.flatnonzero(ok)[0]:
        # large norms in the first records while the loss falls fast are the start of training
        # (the model far from any minimum), not a blow-up: they are passed over
        lead = int(np.argmax(np.diff(np.append(big, -1)) != 1)) + 1
        lo = loss[np.isfinite(loss.to_numpy())]
        during = lo[(lo.index >= steps[big[0]]) & (lo.index <= steps[big[lead - 1]])]
        after = lo[lo.index > steps[big[lead - 1]]].head(lead)
        if len(during) and len(after) and float(after.median()) < float(during.iloc[0]) * 0.9:
            big = big[lead:]
    if loss is not None:  # records no higher than the norm's early level are not out of its range
        big = np.array([b for b in big if not _within_early_level(vals, b, float(vals[b]))], dtype=int)
    if big.size < 2:
        return None
    if loss is not None and _loss_unmoved_by_lone_spikes(loss, steps, big, cfg):
        return None
    if reward is not None and kl is not None and _reward_unharmed_by_short_spikes(reward[1], kl[1], steps, big, cfg):
        return None
    span = float(steps[-1] - steps[0])
    if span > 0 and steps[big[-1]] - steps[0] <= cfg.startup_burst_share * span \
            and np.flatnonzero(ok)[-1] > big[-1] + cfg.min_history:
        # every blown-up record in the run's first stretch, the rest of a long run back in range: a
        # start-up transient (an untrained critic, the first updates) that did not last
        return None
    first = int(steps[big[_blowup_onset(big, cfg.blowup_cluster_records)]])
    top = int(big[int(np.argmax(vals[big]))])
    return Finding(DIVERGENCE, first, CRITICAL, name, rule,
                   f"{shown} reached {fmt(float(vals[top]))} at step {int(steps[top])} "
                   f"({fmt(float(vals[top]) / med)}x the run's {ev.median_of(recs, full)}); {big.size} records at "
                   f"{fmt(cfg.grad_blowup_factor)}x or more, repeatedly from "
                   + (f"step {first}" if first == int(steps[top]) else ev.rec(series, first)))


def _loss_unmoved_by_lone_spikes(loss: pd.Series, steps: np.ndarray, big: np.ndarray, cfg: DiagnoseConfig) -> bool:
    """Blown-up grad norms of a run that is not RL, each one record long (the next record is back),
    while the loss ends no higher than it was before the first of them (within ``loss_factor``):
    spikes the optimiser came straight back from (LABELS.md: "blows up and does not come back"),
    each reported as a spike."""
    if np.any(np.diff(big) == 1):
        return False
    lo = loss[np.isfinite(loss.to_numpy())]
    before, end = lo[lo.index < steps[big[0]]], ev.tail(lo)
    if len(before) < 3 or len(end) < 3 or lo.iloc[-1] < 0 or float(before.median()) <= 0:
        return False
    return float(end.median()) <= cfg.loss_factor * float(before.median())


def _reward_unharmed_by_short_spikes(reward: pd.Series, kl: pd.Series, steps: np.ndarray, big: np.ndarray,
                                     cfg: DiagnoseConfig) -> bool:
    """An RL policy loss blown up only in rare, short spikes that are its KL term's (no run of
    blown-up records longer than ``tie_records``, on ``rare_spike_share`` of the records at most, the
    logged KL x100 its median at each of them: a GRPO loss that carries one update's k3 estimate of
    the KL to the reference, x1e6 on a token, and is back at the next record), while the reward over
    the run's last records is no lower than over the records before the first spike: the policy came
    straight back (LABELS.md: "one spike that recovers" is no divergence; a policy that blows up takes
    the reward down with it)."""
    runs = np.split(big, np.flatnonzero(np.diff(big) != 1) + 1)
    if max(len(r) for r in runs) > cfg.tie_records or big.size > cfg.rare_spike_share * len(steps):
        return False  # (a loss that blows up again and again is LABELS.md's "x100 repeatedly")
    k = kl[np.isfinite(kl.to_numpy(dtype=float))].abs()
    k_med = float(k.median()) if len(k) else 0.0
    if k_med <= 0 or not all(steps[b] in k.index and float(k.loc[steps[b]]) >= cfg.grad_blowup_factor * k_med
                             for b in big):
        return False  # spikes of the loss itself, not the KL term's
    r = reward[np.isfinite(reward.to_numpy(dtype=float))]
    before, end = r[r.index < steps[big[0]]], ev.tail(r)
    if len(before) < cfg.min_history or len(end) < 3:
        return False
    return float(end.median()) >= float(before.median())


VALIDATION_LOSS = ("val_loss", "val/loss", "eval/loss", "eval_loss", "validation loss", "val loss",
                   "lm loss validation", "validation/loss", "valid_loss", "valid/loss")


def _rise_factor(s: pd.Series, step: int) -> float | None:
    """The median after ``step`` over the median before it, for a positive series with three or
    more finite records on each side (None otherwise)."""
    s = s[np.isfinite(s.to_numpy())]
    before, after = s[s.index < step], s[s.index >= step]
    if len(before) < 3 or len(after) < 3:
        return None
    ref = float(before.median())
    return float(after.median()) / ref if ref > 0 else None


def _one_part_blew_up(run: RunSeries, f: Finding, cfg: DiagnoseConfig) -> bool:
    """A training loss the run logs beside the total (``train_domain_loss`` beside ``train_loss``)
    rose ``part_rise_factor`` times more than the total did: the blow-up is in one part of the objective,
    which a validation loss of the task may not measure. A printing artefact scales every printed
    training loss alike."""
    total = run.get(f.metric)
    whole = _rise_factor(total, f.onset_step) if total is not None else None
    if whole is None or whole <= 1:
        return False
    for name in run.names:
        if name == f.metric or not name.lower().endswith("loss") or is_validation_loss(name):
            continue
        part = _rise_factor(run.get(name), f.onset_step)
        if part is not None and part > cfg.part_rise_factor * whole:
            return True
    return False


def _contradicted_by_validation(run: RunSeries, f: Finding, cfg: DiagnoseConfig) -> str | None:
    """Why a train-loss divergence is a printing artefact: a validation loss logged over the
    stretch after the jump does not rise (LABELS.md: one independent signal contradicting a jump
    makes the jump suspect). None when no validation loss says so."""
    if _one_part_blew_up(run, f, cfg):
        return None
    for name in VALIDATION_LOSS:
        s = run.get(name)
        if s is None:
            continue
        s = s[np.isfinite(s.to_numpy())]
        after, before = s[s.index >= f.onset_step], s[s.index < f.onset_step]
        if len(after) < 3:
            continue
        # the level it had come down to just before the jump (the lowest of the last three records
        # before it), not its median over the whole run before: a validation loss that had come down
        # with training and rises with the jump confirms it, whatever its untrained first records were
        ref = float(before.iloc[-3:].min()) if len(before) else float(after.iloc[0])
        if float(after.max()) <= cfg.validation_rise * ref:
            lo = int(after.index[int(np.argmin(after.to_numpy()))])
            hi = int(after.index[int(np.argmax(after.to_numpy()))])
            return (f"{name} stayed between {ev.rec(after, lo)} and {ev.rec(after, hi)} over the {len(after)} "
                    f"records from step {int(after.index[0])}")
    return None


@register_detector("divergence", "loss or grad-norm spike or sustained blow-up, finite at first")
def detect_divergence(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    start_end = startup_end_step(run, cfg)
    warmup_end = lr_warmup_end_step(run, cfg)
    out: list[Finding] = []
    rl = run.is_rl
    idle = zero_advantage_steps(run)
    for name, kind in _candidates(run):
        loss = run.resolve("loss") if kind == "grad" and not rl else None
        begin = start_end
        if kind == "grad" and warmup_end is not None:  # a grad norm's level from the end of the lr warm-up
            begin = warmup_end if start_end is None else max(start_end, warmup_end)
        found = detect_series_divergence(name, kind, run.get(name), cfg, begin, rl,
                                         loss[1] if loss is not None else None, idle)
        if kind == "grad" and not any(f.severity == CRITICAL for f in found):
            hit = _repeated_blowup(name, run.get(name), cfg, rl, "grad_blowup", name,
                                   loss=loss[1] if loss is not None else None, idle=idle)
            if hit is not None:
                found.append(hit)
        if kind == "loss":
            found = [_unless_contradicted(run, f, cfg) for f in found]
        out += found
    if not rl and (loss := run.resolve("loss")) is not None:
        hit = _worse_than_chance(loss[0], loss[1], cfg)
        if hit is not None:
            out.append(_unless_contradicted(run, hit, cfg))
    policy = run.resolve("loss") if rl else None
    if policy is not None:
        # skipped above: its level means nothing (a GRPO loss is near 0 on average, its median can be
        # 1e-5), but its size blowing up does: a clipped surrogate over normalised advantages is
        # O(1), so a blow-up must also pass ``policy_loss_floor``
        hit = _repeated_blowup(policy[0], policy[1], cfg, rl, "policy_loss_blowup",
                               f"the size of the RL policy loss |{policy[0]}|", cfg.policy_loss_floor,
                               reward=run.resolve_reward(), kl=run.resolve("kl"))
        if hit is not None and not _grew_with_return(policy[1], run.resolve_reward(), cfg):
            climbed = run.reward_climbs_after(hit.onset_step)
            if climbed is not None and _swings_only(policy[1], cfg):
                # LABELS.md: a blow-up is lasting damage; a surrogate whose size swings (a group of
                # near-equal rewards over a tiny std) while the reward keeps climbing broke nothing
                name, _, _ = climbed
                hit = Finding(DIVERGENCE, hit.onset_step, WARNING, hit.metric, "policy_loss_swings_reward_up",
                              f"{hit.evidence}; but {name} rose {ev.level_change(run.get(name), hit.onset_step)}: "
                              f"the policy kept improving")
            out.append(hit)
    # (an offline RL log may hold only an evaluation return, or several returns none of which is read
    # as the reward: a critic's loss named as only RL names it says the run is RL's)
    if rl or run.resolve_reward() is not None or run.matching(lambda n: CRITIC_LOSS.search(n) is not None):
        for name, series in run.matching(lambda n: VALUE_LOSS.search(n) is not None):
            hit = _value_loss_blowup(run, name, series, cfg)
            if hit is not None:
                out.append(hit)
                break
    return out


def _unless_contradicted(run: RunSeries, f: Finding, cfg: DiagnoseConfig) -> Finding:
    """A critical training-loss finding, or a warning where the validation loss contradicts it
    (``_contradicted_by_validation``: the rise is in how the loss is printed)."""
    why = _contradicted_by_validation(run, f, cfg) if f.severity == CRITICAL else None
    if why is None:
        return f
    return Finding(DIVERGENCE, f.onset_step, WARNING, f.metric, "contradicted_by_validation",
                   f"{f.evidence}; but {why}: the model did not get worse; the rise is in how "
                   f"the training loss is printed or what it measures, not a divergence")


LN2 = float(np.log(2.0))  # a two-way choice's loss at chance


def _worse_than_chance(name: str, loss, cfg: DiagnoseConfig) -> Finding | None:
    """LABELS.md's divergence read against a two-way choice's chance level: a loss that started at
    ln 2 (DPO's, where the policy is the reference; a binary classifier's at initialisation) and ends
    ``chance_rise`` times ln 2 or more, staying above it, ranks the pairs worse than a coin: the
    optimisation went the wrong way for good (a rise too slow or noisy for ``rise_over_best``'s x2
    over a best that dipped just under ln 2)."""
    s = loss[np.isfinite(loss.to_numpy(dtype=float))]
    vals = s.to_numpy(dtype=float)
    if len(vals) <= cfg.min_history or abs(vals[0] - LN2) > cfg.chance_start_band:
        return None
    k = quarter_count(len(vals))
    tail = vals[-k:]
    if float(np.median(tail)) < cfg.chance_rise * LN2 or float(np.mean(tail > LN2)) < cfg.chance_stays_share:
        return None
    stays = holds_from(vals > cfg.chance_onset_level * LN2, cfg.chance_stays_share)
    if not stays.size:
        return None
    onset = int(s.index[stays[0]])
    return Finding(DIVERGENCE, onset, CRITICAL, name, "worse_than_chance",
                   f"{name} started at {fmt(vals[0])} (ln 2 = 0.693: a two-way choice at chance) and rose above "
                   f"{fmt(cfg.chance_onset_level * LN2)} from {ev.rec(s, onset)} on; {ev.median_of(ev.tail(s))}, "
                   f"{fmt(float(np.median(tail)) / LN2)}x ln 2: the model ranks worse than chance and stayed there")


def _swings_only(loss, cfg: DiagnoseConfig) -> bool:
    """The size of a policy loss back at its usual level between its big records: its last
    quarter's median within ``policy_swing_level`` times its first quarter's (swings on single
    records, not a loss that grew and stayed grown)."""
    v = np.abs(loss.to_numpy(dtype=float))
    v = v[np.isfinite(v)]
    if not v.size:
        return False
    k = quarter_count(v.size)
    first, last = float(np.median(v[:k])), float(np.median(v[-k:]))
    return last <= cfg.policy_swing_level * max(first, 1e-12)


def _grew_with_return(loss, reward, cfg: DiagnoseConfig) -> bool:
    """An RL loss whose peak over its early level is no larger than the growth of the return the run
    climbed to (its best stretch over its first records' level): a Q-learner's TD loss, or a policy
    loss over unnormalised returns, scales with the returns it learns to earn (x1000 beside returns
    x25000 is learning, as ``_value_loss_blowup`` reads a critic's)."""
    if reward is None:
        return False
    r = reward[1][np.isfinite(reward[1].to_numpy(dtype=float))]
    v = loss.abs()[np.isfinite(loss.to_numpy(dtype=float))]
    v = v[v > 0]
    if len(r) < 2 * cfg.min_history or len(v) < 2 * cfg.min_history:
        return False
    return_growth = _return_growth(r, _reward_best(r), cfg)
    early = float(np.median(v.to_numpy()[:max(cfg.min_history, len(v) // 50)]))
    return return_growth > 1.0 and early > 0 and float(v.max()) / early <= return_growth


def _return_growth(r, best, cfg: DiagnoseConfig) -> float:
    """How many times its first records' level (at least its noise) the return climbed to at ``best``
    (``_reward_best``); 1 when it never climbed above them."""
    r_first = float(np.median(r.to_numpy()[:max(cfg.min_history, len(r) // 50)]))
    if best is None or best[1] <= r_first:
        return 1.0
    return abs(best[1]) / max(abs(r_first), diff_noise(r.to_numpy()), 1e-12)


def _climb_start(s, at: int, earlier, best, cfg: DiagnoseConfig) -> int:
    """The step the lasting climb that ends in a value-loss blow-up started (LABELS.md: the onset is
    where the anomaly becomes visible and then lasts): the record after the last one, before the
    blow-up at position ``at``, still within twice the loss's first records; but not before the
    reward's best stretch ahead of it (``best`` of the reward records ``earlier`` than the blow-up),
    when the reward climbed to it: while the return climbs, a critic's error grows with the
    return's scale (learning)."""
    vals = s.to_numpy(dtype=float)
    first_level = float(np.median(vals[:cfg.min_history]))
    low = np.flatnonzero(vals[:at] <= 2 * first_level)
    pos = int(low[-1]) + 1 if low.size else 0
    if best is not None and len(earlier) >= cfg.min_history and \
            best[1] - head_level(earlier.to_numpy()) > climb_margin(float(earlier.max()), diff_noise(earlier.to_numpy())):
        pos = max(pos, int(np.searchsorted(s.index.to_numpy(), best[0], side="right")))
    return int(s.index[min(pos, at)])


def _quarter_growth(s) -> float:
    """Median of the last quarter of ``s`` over the median of the quarter before it."""
    v = s.to_numpy(dtype=float)
    q = quarter_count(v.size)
    before = float(np.median(v[-2 * q:-q])) if v.size >= 2 * q else 0.0
    return float(np.median(v[-q:])) / before if before > 0 else 0.0


def _still_climbing(loss, reward, margin: float, cfg: DiagnoseConfig) -> bool:
    """A value loss still growing ``critic_still_climbing`` times a quarter at its end (and over each
    of its last two quarters), while the reward over the same records did not improve by more than
    ``margin`` from its first quarter to its last."""
    v = loss.to_numpy(dtype=float)
    r = reward.to_numpy(dtype=float)
    if v.size < 8 or r.size < 8:
        return False
    q, k = quarter_count(v.size), quarter_count(r.size)
    if float(np.median(r[-k:])) - float(np.median(r[:k])) > margin:
        return False
    three = [float(np.median(part)) for part in (v[-3 * q:-2 * q], v[-2 * q:-q], v[-q:])]
    return three[0] > 0 and all(b >= cfg.critic_still_climbing * a for a, b in zip(three, three[1:]))


def _reward_best(r) -> tuple[int, float] | None:
    """(step, level) of a reward's best stretch: the top of its rolling median over a tenth of its
    records (at least 3), so that one lucky episode is not its best."""
    if r.empty:
        return None
    smooth = r.rolling(max(3, len(r) // 10), center=True, min_periods=1).median()
    return int(smooth.idxmax()), float(smooth.max())


def _value_loss_blowup(run: RunSeries, name: str, series, cfg: DiagnoseConfig) -> Finding | None:
    """An RL critic's loss ``grad_blowup_factor`` times its early level (an untrained critic's error,
    its usual high), repeatedly, with the reward falling as it does, already down from its best, or
    never having improved (if a reward is logged): the value function blew up and took the policy with
    it, or never learned anything the return could explain. Its median is no yardstick: a critic that
    predicts a steady return well sits near 0 and any change in the episodes is 1000x that; and a value
    loss that grows with the return's scale while the reward climbs is learning. The early level is
    its first records (a fiftieth of the run, at least ``min_history``): a critic that blows up from
    the first epochs has no longer calm stretch. With no reward logged to tell learning from a blow-up,
    it is the untrained critic's usual high instead, over the first tenth."""
    s = series[np.isfinite(series.to_numpy(dtype=float))]
    vals = s.to_numpy(dtype=float)
    if len(vals) < 2 * cfg.min_history:
        return None
    reward = run.resolve_reward()
    returns = reward[1].to_numpy(dtype=float) if reward is not None else np.zeros(0)
    # a return of 0 in every record (logged, or set aside as never computed): its critic's loss is
    # rounding, in no unit of a return
    no_return = not np.any(returns[np.isfinite(returns)]) if reward is not None else run.zero_return is not None
    if no_return:
        return None
    early = float(np.median(vals[:max(cfg.min_history, len(vals) // (50 if reward is not None else 10))]))
    if early <= 0:
        return None
    big = np.flatnonzero(vals >= cfg.grad_blowup_factor * early)
    if big.size < 2:
        return None
    first = int(s.index[big[_blowup_onset(big, cfg.blowup_cluster_records)]])
    # the blow-up is the excursion that reaches the top and lasts: an early cluster of big records
    # that came back down (a SAC critic's first bootstrapping epochs) is not its start
    top_at = int(np.argmax(vals))
    for d in find_departures(log10_positive(vals), +1, min_delta=float(np.log10(cfg.grad_blowup_factor)),
                             z=cfg.robust_z, visible=cfg.onset_visible_share, min_history=cfg.min_history):
        if d.first <= top_at <= d.end and not d.recovered:
            first = max(first, int(s.index[d.onset]))
            break
    fell, earlier, best = "", None, None
    if reward is not None:
        r = reward[1][np.isfinite(returns)]
        k = cfg.value_loss_reward_records
        earlier = r[r.index < first]
        before, after = earlier.tail(k), r[r.index >= first].head(k)
        # (or the error is beyond any return the run has seen: x100 the largest, in the return's
        # units: a return that grew from 0 has no ratio to compare with; whatever the return did,
        # and whether or not episodes still ended to log one after it)
        beyond = float(np.sqrt(vals.max())) > cfg.value_error_beyond * float(np.abs(r.to_numpy()).max())
        if len(before) < 2 or (len(after) < 2 and not beyond):
            return None
        margin = climb_margin(float(r.max()), diff_noise(r.to_numpy()))
        best = _reward_best(earlier)
        if float(after.median()) < float(before.median()):
            fell = f", while {reward[0]} fell from {ev.median_of(before)} to {ev.median_of(after)}"
        elif best is not None and best[1] - float(after.median()) > margin:
            fell = (f", with {reward[0]} already down from its best, a median {fmt(best[1])} around step {best[0]}, "
                    f"to {ev.median_of(after)}")
        elif float(after.median()) - float(before.median()) <= margin and \
                (best is None or best[1] - head_level(r.to_numpy()) <= margin) and \
                np.sqrt(float(vals.max())) > cfg.value_error_share * float(np.abs(r.to_numpy()).max()):
            # a squared error whose root is a good share of the largest return seen: the critic is
            # far off in the return's own units (one fitting a constant return of -3 that wobbles from
            # 1e-8 to 1e-3, an error of 0.03, is not)
            fell = (f", while {reward[0]} never improved ({ev.median_of(after)} after it) and the critic's "
                    f"error, sqrt {fmt(float(np.sqrt(vals.max())))}, is {fmt(100 * cfg.value_error_share)}% or more "
                    f"of the largest {reward[0]} seen")
        elif _still_climbing(s[s.index >= first], r[r.index >= first], margin, cfg):
            # a critic whose loss is still growing several-fold a quarter at the run's end, while the
            # return stands still: Q-values running away (offline RL's overestimation), not a critic
            # following a return that grew
            fell = (f", still climbing at the run's end (its last quarter's median x{fmt(_quarter_growth(s[s.index >= first]))} "
                    f"the quarter's before) while {reward[0]} stood still ({ev.median_of(after)} after it)")
        elif not beyond:
            return None
        # the critic's error (the root of its squared loss) must have grown far beyond the scale the
        # return reached while it improved: an error x12 beside returns x11 is a critic following a
        # return that grew (learning); returns that only got worse explain nothing
        error_growth = float(np.sqrt(vals.max() / early))
        return_growth = _return_growth(r, best, cfg)
        if error_growth <= np.sqrt(cfg.grad_blowup_factor) * max(return_growth, 1.0) and not beyond:
            return None
        if beyond:
            fell += (f"; its error, sqrt {fmt(float(np.sqrt(vals.max())))}, is over {fmt(cfg.value_error_beyond)}x "
                     f"the largest {reward[0]} seen, {fmt(float(np.abs(r.to_numpy()).max()))}")
        else:
            fell += (f"; its error grew x{fmt(error_growth)}, the return's scale x{fmt(return_growth)}")
    top = int(big[int(np.argmax(vals[big]))])
    first_big = int(s.index[big[np.searchsorted(s.index.to_numpy()[big], first)]])
    start = _climb_start(s, int(s.index.get_loc(first)), earlier, best, cfg)
    climb = ""
    if start != first:
        climb = (f"; the climb that led to it started at {ev.rec(s, start)} "
                 f"({fmt(float(s.loc[start]) / float(np.median(vals[:cfg.min_history])))}x its first records)")
    return Finding(DIVERGENCE, start, CRITICAL, name, "value_loss_blowup",
                   f"the value loss {name} reached {fmt(float(vals[top]))} at step {int(s.index[top])} "
                   f"({fmt(float(vals[top]) / early)}x its early level, a median of {fmt(early)}); {big.size} records at "
                   f"{fmt(cfg.grad_blowup_factor)}x or more, repeatedly from {ev.rec(s, first_big)}"
                   + fell + climb)
