"""verify_proxy: a correct proxy passes layer by layer and end to end; a wrong one is caught at its layer."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from moeproxy.proxy.arch import FAMILIES as ADAPTERS
from moeproxy.proxy.build import BuildSpec, build_proxy
from moeproxy.proxy.checkpoint import open_checkpoint
from moeproxy.proxy.verify import layer_tolerance, verify_proxy

from tiny_moe_models import make_tiny


def unverified_proxy(src, out):
    report = build_proxy(BuildSpec(src=src, out=out, keep_experts=4, device="cpu", verify=False))
    return {int(i): ids for i, ids in report["kept_experts"].items()}


def edit_proxy(out, edit):
    """Rewrite the proxy's single shard after ``edit(tensors)`` changed some of them in place."""
    tensors = load_file(str(out / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def run_verify(src, out, family, kept):
    return verify_proxy(open_checkpoint(src), open_checkpoint(out), ADAPTERS[family], kept)


@pytest.fixture(scope="module")
def bf16_qwen3(tmp_path_factory):
    base = tmp_path_factory.mktemp("bf16")

    def to_bf16(model):
        model.to(torch.bfloat16)

    src = make_tiny("qwen3_moe", base / "src", seed=5, mutate=to_bf16)
    assert json.loads((src / "config.json").read_text()).get("dtype", "bfloat16") == "bfloat16"
    return src


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
def test_correct_proxy_passes_every_layer(family, tiny_checkpoints, tmp_path):
    kept = unverified_proxy(tiny_checkpoints[family], tmp_path / "out")
    result = run_verify(tiny_checkpoints[family], tmp_path / "out", family, kept)
    assert result["passed"] and result["layers_failed"] == []
    n_layers = json.loads((tmp_path / "out" / "config.json").read_text())["num_hidden_layers"]
    assert [e["layer"] for e in result["layers"]] == list(range(n_layers))  # dense layers are checked too
    assert all(e["max_abs_diff"] <= 1e-6 for e in result["layers"]), result["layers"]


def test_a_perturbed_expert_fails_at_its_layer(tiny_checkpoints, tmp_path):
    kept = unverified_proxy(tiny_checkpoints["qwen3_moe"], tmp_path / "out")

    def perturb(tensors):
        for e in range(4):  # every kept expert of layer 1, by 1%: small, but far beyond float32 rounding
            tensors[f"model.layers.1.mlp.experts.{e}.down_proj.weight"] *= 1.01

    edit_proxy(tmp_path / "out", perturb)
    result = run_verify(tiny_checkpoints["qwen3_moe"], tmp_path / "out", "qwen3_moe", kept)
    assert not result["passed"]
    assert result["layers_failed"] == [1]
    assert result["error"].startswith("decoder layers [1] differ from the masked full model")
    # layer 0 is unchanged: it agrees within float error (summation order differs by CPU), as verify decides
    assert result["layers"][0]["passed"]
    assert result["layers"][0]["max_abs_diff"] <= result["layers"][0]["tolerance"]


def test_experts_out_of_order_with_their_router_rows_are_caught(tiny_checkpoints, tmp_path):
    """Renumbering experts without renumbering router rows (the bug verification exists for)."""
    kept = unverified_proxy(tiny_checkpoints["qwen3_moe"], tmp_path / "out")

    def swap(tensors):
        p = "model.layers.0.mlp.experts."
        for name in ("gate_proj", "up_proj", "down_proj"):
            a, b = f"{p}0.{name}.weight", f"{p}1.{name}.weight"
            tensors[a], tensors[b] = tensors[b].clone(), tensors[a].clone()

    edit_proxy(tmp_path / "out", swap)
    result = run_verify(tiny_checkpoints["qwen3_moe"], tmp_path / "out", "qwen3_moe", kept)
    assert not result["passed"] and 0 in result["layers_failed"]


def test_bf16_proxy_passes_and_a_bf16_perturbation_is_caught(bf16_qwen3, tmp_path):
    kept = unverified_proxy(bf16_qwen3, tmp_path / "out")
    result = run_verify(bf16_qwen3, tmp_path / "out", "qwen3_moe", kept)
    assert result["passed"], result
    assert all(e["max_abs_diff"] <= e["tolerance"] for e in result["layers"])

    def perturb(tensors):
        for e in range(4):
            tensors[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"] *= 1.25

    edit_proxy(tmp_path / "out", perturb)
    result = run_verify(bf16_qwen3, tmp_path / "out", "qwen3_moe", kept)
    assert not result["passed"] and 0 in result["layers_failed"]


def test_layer_tolerance_scales_with_dtype_precision():
    inp = torch.zeros(2, 3, 8)
    out = torch.full((2, 3, 8), 2.0)
    assert layer_tolerance(torch.float32, out, inp) == pytest.approx(torch.finfo(torch.float32).eps * 12, rel=1e-6)
    assert layer_tolerance(torch.bfloat16, out.bfloat16(), inp.bfloat16()) == pytest.approx(2 ** -7 * 12)


def test_progress_counts_both_passes_layer_by_layer(tiny_checkpoints, tmp_path):
    kept = unverified_proxy(tiny_checkpoints["deepseek_v3"], tmp_path / "out")
    calls = []
    result = verify_proxy(open_checkpoint(tiny_checkpoints["deepseek_v3"]), open_checkpoint(tmp_path / "out"),
                          ADAPTERS["deepseek_v3"], kept, progress=lambda *a: calls.append(a))
    assert result["passed"]
    assert [(done, total) for done, total, _ in calls] == [(i, 6) for i in range(1, 7)]
    assert calls[0][2] == "full model layer 0 (masked)" and calls[3][2].startswith("proxy layer 0: max |diff| 0")
