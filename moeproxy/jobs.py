"""Background jobs (proxy builds): a subprocess per job, state in files, progress, cancel.

Lifecycle: ``launch`` validates the parameters, writes ``<jobs root>/<job id>/spec.json`` and
``status.json`` (state ``queued``) and starts ``python -m moeproxy.jobs --job-dir DIR`` with an argv
list (no shell), ``start_new_session=True`` (its own process group, so it outlives the page and
the cancel reaches its children) and an explicit environment. The worker (``main`` below) re-
validates the spec, takes the device lock (one job at a time per device), runs the job, and
rewrites ``status.json`` atomically (``state``, ``stage``, ``done``, ``total``, ``message``,
``heartbeat``) as it goes; its stdout/stderr go to ``log.txt``. Terminal states: ``succeeded``,
``failed``, ``cancelled``; a job whose process died without saying so is reported ``lost``.
``cancel`` sends SIGTERM to the process group (the worker stops between stages and removes any
half-written output) and SIGKILL after a grace period.

Everything lives in the job directory, so jobs survive page reloads, browser sessions and
dashboard restarts; the worker never opens the run database. Job kinds are a registry
(``JOB_KINDS``); ``build`` writes the proxy to ``<job dir>/proxy`` (a path the user cannot choose,
so a job cannot write elsewhere).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from moeproxy.devices import DEVICE_KINDS, DeviceKind
from moeproxy.errors import InputError, MoeproxyError, NotFound
from moeproxy.pids import pid_alive
from moeproxy.proxy.keep import KeepChoice
from moeproxy.registry import Registry

JOBS_ENV = "MOEPROXY_JOBS"
TERMINAL_STATES = ("succeeded", "failed", "cancelled", "lost")
ACTIVE_STATES = ("queued", "running")
# Variables a job inherits; everything else (tokens, keys) stays behind.
_ENV_KEEP = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
             "OMP_NUM_THREADS", "MKL_NUM_THREADS", "HF_HOME", "XDG_CACHE_HOME")
_ENV_KEEP_PREFIXES = ("CUDA_", "ASCEND_", "NPU_", "HCCL_", "NCCL_", "TORCH_")
HEARTBEAT_STALE_S = 600.0
BUILD_OUTPUT = "proxy"  # a build job writes its proxy to <job dir>/proxy, never a path the user chose


def build_output(job_dir: str | Path) -> Path:
    """Where a build job writes its proxy checkpoint."""
    return Path(job_dir) / BUILD_OUTPUT


def build_report_path(job_dir: str | Path) -> Path:
    """The ``proxy_report.json`` a finished build job wrote (``build_output``'s)."""
    from moeproxy.proxy.proxy_report import REPORT_NAME

    return build_output(job_dir) / REPORT_NAME


class BuildJobParams(KeepChoice):
    """A proxy build started from the dashboard: the source checkpoint and the pruning choice
    (``keep_ratio``/``keep_experts``/``top_k`` and their rule: ``KeepChoice``)."""

    model_config = ConfigDict(extra="forbid")

    src: Path
    seed: int = 0
    verify: bool = True
    allowed_roots: list[Path] | None = None  # the dashboard's roots: every file the build reads must be inside

    @field_validator("src")
    @classmethod
    def _absolute(cls, src: Path) -> Path:
        try:
            return src.expanduser().resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
            raise ValueError(f"cannot resolve the checkpoint path: {exc}") from None

    @model_validator(mode="after")
    def _checks(self):
        if self.allowed_roots is not None:
            roots = [Path(r).resolve() for r in self.allowed_roots]
            if not any(self.src == r or self.src.is_relative_to(r) for r in roots):
                raise ValueError(f"{self.src}: outside the allowed roots")
        if not self.src.is_dir():
            raise ValueError(f"{self.src}: not a checkpoint directory")
        if not (self.src / "config.json").is_file():
            raise ValueError(f"{self.src}: no config.json")
        if not any(self.src.glob("*.safetensors")):
            raise ValueError(f"{self.src}: no *.safetensors files (only safetensors checkpoints are read)")
        return self


class JobSpec(BaseModel):
    """What ``spec.json`` holds: the job kind, the device it runs on, its parameters."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(pattern=r"^[0-9a-f]{12}$")
    kind: Literal["build"]
    device: DeviceKind
    params: BuildJobParams
    created_at: str


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def jobs_root(db_path: str | Path | None = None) -> Path:
    """``$MOEPROXY_JOBS``, else ``jobs/`` next to the run database."""
    env = os.environ.get(JOBS_ENV)
    if env:
        return Path(env).expanduser()
    from moeproxy.store.schema import catalog_file, default_db_path, resolve_db

    db = resolve_db(db_path) if db_path and str(db_path) != ":memory:" else default_db_path()
    if not isinstance(db, Path):  # a DuckLake catalog: a local one's folder, else this host's data folder
        db = catalog_file(db) or (Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
                                  / "moeproxy" / "runs")
    return db.parent / "jobs"


def write_status(job_dir: Path, **fields) -> dict:
    """Merge ``fields`` into status.json atomically (write a temp file, then ``os.replace``)."""
    path = job_dir / "status.json"
    status = json.loads(path.read_text()) if path.exists() else {}
    status.update(fields)
    status["updated_at"] = _now()
    tmp = job_dir / f".status.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(status, indent=2))
    os.replace(tmp, path)
    return status


# -- the app side ---------------------------------------------------------------------------------
_CHILDREN: dict[str, subprocess.Popen] = {}  # jobs this process started; polled so they are reaped


def _child_env(device: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    env["HF_HUB_OFFLINE"] = "1"  # no downloads from a job
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def launch(root: str | Path, kind: str, params: BuildJobParams | dict, device: str) -> str:
    """Validate, write the job directory and start the worker; returns the job id.

    Raises ``InputError`` for bad parameters and when another job is active on ``device``.
    """
    JOB_KINDS.lookup(kind)
    if device not in DEVICE_KINDS:
        raise InputError(f"unknown device {device!r}; choose one of {', '.join(DEVICE_KINDS)}")
    try:
        params = BuildJobParams.model_validate(params if isinstance(params, dict) else params.model_dump())
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"job parameter {'.'.join(map(str, err['loc'])) or 'params'}: {err['msg']}") from None
    root = Path(root)
    busy = [j for j in list_jobs(root) if j.get("device") == device and j.get("state") in ACTIVE_STATES]
    if busy:
        raise InputError(f"device {device} is busy with job {busy[0]['job_id']} ({busy[0]['kind']}); "
                         "wait for it or cancel it")
    job_id = uuid.uuid4().hex[:12]
    job_dir = root / job_id
    job_dir.mkdir(parents=True)
    spec = JobSpec(job_id=job_id, kind=kind, device=device, params=params, created_at=_now())
    (job_dir / "spec.json").write_text(spec.model_dump_json(indent=2))
    write_status(job_dir, job_id=job_id, kind=kind, device=device, state="queued", stage="", done=0, total=0,
                 message="starting", created_at=spec.created_at, heartbeat=time.time())
    argv = [sys.executable, "-m", "moeproxy.jobs", "--job-dir", str(job_dir)]
    with open(job_dir / "log.txt", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, env=_child_env(device),
                                cwd=str(job_dir))
    _CHILDREN[job_id] = proc
    write_status(job_dir, pid=proc.pid)
    return job_id


def read_job(root: str | Path, job_id: str) -> dict:
    """The job's status (reconciled: an active job whose process is gone is ``lost``) plus its spec."""
    job_dir = Path(root) / job_id
    status_path = job_dir / "status.json"
    if not status_path.exists():
        raise NotFound(f"no job {job_id!r} under {root}")
    proc = _CHILDREN.get(job_id)
    if proc is not None and proc.poll() is not None:
        _CHILDREN.pop(job_id, None)
    status = json.loads(status_path.read_text())
    if status.get("state") in ACTIVE_STATES:
        started_long_ago = time.time() - float(status.get("heartbeat") or 0) > HEARTBEAT_STALE_S
        if (status.get("pid") and not pid_alive(status["pid"])) or started_long_ago:
            # re-read: the worker may have written its final state between the two reads
            status = json.loads(status_path.read_text())
            if status.get("state") in ACTIVE_STATES:
                status = write_status(job_dir, state="lost",
                                      message="the job process ended without reporting a result; see its log")
    status["job_dir"] = str(job_dir)
    spec_path = job_dir / "spec.json"
    status["spec"] = json.loads(spec_path.read_text()) if spec_path.exists() else None
    return status


def list_jobs(root: str | Path) -> list[dict]:
    """Every job under ``root``, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    jobs = []
    for job_dir in root.iterdir():
        if (job_dir / "status.json").exists():
            try:
                jobs.append(read_job(root, job_dir.name))
            except (OSError, json.JSONDecodeError):
                continue
    return sorted(jobs, key=lambda j: j.get("created_at", ""), reverse=True)


def log_tail(root: str | Path, job_id: str, lines: int = 20) -> str:
    path = Path(root) / job_id / "log.txt"
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 64_000))
        text = fh.read().decode("utf-8", errors="replace")
    # tqdm redraws with carriage returns; keep the last state of each line
    cleaned = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
    return "\n".join(cleaned[-lines:])


def cancel(root: str | Path, job_id: str, grace_s: float = 10.0) -> dict:
    """SIGTERM to the job's process group, SIGKILL after ``grace_s``; returns the final status."""
    status = read_job(root, job_id)
    if status["state"] not in ACTIVE_STATES:
        return status
    pid = status.get("pid")
    if pid and pid_alive(pid):
        try:
            os.killpg(pid, signal.SIGTERM)  # the worker leads its own session: pgid == pid
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and pid_alive(pid):
            proc = _CHILDREN.get(job_id)
            if proc is not None:
                proc.poll()
            time.sleep(0.1)
        if pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    status = read_job(root, job_id)
    if status["state"] in ACTIVE_STATES + ("lost",):
        status = write_status(Path(root) / job_id, state="cancelled", message="cancelled")
        status["job_dir"] = str(Path(root) / job_id)
    return status


def wait(root: str | Path, job_id: str, timeout_s: float, poll_s: float = 0.2) -> dict:
    """Block until the job reaches a terminal state or ``timeout_s`` passes; returns its status."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = read_job(root, job_id)
        if status["state"] in TERMINAL_STATES or time.monotonic() >= deadline:
            return status
        time.sleep(poll_s)


# -- the worker side -------------------------------------------------------------------------------
class JobCancelled(BaseException):
    """Raised in the worker by SIGTERM; a BaseException so library code's ``except Exception`` lets it through."""


def _run_build(job_dir: Path, spec: JobSpec, progress: Callable[[str, int, int, str], None]) -> dict:
    from moeproxy.proxy.build import BuildSpec, build_proxy
    from moeproxy.proxy.proxy_report import ProxyReport

    p = spec.params
    build = BuildSpec(src=p.src, out=build_output(job_dir), keep_ratio=p.keep_ratio, keep_experts=p.keep_experts,
                      top_k=p.top_k, device=spec.device, seed=p.seed, verify=p.verify, allowed_roots=p.allowed_roots)
    print(f"building proxy of {p.src} on {spec.device} into {build.out}", flush=True)
    report = ProxyReport.model_validate(build_proxy(build, progress=progress))
    print(f"done: {report.headline()}", flush=True)
    return {"output": report.output, "report": str(build_report_path(job_dir)),
            "verify_passed": report.verify_passed, "experts_before": report.experts_before,
            "experts_after": report.experts_after}


JOB_KINDS: Registry[Callable[[Path, JobSpec, Callable], dict]] = Registry("job kind")
JOB_KINDS.add("build", _run_build)


def run_job(job_dir: str | Path) -> int:
    """Worker entry: run the job in ``job_dir``; returns the process exit status."""
    job_dir = Path(job_dir)
    try:
        spec = JobSpec.model_validate_json((job_dir / "spec.json").read_text())
    except (OSError, ValidationError) as exc:
        write_status(job_dir, state="failed", message=f"invalid spec.json: {str(exc).splitlines()[0]}")
        return 2

    def on_sigterm(signum, frame):
        raise JobCancelled()

    signal.signal(signal.SIGTERM, on_sigterm)
    lock_dir = job_dir.parent / ".locks"
    lock_dir.mkdir(exist_ok=True)
    lock = open(lock_dir / f"{spec.device}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        write_status(job_dir, state="failed", message=f"device {spec.device} is busy with another job")
        return 3
    write_status(job_dir, state="running", pid=os.getpid(), started_at=_now(), heartbeat=time.time(),
                 message="started")

    def progress(stage: str, done: int, total: int, message: str) -> None:
        write_status(job_dir, stage=stage, done=int(done), total=int(total), message=str(message),
                     heartbeat=time.time())
        print(f"[{stage}] {done}/{total} {message}", flush=True)

    try:
        result = JOB_KINDS[spec.kind](job_dir, spec, progress)
    except JobCancelled:
        print("cancelled", flush=True)
        write_status(job_dir, state="cancelled", message="cancelled", finished_at=_now())
        return 130
    except Exception as exc:  # any failure is reported in status.json and the log
        if isinstance(exc, MoeproxyError):  # a bad checkpoint: its one-line error, no traceback
            print(f"error: {exc}", flush=True)
        else:
            traceback.print_exc()
        write_status(job_dir, state="failed", message=f"{type(exc).__name__}: {exc}".splitlines()[0],
                     finished_at=_now())
        return 1
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    state = "succeeded" if result.get("verify_passed") in (True, None) else "failed"
    write_status(job_dir, state=state, result=result, finished_at=_now(),
                 message="finished" if state == "succeeded" else "proxy verification failed")
    return 0 if state == "succeeded" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeproxy.jobs", description="run one background job")
    parser.add_argument("--job-dir", required=True)
    args = parser.parse_args(argv)
    return run_job(args.job_dir)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
