"""Columnar accumulation of parsed log records, and restart (attempt) numbering.

Parsers call ``LogTable.add(step, names, values)`` once per log record (a line, a JSON object,
an event); nothing is inserted row by row anywhere. ``LogTable.columns()`` returns the long
table (step, metric, value, attempt, rank, wall_time) as numpy columns, ready for a single bulk
insert; ``LogTable.frame()`` the same as a pandas DataFrame.

Attempts: within one source and rank, a record whose step is lower than the previous record's,
or equal to it while logging a metric that step already has with another value, starts a new
attempt (a restart that re-logs steps). Records are never merged or dropped.
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING

import numpy as np

from moeproxy.columns import Columns
from moeproxy.ingest.values import coerce_json_value

if TYPE_CHECKING:
    import pandas as pd



class RecordOutOfRange(ValueError):
    """A record's step or rank that cannot be stored as the file spells it (the caller names the file)."""


def _shown(number) -> str:
    """A number for a message: a huge integer as its first digits and digit count (never float())."""
    text = str(number)
    if len(text) > 300:  # float() of it would overflow
        return f"{text[:8]}...({len(text.lstrip('-'))} digits)"
    return f"{float(number):.4g}" if abs(number) >= 10**20 else text


class StepOutOfRange(RecordOutOfRange):
    """A step counter that is not a finite integer or does not fit 64 bits."""

    def __init__(self, step) -> None:
        if isinstance(step, float) and not math.isfinite(step):
            message = f"step {step} is not a finite integer"
        elif isinstance(step, float) and not step.is_integer():
            message = f"step {step!r} is not an integer (steps are counters; it is not rounded)"
        elif isinstance(step, float):
            message = f"step {step!r} is too large to be read exactly as a decimal fraction (spell it as an integer)"
        else:
            message = f"step {_shown(step)} is out of range (steps must fit a 64-bit integer)"
        super().__init__(message)
        self.step = step


class RankOutOfRange(RecordOutOfRange):
    def __init__(self, rank) -> None:
        super().__init__(f"rank {_shown(rank)} is out of range (ranks must fit a 32-bit integer)")


RANK_MAX = 2**31 - 1
EXACT_FLOAT_INT = 2**53  # a float step beyond this may have been rounded by a JSON parser


def _int_step(step) -> int:
    """A step as an int: integers as they are (range checked for the whole table at once); a float
    only when it is a whole number a float holds exactly (1.5 is refused, never rounded to 1)."""
    if isinstance(step, float) and not (step.is_integer() and abs(step) < EXACT_FLOAT_INT):
        raise StepOutOfRange(step)
    try:
        return int(step)
    except (OverflowError, ValueError, TypeError):  # inf, nan, a non-number
        raise StepOutOfRange(step) from None


def _check_ranks(ranks) -> None:
    if ranks and not (-1 <= min(ranks) and max(ranks) <= RANK_MAX):
        raise RankOutOfRange(next(r for r in ranks if not -1 <= r <= RANK_MAX))


