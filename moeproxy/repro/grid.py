"""The fidelity grid: does the proxy reproduce the failure, and how much cheaper is it?

Every scenario at each keep ratio for each seed (the full model once per scenario and seed, one
clustering proxy per ratio and seed, reused across scenarios), plus baselines at the baseline
ratios: ``random`` (the same number of experts kept at random, masked in the full model: routing
of a random pruning, cost of the full model), ``dense`` (a dense Qwen3 with the proxy's active
parameter count, pre-trained by the same recipe) and ``replica`` (the full model again, same prompts,
another rollout sampling seed: the noise ceiling of every correlation). Each pair's result lands in
``OUT/<scenario>-<kind>-r<ratio>-s<seed>/fidelity.json``, so a grid stopped half-way resumes where it
stopped. ``grid_table`` aggregates the seeds; ``measure_cost`` times the full model and each ratio's
proxy back to back and sets the planner's prediction beside what it measured.

``bench/fidelity.py`` is the command line over this module; ``make test`` runs a small grid (one
scenario, one seed, a few steps on a tiny shape: ``tests/repro/test_grid.py``).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class GridSpec:
    out: Path
    scenarios: list[str]
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.25, 0.125])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 30
    heal_steps: int = 100
    baselines: list[str] = field(default_factory=lambda: ["random", "dense", "replica"])
    baseline_ratios: list[float] = field(default_factory=lambda: [0.25])
    baseline_seeds: list[int] | None = None  # default: every seed
    shape: object | None = None              # a TinyMoeShape, or None for the bundled model
    pretrain_steps: int = 1500
    dense_pretrain_steps: int = 500
    resume: bool = False
    table_only: bool = False
    rediagnose: bool = False  # a kept pair's stored logs read again with the current diagnosis

    def __post_init__(self):
        self.out = Path(self.out)

    def plan(self) -> list[tuple[str, str, float, int]]:
        """(scenario, kind, ratio, seed) of every pair, in the order they run."""
        plan = []
        for seed in self.seeds:
            for ratio in self.ratios:
                plan += [(scenario, "cluster", ratio, seed) for scenario in self.scenarios]
            for ratio in (self.baseline_ratios if seed in (self.baseline_seeds or self.seeds) else []):
                for kind in self.baselines:
                    plan += [(scenario, kind, ratio, seed) for scenario in self.scenarios]
        return plan

    @property
    def full_model(self) -> Path | None:
        """The shaped full model's directory (pretrained once by the first pair), or None."""
        return self.out / f"full-{self.shape.key}" if self.shape is not None else None


def pair_dir(spec: GridSpec, scenario: str, kind: str, ratio: float, seed: int) -> Path:
    return spec.out / f"{scenario}-{kind}-r{ratio:g}-s{seed}"


def run_grid(spec: GridSpec, progress: Callable[[str], None] = print) -> list[dict]:
    """Run (or, with ``resume``, reuse) every pair of the plan; one row per pair."""
    import torch

    from moeproxy.repro.harness import HarnessSpec, run_pair

    torch.set_num_threads(1)
    spec.out.mkdir(parents=True, exist_ok=True)
    rows = []
    plan = spec.plan()
    built: dict[tuple[float, int], Path] = {}
    for n, (scenario, kind, ratio, seed) in enumerate(plan, 1):
        where = pair_dir(spec, scenario, kind, ratio, seed)
        fidelity = where / "fidelity.json"
        if (spec.resume or spec.table_only) and fidelity.is_file():
            result = json.loads(fidelity.read_text())
            if spec.rediagnose:
                result = rediagnose(where, result)
                fidelity.write_text(json.dumps(result, indent=1) + "\n")
            progress(f"[{n}/{len(plan)}] {scenario} {kind} r={ratio:g} seed={seed}: kept from {fidelity}"
                     + (f", read again: full {result['full']['verdict']}@{result['full']['onset_step']} proxy "
                        f"{result['proxy']['verdict']}@{result['proxy']['onset_step']}" if spec.rediagnose else ""))
        elif spec.table_only:
            continue
        else:
            full_log = spec.out / "full" / f"{scenario}-s{seed}-n{spec.steps}.jsonl"
            pair = HarnessSpec(
                scenario=scenario, out=where, keep_ratio=ratio, steps=spec.steps, seed=seed, db=":memory:",
                name=f"grid-{scenario}-{kind}-r{ratio:g}-s{seed}", baseline=kind, heal_steps=spec.heal_steps,
                evaluate=kind == "cluster" and (ratio, seed) not in built,
                full_log=full_log if full_log.is_file() else None,
                reuse_proxy=built.get((ratio, seed)) if kind == "cluster" else None,
                dense_cache=spec.out / "dense-cache", dense_pretrain_steps=spec.dense_pretrain_steps,
                shape=spec.shape, pretrain_steps=spec.pretrain_steps, shape_cache=spec.full_model,
            )
            started = time.perf_counter()
            result = run_pair(pair, log=lambda *_: None)
            if not full_log.is_file():
                full_log.parent.mkdir(parents=True, exist_ok=True)
                full_log.write_bytes((where / "full.jsonl").read_bytes())
            progress(f"[{n}/{len(plan)}] {scenario} {kind} r={ratio:g} seed={seed}: full "
                     f"{result['full']['verdict']}@{result['full']['onset_step']} proxy "
                     f"{result['proxy']['verdict']}@{result['proxy']['onset_step']} "
                     f"({time.perf_counter() - started:.0f} s)")
        if kind == "cluster" and (ratio, seed) not in built and (where / "proxy").is_dir():
            built[(ratio, seed)] = where / "proxy"
        rows.append(row_of(scenario, kind, ratio, seed, result))
    return rows


