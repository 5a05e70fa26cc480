"""Figure builders: plain frames in, plotly figures out (no Streamlit, no store)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dashboard.safe_text import verdict_badge
from moeproxy.figures import (COLOUR_HEX, VERDICT_COLOURS, align_steps, compare_figure, ema_debiased,
                              heatmap_figure, triage_figure, verdict_colour)

FINDINGS = {"verdict": "overflow", "onset_step": 40, "findings": [
    {"category": "overflow", "onset_step": 40, "severity": "critical", "metric": "grad_norm",
     "rule": "nonfinite_value", "evidence": "grad_norm went to inf at step 40"},
    {"category": "divergence", "onset_step": 30, "severity": "critical", "metric": "loss",
     "rule": "sustained_rise", "evidence": "loss rose"}]}


def downsampled(metric: str, values, latest=True, attempt=0, start=1) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    kind = np.where(np.isnan(values), "nan", np.where(np.isposinf(values), "inf",
                                                      np.where(np.isneginf(values), "-inf", "finite")))
    return pd.DataFrame({"metric": metric, "step": np.arange(start, start + len(values)), "value": values,
                         "attempt": attempt, "latest": latest, "kind": kind})


def traces_named(fig, text):
    return [t for t in fig.data if text in (t.name or "")]


def test_triage_panels_share_axis_log_grad_norm_and_markers():
    grad = [1.0] * 39 + [math.inf, math.inf, math.nan]
    frame = pd.concat([downsampled("grad_norm", grad), downsampled("loss", np.linspace(2, 1, 42)),
                       downsampled("routing_entropy", [-math.inf] + [0.9] * 41)])
    fig = triage_figure(frame, ["grad_norm", "loss", "routing_entropy"], FINDINGS)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type != "log"
    assert {t.xaxis for t in fig.data} == {"x"}  # one step axis: hover and zoom read every panel
    assert fig.layout.hoversubplots == "axis" and fig.layout.hovermode == "x unified"
    assert len({t.line.color for t in fig.data if t.mode == "lines"}) == 3  # each metric its own colour
    inf = traces_named(fig, "grad_norm +inf")[0]
    assert list(inf.x) == [40, 41] and inf.marker.symbol == "triangle-up"
    assert list(traces_named(fig, "grad_norm NaN")[0].x) == [42]
    assert list(traces_named(fig, "routing_entropy -inf")[0].x) == [1]
    line = traces_named(fig, "grad_norm")[0]
    assert np.isnan(np.asarray(line.y, dtype=float)[39:]).all()  # the line breaks at non-finite steps
    onsets = sorted((shape.x0, shape.y0, shape.y1, shape.yref) for shape in fig.layout.shapes)
    assert onsets == [(30, 0, 1, "paper"), (40, 0, 1, "paper")]  # each onset one line across all panels
    labels = [a for a in fig.layout.annotations if a.name == "onset label"]
    assert {a.text for a in labels} == {"overflow @ 40", "divergence @ 30"}
    top = max(fig.layout.yaxis.domain)
    assert all(a.y >= top and a.yanchor == "bottom" for a in labels)  # above the panels, never on the data
    assert len({a.yshift for a in labels}) == 2 and fig.layout.margin.t >= 36 + 2 * 15  # stacked, with room


def test_smoothing_adds_a_line_and_keeps_the_raw_spike():
    values = [1.0] * 20 + [100.0] + [1.0] * 20
    fig = triage_figure(downsampled("loss", values), ["loss"], smoothing=0.9)
    raw, ema = traces_named(fig, "loss")[0], traces_named(fig, "EMA")[0]
    assert max(raw.y) == 100.0 and max(ema.y) < 100.0


def test_overwritten_attempts_are_drawn_dotted():
    frame = pd.concat([downsampled("loss", [1.0] * 10), downsampled("loss", [5.0] * 5, latest=False, start=6)])
    fig = triage_figure(frame, ["loss"])
    old = traces_named(fig, "attempt 0 (overwritten)")[0]
    assert old.line.dash == "dot" and list(old.x) == [6, 7, 8, 9, 10]


def test_ema_is_debiased_and_respects_gaps():
    steps = np.array([1, 2, 3, 10, 11])
    assert np.allclose(ema_debiased(steps, np.full(5, 3.0), 0.99), 3.0)  # no start-up bias toward 0
    out = ema_debiased(np.array([1, 2, 3]), np.array([1.0, math.nan, 1.0]), 0.5)
    assert np.allclose(out, 1.0)
    with pytest.raises(ValueError):
        ema_debiased(steps, np.ones(5), 1.0)


def test_compare_by_fraction_and_step():
    full = downsampled("loss", np.ones(100))
    proxy = downsampled("loss", np.ones(50))
    fig = compare_figure(full, proxy, ["loss"], align="fraction", full_last_step=100, proxy_last_step=50,
                         full_findings=FINDINGS, proxy_findings={**FINDINGS, "onset_step": 20, "findings": [
                             {**FINDINGS["findings"][0], "onset_step": 20}]})
    xs = [max(t.x) for t in fig.data if t.x is not None and len(t.x)]
    assert max(xs) == pytest.approx(1.0)
    assert sorted(round(s.x0, 3) for s in fig.layout.shapes) == [0.4, 0.4]  # both onsets at 40 % of the run
    by_step = compare_figure(full, proxy, ["loss"], names=("a", "b"))
    assert {t.name for t in by_step.data} == {"a", "b"}
    assert align_steps(full, 100, "step")["x"].max() == 100
    with pytest.raises(ValueError):
        align_steps(full, 100, "time")


@pytest.mark.parametrize(("low", "high", "ticks"), [
    (6.0, 16.0, None),  # under a decade: Plotly's own ticks
    (0.6, 12.0, ["1", "2", "5", "10"]),  # a decade or two: 1-2-5, each label whole
    (20.0, 3000.0, ["20", "50", "100", "200", "500", "1000", "2000"]),  # never "1000, 5, 2, 100"
    (1e-2, 1e5, ["0.01", "0.1", "1", "10", "100", "1000", "10000", "1e5"]),  # each power of ten
    (1e-3, 1e30, ["1", "1e6", "1e12", "1e18", "1e24", "1e30"])])  # an overflow's climb: every 6th power
def test_log_grad_norm_axis_labels_are_whole_and_do_not_crowd(low, high, ticks):
    grad = np.geomspace(low, high, 60)
    fig = triage_figure(downsampled("grad_norm", np.append(grad, math.nan)), ["grad_norm"])
    assert fig.layout.yaxis.type == "log"
    assert (list(fig.layout.yaxis.ticktext) if fig.layout.yaxis.ticktext else None) == ticks
    full, proxy = downsampled("grad_norm", grad), downsampled("grad_norm", grad[:30])
    axis = compare_figure(full, proxy, ["grad_norm"]).layout.yaxis  # the range of both runs
    assert (list(axis.ticktext) if axis.ticktext else None) == ticks


def test_a_band_never_sets_the_axis_range():
    """A wide band (other runs) must not squash this run's line: the range is the run's own points."""
    band = pd.DataFrame({"position": [1.0, 60.0], "p05": [1e-3, 1e-3], "p95": [1e3, 1e3], "median": [1.0, 1.0],
                         "runs": [3, 3]})
    fig = triage_figure(downsampled("grad_norm", np.linspace(6, 16, 60)), ["grad_norm"], bands={"grad_norm": band})
    lo, hi = fig.layout.yaxis.range
    assert math.log10(5) < lo < math.log10(6) and math.log10(16) < hi < math.log10(20)
    loss = triage_figure(downsampled("loss", np.linspace(2.0, 2.2, 60)), ["loss"],
                         bands={"loss": band.assign(p05=[-0.6, -0.6], p95=[11.0, 11.0])})
    assert loss.layout.yaxis.range[0] > 1.9 and loss.layout.yaxis.range[1] < 2.3


def test_log_axes_are_chosen_per_panel_and_wall_time_is_an_x_axis():
    frame = pd.concat([downsampled("grad_norm", np.geomspace(1, 100, 20)), downsampled("loss", np.geomspace(1, 50, 20))])
    fig = triage_figure(frame, ["grad_norm", "loss"], log_metrics={"loss"})
    assert fig.layout.yaxis.type != "log" and fig.layout.yaxis2.type == "log"
    timed = frame.assign(wall_time=1.7e9 + frame["step"] * 2.0)
    fig = triage_figure(timed, ["grad_norm", "loss"], FINDINGS, x="wall_time")
    assert str(pd.Timestamp(fig.data[0].x[0])).startswith("2023-11-14")
    assert fig.layout.xaxis.title.text == "wall time (UTC)"


def test_heatmap_orders_layers_numerically():
    heat = pd.DataFrame({"metric": [f"routing_entropy/layer_{i}" for i in (10, 2, 0)] * 2,
                         "bucket": [0, 0, 0, 1, 1, 1], "step": [1, 1, 1, 50, 50, 50],
                         "value": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "nonfinite": 0})
    fig = heatmap_figure(heat)
    assert list(fig.data[0].y) == ["layer 0", "layer 2", "layer 10"]
    assert np.asarray(fig.data[0].z).shape == (3, 2)
    assert heatmap_figure(heat.iloc[0:0]).layout.annotations[0].text.startswith("no per-layer")


def test_findings_rows_and_badges():
    from moeproxy.diagnose.render import finding_rows as findings_rows

    rows = findings_rows(FINDINGS)
    assert rows[0]["evidence"] == "grad_norm went to inf at step 40" and len(rows) == 2
    assert findings_rows(None) == []
    assert verdict_badge("overflow") == ":red-badge[overflow]"
    assert "not diagnosed" in verdict_badge(None)


def test_one_verdict_colour_map_for_the_pages_and_the_report():
    from moeproxy.diagnose.taxonomy import CATEGORIES
    from moeproxy.report import _badge

    assert set(CATEGORIES) <= set(VERDICT_COLOURS)
    for verdict in (*VERDICT_COLOURS, None, "my_own_category"):
        colour = verdict_colour(verdict)
        assert verdict_badge(verdict).startswith(f":{colour}-badge[")  # the dashboard's badge
        assert f"background:{COLOUR_HEX[colour]}" in _badge(verdict)     # the HTML report's badge
    assert verdict_colour("overflow") == "red" and verdict_colour(None) == "gray"
    assert verdict_badge("[x](http://h)") == r":blue-badge[\[x\]\(http\:\/\/h\)]"


def test_a_note_gets_no_onset_line():
    # a healthy run whose only finding is a note (a lone NaN in its first record: a logging artefact,
    # LABELS.md) shows no "overflow @ 1" over its curves
    healthy = {"verdict": "healthy", "onset_step": None, "findings": [
        {"category": "overflow", "onset_step": 1, "severity": "info", "rule": "first_record_nan"},
        {"category": "divergence", "onset_step": 12, "severity": "warning", "rule": "isolated_spike"}]}
    fig = triage_figure(downsampled("loss", [math.nan] + [1.0] * 29), ["loss"], healthy)
    labels = [a.text for a in fig.layout.annotations if a.name == "onset label"]
    assert labels == ["divergence @ 12"] and [shape.x0 for shape in fig.layout.shapes] == [12]
