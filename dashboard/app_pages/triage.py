"""Triage one run: grad norm (log), loss and routing entropy on one step axis, any searched metric,
per-layer routing entropy, NaN/inf markers, finding onsets, smoothing, box-select zoom."""

from __future__ import annotations

import math

import streamlit as st

from dashboard import queries
from dashboard.safe_text import md_code, md_failure, md_text, verdict_badge
from dashboard.live import REFRESH_SECONDS, grown_series, is_live
from moeproxy.diagnose.record import diagnose_and_record, findings_are_stale
from moeproxy.figures import TRIAGE_PANELS, findings_rows, heatmap_figure, triage_figure

st.title("Triage")
db = queries.db_path()
version = queries.data_version()
table = queries.runs(db, version)
run = queries.selected_run(table, key="triage_run")
if run is None:
    st.info("No runs yet: ingest one on the Runs page.")
    st.stop()

stored = queries.metrics(db, version, run)
extra = st.multiselect("More metrics (type to search)", [m for m in stored if m not in TRIAGE_PANELS],
                       key="triage_metrics", placeholder="search metrics, e.g. kl, reward, clipfrac")
panels = [m for m in TRIAGE_PANELS if m in stored] + extra or stored[:3]

c1, c2, c3 = st.columns([2, 2, 1])
smoothing = c1.slider("Smoothing (debiased EMA; raw line stays drawn)", 0.0, 0.99, 0.0, 0.01, key="triage_smoothing")
zoom_key = f"zoom:{run}"
zoom = st.session_state.get(zoom_key)
c2.caption("Drag on the chart to select a step range; it is re-queried at full resolution.")
if c3.button("Reset zoom", key="triage_reset_zoom", disabled=zoom is None):
    st.session_state.pop(zoom_key, None)
    st.rerun()

lo, hi = zoom if zoom else (None, None)
live = is_live(db, run)
c1, c2, c3 = st.columns([1, 1, 2])
show_band = c1.toggle("Healthy runs' band", value=True, key="triage_band",
                      help="The median and 5-95 % band of each metric across the runs diagnosed healthy in "
                           "this store, behind this run's line")
band_by = c2.radio("Band aligned by", ["step", "fraction"], horizontal=True, key="triage_band_by",
                   format_func=lambda a: "step" if a == "step" else "fraction of run", disabled=not show_band,
                   help="By step compares the same training step (right for a run still growing); by "
                        "fraction compares runs of different lengths")
if live:
    c3.markdown(f":green-badge[:material/sensors: live] a watcher is adding steps to this run; the chart "
                f"and findings refresh every {REFRESH_SECONDS:g} s")
BAND_BINS = 50
MIN_BAND_RUNS = 3  # runs a bin needs before its band is drawn
healthy = tuple(table.loc[(table["verdict"] == "healthy") & (table["run"] != run), "run"])


