"""Does each fault scenario read as its intended category on the FULL model alone? (calibration)

Runs every scenario given on one checkpoint (no proxy), diagnoses each log with the current rules
and prints the verdict beside the scenario's expected one, with every critical finding (category,
rule, metric, onset). Use it to set a scenario's strength or injection point for a model shape
before a fidelity grid (``bench/fidelity.py``) spends hours on pairs. ``--set key=value`` overrides
a ``GrpoConfig`` knob of every run (an experiment, not a scenario); ``--diagnose-only`` reads the
logs already in OUT again.

    python bench/scenario_check.py --model bench/out/fidelity50m/full-h256-i256-l4-e64-k4-a4 \\
        --scenarios overflow routing_collapse routing_mismatch --seeds 0 1 --steps 45 --out bench/out/check50m
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv=None) -> int:
    from moeproxy.diagnose.evaluation import diagnose_path
    from moeproxy.repro.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the full checkpoint")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=45)
    parser.add_argument("--out", required=True)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="GrpoConfig overrides")
    parser.add_argument("--diagnose-only", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="reuse a log already in OUT with every step (OUT may be a fidelity grid's OUT/full: "
                             "the grid reuses these logs as its full runs, same names)")
    args = parser.parse_args(argv)
    extra = {k: _value(v) for k, v in (item.split("=", 1) for item in args.set)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        for name in args.scenarios:
            scenario = SCENARIOS[name]
            log = out / f"{name}-s{seed}-n{args.steps}.jsonl"
            seconds = None
            complete = log.is_file() and len(log.read_text().splitlines()) >= args.steps
            if not args.diagnose_only and not (args.resume and complete):
                import torch

                from moeproxy.repro.grpo import run_grpo
                from moeproxy.repro.tiny_moe import TinyMoeShape, load_tiny_moe

                torch.set_num_threads(1)
                torch.manual_seed(seed)
                model, tokenizer = load_tiny_moe(args.model)
                config = scenario.config(args.steps, seed, shape_key=TinyMoeShape.from_config(model.config).key,
                                         **extra)
                started = time.perf_counter()
                run_grpo(model, tokenizer, config, log)
                seconds = round(time.perf_counter() - started, 1)
            d = diagnose_path(log)  # as `moeproxy diagnose LOG` reads it
            critical = sorted(((f["onset_step"] if f.get("onset_step") is not None else -1), f["category"],
                               f.get("rule"), f.get("metric"))
                              for f in d.get("findings", []) if f.get("severity") == "critical")
            fault = scenario.config(args.steps, seed).fault_step
            row = {"scenario": name, "seed": seed, "fault_step": fault, "expected": scenario.expected_verdict,
                   "verdict": d.get("verdict"), "onset": d.get("onset_step"),
                   "ok": d.get("verdict") == scenario.expected_verdict, "seconds": seconds,
                   "critical": [list(c) for c in critical], "overrides": extra}
            rows.append(row)
            print(f"{name} seed {seed}: fault@{fault} -> {row['verdict']}@{row['onset']} "
                  f"({'as intended' if row['ok'] else 'expected ' + row['expected']})"
                  + (f", {seconds} s" if seconds is not None else ""), flush=True)
            for onset, category, rule, metric in critical:
                print(f"    critical {category}/{rule} @{onset} on {metric}", flush=True)
    (out / "check.json").write_text(json.dumps(rows, indent=2) + "\n")  # the last invocation's rows
    print(f"{sum(r['ok'] for r in rows)}/{len(rows)} runs read as their scenario's category")
    return 0


if __name__ == "__main__":
    sys.exit(main())
