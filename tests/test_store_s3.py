"""A catalog whose Parquet files live in an S3-compatible object store (``--data-path s3://...``):
a real S3 server (moto's, in this process, on a local port; no AWS) serves the bucket, DuckDB's
``httpfs`` extension (its wheel) reads and writes it with the credentials of the standard AWS
variables. Every command works as on a folder; compaction writes the inlined rows out as objects
and deletes the ones no snapshot needs; a bucket that does not exist is said by name and changes
nothing. (moto takes any keys: refused credentials are not tested here.) Skipped, saying why, only where the extension wheels or moto
cannot be had."""

from __future__ import annotations

import pytest

from moeproxy.cli import main
from moeproxy.errors import InputError
from moeproxy.store import Store, lake

if lake.available() is not None:
    pytest.skip(lake.available(), allow_module_level=True)
try:
    lake.extension_file("httpfs")
except InputError as why:
    pytest.skip(str(why), allow_module_level=True)
boto3 = pytest.importorskip("boto3", reason="the S3 tests need moto[server] (the dev extra)")
moto_server = pytest.importorskip("moto.server", reason="the S3 tests need moto[server] (the dev extra)")

from test_store_lake import LOGS, _moeproxy  # noqa: E402 - the same CLI helper and logs (tests/ is on the path)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def s3():
    """A local S3 server; yields a boto3 client of it (its address in ``s3.endpoint``)."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the tests' stderr
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", aws_access_key_id="team",
                          aws_secret_access_key="secret", region_name="us-east-1")
    client.endpoint = f"http://{host}:{port}"
    yield client
    server.stop()


@pytest.fixture
def aws(s3, monkeypatch):
    """The standard AWS variables pointing at the local server."""
    for name, value in {"AWS_ACCESS_KEY_ID": "team", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1",
                        "AWS_ENDPOINT_URL": s3.endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("MOEPROXY_DATA_PATH", raising=False)
    return s3


def _objects(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_every_command_works_with_the_parquet_files_in_s3(aws, tmp_path, capsys):
    aws.create_bucket(Bucket="runs")
    common = ["--db", f"ducklake:{tmp_path / 'team.ducklake'}", "--data-path", "s3://runs/moeproxy/"]
    out = _moeproxy(capsys, "ingest", LOGS / "megatron.log", LOGS / "verl_file.jsonl", "--diagnose", *common)
    assert "run 'megatron'" in out and "run 'verl_file'" in out
    assert not _objects(aws, "runs"), "small ingests are inlined in the catalog until compaction"
    _moeproxy(capsys, "store", "compact", *common)
    objects = _objects(aws, "runs")
    assert objects and all(k.startswith("moeproxy/") and k.endswith(".parquet") for k in objects)
    assert not list(tmp_path.glob("**/*.parquet")), "no Parquet file on the local disk"
    runs = _moeproxy(capsys, "runs", *common)
    assert "megatron" in runs and "verl_file" in runs
    assert "megatron:" in _moeproxy(capsys, "diagnose", "megatron", *common)
    # the same series as the same log in a file store, read back from the objects
    _moeproxy(capsys, "export", "megatron", "--series", "--to", tmp_path / "s3.csv", *common)
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", "--db", tmp_path / "file.duckdb")
    _moeproxy(capsys, "export", "megatron", "--series", "--to", tmp_path / "file.csv", "--db", tmp_path / "file.duckdb")
    assert (tmp_path / "s3.csv").read_text() == (tmp_path / "file.csv").read_text()
    # a copy into a second catalog in another bucket, counts checked by the command, series identical
    aws.create_bucket(Bucket="copy")
    out = _moeproxy(capsys, "store", "copy", f"ducklake:{tmp_path / 'team.ducklake'}",
                    f"ducklake:{tmp_path / 'copy.ducklake'}", "--src-data-path", "s3://runs/moeproxy/",
                    "--dst-data-path", "s3://copy/lake")
    assert "runs 2" in out
    _moeproxy(capsys, "export", "megatron", "--series", "--to", tmp_path / "copy.csv",
              "--db", f"ducklake:{tmp_path / 'copy.ducklake'}", "--data-path", "s3://copy/lake")
    assert (tmp_path / "copy.csv").read_text() == (tmp_path / "file.csv").read_text()


def test_upkeep_deletes_the_objects_no_snapshot_needs(aws, tmp_path):
    aws.create_bucket(Bucket="upkeep")
    store = Store(f"ducklake:{tmp_path / 'u.ducklake'}", data_path="s3://upkeep/p")
    from moeproxy.ingest import ingest_paths

    logs = ["megatron.log", "nanogpt.log", "verl_file.jsonl", "trainer_state.json"]
    for i, log in enumerate(logs):  # four ingests, each compacted: objects pile up until old snapshots expire
        ingest_paths(store, [str(LOGS / log)], run=f"run{i}")
        store.compact(keep_minutes=10)
    piled = len(_objects(aws, "upkeep"))
    rows = store.runs().set_index("run")["rows"].to_dict()
    done = store.compact(keep_minutes=0)
    left = _objects(aws, "upkeep")
    assert len(left) < piled / 2 and len(left) >= done["files_after"], (piled, left, done)
    assert store.runs().set_index("run")["rows"].to_dict() == rows and len(rows) == 4


def test_a_bucket_that_does_not_exist_is_said_by_name_and_nothing_stored_is_lost(aws, tmp_path, capsys):
    catalog = f"ducklake:{tmp_path / 'm.ducklake'}"
    aws.create_bucket(Bucket="kept")
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", "--db", catalog, "--data-path", "s3://kept/x")
    _moeproxy(capsys, "store", "compact", "--db", catalog, "--data-path", "s3://kept/x")
    kept = ["--db", catalog, "--data-path", "s3://kept/x"]

    def series(common, name):
        _moeproxy(capsys, "export", "megatron", "--series", "--to", tmp_path / name, *common)
        return (tmp_path / name).read_text()

    before = series(kept, "before.csv")
    # another catalog on a bucket that does not exist: its rows wait in the catalog, the upkeep that would
    # write them out says which bucket, and nothing stored is lost
    missing = ["--db", f"ducklake:{tmp_path / 'n.ducklake'}", "--data-path", "s3://no-such-bucket/x"]
    _moeproxy(capsys, "ingest", LOGS / "megatron.log", *missing)
    capsys.readouterr()
    rc = main(["store", "compact", *missing])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err and "no-such-bucket" in err, err
    assert series(missing, "missing.csv") == before
    assert series(kept, "after.csv") == before


@pytest.mark.parametrize("path, said", [("gs://bucket/x", "gs:// data path is not supported"),
                                         ("s3://", "names its bucket")])
def test_a_data_path_of_another_kind_is_refused_by_name(tmp_path, capsys, path, said):
    rc = main(["runs", "--db", f"ducklake:{tmp_path / 'k.ducklake'}", "--data-path", path])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and "Traceback" not in err
    assert not (tmp_path / "k.ducklake").exists()


def test_the_s3_secret_follows_the_aws_variables():
    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{lake.extension_file('httpfs')}'")
    lake.s3_secret(con, {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "cn-north-4",
                         "AWS_ENDPOINT_URL": "https://obs.cn-north-4.example.com"})
    row = con.execute("SELECT secret_string FROM duckdb_secrets() WHERE name = 'moeproxy_s3'").fetchone()[0]
    assert "endpoint=obs.cn-north-4.example.com" in row and "use_ssl=true" in row and "url_style=path" in row
    assert "region=cn-north-4" in row
    lake.s3_secret(con, {"AWS_ENDPOINT_URL": "http://minio:9000", "MOEPROXY_S3_URL_STYLE": "vhost"})
    row = con.execute("SELECT secret_string FROM duckdb_secrets() WHERE name = 'moeproxy_s3'").fetchone()[0]
    assert "endpoint=minio:9000" in row and "use_ssl=false" in row and "url_style=vhost" in row
    with pytest.raises(InputError, match="MOEPROXY_S3_URL_STYLE"):
        lake.s3_secret(con, {"MOEPROXY_S3_URL_STYLE": "virtual"})
