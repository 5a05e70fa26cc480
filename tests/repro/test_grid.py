"""A small version of the fidelity grid in every `make test` (issue: fidelity where experts dominate
the cost): one scenario, one seed, a few GRPO steps on a tiny shaped model, the clustering proxy
beside the random-pruning, dense and replica baselines (the cost comparison on a tiny shaped
model pretrained for two steps); results resumable from their
``fidelity.json``; the table and the cost comparison (measured beside the planner's prediction)."""

from __future__ import annotations

import json

from moeproxy.repro.grid import GridSpec, cost_table, grid_table, measure_cost, run_grid
from moeproxy.repro.tiny_moe import TinyMoeShape

SHAPE = TinyMoeShape.from_options(hidden_size=32, moe_intermediate_size=16, layers=2, experts=8, top_k=2, heads=2)


def test_a_small_grid_runs_resumes_and_tabulates(tmp_path):
    # the bundled (pretrained) tiny MoE: a shape pretrained for a few steps only never learns to
    # answer, and its forced overflow does not show in so short a run
    spec = GridSpec(out=tmp_path / "grid", scenarios=["overflow"], ratios=[0.5], seeds=[0], steps=10,
                    heal_steps=2, baselines=["random", "dense", "replica"], baseline_ratios=[0.5],
                    dense_pretrain_steps=2)
    lines = []
    rows = run_grid(spec, progress=lines.append)
    assert [(r["scenario"], r["kind"], r["ratio"]) for r in rows] == [
        ("overflow", kind, 0.5) for kind in ("cluster", "random", "dense", "replica")]
    assert len(lines) == 4 and lines[0].startswith("[1/4] overflow cluster")
    for row in rows:  # the forced overflow is found in the full run of every pair
        assert row["verdict_full"] == "overflow", row
        assert isinstance(row["verdict_match"], bool)
    assert rows[0]["verdict_proxy"] == "overflow" and rows[0]["verdict_match"]  # the clustering proxy reproduces it
    assert json.loads((tmp_path / "grid" / "overflow-dense-r0.5-s0" / "fidelity.json").read_text())
    # a resumed grid runs nothing again and gives the same rows
    again = []
    spec.resume = True
    assert run_grid(spec, progress=again.append) == rows
    assert all("kept from" in line for line in again)
    table = grid_table(rows).splitlines()
    assert len(table) == 2 + 4 and table[2].startswith("| overflow | cluster | 0.5 | 1 | overflow |")


def test_the_cost_comparison_sets_the_planner_beside_what_it_measured(tmp_path):
    spec = GridSpec(out=tmp_path / "grid", scenarios=["healthy"], ratios=[0.5], seeds=[0], steps=5,
                    heal_steps=0, baselines=[], shape=SHAPE, pretrain_steps=2)
    run_grid(spec, progress=lambda _: None)
    cost = measure_cost(spec.out, [0.5], 0, steps=5, rounds=1, full=spec.full_model, progress=lambda _: None)
    assert set(cost) == {"full", "0.5", "machine"}
    full, proxy = cost["full"], cost["0.5"]
    # the planner's step ratio from the step's tokens and this machine's balance, measured apart from the runs
    machine = cost["machine"]
    assert machine["tokens_per_step"] > 0 and machine["flops_per_byte"] > 0 and machine["flops_per_s"] > 0
    assert full["planned"]["step_ratio"] == 1.0 and 0 < proxy["planned"]["step_ratio"] < 1.0
    assert full["run_memory_gb"] > 0 and proxy["run_memory_gb"] > 0
    # parameters are counted exactly by the planner from the config alone
    assert full["planned"]["parameters"] == full["parameters"]
    assert proxy["planned"]["parameters"] == proxy["parameters"] < full["parameters"]
    assert proxy["state_mib"] < full["state_mib"] and full["step_s"] > 0
    table = cost_table(cost)
    assert "| full |" in table and "| cluster proxy, ratio 0.5 |" in table
    assert f"--tokens-per-step {machine['tokens_per_step']}" in table
    # the planner's run memory for the same run (float32 trainer, a reference for the KL term, the
    # bf16 engine, one mini-batch as its tensors hold it): below the full model's for the proxy
    assert machine["run"]["trainer"] == "float32" and machine["tensor_tokens_per_step"] >= machine["tokens_per_step"]
    assert 0 < proxy["planned"]["memory_ratio"] < 1.0 == full["planned"]["memory_ratio"]
    assert proxy["planned"]["run_memory_gb"] < full["planned"]["run_memory_gb"]
    assert f"--micro-batch-tokens {machine['run']['micro_batch_tokens']}" in table
