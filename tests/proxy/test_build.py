"""Proxy builds on tiny checkpoints of every supported family."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from moeproxy.errors import InputError
from moeproxy.proxy.arch import FAMILIES as ADAPTERS
from moeproxy.proxy.build import REPORT_NAME, BuildSpec, build_proxy
from moeproxy.proxy.checkpoint import open_checkpoint
from moeproxy.proxy.masking import mask_experts

from tiny_moe_models import FAMILIES, make_tiny

INPUT = torch.tensor([[3, 17, 42, 9, 100, 5, 77, 12], [1, 2, 3, 4, 5, 6, 7, 8]])


def logits_of(path, mask=None, family=None):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if mask:
        for i, layer in enumerate(model.model.layers):
            if i in mask:
                mask_experts(ADAPTERS[family], layer, mask[i])
    with torch.no_grad():
        return model(input_ids=INPUT).logits


def raw_bytes(ref):
    with open(ref.file, "rb") as fh:
        fh.seek(ref.start)
        return fh.read(ref.nbytes)


@pytest.fixture(scope="module")
def built(tiny_checkpoints, tmp_path_factory):
    out = {}
    base = tmp_path_factory.mktemp("proxies")
    for family in FAMILIES:
        report = build_proxy(BuildSpec(src=tiny_checkpoints[family], out=base / family, keep_experts=4, device="cpu"))
        out[family] = (base / family, report)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_proxy_loads_and_equals_masked_full_model(family, built, tiny_checkpoints):
    out, report = built[family]
    assert report["experts_before"] == 8 and report["experts_after"] == 4
    assert report["verify"]["passed"], report["verify"]
    assert report["verify"]["forward_checked"]
    kept = {int(i): ids for i, ids in report["kept_experts"].items()}
    assert all(len(ids) == 4 and ids == sorted(ids) for ids in kept.values())
    removed = {i: sorted(set(range(8)) - set(ids)) for i, ids in kept.items()}
    proxy = logits_of(out)
    masked = logits_of(tiny_checkpoints[family], removed, family)
    unmasked = logits_of(tiny_checkpoints[family])
    assert torch.allclose(proxy, masked, atol=1e-5), (proxy - masked).abs().max()
    assert not torch.allclose(proxy, unmasked, atol=1e-3)  # the pruning did change the model


@pytest.mark.parametrize("family", FAMILIES)
def test_backbone_is_byte_identical_and_config_minimally_changed(family, built, tiny_checkpoints):
    out, report = built[family]
    src, dst = open_checkpoint(tiny_checkpoints[family]), open_checkpoint(out)
    expert_or_router = lambda k: ".experts." in k or ".gate." in k or ".router." in k  # noqa: E731
    backbone = [k for k in src.tensors if not expert_or_router(k)]
    assert backbone and all(raw_bytes(src.tensors[k]) == raw_bytes(dst.tensors[k]) for k in backbone)
    assert {k for k in dst.tensors if not expert_or_router(k)} == set(backbone)
    changed = {k for k in set(src.config) | set(dst.config) if src.config.get(k) != dst.config.get(k)}
    assert changed == {ADAPTERS[family].count_keys[0] if ADAPTERS[family].count_keys[0] in src.config
                       else ADAPTERS[family].count_keys[1]}
    # kept experts are copied byte for byte under their new ids
    layer = next(iter(report["kept_experts"]))
    for new, old in enumerate(report["kept_experts"][layer]):
        for k in src.tensors:
            if f"layers.{layer}." in k and f".experts.{old}." in k:
                assert raw_bytes(src.tensors[k]) == raw_bytes(dst.tensors[k.replace(f".experts.{old}.", f".experts.{new}.")])


def test_keeping_all_experts_reproduces_the_original(tiny_checkpoints, tmp_path):
    for family in ("qwen3_moe", "gpt_oss", "deepseek_v3"):
        out = tmp_path / family
        build_proxy(BuildSpec(src=tiny_checkpoints[family], out=out, keep_ratio=1.0, device="cpu", verify=False))
        assert torch.equal(logits_of(out), logits_of(tiny_checkpoints[family]))


def _identical_pairs(model):
    """Experts 2j and 2j+1 (and their router rows) become identical in every MoE layer."""
    for layer in model.model.layers:
        block = layer.mlp
        for name in ("gate_up_proj", "down_proj"):
            w = getattr(block.experts, name)
            w[1::2] = w[0::2]
        block.gate.weight[1::2] = block.gate.weight[0::2]


@pytest.mark.parametrize("norm", [True, False])
def test_identical_expert_groups_collapse_to_one_each(tmp_path, norm):
    def mutate(model):
        _identical_pairs(model)

    src = make_tiny("qwen3_moe", tmp_path / "src", seed=3, mutate=mutate)
    cfg = json.loads((src / "config.json").read_text())
    cfg["norm_topk_prob"] = norm
    (src / "config.json").write_text(json.dumps(cfg))
    report = build_proxy(BuildSpec(src=src, out=tmp_path / "out", keep_experts=4, top_k="scale", device="cpu"))
    assert report["top_k_after"] == 1
    for layer, members in report["clusters"].items():
        assert sorted(members) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert report["verify"]["passed"]
    full, proxy = logits_of(src), logits_of(tmp_path / "out")
    assert torch.allclose(full, proxy, atol=1e-5), (full - proxy).abs().max()


def test_activations_method_with_frequency_selection(tiny_checkpoints, tmp_path):
    calib = tmp_path / "calib.jsonl"
    g = torch.Generator().manual_seed(1)
    calib.write_text("\n".join(json.dumps({"input_ids": torch.randint(0, 128, (n,), generator=g).tolist()})
                               for n in (16, 9, 24)) + "\n")
    report = build_proxy(BuildSpec(src=tiny_checkpoints["qwen3_moe"], out=tmp_path / "out", keep_experts=4,
                                   method="activations", calibration=calib, select="frequency", device="cpu"))
    assert report["verify"]["passed"]
    for layer, kept in report["kept_experts"].items():
        freq = report["routing_frequency"][layer]
        assert sum(freq) == (16 + 9 + 24) * 2  # every real token routed to top-2, padding ignored
        for members, rep in zip(report["clusters"][layer], kept):
            assert freq[rep] == max(freq[m] for m in members)


def test_fp8_block_scales_travel_with_their_experts(tiny_checkpoints, tmp_path):
    """A DeepSeek-V3 checkpoint with FP8 experts + weight_scale_inv: scales are copied with the kept expert."""
    from safetensors.torch import save_file

    src = tmp_path / "fp8"
    src.mkdir()
    base = tiny_checkpoints["deepseek_v3"]
    tensors = {}
    with safe_open(str(base / "model.safetensors"), "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            if ".experts." in k and k.endswith(".weight"):
                tensors[k] = t.to(torch.float8_e4m3fn)
                tensors[k + "_scale_inv"] = torch.rand(1, 1) + float(k.split(".experts.")[1].split(".")[0])
            else:
                tensors[k] = t
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((base / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    (src / "config.json").write_text(json.dumps(cfg))
    report = build_proxy(BuildSpec(src=src, out=tmp_path / "out", keep_experts=4, device="cpu"))
    assert "forward_skipped" in report["verify"]
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        for layer, kept in report["kept_experts"].items():
            for new, old in enumerate(kept):
                k = f"model.layers.{layer}.mlp.experts.{new}.down_proj.weight"
                assert f.get_slice(k).get_dtype() == "F8_E4M3"
                assert int(f.get_tensor(k + "_scale_inv").item()) == old


def test_invalid_counts_name_the_rule_and_nearest_values(tiny_checkpoints, tmp_path):
    with pytest.raises(InputError, match=r"divisible by n_group 2.*nearest valid counts: 4"):
        build_proxy(BuildSpec(src=tiny_checkpoints["deepseek_v3"], out=tmp_path / "o", keep_experts=5, device="cpu"))
    with pytest.raises(InputError, match="must exceed top-k 2"):
        build_proxy(BuildSpec(src=tiny_checkpoints["mixtral"], out=tmp_path / "o", keep_ratio=0.25, device="cpu"))
    with pytest.raises(InputError, match="expert-parallel size 3"):
        build_proxy(BuildSpec(src=tiny_checkpoints["qwen3_moe"], out=tmp_path / "o", keep_experts=4, ep_size=3))
    assert not (tmp_path / "o").exists()


def test_grouped_routing_with_exactly_top_k_candidates_builds_and_verifies(tmp_path, capsys):
    """DeepSeek-V3 routing, 8 -> 4 experts, n_group 2, topk_group 1, top-k 2: the chosen group keeps
    2 experts = top-k. transformers masks the other group with -inf before the top-k, so both are
    chosen, in the proxy and in the masked full model alike."""
    from moeproxy.cli import main

    src = make_tiny("deepseek_v3", tmp_path / "src", topk_group=1)
    assert json.loads((src / "config.json").read_text())["topk_group"] == 1
    assert main(["build", str(src), str(tmp_path / "out"), "--keep-experts", "4", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "verification: passed" in printed and "note: topk_group 1 x 2 experts per group = top-k 2" in printed
    report = json.loads((tmp_path / "out" / REPORT_NAME).read_text())
    assert (report["n_group"], report["topk_group"], report["top_k_after"]) == (2, 1, 2)
    assert report["verify"]["passed"] and report["verify"]["forward_checked"], report["verify"]
    assert report["notes"] and "router still chooses the groups" in report["notes"][0]
    kept = {int(i): ids for i, ids in report["kept_experts"].items()}
    assert all(sum(k < 4 for k in ids) == 2 for ids in kept.values())  # two per group of four
    removed = {i: sorted(set(range(8)) - set(ids)) for i, ids in kept.items()}
    proxy, masked = logits_of(tmp_path / "out"), logits_of(src, removed, "deepseek_v3")
    assert torch.allclose(proxy, masked, atol=1e-5), (proxy - masked).abs().max()
    assert not torch.allclose(proxy, logits_of(src), atol=1e-3)
    # fewer candidates than top-k is still refused: the full model would pick masked experts
    with pytest.raises(InputError, match="1 candidates must be at least top-k 2"):
        build_proxy(BuildSpec(src=make_tiny("deepseek_v3", tmp_path / "src4", topk_group=1, n_group=4),
                              out=tmp_path / "o4", keep_experts=4, device="cpu"))


def test_unsupported_family_lists_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(InputError, match="unsupported model_type 'llama'.*deepseek_v3.*qwen3_moe"):
        build_proxy(BuildSpec(src=tmp_path, out=tmp_path / "o", keep_experts=4))


def test_interrupted_build_leaves_no_output(tiny_checkpoints, tmp_path):
    def progress(stage, done, total, message):
        if stage == "write":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_proxy(BuildSpec(src=tiny_checkpoints["qwen3_moe"], out=tmp_path / "out", keep_experts=4), progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_refused(tiny_checkpoints, tmp_path):
    with pytest.raises(InputError, match="already exists"):
        build_proxy(BuildSpec(src=tiny_checkpoints["olmoe"], out=tmp_path, keep_experts=4))


def test_report_contract(built):
    out, report = built["deepseek_v3"]
    on_disk = json.loads((out / REPORT_NAME).read_text())
    for key in ("experts_before", "experts_after", "kept_experts", "clusters", "top_k_before", "top_k_after",
                "plan", "seconds", "peak_rss_bytes", "verify", "family", "source"):
        assert key in on_disk
    assert on_disk["moe_layers"] == [1, 2]  # layer 0 is dense (first_k_dense_replace)
    for layer, kept in on_disk["kept_experts"].items():  # two per routing group of four
        assert sum(k < 4 for k in kept) == 2 and sum(k >= 4 for k in kept) == 2


def test_verify_progress_counts_each_line_once(tmp_path):
    """The build's verify stage numbers every progress line differently and ends at total/total."""
    from moeproxy.proxy.build import BuildSpec, build_proxy
    from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT

    lines = []
    build_proxy(BuildSpec(src=str(DEFAULT_CHECKPOINT), out=str(tmp_path / "p"), keep_ratio=0.5),
                progress=lambda stage, done, total, message: lines.append((stage, done, total)))
    verify = [(d, t) for s, d, t in lines if s == "verify"]
    assert [d for d, _ in verify] == list(range(len(verify))) and verify[-1][0] == verify[-1][1]
