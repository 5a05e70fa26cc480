"""Plan a proxy from a config alone: parameters, weight bytes, accelerators to train, step cost.

The model is instantiated on the meta device (no weights, no memory) to count parameters exactly as
transformers builds it; routed-expert and router parameters are then scaled to the kept count E'.
Memory model for training (mixed precision + Adam, states sharded across devices, ZeRO-3 style):
16 bytes per parameter (bf16 weights 2 + bf16 grads 2 + fp32 master weights 4 + Adam m 4 + v 4),
and a fraction of each device (default 25 %) is left for activations, buffers and fragmentation.
Per-step compute is 6 x active parameters per token (forward + backward); ``step_cost_ratio`` is
full / proxy, so it is 1.0 when top-k is kept and the proxy saves devices, not FLOPs. Given the
step's tokens (``tokens_per_step``), the step cost also counts the work every parameter costs once a
step whatever the tokens: the optimizer's update and the weights' copy to the rollout engine, memory
traffic of ``UPDATE_BYTES_PER_PARAM`` bytes a parameter, in FLOP-equivalents at the device's balance
(``flops_per_byte``). At a cluster's millions of tokens a step that term is small and the ratio is
the FLOPs one; with few tokens a step (a small grid on one CPU core) it is most of the step, and a
proxy with fewer experts steps faster although its FLOPs per token are the full model's.

Given the tokens of one forward and backward (``micro_batch_tokens``), the plan also estimates the
memory of one RL training replica (``run_memory_bytes``), what a run's peak memory is compared on:
per parameter the training state (16 bytes mixed precision; 16 for a float32 trainer: weights, grads,
Adam m and v), the reference policy's copy (when a KL term needs one) and the rollout engine's copy at
its precision; plus the activations autograd keeps for one micro-batch, counted per token and layer as
in Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models") with the
MLP replaced by the router and the top-k experts' inputs and intermediates, and the logits. The
activations depend on the active shape and the tokens, not on the experts kept: the part of a small
model's memory that a proxy does not shrink.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from moeproxy.errors import InputError
from moeproxy.proxy.arch import adapter_for
from moeproxy.proxy.checkpoint import load_config
from moeproxy.proxy.constraints import RoutingShape, proxy_top_k, resolve_kept_count, routing_notes
from moeproxy.units import human_bytes, human_count

TRAIN_BYTES_PER_PARAM = 16
# Memory traffic a step costs per parameter whatever its tokens: Adam reads and writes the fp32 master
# weights and both moments (24 bytes), reads and zeroes the bf16 gradient (4), writes the bf16 weights
# (2) and copies them to the rollout engine (read 2, write 2).
UPDATE_BYTES_PER_PARAM = 34
# A device's dense bf16 FLOPs per byte of memory bandwidth: H100 SXM 989 TFLOP/s over 3.35 TB/s ~ 295,
# Ascend 910B ~ 320 TFLOP/s over 1.6 TB/s ~ 200; a value between them unless told
DEFAULT_FLOPS_PER_BYTE = 250.0
DEFAULT_ACTIVATION_FRACTION = 0.25
# Bytes a parameter of the trainer's weights (the reference policy's copy is at the same precision);
# its state is TRAIN_BYTES_PER_PARAM either way: mixed precision (bf16 weights 2 + grads 2 + fp32
# master 4 + Adam m 4 + v 4) or a float32 trainer (weights 4 + grads 4 + m 4 + v 4, no master copy)
TRAINER_WEIGHT_BYTES = {"mixed": 2, "float32": 4}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}
MXFP4_BYTES_PER_PARAM = 17 / 32  # 16 bytes of packed nibbles + 1 scale byte per 32 values
_ROUTED = re.compile(r"\.experts\.(gate_up_proj|down_proj)(_bias)?$")
_ROUTER = re.compile(r"\.mlp\.(gate\.weight|router\.weight|router\.bias)$")
_FP8_EXEMPT = re.compile(r"(embed_tokens|lm_head|norm|\.mlp\.gate\.weight|\.bias$)")


def _hf_config(config: dict):
    from transformers import AutoConfig

    cfg = {k: v for k, v in config.items() if k not in ("quantization_config", "auto_map", "architectures")}
    model_type = cfg.pop("model_type")
    try:
        return AutoConfig.for_model(model_type, **cfg)
    except Exception as exc:  # transformers rejects the values
        reason = " ".join(str(exc).split())  # one line: transformers' validation errors span several
        raise InputError(f"transformers cannot build a {model_type} config from these values: {reason[:300]}") from exc


def count_parameters(config: dict) -> dict:
    """Instantiate on the meta device and count: total, routed experts, router, per-layer split."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = _hf_config(config)
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf)
    except Exception as exc:
        raise InputError(f"transformers cannot instantiate {config.get('model_type')} on the meta device: {exc}") from exc
    total = routed = router = 0
    fp8_quantisable = 0
    moe_layers = set()
    for name, p in model.named_parameters():
        n = p.numel()
        total += n
        if _ROUTED.search(name):
            routed += n
            moe_layers.add(name.split(".experts.")[0])
        elif _ROUTER.search(name):
            router += n
        if p.dim() >= 2 and not _FP8_EXEMPT.search(name):
            fp8_quantisable += n
    return {"total": total, "routed": routed, "router": router, "moe_layers": len(moe_layers),
            "fp8_quantisable": fp8_quantisable}


