"""Data semantics before detection: what the numbers of a run mean, read once, before any rule.

shared/LABELS.md "Data before signals", implemented as its own stage. ``read_data(run)`` returns
the run the detectors see and a ``DataReading`` that says what was set aside and why:

- **Never computed.** An auxiliary metric (KL, entropy, a reward component, an aux loss, any
  metric that is not the training loss or grad norm) that is NaN/null or a constant 0 in every
  record carries no information: it is left out (a ``kl`` the run never logged is no overflow).
  The training loss or grad norm non-finite in every record is kept: that is the computation
  overflowing from the start (or no update ever applied).
- **Logging artefacts at the edges.** A lone non-finite value in the first record followed by
  finite records that move (a record written before any update: an eval-only line at step 0; a
  series frozen at one value from the next record on was not trained after it), or in the last
  record preceded by finite ones when that record is partial (fewer metrics than the records
  before it: a crash mid-write), is not overflow: it is masked.
- **Empty updates.** A record where the loss and the grad norm are both exactly 0 is an update
  with nothing to learn from (GRPO: every group's rewards equal, no active sequence): the other
  metrics that read exactly 0 there (entropy, KL) were not measured, and are masked.
- **Record kinds** (rollout / train / eval lines) are told apart by the readers (an eval record's
  metrics are named ``eval/...``/``val/...``); here they are only listed.
- **The step counter** is chosen by the readers (the outer counter: rollout or optimizer step).
- **Start-up records** of an fp16 loss-scale search (``startup_end_step``) are no evidence: the
  detectors judge the records after it.

Pure: a RunSeries in, a RunSeries out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.robust import printed_unit
from moeproxy.diagnose.series import RunSeries
from moeproxy.ingest.names import canonical_of
from moeproxy.vocabulary import ALIASES, LAYER_PREFIX, STEP_KEYS, is_validation_loss

thresholds(
    startup_min_scale=(1024.0, "fp16 scalers start their search at 2^16 or more; halvings from below are overflows"),
    warmup_share=(0.4, "an lr warm-up reaches its peak within this share of the lr's records"),
    warmup_start=(0.5, "... from under this share of the peak"),
    replica_min=(8, "metrics differing only in a trailing number, this many or more, each sparser than the run: "
                    "per-worker copies, set aside"),
    copies_share=(0.5, "records repeating the one before in every metric, this share of the log or more: a "
                       "logger re-recording its last values, each counted once"),
    copies_blocks=(3, "... in this many blocks or more"),
    copies_usual_share=(0.6, "... this share of them of one usual length (a frozen end is one block)"),
    zero_start_records=(8, "records a loss needs for its exact 0 in the first of them (and not in most of the "
                           "others) to say it is an RL surrogate's"),
    surrogate_start_size=(0.05, "... whose first quarter after that 0 has a median this small (a KL term near the "
                                "reference; a model's loss is at its largest there)"),
)

# The training loss and grad norm: never "not computed" (non-finite everywhere is a finding).
CORE_METRICS = ("loss", "grad_norm")
KIND_PREFIXES = ("eval/", "val/", "test/", "rollout/", "validation/")


@dataclass
class DataReading:
    """What the data stage decided, for the findings' ``data`` entry and for people."""

    never_computed: dict[str, str] = field(default_factory=dict)   # metric -> why
    masked: dict[str, list[int]] = field(default_factory=dict)      # metric -> steps masked
    kinds: list[str] = field(default_factory=list)                  # record kinds seen
    records: int = 0
    first_step: int = 0
    last_step: int = 0
    step_gap: float = 1.0                                            # median gap between records
    read_as: dict[str, str] = field(default_factory=dict)            # canonical -> the metric read as it
    replicas: dict[str, int] = field(default_factory=dict)           # family ``Loss_device/train_<n>`` -> members set aside
    copies: int = 0                                                  # records that re-record the one before
    other_axes: dict[str, str] = field(default_factory=dict)         # ``rewards/iter`` -> ``rewards/step`` it repeats
    log_of_zero: dict[str, list[int]] = field(default_factory=dict)  # loss -> steps printed as -ln(FLT_MIN)

    def to_dict(self) -> dict:
        return {"never_computed": dict(self.never_computed), "masked": dict(self.masked),
                "kinds": list(self.kinds), "records": self.records, "first_step": self.first_step,
                "last_step": self.last_step, "step_gap": self.step_gap} | (
                    {"read_as": dict(self.read_as)} if self.read_as else {}) | (
                    {"replicas": dict(self.replicas)} if self.replicas else {}) | (
                    {"copies": self.copies} if self.copies else {}) | (
                    {"other_axes": dict(self.other_axes)} if self.other_axes else {}) | (
                    {"log_of_zero": dict(self.log_of_zero)} if self.log_of_zero else {})


