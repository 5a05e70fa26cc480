"""`moeproxy build` through the CLI, and on an accelerator where there is one."""

from __future__ import annotations

import json

import pytest

from moeproxy.cli import main
from moeproxy.devices import has_accelerator


def test_cli_build_writes_report_and_exits_0(tiny_checkpoints, tmp_path, capsys):
    out = tmp_path / "proxy"
    rc = main(["build", str(tiny_checkpoints["gpt_oss"]), str(out), "--keep-ratio", "0.5", "--device", "cpu", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["experts_after"] == 4 and report["verify"]["passed"]
    assert json.loads((out / "proxy_report.json").read_text())["kept_experts"] == report["kept_experts"]


def test_cli_build_user_errors_exit_2(tiny_checkpoints, tmp_path, capsys):
    src = str(tiny_checkpoints["qwen3_moe"])
    assert main(["build", src, str(tmp_path / "a"), "--keep-experts", "4", "--select", "frequency"]) == 2
    assert "use method 'activations'" in capsys.readouterr().err
    assert main(["build", src, str(tmp_path / "b"), "--keep-experts", "4", "--method", "activations"]) == 2
    assert "calibration" in capsys.readouterr().err
    assert main(["build", src, str(tmp_path / "c"), "--keep-experts", "4", "--method", "activations",
                 "--calibration", str(tmp_path / "missing.jsonl")]) == 2
    assert "calibration file not found" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.accelerator
@pytest.mark.skipif(not has_accelerator(), reason="no CUDA GPU or Ascend NPU here")
def test_activations_build_on_accelerator(tiny_checkpoints, tmp_path):
    from moeproxy.proxy.build import BuildSpec, build_proxy

    calib = tmp_path / "calib.jsonl"
    calib.write_text("\n".join(json.dumps({"input_ids": list(range(i, i + 20))}) for i in range(5)) + "\n")
    report = build_proxy(BuildSpec(src=tiny_checkpoints["deepseek_v3"], out=tmp_path / "out", keep_experts=4,
                                   method="activations", calibration=calib, device="auto"))
    assert report["device"].startswith(("cuda", "npu"))
    assert report["verify"]["passed"], report["verify"]