def _weight_bytes(config: dict, total: float, routed: float, fp8_quantisable: float) -> float:
    quant = (config.get("quantization_config") or {}).get("quant_method")
    dtype = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    base = DTYPE_BYTES.get(str(dtype).replace("torch.", ""), 2)
    if quant == "fp8":
        block = (config["quantization_config"].get("weight_block_size") or [128, 128])
        scale_per_param = 4 / (block[0] * block[1])
        return fp8_quantisable * (1 + scale_per_param) + (total - fp8_quantisable) * base
    if quant == "mxfp4":
        return routed * MXFP4_BYTES_PER_PARAM + (total - routed) * base
    return total * base


def _accelerators(params_total: float, device_memory_gib: float, activation_fraction: float) -> int:
    usable = device_memory_gib * (1 - activation_fraction) * 2**30
    return max(1, math.ceil(params_total * TRAIN_BYTES_PER_PARAM / usable))


def plan_proxy(
    model_path_or_config: str | Path | dict,
    keep_ratio: float | None = None,
    keep_experts: int | None = None,
    device_memory_gib: float = 64,
    top_k: str = "keep",
    ep_size: int = 1,
    activation_fraction: float = DEFAULT_ACTIVATION_FRACTION,
    tokens_per_step: int | None = None,
    flops_per_byte: float = DEFAULT_FLOPS_PER_BYTE,
    micro_batch_tokens: int | None = None,
    seq_len: float | None = None,
    trainer: str = "mixed",
    reference: bool = True,
    engine_bytes: float = 2,
) -> dict:
    """The ``moeproxy plan --json`` document for a checkpoint dir, a config.json path or a config dict."""
    if isinstance(model_path_or_config, dict):
        config, source = model_path_or_config, "<config dict>"
    else:
        config, source = load_config(Path(model_path_or_config)), str(model_path_or_config)
    if device_memory_gib <= 0:
        raise InputError(f"--device-memory-gib {device_memory_gib} must be positive")
    if not 0 <= activation_fraction < 1:
        raise InputError(f"activation fraction {activation_fraction} must be in [0, 1)")
    if tokens_per_step is not None and tokens_per_step <= 0:
        raise InputError(f"--tokens-per-step {tokens_per_step} must be positive")
    if not flops_per_byte > 0:
        raise InputError(f"--flops-per-byte {flops_per_byte} must be positive")
    if micro_batch_tokens is not None and micro_batch_tokens <= 0:
        raise InputError(f"--micro-batch-tokens {micro_batch_tokens} must be positive")
    if seq_len is not None and not seq_len > 0:
        raise InputError(f"--seq-len {seq_len} must be positive")
    if trainer not in TRAINER_WEIGHT_BYTES:
        raise InputError(f"trainer precision {trainer!r}: expected one of {sorted(TRAINER_WEIGHT_BYTES)}")
    if engine_bytes < 0:
        raise InputError(f"rollout engine bytes per parameter {engine_bytes} must not be negative")
    adapter = adapter_for(config, source)
    shape = adapter.routing_shape(config)
    if keep_ratio is None and keep_experts is None:
        keep_ratio = 0.25
        if not resolve_ok(shape, keep_ratio, top_k, ep_size):
            keep_ratio = 0.5
    kept = resolve_kept_count(shape, keep_ratio, keep_experts, top_k, ep_size)
    k_proxy = proxy_top_k(shape, kept, top_k)

    counts = count_parameters(config)
    e = shape.num_experts
    run_bytes_per_param = TRAIN_BYTES_PER_PARAM + (TRAINER_WEIGHT_BYTES[trainer] if reference else 0) + engine_bytes
    per_expert = counts["routed"] / (counts["moe_layers"] * e) if counts["moe_layers"] else 0.0
    backbone = counts["total"] - counts["routed"] - counts["router"]

    def side(n_experts: int, k: int) -> dict:
        scale = n_experts / e
        routed = counts["routed"] * scale
        router = counts["router"] * scale
        total = backbone + routed + router
        active = backbone + router + per_expert * k * counts["moe_layers"]
        fp8 = counts["fp8_quantisable"] - counts["routed"] * (1 - scale)
        out = {
            "experts": n_experts,
            "top_k": k,
            "params_total": int(round(total)),
            "params_active": int(round(active)),
            "weight_bytes": int(round(_weight_bytes(config, total, routed, fp8))),
            "train_state_bytes": int(round(total * TRAIN_BYTES_PER_PARAM)),
            "accelerators": _accelerators(total, device_memory_gib, activation_fraction),
            "flops_per_token": int(round(6 * active)),
        }
        if micro_batch_tokens is not None:
            act = activation_bytes(config, counts["moe_layers"], n_experts, k, micro_batch_tokens,
                                   seq_len or micro_batch_tokens, TRAINER_WEIGHT_BYTES[trainer])
            out["activation_bytes"] = int(round(act))
            out["run_memory_bytes"] = int(round(total * run_bytes_per_param + act))
        return out

    full, proxy = side(e, shape.top_k), side(kept, k_proxy)
    if tokens_per_step is None:
        ratio = full["flops_per_token"] / proxy["flops_per_token"]
        model = {"tokens_per_step": None, "explanation": "FLOPs per token alone (give the step's tokens to count "
                 "the per-parameter update as well)"}
    else:
        ratio = step_cost(full, tokens_per_step, flops_per_byte) / step_cost(proxy, tokens_per_step, flops_per_byte)
        model = {"tokens_per_step": tokens_per_step, "flops_per_byte": flops_per_byte,
                 "update_bytes_per_param": UPDATE_BYTES_PER_PARAM,
                 "explanation": "6 x active parameters x tokens, plus the update's memory traffic per parameter "
                                "in FLOP-equivalents at the device's FLOPs per byte",
                 "full": step_cost(full, tokens_per_step, flops_per_byte),
                 "proxy": step_cost(proxy, tokens_per_step, flops_per_byte)}
    return {
        "source": source,
        "family": adapter.model_type,
        "full": full,
        "proxy": proxy,
        "accelerator_reduction": 1 - proxy["accelerators"] / full["accelerators"],
        "step_cost_ratio": ratio,
        "step_cost_model": model,
        "keep_ratio": kept / e,
        "top_k_mode": top_k,
        "moe_layers": counts["moe_layers"],
        "params_per_expert": int(round(per_expert)),
        "memory_model": {
            "device_memory_gib": device_memory_gib,
            "run": None if micro_batch_tokens is None else {
                "micro_batch_tokens": micro_batch_tokens, "seq_len": seq_len or micro_batch_tokens,
                "trainer": trainer, "reference": reference, "engine_bytes_per_param": engine_bytes,
                "bytes_per_param": run_bytes_per_param,
                "explanation": "one replica of an RL step: training state + reference copy + rollout engine copy "
                               "per parameter, plus the activations of one micro-batch (Korthikanti et al. 2022, "
                               "MLP as router + top-k experts)"},
            "activation_fraction": activation_fraction,
            "train_bytes_per_param": TRAIN_BYTES_PER_PARAM,
            "explanation": "bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4 bytes per "
                           "parameter, sharded over devices; each device keeps the activation fraction free",
        },
        "notes": _notes(config, shape, kept, top_k),
    }


