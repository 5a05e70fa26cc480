"""Figures and colours that the dashboard and the HTML report both draw: plain data in, plotly
figures (or colour names) out. Pages and the report only place them.

No Streamlit and no SQL here: every function takes the frames that ``moeproxy.store.downsample`` returns
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
OTHER_RUN_COLOURS = ("#2ca02c", "#17becf", "#e377c2", "#bcbd22", "#7f7f7f", "#393b79")


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


# Each metric its own colour (a run's panels), from a qualitative palette without the reds, purples and
# browns of the non-finite markers and without the verdict line's red.
METRIC_PALETTE = ("#1f77b4", "#2ca02c", "#ff7f0e", "#17becf", "#e377c2", "#bcbd22", "#7f7f7f", "#393b79",
                  "#637939", "#8c6d31")


def metric_colour(index: int) -> str:
    return METRIC_PALETTE[index % len(METRIC_PALETTE)]


def _axis(row: int) -> str:
    """The y axis of panel ``row`` (1-based) as a trace names it: y, y2, y3 ..."""
    return "y" if row == 1 else f"y{row}"


def _stacked(rows: int, titles: list[str]) -> go.Figure:
    """One x axis under ``rows`` stacked y axes (panels), so hover reads every panel at one step
    (``hoversubplots``), zoom and pan move all panels together, and a box drawn on any panel is a
    step range. Panel titles sit above each panel, left."""
    gap = 0.06 if rows > 1 else 0.0
    height = (1.0 - gap * (rows - 1)) / rows
    layout: dict = {"xaxis": {"anchor": _axis(rows), "domain": [0.0, 1.0]}}
    annotations = []
    for row in range(1, rows + 1):
        top = 1.0 - (row - 1) * (height + gap)
        layout["yaxis" if row == 1 else f"yaxis{row}"] = {"domain": [max(0.0, top - height), top], "anchor": "x"}
        annotations.append({"text": f"<b>{plotly_text(titles[row - 1])}</b>", "x": 0.0, "xref": "paper",
                            "xanchor": "left", "y": top, "yref": "paper", "yanchor": "bottom", "showarrow": False,
                            "font": {"size": 12}, "name": "panel title"})
    fig = go.Figure(layout=layout)
    for a in annotations:
        fig.add_annotation(**a)
    return fig


def _add(fig: go.Figure, trace, row: int) -> None:
    trace.update(xaxis="x", yaxis=_axis(row))
    fig.add_trace(trace)


def _yaxis(fig: go.Figure, row: int, **settings) -> None:
    fig.layout["yaxis" if row == 1 else f"yaxis{row}"].update(**settings)


def _x_values(frame: pd.DataFrame, x: str) -> np.ndarray:
    if x == "wall_time":  # seconds since the epoch -> datetimes (plotly draws a date axis)
        return pd.to_datetime(frame["wall_time"], unit="s", utc=True).dt.tz_localize(None).to_numpy()
    return frame[x].to_numpy()


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
    _add(fig, go.Scatter(
        x=_x_values(line, x), y=line["value"].to_numpy(), mode="lines", name=name, legendgroup=group,
        showlegend=show_legend, line={"color": colour, "width": 1.2},
        opacity=0.45 if smoothing else 1.0,
        hovertemplate=f"{name} %{{y:.6g}} (step %{{customdata}})<extra></extra>",
        customdata=line["step"].to_numpy(),
    ), row)
    if smoothing and not finite.empty:
        _add(fig, go.Scatter(
            x=_x_values(finite, x), y=ema_debiased(finite["step"].to_numpy(), finite["value"].to_numpy(), smoothing),
            mode="lines", name=f"{name} (EMA {smoothing:g})", legendgroup=group, showlegend=show_legend,
            line={"color": colour, "width": 2.2}, hovertemplate=f"{name} EMA %{{y:.6g}}<extra></extra>",
        ), row)
    for attempt, old in frame[~frame["latest"]].groupby("attempt"):
        old = old.sort_values("step")
        _add(fig, go.Scatter(
            x=_x_values(old, x), y=old["value"].where(old["kind"] == "finite").to_numpy(), mode="lines",
            name=f"{name} attempt {attempt} (overwritten)", legendgroup=group, showlegend=show_legend,
            line={"color": colour, "width": 1, "dash": "dot"}, opacity=0.5,
        ), row)
    bounds = marker_bounds or _finite_bounds(frame)
    for kind, (label, symbol, marker_colour) in NONFINITE_MARKERS.items():
        points = frame[frame["kind"] == kind]
        if points.empty:
            continue
        y = np.full(len(points), _marker_y(kind, bounds, log_axis))
        _add(fig, go.Scatter(
            x=_x_values(points, x), y=y, mode="markers", name=f"{name} {label}", legendgroup=group,
            showlegend=show_legend, marker={"symbol": symbol, "size": 10, "color": marker_colour,
                                            "line": {"width": 1, "color": "black"}},
            customdata=points["step"].to_numpy(),
            hovertemplate=f"{name} = {label} (step %{{customdata}})<extra></extra>",
        ), row)


LABEL_PX = 15  # one onset label's height in the strip above the panels


def _add_findings(fig: go.Figure, findings: dict | None, x_of_step=lambda s: s, prefix: str = "",
                  colour: str = "#d62728", label_row: int = 0) -> int:
    """Vertical onset lines across all panels (the verdict's solid, other findings dashed; notes none), labelled
    in a strip above the panels (never on the data), one label per line of the strip; returns the
    number of strip lines used (the caller makes room for them in the top margin)."""
    if not findings:
        return 0
    verdict_onset = findings.get("onset_step")
    seen: dict[tuple, int] = {}
    for finding in findings.get("findings", []):
        onset = finding.get("onset_step")
        key = (finding["category"], onset)
        if onset is None or key in seen or finding.get("severity") == "info":
            continue  # (a note, e.g. a lone NaN in the first record, is no anomaly to mark on a healthy run)
        seen[key] = len(seen)
        is_root = finding["category"] == findings.get("verdict") and onset == verdict_onset
        x = x_of_step(onset)
        fig.add_shape(type="line", x0=x, x1=x, xref="x", y0=0, y1=1, yref="paper", layer="below",
                      line={"width": 2 if is_root else 1, "dash": "solid" if is_root else "dash",
                            "color": colour if is_root else "#7f7f7f"}, opacity=0.9)
        fig.add_annotation(
            x=x, y=1.0, xref="x", yref="paper", yanchor="bottom", xanchor="left", showarrow=False,
            yshift=LABEL_PX * (seen[key] + label_row) + 18,
            text=plotly_text(f"{prefix}{finding['category']} @ {onset}"), name="onset label",
            font={"size": 10, "color": colour if is_root else "#777"},
        )
    return len(seen)


BAND_COLOUR = "rgba(46, 125, 50, {alpha})"  # healthy green, faint: behind the run's own line


def _add_reference_band(fig: go.Figure, band: pd.DataFrame, row: int, span: tuple[int, int] | None,
                        show_legend: bool) -> None:
    """The comparable healthy runs' 5-95 % band and median (``moeproxy.reference.reference_band``)
    behind a run's line: positions are steps, or, with this run's step ``span``, fractions of the run."""
    if band is None or band.empty:
        return
    x = band["position"].to_numpy(np.float64)
    if span is not None:
        x = span[0] + x * (span[1] - span[0])
    runs = band["runs"].to_numpy()
    _add(fig, go.Scatter(x=x, y=band["p95"].to_numpy(), mode="lines", line={"width": 0},
                         hoverinfo="skip", showlegend=False, legendgroup="reference"), row)
    _add(fig, go.Scatter(
        x=x, y=band["p05"].to_numpy(), mode="lines", line={"width": 0}, fill="tonexty",
        fillcolor=BAND_COLOUR.format(alpha=0.15), name="healthy runs 5-95 %", legendgroup="reference",
        showlegend=show_legend, hoverinfo="skip"), row)
    _add(fig, go.Scatter(
        x=x, y=band["median"].to_numpy(), mode="lines", line={"color": BAND_COLOUR.format(alpha=0.7), "width": 1,
                                                                 "dash": "dash"},
        name="healthy runs median", legendgroup="reference", showlegend=show_legend, customdata=runs,
        hovertemplate="healthy median %{y:.6g} (%{customdata} runs)<extra></extra>"), row)


def _y_range(values, log_axis: bool) -> list[float] | None:
    """The y range that shows every finite value given (the run's own points, never a band's), with
    a margin; in log10 units on a log axis. None when there is nothing to range over."""
    v = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in values]) if values else np.empty(0)
    v = v[np.isfinite(v)]
    if log_axis:
        v = v[v > 0]
        if v.size == 0:
            return None
        lo, hi = float(np.log10(v.min())), float(np.log10(v.max()))
        pad = max(0.05 * (hi - lo), 0.05)
    else:
        if v.size == 0:
            return None
        lo, hi = float(v.min()), float(v.max())
        pad = 0.06 * (hi - lo) if hi > lo else max(abs(hi) * 0.05, 0.5)
    return [lo - pad, hi + pad]


def triage_figure(series: pd.DataFrame, metrics: list[str], findings: dict | None = None,
                  smoothing: float | None = None, title: str | None = None,
                  bands: dict[str, pd.DataFrame] | None = None, span: tuple[int, int] | None = None,
                  log_metrics: set[str] | None = None, x: str = "step") -> go.Figure:
    """One panel per metric on one step axis (``x="wall_time"``: the wall clock, when the series
    carries ``wall_time``), each metric its own colour, with non-finite markers and finding onsets.
    ``log_metrics``: the panels drawn on a log axis (default: grad norm and loss scale, where positive).
    With ``bands`` (metric -> reference band), the comparable healthy runs' band is drawn behind a
    metric's line (band positions are steps, or fractions of the run when this run's step ``span`` is
    given); a band never sets the axis: each panel's range is this run's own points."""
    metrics = list(metrics) or TRIAGE_PANELS
    log_metrics = LOG_AXIS_METRICS if log_metrics is None else set(log_metrics)
    fig = _stacked(len(metrics), metrics)
    legend_shown = False
    for row, metric in enumerate(metrics, start=1):
        frame = series[series["metric"] == metric]
        if x == "wall_time" and "wall_time" in frame:
            frame = frame[frame["wall_time"].notna()]
        log_axis = metric in log_metrics and _log_axis_possible(frame)
        band = (bands or {}).get(metric)
        if band is not None and not band.empty and x == "step":
            _add_reference_band(fig, band, row, span, show_legend=not legend_shown)
            legend_shown = True
        if frame.empty:
            fig.add_annotation(text=plotly_text(f"no {metric} in this run"), showarrow=False,
                               xref="paper", yref=f"{_axis(row)} domain", x=0.5, y=0.5)
            continue
        _add_metric_traces(fig, frame, row, name=metric, colour=metric_colour(row - 1), smoothing=smoothing,
                           log_axis=log_axis, x=x)
        finite = frame.loc[frame["kind"] == "finite", "value"]
        settings = {"type": "log", **_log_ticks(finite)} if log_axis else {}
        y_range = _y_range([finite], log_axis)
        if y_range is not None:
            settings["range"] = y_range
        _yaxis(fig, row, **settings)
    labels = _add_findings(fig, findings) if x == "step" else 0
    fig.update_xaxes(title_text="step" if x == "step" else "wall time (UTC)")
    _layout(fig, title, rows=len(metrics), label_lines=labels)
    return fig


def _log_ticks(*values) -> dict:
    """Tick settings for a log y axis over these values (the positive finite ones count), every
    label a whole number: 1-2-5 of each decade within two decades, each power of ten within eight,
    every k-th power beyond (labels like 1000, 500, 200, 100 — never a bare "5" or "2"). Under 0.6 of
    a decade Plotly's own (linear-looking) ticks are kept."""
    arrays = [np.asarray(v, dtype=np.float64).ravel() for v in values]
    positive = np.concatenate(arrays) if arrays else np.empty(0)
    positive = positive[np.isfinite(positive) & (positive > 0)]
    if positive.size == 0:
        return {}
    lo, hi = float(np.log10(positive.min())), float(np.log10(positive.max()))
    decades = hi - lo
    if decades < 0.6:
        return {}
    if decades <= 2.5:
        steps, every = (1, 2, 5), 1
    elif decades <= 8:
        steps, every = (1,), 1
    else:
        steps, every = (1,), math.ceil(decades / 6)
    first, last = math.floor(lo) - 1, math.ceil(hi) + 1
    vals = [m * 10.0 ** e for e in range(first, last + 1) if e % every == 0 for m in steps]
    pad = max(0.05 * decades, 0.05) + 1e-9  # the margin ``_y_range`` gives a log axis
    vals = [v for v in vals if 10 ** (lo - pad) <= v <= 10 ** (hi + pad)]
    return {"tickmode": "array", "tickvals": vals, "ticktext": [_tick_text(v) for v in vals]}