def rediagnose(where: Path, result: dict) -> dict:
    """A kept pair's result with both sides diagnosed again from the logs stored beside it
    (``full.jsonl``, ``proxy.jsonl``), after a change to the diagnosis: verdicts, onsets and their
    match are the current rules'; curves and costs are the run's own and stay."""
    from moeproxy.diagnose import diagnose_frame
    from moeproxy.diagnose.record import load_target
    from moeproxy.fidelity import onset_relative_difference

    result = dict(result)
    sides = {}
    for side in ("full", "proxy"):
        log = where / f"{side}.jsonl"
        if not log.is_file():
            raise FileNotFoundError(f"{log}: the pair's stored log is missing; run the pair again")
        diagnosis = diagnose_frame(load_target(str(log), None)[1])
        sides[side] = dict(result.get(side) or {}, verdict=diagnosis.get("verdict"),
                           onset_step=diagnosis.get("onset_step"),
                           categories=sorted({f["category"] for f in diagnosis.get("findings", [])
                                              if f.get("severity") == "critical"}))
    result.update(sides)
    result["verdict_match"] = sides["full"]["verdict"] == sides["proxy"]["verdict"]
    result["onset_relative_difference"] = onset_relative_difference(sides["full"]["onset_step"],
                                                                    sides["proxy"]["onset_step"])
    return result


def row_of(scenario: str, kind: str, ratio: float, seed: int, result: dict) -> dict:
    """One pair's row of ``results.json``."""
    cost = result.get("cost", {})
    return {
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
    }


def _mean_sd(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:+.2f}"
    return f"{statistics.mean(values):+.2f}±{statistics.stdev(values):.2f}"


def grid_table(rows: list[dict]) -> str:
    """The Markdown fidelity table: one line per (scenario, proxy kind, ratio), seeds aggregated."""
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
            f"| {diff} | {_mean_sd([r['r_grad_norm'] for r in group])} | {_mean_sd([r['r_loss'] for r in group])} "
            f"| {_mean_sd([r['r_reward'] for r in group])} "
            f"| {(f'{statistics.median(state):.2f}' if state and kind not in ('random', 'replica') else 'n/a')} |")
    return "\n".join(lines)


