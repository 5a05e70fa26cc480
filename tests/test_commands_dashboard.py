"""`moeproxy dashboard` and its safe server settings."""

from __future__ import annotations

import tomllib
from pathlib import Path

from moeproxy.cli import build_parser, main
from moeproxy.commands.dashboard import APP, streamlit_argv

REPO = Path(__file__).resolve().parents[1]


def test_defaults_bind_loopback_with_xsrf():
    args = build_parser().parse_args(["dashboard"])
    assert args.host == "127.0.0.1" and args.port == 8501
    argv = streamlit_argv(APP, args.host, args.port)
    assert argv[1:4] == ["-m", "streamlit", "run"] and APP.exists()
    assert "--server.address=127.0.0.1" in argv and "--server.enableXsrfProtection=true" in argv
    assert not any(";" in a or "|" in a for a in argv)


def test_config_file_keeps_the_safe_defaults():
    config = tomllib.loads((REPO / "dashboard" / ".streamlit" / "config.toml").read_text())
    server = config["server"]
    assert server["address"] == "127.0.0.1" and server["enableXsrfProtection"] is True
    assert 0 < server["maxUploadSize"] <= 1024 and server["enableStaticServing"] is False
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"]["showErrorDetails"] in ("type", "none")


def test_bad_port_is_a_clear_error(capsys):
    assert main(["dashboard", "--port", "70000"]) == 2
    assert "--port 70000" in capsys.readouterr().err


def test_allowed_roots(tmp_path, monkeypatch):
    import pytest

    from moeproxy.allowed_paths import allowed_roots, resolve_inside_roots
    from moeproxy.errors import InputError

    monkeypatch.setenv("MOEPROXY_ALLOWED_ROOTS", str(tmp_path))
    (tmp_path / "logs").mkdir()
    (tmp_path / "escape").symlink_to("/etc")
    assert allowed_roots() == [tmp_path.resolve()]
    assert resolve_inside_roots(tmp_path / "logs") == (tmp_path / "logs").resolve()
    for bad in ("/etc/passwd", str(tmp_path / "logs" / ".." / ".." / "x"), str(tmp_path / "escape" / "passwd")):
        with pytest.raises(InputError, match="outside the allowed roots"):
            resolve_inside_roots(bad)
    with pytest.raises(InputError, match="no such file"):
        resolve_inside_roots(tmp_path / "missing")


def test_a_bad_grid_file_stops_the_dashboard_before_it_starts(tmp_path, capsys, monkeypatch):
    import os

    def no_server(*args):
        raise AssertionError("the server was started with a bad grid file")

    monkeypatch.setattr(os, "execve", no_server)  # a regression must not replace the test process
    bad = tmp_path / "results.json"
    bad.write_text('{"full": {}}')
    assert main(["dashboard", "--grid", str(bad), "--db", str(tmp_path / "runs.duckdb"), "--port", "1"]) == 2
    assert "results.json: holds a JSON object, not a list of grid rows" in capsys.readouterr().err
