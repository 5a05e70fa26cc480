"""`moeproxy plan`: accelerators, parameters and step cost of a model and its proxy, from config alone."""

from __future__ import annotations

import json

from moeproxy.commands.common import add_keep_options

HELP = "Plan a proxy from a config: parameters, weight bytes, accelerators to train, step cost (full vs proxy)."


def add_arguments(parser) -> None:
    parser.add_argument("model", help="checkpoint directory or config.json")
    add_keep_options(parser, required=False)
    parser.add_argument("--device-memory-gib", type=float, default=64, help="memory per accelerator (default 64, Ascend 910B)")
    parser.add_argument("--tokens-per-step", type=int, default=None,
                        help="tokens one training step processes: the step cost then counts the optimizer's "
                             "per-parameter update too (default: FLOPs per token alone)")
    parser.add_argument("--flops-per-byte", type=float, default=None,
                        help="the device's FLOPs per byte of memory bandwidth, with --tokens-per-step "
                             "(default 250: between an H100's ~295 and an Ascend 910B's ~200)")
    run = parser.add_argument_group("run memory (one RL training replica: state, copies, one micro-batch's activations)")
    run.add_argument("--micro-batch-tokens", type=int, default=None,
                     help="tokens of one forward and backward (micro-batch x sequence, padding included): the "
                          "plan then estimates each side's run memory, activations counted without recomputation, "
                          "flash attention or tensor/sequence parallelism (an upper bound on a cluster; "
                          "default: training state alone)")
    run.add_argument("--seq-len", type=float, default=None,
                     help="sequence length, for the attention probabilities (default: --micro-batch-tokens)")
    run.add_argument("--trainer", choices=["mixed", "float32"], default="mixed",
                     help="trainer precision: bf16 weights with fp32 master and Adam (default) or float32")
    run.add_argument("--no-reference", action="store_true",
                     help="no reference policy copy (a run without a KL term)")
    run.add_argument("--engine-bytes", type=float, default=2,
                     help="bytes a parameter of the rollout engine's copy on the same devices (default 2, "
                          "bf16; 0 when the engine runs elsewhere)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args) -> int:
    from moeproxy.errors import InputError
    from moeproxy.proxy.plan import DEFAULT_FLOPS_PER_BYTE, format_plan, plan_proxy

    if args.flops_per_byte is not None and args.tokens_per_step is None:
        raise InputError("--flops-per-byte needs --tokens-per-step (the update's share depends on the step's tokens)")
    if args.seq_len is not None and args.micro_batch_tokens is None:
        raise InputError("--seq-len needs --micro-batch-tokens (it sizes the micro-batch's attention probabilities)")
    plan = plan_proxy(args.model, keep_ratio=args.keep_ratio, keep_experts=args.keep_experts,
                      device_memory_gib=args.device_memory_gib, top_k=args.top_k, ep_size=args.ep_size,
                      tokens_per_step=args.tokens_per_step,
                      flops_per_byte=args.flops_per_byte if args.flops_per_byte is not None else DEFAULT_FLOPS_PER_BYTE,
                      micro_batch_tokens=args.micro_batch_tokens, seq_len=args.seq_len, trainer=args.trainer,
                      reference=not args.no_reference, engine_bytes=args.engine_bytes)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
