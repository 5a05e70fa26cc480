"""Triage one run: the answer first (verdict, onset, confidence, alternatives, the evidence), then
the metrics that show it on one step axis — grad norm, loss, routing entropy and the metrics the
findings cite, each its own colour — with NaN/inf markers, finding onsets, smoothing, per-panel
log axes, wall time as an optional x axis, box-select zoom, and comparable healthy runs' band.

The view lives in the URL (``?run=...&metrics=a,b&zoom=lo-hi&smooth=0.6&x=step&log=grad_norm``),
so a link opened in a fresh browser shows the same run, metrics and zoom."""

from __future__ import annotations

import streamlit as st

from dashboard import queries
from dashboard.live import REFRESH_SECONDS, grown_series, is_live
from dashboard.safe_text import md_code, md_failure, md_text, verdict_badge
from dashboard.view_state import url_float, url_list, url_range, url_text, write_url
from moeproxy.diagnose.record import diagnose_and_record, findings_are_stale
from moeproxy.diagnose.render import cited_metrics, findings_markdown, headline
from moeproxy.figures import LOG_AXIS_METRICS, TRIAGE_PANELS, heatmap_figure, triage_figure
from moeproxy.reference import MIN_BAND_RUNS, band_bins, bands_to_draw
from moeproxy.vocabulary import LAYER_PREFIX

st.title("Triage")
db = queries.db_path()
version = queries.data_version()
table = queries.runs(db, version)
run = queries.selected_run(table, key="triage_run")  # a link's ?run= first
if run is None:
    st.info("No runs yet: ingest one on the Runs page.")
    st.stop()
live = is_live(db, run)


@st.fragment(run_every=REFRESH_SECONDS if live else None)
def verdict_banner() -> None:
    """The answer at the top: verdict, onset, confidence, the other readings, one line of evidence
    (redrawn with the chart while a watcher grows the run)."""
    head = headline(queries.findings(db, queries.data_version(), run))
    with st.container(border=True, key="verdict_banner"):
        if head["verdict"] is None:
            st.markdown(f"### {verdict_badge(None)}")
            st.caption("This run has no stored diagnosis yet.")
            return
        onset = "" if head["onset_step"] is None else f" from step **{head['onset_step']:,}**"
        epoch = "" if head["onset_epoch"] is None else f" (epoch {head['onset_epoch']:g})"
        confidence = f" · confidence **{md_text(head['confidence'])}**" if head["confidence"] else ""
        st.markdown(f"### {verdict_badge(head['verdict'])}{onset}{epoch}{confidence}")
        if head["reason"]:
            st.caption(md_text(head["reason"]))
        if head["evidence"]:
            st.markdown(f"{md_code(head['metric'])}: {md_text(head['evidence'])}" if head["metric"]
                        else md_text(head["evidence"]))
        for alt in head["alternatives"]:
            st.markdown(f"Another reading: **{md_text(alt['category'])}** from step {md_text(alt['onset_step'])} "
                        f"({md_text(alt['why'])})")


verdict_banner()
findings_now = queries.findings(db, version, run)

stored = queries.metrics(db, version, run)
plain = [m for m in stored if not m.startswith(LAYER_PREFIX)]
default_panels = [m for m in TRIAGE_PANELS if m in stored]
default_panels += [m for m in cited_metrics(findings_now) if m in stored and m not in default_panels]
default_panels = [m for m in default_panels if m in plain] or plain[:3]
metrics_key = f"triage_metrics:{run}"
if metrics_key not in st.session_state:  # a link's metrics first, else the defaults
    wanted = [m for m in url_list("metrics") if m in stored] if url_text("run") == run else []
    st.session_state[metrics_key] = wanted or default_panels
panels = st.multiselect("Metrics (type to search; the findings' metrics are drawn by default)", plain,
                        key=metrics_key, placeholder="search metrics, e.g. kl, reward, clipfrac") or default_panels

c1, c2, c3, c4 = st.columns([3, 2, 3, 1])
if "triage_smoothing" not in st.session_state:
    st.session_state["triage_smoothing"] = min(0.99, max(0.0, url_float("smooth", 0.0)))
smoothing = c1.slider("Smoothing (debiased EMA; raw line stays drawn)", 0.0, 0.99, step=0.01, key="triage_smoothing")
x_options = ["step", "wall_time"] if queries.has_wall_time(db, version, run) else ["step"]
if "triage_x" not in st.session_state:
    st.session_state["triage_x"] = url_text("x") if url_text("x") in x_options else "step"
x_axis = c2.radio("x axis", x_options, horizontal=True, key="triage_x",
                  format_func=lambda a: "step" if a == "step" else "wall time",
                  help="Wall time: when each step was logged (only where the log carries times)")
