"""Start-up of `moeproxy ingest`: the ingest command imports its own module and the detected
format's, not the other commands' (proxy building, torch) nor other formats' heavy readers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def _modules_after_ingest(path, db) -> set[str]:
    code = ("import sys; from moeproxy.cli import main; rc = main(['ingest', sys.argv[1], '--db', sys.argv[2]]); "
            "print('\\n'.join(sorted(sys.modules))) if rc == 0 else sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(db)], capture_output=True, text=True, check=True)
    return set(out.stdout.splitlines())


def test_ingesting_jsonl_imports_no_other_command_nor_tensorboard(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": {"actor/grad_norm": 0.5}}) + "\n" for s in range(1, 20)))
    modules = _modules_after_ingest(path, tmp_path / "db.duckdb")
    assert "moeproxy.commands.ingest" in modules
    for absent in ("torch", "transformers", "tensorboard", "google.protobuf", "moeproxy.commands.build",
                   "moeproxy.proxy", "moeproxy.ingest.event_columns"):
        assert absent not in modules, absent


def test_ingesting_tensorboard_needs_no_protobuf_library(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    w = tbx.SummaryWriter(str(tmp_path / "tb"))
    for step in range(50):
        w.add_scalar("loss", 1.0 / (step + 1), step)
    w.close()
    modules = _modules_after_ingest(tmp_path / "tb", tmp_path / "db.duckdb")
    assert "moeproxy.ingest.event_columns" in modules
    for absent in ("torch", "tensorboard", "google.protobuf", "tensorboardX", "moeproxy.commands.build"):
        assert absent not in modules, absent