class LogTable:
    def __init__(self) -> None:
        self.metric_names: list[str] = []
        self._index: dict[str, int] = {}
        self._steps: list[int] = []
        self._ranks: list[int] = []
        self._walls: list[float] = []
        self._counts: list[int] = []
        self._code_segments: list[np.ndarray] = []  # metric codes, one array per record or block
        self._value_segments: list = []  # closed segments: Python lists or float64 arrays
        self._values: list = []  # the open segment, extended per record; converted once in frame()
        self._n_values = 0
        self._last_keys: tuple | None = None
        self._last_codes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def values_count(self) -> int:
        return self._n_values

    def _code(self, name: str) -> int:
        code = self._index.get(name)
        if code is None:
            code = self._index[name] = len(self.metric_names)
            self.metric_names.append(name)
        return code

    def _codes_for(self, names) -> np.ndarray:
        keys = tuple(names)
        if keys == self._last_keys:
            return self._last_codes  # same key set as the previous record: the common case
        arr = np.asarray([self._code(name) for name in keys], dtype=np.int32)
        self._last_keys, self._last_codes = keys, arr
        return arr

    def add(self, step: int, names, values, rank: int = -1, wall_time: float = math.nan) -> None:
        """One record. ``values`` may hold floats, ints, None (-> NaN) or numeric strings."""
        if not names:
            return
        codes = self._codes_for(names)
        self._code_segments.append(codes)
        self._values.extend(values)
        self._n_values += len(codes)
        self._steps.append(_int_step(step))
        if not -1 <= rank <= RANK_MAX:
            raise RankOutOfRange(rank)
        self._ranks.append(rank)
        self._walls.append(wall_time)
        self._counts.append(len(codes))

    def add_block(self, steps: list[int], names, values: np.ndarray, ranks: list[int]) -> None:
        """Records that share one key list, in order: ``values`` is float64, record after record."""
        n = len(steps)
        if not n or not names:
            return
        codes = self._codes_for(names)
        k = len(codes)
        if len(values) != n * k or len(ranks) != n:
            raise ValueError(f"add_block: {n} steps x {k} names needs {n * k} values, got {len(values)}")
        _check_ranks(ranks)
        self._close_segment()
        self._value_segments.append(np.asarray(values, dtype=np.float64))
        self._code_segments.append(np.tile(codes, n))
        self._n_values += n * k
        self._steps.extend(steps)
        self._ranks.extend(ranks)
        self._walls.extend([math.nan] * n)
        self._counts.extend([k] * n)

    def extend(self, other: "LogTable") -> None:
        """Append another table's records after this one's (metric codes renumbered)."""
        if not other._steps:
            return
        remap = np.asarray([self._code(name) for name in other.metric_names], dtype=np.int32)
        self._close_segment()
        self._value_segments.extend(other._value_segments)
        if other._values:
            self._value_segments.append(list(other._values))
        self._code_segments.extend(remap[seg] for seg in other._code_segments)
        self._n_values += other._n_values
        self._steps.extend(other._steps)
        self._ranks.extend(other._ranks)
        self._walls.extend(other._walls)
        self._counts.extend(other._counts)

    def _close_segment(self) -> None:
        """End the open per-record value list, so that segments added next keep record order."""
        if self._values:
            self._value_segments.append(self._values)
            self._values = []

    def _step_array(self) -> np.ndarray:
        try:
            return np.asarray(self._steps, dtype=np.int64)
        except OverflowError:
            bad = next(s for s in self._steps if not -2**63 <= s < 2**63)
            raise StepOutOfRange(bad) from None

    def add_dict(self, step: int, record: dict, rank: int = -1, wall_time: float = math.nan) -> None:
        self.add(step, record.keys(), record.values(), rank, wall_time)

    @staticmethod
    def _float_segment(segment) -> tuple[np.ndarray, np.ndarray | None]:
        """A segment's values as float64; non-numeric entries (text, lists) are dropped via a keep-mask."""
        if isinstance(segment, np.ndarray):
            return segment, None
        try:
            return np.array(segment, dtype=np.float64), None
        except (TypeError, ValueError, OverflowError):  # text, lists; an int beyond the float range
            pass
        out = np.empty(len(segment), dtype=np.float64)
        keep = np.ones(len(segment), dtype=bool)
        for i, v in enumerate(segment):
            f = coerce_json_value(v)
            if f is None:
                keep[i] = False
                out[i] = math.nan
            else:
                out[i] = f
        return out, keep

    def _float_values(self) -> tuple[np.ndarray, np.ndarray | None]:
        segments = self._value_segments + ([self._values] if self._values else [])
        converted = [self._float_segment(seg) for seg in segments]
        values = np.concatenate([v for v, _ in converted]) if converted else np.empty(0)
        if all(keep is None for _, keep in converted):
            return values, None
        keep = np.concatenate([np.ones(len(v), dtype=bool) if k is None else k for v, k in converted])
        return values, keep

    def attempts(self, codes: np.ndarray | None = None, values: np.ndarray | None = None) -> np.ndarray:
        """Attempt number per record (see the module docstring and ``attempt_numbers``)."""
        if codes is None or values is None:
            codes = np.concatenate(self._code_segments) if self._code_segments else np.empty(0, np.int32)
            values = self._float_values()[0]
        return attempt_numbers(self._step_array(), np.asarray(self._ranks, dtype=np.int64),
                               np.asarray(self._counts, dtype=np.int64), codes, values)

    def columns(self) -> Columns:
        if not self._steps:
            return Columns.empty_table()
        codes = np.concatenate(self._code_segments)
        values, keep = self._float_values()
        return build_columns(self._step_array(), np.asarray(self._ranks, dtype=np.int64),
                             np.asarray(self._walls, dtype=np.float64), np.asarray(self._counts, dtype=np.int64),
                             codes, self.metric_names, values, keep)

    def frame(self) -> pd.DataFrame:
        return self.columns().to_frame()


