"""Does the proxy reproduce the failure, and how much cheaper is it? Prints the fidelity table.

Runs every scenario at each keep ratio for each seed (full model once per scenario and seed, one
clustering proxy per ratio and seed, reused across scenarios) plus three baselines at the baseline
ratios: ``random`` (the same number of experts kept at random, masked in the full model: routing
of a random pruning, cost of the full model), ``dense`` (a dense Qwen3 with the proxy's active
parameter count, pre-trained by the same recipe) and ``replica`` (the full model again, same
prompts, another rollout sampling seed: the noise ceiling of every correlation). Each row aggregates the seeds: verdicts that
match the full run, onset relative difference (mean, max), grad-norm / loss / reward correlation
(mean +- sd) and training-state ratio; then a back-to-back cost measurement (per-step time,
training state) of the full model and each ratio's proxy. Results: OUT/results.json, OUT/cost.json, OUT/table.md.

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

from moeproxy.commands.repro import add_shape_options, shape_of


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
    shape = shape_of(args)
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
                dense_cache=out / "dense-cache", shape=shape, pretrain_steps=args.pretrain_steps,
                shape_cache=out / f"full-{shape.key}" if shape is not None else None,
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
            "model_state_ratio": (cost.get("model_state_bytes", {}).get("ratio")
                                  or cost.get("model_state_gb", {}).get("ratio")),
            "evaluation": (result.get("evaluation") or {}).get("decision"),
        })
    return rows


def measure_cost(out: Path, ratios: list[float], seed: int, steps: int, rounds: int, full: Path | None = None) -> dict:
    """Per-step time and training-state memory of the full model and each ratio's clustering proxy,
    measured here back to back (healthy scenario; one warm-up round, then ``rounds`` rounds of
    ``steps`` GRPO steps in alternating order), so that both sides of a ratio see the same machine
    load. Memory is the training state (parameters, gradients, Adam moments): resident-size
    figures of a model this small are dominated by allocator noise. Proxies are the healed ones
    the grid built (OUT/healthy-cluster-r<ratio>-s<seed>/proxy)."""
    import tempfile

    import torch

    from moeproxy.repro.grpo import run_grpo
    from moeproxy.repro.scenarios import get_scenario
    from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT, load_tiny_moe

    torch.set_num_threads(1)
    sides = {"full": Path(full) if full is not None else Path(DEFAULT_CHECKPOINT)}
    for ratio in ratios:
        proxy = out / f"healthy-cluster-r{ratio:g}-s{seed}" / "proxy"
        if proxy.is_dir():
            sides[f"{ratio:g}"] = proxy
    times: dict[str, list[float]] = {k: [] for k in sides}
    state: dict[str, int] = {}
    params: dict[str, tuple[int, int]] = {}
    config = get_scenario("healthy").config(steps, seed)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds + 1):
            for name, path in (list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]):
                model, tok = load_tiny_moe(path)
                summary = run_grpo(model, tok, config, Path(tmp) / f"{name}-{r}.jsonl")
                state[name] = summary["model_state_bytes"]
                params[name] = (summary["parameters"], summary["active_parameters"])
                del model
                if r == 0:
                    continue  # warm-up: first-time allocations and kernel set-up
                times[name].append(summary["step_time_median_s"])
                print(f"  cost round {r}/{rounds} {name}: {summary['step_time_median_s']:.3f} s/step", flush=True)
    planned = _planned(sides)
    return {name: {"step_s": statistics.median(times[name]), "step_s_all": times[name],
                   "state_mib": state[name] / 2**20, "parameters": params[name][0],
                   "active_parameters": params[name][1], "planned": planned.get(name)} for name in sides}


def _planned(sides: dict[str, Path]) -> dict[str, dict]:
    """What ``moeproxy plan`` predicts for each side from the full model's config alone (parameters,
    active parameters, training state at 16 bytes per parameter), beside what was measured."""
    from moeproxy.proxy.checkpoint import load_config
    from moeproxy.proxy.plan import plan_proxy

    full = load_config(sides["full"])
    out = {}
    for name, path in sides.items():
        if name == "full":
            side = plan_proxy(full, keep_ratio=1.0)["full"]
        else:
            proxy = load_config(path)
            mode = "keep" if proxy.get("num_experts_per_tok") == full.get("num_experts_per_tok") else "scale"
            side = plan_proxy(full, keep_ratio=float(name), top_k=mode)["proxy"]
        out[name] = {"parameters": side["params_total"], "active_parameters": side["params_active"],
                     "state_mib": side["train_state_bytes"] / 2**20}
    return out


def cost_table(cost: dict) -> str:
    full = cost["full"]

    def planned(c: dict, key: str, fmt: str) -> str:
        plan = c.get("planned") or {}
        return format(plan[key], fmt) if key in plan else "-"

    def row(label: str, c: dict) -> str:
        return (f"| {label} | {c['step_s']:.3f} | {' '.join(f'{t:.3f}' for t in c['step_s_all'])} "
                f"| {c['step_s'] / full['step_s']:.2f} | {c.get('parameters', 0):,} / {planned(c, 'parameters', ',')} "
                f"| {c.get('active_parameters', 0):,} / {planned(c, 'active_parameters', ',')} "
                f"| {c['state_mib']:.1f} / {planned(c, 'state_mib', '.1f')} | {c['state_mib'] / full['state_mib']:.2f} |")

    lines = ["| model | step s (median of rounds) | step s per round | step ratio proxy/full "
             "| parameters measured / planned | active measured / planned | training state MiB measured / planned "
             "| state ratio proxy/full |",
             "|---|---|---|---|---|---|---|---|",
             row("full", full)]
    lines += [row(f"cluster proxy, ratio {name}", c) for name, c in cost.items() if name != "full"]
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["scenario"], row["kind"], row["ratio"]), []).append(row)
    head = ("| scenario | proxy | ratio | seeds | verdict full | verdict proxy | match | onset full | onset proxy "
            "| onset rel. diff mean/max | r grad_norm | r loss | r reward | state ratio |")
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
        state = [r["model_state_ratio"] for r in group if r["model_state_ratio"]]
        lines.append(
            f"| {scenario} | {kind} | {ratio:g} | {len(group)} | {verdicts('verdict_full')} | {verdicts('verdict_proxy')} "
            f"| {sum(r['verdict_match'] for r in group)}/{len(group)} | {onsets('onset_full')} | {onsets('onset_proxy')} "
            f"| {diff} | {_fmt_mean_sd([r['r_grad_norm'] for r in group])} | {_fmt_mean_sd([r['r_loss'] for r in group])} "
            f"| {_fmt_mean_sd([r['r_reward'] for r in group])} "
            f"| {(f'{statistics.median(state):.2f}' if state and kind not in ('random', 'replica') else 'n/a')} |")
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
    parser.add_argument("--cost-steps", type=int, default=10,
                        help="GRPO steps per side in the back-to-back cost measurement (0: skip it)")
    parser.add_argument("--cost-rounds", type=int, default=5)
    parser.add_argument("--pretrain-steps", type=int, default=1500,
                        help="with shape options: supervised steps of the full model pretrained for them")
    add_shape_options(parser)
    parser.add_argument("--table-only", action="store_true",
                        help="tabulate the pairs already in OUT (fidelity.json) without running any")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run_grid(args)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = table(rows)
    cost = None
    if args.table_only and (out / "cost.json").is_file():
        cost = json.loads((out / "cost.json").read_text())
    elif args.cost_steps > 0:
        shape = shape_of(args)
        cost = measure_cost(out, args.ratios, args.seeds[0], args.cost_steps, args.cost_rounds,
                            full=out / f"full-{shape.key}" if shape is not None else None)
        (out / "cost.json").write_text(json.dumps(cost, indent=2) + "\n")
    if cost is not None:
        text += ("\n\nCost, measured back to back (healthy scenario, one warm-up round, then "
                 f"{args.cost_rounds} rounds of {args.cost_steps} steps in alternating order, one thread):\n\n"
                 + cost_table(cost))
    (out / "table.md").write_text(text + "\n")
    print(text)
    print(f"\n{len(rows)} pairs, {args.steps} steps each, seeds {args.seeds}; {time.perf_counter() - started:.0f} s; "
          f"command: python bench/fidelity.py {' '.join(sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
