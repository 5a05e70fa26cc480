"""What is normal: reference bands from the healthy runs in the store.

``reference_band(store, metric)`` aligns every healthy run's series of one metric by the fraction
of its run (0 at its first logged step, 1 at its last) or by step, cuts that axis into bins, takes
each run's median in each bin (so a run logged every step counts as much as one logged every 10),
and gives per bin the median, the 5th and the 95th percentile across runs, and how many runs it
holds. ``where_normal(store, run, metric, step)`` says at which percentile of those healthy runs
a run's value sits at a step (the share of healthy runs whose value in that bin is below it, ties
counted half): "is a train/rollout gap of 0.3 normal?" answered from the user's own history.

Healthy runs are those whose latest stored diagnosis says ``healthy`` (a run never diagnosed is
not counted), the run asked about excluded. A band is only as good as the runs it is made of: a
healthy pretraining loss around 10 says nothing about an RL policy loss around 0, so
``comparable_runs`` picks the healthy runs of the same framework and kind (``run_kind``: RL when a
reward, KL, policy entropy or rollout metric is logged, else supervised — pretraining or
fine-tuning); ``reference_set`` takes any other group a user picks as ``runs``. Values are read through the store's one series reader
(``Store.run_frame``); non-finite values take no part in a band (a healthy run has none where
it matters) but a run's own inf sits above every healthy value (percentile 100).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BAND_COLUMNS = ("position", "median", "p05", "p95", "runs")


@dataclass(frozen=True)
class ReferenceSet:
    """The healthy runs' values of one metric, one row per (run, bin): run, bin, value."""

    metric: str
    by: str
    bins: int
    values: pd.DataFrame

    def band(self) -> pd.DataFrame:
        """position (the bin's centre: a fraction of the run, or a step), median, p05, p95, runs."""
        if self.values.empty:
            return pd.DataFrame(columns=list(BAND_COLUMNS))
        grouped = self.values.groupby("bin")["value"]
        out = pd.DataFrame({
            "median": grouped.median(), "p05": grouped.quantile(0.05), "p95": grouped.quantile(0.95),
            "runs": grouped.size(),
        })
        out.insert(0, "position", self.values.groupby("bin")["position"].first())
        return out.reset_index(drop=True)


RL_METRICS = frozenset({"reward_mean", "kl", "ppo_kl", "clipfrac", "response_length_mean", "logprob_diff_mean",
                        "is_ratio_mean"})


def run_kind(metrics) -> str:
    """"rl" or "supervised" from a run's stored metric names: a policy's entropy logged beside a token
    accuracy (and no reward or KL) is a supervised run's token entropy (TRL's SFTTrainer logs both)."""
    metrics = set(metrics)
    if metrics & RL_METRICS:
        return "rl"
    if "policy_entropy" in metrics and not any("token_accuracy" in m for m in metrics):
        return "rl"
    return "supervised"


def comparable_runs(store, run: str) -> list[str]:
    """The healthy runs (latest diagnosis) of ``run``'s framework and kind, ``run`` itself excluded."""
    table = store.runs_overview()
    names = store.metric_names_by_run()
    own = table.loc[table["run"] == run]
    if own.empty:
        return []
    framework, kind = own["framework"].iloc[0], run_kind(names.get(run, ()))
    return [r for r, v, f in zip(table["run"], table["verdict"], table["framework"])
            if v == "healthy" and r != run and f == framework and run_kind(names.get(r, ())) == kind]


def healthy_runs(store, exclude: str | None = None) -> list[str]:
    """The runs whose latest stored diagnosis is healthy."""
    table = store.runs_overview()
    return [r for r, v in zip(table["run"], table["verdict"]) if v == "healthy" and r != exclude]