def _core_names(run: RunSeries) -> set[str]:
    names = set()
    for canonical in CORE_METRICS:
        found = run.resolve(canonical)
        if found is not None:
            names.add(found[0])
    return names


def _is_core(name: str, core: set[str]) -> bool:
    """The training loss or grad norm: the canonical ones, or, in a run that logs no canonical
    loss, a loss named by what it optimises (``GD_loss``); never an auxiliary, evaluation or
    prediction loss (KL, balance, z, entropy, eval, predict)."""
    if name in core:
        return True
    if core:
        return False
    low = name.lower()
    if any(k in low for k in ("kl", "aux", "balanc", "z_loss", "entropy", "val", "eval", "test", "predict")):
        return False
    return low.endswith("loss") or low.endswith("grad_norm") or bool(ERROR_MEASURE.match(name))


# a metric named only as an error measure (``MSE``, ``train_mae``; Lightning's per-step copy
# ``mse_step``): what a regression or a diffusion model minimises, the training loss when the run logs
# no loss by name (not ``l1``/``l2``: as in ``_NOT_TRAINING``, those are as often a weight penalty)
ERROR_MEASURE = re.compile(r"^(?:train(?:ing)?[_/ ]?)?(?:mse|mae|rmse|nll|bce|huber|error)(?:_step)?$",
                           re.IGNORECASE)


def never_computed(name: str, values: np.ndarray, core: set[str]) -> str | None:
    """Why a series carries no information (or None): non-finite in every record, or a constant 0
    in every record, for a metric that is not the training loss or grad norm."""
    if _is_core(name, core) or values.size == 0:
        return None
    finite = np.isfinite(values)
    if not finite.any():
        return f"non-finite or null in all {values.size} records: never computed"
    if values.size >= 3 and finite.all() and not np.any(values):
        return f"0 in all {values.size} records: never computed"
    return None


def _zero_beside_policy_loss(run: RunSeries, name: str, s: pd.Series) -> str | None:
    """An RL run's ``loss`` exactly 0 in every record while a policy loss it also logs by name
    (``actor_pg_loss``) moves: the column was never filled (LABELS.md "Data before signals"), not
    every update empty."""
    found = run.resolve("loss")
    if found is None or found[0] != name or not run.is_rl:
        return None
    v = s.to_numpy(dtype=float)
    if v.size < 3 or not np.isfinite(v).all() or np.any(v):
        return None
    other = training_loss_by_name([n for n in run.names if n != name])
    if other is None or not np.any(np.nan_to_num(run.get(other).to_numpy(dtype=float))):
        return None
    return f"0 in all {v.size} records while {other} moves: never computed"


def edge_artefacts(series: pd.Series, record_counts: pd.Series) -> list[int]:
    """Steps of a lone non-finite value in the first record (finite records follow), of a run of them
    opening the log before the metric was ever finite, or of one in a partial last record (finite records before it; fewer metrics logged at that step than usual)."""
    v = series.to_numpy(dtype=float)
    if v.size < 3:
        return []
    bad = ~np.isfinite(v)
    out = []
    later = v[1:][np.isfinite(v[1:])]
    # "followed by normal training" (LABELS.md): the values after it move. A series that sits at one
    # value from the next record on (a grad norm of exactly 0, a loss repeated to the last digit)
    # was not trained after the non-finite record: it is kept, the first sign of the failure
    if bad[0] and not bad[1:3].any() and np.ptp(later) > 0:
        out.append(int(series.index[0]))
    elif bad[0] and (~bad).any():
        # a run of them opening the log before the metric was ever finite (keras-rl writes NaN for
        # the episodes before its warm-up ends): not yet computed - overflow is a value turning
        # non-finite "after being finite" (LABELS.md)
        k = int(np.argmax(~bad))
        rest = v[k:]
        if rest.size >= 3 and np.isfinite(rest[:3]).all() and np.ptp(rest[np.isfinite(rest)]) > 0:
            out.extend(int(t) for t in series.index[:k])
    if bad[-1] and not bad[-3:-1].any():
        last = int(series.index[-1])
        usual = float(np.median(record_counts.to_numpy())) if len(record_counts) else 0.0
        if record_counts.get(last, 0) < usual:
            out.append(last)
    return out


