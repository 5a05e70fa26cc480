"""Does the proxy reproduce the failure, and how much cheaper is it? Prints the fidelity table.

Runs every scenario at each keep ratio for each seed (full model once per scenario and seed, one
clustering proxy per ratio and seed, reused across scenarios) plus three baselines at the baseline
ratios: ``random`` (the same number of experts kept at random, masked in the full model: routing
of a random pruning, cost of the full model), ``dense`` (a dense Qwen3 with the proxy's active
parameter count, pre-trained by the same recipe) and ``replica`` (the full model again, same
prompts, another rollout sampling seed: the noise ceiling of every correlation). Each row aggregates the seeds: verdicts that
match the full run, onset relative difference (mean, max), grad-norm / loss / reward correlation
(mean +- sd) and training-state ratio; then a back-to-back cost measurement (per-step time,
training state) of the full model and each ratio's proxy. Results: OUT/results.json, OUT/cost.json, OUT/table.md
(with the per-arm summary against the replica's ceiling, moeproxy.fidelity_grid) and the verdict-match heat
map (OUT/grid.png and grid.svg where kaleido is installed, else OUT/grid.html). The grid itself is
moeproxy.repro.grid; `moeproxy dashboard --grid OUT/results.json` and `moeproxy report --grid` show it.

    python bench/fidelity.py                       # full grid: 5 scenarios x 3 ratios x 3 seeds + baselines
    python bench/fidelity.py --ratios 0.25 --seeds 0 1 2 --steps 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from moeproxy.commands.repro import add_shape_options, shape_of
from moeproxy.fidelity_grid import grid_markdown, summarise_grid, write_grid_figure
from moeproxy.repro.grid import GridSpec, cost_table, grid_table, measure_cost, run_grid


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
    parser.add_argument("--cost-only", action="store_true",
                        help="with --cost-steps: run no pair, tabulate the pairs kept and measure the cost back to "
                             "back (a grid whose missing pairs --resume would run)")
    parser.add_argument("--table-only", action="store_true",
                        help="tabulate the pairs already in OUT (fidelity.json) without running any")
    parser.add_argument("--rediagnose", action="store_true",
                        help="with --resume or --table-only: read each kept pair's stored logs again with the "
                             "current diagnosis (after a change to its rules)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    spec = GridSpec(out=Path(args.out), scenarios=args.scenarios, ratios=args.ratios, seeds=args.seeds,
                    steps=args.steps, heal_steps=args.heal_steps, baselines=args.baselines,
                    baseline_ratios=args.baseline_ratios, baseline_seeds=args.baseline_seeds,
                    shape=shape_of(args), pretrain_steps=args.pretrain_steps, resume=args.resume,
                    table_only=args.table_only or args.cost_only, rediagnose=args.rediagnose)
    rows = run_grid(spec, progress=lambda line: print(line, flush=True))
    out = spec.out
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = grid_table(rows)
    figure_note = None
    if rows:
        cells = summarise_grid(rows)
        text += ("\n\nPer scenario and arm, seeds pooled, against the replica's ceiling (onset gap = |onset proxy - "
                 "onset full| / onset full; r mean over seeds; cost proxy/full, median over seeds):\n\n"
                 + grid_markdown(cells))
        figure_note = write_grid_figure(cells, out)[1]
    cost = None
    if args.table_only and (out / "cost.json").is_file():
        cost = json.loads((out / "cost.json").read_text())
    elif args.cost_steps > 0:
        cost = measure_cost(out, args.ratios, args.seeds[0], args.cost_steps, args.cost_rounds,
                            full=spec.full_model, progress=lambda line: print(line, flush=True))
        (out / "cost.json").write_text(json.dumps(cost, indent=2) + "\n")
    if cost is not None:
        measured = cost.get("machine") or {}  # (what the measurement ran, where cost.json says so)
        rounds = measured.get("rounds", len(cost["full"]["step_s_all"]))
        steps = measured.get("steps", args.cost_steps)
        text += ("\n\nCost, measured back to back (healthy scenario, one warm-up round, then "
                 f"{rounds} rounds of {steps} steps in alternating order, one thread):\n\n"
                 + cost_table(cost))
    (out / "table.md").write_text(text + "\n")
    print(text)
    if figure_note:
        print(f"\n{figure_note}")
    print(f"\n{len(rows)} pairs, {args.steps} steps each, seeds {args.seeds}; {time.perf_counter() - started:.0f} s; "
          f"command: python bench/fidelity.py {' '.join(sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
