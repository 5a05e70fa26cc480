"""Canonical metric names and every framework's aliases for them.

Stored metrics keep their original name unless it is an alias of a canonical name (DESIGN.md
"Contracts"); the mapping original -> stored name is recorded per run in the ``metric_names``
table, so the original is never lost. The names themselves are in ``moeproxy.vocabulary``.

When a run has several originals that alias one canonical name (TRL logs both ``loss`` and
``policy_loss``), the first in the list below wins and the others keep their own names.
"""

from __future__ import annotations

import re

from moeproxy.vocabulary import ALIASES, CANONICAL, LAYER_PREFIX

# Prefixes that W&B/TensorBoard exports put in front of a framework's own names.
_PREFIXES = ("train/", "train_", "training/")
_PER_STEP_SUFFIX = "_step"
_TRAILING_NOTE = re.compile(r"\s*\([^()]*\)\s*$")
# RLlib's progress.csv: ``info/learner/<policy id>/entropy`` (``.../learner_stats/entropy`` in newer ones)
_RLLIB_LEARNER = re.compile(r"^info/learner/[^/]+/(?:learner_stats/)?([^/]+)$")

_PER_LAYER_ENTROPY = re.compile(
    r"^(?:train/)?(?:moe/)?(?:routing|router)_entropy[/_]?layer[_/]?(\d+)$", re.IGNORECASE
)
# Expert load per layer and expert: goes to the routing table, e.g. routing/load/layer_3/expert_5.
EXPERT_LOAD = re.compile(
    r"^(?:train/)?(?:moe/|routing/)?(?:expert_)?load[/_]layer[_/]?(\d+)[/_]expert[_/]?(\d+)$", re.IGNORECASE
)

# a log that writes a canonical name means that metric: it outranks every alias of it
_LOOKUP: dict[str, tuple[str, int]] = {_canon: (_canon, -1) for _canon in CANONICAL}
for _canon, _names in ALIASES.items():
    for _rank, _name in enumerate(_names):
        _LOOKUP.setdefault(_name, (_canon, _rank))


def canonical_of(original: str) -> tuple[str, int] | None:
    """(canonical name, priority) for an original name, or None when it is no alias."""
    m = _PER_LAYER_ENTROPY.match(original)
    if m:
        return f"{LAYER_PREFIX}{int(m.group(1))}", 0
    hit = _LOOKUP.get(original)
    if hit is not None:
        return hit
    m = _RLLIB_LEARNER.match(original)
    if m:  # RLlib's learner stats of a policy: its ``kl`` is PPO's new-vs-old KL
        rest = m.group(1)
        hit = ("ppo_kl", 0) if rest == "kl" else _LOOKUP.get(rest)
        return (hit[0], hit[1] + 150) if hit is not None else None
    for prefix in _PREFIXES:
        if original.startswith(prefix) and original[len(prefix):] in _LOOKUP:
            canon, rank = _LOOKUP[original[len(prefix):]]
            return canon, rank + 100  # an exact name beats a prefixed one
    if original.endswith(_PER_STEP_SUFFIX) and len(original) > len(_PER_STEP_SUFFIX):
        # PyTorch Lightning logs a metric kept both per step and per epoch as ``<name>_step`` and
        # ``<name>_epoch``: the per-step copy is the metric (the epoch one is its mean, kept as is)
        hit = canonical_of(original[: -len(_PER_STEP_SUFFIX)])
        if hit is not None and not hit[0].startswith(LAYER_PREFIX):
            return hit[0], hit[1] + 300
    lower = original.lower()
    if lower != original and lower in _LOOKUP:  # ``Avg_return``, ``Loss``: a framework's name, capitalised
        canon, rank = _LOOKUP[lower]
        return canon, rank + 500
    if "-" in original and "_" not in original:  # ``kl-penalty``: a framework's key with hyphens for underscores
        hit = canonical_of(original.replace("-", "_"))
        if hit is not None:
            return hit[0], hit[1] + 550
    if " " in original.strip() and original not in _LOOKUP:
        # a name printed in words (``mean reward (100 episodes)``): its words joined as a framework's
        # key would join them (``mean_reward``), a trailing note in parentheses left out
        words = _TRAILING_NOTE.sub("", original).strip().lower()
        joined = re.sub(r"\s+", "_", words)
        if joined and joined != original:
            hit = canonical_of(joined)
            if hit is not None:
                return hit[0], hit[1] + 400
    m = _MEAN_SUFFIX.search(original)
    if m and m.start() > 0 and original[: m.start()] in _LOOKUP:
        # the mean over ranks or micro-batches of a metric under its own name (``grad_norm_mean``,
        # ``kl/mean``): that metric, below the name itself and its listed aliases
        canon, rank = _LOOKUP[original[: m.start()]]
        if canon in _MEAN_OF:
            return canon, rank + 600
    return _after_run_prefix(original)


