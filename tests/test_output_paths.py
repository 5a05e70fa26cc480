"""Every output path holds (issue 22): `export --to`, `report -o` and the proxy report are checked up
front and written atomically (moeproxy.outputs); `report` on steps near 2^63; a failed build leaves
no output folder. Through the real CLI on real files: FIFOs, /dev/full, /dev/zero, a read-only folder
and a full disk (a size-limited tmpfs in a user namespace, where the machine allows one)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "proxy"))
from tiny_moe_models import make_tiny  # noqa: E402

from moeproxy.cli import main  # noqa: E402
from moeproxy.errors import InputError  # noqa: E402
from moeproxy.outputs import atomic_path, check_target, write_text  # noqa: E402

RUN = "r"


def _log(path: Path, steps) -> Path:
    with open(path, "w") as fh:
        for i, step in enumerate(steps):
            fh.write(json.dumps({"step": step, "actor/pg_loss": 1.0 + 0.01 * (i % 7), "actor/grad_norm": 0.5,
                                 "routing_entropy/layer_0": 2.0 - 0.001 * i}) + "\n")
    return path


@pytest.fixture
def store(tmp_path) -> Path:
    db = tmp_path / "runs.duckdb"
    assert main(["ingest", str(_log(tmp_path / "run.jsonl", range(60))), "--run", RUN, "--db", str(db)]) == 0
    return db


def _argv(command: str, target, db: Path) -> list[str]:
    return (["export", RUN, "--to", str(target)] if command == "export" else ["report", RUN, "-o", str(target)]) \
        + ["--db", str(db)]


def _suffix(command: str) -> str:
    return ".csv" if command == "export" else ".html"


def _cli(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in its own process: a FIFO that blocked it would time out instead of hanging the suite."""
    return subprocess.run([sys.executable, "-m", "moeproxy", *argv], capture_output=True, text=True, timeout=timeout)


def _one_line(stderr: str, command: str, names: str) -> None:
    """One error line naming the path (after any progress bars: a build draws them on stderr)."""
    lines = [line for line in stderr.splitlines() if not line.startswith(("\r", "cluster:", "write:", "verify:"))
             and line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"moeproxy {command}: error: ") and names in lines[0], stderr


def _refused(capsys, argv: list[str], names: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    _one_line(err, argv[0], names)
    return err


def _in_namespace_fs(tmp_path: Path, script: str, size: str = "256k", read_only: bool = False):
    """Run ``script`` (sh) with ``tmp_path/small`` a tmpfs of ``size`` (read-only when asked), mounted in
    a private user and mount namespace; skipped where the machine allows none."""
    small = tmp_path / "small"
    small.mkdir(exist_ok=True)
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: cannot mount a small file system here")
    remount = f" && mount -o remount,ro {small}" if read_only else ""
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs {small}{remount} "
                           f"|| exit 99\n{script}"], capture_output=True, text=True, timeout=180)
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {proc.stderr.strip()[:200]}")
    return proc, small


def _moeproxy(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in [sys.executable, "-m", "moeproxy", *argv])


