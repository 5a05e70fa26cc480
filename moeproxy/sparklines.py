"""Sparklines: a run's loss and grad norm as small SVG pictures, for the Runs page's glance.

``run_sparklines(store, runs)`` reads each run's series downsampled by ``moeproxy.store.downsample.m4_series``
(M4: first, last, min and max per bucket, so a spike survives; the latest attempt of each step)
and draws each as a ``sparkline_svg``: a polyline through the finite points, and a red tick at the
top for each step holding a NaN or an infinity (non-finite values are never dropped from a picture).
The SVG holds numbers only (no run or metric name), so it is safe in an ``<img>`` whatever the
run is called; its ``aria-label`` says how many points it draws and how many are non-finite.
"""

from __future__ import annotations

import pandas as pd

SPARK_METRICS = ("loss", "grad_norm")
WIDTH, HEIGHT, PAD = 160, 32, 2
LINE, MARK = "#1565c0", "#c62828"


def sparkline_svg(points: pd.DataFrame, width: int = WIDTH, height: int = HEIGHT) -> str:
    """An SVG of one series given as rows (step, value, kind) with kind 'finite', 'nan', 'inf' or '-inf'."""
    finite = points[points["kind"] == "finite"].sort_values("step", kind="stable")
    marks = sorted(set(points.loc[points["kind"] != "finite", "step"].astype(int)))
    steps = points["step"].astype(float)
    lo_x, hi_x = (steps.min(), steps.max()) if len(points) else (0.0, 1.0)
    lo_y, hi_y = (finite["value"].min(), finite["value"].max()) if len(finite) else (0.0, 1.0)

    def x(step: float) -> float:
        return PAD + (width - 2 * PAD) * ((step - lo_x) / (hi_x - lo_x) if hi_x > lo_x else 0.5)

    def y(value: float) -> float:
        return height - PAD - (height - 2 * PAD) * ((value - lo_y) / (hi_y - lo_y) if hi_y > lo_y else 0.5)

    line = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(finite["step"], finite["value"]))
    ticks = "".join(f'<line x1="{x(s):.1f}" y1="0" x2="{x(s):.1f}" y2="{PAD + 4}" stroke="{MARK}" '
                    'stroke-width="1.5"/>' for s in marks)
    label = f"{len(finite)} points, {len(marks)} non-finite"
    body = (f'<polyline fill="none" stroke="{LINE}" stroke-width="1.2" points="{line}"/>' if len(finite) > 1 else
            "".join(f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="1.5" fill="{LINE}"/>'
                    for s, v in zip(finite["step"], finite["value"])))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}">{body}{ticks}</svg>')


def run_sparklines(store, runs: list[str], metrics: tuple[str, ...] = SPARK_METRICS,
                   buckets: int = 30) -> dict[str, dict[str, str | None]]:
    """run -> metric -> SVG (None when the run has no such series), one store open for all."""
    from moeproxy.store.downsample import m4_series

    out: dict[str, dict[str, str | None]] = {}
    with store.held():
        for run in runs:
            frame = m4_series(store, run, list(metrics), buckets=buckets)
            frame = frame[frame["latest"]] if len(frame) else frame
            out[run] = {m: (sparkline_svg(frame[frame["metric"] == m]) if (frame["metric"] == m).any() else None)
                        for m in metrics}
    return out


def points_in(svg: str) -> int:
    """How many points an SVG of ``sparkline_svg`` draws (for tests and checks)."""
    if "<polyline" in svg:
        return len(svg.split('points="', 1)[1].split('"', 1)[0].split())
    return svg.count("<circle")
