"""``moeproxy evaluate FULL PROXY --tasks FILE.jsonl``: keep or reject a proxy before any RL."""

from __future__ import annotations

import json

HELP = "Check a proxy's task capability before RL: exact match, perplexity, memory, tokens/s vs the full model."


def add_arguments(parser) -> None:
    parser.add_argument("full", metavar="FULL", help="full checkpoint directory")
    parser.add_argument("proxy", metavar="PROXY", help="proxy checkpoint directory")
    parser.add_argument("--tasks", required=True, help='JSONL task file: {"prompt": ..., "answer": ...} per line')
    parser.add_argument("--max-quality-drop", type=float, default=0.10,
                        help="largest allowed exact-match drop, full minus proxy (default 0.10)")
    parser.add_argument("--max-perplexity-ratio", type=float, default=1.5,
                        help="largest allowed proxy/full held-out perplexity ratio (default 1.5)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    import torch

    from moeproxy.repro.evaluation import EvalLimits, evaluate_pair, format_evaluation

    torch.set_num_threads(1)
    limits = EvalLimits(max_quality_drop=args.max_quality_drop, max_perplexity_ratio=args.max_perplexity_ratio)
    result = evaluate_pair(args.full, args.proxy, args.tasks, limits)
    print(json.dumps(result, indent=2) if args.json else format_evaluation(result))
    return 0 if result["decision"] == "keep" else 1
