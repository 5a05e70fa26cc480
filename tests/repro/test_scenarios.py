import json

import pytest

from moeproxy.errors import InputError
from moeproxy.repro.grpo import run_grpo
from moeproxy.repro.scenarios import SCENARIOS, get_scenario
from moeproxy.repro.tiny_moe import load_tiny_moe
from moeproxy.repro.verl_log import read_verl_jsonl


def test_every_named_scenario_builds_a_config():
    assert set(SCENARIOS) == {"healthy", "overflow", "divergence", "precision_mismatch", "routing_collapse"}
    for name, scenario in SCENARIOS.items():
        config = scenario.config(30, 0)
        assert (config.fault_step is None) == (name == "healthy")
        assert scenario.description and scenario.expected_verdict == name
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
