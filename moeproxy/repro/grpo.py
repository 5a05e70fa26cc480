"""The GRPO loop: group sampling, group-normalised advantages, clipped ratio objective, optional KL to
a reference, grad clipping; every step logged in verl's file-logger JSONL with verl's metric names.

Lifecycle of one step: sync the rollout engine (a copy of the policy at ``rollout_dtype``, as an
inference engine holds it) -> sample ``group_size`` completions per prompt -> reward (exact sum) ->
advantages ``(r - mean_group) / (std_group + eps)`` -> old log-probs (trainer recompute, or the
rollout engine's own when ``old_logprobs_from_rollout``) -> ``mini_batches`` clipped-objective
updates (fp32, or an fp16 working copy with a static loss scale when ``compute_dtype='float16'``)
-> one JSONL line. Non-finite gradients skip the optimizer step (verl FSDP behaviour) but are logged.
Fault knobs take effect at ``fault_step``; ``moeproxy.repro.scenarios`` names the combinations.
"""

from __future__ import annotations

import copy
import math
import random
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from moeproxy.repro import arithmetic
from moeproxy.repro.memory import reset_peak_rss, rss_kib
from moeproxy.repro.probes import RoutingProbe
from moeproxy.repro.sampling import Rollout, decode_completions, encode_prompts, sample, sequence_logprobs
from moeproxy.repro.verl_log import VerlFileLogger

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


@dataclass
class GrpoConfig:
    """Every knob of a GRPO run; faults are knobs that change at ``fault_step``."""

    steps: int = 60
    seed: int = 0
    sampling_seed: int | None = None  # rollout sampling noise (default: seed); prompts always follow seed
    prompts_per_step: int = 8
    group_size: int = 8
    mini_batches: int = 2
    temperature: float = 1.0
    lr: float = 1e-4
    clip_ratio: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    aux_loss_coef: float = 0.01
    # --- fault mechanisms (defaults = healthy) ---
    fault_step: int | None = None
    lr_multiplier: float = 1.0  # learning rate x this from fault_step
    clip_after_fault: bool = True  # False: gradient clipping removed from fault_step
    compute_dtype: str = "float32"  # trainer forward/backward precision
    loss_scale: float = 1.0  # static loss scale of the fp16 trainer (no dynamic back-off)
    loss_scale_after_fault: float | None = None  # the static loss scale from fault_step (a restart
    # that reads another scale: every update whose scaled gradients pass 65504 is skipped)
    rollout_dtype: str = "float32"  # rollout engine weights/compute precision
    rollout_dtype_after_fault: str | None = None  # the engine's precision from fault_step
    old_logprobs_from_rollout: bool = False  # use engine log-probs as pi_old, no IS correction
    router_lr_multiplier: float = 1.0  # router learning rate x this from fault_step
    aux_loss_coef_after_fault: float | None = None  # load-balancing loss coefficient from fault_step
    # the rollout engine's router weights quantised to this many bits from fault_step, one bit fewer
    # every tenth of the run (down to 2): the engine routes more and more tokens to other experts
    # than the trainer, a mismatch that grows over the run and comes from routing alone
    rollout_router_bits_after_fault: int | None = None

    def __post_init__(self):
        for name in ("compute_dtype", "rollout_dtype", "rollout_dtype_after_fault"):
            if getattr(self, name) is not None and getattr(self, name) not in DTYPES:
                raise ValueError(f"{name}={getattr(self, name)!r}; expected one of {sorted(DTYPES)}")
        if self.compute_dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"compute_dtype={self.compute_dtype!r}; expected float32, float16 or bfloat16")
        if self.steps < 1 or self.group_size < 2 or self.prompts_per_step < 1 or self.mini_batches < 1:
            raise ValueError("steps >= 1, group_size >= 2, prompts_per_step >= 1, mini_batches >= 1 required")
        if (self.prompts_per_step * self.group_size) % self.mini_batches:
            raise ValueError("prompts_per_step * group_size must be divisible by mini_batches")

    def fault_active(self, step: int) -> bool:
        return self.fault_step is not None and step >= self.fault_step

    def loss_scale_at(self, step: int) -> float:
        """The fp16 trainer's static loss scale at ``step``."""
        if self.loss_scale_after_fault is not None and self.fault_active(step):
            return self.loss_scale_after_fault
        return self.loss_scale


