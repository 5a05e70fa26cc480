"""The long table of parsed values as numpy columns: what parsers produce and the store writes.

One row per value: step, metric (a code into ``names``), value, attempt, rank, wall time. It is the
same table as ``ParsedLog.frame`` (a pandas DataFrame with a categorical ``metric``), without
pandas: ``moeproxy ingest`` parses and stores millions of values without importing it (pandas
alone costs about 0.8 CPU-seconds to import, more than storing 4M values takes). ``to_frame`` and
``from_frame`` convert, sharing the arrays where they can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

@dataclass
class Columns:
    step: np.ndarray  # int64
    code: np.ndarray  # int32, an index into ``names``
    names: list[str]  # distinct metric names (some may have no row)
    value: np.ndarray  # float64; NaN and +-inf kept
    attempt: np.ndarray  # int32
    rank: np.ndarray  # int32
    wall_time: np.ndarray  # float64 (NaN: none)

    def __post_init__(self) -> None:
        self.step = np.asarray(self.step, np.int64)
        self.code = np.asarray(self.code, np.int32)
        self.value = np.asarray(self.value, np.float64)
        self.attempt = np.asarray(self.attempt, np.int32)
        self.rank = np.asarray(self.rank, np.int32)
        self.wall_time = np.asarray(self.wall_time, np.float64)
        self.names = list(self.names)

    @classmethod
    def empty_table(cls) -> "Columns":
        return cls(np.empty(0, np.int64), np.empty(0, np.int32), [], np.empty(0), np.empty(0, np.int32),
                   np.empty(0, np.int32), np.empty(0))

    def __len__(self) -> int:
        return len(self.step)

    @property
    def empty(self) -> bool:
        return len(self.step) == 0

    def present(self) -> np.ndarray:
        """Whether each name has a row (a boolean per name)."""
        return np.bincount(self.code, minlength=len(self.names))[: len(self.names)] > 0

    def take(self, index: np.ndarray) -> "Columns":
        """The rows at ``index`` (integer positions or a boolean mask), names unchanged."""
        return Columns(self.step[index], self.code[index], self.names, self.value[index], self.attempt[index],
                       self.rank[index], self.wall_time[index])

    def renamed(self, mapping: dict[str, str]) -> "Columns":
        """Names mapped (a name not in ``mapping`` kept); two names mapped to one share its code."""
        new_names: list[str] = []
        index: dict[str, int] = {}
        recode = np.empty(len(self.names), np.int32)
        for i, name in enumerate(self.names):
            target = mapping.get(name, name)
            recode[i] = index.setdefault(target, len(new_names))
            if recode[i] == len(new_names):
                new_names.append(target)
        code = self.code if np.array_equal(recode, np.arange(len(self.names))) else recode[self.code]
        return Columns(self.step, code, new_names, self.value, self.attempt, self.rank, self.wall_time)

    def counts(self) -> dict[str, int]:
        """rows, steps, metrics, nonfinite and attempts, as an ingest summary states them."""
        if self.empty:
            return {"rows": 0, "steps": 0, "metrics": 0, "nonfinite": 0, "attempts": 0}
        return {"rows": len(self), "steps": _distinct(self.step), "metrics": int(self.present().sum()),
                "nonfinite": int((~np.isfinite(self.value)).sum()), "attempts": _distinct(self.attempt)}

    # -- pandas -------------------------------------------------------------------------------
    def to_frame(self) -> "pd.DataFrame":
        import pandas as pd

        return pd.DataFrame(
            {
                "step": _own(self.step),
                "metric": pd.Categorical.from_codes(self.code, categories=self.names),
                "value": _own(self.value),
                "attempt": _own(self.attempt),
                "rank": _own(self.rank),
                "wall_time": _own(self.wall_time),
            },
            copy=False,
        )

    @classmethod
    def from_frame(cls, frame: "pd.DataFrame") -> "Columns":
        import pandas as pd

        metric = frame["metric"]
        if not isinstance(metric.dtype, pd.CategoricalDtype):
            metric = metric.astype(str).astype("category")
        n = len(frame)

        def column(name, dtype, default):
            return frame[name].to_numpy(dtype) if name in frame else np.full(n, default, dtype)

        return cls(column("step", np.int64, 0), metric.cat.codes.to_numpy(np.int32),
                   [str(c) for c in metric.cat.categories], column("value", np.float64, np.nan),
                   column("attempt", np.int32, 0), column("rank", np.int32, -1), column("wall_time", np.float64, np.nan))


def _own(column: np.ndarray) -> np.ndarray:
    """A column a DataFrame may write to: a constant's read-only view filled out."""
    return column if column.flags.writeable else np.array(column)


def as_columns(rows) -> Columns:
    """``rows`` (Columns or a long DataFrame) as Columns."""
    return rows if isinstance(rows, Columns) else Columns.from_frame(rows)


def _distinct(values: np.ndarray) -> int:
    """The number of distinct integers: by marking a range when they span a short one (linear),
    else by sorting."""
    if values.strides == (0,):  # a constant's view
        return 1
    low, high = int(values.min()), int(values.max())
    if high - low < 4 * len(values) + 1024:
        seen = np.zeros(high - low + 1, dtype=bool)
        seen[values - low] = True
        return int(seen.sum())
    return len(np.unique(values))


# pyarrow's ``pa.array`` imports pandas on first use (to check whether its argument is a pandas
# object); these two build the same arrays from their buffers, without it.
def arrow_array(values: np.ndarray):
    """A numpy array of numbers as an Arrow array (zero copy when it is contiguous)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def arrow_strings(texts: list[str]):
    """A list of str as an Arrow string array."""
    import pyarrow as pa

    data = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def numpy_of(array) -> np.ndarray:
    """An Arrow array of integers or floats as numpy, read from its buffers (Arrow's ``to_numpy``
    imports pandas); a null is NaN (the integers then come back as floats)."""
    import pyarrow as pa

    dtype = np.dtype(np.float64) if pa.types.is_floating(array.type) else np.dtype(f"int{array.type.bit_width}")
    validity, data = array.buffers()[:2]
    out = np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), count=array.offset + len(array), bitorder="little")
        out = np.where(bits[array.offset:].astype(bool), out, np.nan)
    return out
