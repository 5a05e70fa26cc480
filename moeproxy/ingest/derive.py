"""Series derived at ingest time from what a log holds, stored beside the originals.

- Expert-load metrics (``routing/load/layer_<i>/expert_<j>`` and spellings matched by
  ``names.EXPERT_LOAD``) move to the routing table, and ``load_imbalance`` (max/mean expert load,
  the worst MoE layer) is derived from them when the log has none.
- ``routing_entropy`` (the mean over MoE layers) is derived from ``routing_entropy/layer_<i>``
  when the log only has the per-layer series.
- Unit differences (Megatron's step time in ms) are scaled to the canonical unit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.ingest.names import EXPERT_LOAD, SCALE

DERIVED = "derived"  # the "original" name recorded for derived series


def split_routing(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scalars without expert loads, routing rows step/layer/expert/load/attempt)."""
    if not any(EXPERT_LOAD.match(str(name)) for name in frame["metric"].cat.categories):
        return frame, pd.DataFrame(columns=["step", "layer", "expert", "load", "attempt"])
    names = pd.Series(list(frame["metric"].cat.categories), dtype=object)
    parsed = names.str.extract(EXPERT_LOAD)
    load_names = dict(zip(names[parsed[0].notna()], zip(parsed[0].dropna().astype(int), parsed[1].dropna().astype(int))))
    if not load_names:
        return frame, pd.DataFrame(columns=["step", "layer", "expert", "load", "attempt"])
    is_load = frame["metric"].isin(list(load_names))
    loads = frame[is_load & (frame["rank"] == frame["rank"].min())]
    layer_expert = loads["metric"].astype(object).map(load_names)
    routing = pd.DataFrame({
        "step": loads["step"].to_numpy(),
        "layer": [le[0] for le in layer_expert],
        "expert": [le[1] for le in layer_expert],
        "load": loads["value"].to_numpy(),
        "attempt": loads["attempt"].to_numpy(),
    })
    kept = frame[~is_load].copy()
    kept["metric"] = kept["metric"].cat.remove_unused_categories()
    return kept, routing


def _rows(template: pd.DataFrame, metric: str, step, value, attempt) -> pd.DataFrame:
    n = len(step)
    return pd.DataFrame({
        "step": np.asarray(step, np.int64), "metric": [metric] * n, "value": np.asarray(value, np.float64),
        "attempt": np.asarray(attempt, np.int32), "rank": np.full(n, -1, np.int32),
        "wall_time": np.full(n, np.nan),
    })


def derive_series(frame: pd.DataFrame, routing: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """Add derived series; returns (frame, {stored name: 'derived'}) for the names table."""
    added: list[pd.DataFrame] = []
    names: dict[str, str] = {}
    metrics = set(frame["metric"].cat.categories)
    if "load_imbalance" not in metrics and not routing.empty:
        per_layer = routing.groupby(["attempt", "step", "layer"])["load"].agg(["max", "mean"])
        ratio = (per_layer["max"] / per_layer["mean"].where(per_layer["mean"] > 0)).groupby(["attempt", "step"]).max()
        ratio = ratio.reset_index()
        added.append(_rows(frame, "load_imbalance", ratio["step"], ratio[0], ratio["attempt"]))
        names["derived:load_imbalance"] = "load_imbalance"
    layer_entropy = [m for m in metrics if m.startswith("routing_entropy/layer_")]
    if "routing_entropy" not in metrics and layer_entropy:
        sub = frame[frame["metric"].isin(layer_entropy)]
        mean = sub.groupby(["attempt", "rank", "step"])["value"].mean().reset_index()
        rows = _rows(frame, "routing_entropy", mean["step"], mean["value"], mean["attempt"])
        rows["rank"] = mean["rank"].to_numpy(np.int32)
        added.append(rows)
        names["derived:routing_entropy"] = "routing_entropy"
    if added:
        categories = list(frame["metric"].cat.categories) + [rows["metric"].iat[0] for rows in added]
        parts = [frame.assign(metric=frame["metric"].cat.set_categories(categories))]
        parts += [rows.assign(metric=pd.Categorical(rows["metric"], categories=categories)) for rows in added]
        frame = pd.concat(parts, ignore_index=True)
    return frame, names


def apply_units(frame: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    for original, factor in SCALE.items():
        if original in mapping and mapping[original] != original:
            mask = frame["metric"] == mapping[original]
            frame.loc[mask, "value"] = frame.loc[mask, "value"] * factor
    return frame
