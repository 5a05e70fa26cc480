"""Byte-range reading and writing of safetensors files, and sharded checkpoints."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from moeproxy.proxy.build import BuildSpec, build_proxy
from moeproxy.proxy.checkpoint import OutputTensor, read_header, read_tensor, slice_ranges, write_shard
from tiny_moe_models import tiny_config


def test_slices_along_any_dim_match_torch_indexing(tmp_path):
    t = torch.arange(4 * 5 * 6, dtype=torch.bfloat16).reshape(4, 5, 6)
    save_file({"x": t, "y": torch.ones(1, 7)}, str(tmp_path / "a.safetensors"))
    refs, _ = read_header(tmp_path / "a.safetensors")
    keep = [0, 2, 3]
    out = [OutputTensor(f"d{d}", "BF16", tuple(len(keep) if i == d else s for i, s in enumerate(t.shape)),
                        refs["x"].file, slice_ranges(refs["x"], d, keep)) for d in range(3)]
    write_shard(tmp_path / "b.safetensors", out, {"format": "pt"})
    got = load_file(str(tmp_path / "b.safetensors"))
    idx = torch.tensor(keep)
    for d in range(3):
        assert torch.equal(got[f"d{d}"], t.index_select(d, idx))
    assert torch.equal(read_tensor(refs["x"], 1), t[1])
    assert torch.equal(read_tensor(refs["y"]), torch.ones(1, 7))


def test_sharded_checkpoint_keeps_its_shards_and_index(tmp_path):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("qwen3_moe"))
    model.save_pretrained(tmp_path / "src", max_shard_size="60KB")
    (tmp_path / "src" / "tokenizer_config.json").write_text("{}")
    shards_in = sorted(p.name for p in (tmp_path / "src").glob("*.safetensors"))
    assert len(shards_in) > 2
    report = build_proxy(BuildSpec(src=tmp_path / "src", out=tmp_path / "out", keep_ratio=0.5, device="cpu"))
    assert report["verify"]["passed"]
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) <= set(shards_in)
    assert index["metadata"]["total_size"] == report["bytes_after"] < report["bytes_before"]
    assert (tmp_path / "out" / "tokenizer_config.json").exists()
    AutoModelForCausalLM.from_pretrained(tmp_path / "out")


def test_read_tensor_into_fills_a_fused_slot_exactly(tmp_path):
    import pytest

    from moeproxy.errors import InputError
    from moeproxy.proxy.checkpoint import read_tensor_into

    a = torch.randn(6, 4).to(torch.bfloat16)
    save_file({"a": a, "f": torch.randn(6, 4)}, str(tmp_path / "x.safetensors"))
    refs, _ = read_header(tmp_path / "x.safetensors")
    fused = torch.zeros(3, 12, 4, dtype=torch.bfloat16)
    read_tensor_into(refs["a"], fused[1, 3:9])
    assert torch.equal(fused[1, 3:9], a) and not fused[0].any() and not fused[2].any()
    assert not fused[1, :3].any() and not fused[1, 9:].any()
    assert torch.equal(read_tensor(refs["a"]), a) and torch.equal(read_tensor(refs["a"], 2), a[2])
    with pytest.raises(InputError, match="cannot read F32 bytes into a torch.bfloat16 tensor"):
        read_tensor_into(refs["f"], fused[1, 3:9])
    with pytest.raises(InputError, match=r"shape \[6, 4\] does not fit a slot of shape \[5, 4\]"):
        read_tensor_into(refs["a"], fused[1, 3:8])