def _conflict(seen: dict[int, float], new: dict[int, float]) -> bool:
    """Whether a record repeats a metric of its step with another value (a re-logged step)."""
    for code, value in new.items():
        if code in seen:
            old = seen[code]
            if not (old == value or (old != old and value != value)):
                return True
    return False


def _repeats_within_runs(run_of_value: np.ndarray, codes: np.ndarray) -> bool:
    """Whether any metric appears twice within one run of records at one step (values in record
    order, ``run_of_value`` non-decreasing)."""
    order = np.argsort(codes.astype(np.int16) if codes.size and codes.max() < 2**15 else codes, kind="stable")
    c, r = codes[order], run_of_value[order]
    return bool(np.any((c[1:] == c[:-1]) & (r[1:] == r[:-1])))


def attempt_numbers(steps: np.ndarray, ranks: np.ndarray, counts: np.ndarray, codes: np.ndarray,
                    values: np.ndarray) -> np.ndarray:
    """Attempt number per record: within one rank, a record whose step is lower than the previous
    record's starts a new attempt, and so does one at the same step that logs a metric that step
    already has with another value (HF Trainer's eval entries repeat ``epoch``; a restart re-logs
    the step with new values). ``codes``/``values``: the records' values, record after record.

    Vectorised for the usual cases (steps increasing, or records at one step that log distinct
    metrics, as TensorBoard writes one event per scalar); values are looked at one by one only
    where a metric repeats within a step."""
    attempt_of = np.zeros(len(steps), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    single = len(ranks) == 0 or bool(ranks[0] == ranks[-1] and np.all(ranks == ranks[0]))
    for rank in (ranks[:1] if single else np.unique(ranks)):
        idx = np.arange(len(steps)) if single else np.flatnonzero(ranks == rank)
        s = steps[idx]
        if len(s) < 2 or bool(np.all(s[1:] > s[:-1])):
            continue  # strictly increasing: one attempt, the common case
        new_run = np.concatenate([[True], s[1:] != s[:-1]])
        run = np.cumsum(new_run)
        if single:
            run_of_value, rank_codes = np.repeat(run, counts), codes
        else:
            mask = np.repeat(ranks == rank, counts)
            run_of_value, rank_codes = np.repeat(run, counts[idx]), codes[mask]
        if not _repeats_within_runs(run_of_value, rank_codes):
            attempt_of[idx] = np.cumsum(np.concatenate([[False], s[1:] < s[:-1]]))
            continue
        _attempts_one_by_one(attempt_of, idx, s, offsets, codes, values)
    return attempt_of


def _attempts_one_by_one(attempt_of, idx, s, offsets, codes, values) -> None:
    def record_values(i: int) -> dict[int, float]:
        start, stop = offsets[i], offsets[i + 1]
        return dict(zip(codes[start:stop].tolist(), values[start:stop].tolist()))

    attempt = 0
    seen: dict[int, float] | None = {}
    for k in range(len(idx)):
        i = idx[k]
        if k == 0:
            seen = record_values(i)
        elif s[k] < s[k - 1]:
            attempt += 1
            seen = record_values(i)
        elif s[k] == s[k - 1]:
            new = record_values(i)
            if _conflict(seen, new):
                attempt += 1
                seen = new
            else:
                seen.update(new)
        else:
            seen = None
        if seen is None:
            seen = record_values(i) if k + 1 < len(idx) and s[k + 1] == s[k] else {}
        attempt_of[i] = attempt


def build_columns(steps: np.ndarray, ranks: np.ndarray, walls: np.ndarray, counts: np.ndarray, codes: np.ndarray,
                  names: list[str], values: np.ndarray, keep: np.ndarray | None = None) -> Columns:
    """The long table (step, metric, value, attempt, rank, wall_time) of records given as columns:
    per record its step, rank, wall time and number of values; per value its metric code and value.
    ``keep``: a mask of the values to store (non-numeric ones dropped after attempts are numbered)."""
    if not len(steps):
        return Columns.empty_table()
    codes = np.asarray(codes, dtype=np.int32)
    counts = np.asarray(counts, dtype=np.int64)
    attempts = attempt_numbers(steps, ranks, counts, codes, values)
    columns = Columns(np.repeat(steps, counts), codes, names, values, _per_value(attempts.astype(np.int32), counts),
                      _per_value(np.asarray(ranks).astype(np.int32), counts), _per_value(np.asarray(walls, np.float64), counts))
    return columns.take(keep) if keep is not None else columns


def _per_value(per_record: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A per-record column repeated for each of the record's values; a constant one as a read-only
    view of its one value (no memory: the usual attempt, rank and wall time columns)."""
    first = per_record[0]
    if bool(np.all(per_record == first)) or (first != first and bool(np.all(per_record != per_record))):
        return np.broadcast_to(per_record[:1], (int(counts.sum()),))
    return np.repeat(per_record, counts)


def build_frame(*args, **kwargs) -> pd.DataFrame:
    """``build_columns`` as a pandas DataFrame."""
    return build_columns(*args, **kwargs).to_frame()


def _whole(value) -> int | None:
    """An epoch counter as a whole number (``2`` or ``2.0``), else None (``0.52``: a fraction)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else None


def counts_within_epochs(pairs) -> bool:
    """(step, epoch) of each record in order: the step counts iterations within an epoch
    (OpenMMLab's ``{"epoch": 2, "iter": 50}``, ``Epoch 2, Step 0, Loss: ...``) when it goes back,
    and only where the whole-number epoch moves on, the epoch never going back. (A resumed run's step
    goes back with its epoch: that is a new attempt.)"""
    last_step = last_epoch = None
    resets = 0
    for step, epoch in pairs:
        epoch = _whole(epoch)
        if step is None or epoch is None:
            continue
        if last_epoch is not None:
            if epoch < last_epoch:
                return False
            if step < last_step:
                if epoch == last_epoch:
                    return False
                resets += 1
        last_step, last_epoch = step, epoch
    return resets > 0


class EpochSteps:
    """The step of iterations counted within epochs, run on across them: each epoch's count starts
    after the last training iteration of the one before (so epoch 1 keeps its own iterations, as a
    reader dates them), one further on when the count starts at 0 (``Step 0``: the first iteration)."""

    def __init__(self) -> None:
        self.offset, self.top, self.epoch = 0, 0, None

    def __call__(self, step: int, epoch, counts_top: bool = True) -> int:
        epoch = _whole(epoch)
        if epoch is None:
            return self.offset + step
        if self.epoch is not None and epoch > self.epoch and step < self.top:
            self.offset, self.top = self.offset + self.top + (1 if step <= 0 else 0), 0
        self.epoch = epoch
        if counts_top:
            self.top = max(self.top, step)
        return self.offset + step
