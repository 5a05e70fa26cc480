"""Hostile input against `moeproxy ingest`, as a user with bad files would try it: prints, per
category, how many inputs gave a clean outcome (a correct ingest, a dropped-and-named record or a
one-line error), a wrong or silent outcome (exit 0 with a value that is not in the file, or data
dropped without a word), a traceback, or a hang.

    python bench/hostile_ingest.py [--code DIR] [--timeout S] [--only CATEGORY]

``--code DIR`` runs another checkout of moeproxy (e.g. ``git archive HEAD | tar -x -C DIR``) to
measure before and after a change. Every case runs ``python -m moeproxy ingest`` in a fresh process
with a scratch database.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent


class Case:
    def __init__(self, category, name, build, check=None, args=(), during=None, shell=None):
        self.category, self.name, self.build, self.check = category, name, build, check
        self.args, self.during, self.shell = list(args), during, shell


def stored(db: Path) -> dict:
    if not db.exists():
        return {}
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT step, metric, value, attempt FROM scalars").fetchall()
    except duckdb.Error:
        rows = []
    con.close()
    return {(s, m, a): v for s, m, v, a in rows}


def same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def run_ingest(code: Path, paths, db: Path, args=(), timeout=10.0, during=None, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(code), MOEPROXY_DB=str(db))
    cmd = [sys.executable, "-m", "moeproxy", "ingest", *map(str, paths), "--db", str(db), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=cwd or code, start_new_session=True)
    if during:
        threading.Thread(target=during, daemon=True).start()
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return None, "", ""


# --- file builders -----------------------------------------------------------------------

LINE_FORMATS = {
    "text": lambda s: f"step={s} loss={3.21 + s / 1000:.5f} lr=3.5e-4",
    "megatron": lambda s: f" iteration {s:>8}/ 1000 | lm loss: {3.21 + s / 1000:.6E} | grad norm: 41.{s:03d} |",
    "verl-console": lambda s: f"step:{s} - actor/grad_norm:{41.5 + s / 1000:.4f} - critic/score/mean:0.{s:03d}",
    "printed-dicts": lambda s: f"{{'loss': {3.21 + s / 1000:.4f}, 'grad_norm': 12.{s:02d}5, 'step': {s}}}",
    "mindspeed-rl": lambda s: f"iteration: {s} / 100 | actor/pg_loss : {0.1 + s / 1000:.4f} | grad_norm : 12.35{s}",
    "jsonl": lambda s: json.dumps({"step": s, "loss": 3.21 + s / 1000, "lr": 3e-4}),
    "verl-jsonl": lambda s: json.dumps({"step": s, "data": {"actor/grad_norm": 41.5 + s / 1000}}),
    "csv": lambda s: f"{s},{3.21 + s / 1000:.5f},12.35" if s else "step,loss,grad_norm",
}


def truncation_cases() -> list[Case]:
    cases = []
    for fmt, line in LINE_FORMATS.items():
        first = 0 if fmt == "csv" else 1
        full = "".join(line(s) + "\n" for s in range(first, 6))
        last = line(5)
        # cut points inside the last line: after each digit / dot / 'e' of its second half
        cuts = [i for i in range(len(last) // 2, len(last)) if last[i - 1] in "0123456789.eE-"][:6]
        for cut in cuts:
            text = full[: len(full) - len(last) - 1 + cut]
            cases.append(Case("truncated last line", f"{fmt} cut at {cut}",
                              build=lambda d, text=text: _write(d / "cut.log", text),
                              check=_values_from(full)))
    return cases


def _write(path: Path, data) -> list[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return [path]


_TRUTH: dict[str, dict] = {}


def _values_from(full_text: str):
    """Check: every stored value is the uncut file's value at that step and metric."""

    def check(code, db, out, err, d):
        if full_text not in _TRUTH:
            p = d / "full" / "full.log"
            _write(p, full_text)
            run_ingest(code, [p], d / "full.duckdb")
            _TRUTH[full_text] = stored(d / "full.duckdb")
        truth = _TRUTH[full_text]
        got = stored(db)
        for key, value in got.items():
            if key not in truth or not same(truth[key], value):
                return f"stored {key} = {value}, the file says {truth.get(key)}"
        missing = len(truth) - len(got)
        if missing and not any(w in (out + err).lower() for w in ("line", "skipped", "truncated", "incomplete")):
            return f"{missing} values dropped without a word"
        return None

    return check