def _has_router_family(model) -> bool:
    from moeproxy.proxy.arch import FAMILIES

    return getattr(model.config, "model_type", None) in FAMILIES


def _router_parameters(model) -> list[torch.nn.Parameter]:
    from moeproxy.repro.probes import find_routers

    if not _has_router_family(model):
        return []

    return [p for _layer, _name, router in find_routers(model) for p in router.parameters()]


def quantise_weights(model, dtype: torch.dtype):
    """A copy of ``model`` as an inference engine holds it: bf16/fp16 cast, or FP8 (e4m3 or e5m2)
    per-tensor scaled weights (dequantised to bf16 for compute)."""
    engine = copy.deepcopy(model)
    if dtype == torch.float32:
        return engine
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        fp8_max = torch.finfo(dtype).max
        with torch.no_grad():
            for p in engine.parameters():
                if p.dim() >= 2:
                    scale = p.abs().max().clamp(min=1e-12) / fp8_max
                    p.copy_((p / scale).to(dtype).float() * scale)
        return engine.to(torch.bfloat16)
    return engine.to(dtype)


def quantise_routers(engine, bits: int):
    """``engine`` with its router weights rounded to a symmetric per-tensor grid of ``bits`` bits
    (router logits computed from lower-precision weights): in place, returned."""
    levels = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for p in _router_parameters(engine):
            scale = p.abs().max().clamp(min=1e-12) / levels
            p.copy_(torch.round(p / scale) * scale)
    return engine


