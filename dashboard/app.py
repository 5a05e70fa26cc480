"""moeproxy dashboard entry point: page setup, first-run demo data, navigation.

Started by ``moeproxy dashboard`` (``streamlit run dashboard/app.py``). On a store with no runs
it loads the bundled demo runs (``data/demo/``, or ``$MOEPROXY_DEMO_DIR``) once, so a new user
lands on a diagnosed full run and its proxy. Pages live in ``app_pages/`` (not ``pages/``: Streamlit
treats a ``pages/`` folder as a legacy multipage app and, for a page URL opened directly, runs the
page without this entry point) and stay thin: they call ``dashboard.queries`` (cached store reads), and ``moeproxy`` functions (figures: ``moeproxy.figures``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `dashboard` and `moeproxy` from a clone

from dashboard import queries  # noqa: E402
from dashboard.live import live_alerts  # noqa: E402
from dashboard.safe_text import md_code, md_text  # noqa: E402
from moeproxy.errors import MoeproxyError  # noqa: E402

ICON = Path(__file__).resolve().parent / "assets" / "favicon.png"  # local: no request leaves the machine
st.set_page_config(page_title="moeproxy", page_icon=str(ICON) if ICON.exists() else None, layout="wide")


@st.cache_resource(show_spinner="Loading the demo runs into an empty store ...")
def load_demo_once(db: str) -> str:
    """Once per server process and database: load the demo runs when the store is empty."""
    from moeproxy.demo import DEMO_DIR, load_demo
    from moeproxy.store import Store

    demo_dir = os.environ.get("MOEPROXY_DEMO_DIR") or DEMO_DIR
    try:
        result = load_demo(Store(db), demo_dir)
    except MoeproxyError as exc:
        return f"demo data not loaded: {exc}"
    except Exception as exc:  # never let the first-run convenience keep the app from starting
        return f"demo data not loaded: {type(exc).__name__}: {exc}"
    note = f"loaded demo runs {', '.join(result.loaded)}" if result.loaded else (result.skipped_reason or "")
    return "; ".join([note, *result.warnings])


demo_note = load_demo_once(queries.db_path())

PAGE_SPECS = [  # (script, title, icon, url path)
    ("app_pages/runs.py", "Runs", ":material/table_rows:", "all-runs"),
    ("app_pages/triage.py", "Triage", ":material/monitor_heart:", "triage"),
    ("app_pages/compare.py", "Compare", ":material/compare:", "compare"),
    ("app_pages/proxy.py", "Proxy", ":material/account_tree:", "proxy"),
    ("app_pages/report.py", "Report", ":material/description:", "report"),
]
PAGES = [st.Page(path, title=title, icon=icon, url_path=url, default=i == 0)
         for i, (path, title, icon, url) in enumerate(PAGE_SPECS)]
# The default page is served at "/" only; "/runs" (a link someone typed or kept) leads to it too.
RUNS_ALIAS = st.Page("app_pages/runs_alias.py", title="Runs", url_path="runs")
# the menu is drawn here (page links), so the alias never shows in it
page = st.navigation([*PAGES, RUNS_ALIAS], position="hidden")
with st.sidebar:
    for p, (_, title, icon, _) in zip(PAGES, PAGE_SPECS):
        st.page_link(p, label=title, icon=icon)
    st.divider()
    live_alerts()
    st.caption(f"Store: {md_code(queries.db_path())}")
    if demo_note.startswith(("loaded", "demo data not loaded")):
        st.caption(md_text(demo_note))
page.run()
