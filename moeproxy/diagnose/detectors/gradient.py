"""Vanishing-gradient detector (secondary): the policy stops updating.

Rules (shared/research/logs-and-failures.md §2 row 9): grad norm below 1e-3 of its early median
(or exactly 0) for at least ``vanishing_min_records`` consecutive records through the end of the
run; learning rate exactly 0 after it was positive. Scattered zero grad norms are normal in GRPO
(groups whose rewards are all equal have no advantage) and are only noted, and so is a final run of
zeros in a run where zero was already the usual value.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from moeproxy.diagnose import evidence as ev
from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import diff_noise, fmt, quarter_count
from moeproxy.diagnose.semantics import counter_series, dropped_to_zero
from moeproxy.diagnose.series import RunSeries
from moeproxy.ingest.names import canonical_of
from moeproxy.vocabulary import is_validation_loss
from moeproxy.diagnose.taxonomy import CRITICAL, INFO, VANISHING_GRADIENT, Finding
from moeproxy.diagnose.rules import declare

thresholds(
    vanishing_fraction=(1e-3, "grad norm below this share of its usual level: no effective update"),
    vanishing_min_records=(5, "records the grad norm stays ~0 (or the loss repeats) before it counts"),
    lr_decayed_share=(0.01, "an lr this small a share of its peak before it reads 0: the schedule's end"),
    floor_tolerance=(0.005, "a reward within this share of its lowest value (of its size) is at it: a time-out "
                            "penalty of -30 with a few -29.95"),
    usual_zero_share=(0.5, "grad norms ~0 on more records than this: zero is the run's usual value"),
    empty_update_share=(0.8, "RL updates with a loss exactly 0 on this share of records: nothing is learned"),
    same_value=(1e-6, "relative agreement at which two printed losses are the same number"),
    min_digits=(4, "significant digits a repeated loss must show to mean a frozen loss"),
    entropy_frozen_digits=(3, "an entropy repeated in every record from the start is frozen when printed with this many "
                              "significant digits or more (Stable-Baselines prints three: -14.2)"),
    never_learned_records=(8, "records from the run's start over which a loss that never moves never learned"),
    never_learned_band=(0.02, "... its 5-95 % range within this share of its level"),
    never_learned_trend=(0.01, "... or, noisier, its first and last quarters' medians this close"),
    learning_decline=(5.0, "a loss whose first-to-last-quarter decline is this many noise widths is learning, "
                            "however slowly (a live run's first records)"),
    learning_min_share=(0.001, "... and by more than this share of its level (0.015 % in 68 epochs is no learning)"),
    never_learned_noisy_band=(0.10, "... with its 5-95 % range within this share of its level"),
    cycle_distinct_share=(0.8, "a loss cycling with a period has about as many distinct values as the period (this "
                               "share of it): fewer are a few printed levels meeting again by chance"),
    penalty_share=(0.5, "a reward whose one value this share of the records carry: a penalty every sample earned"),
    never_improved_records=(50, "records from the run's start over which an RL reward that never rose never learned"),
    never_improved_window=(0.1, "... its level read as rolling medians over this share of the records (5 at least)"),
    never_improved_rise=(0.1, "... its best level above its first one by no more than this share of its 5-95 % range"),
    never_improved_spread=(0.1, "... its 5-95 % range at least this share of its level (a return that varies as an "
                                "untrained policy's do; one steady at a level is converged at its ceiling)"),
    never_improved_fall=(0.15, "... and its last level below its first one by no more than this share (a fall is a collapse)"),
    uniform_classes=(100, "a loss frozen at ln(k), k up to this: a uniform guess over k outcomes"),
    uniform_tolerance=(1e-3, "... to within this (absolute, in nats)"),
    chance_classes=(6, "a loss that never leaves ln(k), k up to this (where the levels of k and k+1 lie further "
                        "apart than the band below): the chance level of a k-way classifier"),
    chance_band=(0.03, "... every quarter's median within this share of ln(k)"),
)

RULES = declare(VANISHING_GRADIENT, {
    "grad_norm_vanished": "grad norm ~0 for the rest of the run",
    "scattered_zero_grad": "grad norm ~0 on scattered GRPO steps (a note: normal)",
    "lr_zero": "learning rate 0 after being positive (not a schedule that decayed to 0)",
    "grad_norm_zero_throughout": "grad norm exactly 0 in every record and the loss never moves: no update was ever applied",
    "loss_frozen": "a loss repeating one value exactly to the end: the weights no longer change",
    "loss_cycle_repeats": "a training loss repeating an earlier run of its values exactly, record for record, to the "
                          "end (the same batches, epoch after epoch): the weights no longer change",
    "loss_zero_throughout": "a (non-RL) training loss exactly 0 in every record: no gradient, no update ever made",
    "loss_zero_to_end": "a (non-RL) training loss that drops from its level to exactly 0 and stays 0 to the end: no "
                        "gradient from there on (a margin loss every example satisfies)",
    "advantages_zero": "an RL run's advantages, mean and spread, exactly 0 in every record: no update had anything "
                       "to follow, nothing was ever learned",
    "updates_empty": "an RL loss exactly 0 on nearly every update, the reward stuck at its floor: nothing is learned",
    "reward_at_floor": "an RL reward exactly at its lowest value on nearly every record, to the end: nothing is learned",
    "groups_all_equal": "the groups' reward std 0 on nearly every record and the reward level: nothing is learned",
    "loss_never_moved": "a training loss that never left a narrow band from the run's start: the run never learned",
    "reward_never_moved": "an RL reward at or below 0 that never left a narrow band from the run's start: nothing "
                          "was ever learned (the groups' answers all scored the same penalty)",
    "reward_never_improved": "an RL reward (a return) whose level never rose above where the run started, over "
                             "the whole run, nor fell: the policy never learned anything the return shows",
    "loss_at_uniform_guess": "a loss frozen at ln(k): the model predicts k outcomes uniformly and does not learn",
    "loss_at_chance": "a training loss that stays at ln(k), a k-way classifier's chance level, from the run's start "
                      "to its end: the model never learned more than the class prior",
    "accuracy_frozen": "an accuracy at one value below its ceiling in every record from the second to the end, the "
                       "loss not blowing up: the model's predictions never changed (it outputs one class)",
    "entropy_frozen": "an RL policy's entropy at one value, as printed (three digits or more), in every record from "
                      "the run's start: the "
                      "policy's distribution never changed, no update reached it",
}, tentative=("reward_never_improved", "loss_never_moved", "accuracy_frozen"),
   thresholds={"entropy_frozen": ("never_learned_records", "same_value", "entropy_frozen_digits"),
               "accuracy_frozen": ("never_learned_records", "same_value", "loss_factor"),
               "loss_at_chance": ("chance_classes", "chance_band", "never_learned_records"),
               "loss_never_moved": ("never_learned_records", "never_learned_band", "never_learned_trend",
                                    "never_learned_noisy_band"),
               "loss_at_uniform_guess": ("uniform_classes", "uniform_tolerance", "vanishing_min_records"),
               "reward_never_improved": ("never_improved_records", "never_improved_window", "never_improved_rise",
                                         "never_improved_fall", "never_improved_spread", "penalty_share"),
               "reward_never_moved": ("never_learned_records", "never_learned_noisy_band", "never_learned_trend",
                                      "penalty_share"),"grad_norm_vanished": ("vanishing_fraction", "vanishing_min_records", "usual_zero_share",
                                      "converged_share"),
               "grad_norm_zero_throughout": ("vanishing_min_records",),
               "lr_zero": ("vanishing_min_records", "lr_decayed_share"),
               "loss_frozen": ("vanishing_min_records", "same_value", "min_digits"),
               "loss_cycle_repeats": ("vanishing_min_records", "same_value", "min_digits", "cycle_distinct_share"),
               "loss_zero_throughout": ("vanishing_min_records",),
               "loss_zero_to_end": ("vanishing_min_records", "converged_share"),
               "updates_empty": ("empty_update_share", "vanishing_min_records"),
               "advantages_zero": ("vanishing_min_records",),
               "reward_at_floor": ("empty_update_share", "vanishing_min_records", "floor_tolerance"),
               "groups_all_equal": ("empty_update_share", "vanishing_min_records")})


def _tail_run(mask: np.ndarray) -> int:
    """Length of the run of True at the end of ``mask``."""
    if not mask.size or not mask[-1]:
        return 0
    false = np.flatnonzero(~mask)
    return int(mask.size - (false[-1] + 1 if false.size else 0))




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
            usual = before.size >= 3 and before.mean() > cfg.usual_zero_share
            converged = run_len >= need and _loss_converged(run, int(s.index[len(vals) - run_len]), cfg)
            if run_len >= need and not usual and not converged:
                onset = int(s.index[len(vals) - run_len])
                first = s[s > 0].iloc[: max(3, positive.size // 10)]
                out.append(Finding(VANISHING_GRADIENT, onset, CRITICAL, name, "grad_norm_vanished",
                                   f"{name} fell from a {ev.median_of(first, s)} to {ev.rec(s, onset)} "
                                   f"and stayed at or below the limit {fmt(cfg.vanishing_fraction * early)} "
                                   f"({fmt(100 * cfg.vanishing_fraction)}% of that median) for the last "
                                   f"{run_len} records"))
            elif tiny.sum() and not converged:
                out.append(Finding(VANISHING_GRADIENT, int(s.index[int(np.argmax(tiny))]), INFO, name,
                                   "scattered_zero_grad",
                                   f"{int(tiny.sum())} records with {name} near zero (first: "
                                   f"{ev.rec(s, s.index[int(np.argmax(tiny))])}; e.g. GRPO groups with zero "
                                   f"reward variance): normal when scattered"))
    out += (_advantages_zero(run, cfg) or _never_updated(run, cfg) or _empty_updates(run, cfg)
            or _entropy_frozen(run, cfg))
    out += _frozen_losses(run, cfg) or _never_learned(run, cfg) or _accuracy_frozen(run, cfg)
    found = run.resolve("lr")
    if found:
        name, s = found
        vals = s[np.isfinite(s.to_numpy())]
        pos = np.flatnonzero(vals.to_numpy() > 0)
        if pos.size:
            after = vals.iloc[pos[0]:]
            zero_run = _tail_run(after.to_numpy() == 0)
            last = after.iloc[: len(after) - zero_run]  # at least the first positive record
            decayed = float(last.iloc[-1]) <= cfg.lr_decayed_share * float(last.max())
            if zero_run >= cfg.vanishing_min_records and not decayed:  # a schedule that decayed to 0 ended
                onset = int(after.index[len(after) - zero_run])
                out.append(Finding(VANISHING_GRADIENT, onset, CRITICAL, name, "lr_zero",
                                   f"{name} is exactly 0 from step {onset} to the end, after "
                                   f"{ev.rec(last, last.index[-1])}"))
    return out




def _loss_converged(run: RunSeries, step: int, cfg: DiagnoseConfig) -> bool:
    """A (non-RL) training loss whose records from ``step`` on sit below ``converged_share`` of its
    first records' level: the gradient vanished because the loss did (a small fine-tuning set learned
    to its last digits), LABELS.md's converged run, not one that stopped updating."""
    found = run.resolve("loss")
    if found is None or run.is_rl:
        return False
    v = found[1][np.isfinite(found[1].to_numpy())]
    first = v.to_numpy(dtype=float)[: max(3, quarter_count(len(v)) // 2)]
    after = v[v.index >= step].to_numpy(dtype=float)
    if not after.size or not first.size or float(np.median(first)) <= 0:
        return False
    return float(np.median(after)) <= cfg.converged_share * float(np.median(first)) and float(after.min()) >= 0


def _digits(value: float) -> int:
    """Significant digits of a value as printed (its shortest repr)."""
    mantissa = repr(abs(float(value))).split("e")[0].replace(".", "").strip("0")
    return len(mantissa)


def _improved(loss: pd.Series, upto_step) -> bool:
    """The training loss came down from its first records' level before ``upto_step``: the level of
    the records from the fourth on (their median, or the last quarter's) is over 1 % below, and below
    by more than three noise widths of the two medians (a loss that jumps between a few values from record to
    record does not improve by its median of three)."""
    v = loss[np.isfinite(loss.to_numpy())]
    v = v[v.index <= upto_step]
    if len(v) < 4:
        return False
    start = float(np.median(v.iloc[:3].to_numpy()))
    rest = v.iloc[3:].to_numpy()
    tail = rest[-max(1, len(rest) // 4):]
    level = min(float(np.median(rest)), float(np.median(tail)))
    noise = diff_noise(v.to_numpy(dtype=float)) * np.sqrt(1 / 3 + 1 / len(tail))
    return level < start - max(0.01 * abs(start), 3 * noise)


def _never_updated(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """Grad norm exactly 0 in every record, and the loss never moving (or 0 too): LABELS.md "the run
    never learns at all". A trainer that logs 0 for a norm it did not compute still shows a loss
    that falls, and is left alone."""
    grad, loss = run.resolve("grad_norm"), run.resolve("loss")
    if grad is None:
        return []
    g = grad[1][np.isfinite(grad[1].to_numpy())]
    if len(g) < cfg.vanishing_min_records or np.any(g.to_numpy() != 0):
        return []
    if loss is not None and _improved(loss[1], loss[1].index.max()):
        return []
    first = int(g.index[0])
    moving = "" if loss is None else f", and {loss[0]} never fell below its first value"
    return [Finding(VANISHING_GRADIENT, first, CRITICAL, grad[0], "grad_norm_zero_throughout",
                    f"{grad[0]} is exactly 0 in all {len(g)} records from step {first}{moving}: no update was "
                    f"ever applied")]


def _other_losses_improve(run: RunSeries, train: str, at: int) -> bool:
    """Another loss or error the run logs (a validation loss, a mean squared error) that falls to
    under half its level at ``at`` by its last quarter: the weights still change."""
    for name in run.names:
        low = name.lower()
        if name == train or not ("loss" in low or "error" in low) or "scale" in low:
            continue  # (a loss scale is the fp16 scaler's, no loss)
        s = run.get(name)
        s = s[np.isfinite(s.to_numpy(dtype=float))]
        after = s[s.index >= at].to_numpy(dtype=float)
        if after.size >= 4 and after[0] > 0 and float(np.median(after[-max(1, after.size // 4):])) < 0.5 * after[0]:
            return True
    return False


def _zero_to_end(run: RunSeries, name: str, loss: pd.Series, cfg: DiagnoseConfig) -> Finding | None:
    """A (non-RL) training loss that drops from its level to exactly 0 and stays 0 to the end
    (``dropped_to_zero``) gives no gradient - unless something shows the weights still change: a
    grad norm logged beside it that is not 0, or another loss or error that keeps falling (a Keras
    step that returns no loss prints 0 while its error falls)."""
    dropped = dropped_to_zero(loss, int(cfg.vanishing_min_records), cfg.converged_share)
    if dropped is None:
        return None
    at, before = dropped
    grad = run.resolve("grad_norm")
    g = grad[1][grad[1].index >= at].to_numpy(dtype=float) if grad is not None else np.array([])
    g = g[np.isfinite(g)]
    if (g.size and float(np.median(g)) > 0) or _other_losses_improve(run, name, at):
        return None
    return Finding(VANISHING_GRADIENT, at, CRITICAL, name, "loss_zero_to_end",
                   f"{name} went from {ev.rec(loss, before)} to exactly 0 at step {at} and stayed 0 for its last "
                   f"{int((loss.index >= at).sum())} records: a loss of 0 gives no gradient, no update from there on")


def _frozen_losses(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """A loss (training, or evaluation on a fixed set) that repeats one non-zero value to
    ``same_value`` for at least ``vanishing_min_records`` records through the end: the weights stopped
    changing. Dated from the first record when the training loss never improved before the
    repetition began (the run never learned), else from the first repeated record. A (non-RL)
    training loss of exactly 0 in every record is its own rule, ``loss_zero_throughout``: no gradient
    at all (0 repeated is no printed value that could repeat by chance, which ``min_digits`` guards)."""
    train = run.resolve("loss")
    if train is not None and not run.is_rl:
        v = train[1].to_numpy(dtype=float)
        if v.size >= cfg.vanishing_min_records and not np.any(v) and not _accuracy_at_ceiling(run):
            # a training loss of exactly 0 from its first record to its last (an RL loss is 0 when a
            # group's rewards are equal: not here) gives no gradient: no update was ever made
            first = int(train[1].index[0])
            return [Finding(VANISHING_GRADIENT, first, CRITICAL, train[0], "loss_zero_throughout",
                            f"{train[0]} is exactly 0 in all {v.size} records from step {first}: a loss of 0 "
                            f"gives no gradient, no update was ever made")]
        zero = _zero_to_end(run, train[0], train[1], cfg)
        if zero is not None:
            return [zero]
    names = ([train[0]] if train else []) + [n for n, _ in run.matching(
        lambda n: n.endswith("loss") and n.split("/")[0].split("_")[0] in ("eval", "val", "validation", "valid"))]
    if run.is_rl and train is not None:
        # an RL run's other policy losses (DreamerV3's ``actor_loss`` beside its world model's
        # ``loss``): one repeating a value to seven digits is a policy that no longer updates
        names += [n for n, _ in run.matching(lambda n: n != train[0] and (canonical_of(n) or ("",))[0] == "loss"
                                             and not is_validation_loss(n))]
    for name in names:
        s = run.get(name)
        s = s[np.isfinite(s.to_numpy())]
        v = s.to_numpy(dtype=float)
        if v.size < cfg.vanishing_min_records + 1 or v[-1] == 0:
            continue
        same = np.abs(v - v[-1]) <= cfg.same_value * abs(v[-1])
        n_same = _tail_run(same)
        if n_same < cfg.vanishing_min_records:
            continue
        if _digits(v[-1]) < cfg.min_digits:  # ``2.31`` printed five times can repeat by chance
            continue
        began = int(s.index[v.size - n_same])
        if _within_one_count(run, s.index[v.size - n_same:]):
            continue  # one value per epoch, copied onto each of the epoch's rows (a row per episode)
        if train is not None and name != train[0] and is_validation_loss(name) \
                and _improved(train[1][train[1].index >= began], s.index[-1]):
            continue  # an evaluation loss repeated while the training loss improves: printed stale, not frozen
        # (an RL run's other policy loss is dated from where it froze: the run's loss says nothing of it)
        never = train is not None and (name == train[0] or is_validation_loss(name)) and not _improved(train[1], began)
        onset = int(train[1].index[0]) if never else began
        why = (f"; {train[0]} never fell below its first records' level, so the run never learned"
               if never else "")
        return [Finding(VANISHING_GRADIENT, onset, CRITICAL, name, "loss_frozen",
                        f"{name} repeats {v[-1]:.7g} exactly in its last {n_same} records (from step {began}){why}")]
    return _repeated_cycle(run, train, cfg) if train is not None else []


def _accuracies(run: RunSeries, training_only: bool) -> list[str]:
    """The accuracies a run logs, read by their words (not ``grad_acc_steps``, a gradient accumulation
    count, nor a running best); ``training_only``: not an evaluation's."""
    out = []
    for name in run.names:
        words = set(re.split(r"[^a-z0-9]+", name.lower()))
        if not {"acc", "accuracy"} & words or {"grad", "gradient", "steps", "best"} & words:
            continue
        if training_only and {"val", "valid", "validation", "eval", "test"} & words:
            continue
        out.append(name)
    return out


def _accuracy_at_ceiling(run: RunSeries) -> bool:
    """A training accuracy logged beside the loss at its ceiling (1, or 100 %) in every record: a loss
    of exactly 0 there is a fit that is perfect on every batch, LABELS.md's converged run at its
    ceiling, not a run that never updated."""
    for name in _accuracies(run, training_only=True):
        v = run.get(name).to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        if v.size and (np.all(v == 1.0) or np.all(v == 100.0)):
            return True
    return False


def _within_one_count(run: RunSeries, steps: pd.Index) -> bool:
    """The records at ``steps`` all share one value of a counter the log carries beside its step (an
    ``epoch`` column of a CSV that writes a row per episode), a counter that moves elsewhere in the
    run: a metric repeated over them was logged once for that count, not frozen."""
    for _, c in counter_series(run):
        at = c.reindex(steps).to_numpy(dtype=float)
        if np.isfinite(at).all() and at.size >= 2 and np.all(at == at[0]) and c.nunique() > 1:
            return True
    return False


def _repeated_cycle(run: RunSeries, train: tuple[str, pd.Series], cfg: DiagnoseConfig) -> list[Finding]:
    """LABELS.md "losses repeating exactly epoch after epoch": the training loss's last
    ``vanishing_min_records`` records or more each equal (to ``same_value``) the record a fixed number
    of records before (the same batches seen again, the weights unchanged), the values themselves
    differing from one another and printed to ``min_digits``, and the loss no series of a few levels
    (about as many distinct values as the cycle is long). The shortest such period is taken.
    Dated like ``loss_frozen``: from the first record when the loss never improved before the cycle
    began, else from the cycle's first appearance."""
    name, s = train
    s = s[np.isfinite(s.to_numpy())]
    v = s.to_numpy(dtype=float)
    if v.size < cfg.vanishing_min_records + 2:
        return []
    # only the periods that can hold are checked, shortest first (the same answer as trying every
    # period, without comparing the whole log once per period: 12,000 records took 0.7 s): each of
    # the last ``vanishing_min_records`` records equals the one that many records before it, and,
    # where the log ends in a run of one value, so does the record before that run (a cycle of one
    # value is loss_frozen's: the repeats must reach past it)
    n = v.size
    periods = np.arange(2, n - cfg.vanishing_min_records + 1)
    tail = int(np.flatnonzero(v[::-1] != v[-1])[0]) if (v != v[-1]).any() else n  # records in the last run of one value
    checks = range(n - cfg.vanishing_min_records, n)
    if tail >= cfg.vanishing_min_records:
        periods = periods[periods <= n - 1 - tail]
        checks = [*checks, n - 1 - tail]
    for i in checks:
        periods = periods[np.abs(v[i] - v[i - periods]) <= cfg.same_value * np.abs(v[i])]
    for period in periods.tolist():
        same = np.abs(v[period:] - v[:-period]) <= cfg.same_value * np.abs(v[period:])
        n_same = _tail_run(same)
        if n_same < cfg.vanishing_min_records:
            continue
        repeated = v[v.size - n_same:]
        if np.unique(repeated).size < 2 or np.median([_digits(x) for x in repeated]) < cfg.min_digits:
            continue  # one value repeated is loss_frozen's; short printed values repeat by chance
        if np.unique(v).size < cfg.cycle_distinct_share * min(period, v.size - period):
            continue  # a loss of a few levels (bf16: 9.625, 9.6875, 9.75) meets its own values again by chance
        first = v.size - n_same - period  # where the cycle's values were first seen
        began = int(s.index[first])
        never = not _improved(s, began)
        onset = int(s.index[0]) if never else began
        why = f"; {name} never fell below its first records' level, so the run never learned" if never else ""
        return [Finding(VANISHING_GRADIENT, onset, CRITICAL, name, "loss_cycle_repeats",
                        f"{name}'s last {n_same} records repeat, value for value, the records {period} before them "
                        f"({repeated[0]:.7g} at step {int(s.index[v.size - n_same])} as at step {began}, and so "
                        f"on): the same batches give the same loss, the weights no longer change{why}")]
    return []


def _advantages_zero(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """LABELS.md "every GRPO group's rewards equal on every step", read on the advantages the
    trainer logs (``semantics.advantages_all_zero``): their mean and spread 0 in every one of at least
    ``vanishing_min_records`` records. The data stage set them aside as never computed, one by one;
    together they say every sample's advantage was 0."""
    if run.zero_advantages is None or run.zero_advantages[2] < cfg.vanishing_min_records:
        return []
    why, first, _ = run.zero_advantages
    return [Finding(VANISHING_GRADIENT, first, CRITICAL, "advantages", "advantages_zero",
                    f"{why} from step {first}: no sample had an advantage, so no update had anything to learn from")]


def _empty_updates(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """LABELS.md "every GRPO group's rewards equal on every step", read in an RL run two ways:

    - a policy loss of exactly 0 (an update with no advantage to follow) on at least
      ``empty_update_share`` of the records, with the reward stuck at its lowest value (most groups
      score nothing; a run whose groups all score full marks has converged instead);
    - the mean reward at exactly its lowest value on at least ``empty_update_share`` of the records
      of each quarter of the run (every sample of every group scored the floor: no advantage, no
      update). A reward at one value other than 0 in every record counts (the run never saw
      anything else); 0 in every record was never computed (LABELS.md "Data before signals").
    Scattered zeros are normal."""
    if not run.is_rl:
        return []
    loss, reward = run.resolve("loss"), run.resolve("reward_mean")
    if loss is not None:
        name, s = loss
        v = s[np.isfinite(s.to_numpy())].to_numpy(dtype=float)
        share = float(np.mean(v == 0)) if v.size >= cfg.vanishing_min_records else 0.0
        r = (reward[1][np.isfinite(reward[1].to_numpy())].to_numpy(dtype=float) if reward is not None
             else np.array([]))
        at_top = r.size and float(np.median(r)) > float(r.min()) + 0.1 * (float(r.max()) - float(r.min()))
        if share >= cfg.empty_update_share and not at_top:
            why = ""
            if reward is not None:
                low = ev.extreme(reward[1], direction=-1)
                why = f"; {reward[0]} sits at its lowest value ({fmt(low[1])}, first logged at step {low[0]}) on most records"
            first = int(s.index[0])
            return [Finding(VANISHING_GRADIENT, first, CRITICAL, name, "updates_empty",
                            f"{name} is exactly 0 on {share:.0%} of {v.size} updates from step {first}{why}: the "
                            f"groups' rewards are all equal, so no update has anything to learn from")]
    hit = _groups_all_equal(run, cfg)
    if hit is not None or reward is None:
        return [hit] if hit is not None else []
    at_floor = _reward_at_floor(reward, cfg)
    if at_floor is None:  # not at its lowest value throughout: a penalty it never left, read as a band
        at_floor = _reward_never_moved(run, cfg)
    if at_floor is None:
        at_floor = _reward_never_improved(run, cfg)
    return [at_floor] if at_floor is not None else []


def _reward_never_improved(run: RunSeries, cfg: DiagnoseConfig) -> Finding | None:
    """LABELS.md "the run never learns at all", read on an RL return that varies: over
    ``never_improved_records`` records or more, logged from the run's start, its level (rolling
    medians over ``never_improved_window`` of the records) never rose above its first level by more
    than ``never_improved_rise`` of its 5-95 % range, and its last level is not below the first by
    more than ``never_improved_fall`` of it (a return that rose and fell back collapsed; one that
    fell from the start is a collapse too). A return at its highest value on ``penalty_share`` of the
    records, or steady (its range under ``never_improved_spread`` of its level), sits at its ceiling:
    converged, not stuck. A vanishing gradient is secondary: it is the verdict only
    where no main category lasted (``verdict.candidates``)."""
    reward = run.resolve_reward()
    if reward is None:
        return None
    name, s = reward
    s = s[np.isfinite(s.to_numpy())]
    v = s.to_numpy(dtype=float)
    if v.size < cfg.never_improved_records or not _from_run_start(run, s):
        return None
    low, high = np.quantile(v, [0.05, 0.95])
    spread = float(high - low)
    if spread <= 0 or spread < cfg.never_improved_spread * abs(float(np.median(v))):
        return None  # one value nearly throughout (the floor and band rules read it), or steady at a level
    if float(np.mean(v >= v.max())) >= cfg.penalty_share:
        return None  # at its highest value on half the records: a converged run at its ceiling (LABELS.md)
    width = max(5, int(cfg.never_improved_window * v.size))
    levels = pd.Series(v).rolling(width).median().to_numpy()[width - 1:]
    first, best, last = float(levels[0]), float(levels.max()), float(levels[-1])
    if best - first > cfg.never_improved_rise * spread or first - last > cfg.never_improved_fall * spread:
        return None
    start = int(s.index[0])
    return Finding(VANISHING_GRADIENT, start, CRITICAL, name, "reward_never_improved",
                   f"{name} started at a level of {fmt(first)} (median of its first {width} records from step "
                   f"{start}) and never rose above {fmt(best)} over its {v.size} records, {fmt(last)} at the end: "
                   f"within {fmt(100 * cfg.never_improved_rise)}% of its 5-95 % range ({fmt(float(low))} to "
                   f"{fmt(float(high))}); the policy never learned anything the return shows")


def _reward_at_floor(reward: tuple[str, pd.Series], cfg: DiagnoseConfig) -> Finding | None:
    """The mean reward at exactly its lowest value on ``empty_update_share`` of the records of each
    quarter of the run (``_empty_updates``)."""
    name, s = reward
    s = s[np.isfinite(s.to_numpy())]
    r = s.to_numpy(dtype=float)
    if r.size < 2 * cfg.vanishing_min_records or (r.min() == r.max() == 0):
        return None  # 0 in every record: never computed (LABELS.md "Data before signals")
    # at its lowest value: exactly, or to ``floor_tolerance`` of it (a time-out penalty of -30 every
    # episode, a few -29.95 where an agent touched something)
    floor = r <= r.min() + cfg.floor_tolerance * abs(float(r.min()))
    q = quarter_count(r.size)
    shares = [float(part.mean()) for part in np.array_split(floor, 4)]
    if min(shares) < cfg.empty_update_share:  # in every quarter: a reward that rose for a while and fell back collapsed
        return None
    first = int(s.index[0])
    return Finding(VANISHING_GRADIENT, first, CRITICAL, name, "reward_at_floor",
                   f"{name} is at its lowest value {fmt(float(r.min()))} on {int(floor.sum())} of {r.size} "
                   f"records from step {first} (last {q}: {int(floor[-q:].sum())}): every sample of the groups "
                   f"scored the same, so no update has anything to learn from")


def _entropy_frozen(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """LABELS.md "the run never learns at all", read on an RL policy's entropy: one value (to
    ``same_value``, printed to ``entropy_frozen_digits`` or more: 1.9459 = ln 7, a uniform policy over
    seven actions; 1.4189, an untrained unit Gaussian; Stable-Baselines' -14.2, ten of them) in every one of ``never_learned_records`` records or
    more, from the run's start to its end. Any update that reached the policy would have moved it."""
    found = run.resolve("policy_entropy")
    if found is None or not run.is_rl:
        return []
    name, s = found
    s = s[np.isfinite(s.to_numpy())]
    v = s.to_numpy(dtype=float)
    if v.size < cfg.never_learned_records or v[-1] == 0:
        return []
    if _digits(v[-1]) < cfg.entropy_frozen_digits:
        return []
    if not (np.abs(v - v[-1]) <= cfg.same_value * abs(v[-1])).all() or not _from_run_start(run, s):
        return []
    first = int(s.index[0])
    return [Finding(VANISHING_GRADIENT, first, CRITICAL, name, "entropy_frozen",
                    f"{name} is {v[-1]:.7g} in all {v.size} records from the run's start at step {first} to "
                    f"step {int(s.index[-1])}: the policy's distribution never changed, no update reached it")]


def _accuracy_frozen(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """LABELS.md "the run never learns at all", read on an accuracy (training, validation or test) of
    a run that is not RL: one value (to ``same_value``), neither 0 nor its ceiling, in every record
    from the second to the last, over ``never_learned_records`` records or more from the run's start
    (0.5603, the majority class's share, epoch after epoch): the predictions never changed. Not where
    the training loss blew up (non-finite, or its last quarter ``loss_factor`` times its first): that
    is the failure, and the accuracy is stuck because of it."""
    if run.is_rl:
        return []
    loss = run.resolve("loss")
    if loss is not None:
        v = loss[1].to_numpy(dtype=float)
        q = quarter_count(v.size)
        if not np.isfinite(v).all() or (v.size >= 4 and np.median(v[-q:]) > cfg.loss_factor * np.median(v[:q])):
            return []
    for name in _accuracies(run, training_only=False):
        s = run.get(name)
        s = s[np.isfinite(s.to_numpy(dtype=float))]
        v = s.to_numpy(dtype=float)
        if v.size < cfg.never_learned_records or v[-1] <= 0 or v[-1] in (1.0, 100.0):
            continue
        if not (np.abs(v[1:] - v[-1]) <= cfg.same_value * abs(v[-1])).all() or not _from_run_start(run, s):
            continue
        first = int(s.index[0])
        return [Finding(VANISHING_GRADIENT, first, CRITICAL, name, "accuracy_frozen",
                        f"{name} is {v[-1]:.7g} in every record from step {int(s.index[1])} to step "
                        f"{int(s.index[-1])} ({v.size - 1} records): the model's predictions never changed, "
                        f"the run never learned")]
    return []


def _from_run_start(run: RunSeries, s: pd.Series) -> bool:
    """The series is logged from the run's start: its first record within two of the log's gaps, and
    the run's epoch counter, where it logs one, no further on there than two of its own increments (a
    log that opens at epoch 0.66 with step 1 is a run's end, its steps counted from the log's start;
    one whose epoch stays at 149 throughout is a stretch of that epoch)."""
    gap = max(run.step_gap, float(np.median(np.diff(s.index.to_numpy()))))
    if not (s.index[0] <= run.first_step + 2 * gap and run.first_step <= 2 * gap):
        return False
    if "epoch" in run.names:
        e = run.get("epoch").to_numpy(dtype=float)
        e = e[np.isfinite(e)]
        rises = np.diff(e)
        rises = rises[rises > 0]
        if rises.size >= 2 and e[0] > 2 * float(np.median(rises)):
            return False
        if rises.size < 2 and e.size and e[0] > 2:
            return False  # a log inside one late epoch (``Epoch 149 | Iter 1``): its steps count within it
    return True


def _falling_steadily(v: np.ndarray, cfg: DiagnoseConfig) -> bool:
    """A loss whose last quarter's median lies ``learning_decline`` noise widths below its first's,
    and by more than ``learning_min_share`` of its level: it is learning, however slowly."""
    trend = _band_and_trend(v)[2]
    return bool(trend < 0 and -trend > cfg.learning_decline * diff_noise(v)
                and -trend > cfg.learning_min_share * float(np.median(v)))


def _band_and_trend(v: np.ndarray) -> tuple[float, float, float]:
    """(5th percentile, 95th percentile, last quarter's median minus the first quarter's)."""
    low, high = np.quantile(v, [0.05, 0.95])
    q = quarter_count(v.size)
    return float(low), float(high), float(np.median(v[-q:]) - np.median(v[:q]))


def _reward_never_moved(run: RunSeries, cfg: DiagnoseConfig) -> Finding | None:
    """LABELS.md "the run never learns at all", read on an RL reward as ``loss_never_moved`` reads a
    loss: logged from the run's start over ``never_learned_records`` records or more, at or below 0
    (no answer ever earned anything: a penalty for an unfinished or malformed answer, -0.1 on every
    sample: that one value on half the records or more), its 5-95 % range within ``never_learned_noisy_band`` of its size and its first and last
    quarters' medians within ``never_learned_trend`` of it. A reward sitting high (a converged run at
    its ceiling) is not read this way; 0 in every record was never computed."""
    reward = run.resolve("reward_mean")
    if reward is None:
        return None
    name, s = reward
    s = s[np.isfinite(s.to_numpy())]
    v = s.to_numpy(dtype=float)
    if v.size < cfg.never_learned_records or not np.any(v):
        return None
    level = float(np.median(v))
    if level > 0 or float(v.max()) > 0:
        return None
    _, counts = np.unique(v, return_counts=True)
    if counts.max() < cfg.penalty_share * v.size:
        return None  # no one value most samples earn (a penalty): a return that varies a little is no such floor
    if not _from_run_start(run, s):
        return None
    low, high, trend = _band_and_trend(v)
    size = abs(level)
    if high - low > cfg.never_learned_noisy_band * size or abs(trend) > cfg.never_learned_trend * size:
        return None
    first = int(s.index[0])
    return Finding(VANISHING_GRADIENT, first, CRITICAL, name, "reward_never_moved",
                   f"{name} stayed at {ev.median_of(s)} (5th percentile {fmt(low)}, 95th {fmt(high)}) over all "
                   f"{v.size} records from the run's start at step {first}, never above 0: no answer earned "
                   f"anything, so no update had anything to learn from")


def _groups_all_equal(run: RunSeries, cfg: DiagnoseConfig) -> Finding | None:
    """LABELS.md "every GRPO group's rewards equal on every step", read where the trainer logs it:
    the groups' reward std exactly 0 (or the share of zero-std groups exactly 1) on at least
    ``empty_update_share`` of the records overall and of the last quarter, while the reward stays
    level (its last quarter's median within 10 % of its range of its first quarter's) and the groups
    score nothing (its median at or below 0), or were alike from the first records on: groups that
    came to score full marks alike have converged, groups alike from the start never learned.""" 
    for canonical, empty in (("zero_std_share", lambda v: v >= 1.0), ("reward_std", lambda v: v == 0.0)):
        found = run.resolve(canonical)
        if found is None:
            continue
        name, s = found
        s = s[np.isfinite(s.to_numpy())]
        v = s.to_numpy(dtype=float)
        if v.size < 2 * cfg.vanishing_min_records or v.min() == v.max():
            continue  # one value in every record may never have been computed
        equal = empty(v)
        q = quarter_count(v.size)
        if equal.mean() < cfg.empty_update_share or equal[-q:].mean() < cfg.empty_update_share:
            continue
        reward = run.resolve("reward_mean")
        if reward is None:
            continue  # equal groups that all score full marks converged: without the reward, no telling
        r = reward[1][np.isfinite(reward[1].to_numpy())].to_numpy(dtype=float)
        from_start = equal[:q].mean() >= cfg.empty_update_share
        if not r.size or (float(np.median(r)) > 0 and not from_start):
            continue  # the groups score something and came to score alike: a converged run at its ceiling
            # (LABELS.md), not a stuck one; groups alike from the first records on never had anything to learn
        k = quarter_count(r.size)
        # (by the quarters' medians and their means alike: a reward of a few discrete values,
        # 0.89/1.47/1.77/2.36 from two samples a group, has medians that jump from one value to the
        # next with no trend; a reward at 0 with a rare -0.125 has means that wander)
        moved = min(abs(float(np.median(r[-k:])) - float(np.median(r[:k]))),
                    abs(float(np.mean(r[-k:])) - float(np.mean(r[:k])))) if r.size >= 4 else 0.0
        if moved > 0.1 * (float(r.max()) - float(r.min())):
            continue  # a reward that rose learned; one that fell collapsed (its groups then all score 0)
        first = int(s.index[0])
        return Finding(VANISHING_GRADIENT, first, CRITICAL, name, "groups_all_equal",
                       f"{name} says every group's rewards were equal on {int(equal.sum())} of {v.size} records "
                       f"from step {first} (last {q}: {int(equal[-q:].sum())}), and the reward did not improve: "
                       f"no update has anything to learn from")
    return None


def _never_learned(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    """LABELS.md "the run never learns at all — the loss frozen at its initial value (e.g.
    ln(vocab))", read two ways on a training loss that is not an RL policy loss:

    - it sits at ln(k) for a small k (2.3026 = ln 10) to ``uniform_tolerance`` over the last
      ``vanishing_min_records`` records or more: the model outputs a uniform guess over k outcomes;
    - the log starts at the run's start and the loss stays within ``never_learned_band`` of its
      level over ``never_learned_records`` records or more, never improving; or, a noisier loss,
      within ``never_learned_noisy_band`` with its first and last quarters' medians within
      ``never_learned_trend`` of its level (no trend at all).
    Dated from the first record of the stretch."""
    found = run.resolve("loss")
    if run.is_rl:
        return []
    if found is None:
        # only a validation loss logged (a fixed set: no batch noise): one that never moved from the
        # run's start says the run never learned on its own
        for vname, vs in run.matching(is_validation_loss):
            hit = _never_moved(run, vname, vs[np.isfinite(vs.to_numpy())], cfg)
            if hit is not None:
                return [Finding(VANISHING_GRADIENT, hit.onset_step, CRITICAL, vname, hit.rule,
                                hit.evidence + " (no training loss logged)")]
        return []
    name, s = found
    s = s[np.isfinite(s.to_numpy())]
    v = s.to_numpy(dtype=float)
    if v.size < cfg.vanishing_min_records or float(np.median(v)) <= 0:
        return []
    # (a GAN's discriminator loss at 2 ln 2 = ln 4, its generator's at ln 2, is the adversarial
    # equilibrium the game aims at, where the discriminator cannot tell real from fake: no chance level)
    hit = None if _adversarial(run) else (_uniform_guess(name, s, cfg) or _at_chance(run, name, s, cfg))
    if hit is not None:
        return [hit]
    # the loss as logged per step, then its per-epoch copy (Lightning's ``train_loss_epoch``): a loss
    # whose four batches repeat one cycle every epoch is a band of its batches' spread per step, and
    # a flat line per epoch
    copies = [(name, s)] + [(n, run.get(n)) for n in run.names
                            if n.endswith("_epoch") and n != name and (canonical_of(n[:-len("_epoch")]) or ("",))[0] == "loss"]
    for name, s in copies:
        hit = _never_moved(run, name, s[np.isfinite(s.to_numpy())], cfg)
        if hit is not None:
            return [hit]
    # and the validation loss (a fixed set: no batch noise), when the training loss never improved:
    # at a uniform guess, or never moved from the run's start; dated from the training loss's first
    # record (the run never learned)
    train = found[1]
    if _improved(train, train.index.max()):
        return []
    for vname, vs in run.matching(is_validation_loss):
        vs = vs[np.isfinite(vs.to_numpy())]
        hit = _uniform_guess(vname, vs, cfg) or _never_moved(run, vname, vs, cfg)
        if hit is not None:
            first = min(int(train.index[0]), int(vs.index[0]))
            return [Finding(VANISHING_GRADIENT, first, CRITICAL, vname, hit.rule,
                            hit.evidence + f", and {name} never fell below its first records' level")]
    return []


_DISCRIMINATOR = frozenset({"d", "disc", "discriminator", "netd", "critic"})
_GENERATOR = frozenset({"g", "gen", "generator", "netg"})


def _adversarial(run: RunSeries) -> bool:
    """The run logs a generator's loss and a discriminator's (``d loss`` and ``g loss``, ``loss_D`` and
    ``loss_G``): a GAN, whose losses sit at their equilibrium when the game is balanced."""
    kinds = set()
    for name in run.names:
        words = set(re.split(r"[^a-z0-9]+", name.lower()))
        if "loss" in words or any(w.startswith("loss") or w.endswith("loss") for w in words):
            kinds |= {"d"} if words & _DISCRIMINATOR else set()
            kinds |= {"g"} if words & _GENERATOR else set()
    return kinds == {"d", "g"}


def _uniform_guess(name: str, s: pd.Series, cfg: DiagnoseConfig) -> Finding | None:
    """A loss at ln(k) for a small k to ``uniform_tolerance`` over its last ``vanishing_min_records``
    records or more: the model outputs a uniform guess over k outcomes."""
    v = s.to_numpy(dtype=float)
    if v.size < cfg.vanishing_min_records or float(np.median(v)) <= 0:
        return None
    level = float(np.median(v))
    k = int(round(float(np.exp(level)))) if level < np.log(cfg.uniform_classes + 1) else 0
    if not 2 <= k <= cfg.uniform_classes:
        return None
    near = np.abs(v - np.log(k)) <= cfg.uniform_tolerance
    n_near = _tail_run(near)
    if n_near < cfg.vanishing_min_records:
        return None
    began = int(s.index[v.size - n_near])
    if not (v[:v.size - n_near] < np.log(k) - cfg.uniform_tolerance).any():
        # it only ever came down to the uniform guess from above (an untrained model's first
        # records): it never learned, from the run's start (LABELS.md: the first record at which
        # the anomaly is visible), as loss_never_moved dates it
        began = int(s.index[0])
        since = f"never below it before (from {ev.rec(s, began)} it only came down to it)"
    else:
        since = f"from {ev.rec(s, began)}"
    return Finding(VANISHING_GRADIENT, began, CRITICAL, name, "loss_at_uniform_guess",
                   f"{name} sits at ln({k}) = {np.log(k):.4f} (within the limit {fmt(cfg.uniform_tolerance)}) "
                   f"in its last {n_near} records, {since}: the model predicts {k} "
                   f"outcomes uniformly and does not learn")


def _at_chance(run: RunSeries, name: str, s: pd.Series, cfg: DiagnoseConfig) -> Finding | None:
    """LABELS.md "the run never learns at all", read on a loss at a classifier's chance level: logged
    from the run's start over ``never_learned_records`` records or more, every quarter's median within
    ``chance_band`` of ln(k) for one k from 2 to ``chance_classes`` (0.693 = ln 2, 1.386 = ln 4). A
    noisy loss that drifts a little (0.717 to 0.670 over eight epochs of a binary classifier) never
    got below the prior; learning takes a classifier's loss well under ln(k). Larger k are not read:
    their levels lie closer together than the band, so any level would match one."""
    v = s.to_numpy(dtype=float)
    if v.size < cfg.never_learned_records or not _from_run_start(run, s):
        return None
    quarters = np.array([np.median(part) for part in np.array_split(v, 4)])
    if quarters.min() <= 0:
        return None
    level = float(np.median(v))
    if level > np.log(cfg.chance_classes + 1):
        return None
    k = int(round(float(np.exp(level))))
    if k < 2:
        return None
    chance = float(np.log(k))
    if np.abs(quarters - chance).max() > cfg.chance_band * chance:
        return None
    if _falling_steadily(v, cfg):
        return None  # below the prior by a little and still going down: learning, slowly
    first = int(s.index[0])
    return Finding(VANISHING_GRADIENT, first, CRITICAL, name, "loss_at_chance",
                   f"{name} stayed at ln({k}) = {chance:.4f}, a {k}-way classifier's chance level, over all "
                   f"{v.size} records from the run's start at step {first}: its quarters' medians "
                   f"{', '.join(fmt(x) for x in quarters)}, within {fmt(100 * cfg.chance_band)}% of it; the "
                   f"model never learned more than the class prior")


def _never_moved(run: RunSeries, name: str, s: pd.Series, cfg: DiagnoseConfig) -> Finding | None:
    """A loss logged from the run's start whose 5-95 % range stays within the band (``_never_learned``).
    Its first few records may lie above the band: an untrained model's first guesses that come down
    to the level it then keeps (2.82 = ln 17 to 2.61 in ten steps, then 2.60-2.63 for 490 steps while
    the accuracy stays at chance) are no learning."""
    v = s.to_numpy(dtype=float)
    if v.size < cfg.never_learned_records or float(np.median(v)) <= 0:
        return None
    if not _from_run_start(run, s):
        return None
    low, high, trend = _band_and_trend(v)  # (trend: a noisy loss that is level from start to end)
    level = float(np.median(v))
    if _falling_steadily(v, cfg):
        return None  # a loss falling steadily, slowly (a live run's first records): it is learning
    if high - low > cfg.never_learned_band * level and not (
            abs(trend) <= cfg.never_learned_trend * level and high - low <= cfg.never_learned_noisy_band * level):
        return None
    first = int(s.index[0])
    return Finding(VANISHING_GRADIENT, first, CRITICAL, name, "loss_never_moved",
                   f"{name} stayed in a narrow band over all {v.size} records from the run's start at step "
                   f"{first}: 5th percentile {fmt(low)}, 95th percentile {fmt(high)}, "
                   f"{(high - low) / level:.1%} of its {ev.median_of(s)}: the run never learned")