def _tick_text(value: float) -> str:
    """A whole label for a log tick: 0.02, 500, 1e+06 style beyond 1e5 or below 1e-3."""
    if 1e-3 <= value < 1e5:
        return f"{value:g}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _log_axis_possible(frame: pd.DataFrame) -> bool:
    finite = frame.loc[frame["kind"] == "finite", "value"]
    return not finite.empty and bool((finite > 0).any())


def _layout(fig: go.Figure, title: str | None, rows: int, label_lines: int = 0) -> None:
    top = 36 + (LABEL_PX * label_lines + 6 if label_lines else 0) + (28 if title else 0)
    fig.update_layout(title=None if title is None else {"text": plotly_text(title), "y": 0.995, "yanchor": "top"},
                      height=max(320, 230 * rows + 80 + top), margin={"l": 60, "r": 20, "t": top, "b": 40},
                      hovermode="x unified", hoversubplots="axis", legend={"orientation": "h", "y": -0.08},
                      dragmode="select", template="plotly_white")


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
                   names: tuple[str, str] = ("full", "proxy"), smoothing: float | None = None,
                   others: list[tuple[str, pd.DataFrame, int | None, dict | None]] | None = None) -> go.Figure:
    """The triage panels with the full and the proxy run overlaid, aligned by step or fraction;
    ``others`` (name, series, last step, findings) adds more runs to the overlay, each its colour."""
    metrics = list(metrics) or TRIAGE_PANELS
    runs = [(names[0], full, full_last_step, full_findings, RUN_COLOURS["full"]),
            (names[1], proxy, proxy_last_step, proxy_findings, RUN_COLOURS["proxy"])]
    for i, (name, frame, last, found) in enumerate(others or []):
        runs.append((name, frame, last, found, OTHER_RUN_COLOURS[i % len(OTHER_RUN_COLOURS)]))
    runs = [(name, align_steps(frame, last, align), last, found, colour) for name, frame, last, found, colour in runs]
    fig = _stacked(len(metrics), metrics)
    for row, metric in enumerate(metrics, start=1):
        parts = [frame[frame["metric"] == metric] for _, frame, _, _, _ in runs]
        both = pd.concat(parts)
        shared_bounds = _finite_bounds(both) if not both.empty else None  # one marker height per panel
        log_axis = metric in LOG_AXIS_METRICS and any(_log_axis_possible(p) for p in parts if not p.empty)
        for (name, _, _, _, colour), part in zip(runs, parts):
            if part.empty:
                continue
            _add_metric_traces(fig, part, row, name=f"{name}", colour=colour, x="x", smoothing=smoothing,
                               log_axis=log_axis, show_legend=row == 1, legend_group=name,
                               marker_bounds=shared_bounds)
        finite = both.loc[both["kind"] == "finite", "value"] if not both.empty else pd.Series(dtype=float)
        settings = {"type": "log", **_log_ticks(finite)} if log_axis else {}
        y_range = _y_range([finite], log_axis)
        if y_range is not None:
            settings["range"] = y_range
        _yaxis(fig, row, **settings)
    lines = 0
    for i, (name, _, last, found, colour) in enumerate(runs):
        if align == "fraction" and last:
            lines += _add_findings(fig, _root_only(found), lambda s, last=last: s / float(last), f"{name}: ",
                                   colour, lines)
        else:
            lines += _add_findings(fig, _root_only(found), prefix=f"{name}: ", colour=colour, label_row=lines)
    fig.update_xaxes(title_text="step" if align == "step" else "fraction of run")
    _layout(fig, None, rows=len(metrics), label_lines=lines)
    return fig


