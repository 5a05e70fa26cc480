"""Full-vs-proxy comparison: does the proxy reproduce the full run's failure, and at what cost?

``compare_frames(full, proxy)`` takes two long-form frames (step, metric, value) and returns the
fidelity JSON shared by ``moeproxy compare --json`` and ``moeproxy repro run``:

- ``full`` / ``proxy``: each side's diagnosis (verdict, onset step, finding categories) from
  ``moeproxy.diagnose.diagnose_frame``;
- ``verdict_match`` and ``onset_relative_difference`` = ``|onset_proxy - onset_full| / onset_full``
  (null when either side has no onset);
- ``correlations``: Pearson r of every canonical metric (and per-layer routing entropy) present on
  both sides, after step alignment and smoothing. Alignment: the steps both runs logged; when they
  share fewer than ``min_points`` steps (runs of different length or logging interval), both series
  are resampled onto a common grid of training progress (0..1). Smoothing: a centred rolling mean
  of ``smooth`` records over the finite values (non-finite points are left out, never zero-filled);
  r is null when fewer than ``min_points`` pairs remain or a side is constant;
- ``cost``: per-step time (median of ``step_time``), parameters and memory of each side, when the
  logs carry them, with proxy/full ratios.

``compare_runs(store, full_run, proxy_run)`` does the same for two stored runs (any runs, not only
repro ones).
"""

from __future__ import annotations

from moeproxy.vocabulary import LAYER_PREFIX

import math

import numpy as np
import pandas as pd

from moeproxy.vocabulary import CANONICAL

# per-side figures read from the logs: name in the fidelity JSON -> (metrics to try, reduction)
COST_METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "step_time_s": (("step_time", "timing_s/step", "perf/time_per_step"), "median"),
    "parameters": (("perf/total_params",), "last"),
    "active_parameters": (("perf/active_params",), "last"),
    "model_state_gb": (("perf/model_state_gb",), "max"),
    "peak_memory_gb": (("perf/max_memory_allocated_gb", "perf/run_memory_gb", "perf/cpu_memory_used_gb"), "max"),
}
# metrics left out of the correlation table: bookkeeping, constants and cost
_NOT_CORRELATED = {"lr", "step_time", "loss_scale"}


