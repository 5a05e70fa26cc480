"""Named fault scenarios: each is a documented ``GrpoConfig`` change that triggers a real mechanism.

No scenario writes a bad value into a log; each changes how training runs, from ``fault_step`` on
(a fraction of the run, so the onset lands at the same relative place for any ``--steps``):

All scenarios share ``COMMON_SETTINGS``: a KL-to-reference loss (coefficient 0.1), 16 prompts x 8
samples per step, and a bf16 rollout engine beside the fp32 trainer (as vLLM/SGLang beside an fp32
FSDP actor: a small, normal train-vs-rollout probability gap, pi_old recomputed by the trainer).

- ``healthy``: fp32 trainer, bf16 rollouts, clipping at 1.0, load-balancing loss on.
- ``overflow``: the trainer runs forward/backward on an fp16 working copy with a *static* loss scale
  of 2048 (no dynamic back-off, as with a fixed ``loss_scale`` in DeepSpeed/Megatron fp16 configs)
  and reduces the global norm of the scaled fp16 gradients in fp16. At the fault step the learning
  rate is raised x10 and clipping removed (a mis-set peak): gradients grow, the scaled norm passes
  65504 (true norm > 32), the norm is inf and the step is skipped (verl FSDP behaviour), again and
  again while the gradients stay large.
- ``divergence``: the same learning-rate jump x10 with clipping removed, in fp32, with a strong KL
  anchor (coefficient 1.0): the policy is kicked away from the reference, the KL term pulls back at
  the raised learning rate and the grad norm stays 10-100x above its level, all finite.
- ``precision_mismatch``: from the fault step the rollout engine samples from an FP8 (e5m2,
  per-tensor scaled) copy of the policy computing in bf16, as a quantised inference engine does,
  while the trainer computes log-probs in fp32 and uses the engine's log-probs as pi_old without
  importance-sampling correction.
- ``routing_collapse``: from the fault step the router learning rate is x1000 and the load-balancing
  loss is switched off, so a few experts take most tokens (routing entropy falls, imbalance rises).
- ``routing_mismatch``: a train/rollout mismatch that comes from the MoE structure and grows: from the
  fault step the rollout engine's router weights are held at 6 bits, one bit fewer every tenth of
  the run (down to 2), as an engine computing router logits in low precision; the engine routes more
  and more tokens to other experts than the trainer, whose fp32 log-probs are compared with the
  engine's (engine log-probs are pi_old, no correction). Everything else is as ``healthy``.

A full model of a shape listed in ``CALIBRATED`` (the 50 M, 64-expert model) runs that shape's
settings on top of these, and so do its proxy and baselines: there the overflow is the fp16
trainer's static loss scale raised to 2^32 at the fault step, the routing collapse a load-balancing loss of the wrong sign with
the router's learning rate x30, the routing mismatch starts at 4 bits (see the comments there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moeproxy.errors import InputError
from moeproxy.repro.grpo import GrpoConfig


# Shared by every scenario (verl GRPO with a KL-to-reference loss, as in its GSM8K recipes).
COMMON_SETTINGS = {"kl_coef": 0.1, "rollout_dtype": "bfloat16", "prompts_per_step": 16}


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    expected_verdict: str
    overrides: dict = field(default_factory=dict)
    fault_at: float | None = None  # fraction of the run where the fault starts

    def overrides_for(self, shape_key: str | None = None) -> dict:
        """This scenario's settings for a full model of shape ``shape_key`` (``TinyMoeShape.key``):
        the defaults, with the settings calibrated for that shape (``CALIBRATED``) on top."""
        return {**self.overrides, **CALIBRATED.get(shape_key or "", {}).get(self.name, {})}

    def config(self, steps: int, seed: int, shape_key: str | None = None, **extra) -> GrpoConfig:
        """The run's ``GrpoConfig``. ``shape_key``: the FULL model's shape, also for its proxy and
        baselines (every side of a comparison runs the same fault)."""
        fault_step = None if self.fault_at is None else max(2, int(round(self.fault_at * steps)) + 1)
        return GrpoConfig(steps=steps, seed=seed, fault_step=fault_step,
                          **{**COMMON_SETTINGS, **self.overrides_for(shape_key), **extra})


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy", "fp32 trainer and rollouts, grad clipping 1.0, load-balancing loss on",
                 "healthy"),
        Scenario("overflow", "fp16 trainer with a static loss scale; learning rate raised at the fault step",
                 "overflow", {"compute_dtype": "float16", "loss_scale": 2048.0, "lr_multiplier": 10.0,
                              "clip_after_fault": False}, fault_at=0.4),
        Scenario("divergence", "learning rate x10 and gradient clipping removed at the fault step (fp32, KL coefficient 1.0)",
                 "divergence", {"lr_multiplier": 10.0, "clip_after_fault": False, "kl_coef": 1.0}, fault_at=0.4),
        Scenario("precision_mismatch", "rollouts from an FP8 engine copy from the fault step, trainer fp32, engine "
                 "log-probs used as pi_old without correction", "precision_mismatch",
                 {"rollout_dtype_after_fault": "float8_e5m2", "old_logprobs_from_rollout": True}, fault_at=0.4),
        Scenario("routing_mismatch", "rollout engine's router weights at 6 bits from the fault step, one bit fewer "
                 "every tenth of the run: routing differs from the trainer's more and more",
                 "precision_mismatch", {"rollout_router_bits_after_fault": 6, "old_logprobs_from_rollout": True},
                 fault_at=0.4),
        Scenario("routing_collapse", "router learning rate x1000 and load-balancing loss off at the fault step",
                 "routing_collapse", {"router_lr_multiplier": 1000.0, "aux_loss_coef_after_fault": 0.0},
                 fault_at=0.4),
    )
}


# Settings calibrated for a full model of one shape (``TinyMoeShape.key``) with
# ``bench/scenario_check.py``, so that the full run's own diagnosis reads the intended category
# there; a shape not listed runs the defaults above (calibrated on the bundled tiny MoE). Every side
# of a comparison (proxy, baselines) runs its full model's settings.
CALIBRATED: dict[str, dict[str, dict]] = {
    # ~51 M parameters, 64 experts, top-4 (README "A first grid at 50 M"), pretrained 1,500 steps to
    # 0.899 exact match: nearly every answer is right, so most GRPO steps have equal rewards in every
    # group (no policy gradient; grad norm ~0.003 from the load-balancing and KL terms only).
    "h256-i256-l4-e64-k4-a4": {
        # lr x10 / no clipping made the gradients grow first (a divergence) and overflowed only on
        # the few learning steps after it; here the fault is the loss scale itself: the fp16 trainer
        # (static scale 2048, as by default) restarts at the fault step with a static scale of 2^32
        # (Megatron's --initial-loss-scale read as a fixed scale), so every update from there
        # overflows and is skipped; learning rate and clipping unchanged
        "overflow": {"loss_scale_after_fault": 2.0 ** 32, "lr_multiplier": 1.0, "clip_after_fault": True},
        # router lr x1000 scrambled the routing and blew the policy up in the same step: here the
        # load-balancing loss enters with the wrong sign (coefficient -0.1: it rewards imbalance) and
        # the router's learning rate is x30, so routing concentrates step by step from the fault on
        # (aux loss, router entropy, load imbalance) and the policy degrades a few steps later
        "routing_collapse": {"router_lr_multiplier": 30.0, "aux_loss_coef_after_fault": -0.1},
        # 64 experts from a 256-wide router hardly change their top-4 at 6 or 5 bits: start at 4 bits
        # (3 bits 4 steps later, then 2), so the gap opens within the first tenth after the fault
        "routing_mismatch": {"rollout_router_bits_after_fault": 4},
    },
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InputError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
