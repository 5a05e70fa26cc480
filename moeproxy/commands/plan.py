"""`moeproxy plan`: accelerators, parameters and step cost of a model and its proxy, from config alone."""

from __future__ import annotations

import json

from moeproxy.commands.common import add_keep_options

HELP = "Plan a proxy from a config: parameters, weight bytes, accelerators to train, step cost (full vs proxy)."


def add_arguments(parser) -> None:
    parser.add_argument("model", help="checkpoint directory or config.json")
    add_keep_options(parser, required=False)
    parser.add_argument("--device-memory-gib", type=float, default=64, help="memory per accelerator (default 64, Ascend 910B)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args) -> int:
    from moeproxy.proxy.plan import format_plan, plan_proxy

    plan = plan_proxy(args.model, keep_ratio=args.keep_ratio, keep_experts=args.keep_experts,
                      device_memory_gib=args.device_memory_gib, top_k=args.top_k, ep_size=args.ep_size)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
