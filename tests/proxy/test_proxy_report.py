"""The proxy report as a typed model, and the build's named stages that fill it."""

from __future__ import annotations

import json

from moeproxy.proxy.build import BuildSpec, choose_experts, resolve_and_check
from moeproxy.proxy.proxy_report import REPORT_NAME, ProxyReport


def test_the_written_report_reads_back_typed(tiny_checkpoints, tmp_path):
    from moeproxy.proxy.build import build_proxy

    returned = build_proxy(BuildSpec(src=tiny_checkpoints["qwen3_moe"], out=tmp_path / "p", keep_experts=4,
                                     device="cpu", verify=False))
    on_disk = json.loads((tmp_path / "p" / REPORT_NAME).read_text())
    assert returned == on_disk
    report = ProxyReport.read(tmp_path / "p")
    assert report.experts_after == 4 and report.verify_passed is None
    assert report.headline() == "experts 8 -> 4 per MoE layer, top-k 2 -> 2, verification skipped"
    assert report.summary()["kept_experts"] == report.kept_experts and report.summary()["verify_passed"] is None
    newer = ProxyReport.model_validate({**on_disk, "verify": {"passed": False}, "from_a_newer_moeproxy": 1})
    assert newer.verify_passed is False and newer.model_dump()["from_a_newer_moeproxy"] == 1


def test_stages_resolve_then_choose_without_writing(tiny_checkpoints, tmp_path):
    spec = BuildSpec(src=tiny_checkpoints["deepseek_v3"], out=tmp_path / "o", keep_ratio=0.5, device="cpu")
    resolved = resolve_and_check(spec)
    assert (resolved.kept_count, resolved.top_k, resolved.shape.n_group) == (4, 2, 2)
    assert resolved.config["n_routed_experts"] == 4
    progress = []
    chosen = choose_experts(resolved, spec, lambda *a: progress.append(a))
    assert sorted(chosen.kept) == [1, 2] and all(len(k) == 4 for k in chosen.kept.values())
    assert progress[0][:3] == ("cluster", 0, 2) and progress[-1][:3] == ("cluster", 2, 2)
    assert not (tmp_path / "o").exists() and list(tmp_path.iterdir()) == []