def _binned(series: pd.DataFrame, by: str, bins: int, span: tuple[int, int] | None = None) -> pd.DataFrame:
    """run's (step, value) rows -> bin, position, value (the median of the run in each bin)."""
    steps = series["step"].to_numpy(np.float64)
    if by == "fraction":
        lo, hi = span if span is not None else (steps.min(), steps.max())
        x = (steps - lo) / (hi - lo) if hi > lo else np.zeros_like(steps)
        index = np.clip((x * bins).astype(int), 0, bins - 1)
        position = (index + 0.5) / bins
    else:  # by step: bins of ``bins`` steps
        index = (steps // bins).astype(int)
        position = index * bins + bins / 2
    frame = pd.DataFrame({"bin": index, "position": position, "value": series["value"].to_numpy(np.float64)})
    return frame.groupby("bin", as_index=False).agg(position=("position", "first"), value=("value", "median"))


def reference_set(store, metric: str, exclude: str | None = None, by: str = "fraction",
                  bins: int = 50, runs: list[str] | None = None) -> ReferenceSet:
    """The binned values of ``metric`` over ``runs`` (default: every healthy run) (``by``: "fraction"
    of the run, or "step" with ``bins`` steps per bin)."""
    if by not in ("fraction", "step"):
        raise ValueError(f"by must be 'fraction' or 'step', not {by!r}")
    parts = []
    with store.held():
        for run in (healthy_runs(store, exclude) if runs is None else [r for r in runs if r != exclude]):
            series = store.run_frame(run, [metric])  # this metric only, not the whole run
            series = series[np.isfinite(series["value"])]
            if series.empty:
                continue
            span = store.step_span(run) if by == "fraction" else None  # the whole run's steps
            parts.append(_binned(series, by, bins, span).assign(run=run))
    values = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["bin", "position", "value", "run"])
    return ReferenceSet(metric, by, bins, values)


def reference_band(store, metric: str, exclude: str | None = None, by: str = "fraction", bins: int = 50,
                   runs: list[str] | None = None) -> pd.DataFrame:
    """Median and 5-95 % band of ``metric`` across ``runs`` (default: the healthy runs), per bin."""
    return reference_set(store, metric, exclude, by, bins, runs).band()


def where_normal(store, run: str, metric: str, step: int | None = None, bins: int = 50) -> dict | None:
    """Where ``run``'s value of ``metric`` at ``step`` (default: its last step with that metric)
    sits among the healthy runs at the same fraction of their runs: ``{"metric", "step", "value",
    "percentile", "healthy_runs", "median", "p05", "p95"}``; None when no healthy run has the metric."""
    frame = store.run_frame(run)
    series = frame[frame["metric"] == metric]
    if series.empty:
        return None
    if step is None or step not in set(series["step"]):
        at = series[series["step"] <= step] if step is not None else series
        step = int((at if not at.empty else series)["step"].iloc[-1])
    value = float(series.loc[series["step"] == step, "value"].iloc[-1])
    lo, hi = int(frame["step"].min()), int(frame["step"].max())
    fraction = (step - lo) / (hi - lo) if hi > lo else 0.0
    reference = reference_set(store, metric, exclude=run, bins=bins)
    here = reference.values[reference.values["bin"] == min(int(fraction * bins), bins - 1)]["value"].to_numpy()
    if len(here) == 0:
        return None
    if np.isnan(value):
        percentile = None
    else:
        percentile = float(100.0 * ((here < value).sum() + 0.5 * (here == value).sum()) / len(here))
    return {"metric": metric, "step": step, "value": value if np.isfinite(value) else str(value),
            "percentile": percentile, "healthy_runs": int(len(here)), "median": float(np.median(here)),
            "p05": float(np.quantile(here, 0.05)), "p95": float(np.quantile(here, 0.95))}


def verdict_metric(result: dict) -> str | None:
    """The metric the verdict's finding fired on (None for a healthy verdict)."""
    if result.get("verdict") in (None, "healthy"):
        return None
    return next((f.get("metric") for f in result.get("findings", []) if f.get("category") == result["verdict"]), None)


BAND_BINS = 50  # bins along the fraction of a run
MIN_BAND_RUNS = 3  # a bin's 5-95 % band of one or two runs is those runs' lines, not what is normal


def band_bins(by: str, span: tuple[int, int]) -> int:
    """How to bin a run's reference band: ``BAND_BINS`` along the fraction of a run; by step, bins a
    power of ten wide, at most about 1,000 over the run's steps so far (a width that changes only
    tenfold as a live run grows, so its refreshes reuse a cached band)."""
    if by == "fraction":
        return BAND_BINS
    return 10 ** int(np.log10(max(1, span[1] // 100)))


def bands_to_draw(bands: dict[str, pd.DataFrame], by: str, span: tuple[int, int], bins: int) -> dict[str, pd.DataFrame]:
    """The part of each metric's band a view draws: by step, over this run's steps so far (one bin
    either side), not the reference runs' whole length; only bins of ``MIN_BAND_RUNS`` runs or more;
    metrics left with no bin dropped."""
    out = {}
    for metric, band in bands.items():
        if by == "step":
            band = band[(band["position"] >= span[0] - bins) & (band["position"] <= span[1] + bins)]
        band = band[band["runs"] >= MIN_BAND_RUNS]
        if not band.empty:
            out[metric] = band
    return out
