"""Figures and colours that the dashboard and the HTML report both draw: plain data in, plotly
figures (or colour names) out. Pages and the report only place them.

No Streamlit and no SQL here: every function takes the frames that ``moeproxy.downsample`` returns
(long form: metric, step, value, attempt, latest, kind) and the findings dict of
``moeproxy.diagnose``, so tests call them directly and the report reuses them.

Drawing rules (shared/DESIGN.md): one shared step axis for all panels (subplots in one figure,
so zoom and pan stay synchronised); grad norm on a log axis; NaN and +-inf drawn as distinct
markers on their steps (never dropped); overwritten points of earlier restart attempts drawn
dotted and faint; smoothing (debiased EMA) is an extra line over the raw one, never a
replacement, so spikes stay visible; findings as vertical onset lines with labels.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

TRIAGE_PANELS = ["grad_norm", "loss", "routing_entropy"]
LOG_AXIS_METRICS = {"grad_norm", "loss_scale"}
NONFINITE_MARKERS = {  # kind -> (label, plotly symbol, colour)
    "nan": ("NaN", "x", "#d62728"),
    "inf": ("+inf", "triangle-up", "#9467bd"),
    "-inf": ("-inf", "triangle-down", "#8c564b"),
}
# The one verdict colour map: verdict -> colour name (Streamlit's badge colours); HTML gets the hex.
VERDICT_COLOURS = {
    "healthy": "green", "overflow": "red", "divergence": "red", "precision_mismatch": "orange",
    "routing_collapse": "violet", "entropy_collapse": "orange", "reward_collapse": "orange",
    "kl_explosion": "orange", "length_blowup": "orange", "vanishing_gradient": "orange",
}
NOT_DIAGNOSED_COLOUR = "gray"
OTHER_VERDICT_COLOUR = "blue"  # a category that is not ours (a user's detector)
COLOUR_HEX = {"green": "#2e7d32", "red": "#c62828", "orange": "#ef6c00", "violet": "#6a1b9a", "blue": "#1565c0",
              "gray": "#888888"}
RUN_COLOURS = {"full": "#1f77b4", "proxy": "#ff7f0e"}


def verdict_colour(verdict: str | None) -> str:
    """The colour name of a verdict (``COLOUR_HEX`` has its hex): gray when not diagnosed."""
    if not verdict:
        return NOT_DIAGNOSED_COLOUR
    return VERDICT_COLOURS.get(verdict, OTHER_VERDICT_COLOUR)


def plotly_text(text: object) -> str:
    """``text`` for a plotly title, legend, hover or annotation, shown as typed: plotly reads a subset
    of HTML there (``<a href>``, ``<b>``, ``<br>``), so ``&``, ``<`` and ``>`` become entities."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def ema_debiased(steps: np.ndarray, values: np.ndarray, beta: float) -> np.ndarray:
    """Debiased exponential moving average that respects gaps between steps.

    Each point's weight decays by ``beta ** (step gap)``, so the average over downsampled points
    approximates the per-step EMA; dividing by the accumulated weight removes the start-up bias
    (the TensorBoard/Adam correction). Non-finite values are skipped (they keep their markers).
    """
    if not 0 <= beta < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {beta}")
    steps = np.asarray(steps, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    acc = weight = 0.0
    previous = None
    for i, (s, v) in enumerate(zip(steps, values)):
        decay = beta ** (s - previous) if previous is not None else 0.0
        acc *= decay
        weight *= decay
        previous = s
        if math.isfinite(v):
            acc += (1 - beta) * v
            weight += 1 - beta
        out[i] = acc / weight if weight > 0 else np.nan
    return out


def _finite_bounds(frame: pd.DataFrame) -> tuple[float, float] | None:
    finite = frame.loc[frame["kind"] == "finite", "value"]
    if finite.empty:
        return None
    return float(finite.min()), float(finite.max())


def _marker_y(kind: str, bounds: tuple[float, float] | None, log_axis: bool) -> float:
    """Where a non-finite marker sits: at the top of the panel (NaN, +inf) or the bottom (-inf)."""
    if bounds is None:
        return 1.0
    lo, hi = bounds
    if log_axis:
        positive_lo = lo if lo > 0 else max(hi, 1e-12) * 1e-3
        return positive_lo if kind == "-inf" else max(hi, 1e-12)
    return lo if kind == "-inf" else hi


def _add_metric_traces(fig: go.Figure, frame: pd.DataFrame, row: int, *, name: str, colour: str,
                       x: str = "step", smoothing: float | None = None, log_axis: bool = False,
                       show_legend: bool = True, legend_group: str | None = None,
                       marker_bounds: tuple[float, float] | None = None) -> None:
    """Raw line (latest attempt), overwritten attempts, EMA and non-finite markers for one metric
    (markers at the top/bottom of ``marker_bounds``, default: this frame's finite range)."""
    group = legend_group or name
    name = plotly_text(name)
    latest = frame[frame["latest"]].sort_values("step")
    finite = latest[latest["kind"] == "finite"]
    # gaps at non-finite steps: a NaN in the y array breaks the line exactly there
    line = latest.assign(value=latest["value"].where(latest["kind"] == "finite"))
    fig.add_trace(go.Scatter(
        x=line[x].to_numpy(), y=line["value"].to_numpy(), mode="lines", name=name, legendgroup=group,
        showlegend=show_legend, line={"color": colour, "width": 1.2},
        opacity=0.45 if smoothing else 1.0,
        hovertemplate=f"{name}<br>step %{{customdata}}<br>%{{y:.6g}}<extra></extra>",
        customdata=line["step"].to_numpy(),
    ), row=row, col=1)
    if smoothing and not finite.empty:
        fig.add_trace(go.Scatter(
            x=finite[x].to_numpy(), y=ema_debiased(finite["step"].to_numpy(), finite["value"].to_numpy(), smoothing),
            mode="lines", name=f"{name} (EMA {smoothing:g})", legendgroup=group, showlegend=show_legend,
            line={"color": colour, "width": 2.2},
        ), row=row, col=1)
    for attempt, old in frame[~frame["latest"]].groupby("attempt"):
        old = old.sort_values("step")
        fig.add_trace(go.Scatter(
            x=old[x].to_numpy(), y=old["value"].where(old["kind"] == "finite").to_numpy(), mode="lines",
            name=f"{name} attempt {attempt} (overwritten)", legendgroup=group, showlegend=show_legend,
            line={"color": colour, "width": 1, "dash": "dot"}, opacity=0.5,
        ), row=row, col=1)
    bounds = marker_bounds or _finite_bounds(frame)
    for kind, (label, symbol, marker_colour) in NONFINITE_MARKERS.items():
        points = frame[frame["kind"] == kind]
        if points.empty:
            continue
        y = np.full(len(points), _marker_y(kind, bounds, log_axis))
        fig.add_trace(go.Scatter(
            x=points[x].to_numpy(), y=y, mode="markers", name=f"{name} {label}", legendgroup=group,
            showlegend=show_legend, marker={"symbol": symbol, "size": 10, "color": marker_colour,
                                            "line": {"width": 1, "color": "black"}},
            customdata=points["step"].to_numpy(),
            hovertemplate=f"{name} = {label}<br>step %{{customdata}}<extra></extra>",
        ), row=row, col=1)


def _add_findings(fig: go.Figure, findings: dict | None, x_of_step=lambda s: s, prefix: str = "",
                  colour: str = "#d62728", label_row: int = 0) -> None:
    """Vertical onset lines across all panels (the verdict's solid, other findings dashed), labelled
    once at the top of the figure, labels stacked so close onsets stay readable."""
    if not findings:
        return
    verdict_onset = findings.get("onset_step")
    seen: dict[tuple, int] = {}
    for finding in findings.get("findings", []):
        onset = finding.get("onset_step")
        key = (finding["category"], onset)
        if onset is None or key in seen:
            continue
        seen[key] = len(seen)
        is_root = finding["category"] == findings.get("verdict") and onset == verdict_onset
        x = x_of_step(onset)
        fig.add_vline(x=x, line_width=2 if is_root else 1, line_dash="solid" if is_root else "dash",
                      line_color=colour if is_root else "#7f7f7f", opacity=0.9)
        fig.add_annotation(
            x=x, y=1.0, xref="x", yref="paper", yanchor="top", xanchor="left", showarrow=False,
            yshift=-14 * (seen[key] + label_row), text=plotly_text(f"{prefix}{finding['category']} @ {onset}"),
            font={"size": 10, "color": colour if is_root else "#555"}, bgcolor="rgba(255,255,255,0.75)",
        )


BAND_COLOUR = "rgba(46, 125, 50, {alpha})"  # healthy green, faint: behind the run's own line


def _add_reference_band(fig: go.Figure, band: pd.DataFrame, row: int, span: tuple[int, int] | None,
                        show_legend: bool) -> None:
    """The healthy runs' 5-95 % band and median (``moeproxy.reference.reference_band``) behind a
    run's line: positions are steps, or, with this run's step ``span``, fractions of the run."""
    if band is None or band.empty:
        return
    x = band["position"].to_numpy(np.float64)
    if span is not None:
        x = span[0] + x * (span[1] - span[0])
    runs = band["runs"].to_numpy()
    fig.add_trace(go.Scatter(x=x, y=band["p95"].to_numpy(), mode="lines", line={"width": 0},
                             hoverinfo="skip", showlegend=False, legendgroup="reference"), row=row, col=1)
    fig.add_trace(go.Scatter(
        x=x, y=band["p05"].to_numpy(), mode="lines", line={"width": 0}, fill="tonexty",
        fillcolor=BAND_COLOUR.format(alpha=0.15), name="healthy runs 5-95 %", legendgroup="reference",
        showlegend=show_legend, hoverinfo="skip"), row=row, col=1)
    fig.add_trace(go.Scatter(
        x=x, y=band["median"].to_numpy(), mode="lines", line={"color": BAND_COLOUR.format(alpha=0.7), "width": 1,
                                                                 "dash": "dash"},
        name="healthy runs median", legendgroup="reference", showlegend=show_legend, customdata=runs,
        hovertemplate="healthy median %{y:.6g} (%{customdata} runs)<extra></extra>"), row=row, col=1)


def triage_figure(series: pd.DataFrame, metrics: list[str], findings: dict | None = None,
                  smoothing: float | None = None, title: str | None = None,
                  bands: dict[str, pd.DataFrame] | None = None, span: tuple[int, int] | None = None) -> go.Figure:
    """One panel per metric on a shared step axis, with non-finite markers and finding onsets; with
    ``bands`` (metric -> reference band), the healthy runs' band drawn behind each metric's line
    (band positions are steps, or fractions of the run when this run's step ``span`` is given)."""
    metrics = list(metrics) or TRIAGE_PANELS
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[plotly_text(m) for m in metrics])
    legend_shown = False
    for row, metric in enumerate(metrics, start=1):
        frame = series[series["metric"] == metric]
        log_axis = metric in LOG_AXIS_METRICS and _log_axis_possible(frame)
        band = (bands or {}).get(metric)
        if band is not None and not band.empty:
            _add_reference_band(fig, band, row, span, show_legend=not legend_shown)
            legend_shown = True
        if frame.empty:
            fig.add_annotation(text=plotly_text(f"no {metric} in this run"), showarrow=False, row=row, col=1,
                               xref="x domain", yref="y domain", x=0.5, y=0.5)
        else:
            _add_metric_traces(fig, frame, row, name=metric, colour=RUN_COLOURS["full"], smoothing=smoothing,
                               log_axis=log_axis)
        if log_axis:
            drawn = [frame.loc[frame["kind"] == "finite", "value"]]
            if band is not None and not band.empty:
                drawn += [band["p05"], band["p95"]]
            fig.update_yaxes(type="log", row=row, col=1, **_log_ticks(*drawn))
    _add_findings(fig, findings)
    fig.update_xaxes(title_text="step", row=len(metrics), col=1)
    _layout(fig, title, rows=len(metrics))
    return fig