_MEAN_SUFFIX = re.compile(r"(?:_mean|/mean|_avg)$")
# the metrics whose mean over ranks is still that metric (a reward's or a length's is listed where known)
_MEAN_OF = frozenset({"loss", "grad_norm", "kl", "ppo_kl", "policy_entropy", "clipfrac", "loss_scale"})


# Leading words that change what a name measures: never stripped to find an alias.
_MEANINGFUL_HEADS = frozenset({
    "val", "valid", "validation", "eval", "test", "critic", "ref", "reference", "value", "vf", "z",
    "aux", "max", "min", "std", "mtp", "kd", "teacher", "distill", "entropy", "reward", "kl", "pg",
    # norms of something else than the gradient: ``param_norm``, ``weight_norm``, ``update_norm``
    "param", "params", "weight", "weights", "update", "act", "activation", "embed", "embedding", "layer",
    # an RL environment's episode (``ep_len_mean``: steps of an episode, not tokens of a response)
    "ep", "episode",
    # a running best or last-seen copy of a metric (``best mean reward``) is not the metric
    "best", "worst",
    # an evaluation metric's own score (``r2_score``, ``f1_score``, ``bleu_score``) is no reward
    "r2", "f1", "bleu", "rouge", "auc", "acc", "accuracy", "map", "iou", "miou", "dice", "top1", "top5",
    "precision", "recall", "wer", "cer", "psnr", "ssim", "fid", "silhouette", "jaccard",
    # a cross-entropy (Marian's ``[valid] ... cross-entropy : 238.7``) is a loss, not the policy's entropy
    "cross", "binary", "softmax",
})
_HEAD = re.compile(r"^([A-Za-z0-9]+)[_/ \-](.+)$")
_AVERAGING_HEADS = frozenset({"average", "avg", "running", "smoothed", "smooth", "ema", "moving"})


def _after_run_prefix(original: str) -> tuple[str, int] | None:
    """Authors put a run or arm label in front of a framework's names (``g10_mean_logp_diff``,
    ``baseline/grad_norm``, ``raw_train_grad_norm``): up to two leading words are dropped to find
    an alias, unless a word says what is measured (``val_``, ``critic_``, ``max_`` ...)."""
    name = original
    for depth in (1, 2):
        m = _HEAD.match(name)
        if m is None or m.group(1).lower() in _MEANINGFUL_HEADS:
            return None
        name = m.group(2)
        hit = _LOOKUP.get(name)
        if hit is None:
            for prefix in _PREFIXES:
                if name.startswith(prefix) and name[len(prefix):] in _LOOKUP:
                    hit = _LOOKUP[name[len(prefix):]]
                    break
        if hit is not None:
            # a running average's word (``Average Loss`` beside ``Current Loss``) ranks after the
            # per-step value's: an average over the epoch so far repeats itself by construction
            return hit[0], hit[1] + 200 * depth + (50 if m.group(1).lower() in _AVERAGING_HEADS else 0)
    return None