def growing_cases() -> list[Case]:
    def big(d: Path) -> list[Path]:
        line = " iteration {:>8}/ 99999999 | consumed samples: 1 | lm loss: 3.215E+00 | grad norm: 1.234 | padding: {} |\n"
        p = d / "big.log"
        with open(p, "w") as fh:
            s = 1
            while fh.tell() < 17 << 20:
                fh.write("".join(line.format(s + i, "x" * 20) for i in range(1000)))
                s += 1000
        d.joinpath("n").write_text(str(s - 1))
        return [p]

    def append(d: Path):
        def go():
            time.sleep(0.3)
            n = int(d.joinpath("n").read_text())
            with open(d / "big.log", "a") as fh:
                for i in range(1, 1001):
                    fh.write(f" iteration {n + i:>8}/ 99999999 | lm loss: 2.0E+00 | grad norm: 1.0 |\n")
        return go

    def replace(d: Path):
        def go():
            time.sleep(0.3)
            tmp = d / "new.log"
            # one step per line, as in the file it replaces: an ingest that opens the file only after
            # the replacement (a slow start on a loaded machine) reads it whole, consistently
            tmp.write_text("".join(f" iteration {i:>8}/ 10 | lm loss: 9.0E+00 | grad norm: 9.0 |\n" for i in range(1, 11)))
            os.replace(tmp, d / "big.log")
        return go

    def truncate(d: Path):
        def go():
            time.sleep(0.3)
            os.truncate(d / "big.log", 1 << 20)
        return go

    def consistent(code, db, out, err, d):
        con = duckdb.connect(str(db), read_only=True)
        row = con.execute("SELECT sha256 FROM sources").fetchone()
        n_steps = con.execute("SELECT count(DISTINCT step) FROM scalars").fetchone()[0]
        cols = [c[0] for c in con.execute("DESCRIBE sources").fetchall()]
        length = con.execute("SELECT bytes FROM sources").fetchone()[0] if "bytes" in cols else None
        con.close()
        import hashlib

        data = (d / "big.log").read_bytes()
        if length is None:
            return "the source record does not say how many bytes were parsed"
        if hashlib.sha256(data[:length]).hexdigest() != row[0]:
            return "sha256 is not that of the bytes parsed"
        if data[:length].count(b"\n") != n_steps:
            return f"{n_steps} steps stored, {data[:length].count(b'iteration')} in the bytes parsed"
        return None

    return [Case("growing file", name, build=big, check=consistent, during=fn)
            for name, fn in (("appended during the read", append), ("replaced during the read", replace),
                             ("truncated during the read", truncate))]


def _tb_file(d: Path, steps: int = 100) -> Path:
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(d / "tb"))
    for s in range(steps):
        w.add_scalar("loss", 1.0 + s, s)
    w.close()
    return next((d / "tb").glob("events.out.tfevents.*"))


def tensorboard_cases() -> list[Case]:
    def corrupt(offset_fraction, what):
        def build(d):
            p = _tb_file(d)
            data = bytearray(p.read_bytes())
            if what == "truncate":
                data = data[: int(len(data) * offset_fraction)]
            else:
                data[int(len(data) * offset_fraction)] ^= 0xFF
            p.write_bytes(bytes(data))
            return [p]
        return build

    def reported(code, db, out, err, d):
        n = len({k[0] for k in stored(db)})
        if n < 100 and "offset" not in (out + err):
            return f"{n} of 100 steps stored without a word"
        return None

    cases = []
    for frac in (0.3, 0.5, 0.7, 0.9):
        cases.append(Case("tensorboard corrupt", f"byte flipped at {frac:.0%}", corrupt(frac, "flip"), reported))
        cases.append(Case("tensorboard corrupt", f"cut at {frac:.0%}", corrupt(frac, "truncate"), reported))
    return cases


