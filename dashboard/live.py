"""Live pages: a run that a ``moeproxy watch`` is growing is redrawn by a Streamlit fragment every
``REFRESH_SECONDS``, and each redraw reads only the steps stored since the last one.

``grown_series`` keeps the downsampled frame a page drew (in ``st.session_state``) with the data
version and the run's last step and attempt count it was read at. When the store changed, it reads
the new steps only (``last + 1`` to the new last, at full resolution up to the bucket count) and
appends them; it reads the whole range afresh when the view changed (run, metrics, zoom), when a
restart rewrote earlier steps (the attempt count changed), or when the appended tail has grown past
a few downsamplings' worth of points.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import queries

REFRESH_SECONDS = 2.0
BUCKETS = 1000


def grown_series(db: str, version: int, run: str, metrics: tuple[str, ...], state_key: str,
                 lo: int | None = None, hi: int | None = None, attempts: int = 0) -> pd.DataFrame:
    view = (db, run, metrics, lo, hi)
    held = st.session_state.get(state_key)
    if held is not None and held["view"] == view and held["version"] == version:
        return held["series"]
    span = queries.step_range(db, version, run, metrics)
    last = span[1] if span else None
    fresh = (held is None or held["view"] != view or held["attempts"] != attempts or lo is not None
             or hi is not None or held["last"] is None or last is None)
    if fresh:
        series = queries.m4(db, version, run, metrics, lo, hi, BUCKETS)
    elif last <= held["last"]:
        series = held["series"]
    else:
        tail = queries.m4(db, version, run, metrics, held["last"] + 1, last, BUCKETS)
        series = pd.concat([held["series"], tail], ignore_index=True)
        if len(series) > 8 * BUCKETS * max(1, len(metrics)):
            series = queries.m4(db, version, run, metrics, None, None, BUCKETS)
    st.session_state[state_key] = {"view": view, "version": version, "last": last, "attempts": attempts,
                                   "series": series}
    return series


def is_live(db: str, run: str) -> bool:
    return run in queries.live_runs(db)