def _log_ticks(*values) -> dict:
    """Tick settings for a log y axis over these values (the positive finite ones count). Plotly
    labels every digit when the axis spans a decade or two, and on a panel a hundred-odd pixels
    tall those labels overlap; so: 1-2-5 within three decades, each power of ten within eight,
    every k-th power beyond. Under 0.6 of a decade Plotly's own (linear-looking) ticks are kept."""
    arrays = [np.asarray(v, dtype=np.float64).ravel() for v in values]
    positive = np.concatenate(arrays) if arrays else np.empty(0)
    positive = positive[np.isfinite(positive) & (positive > 0)]
    if positive.size == 0:
        return {}
    decades = float(np.log10(positive.max()) - np.log10(positive.min()))
    if decades < 0.6:
        return {}
    if decades <= 3:
        return {"dtick": "D2"}
    return {"dtick": 1 if decades <= 8 else math.ceil(decades / 6), "exponentformat": "power"}


def _log_axis_possible(frame: pd.DataFrame) -> bool:
    finite = frame.loc[frame["kind"] == "finite", "value"]
    return not finite.empty and bool((finite > 0).any())


def _layout(fig: go.Figure, title: str | None, rows: int) -> None:
    fig.update_layout(title=None if title is None else plotly_text(title), height=max(320, 230 * rows + 80), margin={"l": 60, "r": 20, "t": 60, "b": 40},
                      hovermode="x unified", legend={"orientation": "h", "y": -0.08}, dragmode="select",
                      template="plotly_white")


