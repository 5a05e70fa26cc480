"""Background jobs: validation, a real proxy build to the end, cancel, one job per device, lost jobs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from moeproxy.pids import pid_alive
from moeproxy import jobs
from moeproxy.errors import InputError, NotFound

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny-moe"


def test_parameters_are_validated(tmp_path):
    with pytest.raises(InputError, match="exactly one of keep_ratio or keep_experts"):
        jobs.launch(tmp_path, "build", {"src": str(TINY)}, "cpu")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "ckpt" / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(InputError, match="no \\*.safetensors files"):
        jobs.launch(tmp_path / "jobs", "build", {"src": str(tmp_path / "ckpt"), "keep_ratio": 0.5}, "cpu")
    with pytest.raises(InputError, match="extra_forbidden|Extra inputs"):
        jobs.launch(tmp_path / "jobs", "build", {"src": str(TINY), "keep_ratio": 0.5, "out": "/etc"}, "cpu")
    with pytest.raises(InputError, match="unknown job kind"):
        jobs.launch(tmp_path / "jobs", "shell", {"src": str(TINY), "keep_ratio": 0.5}, "cpu")
    with pytest.raises(InputError, match="unknown device"):
        jobs.launch(tmp_path / "jobs", "build", {"src": str(TINY), "keep_ratio": 0.5}, "tpu; rm -rf /")
    assert jobs.list_jobs(tmp_path / "jobs") == []


def test_build_job_runs_to_the_end_and_survives_in_files(tmp_path):
    job_id = jobs.launch(tmp_path, "build", {"src": str(TINY), "keep_ratio": 0.25, "verify": False}, "cpu")
    status = jobs.wait(tmp_path, job_id, timeout_s=240)
    assert status["state"] == "succeeded", jobs.log_tail(tmp_path, job_id)
    report = json.loads((tmp_path / job_id / "proxy" / "proxy_report.json").read_text())
    assert report["experts_before"] == 32 and report["experts_after"] == 8
    assert status["result"]["output"] == str(tmp_path / job_id / "proxy")
    assert status["stage"] == "write" and status["done"] == status["total"]
    assert "done: experts 32 -> 8" in jobs.log_tail(tmp_path, job_id)
    jobs._CHILDREN.clear()  # a fresh dashboard process knows only the files
    assert [j["job_id"] for j in jobs.list_jobs(tmp_path)] == [job_id]
    assert jobs.read_job(tmp_path, job_id)["spec"]["params"]["src"] == str(TINY.resolve())


def test_cancel_stops_the_process_group_and_one_job_per_device(tmp_path):
    job_id = jobs.launch(tmp_path, "build", {"src": str(TINY), "keep_ratio": 0.25}, "cpu")
    with pytest.raises(InputError, match="device cpu is busy"):
        jobs.launch(tmp_path, "build", {"src": str(TINY), "keep_ratio": 0.5}, "cpu")
    status = jobs.cancel(tmp_path, job_id, grace_s=10)
    assert status["state"] == "cancelled"
    pid = status["pid"]
    time.sleep(0.2)
    assert not pid_alive(pid)
    assert not (tmp_path / job_id / "proxy").exists()  # no half-written proxy left behind


def test_a_job_whose_process_vanished_is_lost(tmp_path):
    job_dir = tmp_path / "0123456789ab"
    job_dir.mkdir()
    jobs.write_status(job_dir, job_id="0123456789ab", kind="build", device="cpu", state="running",
                      pid=2**22 + 12345, heartbeat=time.time(), created_at="2026-01-01T00:00:00+00:00")
    assert jobs.read_job(tmp_path, "0123456789ab")["state"] == "lost"
    with pytest.raises(NotFound):
        jobs.read_job(tmp_path, "ffffffffffff")


def test_worker_refuses_a_tampered_spec(tmp_path):
    job_dir = tmp_path / "abcdefabcdef"
    job_dir.mkdir()
    (job_dir / "spec.json").write_text(json.dumps({"job_id": "abcdefabcdef", "kind": "build", "device": "cpu",
                                                   "params": {"src": "/", "keep_ratio": 0.5},
                                                   "created_at": "now", "argv": ["sh", "-c", "id"]}))
    assert jobs.run_job(job_dir) == 2
    assert json.loads((job_dir / "status.json").read_text())["state"] == "failed"


def test_child_environment_drops_secrets(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = jobs._child_env("cuda")
    assert "AWS_SECRET_ACCESS_KEY" not in env and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["HF_HUB_OFFLINE"] == "1" and jobs._child_env("cpu")["CUDA_VISIBLE_DEVICES"] == ""