def resolve_names(originals: list[str], taken: dict[str, str] | None = None,
                  takeover: bool = False) -> dict[str, str]:
    """Map each original name to its stored name.

    ``taken`` is the mapping already stored for the run (original -> stored); it is honoured so
    that a second source of the same run maps the same way. A canonical name goes to the
    highest-priority alias present; the other aliases keep their original names.

    ``takeover`` (a followed file's later lines): an alias of higher priority than the one that
    holds a canonical name takes it over, and the holder goes back to its own name, as one read of
    the whole file would have named them; the result then maps the holder too (the caller renames
    its stored rows).
    """
    taken = dict(taken or {})
    moved: dict[str, str] = {}
    if takeover:
        holders = {stored: orig for orig, stored in taken.items()
                   if (hit := canonical_of(orig)) is not None and hit[0] == stored}
        for name in originals:
            hit = canonical_of(name) if name not in taken else None
            holder = holders.get(hit[0]) if hit is not None else None
            if holder is not None and hit[1] < canonical_of(holder)[1]:
                claimed_now = set(taken.values()) - {hit[0]}
                moved[holder] = holder if holder not in claimed_now and holder not in ALIASES else f"{holder} (original)"
                taken[holder] = moved[holder]
                del holders[hit[0]]
    claimed = set(taken.values())
    best: dict[str, tuple[int, str]] = {}
    for name in originals:
        if name in taken:
            continue
        hit = canonical_of(name)
        if hit is not None and hit[0] not in claimed:
            canon, rank = hit
            if canon not in best or rank < best[canon][0]:
                best[canon] = (rank, name)
    winners = {name: canon for canon, (_, name) in best.items()}
    claimed |= set(winners.values())
    result: dict[str, str] = {}
    for name in originals:
        if name in taken:
            result[name] = taken[name]
        elif name in winners:
            result[name] = winners[name]
        elif name in claimed:  # e.g. a literal "loss" that lost to an earlier-mapped "lm loss"
            result[name] = f"{name} (original)"
        else:
            result[name] = name
    return result | moved


# Key sets that give a framework away (checked in order; first hit wins).
_FRAMEWORK_HINTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("verl", ("actor/pg_loss", "critic/score/mean", "timing_s/step", "actor/pg_clipfrac")),
    ("mindspeed-rl", ("grpo/score/mean", "timing/all", "timing/rollout")),
    ("openrlhf", ("actor_grad_norm", "ppo_clip_ratio", "vllm_kl", "rollout/reward_mean")),
    ("trl", ("frac_reward_zero_std", "completions/mean_length", "clip_ratio/region_mean", "reward_std")),
    ("slime", ("train/pg_loss", "rollout/raw_reward", "train/train_rollout_logprob_abs_diff")),
    ("nemo-rl", ("token_mult_prob_error", "gen_kl_error", "approx_entropy")),
    ("megatron", ("lm loss", "number of skipped iterations", "grad-norm", "load_balancing_loss")),
    ("ml-agents", ("Environment/Cumulative Reward", "Policy/Entropy", "Losses/Policy Loss")),
    ("stable-baselines3", ("rollout/ep_rew_mean", "time/total_timesteps", "time/fps", "train/clip_fraction",
                           "train/entropy_loss")),
    ("rllib", ("episode_reward_mean", "timesteps_total", "info/num_env_steps_sampled")),
    ("mmdetection", ("loss_cls", "loss_bbox", "loss_rpn_cls", "data_time")),
    ("ultralytics", ("train/box_loss", "metrics/mAP50(B)", "metrics/mAP_0.5")),
    ("hf-trainer", ("learning_rate", "epoch")),
)


def guess_framework(names) -> str:
    """The framework a set of original metric names most likely comes from, or 'unknown'."""
    present = set(names)
    stripped = {n[len("train/"):] for n in present if n.startswith("train/")}
    for framework, hints in _FRAMEWORK_HINTS:
        if any(h in present or h in stripped for h in hints):
            return framework
    return "unknown"
