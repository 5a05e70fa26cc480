"""Canonical metric names and every framework's aliases for them.

Stored metrics keep their original name unless it is an alias of a canonical name (DESIGN.md
"Contracts"); the mapping original -> stored name is recorded per run in the ``metric_names``
table, so the original is never lost. Adding a framework's aliases is one entry in ``ALIASES``.

When a run has several originals that alias one canonical name (TRL logs both ``loss`` and
``policy_loss``), the first in the list below wins and the others keep their own names.
"""

from __future__ import annotations

import re

CANONICAL = (
    "loss", "grad_norm", "lr", "loss_scale", "skipped_iters", "nan_iters", "policy_entropy", "kl",
    "ppo_kl", "clipfrac", "reward_mean", "response_length_mean", "response_length_max", "truncation_rate",
    "logprob_diff_mean", "logprob_diff_max", "is_ratio_mean", "routing_entropy", "load_imbalance",
    "aux_loss", "step_time",
)

# canonical -> originals in priority order. Sources: shared/research/logs-and-failures.md §1.0.
ALIASES: dict[str, tuple[str, ...]] = {
    "loss": (
        "loss", "lm loss", "lm_loss", "actor/pg_loss", "policy_loss", "train/loss", "train/pg_loss",
        "train_loss", "train loss", "loss/policy_avg", "actor/loss",
    ),
    "grad_norm": (
        "grad_norm", "grad norm", "grad-norm", "actor/grad_norm", "actor_grad_norm", "train/grad_norm",
        "gnorm", "grad_norm_total", "global_grad_norm", "total_norm", "gradient_norm", "norm",
    ),
    "lr": (
        "lr", "learning rate", "learning-rate", "learning_rate", "actor/lr", "actor_lr", "train/lr",
        "train/lr-pg_0",
    ),
    "loss_scale": ("loss scale", "loss_scale", "loss-scale", "scaler/scale"),
    "skipped_iters": ("number of skipped iterations", "skipped_iters", "skipped_steps", "skipped iterations"),
    "nan_iters": ("number of nan iterations", "nan_iters", "nan iterations"),
    "policy_entropy": (
        "actor/entropy", "entropy", "policy/entropy_avg", "objective/entropy", "approx_entropy",
        "train/entropy_loss", "entropy_loss", "rollout/entropy",
    ),
    "kl": (
        "actor/kl_loss", "kl", "actor/reward_kl_penalty", "train/kl_loss", "kl_penalty", "objective/kl",
        "kl_loss", "kl_div", "kl_divergence", "mean_kl",
    ),
    "ppo_kl": ("actor/ppo_kl", "ppo_kl", "train/ppo_kl", "policy/approxkl_avg", "approx_kl"),
    "clipfrac": (
        "actor/pg_clipfrac", "clip_ratio/region_mean", "ppo_clip_ratio", "train/pg_clipfrac",
        "policy/clipfrac_avg", "clipfrac", "clip_fraction",
    ),
    "reward_mean": (
        "critic/score/mean", "critic/rewards/mean", "grpo/score/mean", "reward", "reward_mean",
        "rollout/reward_mean", "train/reward", "rollout/raw_reward", "objective/scores", "score",
        "score_mean", "reward/mean", "rewards/mean", "train_reward", "mean_reward", "avg_reward", "env/all/reward/total",
    ),
    "response_length_mean": (
        "response_length/mean", "completions/mean_length", "rollout/response_length_mean",
        "response_length", "mean_gen_tokens_per_sample", "rollout/response_lengths",
        "len_mean", "response_len_mean", "completion_length",
    ),
    "response_length_max": (
        "response_length/max", "completions/max_length", "len_max", "max_response_length",
        "rollout/response_length_max",
    ),
    "truncation_rate": (
        "response_length/clip_ratio", "completions/clipped_ratio", "rollout/truncated_rate",
        "rollout/truncated_ratio", "truncated", "len_clip_ratio",
    ),
    "logprob_diff_mean": (
        "logprob_diff_mean", "training/rollout_probs_diff_mean", "sampling/sampling_logp_difference/mean",
        "train/train_rollout_logprob_abs_diff", "logprobs_diff", "rollout_corr/log_ppl_abs_diff",
        # slime/vime, miles, and authors' own exports (trainer vs rollout engine)
        "mean_logp_diff", "logp_diff", "lp_diff", "logprob_diff", "logprob_abs_diff",
        "training/rollout_probs_diff_mean", "rollout_probs_diff_mean", "probability_mae", "prob_diff",
        "train_rollout_logprob_abs_diff",
    ),
    "logprob_diff_max": (
        "logprob_diff_max", "training/rollout_probs_diff_max", "sampling/sampling_logp_difference/max",
        "rollout_corr/log_ppl_diff_max", "max_abs_diff", "max_logp_diff", "lp_diff_max",
        "rollout_probs_diff_max",
    ),
    "is_ratio_mean": (
        "is_ratio_mean", "rollout_corr/rollout_is_mean", "sampling/importance_sampling_ratio/mean",
        "sampling_importance_ratio", "train/tis", "token_mult_prob_error", "importance_ratio",
        "is_ratio", "rollout_is_mean",
    ),
    "routing_entropy": ("routing_entropy", "moe/routing_entropy", "router_entropy", "moe/router_entropy"),
    "load_imbalance": ("load_imbalance", "moe/load_imbalance", "moe/max_vio"),
    "aux_loss": (
        "aux_loss", "load_balancing_loss", "moe/load_balancing_loss", "moe/aux_loss",
        "train/moe/load_balancing_loss",
    ),
    "step_time": (
        "step_time", "timing_s/step", "elapsed time per iteration (ms)", "iteration-time", "timing/all",
        "timing/step_total", "perf/step_time", "perf/time_per_step",
    ),
}

