"""The run store on a DuckLake catalog: a real PostgreSQL server (Debian's ``postgresql``, started here
as an unprivileged user in a temporary folder) holds the catalog, the data are Parquet files; every
command works on it as on a file, and ``moeproxy store copy`` moves a store both ways with
identical ``export --series``. Skipped, saying why, only where PostgreSQL or the extension wheels
cannot be had."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeproxy.cli import main
from moeproxy.store import Store

from moeproxy.store import lake
from moeproxy.store.local_postgres import Unavailable, local_postgres

if lake.available() is not None:  # no wheels, or wheels of another DuckDB release than this one
    pytest.skip(lake.available(), allow_module_level=True)
pytestmark = pytest.mark.timeout(300)

LOGS = Path(__file__).parent / "fixtures" / "logs"


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of this test module: ``make(dbname)`` creates a database and returns
    the DuckLake catalog string for it."""
    try:
        with local_postgres() as make:
            yield make
    except Unavailable as why:
        pytest.skip(str(why))


def _moeproxy(capsys, *args) -> str:
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def test_every_command_works_on_a_postgresql_catalog(postgres, tmp_path, capsys):
    catalog = postgres("commands")
    data = tmp_path / "parquet"
    common = ["--db", catalog, "--data-path", data]
    out = _moeproxy(capsys, "ingest", LOGS / "megatron.log", LOGS / "verl_file.jsonl", "--diagnose", *common)
    assert "run 'megatron'" in out and "run 'verl_file'" in out
    _moeproxy(capsys, "store", "compact", *common)  # small ingests stay in the catalog until compacted
    assert list(data.glob("**/*.parquet")), "the rows are Parquet files under the data path"
    runs = _moeproxy(capsys, "runs", *common)
    assert "megatron" in runs and "verl_file" in runs
    assert "megatron:" in _moeproxy(capsys, "diagnose", "megatron", *common)
    _moeproxy(capsys, "export", "megatron", "--series", "--to", tmp_path / "lake.csv", *common)
    # the same log into a file store gives the same series
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", "--db", tmp_path / "file.duckdb")
    _moeproxy(capsys, "export", "megatron", "--series", "--to", tmp_path / "file.csv", "--db", tmp_path / "file.duckdb")
    assert (tmp_path / "lake.csv").read_text() == (tmp_path / "file.csv").read_text()
    # a second ingest of the same run appends to it (ids: the next free ones, no sequence)
    _moeproxy(capsys, "ingest", LOGS / "nanogpt.log", *common)
    store = Store(catalog, data_path=str(data))
    assert sorted(store.runs()["run"]) == ["megatron", "nanogpt", "verl_file"]
    with store.read() as con:
        ids = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    assert len(set(ids)) == 3


def test_store_copy_round_trips_a_file_store_through_a_catalog(postgres, tmp_path, capsys):
    catalog = postgres("copies")
    original, back = tmp_path / "original.duckdb", tmp_path / "back.duckdb"
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", LOGS / "verl_file.jsonl", LOGS / "trainer_state.json",
              "--diagnose", "--db", original)
    out = _moeproxy(capsys, "store", "copy", original, catalog, "--dst-data-path", tmp_path / "lake")
    assert "runs 3" in out and "scalars" in out
    _moeproxy(capsys, "store", "copy", catalog, back, "--src-data-path", tmp_path / "lake")
    for run in ("megatron", "verl_file"):
        for db in (original, back):
            _moeproxy(capsys, "export", run, "--series", "--to", tmp_path / f"{run}-{db.stem}.csv", "--db", db)
        assert (tmp_path / f"{run}-original.csv").read_bytes() == (tmp_path / f"{run}-back.csv").read_bytes()
    assert Store(original).findings("megatron")["verdict"] == Store(back).findings("megatron")["verdict"]
    # a run ingested after the copy gets an id of its own (the file store's sequence moved past the copied ids)
    _moeproxy(capsys, "ingest", LOGS / "nanogpt.log", "--db", back)
    with Store(back).read() as con:
        assert con.execute("SELECT count(DISTINCT run_id), count(*) FROM runs").fetchone() == (4, 4)
    # into a store that holds runs: refused, nothing changed
    before = Store(back).runs()["run"].tolist()
    rc = main(["store", "copy", str(original), str(back)])
    assert rc == 2 and "already holds runs" in capsys.readouterr().err
    assert Store(back).runs()["run"].tolist() == before


