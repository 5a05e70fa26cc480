"""Docs that cannot rot: the README's console examples run, and every subcommand and option of
the CLI appears in the README."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from moeproxy.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _console_commands() -> list[str]:
    commands = []
    for block in re.findall(r"```console\n(.*?)```", README, re.S):
        commands += [line[2:].strip() for line in block.splitlines() if line.startswith("$ ")]
    return commands


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_readme_console_examples_run(tmp_path):
    commands = _console_commands()
    assert commands, "the README has no console examples"
    for name in ("tests", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, MOEPROXY_DB=str(tmp_path / "readme.duckdb"))
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "moeproxy", command
        proc = subprocess.run([sys.executable, "-m", "moeproxy", *argv[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"$ {command}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("name", sorted(_subparsers()))
def test_every_subcommand_and_option_is_in_the_readme(name):
    assert f"moeproxy {name}" in README, f"`moeproxy {name}` is not documented in README.md"
    sub = _subparsers()[name]
    missing = [opt for action in sub._actions for opt in action.option_strings
               if opt.startswith("--") and opt != "--help" and opt not in README]
    assert not missing, f"moeproxy {name}: options missing from README.md: {missing}"
