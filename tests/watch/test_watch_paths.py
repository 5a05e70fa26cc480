"""The watcher's paths under hostile use (issue 22): alerts paths refused up front with one line, a
full disk while appending, its own outputs never followed, the alerts file repaired and never given
an alert twice, a webhook that cannot redirect, flood, stall or leak its URL, one watcher per log,
copy-and-truncate rotation, and a bounded number of open files for any number of logs."""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pytest

from moeproxy.cli import main
from moeproxy.store import Store
from moeproxy.watch import WatchConfig, Watcher
from moeproxy.watch.webhook import WebhookSender, redact_url


def jsonl(steps, bad_from=None) -> str:
    return "".join(json.dumps({"step": s, "loss": 2.0 - s / 1000,
                               "grad_norm": float("inf") if bad_from and s >= bad_from else 1.0}) + "\n" for s in steps)


def failing_run(tmp_path, name="bad"):
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.jsonl").write_text(jsonl(range(1, 30), bad_from=20))
    return run


def make_watcher(tmp_path, *paths, db="runs.duckdb", **options):
    w = Watcher(WatchConfig(paths=[str(p) for p in paths], **options), Store(tmp_path / db), io.StringIO(),
                io.StringIO())
    w.start()
    return w


def loss_steps(db) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return sorted(con.execute("SELECT step, attempt FROM scalars WHERE metric = 'loss'").fetchall())


def cli(args, capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 1. alerts paths refused up front -------------------------------------------------------------------
@pytest.mark.parametrize("case", ["directory", "under-a-file", "fifo", "the-followed-log", "a-log-in-the-folder"])
def test_a_bad_alerts_path_is_one_line_and_exit_2(tmp_path, capsys, case):
    run = failing_run(tmp_path)
    log = run / "metrics.jsonl"
    watched = str(run)
    if case == "directory":
        alerts, expected = tmp_path, "is a directory"
    elif case == "under-a-file":
        (tmp_path / "plain").write_text("x")
        alerts, expected = tmp_path / "plain" / "alerts.jsonl", "on its path is a file"
    elif case == "fifo":
        alerts, expected = tmp_path / "pipe", "not a regular file"
        os.mkfifo(alerts)
    elif case == "the-followed-log":
        alerts, expected, watched = log, "a log this watcher follows", str(log)
    else:
        alerts, expected = log, "is a log in the watched folder"
    before = log.read_bytes()
    code, out, err = cli(["watch", watched, "--db", str(tmp_path / "runs.duckdb"), "--alerts", str(alerts), "--once"],
                         capsys)
    assert code == 2
    assert expected in one_error_line(err)
    assert log.read_bytes() == before  # nothing written into the training log
    assert not (tmp_path / "runs.duckdb").exists()  # refused before anything was stored


def test_a_fifo_alerts_path_never_blocks_a_real_process(tmp_path):
    run = failing_run(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(tmp_path / "r.duckdb"),
                           "--alerts", str(tmp_path / "pipe"), "--once"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a regular file" in proc.stderr


def _without_root_powers(command: list[str]) -> list[str]:
    """Root ignores permission bits: drop the capabilities that let it, where we are root."""
    if os.geteuid() != 0:
        return command
    if shutil.which("capsh") is None:
        pytest.skip("running as root without capsh: permission bits cannot be tested")
    return ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", 'exec "$@"', "sh", *command]


def test_an_unwritable_alerts_folder_is_one_line(tmp_path):
    run = failing_run(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = subprocess.run(_without_root_powers(
            [sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(tmp_path / "r.duckdb"),
             "--alerts", str(locked / "alerts.jsonl"), "--once"]), capture_output=True, text=True, timeout=60)
    finally:
        locked.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert "cannot be written (Permission denied)" in one_error_line(proc.stderr)


def _in_private_mount(tmp_path, options: str, script: str) -> subprocess.CompletedProcess:
    """``script`` run by sh with a tmpfs mounted (``options``) on tmp_path/disk in a mount namespace
    of its own (gone with the process); skipped where this machine cannot mount."""
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {disk}"],
                           capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no private tmpfs mounts here (unshare/mount refused)")
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o {options} tmpfs {disk} && {script}"],
                          capture_output=True, text=True, timeout=120)


def test_a_read_only_alerts_folder_is_one_line(tmp_path):
    run = failing_run(tmp_path)
    proc = _in_private_mount(tmp_path, "ro,size=64k", f"exec {sys.executable} -m moeproxy watch {run} --db "
                             f"{tmp_path / 'r.duckdb'} --alerts {tmp_path / 'disk' / 'alerts.jsonl'} --once")
    assert proc.returncode == 2, proc.stderr
    assert "Read-only file system" in one_error_line(proc.stderr)


def test_a_full_disk_while_appending_is_one_line_and_the_watcher_goes_on(tmp_path):
    run = failing_run(tmp_path)
    disk = tmp_path / "disk"
    proc = _in_private_mount(tmp_path, "size=16k", f"(head -c 1000000 /dev/zero > {disk}/fill 2>/dev/null; true) && "
                             f"exec {sys.executable} -m moeproxy watch {run} --db {tmp_path / 'r.duckdb'} "
                             f"--alerts {disk / 'alerts.jsonl'} --once")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if "No space left on device" in x]
    assert "cannot append" in line and "written when the file can be appended to again" in line
    assert "ALERT run 'bad': overflow from step 20" in proc.stdout
    assert len(Store(tmp_path / "r.duckdb").alerts("bad")) == 1  # in the store: written at the next chance


def test_a_failed_append_leaves_no_partial_line_and_is_written_when_space_is_back(tmp_path):
    run = failing_run(tmp_path)
    alerts = tmp_path / "alerts.jsonl"
    w = make_watcher(tmp_path, run, alerts=str(alerts))
    real = w.sink._write_all

    def disk_full(fd, data):  # as a full disk does: some bytes go out, then ENOSPC
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    w.sink._write_all = disk_full
    w.cycle()
    assert alerts.read_bytes() == b""  # the cut line was taken back at once
    assert w.err.getvalue().count("No space left on device") == 1
    w.cycle()  # still full: said once, the watcher goes on
    assert w.err.getvalue().count("No space left on device") == 1
    w.sink._write_all = real
    w.cycle()
    (alert,) = [json.loads(x) for x in alerts.read_text().splitlines()]
    assert (alert["verdict"], alert["onset_step"]) == ("overflow", 20)
    assert "appended again; 1 alert written" in w.err.getvalue()
    w.close()


# -- 2. the watcher's own outputs are never followed ---------------------------------------------------
def test_own_outputs_inside_the_watched_folder_are_never_followed(tmp_path):
    run = failing_run(tmp_path)
    (run / "alerts.jsonl").write_text("")
    for _ in range(3):  # later passes find the alerts, the database and the output the first one wrote
        with open(run / "watch.out", "a") as out:  # `moeproxy watch run/ >> run/watch.out`
            proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run), "--db",
                                   str(run / "runs.duckdb"), "--alerts", str(run / "alerts.jsonl"), "--once"],
                                  stdout=out, stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    with duckdb.connect(str(run / "runs.duckdb"), read_only=True) as con:
        assert [p for (p,) in con.execute("SELECT path FROM sources").fetchall()] == [str(run / "metrics.jsonl")]
    assert len(alerts := (run / "alerts.jsonl").read_text().splitlines()) == 1, alerts