def step_cost(side: dict, tokens_per_step: int, flops_per_byte: float) -> float:
    """FLOP-equivalents of one training step of a plan's side: forward and backward over the step's
    tokens, plus the update every parameter costs once a step (memory traffic at the device's balance)."""
    return float(side["flops_per_token"]) * tokens_per_step + flops_per_byte * UPDATE_BYTES_PER_PARAM * side["params_total"]


def activation_bytes(config: dict, moe_layers: int, experts: int, top_k: int, tokens: float, seq_len: float,
                     value_bytes: float) -> float:
    """Bytes of the activations autograd keeps for one forward and backward over ``tokens`` tokens in
    sequences of ``seq_len``, counted as the Hugging Face implementations the proxies are built from
    keep them (eager attention, a loop over the experts), per token and layer:

    - attention: the norm's input and output, queries, keys and values, their norms' outputs, the
      rotated queries and keys, the attention probabilities (heads x sequence), the output
      projection's input;
    - MoE: the norm's input and output, the router's logits and their softmax, and for each of the
      top-k experts: the token's copy, the gate and up projections, the activation, their product,
      the down projection's output and its weighted copy (a dense layer: one MLP of the dense width);

    then the logits and their log-softmax at float32. Without recomputation or dropout (Korthikanti
    et al. 2022 count the same way for Megatron's layers)."""
    h = int(config.get("hidden_size") or 0)
    heads = int(config.get("num_attention_heads") or 1)
    head_dim = int(config.get("head_dim") or (h // heads if heads else 0))
    q = heads * head_dim
    kv = int(config.get("num_key_value_heads") or heads) * head_dim
    layers = int(config.get("num_hidden_layers") or moe_layers)
    expert_width = int(config.get("moe_intermediate_size") or config.get("intermediate_size") or 0)
    dense_width = int(config.get("intermediate_size") or expert_width)
    attention = 2 * h + 3 * q + 6 * kv + heads * seq_len + q
    moe = 2 * h + 2 * experts + top_k * (3 * h + 4 * expert_width)
    dense = 2 * h + 2 * h + 4 * dense_width
    per_token = layers * attention + moe_layers * moe + max(layers - moe_layers, 0) * dense
    vocab = int(config.get("vocab_size") or 0)
    return tokens * (per_token * value_bytes + 2 * vocab * 4)


def resolve_ok(shape: RoutingShape, ratio: float, top_k: str, ep_size: int) -> bool:
    try:
        resolve_kept_count(shape, ratio, None, top_k, ep_size)
        return True
    except InputError:
        return False


def _notes(config: dict, shape: RoutingShape, kept: int, top_k: str) -> list[str]:
    notes = routing_notes(shape, kept, top_k)
    if config.get("num_nextn_predict_layers"):
        notes.append(f"{config['num_nextn_predict_layers']} MTP layer(s) not counted (transformers does not build them)")
    if (config.get("quantization_config") or {}).get("quant_method"):
        notes.append(f"weight_bytes at the checkpoint's {config['quantization_config']['quant_method']} quantisation; training state assumes bf16 + fp32 Adam")
    return notes


def plan_rows(plan: dict) -> list[tuple[str, str, str]]:
    """(quantity, full, proxy) rows of a plan, numbers in human units (``635 K``, ``2.59 GiB``): the
    table ``moeproxy plan`` prints and the Proxy page shows."""
    f, p = plan["full"], plan["proxy"]
    return [
        ("experts per MoE layer", str(f["experts"]), str(p["experts"])),
        ("top-k", str(f["top_k"]), str(p["top_k"])),
        ("parameters (total)", human_count(f["params_total"]), human_count(p["params_total"])),
        ("parameters (active)", human_count(f["params_active"]), human_count(p["params_active"])),
        ("weights on disk", human_bytes(f["weight_bytes"]), human_bytes(p["weight_bytes"])),
        ("training state", human_bytes(f["train_state_bytes"]), human_bytes(p["train_state_bytes"])),
        (f"accelerators ({plan['memory_model']['device_memory_gib']:g} GiB)", str(f["accelerators"]),
         str(p["accelerators"])),
        ("FLOPs per token", human_count(f["flops_per_token"]), human_count(p["flops_per_token"])),
    ]


def format_plan(plan: dict) -> str:
    """Human-readable table for the CLI (sizes in human units: ``moeproxy.units``)."""
    lines = [f"{plan['source']} ({plan['family']}, {plan['moe_layers']} MoE layers)",
             f"{'':28} {'full':>14} {'proxy':>14}"]
    lines += [f"{name:28} {a:>14} {b:>14}" for name, a, b in plan_rows(plan)]
    model = plan.get("step_cost_model") or {}
    basis = ("FLOPs per token" if model.get("tokens_per_step") is None else
             f"{model['tokens_per_step']:,} tokens a step, the update at {model['flops_per_byte']:g} FLOPs per byte")
    lines.append(f"accelerator reduction: {plan['accelerator_reduction']:.1%}; step cost ratio (full/proxy, "
                 f"{basis}): {plan['step_cost_ratio']:.2f}")
    mm = plan["memory_model"]
    lines.append(f"memory model: {mm['train_bytes_per_param']} B/param ({mm['explanation']}); "
                 f"{mm['activation_fraction']:.0%} of each device left for activations")
    run = mm.get("run")
    if run:
        f, p = plan["full"], plan["proxy"]
        lines.append(f"run memory (one replica: {run['bytes_per_param']:g} B/param + one micro-batch's activations, "
                     f"{run['micro_batch_tokens']:,} tokens): {human_bytes(f['run_memory_bytes'])} -> "
                     f"{human_bytes(p['run_memory_bytes'])} (ratio {p['run_memory_bytes'] / f['run_memory_bytes']:.2f}; "
                     f"activations {human_bytes(f['activation_bytes'])} -> {human_bytes(p['activation_bytes'])}, kept whole: "
                     f"no recomputation, eager attention, no tensor or sequence parallelism)")
    lines += [f"note: {n}" for n in plan["notes"]]
    return "\n".join(lines)
