"""Does the proxy reproduce the failure, and how much cheaper is it? Prints the fidelity table.

Runs every scenario at each keep ratio for each seed (full model once per scenario and seed, one
clustering proxy per ratio and seed, reused across scenarios) plus three baselines at the baseline
ratios: ``random`` (the same number of experts kept at random, masked in the full model: routing
of a random pruning, cost of the full model), ``dense`` (a dense Qwen3 with the proxy's active
parameter count, pre-trained by the same recipe) and ``replica`` (the full model again, same
prompts, another rollout sampling seed: the noise ceiling of every correlation). Each row aggregates the seeds: verdicts that
match the full run, onset relative difference (mean, max), grad-norm / loss / reward correlation
(mean +- sd) and per-step time (median of medians). Results: OUT/results.json and OUT/table.md.

    python bench/fidelity.py                       # full grid: 5 scenarios x 3 ratios x 3 seeds + baselines
    python bench/fidelity.py --ratios 0.25 --seeds 0 1 2 --steps 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def _fmt_mean_sd(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:+.2f}"
    return f"{statistics.mean(values):+.2f}±{statistics.stdev(values):.2f}"


def run_grid(args) -> list[dict]:
    import torch

    from moeproxy.repro.harness import HarnessSpec, run_pair

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    plan = []
    for seed in args.seeds:
        for ratio in args.ratios:
            for scenario in args.scenarios:
                plan.append((scenario, "cluster", ratio, seed))
        for ratio in (args.baseline_ratios if seed in (args.baseline_seeds or args.seeds) else []):
            for kind in args.baselines:
                for scenario in args.scenarios:
                    plan.append((scenario, kind, ratio, seed))
    built: dict[tuple[float, int], Path] = {}
    for n, (scenario, kind, ratio, seed) in enumerate(plan, 1):
        pair_dir = out / f"{scenario}-{kind}-r{ratio:g}-s{seed}"
        fidelity = pair_dir / "fidelity.json"
        if (args.resume or args.table_only) and fidelity.is_file():
            result = json.loads(fidelity.read_text())
        elif args.table_only:
            continue
        else:
            full_log = out / "full" / f"{scenario}-s{seed}-n{args.steps}.jsonl"
            spec = HarnessSpec(
                scenario=scenario, out=pair_dir, keep_ratio=ratio, steps=args.steps, seed=seed, db=":memory:",
                name=f"bench-{scenario}-{kind}-r{ratio:g}-s{seed}", baseline=kind, heal_steps=args.heal_steps,
                evaluate=kind == "cluster" and (ratio, seed) not in built,
                full_log=full_log if full_log.is_file() else None,
                reuse_proxy=built.get((ratio, seed)) if kind == "cluster" else None,
                dense_cache=out / "dense-cache",
            )
            started = time.perf_counter()
            result = run_pair(spec, log=lambda *_: None)
            if not full_log.is_file():
                full_log.parent.mkdir(parents=True, exist_ok=True)
                full_log.write_bytes((pair_dir / "full.jsonl").read_bytes())
            if kind == "cluster" and (ratio, seed) not in built:
                built[(ratio, seed)] = pair_dir / "proxy"
            print(f"[{n}/{len(plan)}] {scenario} {kind} r={ratio:g} seed={seed}: full {result['full']['verdict']}"
                  f"@{result['full']['onset_step']} proxy {result['proxy']['verdict']}@{result['proxy']['onset_step']}"
                  f" ({time.perf_counter() - started:.0f} s)", flush=True)
        if kind == "cluster" and (ratio, seed) not in built and (pair_dir / "proxy").is_dir():
            built[(ratio, seed)] = pair_dir / "proxy"
        cost = result.get("cost", {})
        rows.append({
            "scenario": scenario, "kind": kind, "ratio": ratio, "seed": seed,
            "verdict_full": result["full"]["verdict"], "verdict_proxy": result["proxy"]["verdict"],
            "onset_full": result["full"]["onset_step"], "onset_proxy": result["proxy"]["onset_step"],
            "verdict_match": result["verdict_match"], "onset_rel_diff": result["onset_relative_difference"],
            "r_grad_norm": result["correlations"].get("grad_norm"), "r_loss": result["correlations"].get("loss"),
            "r_reward": result["correlations"].get("reward_mean"),
            "step_time_full": cost.get("step_time_s", {}).get("full"),
            "step_time_proxy": cost.get("step_time_s", {}).get("proxy"),
            "model_state_ratio": cost.get("model_state_bytes", {}).get("ratio"),
            "evaluation": (result.get("evaluation") or {}).get("decision"),
        })
    return rows


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["scenario"], row["kind"], row["ratio"]), []).append(row)
    head = ("| scenario | proxy | ratio | seeds | verdict full | verdict proxy | match | onset full | onset proxy "
            "| onset rel. diff mean/max | r grad_norm | r loss | r reward | step s full | step s proxy | state ratio |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (scenario, kind, ratio), group in groups.items():
        def verdicts(key):
            counts: dict[str, int] = {}
            for r in group:
                counts[str(r[key])] = counts.get(str(r[key]), 0) + 1
            return ", ".join(f"{v}×{c}" if c > 1 else v for v, c in counts.items())

        def onsets(key):
            return ",".join("-" if r[key] is None else str(r[key]) for r in group)

        diffs = [r["onset_rel_diff"] for r in group if r["onset_rel_diff"] is not None]
        diff = f"{statistics.mean(diffs):.2f}/{max(diffs):.2f}" if diffs else "n/a"
        times_f = [r["step_time_full"] for r in group if r["step_time_full"]]
        times_p = [r["step_time_proxy"] for r in group if r["step_time_proxy"]]
        note = {"random": " (masked full)", "replica": " (full)"}.get(kind, "")
        step_p = f"{statistics.median(times_p):.3f}{note}" if times_p else "n/a"
        state = [r["model_state_ratio"] for r in group if r["model_state_ratio"]]
        lines.append(
            f"| {scenario} | {kind} | {ratio:g} | {len(group)} | {verdicts('verdict_full')} | {verdicts('verdict_proxy')} "
            f"| {sum(r['verdict_match'] for r in group)}/{len(group)} | {onsets('onset_full')} | {onsets('onset_proxy')} "
            f"| {diff} | {_fmt_mean_sd([r['r_grad_norm'] for r in group])} | {_fmt_mean_sd([r['r_loss'] for r in group])} "
            f"| {_fmt_mean_sd([r['r_reward'] for r in group])} "
            f"| {statistics.median(times_f):.3f} | {step_p} | {(f'{statistics.median(state):.2f}' if state and kind not in ('random', 'replica') else 'n/a')} |"
            if times_f else f"| {scenario} | {kind} | {ratio:g} | {len(group)} | incomplete |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from moeproxy.repro.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--ratios", nargs="+", type=float, default=[0.5, 0.25, 0.125])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--heal-steps", type=int, default=100)
    parser.add_argument("--baselines", nargs="*", default=["random", "dense", "replica"],
                        choices=["random", "dense", "replica"])
    parser.add_argument("--baseline-ratios", nargs="*", type=float, default=[0.25])
    parser.add_argument("--baseline-seeds", nargs="*", type=int, default=None,
                        help="seeds the baselines run at (default: every seed)")
    parser.add_argument("--out", default="bench/out/fidelity")
    parser.add_argument("--resume", action="store_true", help="reuse pairs whose fidelity.json exists")
    parser.add_argument("--table-only", action="store_true",
                        help="tabulate the pairs already in OUT (fidelity.json) without running any")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run_grid(args)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = table(rows)
    (out / "table.md").write_text(text + "\n")
    print(text)
    print(f"\n{len(rows)} pairs, {args.steps} steps each, seeds {args.seeds}; {time.perf_counter() - started:.0f} s; "
          f"command: python bench/fidelity.py {' '.join(sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
