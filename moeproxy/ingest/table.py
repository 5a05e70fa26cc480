"""Columnar accumulation of parsed log records, and restart (attempt) numbering.

Parsers call ``LogTable.add(step, names, values)`` once per log record (a line, a JSON object,
an event); nothing is inserted row by row anywhere. ``LogTable.frame()`` returns one pandas
DataFrame (step, metric, value, attempt, rank, wall_time) ready for a single bulk insert.

Attempts: within one source and rank, a record whose step is lower than the previous record's,
or equal to it while logging a metric that step already has with another value, starts a new
attempt (a restart that re-logs steps). Records are never merged or dropped.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from moeproxy.ingest.values import coerce_json_value

FRAME_COLUMNS = ("step", "metric", "value", "attempt", "rank", "wall_time")


class LogTable:
    def __init__(self) -> None:
        self.metric_names: list[str] = []
        self._index: dict[str, int] = {}
        self._steps: list[int] = []
        self._ranks: list[int] = []
        self._walls: list[float] = []
        self._counts: list[int] = []
        self._offsets: list[int] = []  # start of each record in _values
        self._codes: list[np.ndarray] = []
        self._values: list = []  # flat, extended per record; converted once in frame()
        self._last_keys: tuple | None = None
        self._last_codes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def values_count(self) -> int:
        return len(self._values)

    def _codes_for(self, names) -> np.ndarray:
        keys = tuple(names)
        if keys == self._last_keys:
            return self._last_codes  # same key set as the previous record: the common case
        index = self._index
        codes = []
        for name in keys:
            code = index.get(name)
            if code is None:
                code = index[name] = len(self.metric_names)
                self.metric_names.append(name)
            codes.append(code)
        arr = np.asarray(codes, dtype=np.int32)
        self._last_keys, self._last_codes = keys, arr
        return arr

    def add(self, step: int, names, values, rank: int = -1, wall_time: float = math.nan) -> None:
        """One record. ``values`` may hold floats, ints, None (-> NaN) or numeric strings."""
        if not names:
            return
        self._codes.append(self._codes_for(names))
        self._offsets.append(len(self._values))
        self._values.extend(values)
        self._steps.append(int(step))
        self._ranks.append(rank)
        self._walls.append(wall_time)
        self._counts.append(len(names))

    def add_dict(self, step: int, record: dict, rank: int = -1, wall_time: float = math.nan) -> None:
        self.add(step, record.keys(), record.values(), rank, wall_time)

    def _float_values(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Values as float64; non-numeric entries (text, lists) are dropped via a keep-mask."""
        try:
            return np.array(self._values, dtype=np.float64), None
        except (TypeError, ValueError):
            pass
        out = np.empty(len(self._values), dtype=np.float64)
        keep = np.ones(len(self._values), dtype=bool)
        for i, v in enumerate(self._values):
            f = coerce_json_value(v)
            if f is None:
                keep[i] = False
                out[i] = math.nan
            else:
                out[i] = f
        return out, keep

    def _record_values(self, i: int) -> dict[int, object]:
        start = self._offsets[i]
        return dict(zip(self._codes[i].tolist(), self._values[start:start + self._counts[i]]))

    @staticmethod
    def _conflict(seen: dict[int, object], new: dict[int, object]) -> bool:
        """Whether a record repeats a metric of its step with another value (a re-logged step)."""
        for code, value in new.items():
            if code in seen:
                old = seen[code]
                if not (old == value or (old != old and value != value)):
                    return True
        return False

    def attempts(self) -> np.ndarray:
        """Attempt number per record (see module docstring).

        A record at the same step as the previous one joins it unless it logs a metric that step
        already has with another value (HF Trainer's eval entries repeat ``epoch``; a restart
        re-logs the step with new values). Values are only looked at for such equal steps.
        """
        steps = np.asarray(self._steps, dtype=np.int64)
        ranks = np.asarray(self._ranks, dtype=np.int64)
        attempt_of = np.zeros(len(steps), dtype=np.int16)
        for rank in np.unique(ranks):
            idx = np.flatnonzero(ranks == rank)
            s = steps[idx]
            if len(s) < 2 or bool(np.all(s[1:] > s[:-1])):
                continue  # strictly increasing: one attempt, the common case
            attempt = 0
            seen: dict[int, object] = {}
            for k in range(len(idx)):
                i = idx[k]
                if k == 0:
                    seen = self._record_values(i)
                elif s[k] < s[k - 1]:
                    attempt += 1
                    seen = self._record_values(i)
                elif s[k] == s[k - 1]:
                    new = self._record_values(i)
                    if self._conflict(seen, new):
                        attempt += 1
                        seen = new
                    else:
                        seen.update(new)
                else:
                    seen = None
                if seen is None:
                    seen = self._record_values(i) if k + 1 < len(idx) and s[k + 1] == s[k] else {}
                attempt_of[i] = attempt
        return attempt_of

    def frame(self) -> pd.DataFrame:
        if not self._steps:
            return pd.DataFrame({c: [] for c in FRAME_COLUMNS})
        counts = np.asarray(self._counts, dtype=np.int64)
        codes = np.concatenate(self._codes)
        values, keep = self._float_values(codes)
        df = pd.DataFrame(
            {
                "step": np.repeat(np.asarray(self._steps, dtype=np.int64), counts),
                "metric": pd.Categorical.from_codes(codes, categories=self.metric_names),
                "value": values,
                "attempt": np.repeat(self.attempts(), counts),
                "rank": np.repeat(np.asarray(self._ranks, dtype=np.int32), counts),
                "wall_time": np.repeat(np.asarray(self._walls, dtype=np.float64), counts),
            }
        )
        if keep is not None:
            df = df[keep].reset_index(drop=True)
        return df
