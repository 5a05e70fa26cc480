"""Series derived at ingest time from what a log holds, stored beside the originals.

- Expert-load metrics (``routing/load/layer_<i>/expert_<j>`` and spellings matched by
  ``names.EXPERT_LOAD``) move to the routing table, and ``load_imbalance`` (max/mean expert load,
  the worst MoE layer) is derived from them when the log has none.
- ``routing_entropy`` (the mean over MoE layers) is derived from ``routing_entropy/layer_<i>``
  when the log only has the per-layer series.
- Unit differences (Megatron's step time in ms) are scaled to the canonical unit.
"""

from __future__ import annotations

from moeproxy.vocabulary import LAYER_PREFIX

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from moeproxy.columns import Columns, as_columns
from moeproxy.ingest.names import EXPERT_LOAD
from moeproxy.vocabulary import SCALE

if TYPE_CHECKING:
    import pandas as pd

DERIVED = "derived"  # the "original" name recorded for derived series


def split_routing(rows: Columns) -> tuple[Columns, pd.DataFrame | None]:
    """(scalars without expert loads, routing rows step/layer/expert/load/attempt or None).
    pandas is imported only when the log has expert loads."""
    if not any(EXPERT_LOAD.match(str(name)) for name in rows.names):
        return rows, None
    kept, routing = _split_routing_frame(rows.to_frame())
    return as_columns(kept), routing


def _split_routing_frame(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    import pandas as pd

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
    import pandas as pd

    n = len(step)
    return pd.DataFrame({
        "step": np.asarray(step, np.int64), "metric": [metric] * n, "value": np.asarray(value, np.float64),
        "attempt": np.asarray(attempt, np.int32), "rank": np.full(n, -1, np.int32),
        "wall_time": np.full(n, np.nan),
    })


def derive_series(rows: Columns, routing: pd.DataFrame | None) -> tuple[Columns, dict[str, str]]:
    """Add derived series; returns (rows, {stored name: 'derived'}) for the names table. pandas is
    imported only when there is something to derive."""
    metrics = set(rows.names)
    wanted = ("load_imbalance" not in metrics and routing is not None and not routing.empty) or (
        "routing_entropy" not in metrics and any(m.startswith(LAYER_PREFIX) for m in metrics))
    if not wanted:
        return rows, {}
    frame, names = _derive_series_frame(rows.to_frame(), routing)
    return as_columns(frame), names


def _derive_series_frame(frame: pd.DataFrame, routing: pd.DataFrame | None) -> tuple[pd.DataFrame, dict[str, str]]:
    import pandas as pd

    added: list[pd.DataFrame] = []
    names: dict[str, str] = {}
    metrics = set(frame["metric"].cat.categories)
    if "load_imbalance" not in metrics and routing is not None and not routing.empty:
        per_layer = routing.groupby(["attempt", "step", "layer"])["load"].agg(["max", "mean"])
        ratio = (per_layer["max"] / per_layer["mean"].where(per_layer["mean"] > 0)).groupby(["attempt", "step"]).max()
        ratio = ratio.reset_index()
        added.append(_rows(frame, "load_imbalance", ratio["step"], ratio[0], ratio["attempt"]))
        names["derived:load_imbalance"] = "load_imbalance"
    layer_entropy = [m for m in metrics if m.startswith(LAYER_PREFIX)]
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


def apply_units(rows: Columns, mapping: dict[str, str]) -> Columns:
    """Values of renamed series scaled to the canonical unit (the parsed rows left as they are)."""
    value = None
    for original, factor in SCALE.items():
        if original in mapping and mapping[original] != original and mapping[original] in rows.names:
            value = rows.value.copy() if value is None else value
            mask = rows.code == rows.names.index(mapping[original])
            value[mask] = value[mask] * factor
    return rows if value is None else replace(rows, value=value)
