"""A self-contained HTML post-mortem of a run (and its proxy): figures, findings, proxy recipe.

``render_report(store, run, proxy=None, proxy_report=None) -> str`` returns one HTML document
with plotly.js inlined (no network needed to open it, safe to mail or attach to a ticket), built
from the same downsampled series and figure builders as the dashboard: the triage panels with
non-finite markers and finding onsets, per-layer routing entropy, the findings with their
evidence, and, with a proxy, the overlay, both verdicts, the fidelity card (``moeproxy.fidelity``),
and the proxy recipe (``proxy_report.json`` given, else what
the proxy run's metadata records); with a fidelity grid (``bench/fidelity.py``'s results.json,
``moeproxy.fidelity_grid``), its table, verdict-match cells marked, and heat map. Every text from the store is HTML-escaped. The answer comes
first (the same headline the terminal and the dashboard show); raw JSON (the fidelity card, the
recipe) is folded away under ``<details>``; local file-system paths are shown by their last part
only (a report is mailed and attached to tickets).
"""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from pathlib import Path

from moeproxy.errors import InputError, MoeproxyError
from moeproxy.terminal import shown

_MAX_PROXY_REPORT_BYTES = 64 * 2**20  # a real one is kilobytes; /dev/zero is endless

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{margin-bottom:.2em} .muted{color:#666} table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left;font-size:.92em} th{background:#f5f5f5}
.badge{display:inline-block;padding:.1em .6em;border-radius:1em;color:#fff;font-weight:600}
.critical{color:#b00020} pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.85em}
.answer{border:1px solid #ddd;border-radius:.5em;padding:.6em 1em;margin:1em 0;font-size:1.1em}
details summary{cursor:pointer;color:#555;margin:.4em 0}
"""


def _without_paths(value):
    """``value`` (JSON-like) with every absolute path string cut to its last part: ``…/name``."""
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    if isinstance(value, str) and (value.startswith(("/", "~/", "\\\\")) or (len(value) > 2 and value[1:3] in (":\\", ":/"))):
        name = value.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        return f"…/{name}" if name else "…"
    return value


def _folded(title: str, value) -> str:
    return (f"<details><summary>{_e(title)}</summary>"
            f"<pre>{_e(json.dumps(_without_paths(value), indent=2, default=str))}</pre></details>")

def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _badge(verdict: str | None) -> str:
    from moeproxy.figures import COLOUR_HEX, verdict_colour

    return (f'<span class="badge" style="background:{COLOUR_HEX[verdict_colour(verdict)]}">'
            f'{_e(verdict or "not diagnosed")}</span>')


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p class=muted>none</p>"
    head = "".join(f"<th>{_e(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _answer_html(findings: dict | None) -> str:
    """The headline (``moeproxy.diagnose.render.headline``): verdict, onset, confidence, the
    verdict's evidence, the other readings."""
    from moeproxy.diagnose.render import headline

    if not findings:
        return "<div class=answer>Not diagnosed (run <code>moeproxy diagnose RUN</code>).</div>"
    head = headline(findings)
    out = [f"<div class=answer>{_badge(head['verdict'])}"
           + (f" from step <b>{_e(head['onset_step'])}</b>" if head["onset_step"] is not None else "")
           + (f" · confidence <b>{_e(head['confidence'])}</b>"
              + (f" <span class=muted>({_e(head['reason'])})</span>" if head["reason"] else "")
              if head["confidence"] else "")]
    if head["evidence"]:
        out.append(f"<br><code>{_e(head['metric'])}</code>: {_e(head['evidence'])}")
    for alt in head["alternatives"]:
        at = "" if alt.get("onset_step") is None else f" from step {_e(alt['onset_step'])}"
        out.append(f"<br>Another reading: <b>{_e(alt['category'])}</b>{at} "
                   f"({_e(alt['why'])})")
    out.append("</div>")
    return "".join(out)


def _figure_html(fig, first: bool) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=True if first else False,
                       config={"displaylogo": False, "responsive": True})


def _recipe(store, proxy: str, proxy_report: dict | None) -> dict | None:
    """The proxy recipe: given, else in the run's metadata, else a proxy_report.json next to the
    proxy run's logs (``moeproxy repro`` writes ``<dir>/proxy/proxy_report.json``)."""
    if proxy_report is not None:
        return proxy_report
    info = store.run_info(proxy)
    meta = info.get("meta") or {}
    for key in ("proxy_report", "recipe", "build"):
        if isinstance(meta.get(key), dict):
            return meta[key]
    for source in info.get("sources", []):
        folder = Path(str(source.get("path") or "")).parent
        for candidate in (folder / "proxy_report.json", folder / "proxy" / "proxy_report.json"):
            try:  # a FIFO or device there is skipped, never waited on
                if candidate.exists():
                    return read_proxy_report(candidate)
            except (InputError, OSError):
                continue
    return None


def _grid_html(rows: list[dict]) -> str:
    """A fidelity grid's table and heat map (``rows``: ``moeproxy.fidelity_grid.load_grid``)."""
    from moeproxy.fidelity_grid import grid_table_html, summarise_grid
    from moeproxy.figures import fidelity_grid_figure

    cells = summarise_grid(rows)
    return ("<h2>Fidelity grid</h2>"
            f"<p class=muted>{sum(c.pairs for c in cells)} pairs. Onset gap = |onset proxy - onset full| / onset full; "
            "r = Pearson correlation of the curves, mean over seeds, beside the replica's (the full model with "
            "another sampling seed: the noise ceiling); cost = proxy/full, median over seeds.</p>"
            + grid_table_html(cells) + _figure_html(fidelity_grid_figure(cells), first=False))


def render_report(store, run: str, proxy: str | None = None, proxy_report: dict | None = None,
                  buckets: int = 1500, grid: list[dict] | None = None) -> str:
    """The HTML document (a string) for ``run`` and optionally its ``proxy`` run and a fidelity
    grid's rows (``moeproxy.fidelity_grid.load_grid``)."""
    from moeproxy.diagnose.render import cited_metrics, findings_html
    from moeproxy.figures import TRIAGE_PANELS, compare_figure, heatmap_figure, last_step, triage_figure
    from moeproxy.store.downsample import layer_heatmap, m4_series, metric_names
    from moeproxy.vocabulary import LAYER_PREFIX

    info = store.run_info(run)  # NotFound names the known runs
    stored = set(metric_names(store, run))
    findings = store.findings(run)
    panels = [m for m in TRIAGE_PANELS if m in stored]
    panels += [m for m in cited_metrics(findings) if m in stored and m not in panels and not m.startswith(LAYER_PREFIX)]
    panels = panels or sorted(stored)[:3]
    series = m4_series(store, run, panels, buckets=buckets)
    parts = [f"<h1>Post-mortem: {_e(run)}</h1>",
             f"<p class=muted>moeproxy report, {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}</p>",
             _answer_html(findings),
             _table([{"run": run, "role": info.get("role"), "framework": info.get("framework"),
                      "format": info.get("format"), "steps": info.get("steps"), "metrics": info.get("metrics"),
                      "non-finite values": info.get("nonfinite"), "attempts": info.get("attempts")}]),
             "<h2>Training curves</h2>",
             _figure_html(triage_figure(series, panels, findings), first=True),
             "<h2>All findings</h2>", findings_html(findings)]
    heat = layer_heatmap(store, run)
    if not heat.empty:
        parts += ["<h2>Routing entropy per layer</h2>", _figure_html(heatmap_figure(heat), first=False)]
    if proxy is not None:
        if proxy == run:
            raise InputError(f"--proxy {proxy!r} is the run itself; name the proxy run")
        proxy_findings = store.findings(proxy)
        proxy_stored = set(metric_names(store, proxy))
        shared = [m for m in panels if m in proxy_stored] or panels
        proxy_series = m4_series(store, proxy, shared, buckets=buckets)
        full_part = series[series["metric"].isin(shared)]
        fig = compare_figure(full_part, proxy_series, shared, align="step",
                             full_last_step=last_step(full_part), proxy_last_step=last_step(proxy_series),
                             full_findings=findings, proxy_findings=proxy_findings, names=(run, proxy))
        parts += [f"<h2>Proxy run: {_e(proxy)}</h2>", _answer_html(proxy_findings),
                  "<h3>Full vs proxy</h3>", _figure_html(fig, first=False)]
        try:
            from moeproxy.fidelity import card_metrics, compare_runs

            card = compare_runs(store, run, proxy)
            parts += ["<h3>Fidelity card</h3>",
                      _table([{"measure": label, "value": value} for label, value in card_metrics(card)]),
                      _folded("the whole fidelity card (JSON)", card)]
        except MoeproxyError as exc:
            parts.append(f"<p class=muted>{_e(exc)}</p>")
        recipe = _recipe(store, proxy, proxy_report)
        parts.append("<h3>Proxy recipe</h3>")
        if recipe:
            summary = {k: recipe.get(k) for k in ("family", "experts_before", "experts_after", "top_k_before",
                                                  "top_k_after", "spec") if k in recipe}
            parts += [_table([{k: json.dumps(_without_paths(v)) if isinstance(v, dict) else _without_paths(v)
                               for k, v in summary.items()}]) if summary else "",
                      _folded("the whole recipe (proxy_report.json)", recipe)]
        else:
            parts.append("<p class=muted>No proxy_report.json recorded for this run "
                         "(pass <code>--proxy-report FILE</code>).</p>")
    if grid:
        parts.append(_grid_html(grid))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>moeproxy post-mortem: {_e(run)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def write_report(store, run: str, target: str | Path, proxy: str | None = None,
                 proxy_report: str | Path | dict | None = None, grid: str | Path | None = None) -> Path:
    """Render and write the report; ``proxy_report`` may be a path to proxy_report.json, ``grid``
    a fidelity grid's results.json."""
    from moeproxy.outputs import check_target, write_text

    target = Path(target)
    check_target(target, "report")  # before rendering: a directory, device or FIFO fails at once
    if target.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"{shown(target)}: the report is an .html file")
    if isinstance(proxy_report, (str, Path)):
        proxy_report = read_proxy_report(proxy_report)
    rows = None
    if grid is not None:
        from moeproxy.fidelity_grid import load_grid

        rows = load_grid(grid)  # before rendering: a bad file is one line, nothing written
    document = render_report(store, run, proxy, proxy_report, grid=rows)
    write_text(target, document, "report")  # a temporary file beside it, renamed into place
    return target


def read_proxy_report(path: str | Path) -> dict:
    """A proxy_report.json the user names: a regular file (a FIFO or a device such as /dev/zero is
    refused without blocking on it or reading it without end) holding a JSON object."""
    from moeproxy.proxy.checkpoint import read_json_file

    return read_json_file(Path(path), "proxy_report.json", limit=_MAX_PROXY_REPORT_BYTES)