# -- 3. the alerts file is repaired and never gets an alert twice -------------------------------------
def _first_alert(tmp_path, run) -> dict:
    alerts = tmp_path / "alerts.jsonl"
    w = make_watcher(tmp_path, run, alerts=str(alerts))
    w.cycle()
    w.close()
    (alert,) = [json.loads(x) for x in alerts.read_text().splitlines()]
    return alert


def test_a_cut_last_line_is_dropped_and_the_alert_written_whole_once(tmp_path):
    run = failing_run(tmp_path)
    alert = _first_alert(tmp_path, run)
    alerts = tmp_path / "alerts.jsonl"
    whole = alerts.read_bytes()
    alerts.write_bytes(whole[: len(whole) // 2])  # killed mid-write
    w = make_watcher(tmp_path, run, alerts=str(alerts))
    w.cycle()
    w.cycle()
    w.close()
    assert [json.loads(x) for x in alerts.read_text().splitlines()] == [alert]
    assert alerts.read_bytes().endswith(b"\n")
    assert "last line was cut short" in w.err.getvalue()


def test_a_last_line_without_its_newline_is_completed_not_repeated(tmp_path):
    run = failing_run(tmp_path)
    alert = _first_alert(tmp_path, run)
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_bytes(alerts.read_bytes().rstrip(b"\n"))
    w = make_watcher(tmp_path, run, alerts=str(alerts))
    w.cycle()
    w.close()
    assert alerts.read_text().splitlines() == [json.dumps(alert)]
    assert alerts.read_bytes().endswith(b"\n")


def test_an_alert_in_the_file_is_never_written_again_after_a_restart(tmp_path):
    run = failing_run(tmp_path)
    alert = _first_alert(tmp_path, run)
    alerts = tmp_path / "alerts.jsonl"
    # the same run watched into another store: the same (run, verdict, onset) is raised there
    w = make_watcher(tmp_path, run, db="other.duckdb", alerts=str(alerts))
    w.cycle()
    w.close()
    assert [json.loads(x) for x in alerts.read_text().splitlines()] == [alert]


# -- 4. the webhook -----------------------------------------------------------------------------------
class _Hooks:
    """Local HTTP servers in threads: each path is one behaviour."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict]] = []
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                hooks.seen.append((self.path, dict(self.headers)))
                if self.path.startswith("/redirect"):
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{hooks.port}/metadata/secret-token")
                    self.end_headers()
                elif self.path.startswith("/huge"):
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 30))
                    self.end_headers()
                    try:
                        chunk = b"x" * (1 << 20)
                        for _ in range(1024):
                            self.wfile.write(chunk)
                    except OSError:
                        pass  # the watcher stopped reading: as it should
                elif self.path.startswith("/slow"):
                    time.sleep(3)
                    self.send_response(204)
                    self.end_headers()
                else:
                    self.send_response(204)
                    self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hooks():
    h = _Hooks()
    yield h
    h.close()


def _send(url: str, timeout: float = 5.0, retries: int = 0) -> tuple[str, float]:
    err = io.StringIO()
    sender = WebhookSender(url, timeout, retries, err)
    started = time.monotonic()
    sender.send({"run": "r", "verdict": "overflow", "onset_step": 1})
    sender.close(30)
    return err.getvalue(), time.monotonic() - started


def test_a_redirect_is_reported_and_not_followed(hooks):
    err, _ = _send(f"http://127.0.0.1:{hooks.port}/redirect/abc")
    assert [p for p, _ in hooks.seen] == ["/redirect/abc"]  # the metadata path was never requested
    assert "answered 302 (a redirect; redirects are not followed)" in err
    assert "secret-token" not in err and "/redirect" not in err


def test_a_huge_answer_is_read_only_up_to_a_bound(hooks):
    import tracemalloc

    tracemalloc.start()
    err, took = _send(f"http://127.0.0.1:{hooks.port}/huge")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert err == "" and took < 10
    assert peak < 16 << 20  # not the 1 GiB the server offers


def test_a_webhook_that_does_not_answer_times_out(hooks):
    err, took = _send(f"http://127.0.0.1:{hooks.port}/slow", timeout=0.5)
    assert "not delivered after 1 try (timed out)" in err
    assert took < 2.5


def test_webhook_credentials_and_path_secrets_are_sent_but_never_printed(hooks, tmp_path):
    url = f"http://user:hunter2@127.0.0.1:{hooks.port}/hook/T0KEN?key=S3CRET"
    assert redact_url(url) == f"http://127.0.0.1:{hooks.port}/…"
    run = failing_run(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(tmp_path / "r.duckdb"),
                           "--webhook", url, "--once"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ((path, headers),) = hooks.seen
    assert path == "/hook/T0KEN?key=S3CRET" and headers["Authorization"] == "Basic dXNlcjpodW50ZXIy"
    # a dead one: the failure line names the host, not the secrets
    dead = "http://user:hunter2@127.0.0.1:1/hook/T0KEN?key=S3CRET"
    proc = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(tmp_path / "s.duckdb"),
                           "--webhook", dead, "--once"], capture_output=True, text=True, timeout=120)
    bad = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(tmp_path / "t.duckdb"),
                          "--webhook", "ftp://user:hunter2@host/T0KEN", "--once"], capture_output=True, text=True,
                         timeout=120)
    assert "webhook http://127.0.0.1:1/…: alert for run 'bad' not delivered" in proc.stderr
    assert bad.returncode == 2 and "ftp://host/…" in bad.stderr
    for text in (proc.stdout, proc.stderr, bad.stdout, bad.stderr):
        assert "hunter2" not in text and "T0KEN" not in text and "S3CRET" not in text


# -- 5. one watcher per log -----------------------------------------------------------------------------
def test_a_second_watcher_of_a_followed_log_is_refused_with_the_first_ones_pid(tmp_path):
    run = tmp_path / "job"
    run.mkdir()
    (run / "metrics.jsonl").write_text(jsonl(range(1, 101)))
    db = tmp_path / "runs.duckdb"
    first_out = open(tmp_path / "first.out", "w")
    first = subprocess.Popen([sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(db), "--interval", "0.2"],
                             stdout=first_out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "watching" not in (tmp_path / "first.out").read_text():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.1)
        for target in (run, run / "metrics.jsonl"):  # the folder, or the file itself
            second = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(target), "--db", str(db), "--once"],
                                    capture_output=True, text=True, timeout=120)
            assert second.returncode == 2
            line = one_error_line(second.stderr)
            assert f"PID {first.pid}" in line and "already followed" in line
        with open(run / "metrics.jsonl", "a") as fh:
            fh.write(jsonl(range(101, 151)))
        while Store(db).runs()["last_step"].max() != 150:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        first_out.close()
    # the first one stopped: a second one takes the log up where it was
    again = subprocess.run([sys.executable, "-m", "moeproxy", "watch", str(run), "--db", str(db), "--once"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "taken up at byte" in again.stdout, again.stderr
    assert loss_steps(db) == [(s, 0) for s in range(1, 151)]


def test_two_watchers_in_one_process_do_not_share_a_log(tmp_path):
    run = failing_run(tmp_path)
    w = make_watcher(tmp_path, run)
    with pytest.raises(Exception, match=f"PID {os.getpid()}"):
        make_watcher(tmp_path, run)
    w.cycle()
    w.close()
    make_watcher(tmp_path, run).close()  # released on close


# -- 6. copy-and-truncate rotation --------------------------------------------------------------------
@pytest.mark.parametrize("append_mode", [True, False], ids=["o_append-writer", "writer-at-its-old-offset"])
@pytest.mark.parametrize("copy_inside", [True, False], ids=["copy-in-the-folder", "copy-elsewhere"])
def test_copy_and_truncate_loses_and_doubles_no_step(tmp_path, append_mode, copy_inside):
    run = tmp_path / "job"
    run.mkdir()
    log = run / "metrics.jsonl"
    fh = open(log, "a" if append_mode else "w")
    w = make_watcher(tmp_path, run)
    fh.write(jsonl(range(1, 151)))
    fh.flush()
    w.cycle()
    fh.write(jsonl(range(151, 201)))  # written, not yet read when the log is rotated
    fh.flush()
    shutil.copy(log, run / "metrics.jsonl.1" if copy_inside else tmp_path / "archived.jsonl")
    os.truncate(log, 0)
    fh.write(jsonl(range(201, 401)))
    fh.flush()
    w.cycle()
    w.cycle()
    fh.close()
    w.close()
    steps = [s for s, _ in loss_steps(tmp_path / "runs.duckdb")]
    if copy_inside:
        assert steps == list(range(1, 401))  # every step once
    else:  # 151-200 were only ever in the copy, which is not watched
        assert steps == list(range(1, 151)) + list(range(201, 401))
    assert "malformed" not in w.err.getvalue()


def test_copy_and_truncate_while_the_watcher_was_stopped(tmp_path):
    run = tmp_path / "job"
    run.mkdir()
    log = run / "metrics.jsonl"
    log.write_text(jsonl(range(1, 201)))
    w = make_watcher(tmp_path, run)
    w.cycle()
    w.close()
    with open(log, "a") as fh:
        fh.write(jsonl(range(201, 251)))
    shutil.copy(log, run / "metrics.jsonl.1")
    log.write_text(jsonl(range(251, 401)))
    w = make_watcher(tmp_path, run)
    w.cycle()
    w.cycle()
    w.close()
    assert [s for s, _ in loss_steps(tmp_path / "runs.duckdb")] == list(range(1, 401))


# -- 7. a bounded number of open files ------------------------------------------------------------------
LIMITED = r"""
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
from moeproxy.store import Store
from moeproxy.watch import WatchConfig, Watcher
root, db, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = len(os.listdir("/proc/self/fd"))  # the interpreter's own, before the watcher holds any
w = Watcher(WatchConfig(paths=[root]), Store(db))
w.start()
w.cycle()
most = len(os.listdir("/proc/self/fd"))
for i in range(0, count, 100):  # a metric line in every hundredth file
    with open(os.path.join(root, f"rank{i:05d}.jsonl"), "a") as fh:
        fh.write(json.dumps({"step": i, "loss": 1.0}) + "\n")
w.cycle()
most = max(most, len(os.listdir("/proc/self/fd")))
print("BASE", base, "FOLLOWED", len(w.files), "MOST_OPEN", most)
w.close()
"""


def test_thousands_of_logs_are_followed_with_a_bounded_number_of_descriptors(tmp_path):
    root = tmp_path / "team"
    root.mkdir()
    count = 3000
    for i in range(count):
        (root / f"rank{i:05d}.jsonl").write_text('{"event": "start"}\n')
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(root), str(tmp_path / "runs.duckdb"), str(count)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Too many open files" not in proc.stdout + proc.stderr
    base, followed, most = (int(x) for x in proc.stdout.split()[-5::2])
    assert followed == count and most <= 64
    # the limit of 64 alone cannot fail here: the watcher holds at most a quarter of it (16) for the
    # followed files, plus the store's connection (a few descriptors), above the interpreter's own
    assert most - base <= 64 // 4 + 8, (base, most)
    assert loss_steps(tmp_path / "runs.duckdb") == [(i, 0) for i in range(0, count, 100)]
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 64  # the limit was lowered only in the child


def test_a_log_at_moe_width_is_watched_without_a_format_option(tmp_path):
    """Per-layer, per-expert routing loads of a 48-layer, 64-expert model: records of over 3,000
    metrics (first line ~170 KiB, wider than the 64 KiB head) are detected on the first look,
    as ingest detects them, and every metric is stored."""
    log = tmp_path / "verl.jsonl"
    with open(log, "w") as fh:
        for step in range(1, 13):
            data = {"actor/entropy": 0.5, "critic/score/mean": 0.3 + 0.01 * step, "actor/grad_norm": 0.2}
            data.update({f"routing/layer_{l}/expert_{e}/load": (l * 64 + e + step) % 7 / 7
                         for l in range(48) for e in range(64)})
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
    assert log.stat().st_size / 12 > 128 * 1024
    db = tmp_path / "runs.duckdb"
    store = Store(db)
    Watcher(WatchConfig(paths=[str(log)], run="wide"), store).run(once=True)
    runs = store.runs().set_index("run")
    assert runs.loc["wide", "steps"] == 12 and runs.loc["wide", "format"] == "verl-jsonl"
    with store.read() as con:
        loads = con.execute("SELECT count(*) FROM routing").fetchone()[0] + con.execute(
            "SELECT count(*) FROM scalars WHERE metric LIKE 'routing/%'").fetchone()[0]
    assert loads == 12 * 48 * 64


def test_a_retry_that_fails_midway_keeps_only_the_alerts_not_yet_written(tmp_path):
    import io

    from moeproxy.watch.alerts import AlertSink

    path = tmp_path / "alerts.jsonl"
    sink = AlertSink(path, out=io.StringIO(), err=io.StringIO())
    alerts = [{"run": f"r{i}", "verdict": "overflow", "onset_step": i, "severity": "critical",
               "confidence": "high", "evidence": "x"} for i in range(3)]
    real_append, failing = sink._append, {"r1"}

    def append(alert):  # the disk refuses the second alert once, as a full disk would
        if alert["run"] in failing:
            failing.discard(alert["run"])
            raise OSError(28, "No space left on device")
        real_append(alert)

    sink._append = append
    sink.unwritten = list(alerts)
    sink.retry()
    assert [a["run"] for a in sink.unwritten] == ["r1", "r2"]   # r0 is written; not queued again
    sink.retry()
    assert sink.unwritten == []
    assert "2 alerts written" in sink.err.getvalue()
    assert [json.loads(line)["run"] for line in path.read_text().splitlines()] == ["r0", "r1", "r2"]


@pytest.mark.parametrize("minutes", ["0", "-1", "20000"])
def test_a_compaction_period_out_of_range_is_one_line_and_exit_2(tmp_path, capsys, minutes):
    run = failing_run(tmp_path)
    code, out, err = cli(["watch", str(run), "--db", str(tmp_path / "runs.duckdb"), "--compact-minutes", minutes,
                          "--once"], capsys)
    assert code == 2
    assert "compact_minutes must be more than 0 and at most 10080" in one_error_line(err)


def test_a_stop_signal_that_lands_inside_the_wait_sets_the_event_without_its_lock():
    # a signal handler runs in the main thread between two bytecodes, possibly while stop.wait()
    # holds the event's non-reentrant lock: the handler must not take it (a watcher that ignored
    # SIGTERM under load). Here the lock is held while the handler runs, as in that window
    import threading

    from moeproxy.commands.watch import SignalStop

    stop = threading.Event()
    handler = SignalStop(stop)
    try:
        with stop._cond:  # the window: the event's lock held by the thread the signal interrupts
            handler(15, None)  # returns at once (stop.set() here would wait forever)
            assert not stop.is_set()
        assert stop.wait(5), "the relay thread set the event once the lock was let go"
    finally:
        handler.close()
    quiet = threading.Event()
    SignalStop(quiet).close()  # closing without a signal ends the relay and sets nothing
    assert not quiet.is_set()
