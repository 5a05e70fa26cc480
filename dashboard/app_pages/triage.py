"""Triage one run: grad norm (log), loss and routing entropy on one step axis, any searched metric,
per-layer routing entropy, NaN/inf markers, finding onsets, smoothing, box-select zoom."""

from __future__ import annotations

import streamlit as st

from dashboard import queries
from dashboard.safe_text import md_code, md_failure, md_text, verdict_badge
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
findings = queries.findings(db, version, run)
extra = st.multiselect("More metrics (type to search)", [m for m in stored if m not in TRIAGE_PANELS],
                       key="triage_metrics", placeholder="search metrics, e.g. kl, reward, clipfrac")
panels = [m for m in TRIAGE_PANELS if m in stored] + extra or stored[:3]

c1, c2, c3 = st.columns([2, 2, 1])
smoothing = c1.slider("Smoothing (debiased EMA; raw line stays drawn)", 0.0, 0.99, 0.0, 0.01, key="triage_smoothing")
full_range = queries.step_range(db, version, run, tuple(panels))
zoom_key = f"zoom:{run}"
zoom = st.session_state.get(zoom_key)
if full_range:
    lo, hi = zoom or full_range
    c2.caption(f"Steps {lo:,} - {hi:,} of {full_range[0]:,} - {full_range[1]:,}. "
               "Drag on the chart to select a step range; it is re-queried at full resolution.")
if c3.button("Reset zoom", key="triage_reset_zoom", disabled=zoom is None):
    st.session_state.pop(zoom_key, None)
    st.rerun()

lo, hi = zoom if zoom else (None, None)
series = queries.m4(db, version, run, tuple(panels), lo, hi, 1000)
fig = triage_figure(series, panels, findings, smoothing=smoothing or None,
                    title=f"{run} — {', '.join(panels)}")
event = st.plotly_chart(fig, key="triage_chart", on_select="rerun", selection_mode=("box",), width="stretch")
boxes = (event or {}).get("selection", {}).get("box", []) if event else []
if boxes:
    xs = boxes[0].get("x", [])
    if len(xs) == 2 and xs[1] != xs[0]:
        new = (int(min(xs)), int(max(xs)) + 1)
        if new != zoom:
            st.session_state[zoom_key] = new
            st.rerun()

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
    for row in findings_rows(findings):
        st.markdown(f"- **{md_text(row['category'])}** ({md_text(row['severity'])}) at step {md_text(row['onset_step'])} "
                    f"on {md_code(row['metric'])} \\[{md_text(row['rule'])}\\]: {md_text(row['evidence'])}")
from moeproxy.diagnose.record import diagnose_and_record, findings_are_stale  # noqa: E402

if findings_are_stale(findings):
    if st.button("Diagnose now" if findings is None else f"Re-diagnose (findings are from "
                 f"{md_text(findings.get('detector_version'))})", key="triage_diagnose"):
        try:
            diagnose_and_record(queries.store(), run, only_if_stale=True)
            st.rerun()
        except Exception as exc:  # show the detector's failure instead of a blank page
            st.error("diagnosis failed: " + md_failure(exc))

st.subheader("Routing entropy per layer")
heat = queries.heatmap(db, version, run, lo, hi)
st.plotly_chart(heatmap_figure(heat), key="triage_heatmap", width="stretch")