def _wide(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame()
    wide = frame.pivot_table(index="step", columns="metric", values="value", aggfunc="last", dropna=False)
    return wide.sort_index()


def correlated_metrics(full: pd.DataFrame, proxy: pd.DataFrame) -> list[str]:
    shared = set(full.columns) & set(proxy.columns)
    names = [m for m in CANONICAL if m in shared and m not in _NOT_CORRELATED]
    names += sorted(m for m in shared if m.startswith(LAYER_PREFIX))
    return names


def smooth_series(values: pd.Series, window: int) -> pd.Series:
    finite = values.where(np.isfinite(values.to_numpy(dtype=float)))
    if window <= 1:
        return finite
    return finite.rolling(window, center=True, min_periods=1).mean().where(finite.notna())


def _progress_grid(series: pd.Series, grid: np.ndarray) -> np.ndarray:
    s = series.dropna()
    if len(s) < 2:
        return np.full(len(grid), np.nan)
    steps = s.index.to_numpy(dtype=float)
    progress = (steps - steps.min()) / max(steps.max() - steps.min(), 1.0)
    return np.interp(grid, progress, s.to_numpy(dtype=float))


def pearson(a: np.ndarray, b: np.ndarray, min_points: int) -> float | None:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < min_points:
        return None
    x, y = a[ok], b[ok]
    if np.std(x) == 0 or np.std(y) == 0:
        return None
    r = float(np.corrcoef(x, y)[0, 1])
    return round(r, 4) if math.isfinite(r) else None


def correlations(full: pd.DataFrame, proxy: pd.DataFrame, smooth: int = 5, min_points: int = 5) -> dict:
    """``{metric: r}`` for the shared metrics of two wide frames (index step)."""
    out: dict[str, float | None] = {}
    common = full.index.intersection(proxy.index)
    for metric in correlated_metrics(full, proxy):
        f = smooth_series(full[metric].astype(float), smooth)
        p = smooth_series(proxy[metric].astype(float), smooth)
        if len(common) >= min_points:
            a, b = f.reindex(common).to_numpy(), p.reindex(common).to_numpy()
        else:
            grid = np.linspace(0, 1, max(min(len(f), len(p)), 2))
            a, b = _progress_grid(f, grid), _progress_grid(p, grid)
        out[metric] = pearson(a, b, min_points)
    return out


def _side_cost(wide: pd.DataFrame) -> dict:
    cost = {}
    for name, (candidates, how) in COST_METRICS.items():
        for metric in candidates:
            if metric in wide.columns:
                values = wide[metric].astype(float)
                values = values[np.isfinite(values.to_numpy())]
                if values.empty:
                    continue
                cost[name] = float({"median": values.median, "max": values.max, "last": lambda: values.iloc[-1]}[how]())
                break
    return cost


def cost_figures(full: pd.DataFrame, proxy: pd.DataFrame) -> dict:
    f, p = _side_cost(full), _side_cost(proxy)
    out = {}
    for name in COST_METRICS:
        if name in f or name in p:
            entry = {"full": f.get(name), "proxy": p.get(name)}
            if f.get(name) and p.get(name) is not None:
                entry["ratio"] = round(p[name] / f[name], 4)
            out[name] = entry
    return out


def _side(diagnosis: dict, run: str | None) -> dict:
    side = {"verdict": diagnosis.get("verdict"), "onset_step": diagnosis.get("onset_step"),
            "categories": sorted({f["category"] for f in diagnosis.get("findings", []) if f.get("severity") == "critical"})}
    if run is not None:
        side["run"] = run
    return side


def onset_relative_difference(full_onset, proxy_onset) -> float | None:
    if full_onset is None or proxy_onset is None:
        return None
    return round(abs(float(proxy_onset) - float(full_onset)) / max(abs(float(full_onset)), 1.0), 4)


def compare_frames(full: pd.DataFrame, proxy: pd.DataFrame, *, full_run: str | None = None,
                   proxy_run: str | None = None, smooth: int = 5, min_points: int = 5,
                   diagnoses: tuple[dict, dict] | None = None) -> dict:
    """``diagnoses``: the two runs' recorded findings (``compare_runs`` passes them); two frames
    that are not stored runs are diagnosed here."""
    from moeproxy.diagnose import diagnose_frame

    if smooth < 1 or min_points < 2:
        raise ValueError("smooth must be >= 1 and min_points >= 2")
    full_diag, proxy_diag = diagnoses if diagnoses is not None else (diagnose_frame(full), diagnose_frame(proxy))
    fw, pw = _wide(full), _wide(proxy)
    return {
        "full": _side(full_diag, full_run),
        "proxy": _side(proxy_diag, proxy_run),
        "verdict_match": full_diag.get("verdict") == proxy_diag.get("verdict"),
        "onset_relative_difference": onset_relative_difference(full_diag.get("onset_step"), proxy_diag.get("onset_step")),
        "correlations": correlations(fw, pw, smooth, min_points),
        "cost": cost_figures(fw, pw),
        "alignment": {"common_steps": int(len(fw.index.intersection(pw.index))), "smooth": smooth,
                      "min_points": min_points},
    }


def compare_runs(store, full_run: str, proxy_run: str, smooth: int = 5, min_points: int = 5) -> dict:
    """``compare_frames`` over two stored runs (raises ``NotFound`` for an unknown run), with the
    runs' recorded findings (diagnosed and recorded first where they are missing or stale)."""
    from moeproxy.diagnose.record import current_findings

    full_frame, proxy_frame = store.run_frame(full_run), store.run_frame(proxy_run)
    return compare_frames(full_frame, proxy_frame, full_run=full_run, proxy_run=proxy_run, smooth=smooth,
                          min_points=min_points,
                          diagnoses=(current_findings(store, full_run), current_findings(store, proxy_run)))


def format_comparison(result: dict) -> str:
    """Plain-text rendering for ``moeproxy compare``."""
    f, p = result["full"], result["proxy"]
    lines = [
        f"{'':8}{'verdict':<22}onset",
        f"{'full':8}{str(f['verdict']):<22}{f['onset_step']}",
        f"{'proxy':8}{str(p['verdict']):<22}{p['onset_step']}",
        f"verdict match: {'yes' if result['verdict_match'] else 'NO'}; onset relative difference: "
        f"{result['onset_relative_difference'] if result['onset_relative_difference'] is not None else 'n/a'}",
        "correlation after smoothing and step alignment:",
    ]
    for metric, r in result["correlations"].items():
        lines.append(f"  {metric:<28}{'n/a' if r is None else f'{r:+.3f}'}")
    if result["cost"]:
        lines.append("cost (full -> proxy):")
        for name, entry in result["cost"].items():
            ratio = f"  (x{entry['ratio']:.3g})" if "ratio" in entry else ""
            lines.append(f"  {name:<20}{entry['full']} -> {entry['proxy']}{ratio}")
    return "\n".join(lines)


# -- the fidelity card's headline numbers (the Compare page and the HTML report show these) ------
HEADLINE_CORRELATIONS = ("grad_norm", "loss", "routing_entropy", "reward_mean", "policy_entropy", "kl")


def _headline_text(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3g}"
    return "n/a" if value is None else str(value)


def card_metrics(card: dict) -> list[tuple[str, str]]:
    """(label, value) pairs for the headline numbers of a fidelity card (``compare_runs``): verdict
    match, onset delta (steps, from the two sides' onsets, and the relative difference the card
    reports), the correlations of the triage metrics first (at most five), and every cost ratio."""
    rows: list[tuple[str, str]] = [("verdict match", _headline_text(card.get("verdict_match")))]
    full_onset = (card.get("full") or {}).get("onset_step")
    proxy_onset = (card.get("proxy") or {}).get("onset_step")
    delta = None if full_onset is None or proxy_onset is None else int(proxy_onset) - int(full_onset)
    rows.append(("onset delta (steps)", _headline_text(f"{delta:+d}" if delta is not None else None)))
    rows.append(("onset relative difference", _headline_text(card.get("onset_relative_difference"))))
    correlations = card.get("correlations") or {}
    ordered = [m for m in HEADLINE_CORRELATIONS if m in correlations]
    for metric in ordered[:5]:
        rows.append((f"r {metric}", _headline_text(correlations[metric])))
    for name, entry in (card.get("cost") or {}).items():
        if isinstance(entry, dict) and entry.get("ratio") is not None:
            rows.append((f"cost ratio {name} (proxy/full)", _headline_text(entry["ratio"])))
    return rows
