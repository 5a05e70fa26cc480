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


def _title_script(count: int) -> str:
    """Puts the alert count in the browser tab's title (kept there on every refresh)."""
    import json

    title = json.dumps(f"({count}) alert{'s' if count != 1 else ''} · moeproxy").replace("</", "<\\/")
    return (f"<script>(function(){{const t={title};document.title=t;"
            "if(!window.__moeproxyTitle){window.__moeproxyTitle=new MutationObserver(function(){"
            "if(window.__moeproxyAlertTitle&&document.title!==window.__moeproxyAlertTitle)"
            "document.title=window.__moeproxyAlertTitle;});"
            "window.__moeproxyTitle.observe(document.querySelector('title'),{childList:true});}"
            "window.__moeproxyAlertTitle=t;})();</script>")


ALERT_REFRESH_SECONDS = 1.0  # a raised alert shows on any open page within about this (+ the watcher's cycle)


@st.fragment(run_every=ALERT_REFRESH_SECONDS)
def live_alerts() -> None:
    """On every page (the sidebar): the alerts a watcher raised in the last day, each linking to its
    run's Triage; a toast when one arrives while the page is open; the count in the tab's title."""
    from dashboard.safe_text import md_text

    alerts = queries.recent_alerts(queries.db_path())
    seen = st.session_state.setdefault("alerts_seen", None)
    keys = {(a.get("run"), a.get("verdict"), a.get("onset_step")) for a in alerts}
    if seen is not None:
        for a in alerts:
            if (a.get("run"), a.get("verdict"), a.get("onset_step")) not in seen:
                st.toast(f"ALERT {md_text(a.get('run'))}: {md_text(a.get('verdict'))} from step "
                         f"{md_text(a.get('onset_step'))}", icon=":material/warning:", duration="long")
    st.session_state["alerts_seen"] = keys
    if not alerts:
        return
    with st.container(key="live_alerts"):
        st.markdown(f":red-badge[:material/warning: {len(alerts)} live alert{'s' if len(alerts) != 1 else ''}]")
        for i, a in enumerate(alerts[:5]):
            onset = "" if a.get("onset_step") is None else f" from step {a['onset_step']}"
            update = f" (update {a['revision']})" if int(a.get("revision") or 1) > 1 else ""
            st.page_link("app_pages/triage.py", label=md_text(f"{a.get('run')}: {a.get('verdict')}{onset}{update}", 120),
                         icon=":material/error:", query_params={"run": str(a.get("run"))})
        if len(alerts) > 5:
            st.caption(f"and {len(alerts) - 5} more")
        st.html(_title_script(len(alerts)), unsafe_allow_javascript=True)
