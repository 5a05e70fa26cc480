"""Typed, validated thresholds for the detectors (one frozen dataclass, JSON round-trip).

Defaults follow shared/research/logs-and-failures.md §2 (sources there): NIST modified-z 3.5,
fp16 max 65504 and msprobe's 1e10 magnitude alarm, verl's
rollout_probs_diff 0.01, rollout IS window [0.5, 2.0], router entropy drop 30%, entropy
collapse below 10-20% of the start value. ``DiagnoseConfig.from_dict`` rejects unknown keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class DiagnoseConfig:
    robust_z: float = 3.5              # modified z (0.6745 * dev / MAD) that marks a departure
    min_history: int = 3               # records needed before any departure can be judged
    grad_norm_factor: float = 3.0      # sustained grad-norm level rise that counts as divergence
    loss_factor: float = 1.25          # sustained positive-loss level rise that counts as divergence
    loss_rise_over_best: float = 2.0   # loss above this multiple of its best so far, for good: divergence
    rise_scale_share: float = 0.05     # ... and by at least this share of the level it ran at before (90th percentile)
    saturation_abs: float = 1e10       # msprobe AnomalyNan magnitude threshold
    fp16_max: float = 65504.0
    loss_scale_window: int = 1000      # Megatron default: growth/halving window (iterations)
    loss_scale_collapse_halvings: int = 3
    logprob_diff_limit: float = 0.01   # verl FAQ: > 0.01 = inference precision issue
    logprob_diff_growth: float = 3.0
    is_ratio_low: float = 0.5
    is_ratio_high: float = 2.0
    mismatch_kl_limit: float = 2e-3    # train-vs-rollout KL: 1e-3 acceptable, MoE ~1.5e-3 (R3)
    routing_entropy_drop: float = 0.30
    load_imbalance_factor: float = 2.0
    aux_loss_factor: float = 1.5
    entropy_floor_fraction: float = 0.15
    entropy_blowup_factor: float = 3.0 # LABELS.md: entropy x3 or more and staying: the policy blew up
    reward_drop_fraction: float = 0.5  # share of the gained reward lost, sustained
    kl_factor: float = 10.0
    kl_ref_blowup: float = 100.0       # LABELS.md: KL to the reference x100 over its early level and staying
    grad_blowup_factor: float = 100.0  # LABELS.md: grad norm x100 of the run's median, repeatedly
    blowup_cluster_records: int = 10   # a repeated blow-up dates from three blown-up records within this many
    policy_loss_floor: float = 10.0    # an RL policy loss (O(1) when clipped over normalised advantages) this large has blown up
    kl_floor: float = 0.05             # new-vs-old KL (ppo_kl): ~1.5x a target of 0.01 is already large
    kl_ref_floor: float = 0.1          # KL to the reference grows from 0 by design; only large values count
    length_factor: float = 2.0
    truncation_limit: float = 0.1
    vanishing_fraction: float = 1e-3
    vanishing_min_records: int = 5
    lr_decayed_share: float = 0.01    # an lr this small a share of its peak before it reads 0: the schedule's end
    tie_records: int = 2               # LABELS.md: onsets "within the same record or two" (at the log's own
                                       # resolution) are together: the causal order decides
    eval_drop_share: float = 0.4       # an evaluation score that loses this share of its early level for good
    eval_min_drop: float = 0.1         # ... and at least this much (scores in [0, 1]): a reward collapse
    validation_rise: float = 1.25      # a validation loss that rose less than this did not see a train-loss jump
    cap_from_start_share: float = 0.1  # responses at the length cap from within this share of the records: the cap is short
    # -- detectors' finer thresholds (each read by one rule; listed with it in rules.py) --
    startup_min_scale: float = 1024.0  # fp16 scalers start their search at 2^16 or more; halvings from below are overflows
    storm_records: int = 3             # consecutive iterations skipped for overflow after start-up: a storm
    skipped_share: float = 0.25        # non-finite grad norms on more records than this are no longer occasional
    converged_share: float = 0.01      # a loss already below this share of its median before it printed 0.0 converged
    zero_loss_records: int = 2         # a loss exactly 0 to the end after being positive, for this many records
    pinned_records: int = 3            # records at the length cap, to the end, that make a runaway
    pinned_share: float = 0.8          # share of the records from the onset on that sit at the cap
    length_grad_factor: float = 3.0    # grad norm this far above its median before a pin: the update blew up too
    length_mean_rise: float = 1.25     # mean length over a pin against before it: answers lengthen overall
    flat_gap_factor: float = 2.0       # a flat train/rollout gap this many times its limit from the start
    large_spike: float = 10.0          # Megatron's SPIKY_LOSS_FACTOR: a spike that may have done damage
    huge_spike: float = 100.0          # a record this many times the median before it: a blow-up on sight
    zero_advantage: float = 0.01       # RL grad norms below this share of the usual level: equal-reward groups
    usual_zero_share: float = 0.5      # grad norms ~0 on more records than this: zero is the run's usual value
    empty_update_share: float = 0.8    # RL updates with a loss exactly 0 on this share of records: nothing is learned
    same_value: float = 1e-6           # relative agreement at which two printed losses are the same number
    min_digits: int = 4                # significant digits a repeated loss must show to mean a frozen loss
    never_learned_records: int = 20   # records from the run's start over which a loss that never moves never learned
    never_learned_band: float = 0.02   # ... its 5-95 % range within this share of its level
    never_learned_trend: float = 0.01  # ... or, noisier, its first and last quarters' medians this close
    never_learned_noisy_band: float = 0.10  # ... with its 5-95 % range within this share of its level
    uniform_classes: int = 100         # a loss frozen at ln(k), k up to this: a uniform guess over k outcomes
    uniform_tolerance: float = 1e-3    # ... to within this (absolute, in nats)
    short_run: int = 10                # confidence: fewer records and bands rest on a handful of points
    long_run: int = 30                 # confidence: enough history for every rule's baseline

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"diagnose config {f.name}={value!r}: expected a number")
            if value < 0:
                raise ValueError(f"diagnose config {f.name}={value!r}: must be >= 0")
        if self.is_ratio_low >= self.is_ratio_high:
            raise ValueError("diagnose config: is_ratio_low must be below is_ratio_high")

    @classmethod
    def from_dict(cls, data: dict) -> "DiagnoseConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"diagnose config: unknown key(s) {', '.join(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict:
        return asdict(self)