class GrpoTrainer:
    """Owns policy, optimizer, optional reference, rollout engine and the routing probe."""

    def __init__(self, model, tokenizer, config: GrpoConfig):
        # the run's memory is measured from here (see perf/run_memory_gb)
        self.memory_base_kib = rss_kib("VmRSS") if reset_peak_rss() else None
        self.model = model.float()
        self.param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.tokenizer = tokenizer
        self.config = config
        router_params = _router_parameters(model)
        router_ids = {id(p) for p in router_params}
        other = [p for p in model.parameters() if id(p) not in router_ids]
        self.optimizer = torch.optim.AdamW(
            [{"params": other, "name": "backbone"}, {"params": router_params, "name": "router"}],
            lr=config.lr, weight_decay=0.0,
        )
        self.reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
        self.is_moe = bool(_router_parameters(model)) if _has_router_family(model) else False
        self.probe = RoutingProbe(self.model) if self.is_moe else None
        self.total_params = sum(p.numel() for p in model.parameters())
        self.active_params = active_parameters(model)
        self.rng = random.Random(config.seed)
        self.generator = torch.Generator().manual_seed(
            config.seed if config.sampling_seed is None else config.sampling_seed)
        torch.manual_seed(config.seed)

    # -- pieces of one step ------------------------------------------------------------------
    def _set_lr(self, step: int) -> float:
        c = self.config
        lr = c.lr * (c.lr_multiplier if c.fault_active(step) else 1.0)
        router_mult = c.router_lr_multiplier if c.fault_active(step) else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = lr * (router_mult if group["name"] == "router" else 1.0)
        return lr

    def _rollout_engine(self, step: int):
        c = self.config
        dtype = c.rollout_dtype_after_fault if (c.fault_active(step) and c.rollout_dtype_after_fault) else c.rollout_dtype
        engine = self.model if dtype == "float32" else quantise_weights(self.model, DTYPES[dtype]).eval()
        bits = self.router_bits(step)
        if bits is not None:
            engine = quantise_routers(engine if engine is not self.model else copy.deepcopy(self.model).eval(), bits)
            dtype = f"{dtype}+router{bits}bit"
        return engine, dtype

    def router_bits(self, step: int) -> int | None:
        """The engine's router precision at ``step`` (None: as the rest of the engine)."""
        c = self.config
        if c.rollout_router_bits_after_fault is None or not c.fault_active(step):
            return None
        every = max(1, round(c.steps * 0.1))
        return max(2, c.rollout_router_bits_after_fault - (step - c.fault_step) // every)

    def _trainer_model(self):
        if self.config.compute_dtype == "float32":
            return self.model
        working = copy.deepcopy(self.model).to(DTYPES[self.config.compute_dtype])
        return working

    def step(self, step: int) -> dict:
        c = self.config
        t0 = time.perf_counter()
        lr = self._set_lr(step)
        pairs = arithmetic.sample_prompts("train", c.prompts_per_step, self.rng)
        prompts = [arithmetic.prompt(a, b) for a, b in pairs for _ in range(c.group_size)]
        ids, mask = encode_prompts(self.tokenizer, prompts)

        engine, engine_dtype = self._rollout_engine(step)
        if self.probe is not None:
            self.probe.enabled = False
        rollout = sample(engine, self.tokenizer, ids, mask, temperature=c.temperature, generator=self.generator)
        t_gen = time.perf_counter() - t0
        texts = decode_completions(self.tokenizer, rollout)
        rewards = torch.tensor([arithmetic.reward(p, t) for p, t in zip(prompts, texts)])
        grouped = rewards.view(c.prompts_per_step, c.group_size)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)

        # old log-probs recomputed by the trainer in fp32 (also the reference point for the
        # train-vs-rollout mismatch metrics); routing probes watch this forward
        if self.probe is not None:
            self.probe.enabled = True
            self.probe.set_token_mask(rollout.attention_mask)
        with torch.no_grad():
            trainer_lp, trainer_logits, _ = sequence_logprobs(self.model, rollout, c.temperature)
        if self.probe is not None:
            self.probe.set_token_mask(None)
            self.probe.enabled = False
            routing = self.probe.collect()
        else:
            routing = {"metrics": {}, "load": {}}
        tmask = rollout.completion_mask.float()
        old_lp = rollout.sampler_logprobs if c.old_logprobs_from_rollout else trainer_lp
        probs_diff = (trainer_lp.exp() - rollout.sampler_logprobs.exp()).abs()[tmask.bool()]

        t1 = time.perf_counter()
        update = self._update(step, rollout, old_lp, advantages)
        t_update = time.perf_counter() - t1

        lengths = rollout.completion_mask.sum(1).float()
        truncated = (rollout.completion_mask[:, -1].bool() & (rollout.completion_ids[:, -1] != self.tokenizer.eos_token_id)).float()
        metrics = {
            "actor/pg_loss": update["pg_loss"],
            "actor/pg_clipfrac": update["clipfrac"],
            "actor/ppo_kl": update["ppo_kl"],
            "actor/entropy": update["entropy"],
            "actor/grad_norm": update["grad_norm"],
            "actor/lr": lr,
            "actor/aux_loss": update["aux_loss"],
            "critic/score/mean": float(rewards.mean()),
            "critic/score/max": float(rewards.max()),
            "critic/score/min": float(rewards.min()),
            "critic/advantages/mean": float(advantages.mean()),
            "critic/advantages/max": float(advantages.max()),
            "critic/advantages/min": float(advantages.min()),
            "response_length/mean": float(lengths.mean()),
            "response_length/max": float(lengths.max()),
            "response_length/min": float(lengths.min()),
            "response_length/clip_ratio": float(truncated.mean()),
            "training/rollout_probs_diff_mean": float(probs_diff.mean()) if probs_diff.numel() else float("nan"),
            "training/rollout_probs_diff_max": float(probs_diff.max()) if probs_diff.numel() else float("nan"),
            "training/global_step": step,
            "timing_s/gen": t_gen,
            "timing_s/update_actor": t_update,
        }
        if c.kl_coef > 0:
            metrics["actor/kl_loss"] = update["kl_loss"]
            metrics["actor/kl_coef"] = c.kl_coef
        if c.compute_dtype != "float32":
            metrics["actor/loss_scale"] = c.loss_scale_at(step)
            metrics["actor/skipped_steps"] = update["skipped"]
        metrics.update(routing["metrics"])
        for layer, shares in routing["load"].items():
            for expert, share in enumerate(shares):
                metrics[f"routing/load/layer_{layer}/expert_{expert}"] = share
        metrics["timing_s/step"] = time.perf_counter() - t0
        metrics["perf/cpu_memory_used_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
        if self.memory_base_kib is not None and (peak := rss_kib("VmHWM")) is not None:
            # this run's own memory: the parameters plus the resident high-water mark above the
            # process's size when the run started (grads, optimizer, reference, rollout copies,
            # activations); comparable between two runs made one after the other in one process
            metrics["perf/run_memory_gb"] = (self.param_bytes + (peak - self.memory_base_kib) * 1024) / 1024**3
        metrics["perf/model_state_gb"] = self.model_state_bytes() / 1024**3
        metrics["perf/total_params"] = self.total_params
        metrics["perf/tokens"] = int(rollout.attention_mask.sum())  # prompt and completion tokens the step trained on
        # the tokens the step's tensors hold, padding included: what its activations are sized by
        metrics["perf/tensor_tokens"] = int(rollout.prompt_ids.numel() + rollout.completion_ids.numel())
        metrics["perf/active_params"] = self.active_params
        return metrics

    def model_state_bytes(self) -> int:
        """Bytes of parameters + gradients + Adam moments (the trainer's model state)."""
        n = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return 4 * n

    def _update(self, step: int, rollout: Rollout, old_lp: torch.Tensor, advantages: torch.Tensor) -> dict:
        c = self.config
        batch = rollout.completion_ids.shape[0]
        size = batch // c.mini_batches
        perm = torch.randperm(batch, generator=self.generator)
        aux_coef = c.aux_loss_coef_after_fault if (c.fault_active(step) and c.aux_loss_coef_after_fault is not None) else c.aux_loss_coef
        clip = c.max_grad_norm if (c.clip_after_fault or not c.fault_active(step)) else None
        sums = {"pg_loss": 0.0, "clipfrac": 0.0, "ppo_kl": 0.0, "entropy": 0.0, "grad_norm": 0.0,
                "aux_loss": 0.0, "kl_loss": 0.0, "skipped": 0}
        for k in range(c.mini_batches):
            idx = perm[k * size : (k + 1) * size]
            sub = Rollout(rollout.prompt_ids[idx], rollout.prompt_mask[idx], rollout.completion_ids[idx],
                          rollout.completion_mask[idx], rollout.sampler_logprobs[idx])
            working = self._trainer_model()
            lp, logits, out = sequence_logprobs(working, sub, c.temperature, output_router_logits=self.is_moe)
            lp = lp.float()
            aux = out.aux_loss.float() if getattr(out, "aux_loss", None) is not None else torch.zeros(())
            tmask = sub.completion_mask.float()
            denom = tmask.sum().clamp(min=1)
            ratio = torch.exp(lp - old_lp[idx])
            adv = advantages[idx][:, None]
            unclipped = ratio * adv
            clipped = torch.clamp(ratio, 1 - c.clip_ratio, 1 + c.clip_ratio) * adv
            pg_loss = (-torch.minimum(unclipped, clipped) * tmask).sum() / denom
            loss = pg_loss + aux_coef * aux
            if self.reference is not None:
                with torch.no_grad():
                    ref_lp, _, _ = sequence_logprobs(self.reference, sub, c.temperature)
                log_r = ref_lp - lp
                kl = ((torch.exp(log_r) - log_r - 1) * tmask).sum() / denom
                loss = loss + c.kl_coef * kl
                sums["kl_loss"] += float(kl.detach()) / c.mini_batches
            with torch.no_grad():
                probs = torch.softmax(logits.float(), -1)
                ent = -(probs * torch.log(probs.clamp(min=1e-12))).sum(-1)
                sums["entropy"] += float((ent * tmask).sum() / denom) / c.mini_batches
                sums["clipfrac"] += float((((ratio - 1).abs() > c.clip_ratio).float() * tmask).sum() / denom) / c.mini_batches
                sums["ppo_kl"] += float(((old_lp[idx] - lp) * tmask).sum() / denom) / c.mini_batches
            sums["pg_loss"] += float(pg_loss.detach()) / c.mini_batches
            sums["aux_loss"] += float(aux.detach()) / c.mini_batches
            grad_norm = self._backward_and_step(working, loss, clip, c.loss_scale_at(step))
            sums["grad_norm"] += grad_norm / c.mini_batches
            sums["skipped"] += int(not math.isfinite(grad_norm))
        return sums

    def _backward_and_step(self, working, loss: torch.Tensor, clip: float | None, loss_scale: float = 1.0) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        if working is self.model:
            loss.backward()
        else:
            # fp16/bf16 working copy: scaled backward in low precision, grads unscaled into fp32 master
            working.zero_grad(set_to_none=True)
            (loss * loss_scale).backward()
            for master, low in zip(self.model.parameters(), working.parameters()):
                if low.grad is not None:
                    master.grad = low.grad.float() / loss_scale
        if working is self.model:
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        else:
            # the global norm of the *scaled* low-precision grads, accumulated in that precision (no
            # fp32 upcast): it overflows once true_norm * loss_scale exceeds the dtype's max
            low_grads = [p.grad for p in working.parameters() if p.grad is not None]
            scaled = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in low_grads]))
            norm = float(scaled) / loss_scale
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)  # skip the step, as verl's FSDP actor does
            return norm
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        return norm