def measure_cost(out: Path, ratios: list[float], seed: int, steps: int, rounds: int, full: Path | None = None,
                 progress: Callable[[str], None] = print) -> dict:
    """Per-step time and training-state memory of the full model and each ratio's clustering proxy,
    measured here back to back (healthy scenario; one warm-up round, then ``rounds`` rounds of
    ``steps`` GRPO steps in alternating order), so that both sides of a ratio see the same machine
    load. Memory is the training state (parameters, gradients, Adam moments): resident-size
    figures of a model this small are dominated by allocator noise. Proxies are the healed ones
    the grid built (OUT/healthy-cluster-r<ratio>-s<seed>/proxy)."""
    import tempfile

    import torch

    from moeproxy.proxy.checkpoint import load_config
    from moeproxy.repro.grpo import DTYPES, run_grpo
    from moeproxy.repro.scenarios import get_scenario
    from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT, load_tiny_moe

    torch.set_num_threads(1)
    out = Path(out)
    sides = {"full": Path(full) if full is not None else Path(DEFAULT_CHECKPOINT)}
    for ratio in ratios:
        proxy = out / f"healthy-cluster-r{ratio:g}-s{seed}" / "proxy"
        if proxy.is_dir():
            sides[f"{ratio:g}"] = proxy
    times: dict[str, list[float]] = {k: [] for k in sides}
    memory: dict[str, list[float]] = {k: [] for k in sides}
    tokens: list[int] = []
    tensor_tokens: list[int] = []
    state: dict[str, int] = {}
    params: dict[str, tuple[int, int]] = {}
    balance = machine_balance(load_config(sides["full"]), progress)
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
                tokens.append(summary["tokens_per_step_median"])
                tensor_tokens.append(summary["tensor_tokens_per_step_median"])
                if summary.get("run_memory_peak_gb") is not None:
                    memory[name].append(summary["run_memory_peak_gb"])
                progress(f"  cost round {r}/{rounds} {name}: {summary['step_time_median_s']:.3f} s/step")
    step_tokens = int(statistics.median(tokens))
    held = int(statistics.median(tensor_tokens))
    # the run's memory as the planner models it: a float32 trainer, a reference copy when the KL term
    # needs one, the engine's copy at its precision, one mini-batch's activations
    run = {"micro_batch_tokens": held // config.mini_batches,
           "seq_len": held / (config.prompts_per_step * config.group_size),
           "trainer": "float32", "reference": config.kl_coef > 0,
           "engine_bytes": DTYPES[config.rollout_dtype].itemsize}
    planned = planned_costs(sides, step_tokens, balance["flops_per_byte"], run)
    out = {name: {"step_s": statistics.median(times[name]), "step_s_all": times[name],
                  "state_mib": state[name] / 2**20, "parameters": params[name][0],
                  "active_parameters": params[name][1],
                  "run_memory_gb": statistics.median(memory[name]) if memory[name] else None,
                  "planned": planned.get(name)} for name in sides}
    out["machine"] = {**balance, "tokens_per_step": step_tokens, "tensor_tokens_per_step": held,
                      "run": run, "steps": steps, "rounds": rounds}
    return out


def machine_balance(full_config: dict, progress: Callable[[str], None] = print, seconds: float = 2.0) -> dict:
    """This machine's FLOPs per byte as the planner counts them (``plan.step_cost``), measured on one
    thread apart from any model: the FLOP rate of a forward and backward through one expert's matmuls
    at the full model's shapes (the rows an expert gets: a step's tokens x top-k / experts, about 64),
    and the time per parameter of the update (an Adam step, zeroing the gradient, copying the weights
    as the rollout engine's sync does) on a flat parameter of a few million values. Their ratio over
    the planner's ``UPDATE_BYTES_PER_PARAM`` is the balance the prediction uses: nothing of the
    grid's runs goes into it."""
    import torch

    from moeproxy.proxy.plan import UPDATE_BYTES_PER_PARAM

    torch.set_num_threads(1)
    hidden = int(full_config.get("hidden_size", 256))
    inter = int(full_config.get("moe_intermediate_size") or full_config.get("intermediate_size") or hidden)
    rows = 64
    x = torch.randn(rows, hidden, requires_grad=True)
    w1 = torch.randn(hidden, inter, requires_grad=True)
    w2 = torch.randn(inter, hidden, requires_grad=True)

    def matmuls() -> None:
        y = (x @ w1).relu() @ w2
        y.sum().backward()

    def timed(fn) -> tuple[float, int]:
        """Seconds and calls of ``fn`` repeated for ``seconds`` (after one warm-up call)."""
        fn()
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            fn()
            count += 1
        return time.perf_counter() - started, count

    elapsed, count = timed(matmuls)
    # two matmuls a call, 2 FLOPs a multiply-add forward and 4 backward
    flops_per_s = count * 12 * rows * hidden * inter / elapsed
    p = torch.nn.Parameter(torch.randn(4_000_000))
    p.grad = torch.randn_like(p)
    opt = torch.optim.Adam([p], lr=1e-4)

    def update() -> None:
        opt.step()
        p.grad.zero_()
        p.grad.add_(1e-3)
        p.detach().clone()

    elapsed, count = timed(update)
    update_s_per_param = elapsed / count / p.numel()
    balance = update_s_per_param * flops_per_s / UPDATE_BYTES_PER_PARAM
    progress(f"  machine: {flops_per_s / 1e9:.1f} GFLOP/s (expert matmuls {rows}x{hidden}x{inter}), update "
             f"{update_s_per_param * 1e9:.2f} ns/parameter: {balance:.1f} FLOPs per byte")
    return {"flops_per_s": flops_per_s, "update_s_per_param": update_s_per_param, "flops_per_byte": balance}


