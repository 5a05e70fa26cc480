"""The planner on the published configs in data/configs/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeproxy.cli import main
from moeproxy.errors import InputError
from moeproxy.proxy.plan import plan_proxy

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"

# published total parameter counts (billions; DeepSeek-V3 without its MTP layer)
PUBLISHED_TOTAL_B = {
    "Qwen3-30B-A3B": 30.5, "Qwen3-235B-A22B": 235.1, "DeepSeek-V3": 671.0,
    "Mixtral-8x7B-v0.1": 46.7, "OLMoE-1B-7B-0924": 6.9, "GPT-OSS-120B": 116.8,
}
PUBLISHED_ACTIVE_B = {"Qwen3-30B-A3B": 3.3, "Qwen3-235B-A22B": 22.2, "DeepSeek-V3": 37.5,
                      "Mixtral-8x7B-v0.1": 12.9, "OLMoE-1B-7B-0924": 1.3, "GPT-OSS-120B": 5.1}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL_B))
def test_full_model_counts_match_published_sizes(name):
    plan = plan_proxy(CONFIGS / f"{name}.json")
    assert plan["full"]["params_total"] / 1e9 == pytest.approx(PUBLISHED_TOTAL_B[name], rel=0.01)
    # active counts include embeddings + LM head, so allow a wider band (GPT-OSS reports 5.1 B w/o embeddings)
    assert plan["full"]["params_active"] / 1e9 == pytest.approx(PUBLISHED_ACTIVE_B[name], rel=0.15)
    assert plan["proxy"]["params_total"] < plan["full"]["params_total"]
    assert 0 < plan["accelerator_reduction"] < 1


def test_qwen3_235b_keeping_16_of_128():
    plan = plan_proxy(CONFIGS / "Qwen3-235B-A22B.json", keep_experts=16, device_memory_gib=64)
    # 235.09 B x 16 B / (64 GiB x 0.75) = 73 devices; proxy 36.34 B -> 12
    assert plan["full"]["accelerators"] == 73
    assert plan["proxy"]["accelerators"] == 12
    assert plan["proxy"]["params_total"] / 1e9 == pytest.approx(36.34, rel=0.005)
    assert plan["accelerator_reduction"] == pytest.approx(1 - 12 / 73)
    assert plan["step_cost_ratio"] == pytest.approx(1.0, abs=0.01)  # top-k kept: same FLOPs per token
    scaled = plan_proxy(CONFIGS / "Qwen3-235B-A22B.json", keep_experts=16, top_k="scale")
    assert scaled["proxy"]["top_k"] == 1 and scaled["step_cost_ratio"] > 1.5


def test_quantised_weight_bytes():
    ds = plan_proxy(CONFIGS / "DeepSeek-V3.json", keep_experts=32)
    assert ds["full"]["weight_bytes"] / 1e9 == pytest.approx(673, rel=0.03)  # FP8 + block scales + bf16 rest
    oss = plan_proxy(CONFIGS / "GPT-OSS-120B.json", keep_ratio=0.5)
    assert oss["full"]["weight_bytes"] / 1e9 == pytest.approx(65, rel=0.05)  # MXFP4 experts


def test_deepseek_group_rules():
    with pytest.raises(InputError, match="each of the 8 groups must keep >= 2"):
        plan_proxy(CONFIGS / "DeepSeek-V3.json", keep_experts=8)
    # 4 of 8 groups x 2 experts = 8 candidates = top-k 8: valid (every candidate chosen), with a note
    ds = plan_proxy(CONFIGS / "DeepSeek-V3.json", keep_experts=16)
    assert ds["proxy"]["experts"] == 16 and "top-k 8 candidates" in ds["notes"][0]
    with pytest.raises(InputError, match="6 candidates must be at least top-k 8"):
        plan_proxy({**json.loads((CONFIGS / "DeepSeek-V3.json").read_text()), "topk_group": 3}, keep_experts=16)


def test_cli_json_contract(capsys):
    assert main(["plan", str(CONFIGS / "Qwen3-235B-A22B.json"), "--keep-experts", "16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for side in ("full", "proxy"):
        assert set(doc[side]) >= {"params_total", "params_active", "weight_bytes", "accelerators"}
    assert {"accelerator_reduction", "step_cost_ratio"} <= set(doc)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope.json")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["plan", str(CONFIGS / "Mixtral-8x7B-v0.1.json"), "--keep-ratio", "0.25"]) == 2
    assert "must exceed top-k 2" in capsys.readouterr().err


def test_plan_prints_a_tiny_model_in_human_units(capsys):
    """The bundled 635 K-parameter model: `635 K`, not `0.00 B`; megabytes, not `0.0 GiB`."""
    tiny = Path(__file__).parents[2] / "data" / "tiny-moe"
    assert main(["plan", str(tiny), "--keep-ratio", "0.5"]) == 0
    rows = {line[:28].strip(): line[28:].split() for line in capsys.readouterr().out.splitlines()[2:10]}
    assert rows["parameters (total)"] == ["635", "K", "337", "K"]
    assert rows["weights on disk"] == ["2.42", "MiB", "1.29", "MiB"]
    assert rows["FLOPs per token"][1] == "K"


def test_step_cost_counts_the_per_parameter_update_given_the_steps_tokens(capsys):
    path = CONFIGS / "Qwen3-235B-A22B.json"
    # a cluster's step (4 M tokens): forward and backward dwarf the update, the ratio stays the FLOPs one
    big = plan_proxy(path, keep_experts=16, tokens_per_step=4_000_000)
    assert big["step_cost_ratio"] == pytest.approx(1.0, abs=0.01) and big["step_cost_ratio"] > 1.0
    model = big["step_cost_model"]
    assert model["tokens_per_step"] == 4_000_000 and model["full"] > model["proxy"]
    # a few thousand tokens a step: the update over 8x the parameters is most of the full model's step
    small = plan_proxy(path, keep_experts=16, tokens_per_step=2_000)
    update_full = small["step_cost_model"]["flops_per_byte"] * 34 * small["full"]["params_total"]
    assert update_full > 6 * small["full"]["params_active"] * 2_000
    assert small["step_cost_ratio"] > 2.0
    # a slower memory per FLOP (a CPU: few FLOPs per byte) makes the update's share smaller
    cpu = plan_proxy(path, keep_experts=16, tokens_per_step=2_000, flops_per_byte=5)
    assert 1.0 < cpu["step_cost_ratio"] < small["step_cost_ratio"]
    assert plan_proxy(path, keep_experts=16)["step_cost_model"]["tokens_per_step"] is None
    with pytest.raises(InputError, match="tokens-per-step 0 must be positive"):
        plan_proxy(path, keep_experts=16, tokens_per_step=0)
    assert main(["plan", str(path), "--keep-experts", "16", "--tokens-per-step", "2000"]) == 0
    assert "2,000 tokens a step" in capsys.readouterr().out
    assert main(["plan", str(path), "--keep-experts", "16", "--flops-per-byte", "5"]) == 2
    assert "needs --tokens-per-step" in capsys.readouterr().err


def test_run_memory_counts_copies_per_parameter_and_one_micro_batchs_activations(capsys):
    path = CONFIGS / "Qwen3-235B-A22B.json"
    base = plan_proxy(path, keep_experts=16)
    assert "run_memory_bytes" not in base["full"] and base["memory_model"]["run"] is None
    plan = plan_proxy(path, keep_experts=16, micro_batch_tokens=8192, seq_len=4096)
    full, proxy = plan["full"], plan["proxy"]
    # mixed precision: state 16 + reference 2 + rollout engine 2 bytes a parameter
    assert plan["memory_model"]["run"]["bytes_per_param"] == 20
    assert full["run_memory_bytes"] == pytest.approx(20 * full["params_total"] + full["activation_bytes"], abs=1)
    # activations follow the active shape and the tokens: the same for both sides but the router's
    # logits (128 vs 16 experts a token and layer), so the proxy's memory shrinks less than its state
    assert 0 < full["activation_bytes"] - proxy["activation_bytes"] < 0.01 * full["activation_bytes"]
    state_ratio = proxy["train_state_bytes"] / full["train_state_bytes"]
    assert proxy["run_memory_bytes"] / full["run_memory_bytes"] > state_ratio
    # twice the tokens: twice the activations
    double = plan_proxy(path, keep_experts=16, micro_batch_tokens=16384, seq_len=4096)
    assert double["full"]["activation_bytes"] == pytest.approx(2 * full["activation_bytes"], rel=1e-6)
    # a float32 trainer without a KL term (no reference): 16 + the engine's 2; activations at 4 bytes
    fp32 = plan_proxy(path, keep_experts=16, micro_batch_tokens=8192, seq_len=4096, trainer="float32",
                      reference=False)
    assert fp32["memory_model"]["run"]["bytes_per_param"] == 18
    logits = 2 * 151936 * 4 * 8192  # the logits and their log-softmax stay float32 in both
    assert fp32["full"]["activation_bytes"] - logits == pytest.approx(2 * (full["activation_bytes"] - logits), rel=1e-6)
    with pytest.raises(InputError, match="micro-batch-tokens 0 must be positive"):
        plan_proxy(path, keep_experts=16, micro_batch_tokens=0)
    with pytest.raises(InputError, match="trainer precision 'fp8'"):
        plan_proxy(path, keep_experts=16, micro_batch_tokens=10, trainer="fp8")
    assert main(["plan", str(path), "--keep-experts", "16", "--micro-batch-tokens", "8192", "--seq-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "run memory (one replica: 20 B/param" in out and "8,192 tokens" in out
    assert main(["plan", str(path), "--keep-experts", "16", "--seq-len", "4096"]) == 2
    assert "--seq-len needs --micro-batch-tokens" in capsys.readouterr().err
