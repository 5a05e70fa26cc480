"""The paths around the store and the terminal: a read never creates the database, a DuckDB file
that is not a moeproxy store is never changed, a database path that cannot be one is a clear error,
and names from logs cannot rewrite the terminal."""

from __future__ import annotations

import subprocess
import sys

import duckdb

from moeproxy.terminal import shown


def _cli(*args, cwd):
    r = subprocess.run([sys.executable, "-m", "moeproxy", *map(str, args)], capture_output=True, text=True, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


def test_a_read_of_a_missing_store_creates_nothing(tmp_path):
    rc, out = _cli("runs", "--db", tmp_path / "new" / "sub" / "runs.duckdb", cwd=tmp_path)
    assert rc == 0 and "no runs" in out
    assert not (tmp_path / "new").exists()


def test_a_users_own_duckdb_file_is_never_changed(tmp_path):
    db = tmp_path / "mine.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE sales (a INTEGER)")
    con.execute("INSERT INTO sales VALUES (1)")
    con.close()
    log = tmp_path / "run.log"
    log.write_text("".join(f"step {s} loss={3 - 0.01 * s:.3f}\n" for s in range(1, 20)))
    import hashlib

    before = hashlib.sha256(db.read_bytes()).hexdigest()
    listing = sorted(p.name for p in tmp_path.iterdir())
    for args in (("runs", "--db", db), ("ingest", log, "--db", db), ("diagnose", "x", "--db", db),
                 ("export", "x", "--to", tmp_path / "x.csv", "--db", db), ("report", "x", "-o", tmp_path / "x.html", "--db", db),
                 ("diagnose", log, "--db", db), ("watch", log, "--once", "--db", db)):
        rc, out = _cli(*args, cwd=tmp_path)
        assert rc == 2 and "not a moeproxy run database" in out and "Traceback" not in out, out
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before, args
        assert sorted(p.name for p in tmp_path.iterdir()) == listing, args  # nothing left beside it (no .watch-lock)
    con = duckdb.connect(str(db))
    assert con.execute("SELECT table_name FROM information_schema.tables").fetchall() == [("sales",)]
    assert con.execute("SELECT * FROM sales").fetchall() == [(1,)]


def test_a_database_path_that_cannot_be_one_is_a_clear_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    log = tmp_path / "run.log"
    log.write_text("".join(f"step {s} loss={3 - 0.01 * s:.3f}\n" for s in range(1, 20)))
    for db in (tmp_path / "afile" / "runs.duckdb", tmp_path):
        rc, out = _cli("ingest", log, "--db", db, cwd=tmp_path)
        assert rc == 2 and str(db) in out and "Traceback" not in out, out


def test_names_cannot_rewrite_the_terminal(tmp_path):
    assert shown("run-\x1b[2J\x1b[31mred") == "run-\\x1b[2J\\x1b[31mred"
    assert shown("abc\u202eexe.log") == "abc\\u202eexe.log"
    assert shown("qwen3-moe-éà-日本") == "qwen3-moe-éà-日本"
    log = tmp_path / "run.log"
    log.write_text("".join(f"step {s} loss={3 - 0.01 * s:.3f}\n" for s in range(1, 20)))
    db = tmp_path / "runs.duckdb"
    rc, out = _cli("ingest", log, "--db", db, "--run", "evil\x1b]0;owned\x07\u202e", cwd=tmp_path)
    assert rc == 0, out
    for args in (("runs", "--db", db), ("diagnose", "evil\x1b]0;owned\x07\u202e", "--db", db)):
        rc, out = _cli(*args, cwd=tmp_path)
        assert rc == 0 and "\x1b" not in out and "\u202e" not in out and "\\x1b]0;owned" in out, out