# -- outputs: refused up front, one line naming the target ---------------------------------------
COMMANDS = ["export", "report"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_is_refused(command, store, tmp_path, capsys):
    folder = tmp_path / f"out{_suffix(command)}"
    folder.mkdir()
    _refused(capsys, _argv(command, folder, store), f"{folder}: is a directory")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("device", ["/dev/full", "/dev/zero", "symlink to /dev/full", "symlink to /dev/zero"])
def test_a_device_or_a_symlink_to_one_is_refused(command, device, store, tmp_path, capsys):
    if device.startswith("symlink"):
        target = tmp_path / f"out{_suffix(command)}"
        target.symlink_to(device.split()[-1])
    else:
        target = Path(device)
    if not Path(device.split()[-1]).exists():
        pytest.skip(f"{device} does not exist here")
    _refused(capsys, _argv(command, target, store), f"{target}: is a device")
    if device.startswith("symlink"):
        assert target.is_symlink() and os.readlink(target) == device.split()[-1]  # the link is left as it was


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_is_refused_without_blocking(command, store, tmp_path):
    fifo = tmp_path / f"out{_suffix(command)}"
    os.mkfifo(fifo)
    proc = _cli(_argv(command, fifo, store), timeout=120)  # nobody reads the FIFO: opening it would block
    assert proc.returncode == 2
    _one_line(proc.stderr, command, f"{fifo}: is a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_path_under_a_file_is_refused(command, store, tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    target = tmp_path / "plain" / "sub" / f"out{_suffix(command)}"
    _refused(capsys, _argv(command, target, store), str(target))
    assert (tmp_path / "plain").read_text() == "x"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_name_too_long_is_refused(command, store, tmp_path, capsys):
    target = tmp_path / ("n" * 300 + _suffix(command))
    err = _refused(capsys, _argv(command, target, store), "nnnn")
    assert "too long" in err or "longer than" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl", "runs.duckdb"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_folder_is_refused(command, store, tmp_path, capsys):
    if os.geteuid() != 0:  # permission bits stop an ordinary user
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        try:
            _refused(capsys, _argv(command, folder / f"new{_suffix(command)}", store), "not writable")
            assert list(folder.iterdir()) == []
        finally:
            folder.chmod(0o755)
        return
    # root writes through permission bits: a read-only file system stops it
    proc, small = _in_namespace_fs(tmp_path, _moeproxy(_argv(command, tmp_path / "small" / f"new{_suffix(command)}",
                                                              store)), read_only=True)
    assert proc.returncode == 2, proc.stderr
    _one_line(proc.stderr, command, "not writable")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_is_one_line_and_leaves_the_old_file(command, store, tmp_path):
    """An 8 KiB file system: the report (megabytes) and the export (12 KB) do not fit; the file there before
    is unchanged and no partial file is left beside it."""
    target = tmp_path / "small" / f"out{_suffix(command)}"
    script = f"echo old > {target}\n{_moeproxy(_argv(command, target, store))}\nrc=$?\nls -A {target.parent}\n" \
             f"cat {target}\nexit $rc"
    proc, _ = _in_namespace_fs(tmp_path, script, size="8k")  # the old file takes one of its two pages
    assert proc.returncode == 2, proc.stderr
    _one_line(proc.stderr, command, f"{target}: No space left on device")
    assert proc.stdout.split() == [target.name, "old"]  # the only file there, with its old content


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_is_written_whole_and_replaces_the_old_one(command, store, tmp_path, capsys):
    target = tmp_path / "made" / "here" / f"out{_suffix(command)}"  # missing folders are created
    assert main(_argv(command, target, store)) == 0
    first = target.read_bytes()
    assert first and sorted(p.name for p in target.parent.iterdir()) == [target.name]
    target.write_text("old")
    target.chmod(0o640)
    assert main(_argv(command, target, store)) == 0
    assert target.read_bytes() != b"old" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no temporary file left
    real = tmp_path / f"real{_suffix(command)}"
    real.write_text("old")
    link = tmp_path / f"link{_suffix(command)}"
    link.symlink_to(real)
    assert main(_argv(command, link, store)) == 0
    assert link.is_symlink() and real.read_bytes() != b"old"  # the file the link names is replaced


@pytest.mark.parametrize("given", ["fifo", "/dev/zero", "a directory"])
def test_a_proxy_report_that_is_no_file_is_refused_without_blocking(given, store, tmp_path):
    path = {"fifo": tmp_path / "proxy_report.json", "/dev/zero": Path("/dev/zero"),
            "a directory": tmp_path}[given]
    if given == "fifo":
        os.mkfifo(path)
    proc = _cli(["report", RUN, "--proxy-report", str(path), "-o", str(tmp_path / "pm.html"), "--db", str(store)],
                timeout=120)
    assert proc.returncode == 2
    _one_line(proc.stderr, "report", "proxy_report.json")
    assert str(path)[:40] in proc.stderr and not (tmp_path / "pm.html").exists()


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path):
    target = tmp_path / "new" / "deeper" / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as temp:
            temp.write_text("half")
            raise RuntimeError("the writer failed")
    assert not (tmp_path / "new").exists()  # the folders this write created are gone too
    target.parent.mkdir(parents=True)
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as temp:
            temp.write_text("half")
            raise RuntimeError("the writer failed")
    assert target.read_text() == "old" and sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]
    long_name = tmp_path / ("m" * 250 + ".txt")  # the temporary name must fit the name limit too
    write_text(long_name, "fits")
    assert long_name.read_text() == "fits"
    with pytest.raises(InputError, match="NUL"):
        check_target("a\0b.txt")