def run_grpo(model, tokenizer, config: GrpoConfig, log_path: str | Path, progress=None) -> dict:
    """Train ``model`` in place for ``config.steps`` steps, writing verl JSONL to ``log_path``.

    Returns a summary: steps, seconds, mean step time, model-state bytes, parameter counts.
    """
    trainer = GrpoTrainer(model, tokenizer, config)
    started = time.perf_counter()
    step_times, tokens, tensor_tokens, memory = [], [], [], []
    with VerlFileLogger(log_path) as logger:
        for step in range(1, config.steps + 1):
            metrics = trainer.step(step)
            step_times.append(metrics["timing_s/step"])
            tokens.append(metrics["perf/tokens"])
            tensor_tokens.append(metrics["perf/tensor_tokens"])
            if "perf/run_memory_gb" in metrics:
                memory.append(metrics["perf/run_memory_gb"])
            logger.log(metrics, step=step)
            if progress is not None:
                progress(step, metrics)
    if trainer.probe is not None:
        trainer.probe.remove()
    total = sum(p.numel() for p in model.parameters())
    return {
        "config": asdict(config),
        "steps": config.steps,
        "seconds": time.perf_counter() - started,
        "step_time_mean_s": sum(step_times) / len(step_times),
        "step_time_median_s": sorted(step_times)[len(step_times) // 2],
        "model_state_bytes": trainer.model_state_bytes(),
        "tokens_per_step_median": sorted(tokens)[len(tokens) // 2],
        "tensor_tokens_per_step_median": sorted(tensor_tokens)[len(tensor_tokens) // 2],
        "run_memory_peak_gb": max(memory) if memory else None,
        "parameters": total,
        "active_parameters": active_parameters(model),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }


def active_parameters(model) -> int:
    """Parameters touched per token: everything except the routed experts not in the top-k."""
    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    num_experts = int(getattr(cfg, "num_experts", 0) or 0)
    top_k = int(getattr(cfg, "num_experts_per_tok", 0) or 0)
    if not num_experts:
        return total
    expert_params = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return int(total - expert_params + expert_params * top_k / num_experts)
