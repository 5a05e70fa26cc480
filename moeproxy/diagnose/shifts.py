"""Sustained level shifts of one metric, in the metric's own units: the building block of the
drift detectors (mismatch, routing, entropy, reward, KL, length).

``sustained_shift`` returns the first departure (see ``robust.find_departures``) that lasts:
it never comes back before the last record (>= ``end_records`` records) or it spans
``min_records`` records (``lasting_only``: only the first that never comes back). Positive metrics move by a factor on log scale; bounded ones
(entropies, rates, rewards) by an absolute delta.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from moeproxy.diagnose.robust import find_departures, log10_positive


@dataclass(frozen=True)
class Shift:
    onset_step: int
    first_step: int
    peak_step: int
    end_step: int
    baseline: float     # baseline median in the metric's units
    peak: float         # most extreme value of the shift
    records: int
    recovered: bool
    baseline_steps: tuple[int, int] | None = None  # first and last step of the baseline's records


def sustained_shift(series: pd.Series, direction: int, *, z: float, min_history: int,
                    factor: float | None = None, delta: float | None = None,
                    min_records: int = 3, end_records: int = 2,
                    window: int | None = None, lasting_only: bool = False,
                    visible: float = 0.0) -> Shift | None:
    if (factor is None) == (delta is None):
        raise ValueError("sustained_shift needs exactly one of factor (log scale) or delta (raw)")
    values = series.to_numpy(dtype=float)
    steps = series.index.to_numpy()
    if factor is not None:
        y, min_delta = log10_positive(values), float(np.log10(factor))
    else:
        y, min_delta = np.where(np.isfinite(values), values, np.nan), float(delta)
    for d in find_departures(y, direction, min_delta=min_delta, z=z, min_history=min_history,
                             window=window, visible=visible):
        records = d.count
        if lasting_only and d.recovered:  # only a shift that holds to the last record
            continue
        if (not d.recovered and records >= end_records) or records >= min_records:
            base = 10 ** d.baseline if factor is not None else d.baseline
            return Shift(int(steps[d.onset]), int(steps[d.first]), int(steps[d.peak]),
                         int(steps[d.end]), float(base), float(values[d.peak]), records, d.recovered,
                         (int(steps[d.base_first]), int(steps[d.base_last])))
    return None
