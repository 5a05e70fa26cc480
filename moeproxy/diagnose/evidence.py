"""The numbers of an evidence sentence, as an engineer can find them in the log.

Every number a finding quotes is either a record of the log with its step ("0.25 at step 40"), or
is named as a summary with the records it summarises ("median 0.12 over steps 10-30"). Ratios and
shares ("3.1x", "12%"), thresholds ("limit 0.01") and counts ("5 records") say what they are.
A smoothed or rolling level is never printed as if it were a logged value: detectors decide on
robust levels, the sentence shows the records at the steps that show the anomaly (the last record
before the onset, the record at the onset, the extreme record) and the levels as medians.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose.robust import edge_count, fmt, quarter_count


def finite(series: pd.Series) -> pd.Series:
    """The finite records of ``series``."""
    return series[np.isfinite(series.to_numpy(dtype=float))]


def steps_of(index) -> str:
    """"step 5" or "steps 5-30": the step range of some records."""
    a, b = int(index[0]), int(index[-1])
    return f"step {a}" if a == b else f"steps {a}-{b}"


def rec(series: pd.Series, step) -> str:
    """"0.25 at step 40": the record of ``series`` at ``step`` (the first record after it when
    there is none at that step)."""
    step = int(step)
    if step not in series.index:
        later = series[series.index >= step]
        if later.empty:
            return f"step {step}"
        step = int(later.index[0])
    return f"{fmt(float(series.loc[step]))} at step {step}"


def median_of(records: pd.Series, every: pd.Series | None = None) -> str:
    """"median 0.12 over steps 10-30" of ``records`` (finite). ``every``: all finite records of
    that step range, when the detector left some out (zeros on a log scale, zero-advantage steps):
    the sentence says how many ("... excluding 3 near-zero records")."""
    records = finite(records)
    if records.empty:
        return "no finite record"
    text = f"median {fmt(float(np.median(records.to_numpy(dtype=float))))} over {steps_of(records.index)}"
    if every is not None:
        every = finite(every)
        every = every[(every.index >= records.index[0]) & (every.index <= records.index[-1])]
        left = len(every) - len(records)
        if left > 0:
            text += f" excluding {left} near-zero record{'s' if left > 1 else ''}"
    return text


def median_value(records: pd.Series) -> float:
    records = finite(records)
    return float(np.median(records.to_numpy(dtype=float))) if len(records) else float("nan")


def head(series: pd.Series, share: float = 0.1, minimum: int = 3) -> pd.Series:
    """The finite records ``robust.head_level`` takes the median of."""
    s = finite(series)
    return s.iloc[:edge_count(len(s), share, minimum)]


def tail(series: pd.Series, share: float = 0.1, minimum: int = 3) -> pd.Series:
    """The finite records ``robust.tail_level`` takes the median of."""
    s = finite(series)
    return s.iloc[-edge_count(len(s), share, minimum):] if len(s) else s


def before(series: pd.Series, step) -> pd.Series:
    """The finite records before ``step``."""
    s = finite(series)
    return s[s.index < step]


def move(series: pd.Series, step) -> str:
    """"from 0.31 at step 23 to 0.62 at step 24": the last finite record before ``step`` and the
    record at ``step`` (only the latter when nothing came before)."""
    prior = before(series, step)
    at = rec(series, step)
    return f"from {rec(prior, prior.index[-1])} to {at}" if len(prior) else f"to {at} (its first record)"


def extreme(series: pd.Series, start=None, end=None, direction: int = +1) -> tuple[int, float] | None:
    """(step, value) of the highest (``direction`` +1) or lowest (-1) finite record within
    [start, end]."""
    s = finite(series)
    if start is not None:
        s = s[s.index >= start]
    if end is not None:
        s = s[s.index <= end]
    if s.empty:
        return None
    i = int(np.argmax(direction * s.to_numpy(dtype=float)))
    return int(s.index[i]), float(s.iloc[i])


def baseline(series: pd.Series, shift, positive: bool = False) -> pd.Series:
    """The records a shift's baseline median was taken over (``Shift.baseline_steps``), as the
    detector saw them (``positive``: a shift on log scale, where zeros carry no signal)."""
    lo, hi = shift.baseline_steps
    s = finite(series)
    s = s[(s.index >= lo) & (s.index <= hi)]
    return s[s > 0] if positive else s


def ratio(value: float, reference: float) -> str:
    """"3.1x", or "n/a" for a reference of 0."""
    if not reference or not np.isfinite(reference):
        return "n/a"
    return f"{fmt(value / reference)}x"


def level_change(series: pd.Series, step) -> str | None:
    """How a reward moved from ``step`` to the end, as ``RunSeries.reward_gain_after`` measures it
    (the median of the first quarter of the records from ``step`` on against that of the last):
    "from median 0.2 over steps 10-20 to median 0.5 over steps 40-50"."""
    s = finite(series)
    after = s[s.index >= step]
    if len(after) < 4:
        return None
    k = quarter_count(len(after))
    return f"from {median_of(after.iloc[:k])} to {median_of(after.iloc[-k:])}"