def directory_cases() -> list[Case]:
    def build(bad_name, bad_content):
        def b(d):
            run = d / "run"
            _write(run / "good.jsonl", "".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 9)))
            _write(run / bad_name, bad_content)
            return [run]
        return b

    def named(bad_name):
        def check(code, db, out, err, d):
            return None if bad_name in out + err else f"{bad_name} skipped without a word"
        return check

    bad = {"malformed.jsonl": '{"step": 1, "loss": 1}\n{"step": 2, "loss": ,}\n{"step": 3, "loss": 1}\n',
           "notes.txt": "nothing to see\n", "blob.bin": bytes(range(256)) * 20, "empty.log": "",
           "latin1.log": "step=1 loss=1 caf\xe9\n".encode("latin-1")}
    cases = []
    for name, content in bad.items():
        cases.append(Case("directory member", name, build(name, content), named(name)))
        cases.append(Case("directory member", name + " --json", build(name, content), named(name), args=["--json"]))
    return cases


def restart_cases() -> list[Case]:
    def one_file(d):
        return _write(d / "r.jsonl", "".join(json.dumps({"step": 1, "loss": float(i)}) + "\n" for i in range(40000)))

    def split(d):
        a = _write(d / "a" / "r.jsonl", "".join(json.dumps({"step": 1, "loss": float(i)}) + "\n" for i in range(20000)))
        b = _write(d / "b" / "r.jsonl", "".join(json.dumps({"step": 1, "loss": -float(i)}) + "\n" for i in range(20000)))
        return a + b

    def latest(expected_value, n):
        def check(code, db, out, err, d):
            got = stored(db)
            if len(got) != n:
                return f"{len(got)} values stored, {n} in the files"
            top = max(got, key=lambda k: k[2])
            if not same(got[top], expected_value):
                return f"latest attempt holds {got[top]}, the file's last value is {expected_value}"
            return None
        return check

    return [Case("restarts > 32767", "40,000 in one file", one_file, latest(39999.0, 40000), args=["--run", "r"]),
            Case("restarts > 32767", "20,000 + 20,000 in two files", split, latest(-19999.0, 40000), args=["--run", "r"])]


def minor_cases() -> list[Case]:
    def nul(d):
        body = "".join(f"step={s} loss={1 + s / 1e4:.4f}\n" for s in range(1, 6000))
        return _write(d / "nul.log", (body + "step=6000 loss=\x001.5\n" + "step=6001 loss=2.0\n").encode())

    def no_value(step_repr):
        def check(code, db, out, err, d):
            got = stored(db)
            bad = [k for k in got if k[0] == 1 and step_repr == "1.5"]
            return f"stored at step {bad[0][0]}" if bad else None
        return check

    def nul_check(code, db, out, err, d):
        # named by its line, or by its byte range (the crash-padding warning: "bytes 130886-130887: 1 NUL byte(s)")
        said = out + err
        return None if "line 6000" in said or re.search(r"bytes \d+-\d+: \d+ NUL byte", said) else \
            "NUL bytes after 64 KiB accepted without a word"

    cases = [Case("NUL / fractional / int64", "NUL after 64 KiB", nul, nul_check)]
    frac = {
        "jsonl": '{"step": 0, "loss": 1.0}\n{"step": 1.5, "loss": 2.0}\n',
        "printed-dicts": "{'loss': 1.0, 'step': 0}\n{'loss': 2.0, 'step': 1.5}\n",
        "csv": "step,loss\n0,1.0\n1.5,2.0\n",
        "verl-jsonl": '{"step": 0, "data": {"a": 1}}\n{"step": 1.5, "data": {"a": 2}}\n',
    }
    for fmt, text in frac.items():
        cases.append(Case("NUL / fractional / int64", f"step 1.5 ({fmt})", lambda d, t=text: _write(d / "f.log", t),
                          no_value("1.5")))
    low = -(2 ** 63) - 1
    for fmt, text in {"jsonl": f'{{"step": 0, "loss": 1}}\n{{"step": {low}, "loss": 2}}\n',
                      "text": f"step 0 loss=1\nstep {low} loss=2\n".replace(f"step {low}", f"step={low}"),
                      "csv": f"step,loss\n0,1\n{low},2\n"}.items():
        def check(code, db, out, err, d):
            got = stored(db)
            return f"step {low} stored as {min(k[0] for k in got)}" if any(k[0] == -(2 ** 63) for k in got) else None
        cases.append(Case("NUL / fractional / int64", f"step -2^63-1 ({fmt})", lambda d, t=text: _write(d / "i.log", t),
                          check))
    return cases