def _empty_updates(run: RunSeries) -> pd.Index:
    """Steps where the loss and the grad norm are both exactly 0 (updates with nothing to learn)."""
    loss, grad = run.resolve("loss"), run.resolve("grad_norm")
    if loss is None or grad is None:
        return pd.Index([], dtype="int64")
    both = loss[1].index.intersection(grad[1].index)
    zero = (loss[1].loc[both].to_numpy() == 0) & (grad[1].loc[both].to_numpy() == 0)
    return both[zero]


def zero_advantage_steps(run: RunSeries) -> pd.Index:
    """Steps of an RL run whose policy loss is exactly 0: every group's rewards were equal (LABELS.md,
    healthy), so no policy gradient flowed; what grad norm such a step shows comes from other terms
    (an MoE's load-balancing loss, a KL term) and says nothing about the policy's stability."""
    if not run.is_rl:
        return pd.Index([], dtype="int64")
    loss = run.resolve("loss")
    if loss is None:
        return pd.Index([], dtype="int64")
    s = loss[1]
    return s.index[s.to_numpy() == 0]


def startup_end_step(run: RunSeries, cfg: DiagnoseConfig) -> int | None:
    """Last step of the fp16 loss-scale search at start-up, or None (bf16 / no scaler logged).
    fp16 scalers begin their search high (2^16 DeepSpeed and torch GradScaler, 2^32 Megatron): a run
    first seen halving from below ``startup_min_scale`` is already in trouble."""
    found = run.resolve("loss_scale")
    if found is None:
        return None
    scale = found[1].dropna()
    if not (scale > 1).any():
        return None
    skipped_found = run.resolve("skipped_iters")
    # a skipped-iterations count, else DeepSpeed's overflow events (one per skipped step: with
    # hysteresis, or two engines each searching, the same scale is tried twice)
    skipped = skipped_found[1] if skipped_found else run.get("deepspeed/overflow")
    values, steps = scale.to_numpy(), scale.index.to_numpy()
    if values[0] < cfg.startup_min_scale:
        return None  # halvings that start from a small scale are overflows, not the initial search
    end = None
    gap = run.step_gap
    for i in range(len(values)):
        if i > 0 and steps[i] - steps[i - 1] > 2 * gap:
            break  # a scale printed only when it changes, after a pause: it held, the search was over
        decreased = i > 0 and values[i] < values[i - 1]
        will_decrease = i == 0 and len(values) > 1 and values[1] < values[0]
        skip = bool(skipped is not None and steps[i] in skipped.index and skipped.loc[steps[i]] > 0)
        if decreased or will_decrease or skip:
            end = int(steps[i])
        else:
            break
    return end


def lr_warmup_end_step(run: RunSeries, cfg: DiagnoseConfig) -> int | None:
    """The step a learning-rate warm-up ends (the lr climbs from under ``warmup_start`` of its peak,
    never falling, to its peak within the first ``warmup_share`` of its records), or None. Gradient norms move with the step
    size while it ramps: their level is read from the end of the warm-up on."""
    found = run.resolve("lr")
    if found is None:
        return None
    lr = found[1].dropna()
    vals = lr.to_numpy(dtype=float)
    if vals.size < 5 or not np.all(np.isfinite(vals)) or vals.max() <= 0:
        return None
    peak = int(np.argmax(vals))
    if peak == 0 or peak > cfg.warmup_share * vals.size or vals[0] >= cfg.warmup_start * vals[peak]:
        return None
    if np.any(np.diff(vals[:peak + 1]) < 0):
        return None
    return int(lr.index[peak])