# Originals whose unit differs from the canonical one: value * factor.
SCALE: dict[str, float] = {"elapsed time per iteration (ms)": 1e-3}

# Prefixes that W&B/TensorBoard exports put in front of a framework's own names.
_PREFIXES = ("train/", "train_", "training/")

_PER_LAYER_ENTROPY = re.compile(
    r"^(?:train/)?(?:moe/)?(?:routing|router)_entropy[/_]?layer[_/]?(\d+)$", re.IGNORECASE
)
# Expert load per layer and expert: goes to the routing table, e.g. routing/load/layer_3/expert_5.
EXPERT_LOAD = re.compile(
    r"^(?:train/)?(?:moe/|routing/)?(?:expert_)?load[/_]layer[_/]?(\d+)[/_]expert[_/]?(\d+)$", re.IGNORECASE
)

_LOOKUP: dict[str, tuple[str, int]] = {}
for _canon, _names in ALIASES.items():
    for _rank, _name in enumerate(_names):
        _LOOKUP.setdefault(_name, (_canon, _rank))


def canonical_of(original: str) -> tuple[str, int] | None:
    """(canonical name, priority) for an original name, or None when it is no alias."""
    m = _PER_LAYER_ENTROPY.match(original)
    if m:
        return f"routing_entropy/layer_{int(m.group(1))}", 0
    hit = _LOOKUP.get(original)
    if hit is not None:
        return hit
    for prefix in _PREFIXES:
        if original.startswith(prefix) and original[len(prefix):] in _LOOKUP:
            canon, rank = _LOOKUP[original[len(prefix):]]
            return canon, rank + 100  # an exact name beats a prefixed one
    return _after_run_prefix(original)


# Leading words that change what a name measures: never stripped to find an alias.
_MEANINGFUL_HEADS = frozenset({
    "val", "valid", "validation", "eval", "test", "critic", "ref", "reference", "value", "vf", "z",
    "aux", "max", "min", "std", "mtp", "kd", "teacher", "distill", "entropy", "reward", "kl", "pg",
})
_HEAD = re.compile(r"^([A-Za-z0-9]+)[_/ \-](.+)$")


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
            return hit[0], hit[1] + 200 * depth
    return None


def resolve_names(originals: list[str], taken: dict[str, str] | None = None) -> dict[str, str]:
    """Map each original name to its stored name.

    ``taken`` is the mapping already stored for the run (original -> stored); it is honoured so
    that a second source of the same run maps the same way. A canonical name goes to the
    highest-priority alias present; the other aliases keep their original names.
    """
    taken = dict(taken or {})
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
    return result


# Key sets that give a framework away (checked in order; first hit wins).
_FRAMEWORK_HINTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("verl", ("actor/pg_loss", "critic/score/mean", "timing_s/step", "actor/pg_clipfrac")),
    ("mindspeed-rl", ("grpo/score/mean", "timing/all", "timing/rollout")),
    ("openrlhf", ("actor_grad_norm", "ppo_clip_ratio", "vllm_kl", "rollout/reward_mean")),
    ("trl", ("frac_reward_zero_std", "completions/mean_length", "clip_ratio/region_mean", "reward_std")),
    ("slime", ("train/pg_loss", "rollout/raw_reward", "train/train_rollout_logprob_abs_diff")),
    ("nemo-rl", ("token_mult_prob_error", "gen_kl_error", "approx_entropy")),
    ("megatron", ("lm loss", "number of skipped iterations", "grad-norm", "load_balancing_loss")),
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