def traceback_cases() -> list[Case]:
    deep = "[" * 5000 + "]" * 5000
    texts = {
        "deep jsonl": '{"step": 1, "loss": 1.0}\n{"step": 2, "x": ' + deep + "}\n",
        "deep jsonl 1500": '{"step": 1, "loss": 1.0}\n' + '{"a":' * 1500 + "1" + "}" * 1500 + "\n",
        "deep trainer_state": '{"log_history": [{"step": 1, "loss": 1.0, "x": ' + deep + "}]}",
        "deep trainer_state dicts": '{"log_history": [' + '{"a":' * 1500 + "1" + "}" * 1500 + "]}",
        "deep json-records": '[{"step": 1, "x": ' + deep + "}]",
        "400-digit value jsonl": '{"step": 1, "loss": ' + "9" * 400 + "}\n",
        "400-digit value verl-jsonl": '{"step": 1, "data": {"a": ' + "9" * 400 + "}}\n",
        "400-digit value text": "step=1 loss=" + "9" * 400 + "\nstep=2 loss=1.0\n",
        "400-digit value csv": "step,loss\n1," + "9" * 400 + "\n",
        "400-digit value printed": "{'loss': " + "9" * 400 + ", 'step': 1}\n",
        "500-digit step jsonl": '{"step": ' + "9" * 500 + ', "loss": 1}\n',
        "500-digit step text": "step " + "9" * 500 + " loss=1.0\n",
        "500-digit step megatron": " iteration " + "9" * 500 + "/ 10 | lm loss: 1.0 |\n",
        "500-digit step printed": "step " + "9" * 500 + ": {'loss': 1.0}\n",
        "500-digit step verl": "step:" + "9" * 500 + " - a:1.0 - b:2.0\n",
        "500-digit step csv": "step,loss\n" + "9" * 500 + ",1.0\n",
        "5000-digit step text": "step " + "9" * 5000 + " loss=1.0\n",
        "5000-digit step megatron": " iteration " + "9" * 5000 + "/ 10 | lm loss: 1.0 |\n",
        "inf step printed dicts": "{'loss': 1.0, 'step': 1}\n{'loss': 1.0, 'step': inf}\n",
        "nan step printed dicts": "{'loss': 1.0, 'step': 1}\n{'loss': 1.0, 'global_step': nan}\n",
        "rank tag text": "[rank99999999999]: step=1 loss=1.0\n",
        "rank tag megatron": "[rank99999999999]: iteration 1/ 10 | lm loss: 1.0 |\n",
        "rank tag verl": "[rank99999999999]: step:1 - a:1.0 - b:2.0\n",
        "rank tag default": "[default99999999999]: step=1 loss=1.0\n",
    }
    cases = [Case("tracebacks", name, lambda d, t=t: _write(d / ("trainer_state.json" if "trainer" in name else "x.log"), t))
             for name, t in texts.items()]
    cases.append(Case("tracebacks", "rank directory csv",
                      lambda d: _write(d / "x-rank99999999999-y" / "m.csv", "vpp_stage,name,step,norm\n0,a,1,1.0\n")))
    cases.append(Case("tracebacks", "broken pipe: formats | head -1", None, shell="formats"))
    cases.append(Case("tracebacks", "broken pipe: ingest --json | head -1", None, shell="ingest"))
    return cases


PATTERNS = {
    "a": "a", "a_space": "a ", "one_space": "1 ", "x_colon": "x: ", "key_eq": "key=", "a_dot": "a.",
    "one_e": "1e", "dict": "{'a': ", "overflow": "overflow! ", "iteration": "iteration ", "step_word": "step a ",
}


