"""The project's vocabulary, on the ground floor: every reader and the diagnosis take names from here.

- ``CANONICAL``: the canonical metric names; ``ALIASES``: each framework's spellings of them, in
  priority order (sources: shared/research/logs-and-failures.md §1.0); ``SCALE``: originals whose
  unit differs from the canonical one.
- ``STEP_KEYS``: the keys that hold a structured record's step (JSONL objects, CSV headers, printed
  dicts), first present wins; a format adds only what is its own (a table's ``#`` column).
- ``LAYER_PREFIX``: the per-layer routing-entropy series, ``routing_entropy/layer_<i>``.
- The failure categories live with the diagnosis (``moeproxy.diagnose.taxonomy``), which owns them.

Adding a framework's aliases is one entry in ``ALIASES``; a new step key is one entry in ``STEP_KEYS``.
"""

from __future__ import annotations

CANONICAL = (
    "loss", "grad_norm", "lr", "loss_scale", "skipped_iters", "nan_iters", "policy_entropy", "kl",
    "ppo_kl", "clipfrac", "reward_mean", "reward_std", "zero_std_share", "response_length_mean", "response_length_max", "truncation_rate",
    "logprob_diff_mean", "logprob_diff_max", "is_ratio_mean", "routing_entropy", "load_imbalance",
    "aux_loss", "step_time",
)

