"""Synthetic training logs made for the dashboard tests: a full run that overflows and its proxy.

Generic JSONL (one record per step) with loss, grad_norm, routing_entropy, per-layer routing
entropy, reward_mean; from ``fault_step`` the grad norm grows, then turns +inf and the loss NaN.
``write_demo_dir`` writes a demo directory in the layout ``moeproxy.demo`` reads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def write_run_log(path: Path, steps: int = 400, fault_step: int | None = 300, seed: int = 0,
                  layers: int = 4, restart_at: int | None = None) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []

    def record(step: int) -> dict:
        grad = float(rng.lognormal(0.0, 0.15))
        loss = 2.0 / (1 + step / 100) + float(rng.normal(0, 0.02))
        entropy = 0.92 + float(rng.normal(0, 0.005))
        if fault_step is not None and step >= fault_step:
            grad *= 10 ** min(6, (step - fault_step) / 4)
            entropy -= min(0.5, (step - fault_step) * 0.01)
            if step >= fault_step + 25:
                grad, loss = math.inf, math.nan
        rec = {"step": step, "loss": loss, "grad_norm": grad, "routing_entropy": entropy,
               "reward_mean": 0.5 + 0.3 * step / steps}
        for layer in range(layers):
            rec[f"routing_entropy/layer_{layer}"] = entropy - 0.01 * layer
        return rec

    for step in range(1, steps + 1):
        lines.append(record(step))
        if restart_at is not None and step == restart_at + 20:
            # the job crashed and resumed from the checkpoint at restart_at: steps repeat
            for again in range(restart_at + 1, steps + 1):
                lines.append(record(again))
            break
    text = "\n".join(json.dumps(r).replace("NaN", "NaN") for r in lines) + "\n"
    path.write_text(text)
    return path


def write_demo_dir(directory: Path, steps: int = 400) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_run_log(directory / "full.jsonl", steps=steps, fault_step=300, seed=1)
    write_run_log(directory / "proxy.jsonl", steps=steps, fault_step=310, seed=2)
    (directory / "manifest.json").write_text(json.dumps({"runs": [
        {"name": "demo-full", "path": "full.jsonl", "role": "full"},
        {"name": "demo-proxy", "path": "proxy.jsonl", "role": "proxy", "proxy_of": "demo-full"},
    ]}))
    return directory


def grid_row(scenario: str, kind: str, ratio: float, seed: int, full: str, proxy: str, onset_full: int | None = None,
             onset_proxy: int | None = None, r: tuple = (0.5, 0.6, 0.9), step_times: tuple = (2.0, 1.0),
             state: float | None = 0.25) -> dict:
    """One row of a fidelity grid's results.json, as ``moeproxy.repro.grid.row_of`` writes it."""
    gap = abs(onset_proxy - onset_full) / onset_full if onset_full and onset_proxy is not None else None
    return {"scenario": scenario, "kind": kind, "ratio": ratio, "seed": seed, "verdict_full": full,
            "verdict_proxy": proxy, "onset_full": onset_full, "onset_proxy": onset_proxy,
            "verdict_match": full == proxy, "onset_rel_diff": gap, "r_grad_norm": r[0], "r_loss": r[1],
            "r_reward": r[2], "step_time_full": step_times[0], "step_time_proxy": step_times[1],
            "model_state_ratio": state, "evaluation": "keep" if kind == "cluster" else None}


def grid_rows() -> list[dict]:
    """A small grid: two scenarios, two seeds; the clustering proxy at 1/4 matches every pair, random
    pruning one overflow of two and no routing collapse, the replica (ceiling) every pair."""
    rows = []
    for seed in (0, 1):
        rows += [grid_row("overflow", "cluster", 0.25, seed, "overflow", "overflow", 20, 22),
                 grid_row("routing_collapse", "cluster", 0.25, seed, "routing_collapse", "routing_collapse", 20, 20,
                          r=(0.4, 0.2, 0.8))]
        rows += [grid_row("overflow", "random", 0.25, seed, "overflow", "overflow" if seed == 0 else "divergence",
                          20, 10, step_times=(2.0, 2.2), state=1.0),
                 grid_row("routing_collapse", "random", 0.25, seed, "routing_collapse", "healthy", 20, None,
                          r=(0.1, -0.2, 0.3), state=1.0)]
        rows += [grid_row("overflow", "replica", 0.25, seed, "overflow", "overflow", 20, 20, r=(0.7, 0.8, 1.0),
                          step_times=(2.0, 2.0), state=1.0),
                 grid_row("routing_collapse", "replica", 0.25, seed, "routing_collapse", "routing_collapse", 20, 21,
                          r=(0.6, 0.5, 0.9), step_times=(2.0, 2.0), state=1.0)]
    return rows


def write_grid(path: Path, rows: list[dict] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(grid_rows() if rows is None else rows, indent=1))
    return path