def long_line_cases(size: int) -> list[Case]:
    cases = []
    for pname, unit in PATTERNS.items():
        line = (unit * (size // len(unit) + 1))[:size]
        for fmt in ("auto", "text", "printed-dicts", "megatron", "verl-console", "mindspeed-rl", "csv"):
            prefix = {"auto": "step 1 loss=1.0\n", "csv": "step,a\n1,2\n"}.get(fmt, "")
            cases.append(Case("long lines", f"{pname} x{size // 1000} KB, {fmt}",
                              lambda d, t=prefix + line + "\n": _write(d / "long.log", t),
                              args=[] if fmt == "auto" else ["--format", fmt]))
    return cases


def special_cases() -> list[Case]:
    def fifo(d):
        os.mkfifo(d / "pipe.log")
        return [d / "pipe.log"]

    def fifo_in_dir(d):
        _write(d / "run" / "good.jsonl", '{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n')
        os.mkfifo(d / "run" / "pipe.log")
        return [d / "run"]

    def socket_in_dir(d):
        _write(d / "run" / "good.jsonl", '{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n')
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / "run" / "sock"))
        return [d / "run"]

    def named(name):
        def check(code, db, out, err, d):
            return None if name in out + err else f"{name} skipped without a word"
        return check

    return [Case("special files", "FIFO", fifo), Case("special files", "FIFO in a directory", fifo_in_dir, named("pipe.log")),
            Case("special files", "socket in a directory", socket_in_dir, named("sock")),
            Case("special files", "/dev/zero", lambda d: [Path("/dev/zero")]),
            Case("special files", "/dev/null", lambda d: [Path("/dev/null")])]


def run_case(code: Path, case: Case, timeout: float) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if case.shell:
            env = dict(os.environ, PYTHONPATH=str(code), MOEPROXY_DB=str(d / "db.duckdb"))
            log = ROOT / "tests" / "fixtures" / "logs" / "verl_file.jsonl"
            cmd = (f"{sys.executable} -m moeproxy formats | head -1" if case.shell == "formats" else
                   f"{sys.executable} -m moeproxy ingest --json {log} | head -1")
            p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=timeout, cwd=code)
            return ("traceback", "BrokenPipeError") if "Traceback" in p.stderr else ("clean", "")
        paths = case.build(d)
        db = d / "db.duckdb"
        rc, out, err = run_ingest(code, paths, db, case.args, timeout, case.during(d) if case.during else None)
        if rc is None:
            return "hang", f"over {timeout:.0f} s"
        if "Traceback" in err:
            return "traceback", err.strip().splitlines()[-1][:160]
        if rc == 2:
            lines = err.strip().splitlines()
            return ("clean", lines[0][:160]) if len(lines) == 1 else ("traceback", f"{len(lines)} lines on stderr")
        if rc != 0:
            return "traceback", f"exit {rc}"
        if case.check:
            problem = case.check(code, db, out, err, d)
            if problem:
                return "wrong", problem
        return "clean", "exit 0"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", type=Path, default=ROOT)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--only")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    cases = (truncation_cases() + growing_cases() + tensorboard_cases() + directory_cases() + restart_cases()
             + minor_cases() + traceback_cases() + long_line_cases(100_000) + special_cases())
    if args.only:
        cases = [c for c in cases if args.only in c.category]
    tally: dict[str, Counter] = defaultdict(Counter)
    for case in cases:
        outcome, detail = run_case(args.code, case, args.timeout)
        tally[case.category][outcome] += 1
        if args.verbose or outcome != "clean":
            print(f"{outcome:9s} {case.category} / {case.name}: {detail}", flush=True)
    print(f"\n{'category':26s} {'tried':>5s} {'clean':>5s} {'wrong':>5s} {'trace':>5s} {'hang':>5s}")
    for cat, c in tally.items():
        print(f"{cat:26s} {sum(c.values()):5d} {c['clean']:5d} {c['wrong']:5d} {c['traceback']:5d} {c['hang']:5d}")
    total = sum(tally.values(), Counter())
    print(f"{'all':26s} {sum(total.values()):5d} {total['clean']:5d} {total['wrong']:5d} {total['traceback']:5d} "
          f"{total['hang']:5d}")


if __name__ == "__main__":
    main()
