"""Start-up of `moeproxy ingest`: the ingest command imports its own module and the detected
format's, not the other commands' (proxy building, torch) nor other formats' heavy readers, nor
pandas (about 0.8 CPU-seconds to import; parsed rows are stored from numpy columns)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def _duckdb_imports_pandas() -> bool:
    """DuckDB 1.5 (pinned for its offline extension wheels) imports pandas itself to convert any query
    parameter, and goes on without it when pandas cannot be imported."""
    code = "import sys, duckdb; duckdb.connect().execute('SELECT ?', [1]); print('pandas' in sys.modules)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


# where DuckDB would import pandas, the ingest runs with pandas made unimportable: a moeproxy module
# that needs it fails the command (and so the test); DuckDB converts its parameters without it
BLOCK_PANDAS = "sys.modules['pandas'] = None; " if _duckdb_imports_pandas() else ""


def _modules_after_ingest(path, db) -> set[str]:
    code = (f"import sys; {BLOCK_PANDAS}from moeproxy.cli import main; "
            "rc = main(['ingest', sys.argv[1], '--db', sys.argv[2]]); "
            "print('\\n'.join(sorted(k for k, v in sys.modules.items() if v is not None))) if rc == 0 else sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(db)], capture_output=True, text=True, check=True)
    return set(out.stdout.splitlines())


def test_ingesting_jsonl_imports_no_other_command_nor_tensorboard(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": {"actor/grad_norm": 0.5}}) + "\n" for s in range(1, 20)))
    modules = _modules_after_ingest(path, tmp_path / "db.duckdb")
    assert "moeproxy.commands.ingest" in modules
    for absent in ("torch", "transformers", "tensorboard", "google.protobuf", "moeproxy.commands.build",
                   "moeproxy.proxy", "moeproxy.ingest.formats.tensorboard.event_columns", "pandas"):
        assert absent not in modules, absent


def test_ingesting_tensorboard_needs_no_protobuf_library(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    w = tbx.SummaryWriter(str(tmp_path / "tb"))
    for step in range(50):
        w.add_scalar("loss", 1.0 / (step + 1), step)
    w.close()
    modules = _modules_after_ingest(tmp_path / "tb", tmp_path / "db.duckdb")
    assert "moeproxy.ingest.formats.tensorboard.event_columns" in modules
    for absent in ("torch", "tensorboard", "google.protobuf", "tensorboardX", "moeproxy.commands.build", "pandas"):
        assert absent not in modules, absent


@pytest.mark.parametrize("size", ["small", "large"])  # large: the parallel scan and the DuckDB read
def test_ingesting_megatron_and_verl_logs_of_any_size_needs_no_pandas(tmp_path, size):
    n = 20 if size == "small" else 120_000
    megatron = tmp_path / "megatron.log"
    with open(megatron, "w") as fh:
        for it in range(1, n + 1):
            fh.write(f" iteration {it:8d}/ {n:8d} | lm loss: {1.0 / it:.6E} | grad norm: {0.5:.3f} | "
                     f"elapsed time per iteration (ms): 1000.0 | padding: {'x' * 40}: 1 |\n")
    verl = tmp_path / "verl.jsonl"
    with open(verl, "w") as fh:
        for step in range(1, (n // 4) + 1):
            fh.write(json.dumps({"step": step, "data": {f"perf/m{i}": step * 0.5 + i for i in range(40)}}) + "\n")
    for path in (megatron, verl):
        modules = _modules_after_ingest(path, tmp_path / f"{path.stem}.duckdb")
        assert "pandas" not in modules, path.name
