"""`moeproxy plan`: accelerators, parameters and step cost of a model and its proxy, from config alone."""

from __future__ import annotations

import json

HELP = "Plan a proxy from a config: parameters, weight bytes, accelerators to train, step cost (full vs proxy)."


def add_arguments(parser) -> None:
    parser.add_argument("model", help="checkpoint directory or config.json")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--keep-ratio", type=float, help="fraction of routed experts kept per MoE layer")
    group.add_argument("--keep-experts", type=int, help="routed experts kept per MoE layer")
    parser.add_argument("--device-memory-gib", type=float, default=64, help="memory per accelerator (default 64, Ascend 910B)")
    parser.add_argument("--top-k", choices=["keep", "scale"], default="keep",
                        help="keep num_experts_per_tok (default) or scale it with the kept fraction")
    parser.add_argument("--ep-size", type=int, default=1, help="expert-parallel size the kept count must divide by")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args) -> int:
    from moeproxy.proxy.plan import format_plan, plan_proxy

    plan = plan_proxy(args.model, keep_ratio=args.keep_ratio, keep_experts=args.keep_experts,
                      device_memory_gib=args.device_memory_gib, top_k=args.top_k, ep_size=args.ep_size)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
