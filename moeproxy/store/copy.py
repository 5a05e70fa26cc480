"""``moeproxy store copy SRC DST``: every table of one store into another — a file store into a
DuckLake catalog (a team moving to a shared store) or back (a catalog's runs taken to a laptop) —
in one transaction of the destination, then each table's row count checked on both sides.

The destination must hold no run yet: a copy never merges two stores (run ids would collide, and a
half-merged store is worse than none). Ids are copied as they are; a file store's id sequences are
moved past them, so that runs ingested afterwards get new ones.
"""

from __future__ import annotations

from typing import Callable

from moeproxy.errors import InputError
from moeproxy.store.schema import LATEST

# every table, parents first; meta is the destination's own (its schema version, its data version)
TABLES = ("runs", "sources", "metric_names", "scalars", "routing", "findings", "watch_files", "alerts")
BATCH_ROWS = 1_000_000


def _columns(con, table: str) -> list[str]:
    return [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                      "AND table_catalog = current_database() ORDER BY ordinal_position",
                                      [table]).fetchall()]


def _counts(store) -> dict[str, int]:
    with store.read() as con:
        # a catalog's watched sources and positions are versioned: the latest version of each is the row
        return {t: int(con.execute(f"SELECT count(*) FROM {LATEST.get(t, t)}").fetchone()[0]) for t in TABLES}


def copy_store(src, dst, progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Copy every row of ``src`` (a ``Store``) into the empty ``dst``; returns the rows per table."""
    say = progress or (lambda _: None)
    if src.label == dst.label:
        raise InputError(f"{src.label}: source and destination are the same store")
    expected = _counts(src)
    if _counts(dst)["runs"]:
        raise InputError(f"{dst.label} already holds runs; copy into an empty store (nothing was changed)")
    with src.read() as scon, dst.write() as tx:
        con = tx.con
        for table in TABLES:
            source_columns = _columns(scon, table)
            columns = [c for c in _columns(con, table) if c in source_columns]
            if expected[table] == 0:
                continue
            reader = scon.execute(f"SELECT {', '.join(columns)} FROM {LATEST.get(table, table)} t").fetch_record_batch(BATCH_ROWS)
            done = 0
            for batch in reader:
                con.register("copied_batch", batch)
                con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM copied_batch")
                con.unregister("copied_batch")
                done += batch.num_rows
                say(f"{table}: {done:,}/{expected[table]:,} rows")
        if tx.sequences:  # a file store: its sequences past the copied ids (a sequence's next value
            # only grows: taking ``top`` values leaves the next one above every copied id)
            for sequence, table, column in (("run_id_seq", "runs", "run_id"), ("source_id_seq", "sources", "source_id")):
                top = int(con.execute(f"SELECT coalesce(max({column}), 0) FROM {table}").fetchone()[0])
                if top:
                    con.execute(f"SELECT max(nextval('{sequence}')) FROM range(?)", [top]).fetchone()
    got = _counts(dst)
    wrong = {t: (expected[t], got[t]) for t in TABLES if expected[t] != got[t]}
    if wrong:
        shown = ", ".join(f"{t}: {a} in the source, {b} copied" for t, (a, b) in wrong.items())
        raise InputError(f"{dst.label}: the copy does not match the source ({shown})")
    return got