# canonical -> originals in priority order. Sources: shared/research/logs-and-failures.md §1.0.
ALIASES: dict[str, tuple[str, ...]] = {
    "loss": (
        "loss", "lm loss", "lm_loss", "actor/pg_loss", "policy_loss",
        "train/policy_gradient_loss", "policy_gradient_loss",  # Stable-Baselines3 (its train/loss adds the value loss)
        "train/loss", "train/pg_loss",
        "train_loss", "train loss", "loss/policy_avg", "actor/loss",
        "LossPi",  # OpenAI Spinning Up's policy loss (its critics' LossQ/LossV are value losses)
        "cost",  # Marian NMT's training line: "Ep. 1 : Up. 500 : ... : Cost 81.86"
        "xent",  # OpenNMT-py's training line (``acc:  51.25; ppl:  8.43; xent: 2.13``)
        "loss_train",  # the loss with its split after it (``loss_train: 2.809 ~ 4.052 BPC``)
        "loss_g",  # a GAN's generator loss (PyTorch's DCGAN example: ``Loss_D: 0.0000 Loss_G: 56.74``), as ``g_loss`` is
        "loss/train",  # TensorBoard's group then split, as PyTorch's tutorial writes it (``add_scalar("Loss/train", ...)``)
    ),
    "grad_norm": (
        "grad_norm", "grad norm", "grad-norm", "actor/grad_norm", "actor_grad_norm", "train/grad_norm",
        "gnorm", "grad_norm_total", "global_grad_norm", "total_norm", "gradient_norm", "norm",
    ),
    "lr": (
        "lr", "learning rate", "learning-rate", "learning_rate", "actor/lr", "actor_lr", "train/lr",
        "train/lr-pg_0",
    ),
    "loss_scale": ("loss scale", "loss_scale", "loss-scale", "scaler/scale",
                   "using dynamic loss scale of"),  # NVIDIA apex amp's line
    "skipped_iters": ("number of skipped iterations", "skipped_iters", "skipped_steps", "skipped iterations"),
    "nan_iters": ("number of nan iterations", "nan_iters", "nan iterations"),
    "policy_entropy": (
        "actor/entropy", "entropy", "policy/entropy_avg", "objective/entropy", "approx_entropy",
        "train/entropy_loss", "entropy_loss", "rollout/entropy", "entropy_avg", "avg_entropy", "entropy_mean",
        "mean_entropy",
        "policy/entropy",  # Unity ML-Agents (Policy/Entropy)
    ),
    "kl": (
        "actor/kl_loss", "kl", "actor/reward_kl_penalty", "train/kl_loss", "kl_penalty", "objective/kl",
        "kl_loss", "kl_div", "kl_divergence", "mean_kl",
    ),
    "ppo_kl": ("actor/ppo_kl", "ppo_kl", "train/ppo_kl", "policy/approxkl_avg", "approx_kl",
               "info/kl"),  # rl_games (IsaacGymEnvs): the new-vs-old KL of each epoch's updates
    "clipfrac": (
        "actor/pg_clipfrac", "clip_ratio/region_mean", "ppo_clip_ratio", "train/pg_clipfrac",
        "policy/clipfrac_avg", "clipfrac", "clip_fraction",
    ),
    "reward_mean": (
        "critic/score/mean", "critic/rewards/mean", "grpo/score/mean", "reward", "reward_mean",
        "rollout/reward_mean", "train/reward", "rollout/raw_reward", "objective/scores", "score",
        "score_mean", "reward/mean", "rewards/mean", "train_reward", "mean_reward", "avg_reward", "env/all/reward/total",
        "reward_avg",
        # DeepSpeed-Chat's PPO (step 3) prints its reward model's mean score on the line after each step's losses
        "average reward score",
        # RL libraries' episode return (OpenAI baselines DDPG/PPO2, Stable-Baselines3, RLlib)
        "rollout/return_history", "rollout/return", "eprewmean", "rollout/ep_rew_mean", "ep_rew_mean", "episode_reward_mean",
        "episode_return", "episode_reward", "mean_return", "avg_return", "return_mean",
        # rllab / OpenAI baselines' logz tables (and the Berkeley deep-RL homework built on them)
        "AverageReturn", "averagereturn", "average_return",
        # OpenAI Spinning Up's logger (and the CS294 soft actor-critic homework built on its logz):
        # the mean return of the epoch's episodes, and the last episode's return
        "AverageEpRet", "LastEpReturn",
        # Unity ML-Agents: the mean cumulative episode reward over all agents (Environment/Cumulative
        # Reward); its Policy/Extrinsic Reward is one reward signal's, with curiosity beside it
        "environment/cumulative reward",
        # ML-Agents' POCA trainer: the team's reward (each agent's own Cumulative Reward reads 0)
        "environment/group cumulative reward",
        # CleanRL's return of each finished episode; the on-policy MAPPO code's mean episode reward
        "charts/episodic_return", "episodic_return", "average_episode_rewards",
        # rl_games (Isaac Gym's trainers): the mean episode reward against frames (its ``rewards/iter``
        # and ``rewards/time`` are the same values against epochs and seconds)
        "rewards/step",
    ),
    "reward_std": ("reward_std", "train/reward_std"),                              # TRL: mean of the groups' stds
    "zero_std_share": ("frac_reward_zero_std", "train/frac_reward_zero_std"),      # TRL: share of groups all equal
    "response_length_mean": (
        "response_length/mean", "completions/mean_length", "rollout/response_length_mean",
        "response_length", "mean_gen_tokens_per_sample", "rollout/response_lengths",
        "len_mean", "response_len_mean", "completion_length", "avg_response_len", "avg_response_length",
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
SCALE: dict[str, float] = {"elapsed time per iteration (ms)": 1e-3,
                           # Stable-Baselines3 logs the entropy bonus's loss: minus the entropy (its CSV
                           # and console exports, and the PPO code written after it, drop the "train/")
                           "train/entropy_loss": -1.0, "entropy_loss": -1.0}

# The keys that hold a structured record's step, first present wins. The outer counters of RL
# loops that count rollouts come after the optimizer's names: the counter a run's progress is
# reported in; an inner optimizer step repeats within one rollout step and stays a value.
STEP_KEYS: tuple[str, ...] = (
    "step", "global_step", "_step", "iteration", "iter", "train/global_step", "trainer/global_step",
    "training/global_step", "train/step", "Step",
    "grpo_step", "rollout_step", "ppo_step", "rl_step",
    # RL libraries: Stable-Baselines3's rollout-and-update counter (LABELS.md: the step is the rollout
    # step), then the environment steps they also count (baselines, Stable-Baselines3, RLlib)
    "time/iterations",
    "total/steps", "total_timesteps", "time/total_timesteps", "misc/total_timesteps", "timesteps_total",
    "total timesteps",
    "timestep", "timesteps",  # OfflineRL-Kit's and others' environment-step column
    # RLlib's training iteration (one sample-and-update round), after its timesteps_total: reported
    # beside the onset as the log's other counter
    "training_iteration",
    "nupdates",  # OpenAI baselines' PPO2: its update count beside total_timesteps
    "t_env",  # PyMARL's environment steps (``Recent Stats | t_env: 12000 | Episode: 30``)
)

# counters of whole epochs or episodes: a table's step when it has no step key and one of these counts
# up by whole numbers, row after row (Spinning Up's ``Epoch``, a script's ``episode`` list); a table
# with a step key keeps it (an HF Trainer's fractional ``epoch`` beside its ``step``)
COUNTER_KEYS: tuple[str, ...] = ("epoch", "episode")

# update counters a table also carries (Stable-Baselines3's ``train/n_updates``): its step when every
# step key starts again (``learn()`` called again and again, each call counting its iterations and
# timesteps from 0) and this one never goes back (LABELS.md: a repeated inner counter is no restart)
UPDATE_COUNTER_KEYS: tuple[str, ...] = ("train/n_updates", "n_updates", "num_updates")

# keys whose value is the step as a progress string "N/TOTAL" (ms-swift: "global_step/max_steps": "5/2169")
FRACTION_STEP_KEYS: tuple[str, ...] = ("global_step/max_steps",)

LAYER_PREFIX = "routing_entropy/layer_"

# Record kinds and split tags (a JSON line's ``"type": "eval"``, a text line's ``val: loss = 3.3``):
# training records keep their names; validation and evaluation ones are named ``val/<name>`` and
# ``eval/<name>``, whichever reader found them, so that they never overwrite the training series.
TRAIN_KINDS = frozenset({"train", "training", "trainer", "update", "optim", "optimizer", "step", "metrics",
                         "log", "rollout", "rollouts", "generation", "sampling"})
VAL_KINDS = frozenset({"val", "valid", "validation"})
EVAL_KINDS = VAL_KINDS | {"eval", "evaluation", "test", "heldout"}


def split_prefix(kind: str) -> str | None:
    """The name prefix of a split or record kind: "" for training, ``val/`` or ``eval/`` for
    held-out data, None for another kind (the caller decides)."""
    kind = kind.strip().lower()
    if kind in TRAIN_KINDS:
        return ""
    if kind in EVAL_KINDS:
        return "val/" if kind in VAL_KINDS else "eval/"
    return None


def is_validation_loss(name: str) -> bool:
    """A held-out loss by its name: ``val_loss``, ``eval/loss``, ``Validation loss``, ``test loss``
    (its first word a split tag, its last ``loss``)."""
    low = name.lower()
    return low.endswith("loss") and low.split("/")[0].split("_")[0].split(" ")[0] in EVAL_KINDS - {"evaluation", "heldout"}