def test_a_local_catalog_file_keeps_its_parquet_files_beside_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    catalog = f"ducklake:{tmp_path / 'team.ducklake'}"
    # reading a catalog that does not exist yet creates nothing
    assert Store(catalog).runs().empty and not (tmp_path / "team.ducklake").exists()
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", "--db", catalog)
    assert (tmp_path / "team.ducklake").is_file()
    _moeproxy(capsys, "store", "compact", "--db", catalog)
    assert list((tmp_path / "team.ducklake.files").glob("**/*.parquet"))
    assert Store(catalog).runs()["run"].tolist() == ["megatron"]


def test_a_postgresql_catalog_without_a_data_path_is_refused_by_name(monkeypatch, capsys):
    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    rc = main(["runs", "--db", "ducklake:postgres:dbname=x host=/nonexistent"])
    assert rc == 2 and "needs a data path" in capsys.readouterr().err


def test_a_second_process_reads_the_catalog_while_the_first_holds_it(postgres, tmp_path, capsys):
    """A file store admits one process at a time; a PostgreSQL catalog does not lock: a dashboard
    reads while a watcher holds its connection open."""
    catalog = postgres("shared")
    data = tmp_path / "lake"
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", "--db", catalog, "--data-path", data)
    holder = Store(catalog, data_path=str(data))
    with holder.held():
        code = ("import sys; from moeproxy.store import Store; "
                "print(Store(sys.argv[1], data_path=sys.argv[2], lock_timeout=2).runs()['run'].tolist())")
        out = subprocess.run([sys.executable, "-c", code, catalog, str(data)], capture_output=True, text=True,
                             timeout=120)
    assert out.returncode == 0, out.stderr
    assert "megatron" in out.stdout


