"""`moeproxy build` on hostile checkpoints and destinations: one error line, exit 2, nothing written,
no tensor copied; and an interrupted build (SIGKILL while writing or verifying) leaves no OUT."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_checkpoints import CASES, ST, read_st, write_st

from moeproxy.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base(tiny_checkpoints):
    return tiny_checkpoints["qwen3_moe"]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("moeproxy build: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_checkpoint_gives_one_error_line_and_writes_nothing(case, base, tmp_path, capsys, monkeypatch):
    src = tmp_path / "src"
    shutil.copytree(base, src)
    CASES[case](src)
    import moeproxy.proxy.checkpoint as checkpoint

    copied = []
    monkeypatch.setattr(checkpoint, "_copy_range", lambda *a: copied.append(a))  # no tensor byte may be copied
    out_parent = tmp_path / "outp"
    out_parent.mkdir()
    started = time.monotonic()
    rc = main(["build", str(src), str(out_parent / "out"), "--keep-experts", "4", "--device", "cpu", "--no-verify"])
    assert rc == 2, case
    one_line_error(capsys)
    assert time.monotonic() - started < 20
    assert not copied and not any(out_parent.iterdir())


def test_valid_copy_of_the_base_still_builds(base, tmp_path, capsys):
    """The cases above fail because of their one defect: the untouched copy builds."""
    src = tmp_path / "src"
    shutil.copytree(base, src)
    header, data = read_st(src / ST)
    write_st(src / ST, header, data)  # re-encoded by the case helpers, still valid
    assert main(["build", str(src), str(tmp_path / "out"), "--keep-experts", "4", "--device", "cpu", "--no-verify"]) == 0


@pytest.mark.parametrize("out", ["file/out", "x" * 5000, "a\0b", "exists"])
def test_bad_destinations_fail_before_any_work(out, base, tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("a file, not a directory")
    (tmp_path / "exists").mkdir()
    monkeypatch.setattr("moeproxy.proxy.build.open_checkpoint", lambda *a, **k: pytest.fail("the checkpoint was read"))
    assert main(["build", str(base), str(tmp_path / out), "--keep-experts", "4", "--no-verify"]) == 2
    one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists", "file"]


def test_read_only_destination_fails_before_any_work(base, tmp_path, capsys, monkeypatch):
    """os.access says no (a read-only mount or directory; as root chmod cannot show it): no clustering."""
    import moeproxy.proxy.build as build

    real_access = os.access
    monkeypatch.setattr(build.os, "access", lambda p, mode: False if Path(p) == tmp_path else real_access(p, mode))
    monkeypatch.setattr(build, "open_checkpoint", lambda *a, **k: pytest.fail("the checkpoint was read"))
    started = time.monotonic()
    assert main(["build", str(base), str(tmp_path / "new" / "out"), "--keep-experts", "4"]) == 2
    assert "is not writable" in one_line_error(capsys)
    assert time.monotonic() - started < 1 and not any(tmp_path.iterdir())


def test_side_files_and_shards_outside_allowed_roots_are_refused(base, tmp_path):
    """With allowed roots (dashboard jobs), a symlink in the checkpoint to a file outside is refused."""
    from moeproxy.errors import InputError
    from moeproxy.proxy.build import BuildSpec, build_proxy

    root = tmp_path / "root"
    src = root / "ckpt"
    shutil.copytree(base, src)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the dashboard")
    (src / "tokenizer.json").symlink_to(secret)
    spec = BuildSpec(src=src, out=root / "out", keep_experts=4, device="cpu", verify=False, allowed_roots=[root])
    with pytest.raises(InputError, match="outside the allowed roots"):
        build_proxy(spec)
    (src / "tokenizer.json").unlink()
    (src / ST).rename(tmp_path / ST)
    (src / ST).symlink_to(tmp_path / ST)
    with pytest.raises(InputError, match="outside the allowed roots"):
        build_proxy(spec)
    assert sorted(p.name for p in root.iterdir()) == ["ckpt"]


# -- interrupted builds -----------------------------------------------------------------------------
KILL_AT = {"write": "[copy]", "verify": "[verify]"}


@pytest.mark.parametrize("stage", list(KILL_AT))
def test_build_killed_with_sigkill_leaves_no_out_and_the_rerun_succeeds(stage, base, tmp_path):
    """SIGKILL halfway through a shard (after its first byte range) or while the proxy is verified:
    no OUT; the re-run removes the dead process's partial folder and succeeds."""
    out = tmp_path / "out"
    code = ("import time; import moeproxy.proxy.checkpoint as c; from moeproxy.proxy.build import BuildSpec, build_proxy\n"
            "copy = c._copy_range\n"
            "def slow_copy(*a):\n"
            "    copy(*a); print('[copy]', flush=True)\n"
            f"    if {stage!r} == 'write': time.sleep(60)\n"
            "c._copy_range = slow_copy\n"
            "def progress(stage, done, total, msg):\n"
            "    print(f'[{stage}]', flush=True)\n"
            f"    if stage == {stage!r}: time.sleep(60)\n"
            f"build_proxy(BuildSpec(src={str(base)!r}, out={str(out)!r}, keep_experts=4, device='cpu'), progress)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    try:
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            if line.startswith(KILL_AT[stage]) or time.monotonic() > deadline:
                break
        partial = tmp_path / f".out.partial-{proc.pid}"
        assert partial.is_dir()  # the build got as far as the stage
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not out.exists() and partial.exists()
    assert main(["build", str(base), str(out), "--keep-experts", "4", "--device", "cpu", "--no-verify"]) == 0
    assert (out / "proxy_report.json").is_file() and not partial.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failed_verification_setup_removes_the_partial_folder(base, tmp_path, monkeypatch):
    """An exception while verifying (here: a KeyboardInterrupt) removes the partial folder; no OUT."""
    import moeproxy.proxy.verify as verify
    from moeproxy.proxy.build import BuildSpec, build_proxy

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "verify_proxy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_proxy(BuildSpec(src=base, out=tmp_path / "out", keep_experts=4, device="cpu"))
    assert not any(tmp_path.iterdir())


def test_sigterm_stops_a_cli_build_like_ctrl_c(base, tmp_path, monkeypatch, capsys):
    """``kill PID`` (SIGTERM) on ``moeproxy build``: the build unwinds (its partial folder removed,
    as the KeyboardInterrupt test above shows), exit 130, the previous handler restored."""
    def terminated(spec, progress=None):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        pytest.fail("SIGTERM did not stop the build")

    monkeypatch.setattr("moeproxy.proxy.build.build_proxy", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["build", str(base), str(tmp_path / "out"), "--keep-experts", "4"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before