def heatmap_figure(heat: pd.DataFrame, title: str = "routing entropy per layer") -> go.Figure:
    """Layers x step buckets heatmap from ``downsample.layer_heatmap`` (layer order numeric)."""
    fig = go.Figure()
    if heat.empty:
        fig.add_annotation(text="no per-layer routing entropy in this run", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
    else:
        layers = sorted(heat["metric"].unique(), key=_layer_number)
        table = heat.pivot_table(index="metric", columns="step", values="value", aggfunc="mean", dropna=False)
        table = table.reindex(layers)
        fig.add_trace(go.Heatmap(
            z=table.to_numpy(), x=table.columns.to_numpy(), y=[f"layer {_layer_number(m)}" for m in layers],
            colorscale="Viridis", colorbar={"title": "entropy"},
            hovertemplate="%{y}<br>from step %{x}<br>%{z:.4f}<extra></extra>",
        ))
    fig.update_layout(title=None if title is None else plotly_text(title), height=max(260, 24 * heat["metric"].nunique() + 140) if not heat.empty else 260,
                      margin={"l": 80, "r": 20, "t": 50, "b": 40}, xaxis_title="step", template="plotly_white")
    return fig


def _layer_number(metric: str) -> int:
    tail = metric.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def last_step(series: pd.DataFrame) -> int | None:
    """The last step of a downsampled series (M4 always keeps each bucket's last point)."""
    return int(series["step"].max()) if not series.empty else None


def align_steps(frame: pd.DataFrame, last_step: int | None, align: str) -> pd.DataFrame:
    """Add an ``x`` column: the step itself, or the fraction of the run (step / last step)."""
    if align not in ("step", "fraction"):
        raise ValueError(f"align must be 'step' or 'fraction', not {align!r}")
    if align == "step" or not last_step:
        return frame.assign(x=frame["step"].astype("float64"))
    return frame.assign(x=frame["step"] / float(last_step))


def compare_figure(full: pd.DataFrame, proxy: pd.DataFrame, metrics: list[str], *, align: str = "step",
                   full_last_step: int | None = None, proxy_last_step: int | None = None,
                   full_findings: dict | None = None, proxy_findings: dict | None = None,
                   names: tuple[str, str] = ("full", "proxy"), smoothing: float | None = None) -> go.Figure:
    """The triage panels with the full and the proxy run overlaid, aligned by step or fraction."""
    metrics = list(metrics) or TRIAGE_PANELS
    full = align_steps(full, full_last_step, align)
    proxy = align_steps(proxy, proxy_last_step, align)
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[plotly_text(m) for m in metrics])
    for row, metric in enumerate(metrics, start=1):
        log_axis = False
        both = pd.concat([full[full["metric"] == metric], proxy[proxy["metric"] == metric]])
        shared_bounds = _finite_bounds(both)  # one marker height per panel for both runs
        for (role, frame), label in zip((("full", full), ("proxy", proxy)), names):
            part = frame[frame["metric"] == metric]
            if part.empty:
                continue
            log_axis = log_axis or (metric in LOG_AXIS_METRICS and _log_axis_possible(part))
            _add_metric_traces(fig, part, row, name=f"{label}", colour=RUN_COLOURS[role], x="x",
                               smoothing=smoothing, log_axis=metric in LOG_AXIS_METRICS,
                               show_legend=row == 1, legend_group=label, marker_bounds=shared_bounds)
        if log_axis:
            fig.update_yaxes(type="log", row=row, col=1,
                             **_log_ticks(both.loc[both["kind"] == "finite", "value"]))
    for row, (findings, last, label, colour) in enumerate(
            ((full_findings, full_last_step, names[0], RUN_COLOURS["full"]),
             (proxy_findings, proxy_last_step, names[1], RUN_COLOURS["proxy"]))):
        if align == "fraction" and last:
            _add_findings(fig, _root_only(findings), lambda s, last=last: s / float(last), f"{label}: ", colour, row)
        else:
            _add_findings(fig, _root_only(findings), prefix=f"{label}: ", colour=colour, label_row=row)
    fig.update_xaxes(title_text="step" if align == "step" else "fraction of run", row=len(metrics), col=1)
    _layout(fig, None, rows=len(metrics))
    return fig


def _root_only(findings: dict | None) -> dict | None:
    """Only the verdict's finding (two runs' worth of secondary lines would clutter the overlay)."""
    if not findings or findings.get("onset_step") is None:
        return None
    root = [f for f in findings.get("findings", [])
            if f["category"] == findings.get("verdict") and f.get("onset_step") == findings.get("onset_step")]
    return {**findings, "findings": root[:1]}


def findings_rows(findings: dict | None) -> list[dict]:
    """The findings as table rows (category, onset, severity, metric, rule, evidence)."""
    if not findings:
        return []
    return [{"category": f.get("category"), "onset_step": f.get("onset_step"), "severity": f.get("severity"),
             "metric": f.get("metric"), "rule": f.get("rule"), "evidence": f.get("evidence")}
            for f in findings.get("findings", [])]