def test_four_processes_ingest_into_one_new_catalog_at_once(postgres, tmp_path):
    """Many writers: four `moeproxy ingest` processes start together on a catalog nobody made yet;
    the losers of the metadata creation and of each commit wait and write again (nothing of a lost
    commit was stored): every run is there once, with every row, each with its own id."""
    catalog = postgres("writers")
    logs = []
    for i in range(4):
        log = tmp_path / f"job{i}.jsonl"
        log.write_text("".join(f'{{"step": {s}, "loss": {2.0 + i - s / 1000}, "grad_norm": 0.5}}\n' for s in range(1, 1001)))
        logs.append(log)
    env = dict(os.environ, MOEPROXY_DATA_PATH=str(tmp_path / "lake"))
    procs = [subprocess.Popen([sys.executable, "-m", "moeproxy", "ingest", str(log), "--db", catalog], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for log in logs]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    store = Store(catalog, data_path=str(tmp_path / "lake"))
    runs = store.runs().set_index("run")
    assert sorted(runs.index) == [f"job{i}" for i in range(4)]
    assert (runs["rows"] == 2000).all()
    with store.read() as con:
        assert con.execute("SELECT count(DISTINCT run_id), count(DISTINCT source_id) FROM sources").fetchone() == (4, 4)


def test_small_appends_stay_in_the_catalog_until_compaction_writes_them_out(tmp_path, capsys, monkeypatch):
    """A watcher commits every second: each commit as a Parquet file of its own would leave millions.
    Small appends are inlined in the catalog; compaction (the command, and the watcher every
    ``compact_minutes``) writes them out and merges files: the count stays bounded, no row changes."""
    from moeproxy.watch import WatchConfig, Watcher

    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    catalog = f"ducklake:{tmp_path / 'team.ducklake'}"
    files = tmp_path / "team.ducklake.files"
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    import io

    w = Watcher(WatchConfig(paths=[str(log)], compact_minutes=60, commit_every=0), Store(catalog), io.StringIO(), io.StringIO())
    import time

    w._compacted = time.monotonic()  # the first period starts now (not at the random point that spreads watchers)
    w.start()
    for second in range(20):  # twenty cycles of a few new records each
        with open(log, "a") as fh:
            fh.write("".join(f'{{"step": {s}, "loss": {3.0 - s / 100}}}\n' for s in range(second * 5 + 1, second * 5 + 6)))
        w.cycle()
    assert not list(files.glob("**/*.parquet")), "twenty small commits, no Parquet file yet: inlined"
    w.config.compact_minutes = 1e-6  # due now
    w._compacted -= 1
    w.cycle()
    w.close()
    assert "compacted" in w.err.getvalue()
    assert list(files.glob("**/*.parquet")), "the watcher's compaction wrote the inlined rows out"
    store = Store(catalog)
    assert store.runs().set_index("run").loc["job", "rows"] == 100
    # files older snapshots needed go once they are older than the kept minutes: at most one a table
    assert store.compact(keep_minutes=0)["files_after"] <= 9
    assert len(list(files.glob("**/*.parquet"))) <= 9
    assert store.runs().set_index("run").loc["job", "rows"] == 100
    out = _moeproxy(capsys, "store", "compact", "--db", catalog, "--keep-minutes", "0")
    assert "data files" in out


def test_a_catalogs_upkeep_is_one_job_however_many_watchers_share_it(postgres, tmp_path):
    """Every watcher on a catalog runs its upkeep each period; all of them compacting would conflict
    with each other and with every commit. The first to claim the period does it; the others skip,
    named who did it, until the period has passed."""
    import threading
    import time

    catalog, data = postgres("upkeep"), str(tmp_path / "lake")
    log = tmp_path / "job.jsonl"
    log.write_text("".join(f'{{"step": {s}, "loss": {3.0 - s / 100}}}\n' for s in range(1, 50)))
    from moeproxy.ingest import ingest_paths

    ingest_paths(Store(catalog, data_path=data), [log])
    results: list[dict] = []

    def upkeep(i: int) -> None:
        results.append(Store(catalog, data_path=data).compact(keep_minutes=60, every_minutes=60, by=f"watcher{i}"))

    threads = [threading.Thread(target=upkeep, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done = [r for r in results if "skipped" not in r]
    assert len(results) == 4 and len(done) == 1, results
    skipped = [r["skipped"] for r in results if "skipped" in r]
    assert all(s.startswith("watcher") or "same moment" in s for s in skipped), skipped
    # within the period every later claim is skipped, naming the one that did it
    again = Store(catalog, data_path=data).compact(keep_minutes=60, every_minutes=60, by="late")
    assert again["skipped"].startswith("watcher"), again
    # a period that has passed is claimed again; the command (no period) always compacts
    time.sleep(0.2)
    assert "files_after" in Store(catalog, data_path=data).compact(keep_minutes=60, every_minutes=0.001, by="next")
    assert "files_after" in Store(catalog, data_path=data).compact(keep_minutes=60)
    assert Store(catalog, data_path=data).runs().set_index("run").loc["job", "rows"] == 49


def test_an_upkeep_that_did_not_get_through_gives_its_claim_back(postgres, tmp_path, monkeypatch):
    import duckdb

    catalog, data = postgres("upkeep_back"), str(tmp_path / "lake")
    log = tmp_path / "job.jsonl"
    log.write_text("".join(f'{{"step": {s}, "loss": {3.0 - s / 100}}}\n' for s in range(1, 50)))
    from moeproxy.ingest import ingest_paths

    ingest_paths(Store(catalog, data_path=data), [log])

    def beaten(con, keep_minutes, tries=lake.COMPACT_TRIES):  # every try beaten by a watcher's commit
        raise duckdb.TransactionException("Transaction conflict: another transaction committed first")

    monkeypatch.setattr(lake, "compact", beaten)
    with pytest.raises(Exception):
        Store(catalog, data_path=data).compact(keep_minutes=60, every_minutes=60, by="unlucky")
    monkeypatch.undo()
    done = Store(catalog, data_path=data).compact(keep_minutes=60, every_minutes=60, by="next")
    assert "files_after" in done, done


def test_a_watchers_positions_are_versions_on_a_catalog_and_every_read_takes_the_latest(postgres, tmp_path):
    """On a catalog a watcher's cycle appends a new version of its source's totals and file position
    (two UPDATEs of one table conflict in DuckLake, whatever the rows: sixteen watchers kept failing
    each other's commits); every read takes the latest, a restart resumes from it, a copy to a file
    store carries one row each, and compaction drops the versions a later one replaced."""
    import io

    from moeproxy.watch import WatchConfig, Watcher

    catalog, data = postgres("versions"), tmp_path / "parquet"
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()

    def watcher():
        import time

        w = Watcher(WatchConfig(paths=[str(log)], compact_minutes=60, commit_every=0), Store(catalog, data_path=str(data)),
                    io.StringIO(), io.StringIO())
        w._compacted = time.monotonic()  # no upkeep during the test (not at the random point that spreads watchers)
        w.start()
        return w

    w = watcher()
    for second in range(6):
        with open(log, "a") as fh:
            fh.write("".join(f'{{"step": {s}, "loss": {3.0 - s / 100}}}\n' for s in range(second * 5 + 1, second * 5 + 6)))
        w.cycle()
    w.close()
    store = Store(catalog, data_path=str(data))
    with store.read() as con:
        versions = con.execute("SELECT count(*) FROM sources").fetchone()[0]
    assert versions >= 5, "each cycle appended its totals"
    (pos,) = store.watch_positions()
    assert pos["position"] == log.stat().st_size and pos["rows"] == 30
    assert store.runs_overview().set_index("run").loc["job", "rows"] == 30
    with open(log, "a") as fh:  # a restart resumes from the latest position: nothing read twice
        fh.write('{"step": 31, "loss": 2.69}\n')
    w = watcher()
    w.cycle()
    w.close()
    assert store.runs().set_index("run").loc["job", "rows"] == 31
    copy = Store(tmp_path / "copy.duckdb")
    from moeproxy.store.copy import copy_store

    copy_store(store, copy)
    assert len(copy.watch_positions()) == 1 and copy.runs().set_index("run").loc["job", "rows"] == 31
    store.compact(keep_minutes=0)
    with store.read() as con:
        assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM watch_files").fetchone()[0] == 1
    assert store.watch_positions()[0]["position"] == log.stat().st_size


def test_a_catalog_watcher_stores_calm_rows_in_batches_and_urgent_ones_at_once(postgres, tmp_path):
    """Each DuckLake commit is a snapshot that costs ~0.1 s of a core: a watcher on a catalog stores
    rows that hold nothing urgent at most every ``commit_every`` seconds (the file is read again from
    its stored position, so nothing is lost or stored twice), but a first NaN is stored, diagnosed
    and alerted in the cycle that reads it."""
    import io
    import json

    from moeproxy.watch import WatchConfig, Watcher

    catalog, data = postgres("batches"), tmp_path / "parquet"
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    alerts = tmp_path / "alerts.jsonl"
    store = Store(catalog, data_path=str(data))
    w = Watcher(WatchConfig(paths=[str(log)], alerts=str(alerts), commit_every=60), store, io.StringIO(), io.StringIO())
    w.start()

    def append(steps, loss=lambda s: 3.0 + 0.05 * (s % 4)):
        with open(log, "a") as fh:
            fh.write("".join(json.dumps({"step": s, "loss": loss(s), "grad_norm": 1.0}) + "\n" for s in steps))

    def stored():
        return int(store.runs_overview().set_index("run").loc["job", "rows"]) if store.has_run("job") else 0

    append(range(1, 6))
    w.cycle()                       # a new file: stored at once (its run is made)
    assert stored() == 10
    for second in range(3):         # calm rows: held back (the last commit was a moment ago)
        append(range(6 + 5 * second, 11 + 5 * second))
        w.cycle()
    assert stored() == 10
    append([21], loss=lambda s: float("nan"))   # a first NaN: everything read so far, stored now
    report = w.cycle()
    assert stored() == 42 and [a["verdict"] for a in report.alerts] == ["overflow"]
    assert [json.loads(line)["onset_step"] for line in alerts.read_text().splitlines()] == [21]
    append(range(22, 25))
    w.cycle()
    w.close()                       # stopped with calm rows not yet stored: a restart reads them
    w = Watcher(WatchConfig(paths=[str(log)], commit_every=0), store, io.StringIO(), io.StringIO())
    w.start()
    w.cycle()
    w.close()
    assert stored() == 48
    with store.read() as con:
        assert con.execute("SELECT count(*) - count(DISTINCT (metric, step)) FROM scalars").fetchone()[0] == 0



def test_a_read_only_postgresql_role_reads_the_catalog_and_cannot_write_it(postgres, tmp_path, capsys):
    """The README's team setup gives dashboards a role that may only SELECT (default privileges cover
    the tables DuckLake makes later): every read works, including rows written after the grant; a
    write is refused in one line that says why, and nothing is changed."""
    catalog, data = postgres("roles"), tmp_path / "parquet"
    owner = ["--db", catalog, "--data-path", data]
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", *owner)
    postgres.psql("roles", "CREATE ROLE dashboard LOGIN; GRANT CONNECT ON DATABASE roles TO dashboard; "
                           "GRANT USAGE ON SCHEMA public TO dashboard; "
                           "GRANT SELECT ON ALL TABLES IN SCHEMA public TO dashboard; "
                           "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO dashboard")
    _moeproxy(capsys, "ingest", LOGS / "verl_file.jsonl", *owner)  # written after the grant
    reader = ["--db", catalog.replace("user=moeproxy", "user=dashboard"), "--data-path", data]
    runs = _moeproxy(capsys, "runs", *reader)
    assert "megatron" in runs and "verl_file" in runs
    assert "megatron:" in _moeproxy(capsys, "diagnose", "megatron", *reader)
    capsys.readouterr()
    assert main(["ingest", str(LOGS / "openrlhf.log"), *map(str, reader)]) != 0
    err = capsys.readouterr().err
    assert "may not write (permission denied)" in err and "Traceback" not in err
    assert "openrlhf" not in _moeproxy(capsys, "runs", *owner)


def test_each_runs_values_are_in_files_of_their_own_on_a_catalog(postgres, tmp_path, capsys):
    """A new catalog's values are partitioned by run: a Triage view reads its run's files only
    (``bench/team_reads.py``), however the runs' rows were interleaved when they were written."""
    import duckdb

    catalog, data = postgres("partitions"), tmp_path / "parquet"
    common = ["--db", catalog, "--data-path", data]
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", LOGS / "verl_file.jsonl", LOGS / "openrlhf.log", *common)
    _moeproxy(capsys, "store", "compact", *common)
    files = [f for f in data.glob("**/*.parquet") if "scalars" in str(f)]
    assert len(files) >= 3
    con = duckdb.connect()
    assert all(con.execute("SELECT count(DISTINCT run_id) FROM read_parquet(?)", [str(f)]).fetchone()[0] == 1
               for f in files)


def _sorted_and_codec(files) -> set[tuple[bool, str]]:
    import duckdb

    con = duckdb.connect()
    return {(con.execute("SELECT list(metric ORDER BY file_row_number) = list(metric ORDER BY metric, step) "
                         "FROM read_parquet(?, file_row_number = true)", [str(f)]).fetchone()[0],
             con.execute("SELECT min(compression) FROM parquet_metadata(?)", [str(f)]).fetchone()[0])
            for f in files}


def test_a_runs_values_are_written_out_sorted_by_metric_and_compressed(tmp_path, capsys, monkeypatch):
    """A chart of a few metrics reads their row groups only: each run's files sorted by (metric, step)
    however the job logged them (step by step), zstd-compressed; a catalog made before gets the same
    layout at its next upkeep, its rows unchanged."""
    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    for name, old in (("new", False), ("old", True)):
        catalog = f"ducklake:{tmp_path / name}.ducklake"
        files = tmp_path / f"{name}.ducklake.files"
        if old:  # as an earlier moeproxy made it: unsorted, the default codec
            with Store(catalog).write() as tx:
                tx.con.execute("ALTER TABLE scalars RESET SORTED BY")
                tx.con.execute(f"CALL {lake.ALIAS}.set_option('parquet_compression', 'snappy')")
        _moeproxy(capsys, "ingest", LOGS / "megatron.log", LOGS / "verl_file.jsonl", "--db", catalog)
        for first in (10_000, 20_000):  # two appends of a job's step-by-step records (steps, then metrics)
            with Store(catalog).write() as tx:
                tx.con.execute("INSERT INTO scalars SELECT 1, printf('m%02d', m), s, s * 0.1, 0, -1, NULL, NULL "
                               "FROM range(?, ? + 2000) t(s), range(30) q(m) ORDER BY s, m", [first, first])
        before = Store(catalog).run_frame("megatron")
        _moeproxy(capsys, "store", "compact", "--db", catalog, "--keep-minutes", "0")
        scalars = [f for f in files.glob("**/*.parquet") if "scalars" in str(f)]
        assert len(scalars) >= 2 and _sorted_and_codec(scalars) == {(True, "ZSTD")}, name
        after = Store(catalog).run_frame("megatron")
        assert after.sort_index(axis=1).equals(before.sort_index(axis=1)), name


SERIALIZATION = ('Failed to delete flushed inlined data in DuckLake from table ducklake_inlined_data_10_1: Failed to '
                 'execute query "DELETE FROM ...": ERROR:  could not serialize access due to concurrent update')


def test_an_upkeep_step_that_postgresql_could_not_serialize_is_run_again(monkeypatch):
    """Flushing inlined rows deletes them from the catalog's table while watchers append to it:
    PostgreSQL's serialization failure comes back as a plain ``duckdb.Error``; the step is run again,
    as a DuckLake conflict is, and any other error is raised at once."""
    import duckdb

    calls = []

    class Con:
        def __init__(self, failures, error=SERIALIZATION):
            self.failures, self.error = failures, error

        def execute(self, sql):
            calls.append(sql)
            if self.failures:
                self.failures -= 1
                raise duckdb.Error(self.error)
            return self

        def fetchall(self):
            return []

    monkeypatch.setattr("time.sleep", lambda s: None)
    lake.compact(Con(2), keep_minutes=10)
    assert len(calls) == 2 + 5  # the first step twice more, then the four others once
    with pytest.raises(duckdb.Error, match="disk"):
        lake.compact(Con(1, "IO Error: no space left on disk"), keep_minutes=10)


@pytest.mark.parametrize("error", [SERIALIZATION, "HTTP Error: Unable to connect to URL s3://runs/x/main/scalars/"
                                                  "f.parquet: Service Unavailable (HTTP code 503)"])
def test_a_watcher_keeps_watching_when_its_upkeep_fails(tmp_path, monkeypatch, error):
    """An upkeep that fails with any database error is said and tried again later; the watcher goes
    on storing rows (before, a serialization failure in the upkeep ended the watcher)."""
    import io
    import time

    import duckdb

    from moeproxy.watch import WatchConfig, Watcher

    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    catalog = f"ducklake:{tmp_path / 'team.ducklake'}"
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()

    def failing(con, keep_minutes, tries=lake.COMPACT_TRIES):
        raise duckdb.Error(error)

    monkeypatch.setattr(lake, "compact", failing)
    w = Watcher(WatchConfig(paths=[str(log)], compact_minutes=1e-6, commit_every=0), Store(catalog),
                io.StringIO(), io.StringIO())
    w.start()
    for second in range(3):
        with open(log, "a") as fh:
            fh.write("".join(f'{{"step": {s}, "loss": {3.0 - s / 100}}}\n' for s in range(second * 5 + 1, second * 5 + 6)))
        w._compacted -= 1  # due at every cycle
        w.cycle()
        time.sleep(0.01)
    w.close()
    assert w.err.getvalue().count("failed") >= 2 and error[:20] in w.err.getvalue()
    assert Store(catalog).runs().set_index("run").loc["job", "rows"] == 15