def loss_printed_zero_throughout(run: RunSeries) -> bool:
    """The training loss is exactly 0 in every record (three or more) of a run that is not RL:
    what HF Trainer prints when every step's loss was NaN/inf (its NaN filter leaves nothing)."""
    found = run.resolve("loss")
    if found is None or run.is_rl:
        return False
    v = found[1].to_numpy(dtype=float)
    return v.size >= 3 and bool(np.all(v == 0.0))


# the names of counters a log may carry beside its step: the vocabulary's step keys, and the episode
# and epoch counts (keras-rl's ``episode`` beside ``nb_steps``; a CSV's ``epoch`` column)
COUNTER_NAMES = frozenset({k.lower() for k in STEP_KEYS} | {"episode", "epoch"})


def counter_series(run: RunSeries):
    """(name, series) of each metric named as a counter (``COUNTER_NAMES``)."""
    return run.matching(lambda n: n.lower() in COUNTER_NAMES)


def fractional_epochs(run: RunSeries) -> bool:
    """Whether the run logs an ``epoch`` with fractions (HF Trainer's ``'epoch': 0.62``): a counter a
    reader dates by, and the mark of the Trainer's records."""
    e = run.get("epoch")
    if e is None:
        return False
    v = e.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool((v != np.round(v)).any())


def dropped_to_zero(loss: pd.Series, records: int, converged_share: float) -> tuple[int, int] | None:
    """(step of the first, step of the record before it) of the last ``records`` or more records of
    ``loss`` that are exactly 0, when the record before them stood at the loss's level: not one
    already near 0 (below ``converged_share`` of the median of the positive records before) or within
    two of the last digit the loss is printed with (a loss that converged and then printed as 0.0).
    None otherwise. Two detectors read it: a trainer's NaN filter, and a loss that gives no gradient."""
    loss = loss[np.isfinite(loss.to_numpy(dtype=float))]
    v = loss.to_numpy(dtype=float)
    zero = v == 0.0
    tail = v.size - (int(np.flatnonzero(~zero)[-1]) + 1 if (~zero).any() else 0)
    j = v.size - tail
    if tail < records or j == 0:
        return None
    positive = v[:j][v[:j] > 0]
    if not positive.size or v[j - 1] < converged_share * float(np.median(positive)) \
            or v[j - 1] <= 2 * printed_unit(positive):
        return None
    return int(loss.index[j]), int(loss.index[j - 1])


def re_recorded_steps(run: RunSeries, cfg: DiagnoseConfig | None = None) -> list[int]:
    """Steps whose record repeats the record before in every metric, where the whole log is made of
    such blocks: a callback that records the last logged values at every step between two logging
    steps (TRL's ``logging_steps=10`` re-recorded at each of the ten), so each value stands for one
    measurement, not ten. Read as such only when ``copies_share`` of the records or more are copies
    and the log holds ``copies_blocks`` blocks or more, ``copies_usual_share`` of them of one usual
    length (a loss frozen at its end, with everything else, is one block: it stays). Returns the
    copies' steps (each block's first record is kept)."""
    cfg = cfg or DiagnoseConfig()
    names = [n for n in run.names if not n.startswith(LAYER_PREFIX)]
    if len(names) < 2:
        return []  # one metric repeating is what a frozen loss looks like
    wide = pd.DataFrame({n: run.get(n) for n in names}).sort_index()
    if len(wide) < 6 or wide.isna().any(axis=None):
        return []
    values = wide.to_numpy(dtype=float)
    same = np.r_[False, (values[1:] == values[:-1]).all(axis=1)]
    if same.sum() < cfg.copies_share * len(same):
        return []
    starts = np.flatnonzero(~same)
    lengths = np.diff(np.r_[starts, len(same)])
    usual = int(np.median(lengths))
    if len(starts) < cfg.copies_blocks or usual < 2 or (lengths == usual).sum() < cfg.copies_usual_share * len(lengths):
        return []
    return [int(t) for t in wide.index[same]]


# -ln of float32's smallest normal number (1.17549435e-38): a log-probability of 0 clamped there
LOG_FLT_MIN = float(-np.log(np.float64(np.finfo(np.float32).tiny)))