@st.fragment(run_every=REFRESH_SECONDS if live else None)
def run_view() -> None:
    now = queries.data_version()
    runs_now = queries.runs(db, now)
    attempts = runs_now.loc[runs_now["run"] == run, "attempts"]
    series = grown_series(db, now, run, tuple(panels), "triage_series", lo, hi,
                          int(attempts.iloc[0]) if len(attempts) else 0)
    findings = queries.findings(db, now, run)
    span = queries.step_range(db, now, run, tuple(panels))
    bands = None
    if show_band and healthy and span:
        # by step: bins a power of ten wide, at most 1,000 of them over this run's steps so far (a
        # width that changes only tenfold, so a live run's refreshes reuse the cached band)
        width = 10 ** int(math.log10(max(1, span[1] // 100)))
        bands = queries.reference_bands(db, healthy, run, tuple(panels), band_by,
                                        BAND_BINS if band_by == "fraction" else width)
        if band_by == "step":  # the band over this run's steps so far, not the healthy runs' whole length
            bands = {m: b[(b["position"] >= span[0] - width) & (b["position"] <= span[1] + width)]
                     for m, b in bands.items()}
        # a 5-95 % band of one or two runs is those runs' lines, not what is normal
        bands = {m: b[b["runs"] >= MIN_BAND_RUNS] for m, b in bands.items()}
        bands = {m: b for m, b in bands.items() if not b.empty}
    fig = triage_figure(series, panels, findings, smoothing=smoothing or None,
                        title=f"{run} — {', '.join(panels)}", bands=bands,
                        span=span if band_by == "fraction" else None)
    event = st.plotly_chart(fig, key="triage_chart", on_select="rerun", selection_mode=("box",), width="stretch")
    boxes = (event or {}).get("selection", {}).get("box", []) if event else []
    if boxes:
        xs = boxes[0].get("x", [])
        if len(xs) == 2 and xs[1] != xs[0]:
            new = (int(min(xs)), int(max(xs)) + 1)
            if new != zoom:
                st.session_state[zoom_key] = new
                st.rerun()
    if span:
        shown = f"steps {zoom[0]:,} - {zoom[1]:,} of {span[0]:,} - {span[1]:,}" if zoom else \
            f"steps {span[0]:,} - {span[1]:,}"
        if bands:
            band_note = f" · healthy band from {max(int(b['runs'].max()) for b in bands.values())} runs"
        elif show_band:
            band_note = (f" · no healthy band: it needs {MIN_BAND_RUNS} healthy runs with these metrics "
                         f"(this store has {len(healthy)} other healthy run(s))")
        else:
            band_note = ""
        st.caption(f"Last step {span[1]:,} · {shown}{band_note}")

    nonfinite = series[series["kind"] != "finite"]
    if not nonfinite.empty:
        counts = nonfinite.groupby(["metric", "kind"]).size()
        st.caption("Non-finite points drawn as markers: " +
                   ", ".join(f"{md_code(m)} {k} x{n}" for (m, k), n in counts.items()) +
                   " (x: NaN, triangle up: +inf, triangle down: -inf)")
    if (~series["latest"]).any():
        st.caption("Dotted lines: points of earlier restart attempts that a later attempt overwrote.")

    st.subheader("Findings")
    if findings is None:
        st.write(verdict_badge(None))
    else:
        onset = findings.get("onset_step")
        st.markdown(f"Verdict {verdict_badge(findings.get('verdict'))}"
                    + (f" from step **{onset}**" if onset is not None else "")
                    + (f" · confidence **{md_text(findings['confidence'])}** ({md_text(findings.get('confidence_reason', ''))})"
                       if findings.get("confidence") else "")
                    + f" · detector {md_code(findings.get('detector_version', '?'))}")
        for alt in findings.get("alternatives") or []:
            st.markdown(f"Another reading: **{md_text(alt['category'])}** from step {md_text(alt['onset_step'])} "
                        f"({md_text(alt['why'])})")
        for row in findings_rows(findings):
            st.markdown(f"- **{md_text(row['category'])}** ({md_text(row['severity'])}) at step {md_text(row['onset_step'])} "
                        f"on {md_code(row['metric'])} \\[{md_text(row['rule'])}\\]: {md_text(row['evidence'])}")
    if findings_are_stale(findings) and not live:  # a watcher re-diagnoses a live run itself
        if st.button("Diagnose now" if findings is None else f"Re-diagnose (findings are from "
                     f"{md_text(findings.get('detector_version'))})", key="triage_diagnose"):
            try:
                diagnose_and_record(queries.store(), run, only_if_stale=True)
                st.rerun()
            except Exception as exc:  # show the detector's failure instead of a blank page
                st.error("diagnosis failed: " + md_failure(exc))

    st.subheader("Routing entropy per layer")
    heat = queries.heatmap(db, now, run, lo, hi)
    st.plotly_chart(heatmap_figure(heat), key="triage_heatmap", width="stretch")


run_view()