log_key = f"triage_log:{run}"
if log_key not in st.session_state:
    from_url = url_list("log") if url_text("run") == run and url_text("log") is not None else None
    st.session_state[log_key] = [m for m in (from_url if from_url is not None else LOG_AXIS_METRICS) if m in panels]
else:  # a metric taken off the chart leaves the log-axis choice too
    st.session_state[log_key] = [m for m in st.session_state[log_key] if m in panels]
log_panels = c3.multiselect("Log y axis", panels, key=log_key, help="The panels drawn on a logarithmic axis")
zoom_key = f"zoom:{run}"
if zoom_key not in st.session_state and url_text("run") == run and url_range("zoom"):
    st.session_state[zoom_key] = url_range("zoom")
zoom = st.session_state.get(zoom_key)
if c4.button("Reset zoom", key="triage_reset_zoom", disabled=zoom is None):
    st.session_state.pop(zoom_key, None)
    st.query_params.pop("zoom", None)  # else the link would zoom it back in
    st.rerun()
lo, hi = zoom if zoom else (None, None)
write_url(run=run, metrics=",".join(panels), zoom=f"{lo}-{hi}" if zoom else None,
          smooth=f"{smoothing:g}" if smoothing else None, x=x_axis if x_axis != "step" else None,
          log=",".join(log_panels))

comparable = queries.comparable_runs(db, version, run)
with st.expander("Reference band: what healthy runs like this one look like", expanded=False):
    b1, b2 = st.columns([1, 2])
    show_band = b1.toggle("Draw the band", value=True, key="triage_band",
                          help="The median and 5-95 % band of each metric across the reference runs, behind "
                               "this run's line; it never changes the axis range")
    band_by = b1.radio("Aligned by", ["step", "fraction"], horizontal=True, key="triage_band_by",
                       format_func=lambda a: "step" if a == "step" else "fraction of run", disabled=not show_band,
                       help="By step compares the same training step (right for a run still growing); by "
                            "fraction compares runs of different lengths")
    others = [r for r in table["run"] if r != run]
    references = b2.multiselect(
        "Reference runs (default: the healthy runs of the same framework and kind — RL or supervised)",
        others, default=[r for r in comparable if r in others], key=f"triage_references:{run}")
if live:
    st.markdown(f":green-badge[:material/sensors: live] a watcher is adding steps to this run; the chart "
                f"and findings refresh every {REFRESH_SECONDS:g} s")
st.caption("Drag on the chart to select a step range; it is re-queried at full resolution. "
           "Hover reads every panel at one step.")


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
    if show_band and references and span and x_axis == "step":
        bins = band_bins(band_by, span)
        bands = bands_to_draw(queries.reference_bands(db, tuple(references), run, tuple(panels), band_by, bins),
                              band_by, span, bins)
    if x_axis == "wall_time":
        series = series.merge(queries.step_times(db, now, run, tuple(panels)), on="step", how="left")
    fig = triage_figure(series, panels, findings, smoothing=smoothing or None, bands=bands,
                        span=span if band_by == "fraction" else None, log_metrics=set(log_panels), x=x_axis)
    event = st.plotly_chart(fig, key="triage_chart", on_select="rerun", selection_mode=("box",), width="stretch")
    boxes = (event or {}).get("selection", {}).get("box", []) if event else []
    if boxes and x_axis == "step":
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
            band_note = f" · band from {max(int(b['runs'].max()) for b in bands.values())} reference runs"
        elif show_band:
            band_note = (f" · no reference band: it needs {MIN_BAND_RUNS} comparable healthy runs with these "
                         f"metrics ({len(references)} chosen)")
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

    bullets = findings_markdown(findings, md_text, md_code)
    with st.expander(f"All findings ({len(bullets)})" + (f" · detector {findings.get('detector_version', '?')}"
                                                         if findings else ""), expanded=False):
        for bullet in bullets:
            st.markdown(bullet)
        if not bullets:
            st.caption("No findings.")
    if findings_are_stale(findings) and not live:  # a watcher re-diagnoses a live run itself
        if st.button("Diagnose now" if findings is None else f"Re-diagnose (findings are from "
                     f"{md_text(findings.get('detector_version'))})", key="triage_diagnose"):
            try:
                diagnose_and_record(queries.store(), run, only_if_stale=True)
                st.rerun()
            except Exception as exc:  # show the detector's failure instead of a blank page
                st.error("diagnosis failed: " + md_failure(exc))

    if any(m.startswith(LAYER_PREFIX) for m in stored):  # no empty panel on runs without routing
        st.subheader("Routing entropy per layer")
        heat = queries.heatmap(db, now, run, lo, hi)
        st.plotly_chart(heatmap_figure(heat), key="triage_heatmap", width="stretch")


run_view()