def _log_of_zero(name: str, s: pd.Series) -> list[int]:
    """Steps at which a loss prints -ln(FLT_MIN) = 87.3365 (to the four decimals printed): a
    log-probability of 0, clamped to a finite number."""
    if "loss" not in name.lower():
        return []
    v = s.to_numpy(dtype=float)
    at = np.abs(v - LOG_FLT_MIN) < 5e-5 * LOG_FLT_MIN
    return [int(t) for t in s.index[at]]


def read_data(run: RunSeries, cfg: DiagnoseConfig | None = None) -> tuple[RunSeries, DataReading]:
    """The run the detectors see, and what was set aside."""
    reading = DataReading()
    copies = re_recorded_steps(run, cfg)
    if copies:
        # LABELS.md "Data before signals": a record that only repeats the last logged values is no
        # measurement; the detectors see each logged value once
        reading.copies = len(copies)
        aliases = dict(run.aliases)
        run = RunSeries({n: run.get(n).drop(copies, errors="ignore") for n in run.names})
        run.aliases.update(aliases)
    core = _core_names(run)
    reading.other_axes = other_axes(run.names)
    # metrics logged at each step: a partial last record logs fewer than the others
    counts = pd.Series(dtype="int64")
    for name in (n for n in run.names if n not in reading.other_axes):
        s = run.get(name)
        counts = counts.add(pd.Series(1, index=s.index), fill_value=0)
    reading.records = int(len(counts))
    if len(counts):
        steps = counts.index.to_numpy()
        reading.first_step, reading.last_step = int(steps.min()), int(steps.max())
    empty = _empty_updates(run)
    zero_printed = loss_printed_zero_throughout(run)
    kept: dict[str, pd.Series] = {}
    replicas = replica_families(run, cfg)
    reading.replicas = {family: len(members) for family, members in replicas.items()}
    set_aside = {name for members in replicas.values() for name in members} | set(reading.other_axes)
    for name in run.names:
        if name in set_aside:
            continue
        s = run.get(name)
        clamped = _log_of_zero(name, s)
        if clamped:
            # a cross-entropy printed as 87.3365 = -ln(FLT_MIN): the probability of the true class
            # underflowed to 0 and the log was clamped (Caffe's SoftmaxWithLoss): a non-finite value
            reading.log_of_zero[name] = clamped
            s = s.copy()
            s.loc[clamped] = np.inf
        why = never_computed(name, s.to_numpy(dtype=float), core) or _zero_beside_policy_loss(run, name, s)
        if why is not None and zero_printed and is_validation_loss(name):
            # LABELS.md: the training loss non-finite from the first record (HF prints 0.0 for a
            # window of NaN losses), the validation loss NaN too: computed, and it overflowed
            why = None
        if why is not None:
            reading.never_computed[name] = why
            continue
        masked = edge_artefacts(s, counts)
        if len(empty) and name not in core and not _is_core(name, core):
            at = s.index.intersection(empty)
            zeros = [int(t) for t in at[(s.loc[at] == 0).to_numpy()]]
            if zeros and len(zeros) < len(s):
                masked = sorted(set(masked) | set(zeros))
        if masked:
            reading.masked[name] = masked
            s = s.drop(masked)
        kept[name] = s
        for prefix in KIND_PREFIXES:
            if name.startswith(prefix) and prefix.rstrip("/") not in reading.kinds:
                reading.kinds.append(prefix.rstrip("/"))
    _denser_epoch_copies(kept, reading)
    out = RunSeries(kept)
    reading.step_gap = out.step_gap
    if out.resolve("loss") is None and (loss := training_loss_by_name(out.names) or _sole_error_measure(out.names)):
        out.aliases["loss"] = reading.read_as["loss"] = loss
    if out.resolve("reward_mean") is None and any(n.lower() in _REWARD_ALIASES for n in reading.never_computed) \
            and (reward := _next_reward_alias(out.names)):
        # the reward under its first name was never computed (Unity ML-Agents' POCA trainer logs
        # every agent's own Cumulative Reward as 0 and the team's in its Group Cumulative Reward):
        # the next of the reward's names the run logs, with numbers in it, is the reward
        out.aliases["reward_mean"] = reading.read_as["reward_mean"] = reward
    elif out.resolve_reward() is None and (reward := _reward_by_name(out) or _episode_average(out)):
        # no framework name for the reward, but one metric the run names as its reward or return
        # (``training_reward.avg``, ``Train/mean_reward``), or the one bare average of a run that
        # counts episodes: it is the reward
        out.aliases["reward_mean"] = reading.read_as["reward_mean"] = reward
    # a return logged as 0 in every record (legged_gym clips a negative total to 0) was set aside as
    # never computed; the detectors still need to know the run earned no return at all
    out.zero_return = next((n for n in reading.never_computed if _is_reward_name(n)
                            and not np.any(np.nan_to_num(run.get(n).to_numpy(dtype=float), nan=1.0))), None)
    out.surrogate_loss = loss_starts_at_zero(out, cfg)
    out.zero_advantages = advantages_all_zero(run)
    return out, reading


