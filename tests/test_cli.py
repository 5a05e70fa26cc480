"""The moeproxy command line: ingest summary, runs, export, formats, start-up cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from moeproxy.cli import COMMANDS, main

LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_ingest_prints_a_summary_per_file_and_runs_lists_them(db_path, capsys):
    assert main(["ingest", str(LOGS / "megatron.log"), str(LOGS / "verl_console.log")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{LOGS / 'megatron.log'} -> run 'megatron', format megatron (megatron), 6 steps")
    assert "2 attempts" in out[0] and "non-finite" in out[0]
    assert "format verl-console (verl)" in out[1]
    assert main(["runs", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in runs] == ["megatron", "verl_console"]
    assert runs[0]["attempts"] == 2 and runs[1]["nonfinite"] == 5


def test_ingest_json_roles_and_export(db_path, tmp_path, capsys):
    assert main(["ingest", str(LOGS / "megatron.log"), "--run", "full", "--role", "full"]) == 0
    assert main(["ingest", str(LOGS / "mindspeed_llm.log"), "--run", "px", "--role", "proxy",
                 "--proxy-of", "full"]) == 0
    capsys.readouterr()
    assert main(["runs"]) == 0
    table = capsys.readouterr().out
    assert "px" in table and "proxy" in table and "full" in table
    target = tmp_path / "full.csv"
    assert main(["export", "full", "--to", str(target)]) == 0
    assert target.read_text().startswith("step,metric,original,value,attempt,rank,wall_time")
    assert main(["export", "full", "--to", str(tmp_path / "x.xlsx")]) == 2


def test_ingest_json_output(db_path, capsys):
    assert main(["ingest", str(LOGS / "verl_file.jsonl"), "--json"]) == 0
    [summary] = json.loads(capsys.readouterr().out)
    assert summary["format"] == "verl-jsonl" and summary["attempts"] == 2 and summary["nonfinite"] == 1


def test_formats_lists_every_registered_format(capsys):
    from moeproxy.ingest import FORMATS

    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FORMATS)


def test_empty_store_says_how_to_start(db_path, capsys):
    assert main(["runs"]) == 0
    assert "moeproxy ingest" in capsys.readouterr().out


def test_command_modules_do_not_import_torch():
    code = ("import sys, importlib; import moeproxy.cli as c\n"
            "[importlib.import_module(m) for m in c.COMMANDS.values()]\n"
            "import moeproxy.ingest, moeproxy.store\n"
            "print(sorted(m for m in ('torch', 'transformers', 'streamlit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert set(COMMANDS) >= {"ingest", "runs", "export", "formats"}
