import json

import pytest

from moeproxy.errors import InputError
from moeproxy.repro.grpo import run_grpo
from moeproxy.repro.scenarios import SCENARIOS, get_scenario
from moeproxy.repro.tiny_moe import load_tiny_moe
from moeproxy.repro.verl_log import read_verl_jsonl


def test_every_named_scenario_builds_a_config():
    assert set(SCENARIOS) == {"healthy", "overflow", "divergence", "precision_mismatch", "routing_collapse",
                              "routing_mismatch"}
    for name, scenario in SCENARIOS.items():
        config = scenario.config(30, 0)
        assert (config.fault_step is None) == (name == "healthy")
        # a routing mismatch is a train/rollout mismatch by LABELS.md
        assert scenario.description and scenario.expected_verdict == {"routing_mismatch": "precision_mismatch"}.get(name, name)
        json.dumps(scenario.overrides)


def test_fault_starts_at_the_same_fraction_of_any_run():
    assert get_scenario("divergence").config(30, 0).fault_step == 13
    assert get_scenario("divergence").config(60, 0).fault_step == 25


def test_unknown_scenario_lists_the_known_ones():
    with pytest.raises(InputError, match="healthy"):
        get_scenario("meltdown")


def test_overflow_mechanism_produces_non_finite_grad_norm(tmp_path):
    """The fp16 static-loss-scale trainer overflows from the learning-rate jump; nothing writes NaN."""
    model, tok = load_tiny_moe()
    config = get_scenario("overflow").config(6, 0, prompts_per_step=8)
    config.fault_step = 2
    run_grpo(model, tok, config, tmp_path / "o.jsonl")
    norms = [r["data"]["actor/grad_norm"] for r in read_verl_jsonl(tmp_path / "o.jsonl")]
    assert norms[0] == norms[0] and norms[0] < 65504 / config.loss_scale  # finite before the fault
    assert any(n != n for n in norms[2:])  # inf written as null, read back as NaN


def test_routing_mismatch_quantises_only_the_engines_routers_coarser_over_the_run():
    """The structure-dependent fault: from the fault step the engine's router weights lose a bit
    every tenth of the run (6 -> 2 bits); the trainer's model and every other engine weight are
    untouched, so the gap comes from routing alone and grows."""
    import torch

    from moeproxy.repro.grpo import GrpoTrainer, _router_parameters

    model, tok = load_tiny_moe()
    config = get_scenario("routing_mismatch").config(30, 0, rollout_dtype="float32", prompts_per_step=2)
    trainer = GrpoTrainer(model, tok, config)
    assert [trainer.router_bits(s) for s in (12, 13, 15, 16, 19, 22, 25, 30)] == [None, 6, 6, 5, 4, 3, 2, 2]
    before = [p.detach().clone() for p in _router_parameters(trainer.model)]
    distinct = []
    for step in (13, 25):
        engine, dtype = trainer._rollout_engine(step)
        assert dtype.endswith(f"router{trainer.router_bits(step)}bit")
        routers = _router_parameters(engine)
        distinct.append(max(len(torch.unique(p)) for p in routers))
        router_ids = {id(p) for p in routers}
        others = [(a, b) for a, b in zip(engine.parameters(), trainer.model.parameters()) if id(a) not in router_ids]
        assert others and all(torch.equal(a, b) for a, b in others)
    assert distinct[0] <= 2 ** 6 - 1 and distinct[1] <= 3 and distinct[1] < distinct[0]
    assert all(torch.equal(a, b) for a, b in zip(before, _router_parameters(trainer.model)))  # trainer untouched
    assert trainer._rollout_engine(12)[0] is trainer.model  # before the fault: the fp32 model itself


def test_a_shapes_calibrated_settings_apply_to_every_side_and_only_to_that_shape(monkeypatch):
    """Settings calibrated for one full-model shape (scenarios.CALIBRATED) sit on top of the
    scenario's defaults for that shape only; an explicit override still wins."""
    from moeproxy.repro import scenarios

    monkeypatch.setitem(scenarios.CALIBRATED, "h8-i8-l1-e8-k2-a2", {"routing_mismatch": {"rollout_router_bits_after_fault": 3}})
    scenario = get_scenario("routing_mismatch")
    assert scenario.config(30, 0).rollout_router_bits_after_fault == 6
    assert scenario.config(30, 0, shape_key="h8-i8-l1-e8-k2-a2").rollout_router_bits_after_fault == 3
    assert scenario.config(30, 0, shape_key="h9-i8-l1-e8-k2-a2").rollout_router_bits_after_fault == 6
    assert scenario.config(30, 0, shape_key="h8-i8-l1-e8-k2-a2", rollout_router_bits_after_fault=5).rollout_router_bits_after_fault == 5


def test_a_loss_scale_raised_at_the_fault_step_skips_every_update_from_there(tmp_path):
    """loss_scale_after_fault: the fp16 trainer's static scale from the fault step (the 50 M overflow):
    finite grad norms before, every update overflowing (non-finite, skipped) after; the scale logged."""
    from moeproxy.repro.grpo import GrpoConfig

    model, tok = load_tiny_moe()
    config = GrpoConfig(steps=4, fault_step=3, compute_dtype="float16", loss_scale=64.0,
                        loss_scale_after_fault=2.0 ** 32, prompts_per_step=2, group_size=4)
    assert [config.loss_scale_at(s) for s in (1, 2, 3, 4)] == [64.0, 64.0, 2.0 ** 32, 2.0 ** 32]
    run_grpo(model, tok, config, tmp_path / "p.jsonl")
    records = [r["data"] for r in read_verl_jsonl(tmp_path / "p.jsonl")]
    assert [d["actor/loss_scale"] for d in records] == [64.0, 64.0, 2.0 ** 32, 2.0 ** 32]
    norms = [d["actor/grad_norm"] for d in records]
    assert all(n == n for n in norms[:2]) and all(n != n for n in norms[2:])
    assert [d["actor/skipped_steps"] for d in records[2:]] == [2, 2]  # both mini-batches skipped
