"""Compare a full run and its proxy: the triage panels overlaid (by step or by fraction of the run),
with any other runs added to the overlay, and the fidelity card of ``moeproxy compare``; below them
the fidelity grid of ``bench/fidelity.py`` (``moeproxy dashboard --grid FILE`` or ``$MOEPROXY_GRID``)."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from dashboard import queries
from dashboard.safe_text import md_code, md_failure, verdict_badge
from dashboard.live import REFRESH_SECONDS, grown_series, is_live
from moeproxy.figures import TRIAGE_PANELS, compare_figure, last_step


@st.cache_data(ttl=600, max_entries=8, show_spinner=False)
def grid_cells(path: str, mtime_ns: int, size: int):
    """The grid file's cells (``moeproxy.fidelity_grid``), read again when the file changes."""
    from moeproxy.fidelity_grid import load_grid, summarise_grid

    return summarise_grid(load_grid(path))


def fidelity_grid_section() -> None:
    """The grid: verdict match, onset gap and curve agreement beside the replica's ceiling, cost
    ratio; a table with the match cells marked (symbol and colour) and the match heat map."""
    st.subheader("Fidelity grid")
    path = os.environ.get("MOEPROXY_GRID")
    if not path:
        st.caption("No grid loaded. Run the grid with `python bench/fidelity.py --out DIR` (or tabulate pairs "
                   "already run with `--table-only`), then start `moeproxy dashboard --grid DIR/results.json` "
                   "(or set `MOEPROXY_GRID`).")
        return
    try:
        info = Path(path).stat()
        cells = grid_cells(path, info.st_mtime_ns, info.st_size)
    except Exception as exc:  # a warning, never a dead page
        st.warning(md_failure(exc))
        return
    from moeproxy.fidelity_grid import grid_table_html
    from moeproxy.figures import fidelity_grid_figure

    st.caption(f"{md_code(path)}: {sum(c.pairs for c in cells)} pairs. Onset gap = |onset proxy - onset full| / "
               "onset full; r = Pearson correlation of the curves, mean over seeds, beside the replica's (the "
               "full model with another sampling seed: the noise ceiling); cost = proxy/full, median over seeds.")
    st.plotly_chart(fidelity_grid_figure(cells), key="fidelity_grid_chart", width="stretch")
    with st.container(key="fidelity_grid_table"):
        st.html(grid_table_html(cells))  # escaped HTML: names from the file are text, never Markdown


st.title("Compare full vs proxy")
db = queries.db_path()
version = queries.data_version()
table = queries.runs(db, version)
if len(table) < 2:
    st.info("Compare needs two runs: a full run and its proxy (link them on the Runs page).")
    fidelity_grid_section()
    st.stop()

proxies = table[table["role"] == "proxy"]["run"].tolist()


def linked_full(proxy: str) -> str | None:
    """The full run a proxy run is linked to (Runs page, `--proxy-of`), if it is stored."""
    linked = table.loc[table["run"] == proxy, "proxy_of"].iloc[0]
    return linked if isinstance(linked, str) and linked in table["run"].tolist() and linked != proxy else None


def follow_link() -> None:
    """Picking another proxy run also picks its full run."""
    linked = linked_full(st.session_state["compare_proxy"])
    if linked is not None:
        st.session_state["compare_full"] = linked


c1, c2 = st.columns(2)
proxy_run = c1.selectbox("Proxy run", proxies or table["run"].tolist(), key="compare_proxy", on_change=follow_link)
full_choices = [r for r in table["run"].tolist() if r != proxy_run]
if st.session_state.get("compare_full") not in full_choices:
    st.session_state["compare_full"] = linked_full(proxy_run) or full_choices[0]
full_run = c2.selectbox("Full run", full_choices, key="compare_full")
extra_runs = st.multiselect("More runs on the overlay (e.g. other proxies, random pruning, a rerun)",
                            [r for r in table["run"].tolist() if r not in (full_run, proxy_run)],
                            key="compare_more_runs", max_selections=6)

stored = sorted(set(queries.metrics(db, version, full_run)) & set(queries.metrics(db, version, proxy_run)))
c1, c2, c3 = st.columns([2, 1, 1])
extra = c1.multiselect("More metrics (type to search)", [m for m in stored if m not in TRIAGE_PANELS],
                       key="compare_metrics")
align = c2.radio("Align by", ["step", "fraction"], horizontal=True, key="compare_align",
                 format_func=lambda a: "step" if a == "step" else "fraction of run")
smoothing = c3.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="compare_smoothing")
panels = [m for m in TRIAGE_PANELS if m in stored] + extra or stored[:3]

live = is_live(db, full_run) or is_live(db, proxy_run)
if live:
    st.markdown(f":green-badge[:material/sensors: live] a watcher is adding steps; the chart refreshes every "
                f"{REFRESH_SECONDS:g} s")


@st.fragment(run_every=REFRESH_SECONDS if live else None)
def overlay() -> None:
    now = queries.data_version()
    runs_now = queries.runs(db, now)
    attempts = dict(zip(runs_now["run"], runs_now["attempts"]))
    full_series = grown_series(db, now, full_run, tuple(panels), "compare_full_series",
                               attempts=int(attempts.get(full_run, 0)))
    proxy_series = grown_series(db, now, proxy_run, tuple(panels), "compare_proxy_series",
                                attempts=int(attempts.get(proxy_run, 0)))
    full_findings = queries.findings(db, now, full_run)
    proxy_findings = queries.findings(db, now, proxy_run)
    others = []
    for i, name in enumerate(extra_runs):
        series = grown_series(db, now, name, tuple(panels), f"compare_more_series_{i}",
                              attempts=int(attempts.get(name, 0)))
        others.append((name, series, last_step(series), queries.findings(db, now, name)))
    fig = compare_figure(full_series, proxy_series, panels, align=align,
                         full_last_step=last_step(full_series), proxy_last_step=last_step(proxy_series),
                         full_findings=full_findings, proxy_findings=proxy_findings,
                         names=(full_run, proxy_run), smoothing=smoothing or None, others=others)
    st.plotly_chart(fig, key="compare_chart", width="stretch")

    st.subheader("Fidelity card")
    for name, found in ((full_run, full_findings), (proxy_run, proxy_findings),
                        *((o[0], o[3]) for o in others)):
        onset = (found or {}).get("onset_step")
        st.markdown(f"**{md_code(name)}**: {verdict_badge((found or {}).get('verdict'))}"
                    + (f" from step {onset}" if onset is not None else ""))


overlay()


@st.cache_data(ttl=600, max_entries=32, show_spinner="Comparing the runs ...")
def fidelity_card(db: str, version: int, full: str, proxy: str) -> dict | str:
    from moeproxy.fidelity import compare_runs

    try:
        return compare_runs(queries.store(), full, proxy)
    except Exception as exc:  # shown as a warning, never a dead page
        return md_failure(exc)


card = fidelity_card(db, version, full_run, proxy_run)
if isinstance(card, str):
    st.warning(card)
else:
    from moeproxy.fidelity import card_metrics

    headline = card_metrics(card)
    cols = st.columns(4)
    for i, (label, value) in enumerate(headline):
        cols[i % 4].metric(label, value)
    with st.expander("Fidelity card (JSON, as `moeproxy compare` prints it)"):
        st.json(card)

fidelity_grid_section()
