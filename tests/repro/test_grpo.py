import json
import math

import pytest

from moeproxy.repro.grpo import GrpoConfig, run_grpo
from moeproxy.repro.tiny_moe import load_tiny_moe
from moeproxy.repro.verl_log import VerlFileLogger, read_verl_jsonl

VERL_KEYS = {
    "actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "actor/lr",
    "critic/score/mean", "response_length/mean", "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_max", "timing_s/step", "routing_entropy", "routing_entropy/layer_0",
    "routing/load/layer_2/expert_31",
}


def test_grpo_writes_verl_file_jsonl_every_step(tmp_path):
    model, tok = load_tiny_moe()
    log = tmp_path / "run.jsonl"
    summary = run_grpo(model, tok, GrpoConfig(steps=3, prompts_per_step=4, group_size=4, kl_coef=0.1,
                                              rollout_dtype="bfloat16"), log)
    records = read_verl_jsonl(log)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        data = record["data"]
        assert VERL_KEYS <= set(data)
        assert 0 <= data["critic/score/mean"] <= 1
        assert 0 < data["routing_entropy"] <= 1
        loads = [data[f"routing/load/layer_0/expert_{e}"] for e in range(32)]
        assert sum(loads) == pytest.approx(1.0, abs=1e-4)
        assert data["training/rollout_probs_diff_mean"] > 0  # bf16 engine vs fp32 trainer
        assert math.isfinite(data["actor/grad_norm"])
    assert summary["parameters"] > summary["active_parameters"]


def test_same_seed_gives_the_same_run(tmp_path):
    runs = []
    for name in ("a", "b"):
        model, tok = load_tiny_moe()
        run_grpo(model, tok, GrpoConfig(steps=2, prompts_per_step=4, group_size=4, seed=3), tmp_path / f"{name}.jsonl")
        runs.append([r["data"]["actor/grad_norm"] for r in read_verl_jsonl(tmp_path / f"{name}.jsonl")])
    assert runs[0] == runs[1]


def test_non_finite_values_are_written_as_null_like_verl(tmp_path):
    with VerlFileLogger(tmp_path / "x.jsonl") as logger:
        logger.log({"actor/grad_norm": float("inf"), "actor/pg_loss": float("nan"), "training/global_step": 1}, step=1)
    line = json.loads((tmp_path / "x.jsonl").read_text())
    assert line == {"step": 1, "data": {"actor/grad_norm": None, "actor/pg_loss": None, "training/global_step": 1}}


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="compute_dtype"):
        GrpoConfig(compute_dtype="float8_e4m3fn")
    with pytest.raises(ValueError, match="rollout_dtype"):
        GrpoConfig(rollout_dtype="int4")
    with pytest.raises(ValueError, match="divisible"):
        GrpoConfig(prompts_per_step=3, group_size=3, mini_batches=2)