def planned_costs(sides: dict[str, Path], tokens_per_step: int | None = None,
                  flops_per_byte: float | None = None, run: dict | None = None) -> dict[str, dict]:
    """What ``moeproxy plan`` predicts for each side from the full model's config alone (parameters,
    active parameters, training state at 16 bytes per parameter, and, given the step's tokens and the
    machine's FLOPs per byte, the step cost ratio full / side; given the run's micro-batch and copies
    (``plan_proxy``'s keywords), its memory and memory ratio side / full), beside what was measured."""
    from moeproxy.proxy.checkpoint import load_config
    from moeproxy.proxy.plan import plan_proxy, step_cost

    full = load_config(sides["full"])
    run = run or {}
    full_side = plan_proxy(full, keep_ratio=1.0, **run)["full"]
    out = {}
    for name, path in sides.items():
        if name == "full":
            side = full_side
        else:
            proxy = load_config(path)
            mode = "keep" if proxy.get("num_experts_per_tok") == full.get("num_experts_per_tok") else "scale"
            side = plan_proxy(full, keep_ratio=float(name), top_k=mode, **run)["proxy"]
        out[name] = {"parameters": side["params_total"], "active_parameters": side["params_active"],
                     "state_mib": side["train_state_bytes"] / 2**20}
        if "run_memory_bytes" in side:
            out[name]["run_memory_gb"] = side["run_memory_bytes"] / 2**30
            out[name]["memory_ratio"] = side["run_memory_bytes"] / full_side["run_memory_bytes"]
        if tokens_per_step is not None and flops_per_byte is not None:
            # side / full, as the measured step ratio is read (proxy s / full s)
            out[name]["step_ratio"] = (step_cost(side, tokens_per_step, flops_per_byte)
                                       / step_cost(full_side, tokens_per_step, flops_per_byte))
    return out


def cost_table(cost: dict) -> str:
    full = cost["full"]

    def planned(c: dict, key: str, fmt: str) -> str:
        plan = c.get("planned") or {}
        return format(plan[key], fmt) if key in plan else "-"

    def row(label: str, c: dict) -> str:
        memory = c.get("run_memory_gb")
        return (f"| {label} | {c['step_s']:.3f} | {' '.join(f'{t:.3f}' for t in c['step_s_all'])} "
                f"| {c['step_s'] / full['step_s']:.2f} / {planned(c, 'step_ratio', '.2f')} "
                f"| {'-' if memory is None else format(memory, '.2f')} / {planned(c, 'run_memory_gb', '.2f')} "
                f"| {'-' if memory is None or not full.get('run_memory_gb') else format(memory / full['run_memory_gb'], '.2f')}"
                f" / {planned(c, 'memory_ratio', '.2f')} "
                f"| {c.get('parameters', 0):,} / {planned(c, 'parameters', ',')} "
                f"| {c.get('active_parameters', 0):,} / {planned(c, 'active_parameters', ',')} "
                f"| {c['state_mib']:.1f} / {planned(c, 'state_mib', '.1f')} | {c['state_mib'] / full['state_mib']:.2f} |")

    lines = ["| model | step s (median of rounds) | step s per round | step ratio proxy/full measured / planned "
             "| run memory GiB (peak) measured / planned | memory ratio proxy/full measured / planned "
             "| parameters measured / planned | active measured / planned "
             "| training state MiB measured / planned | state ratio proxy/full |",
             "|---|---|---|---|---|---|---|---|---|---|",
             row("full", full)]
    lines += [row(f"cluster proxy, ratio {name}", c) for name, c in cost.items() if name not in ("full", "machine")]
    machine = cost.get("machine")
    if machine:
        lines.append(f"\nPlanned step ratio: `moeproxy plan --tokens-per-step {machine['tokens_per_step']} "
                     f"--flops-per-byte {machine['flops_per_byte']:.1f}`, the machine's balance measured apart from "
                     f"the runs ({machine['flops_per_s'] / 1e9:.1f} GFLOP/s on an expert's matmuls, "
                     f"{machine['update_s_per_param'] * 1e9:.2f} ns a parameter for the update).")
        run = machine.get("run")
        if run:
            lines.append(f"Planned run memory: `moeproxy plan --micro-batch-tokens {run['micro_batch_tokens']} --seq-len "
                         f"{run['seq_len']:.1f} --trainer {run['trainer']}{'' if run['reference'] else ' --no-reference'} "
                         f"--engine-bytes {run['engine_bytes']:g}` (the mini-batch as the step's tensors hold it, "
                         f"padding included; {machine['tensor_tokens_per_step']:,} tokens a step).")
    return "\n".join(lines)