def _root_only(findings: dict | None) -> dict | None:
    """Only the verdict's finding (two runs' worth of secondary lines would clutter the overlay)."""
    if not findings or findings.get("onset_step") is None:
        return None
    root = [f for f in findings.get("findings", [])
            if f["category"] == findings.get("verdict") and f.get("onset_step") == findings.get("onset_step")]
    return {**findings, "findings": root[:1]}


# verdict match of a grid cell, 0 (none of its pairs) .. 1 (all): the verdict colours' red, orange, green;
# a table's match cell gets the light tint of the same colour (text stays readable on it)
MATCH_COLOURSCALE = [[0.0, COLOUR_HEX["red"]], [0.5, COLOUR_HEX["orange"]], [1.0, COLOUR_HEX["green"]]]
MATCH_BACKGROUND = {"all": "#c8e6c9", "some": "#ffe0b2", "none": "#ffcdd2"}


def fidelity_grid_figure(cells, title: str | None = "verdict match per scenario × arm") -> go.Figure:
    """Scenarios x arms heat map of a fidelity grid (``moeproxy.fidelity_grid.summarise_grid``):
    colour = share of pairs whose verdict matched the full run's, text ``k/n``; the hover adds the
    onset gap, the mean curve r beside the replica's ceiling and the step-time ratio. A scenario
    with no pair in an arm is left blank."""
    scenarios = list(dict.fromkeys(c.scenario for c in cells))
    arms = list(dict.fromkeys(c.arm for c in cells))
    z = [[None] * len(arms) for _ in scenarios]
    text = [[""] * len(arms) for _ in scenarios]
    hover = [[""] * len(arms) for _ in scenarios]
    for c in cells:
        i, j = scenarios.index(c.scenario), arms.index(c.arm)
        z[i][j] = c.match_fraction
        text[i][j] = f"{c.matches}/{c.pairs}"
        gap = "n/a" if c.onset_gap_mean is None else f"{c.onset_gap_mean:.0%} mean, {c.onset_gap_max:.0%} max"
        r = "n/a" if c.agreement is None else f"{c.agreement:+.2f}"
        if c.ceiling is not None:
            r += f" (replica {'n/a' if c.ceiling_agreement is None else f'{c.ceiling_agreement:+.2f}'})"
        step = "n/a" if c.step_time_ratio is None else f"{c.step_time_ratio:.2f}"
        hover[i][j] = (f"{plotly_text(c.scenario)} · {plotly_text(c.arm)}<br>verdict match {c.matches}/{c.pairs}"
                       f"<br>onset gap {gap}<br>mean r {r}<br>step time proxy/full {step}")
    fig = go.Figure(go.Heatmap(
        z=z, x=[plotly_text(a) for a in arms], y=[plotly_text(s) for s in scenarios], text=text,
        texttemplate="%{text}", hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
        zmin=0, zmax=1, colorscale=MATCH_COLOURSCALE, xgap=2, ygap=2,
        colorbar={"title": "match", "tickvals": [0, 0.5, 1], "ticktext": ["0", "½", "all"], "len": 0.9}))
    fig.update_layout(title=None if title is None else plotly_text(title), template="plotly_white",
                      height=max(220, 34 * len(scenarios) + 130), margin={"l": 130, "r": 20, "t": 50, "b": 40},
                      yaxis={"autorange": "reversed", "type": "category"}, xaxis={"type": "category", "side": "top"})
    return fig
