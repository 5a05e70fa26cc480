"""A throwaway PostgreSQL server for a DuckLake catalog on one machine: tests, ``bench/team.py``, and
trying the team store before a cluster's database exists.

The server is Debian's (or any) ``postgresql`` binaries, started in a folder of its own directly under
the system temp folder (a Unix socket's path must stay under 108 bytes), listening only on that
socket, trusting local connections; as root it runs as ``nobody`` (PostgreSQL refuses root). The
folder is removed when the ``with`` block ends, a failed start included.

    with local_postgres() as new_catalog:
        target = new_catalog("runs")  # 'ducklake:postgres:dbname=runs host=/tmp/... port=... user=moeproxy'

``Unavailable`` (with the reason) where the server cannot be had: not installed, or root without
``runuser``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

USER = "moeproxy"


class Unavailable(RuntimeError):
    """No PostgreSQL server can be started here; the message says why."""


def postgres_bin() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``/``createdb``: on the PATH, else Debian's newest version."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_postgres() -> Iterator[Callable[[str], str]]:
    """A running server; yields ``new_catalog(dbname)``, which creates that database and returns the
    DuckLake catalog string for it."""
    bindir = postgres_bin()
    if bindir is None:
        raise Unavailable("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            raise Unavailable("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
        as_user = [runuser, "-u", "nobody", "--"]
    root = Path(tempfile.mkdtemp(prefix="moeproxy-pg-"))
    data, sock = root / "data", root / "sock"
    try:  # removed whatever happens, a failed start included
        data.mkdir()
        sock.mkdir()
        if as_user:
            root.chmod(0o755)
            subprocess.run(["chown", "-R", "nobody", str(root)], check=True)
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True)
        port = _free_port()
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "server.log"), "-o",
                        f"-k {sock} -p {port} -c listen_addresses='' -c max_connections=200", "start"],
                       check=True, capture_output=True)

        def new_catalog(dbname: str) -> str:
            subprocess.run([str(bindir / "createdb"), "-h", str(sock), "-p", str(port), "-U", USER, dbname],
                           check=True, capture_output=True)
            return f"ducklake:postgres:dbname={dbname} host={sock} port={port} user={USER}"

        def psql(dbname: str, sql: str) -> str:
            """Run SQL in a database of the server as its owner (roles, grants); its output."""
            done = subprocess.run([str(bindir / "psql"), "-h", str(sock), "-p", str(port), "-U", USER, "-d", dbname,
                                   "-v", "ON_ERROR_STOP=1", "-Atc", sql], check=True, capture_output=True, text=True)
            return done.stdout

        new_catalog.psql = psql
        yield new_catalog
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