# -- report on steps near 2^63 ---------------------------------------------------------------------
@pytest.mark.parametrize("steps", [
    range(9223372036854775000, 9223372036854775807),  # the case: 807 steps up to 2^63 - 2
    [0, 9223372036854775806],  # a span whose bucket arithmetic overflowed 64 bits
    [-9223372036854775808, 0, 9223372036854775807],  # the whole int64 range
], ids=["near-2^63", "0-to-2^63", "int64-range"])
def test_report_on_steps_near_2_63(steps, tmp_path, capsys):
    db = tmp_path / "runs.duckdb"
    assert main(["ingest", str(_log(tmp_path / "big.jsonl", steps)), "--run", "big", "--db", str(db)]) == 0
    target = tmp_path / "big.html"
    assert main(["report", "big", "-o", str(target), "--db", str(db)]) == 0, capsys.readouterr().err
    html = target.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in html
    assert main(["diagnose", "big", "--db", str(db)]) == 0
    assert main(["report", "big", "-o", str(target), "--db", str(db)]) == 0  # with findings too


# -- a failed build leaves no output folder --------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory) -> Path:
    return make_tiny("qwen3_moe", tmp_path_factory.mktemp("tiny") / "qwen3_moe")


def _disagreeing(tiny: Path, folder: Path, field: str, value: int) -> Path:
    src = folder / f"src-{field}"
    shutil.copytree(tiny, src)
    config = json.loads((src / "config.json").read_text())
    config[field] = value
    (src / "config.json").write_text(json.dumps(config))
    return src


@pytest.mark.parametrize("field, value", [("hidden_size", 64), ("moe_intermediate_size", 32)])
def test_a_failed_build_leaves_no_output_folder(field, value, tiny_qwen3, tmp_path, capsys):
    src = _disagreeing(tiny_qwen3, tmp_path, field, value)
    out = tmp_path / "new" / "deeper" / "proxy"  # folders the build would create
    _refused(capsys, ["build", str(src), str(out), "--keep-experts", "4"], "does not load as its config.json")
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"  # a folder that was there before the build stays, with its files
    existing.mkdir()
    (existing / "mine.txt").write_text("mine")
    _refused(capsys, ["build", str(src), str(existing / "proxy"), "--keep-experts", "4"], str(src))
    assert sorted(p.name for p in existing.iterdir()) == ["mine.txt"]
    empty = tmp_path / "empty"  # an empty folder that existed is not removed either
    empty.mkdir()
    _refused(capsys, ["build", str(src), str(empty / "proxy"), "--keep-experts", "4"], str(src))
    assert empty.is_dir() and list(empty.iterdir()) == []


def test_a_good_build_still_writes_its_proxy_and_report(tiny_qwen3, tmp_path, capsys):
    out = tmp_path / "new" / "proxy"
    assert main(["build", str(tiny_qwen3), str(out), "--keep-experts", "4"]) == 0, capsys.readouterr().err
    report = json.loads((out / "proxy_report.json").read_text())
    assert report["verify"]["passed"] is True and report["experts_after"] == 4
    assert sorted(p.name for p in out.parent.iterdir()) == ["proxy"]  # no partial folder or temporary file
