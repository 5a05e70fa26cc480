"""Cached reads of the run store for the pages: every function takes the database path and its
data version, so a cache entry is reused until an ingest, a deletion or a diagnosis changes the
store (the version counter goes up) and never leaks between stores (tests, ``--db``).

The store opens and closes the DuckDB file per operation, so ``moeproxy ingest`` and jobs can use
the same file while the dashboard is up. No SQL here: the store and ``moeproxy.store.downsample`` own it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import streamlit as st

from moeproxy.store import Store, resolve_db


def db_path() -> str:
    """The database this dashboard shows: ``$MOEPROXY_DB`` (set by ``moeproxy dashboard --db``; a
    file or a DuckLake catalog)."""
    return str(resolve_db(os.environ.get("MOEPROXY_DB") or None))


def store() -> Store:
    return Store(db_path())


def data_version() -> int:
    return store().data_version()


@st.cache_data(ttl=600, max_entries=32, show_spinner=False)
def runs(db: str, version: int) -> pd.DataFrame:
    return Store(db).runs_overview()


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def metrics(db: str, version: int, run: str) -> list[str]:
    from moeproxy.store.downsample import metric_names

    return metric_names(Store(db), run)


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def findings(db: str, version: int, run: str) -> dict | None:
    return Store(db).findings(run)


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def run_info(db: str, version: int, run: str) -> dict:
    return Store(db).run_info(run)


@st.cache_data(ttl=600, max_entries=256, show_spinner=False)
def m4(db: str, version: int, run: str, metrics: tuple[str, ...], lo: int | None, hi: int | None,
       buckets: int) -> pd.DataFrame:
    from moeproxy.store.downsample import m4_series

    return m4_series(Store(db), run, list(metrics), lo, hi, buckets)


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def step_range(db: str, version: int, run: str, metrics: tuple[str, ...]) -> tuple[int, int] | None:
    from moeproxy.store.downsample import step_range as _step_range

    return _step_range(Store(db), run, list(metrics))


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def comparable_runs(db: str, version: int, run: str) -> list[str]:
    from moeproxy.reference import comparable_runs as _comparable

    return _comparable(Store(db), run)


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def heatmap(db: str, version: int, run: str, lo: int | None, hi: int | None) -> pd.DataFrame:
    from moeproxy.store.downsample import layer_heatmap

    return layer_heatmap(Store(db), run, lo=lo, hi=hi)


def selected_run(runs_table: pd.DataFrame, key: str, label: str = "Run", roles: tuple[str, ...] | None = None,
                 default: str | None = None) -> str | None:
    """A run picker that starts on a link's ``?run=`` and remembers the choice across pages
    (``st.session_state['run']``)."""
    names = runs_table["run"].tolist() if roles is None else \
        runs_table.loc[runs_table["role"].isin(roles), "run"].tolist()
    if not names:
        return None
    linked = st.query_params.get("run")  # a link's run (``?run=NAME``) first
    remembered = default or (linked if linked in names else None) or st.session_state.get("run")
    index = names.index(remembered) if remembered in names else 0
    choice = st.selectbox(label, names, index=index, key=key)
    if roles is None:
        st.session_state["run"] = choice
    return choice


@st.cache_data(ttl=2, max_entries=8, show_spinner=False)
def live_runs(db: str) -> frozenset[str]:
    """The runs a watcher is adding to (``Store.live_runs``: rows stored in the last minute)."""
    return Store(db).live_runs()


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def reference_bands(db: str, references: tuple[str, ...], run: str, metrics: tuple[str, ...], by: str,
                    bins: int) -> dict[str, pd.DataFrame]:
    """metric -> the band of the ``references`` runs (``moeproxy.reference``: by "step", ``bins``
    steps per bin, or by "fraction" of the run in ``bins`` bins), this run excluded; metrics none of
    them has are left out. Cached per set of reference runs, not per data version: a live run's
    refreshes reuse it."""
    from moeproxy.reference import reference_band

    store = Store(db)
    bands = {m: reference_band(store, m, exclude=run, by=by, bins=bins, runs=list(references)) for m in metrics}
    return {m: b for m, b in bands.items() if not b.empty}


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def has_wall_time(db: str, version: int, run: str) -> bool:
    from moeproxy.store.downsample import has_wall_time as _has

    return _has(Store(db), run)


@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def step_times(db: str, version: int, run: str, metrics: tuple[str, ...]) -> pd.DataFrame:
    from moeproxy.store.downsample import step_times as _step_times

    return _step_times(Store(db), run, list(metrics))


ALERT_HOURS = 24  # alerts shown on every page: those raised in the last day


@st.cache_data(ttl=0.5, max_entries=8, show_spinner=False)
def recent_alerts(db: str) -> list[dict]:
    """The latest revision of each alert raised in the last ``ALERT_HOURS`` (newest first)."""
    since = pd.Timestamp.now(tz="UTC") - pd.Timedelta(hours=ALERT_HOURS)
    store = Store(db)
    if store.path is not None and not Path(store.path).exists():
        return []
    latest: dict[str, dict] = {}
    try:
        raised = store.alerts(since=since.to_pydatetime())
    except Exception:  # a busy, damaged or foreign store: the page that opened says so, not every sidebar
        return []
    for alert in raised:
        latest[str(alert.get("run"))] = alert  # oldest first: a later revision replaces the earlier
    return sorted(latest.values(), key=lambda a: str(a.get("detected_at")), reverse=True)
