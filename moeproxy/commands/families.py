"""moeproxy families: list the MoE model families plan and build support (``proxy.arch.FAMILIES``)."""

from __future__ import annotations

import json

HELP = "list the MoE model families that plan and build support (by config.json model_type)"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print each family's model_type, routing, expert-count fields, layout and notes as JSON")


def run(args) -> int:
    from moeproxy.proxy.arch import describe_families

    rows = describe_families()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["model_type"]) for r in rows)
    for r in rows:
        notes = f"; {r['notes']}" if r["notes"] else ""
        print(f"{r['model_type']:<{width}}  {r['routing']}, experts in {'/'.join(r['expert_count_keys'])}, "
              f"{r['layout'].replace('_', '-')} layout{notes}")
    return 0