_ADV_WORDS = {"adv", "advantage", "advantages"}
_ADV_STATS = {"mean": "mean", "avg": "mean", "std": "std", "max": "max", "min": "min"}


def advantages_all_zero(run: RunSeries) -> tuple[str, int, int] | None:
    """(what says so, the first step, the records) where a run logs its advantages' mean and their spread (a std,
    or a max and a min) and every one of them is exactly 0 in every record: no sample ever had an
    advantage, so no policy update had anything to follow (LABELS.md "every GRPO group's rewards equal
    on every step"). A mean of 0 alone is what whitened advantages always show; with the spread 0 too,
    nothing was whitened. Names are read word by word (``critic/advantages/max``, ``adv std``,
    ``mean_advantage``); timings and weights of an advantage step are no advantage."""
    families: dict[str, dict[str, pd.Series]] = {}
    for name in run.names:
        words = [w for w in re.split(r"[/_ .]+", name.lower()) if w]
        if not _ADV_WORDS & set(words) or len(words) > 4:
            continue
        stats = [w for w in words if w in _ADV_STATS]
        others = [w for w in words if w not in _ADV_STATS and w not in _ADV_WORDS]
        if len(stats) != 1 or any(w not in ("critic", "actor", "train", "policy", "rollout") for w in others):
            continue
        family = "/".join(w for w in words if w not in _ADV_STATS)
        families.setdefault(family, {})[_ADV_STATS[stats[0]]] = run.get(name)
    for family, got in sorted(families.items()):
        spread = [k for k in ("std", "max", "min") if k in got]
        if "mean" not in got or not ("std" in got or {"max", "min"} <= set(got)):
            continue
        parts = [got["mean"], *(got[k] for k in spread)]
        values = [p.to_numpy(dtype=float) for p in parts]
        if all(v.size >= 3 and np.isfinite(v).all() and not np.any(v) for v in values):
            return (f"the advantages' mean and {'/'.join(spread)} ({family}) are exactly 0 in all "
                    f"{values[0].size} records", int(got["mean"].index[0]), int(values[0].size))
    return None


def loss_starts_at_zero(run: RunSeries, cfg: DiagnoseConfig | None = None) -> bool:
    """The loss exactly 0 in its first record, not in most of the others, and small just after it:
    an RL surrogate at the
    reference policy (TRL's GRPO loss is its KL term, 0 before the first update; a progress table
    may log it with no reward beside it). A model's cross-entropy or error is never 0 before it
    has trained."""
    cfg = cfg or DiagnoseConfig()
    found = run.resolve("loss")
    if found is None:
        return False
    vals = found[1].to_numpy(dtype=float)
    vals = vals[np.isfinite(vals)]
    if not (len(vals) >= cfg.zero_start_records and vals[0] == 0 and 2 * np.count_nonzero(vals[1:]) > len(vals) - 1):
        return False
    # ... and small just after it, as a KL term is near the reference: a loop that prints its running
    # average before the first batch (0, then 2.3, 1.9 ...) is a model's loss, at its largest there
    after = np.abs(vals[1:])
    return float(np.median(after[: max(1, len(after) // 4)])) <= cfg.surrogate_start_size


def _is_reward_name(name: str) -> bool:
    """A metric the reward's framework names or whose words name a reward or return."""
    return name.lower() in _REWARD_ALIASES or _names_a_reward(name)


def _names_a_reward(name: str) -> bool:
    """Its words name a reward or return and nothing that makes it another thing (``_NOT_REWARD_WORDS``)."""
    words = {w.lower() for w in _WORDS.findall(name)}
    return bool(words & _REWARD_WORDS and not words & _NOT_REWARD_WORDS)


_AVERAGE_WORDS = frozenset({"avg", "average", "mean"})


def _episode_average(run: RunSeries) -> str | None:
    """A run that counts episodes (an ``Episode`` counter among its metrics) and logs one bare
    average (``Episode: 9300  Avg: 4782  BestAvg: 5060``), no loss and no reward by name: the average
    is the episodes' return (its running best, ``BestAvg``, is a copy and no second average)."""
    if run.resolve("loss") is not None or not any(n.lower() in ("episode", "episodes") for n in run.names):
        return None
    found = [n for n in run.names if (words := {w.lower() for w in _WORDS.findall(n)}) and words <= _AVERAGE_WORDS]
    return found[0] if len(found) == 1 else None


_REWARD_ALIASES = frozenset(a.lower() for a in ("reward_mean", *ALIASES["reward_mean"]))
_REWARD_WORDS = frozenset({"reward", "rewards", "return", "returns", "ret"})
# words that make a reward-named metric something else: its spread or extremes, an evaluation's, a
# model's estimate of it, a loss, a shaping part (a bonus, an intrinsic or a penalty term), its timing
_NOT_REWARD_WORDS = frozenset({"std", "stddev", "var", "min", "max", "best", "eval", "evaluation", "val",
                               "test", "value", "values", "estimate", "pred", "predicted", "loss", "penalty",
                               "bonus", "intrinsic", "curiosity", "rnd", "gail", "model", "critic", "baseline",
                               "norm", "normalized", "target", "adv", "advantage", "advantages", "to", "go",
                               # how long computing it took (verl's ``timing_s/reward``), no reward
                               "timing", "time", "timer", "elapsed", "duration", "ms", "sec", "seconds"})


def _reward_by_name(run: RunSeries) -> str | None:
    """The one metric whose words name a reward or return and nothing that makes it another thing
    (copies of it under other names count once); None when none or several."""
    found: list[str] = []
    for name in sorted(run.names):
        if _names_a_reward(name):
            if not any(run.get(name).equals(run.get(other)) for other in found):
                found.append(name)
    return found[0] if len(found) == 1 else None


def _next_reward_alias(names: list[str]) -> str | None:
    """The first of the reward's framework names (``vocabulary.ALIASES``, in their order, in any
    case) among the metrics kept."""
    by_lower = {}
    for name in names:
        by_lower.setdefault(name.lower(), name)
    return next((by_lower[a.lower()] for a in ALIASES["reward_mean"] if a.lower() in by_lower), None)


def _sole_error_measure(names: list[str]) -> str | None:
    """The one metric named as an error measure (``MSE``: a diffusion model's noise-prediction
    loss logged under the measure's name), when the run logs no loss: read as the training loss.
    Two (``mse`` beside ``mae``) leave it open."""
    found = [name for name in names if ERROR_MEASURE.match(name)]
    return found[0] if len(found) == 1 else None


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


# rl_games logs each of its curves three times, against frames (``rewards/step``), epochs
# (``rewards/iter``) and seconds (``rewards/time``); TensorBoard keeps each with its own x-axis
OTHER_AXES = ("/iter", "/time")


def other_axes(names) -> dict[str, str]:
    """The metrics that repeat a ``.../step`` metric against another x-axis (epochs, seconds):
    {metric: the one it repeats}. Read on one step counter beside the others, their epochs and
    seconds would be records of their own."""
    names = set(names)
    out = {}
    for name in sorted(names):
        for axis in OTHER_AXES:
            if not name.endswith(axis):
                continue
            by_step = name[: -len(axis)] + "/step"
            hit = canonical_of(by_step)  # (stored under its canonical name: ``rewards/step`` is the reward)
            kept = by_step if by_step in names else hit[0] if hit is not None and hit[0] in names else None
            if kept is not None:
                out[name] = kept
    return out


def replica_families(run: RunSeries, cfg: DiagnoseConfig | None = None) -> dict[str, list[str]]:
    """Per-worker or per-device copies of a metric (``Loss_device/train_0`` ... ``train_99`` beside
    ``Loss/train``): ``replica_min`` or more metrics that differ only in a trailing number, each
    sparser than the run's densest metric, in a run that also logs metrics of its own. Each copy
    holds a worker's few records on its own counter; a NaN in one worker's copy is that worker's,
    not the run's (the run's own loss says what the run did). Per-layer routing series are the
    routing detector's and stay."""
    if not run.names:
        return {}
    cfg = cfg or DiagnoseConfig()
    dense = max(len(run.get(n)) for n in run.names)
    families: dict[str, list[str]] = {}
    for name in run.names:
        m = _NUMBERED.match(name)
        if m and not name.startswith(LAYER_PREFIX):
            families.setdefault(m.group(1) + "<n>", []).append(name)
    out = {f: members for f, members in families.items()
           if len(members) >= cfg.replica_min and all(2 * len(run.get(n)) <= dense for n in members)}
    inside = {n for members in out.values() for n in members}
    return out if any(n not in inside for n in run.names) else {}


EPOCH_SUFFIX = "_epoch"


def _denser_epoch_copies(kept: dict[str, pd.Series], reading: DataReading) -> None:
    """A metric logged both per step and per epoch (PyTorch Lightning's ``<name>_step`` and
    ``<name>_epoch``; ingest stores the per-step copy under the canonical name): the per-step copy
    is read, unless it holds fewer than half the epoch copy's records (a short run that logs every
    n steps: the epoch copy is the one that has a curve). Then the epoch copy is read as the metric
    and the per-step copy kept as ``<canonical>_step``."""
    for name in list(kept):
        if not name.endswith(EPOCH_SUFFIX) or len(name) == len(EPOCH_SUFFIX):
            continue
        hit = canonical_of(name[: -len(EPOCH_SUFFIX)])
        if hit is None or hit[0] not in kept or hit[0] in reading.read_as:
            continue
        canonical = hit[0]
        if 2 * len(kept[canonical]) < len(kept[name]):
            kept[f"{canonical}_step"] = kept.pop(canonical)
            kept[canonical] = kept.pop(name)
            reading.read_as[canonical] = name


_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
# words that say a loss is not the training objective (a validation loss, a part of it, another
# network's); ``train``/``epoch``/``batch``/``total`` and the like say nothing against it
_NOT_TRAINING = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev", "heldout", "aux",
                           "balance", "balancing", "router", "z", "reg", "l1", "l2", "value", "vf", "critic",
                           "kl", "entropy", "reward", "ref", "teacher", "distill", "kd", "best", "min", "max",
                           "std", "disc", "discriminator", "gen", "generator", "d", "g"})


_PLAIN_AFTER = frozenset({"train", "training", "step", "batch", "epoch", "iter", "total", "avg", "mean"})


def training_loss_by_name(names: list[str]) -> str | None:
    """The training loss among metrics that no framework alias names (``Train/EpochLoss``,
    ``batch loss``): the one whose words end in ``loss`` with none that makes it another loss
    (``Val/EpochLoss``, ``aux_loss``); of several, the one that says ``train``; None when that
    leaves no single one (``g_loss`` beside ``d_loss``)."""
    found = []
    for name in names:
        words = [w.lower() for w in _WORDS.findall(name)]
        # ``...loss`` (``Train/EpochLoss``), or TensorBoard's ``Loss/train`` and Lightning's
        # ``train_loss_batch`` (the loss, then words that only say it is the training one or how it
        # is averaged)
        # ``train_loss_batch``, ``loss_epoch``: the loss, then only such words
        last = len(words) - 1 - words[::-1].index("loss") if "loss" in words else -1
        lossy = last >= 0 and set(words[last + 1:]) <= _PLAIN_AFTER
        if lossy and not _NOT_TRAINING.intersection(words):
            found.append((name, "train" in words or "training" in words))
    if len(found) > 1:
        found = [f for f in found if f[1]]
    return found[0][0] if len(found) == 1 else None
