"""Storing the files one ingest parsed, all in one transaction, at a per-file cost near that of
writing their rows (a directory of 20,000 small logs is 20,000 files, not 20,000 x a dozen queries).

``store_parsed(tx, parsed_all, ...)`` is ``ingest_paths``' write stage. File by file, in the order
given, it decides what storing them one at a time decides: a file whose sha256 is stored, or was
stored earlier in the batch, is a duplicate and adds nothing; a run is made by its first stored
file; names map as the run maps them already; a file that repeats a (metric, rank, step) its run
holds starts a new attempt (``Transaction.attempt_offset``, the one rule). What it asks per file
comes from memory instead of the store:

- stored sha256s, run ids, name mappings and extents (latest attempt, last step) are read once;
- ``_RunState.steps`` holds, per (stored metric, rank), the steps of the rows this batch added, and
  answers the repeat question for them; the store is asked only about the rows it held before
  the batch (or a file too large to hold), and only when the step ranges meet;
- sources, names and values are written by a few statements per ``FLUSH_ROWS`` values.

Lifecycle: ``ingest_paths`` opens ``store.write()`` and calls ``store_parsed`` inside it; writes of
a flush stay in that one transaction, and an exception anywhere rolls all of it back, so a failed
batch leaves nothing half-written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Callable

import numpy as np

from moeproxy.columns import Columns

from moeproxy.ingest.stored_rows import rows_to_store

if TYPE_CHECKING:
    from moeproxy.ingest.registry import ParsedLog

FLUSH_ROWS = 1_000_000  # values held before they are written (into the one transaction)
INDEX_FILE_ROWS = 100_000  # a file of more values is written at once, its repeats asked of the store
INDEX_KEYS = 2_000_000  # (metric, rank, step) keys held in memory at most; past it the store answers


@dataclass
class _RunState:
    """What the store would answer about one run, kept up to date as the batch adds files."""

    run_id: int
    known: dict[str, str]  # original -> stored name, as metric_names holds it with this batch
    latest: int | None  # latest attempt of the run's values (stored and added)
    last_step: int | None
    unheld_last_step: int | None  # last step of the run's values that ``steps`` does not hold
    steps: dict[tuple[str, int], set[int]] = field(default_factory=dict)  # (stored metric, rank) -> steps added


@dataclass
class _Pending:
    """Rows decided but not yet written; a source is named by its index into ``sources``."""

    sources: list[tuple[int, dict]] = field(default_factory=list)
    names: list[tuple[int, str, str]] = field(default_factory=list)
    scalars: list[tuple[int, int, Columns]] = field(default_factory=list)
    routing: list[tuple[int, int, object]] = field(default_factory=list)  # one per source
    rows: int = 0

    def flush(self, tx) -> None:
        ids = tx.add_sources(self.sources)
        tx.add_metric_name_rows(self.names)
        tx.add_scalar_parts([(run_id, ids[i], rows) for run_id, i, rows in self.scalars])
        for run_id, i, routing in self.routing:
            tx.add_routing(run_id, ids[i], routing)
        self.sources, self.names, self.scalars, self.routing, self.rows = [], [], [], [], 0


def steps_by_series(rows: Columns) -> dict[tuple[str, int], list[int]]:
    """(metric, rank) -> the steps of the rows of that series."""
    out: dict[tuple[int, int], list[int]] = {}
    if len(rows) <= 10_000:
        for code, rank, step in zip(rows.code.tolist(), rows.rank.tolist(), rows.step.tolist()):
            out.setdefault((code, rank), []).append(step)
    else:  # grouped by numpy: a large file's values do not cross into Python one by one for the keys
        pair = (rows.code.astype(np.int64) << 32) | (rows.rank.astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(pair, kind="stable")
        cuts = np.flatnonzero(np.diff(pair[order])) + 1
        for group in np.split(order, cuts):
            out[(int(rows.code[group[0]]), int(rows.rank[group[0]]))] = rows.step[group].tolist()
    return {(rows.names[code], rank): steps for (code, rank), steps in out.items()}


def _repeats(tx, state: _RunState, rows: Columns) -> bool:
    """Whether the rows repeat a (metric, rank, step) the run holds: the batch's from memory, the
    store's (held before the batch, or too many to keep) from the store when the step ranges meet."""
    held = state.steps
    if held and any(key in held and not held[key].isdisjoint(steps) for key, steps in steps_by_series(rows).items()):
        return True
    return (state.unheld_last_step is not None and int(rows.step.min()) <= state.unheld_last_step
            and tx.repeats_stored(state.run_id, rows))


class _Batch:
    def __init__(self, tx, states: dict[str, _RunState]) -> None:
        self.tx, self.states, self.pending, self.held_keys = tx, states, _Pending(), 0

    def add(self, parsed: ParsedLog, run_name: str, arm_rows, summary) -> None:
        state = self.states[run_name]
        rows, routing, names = rows_to_store(self.tx, state.run_id, arm_rows, state.known,
                                             (state.latest, state.last_step), partial(_repeats, self.tx, state))
        new_names = [(original, stored) for original, stored in names.items() if original not in state.known]
        state.known.update(new_names)
        pending = self.pending
        pending.names.extend((state.run_id, stored, original) for original, stored in new_names)
        index = len(pending.sources)
        pending.sources.append((state.run_id, summary.to_dict() | {"sha256": parsed.sha256}))
        if len(rows):
            pending.scalars.append((state.run_id, index, rows))
            pending.rows += len(rows)
            latest, last = int(rows.attempt.max()), int(rows.step.max())
            state.latest = latest if state.latest is None else max(state.latest, latest)
            state.last_step = last if state.last_step is None else max(state.last_step, last)
        pending.routing.append((state.run_id, index, routing))  # None: no expert loads
        pending.rows += 0 if routing is None else len(routing)
        if len(rows) and (len(rows) > INDEX_FILE_ROWS or self.held_keys + len(rows) > INDEX_KEYS):
            # too many to hold: written now, and asked of the store from here on
            state.unheld_last_step = last if state.unheld_last_step is None else max(state.unheld_last_step, last)
            self.pending.flush(self.tx)
            if self.held_keys + len(rows) > INDEX_KEYS:
                self._release_all()
        else:
            for key, steps in steps_by_series(rows).items() if len(rows) else ():
                held = state.steps.setdefault(key, set())
                before = len(held)
                held.update(steps)
                self.held_keys += len(held) - before
            if pending.rows >= FLUSH_ROWS:
                pending.flush(self.tx)

    def _release_all(self) -> None:
        """Every run's held steps dropped (all is written): the store answers for them."""
        for state in self.states.values():
            if state.steps:
                state.unheld_last_step = state.last_step
                state.steps = {}
        self.held_keys = 0

    def finish(self) -> None:
        self.pending.flush(self.tx)


def store_parsed(tx, parsed_all: list[tuple[ParsedLog, str]], role: str, proxy_of: str | None,
                 summary_of: Callable, arms_of: Callable,
                 progress: Callable[[str], None] | None = None) -> list:
    """Write every parsed file (with its base run name) in the transaction ``tx``; one summary per
    stored run or duplicate, in the order of the files. ``summary_of(parsed, run, rows)`` and
    ``arms_of(parsed, run)`` are ``ingest_paths``' own."""
    stored = tx.sources_with_shas(list(dict.fromkeys(p.sha256 for p, _ in parsed_all)))
    plan: list[tuple[ParsedLog, str, object, tuple | None]] = []  # (file, run, rows, duplicate of)
    seen_in_batch: dict[str, str] = {}
    first_of_run: dict[str, ParsedLog] = {}
    for parsed, base_name in parsed_all:
        duplicate = stored.get(parsed.sha256)
        if duplicate is None and parsed.sha256 in seen_in_batch:
            duplicate = (seen_in_batch[parsed.sha256], "")
        for run_name, arm_rows in arms_of(parsed, base_name):
            plan.append((parsed, run_name, arm_rows, duplicate))
            if duplicate is None:
                seen_in_batch.setdefault(parsed.sha256, run_name)
                first_of_run.setdefault(run_name, parsed)
    run_ids = _ensure_runs(tx, first_of_run, role, proxy_of)
    ids = list(run_ids.values())
    mappings, extents = tx.metric_mappings(ids), tx.run_extents(ids)
    states = {name: _RunState(run_id, mappings[run_id], *extents[run_id], extents[run_id][1])
              for name, run_id in run_ids.items()}
    batch = _Batch(tx, states)
    summaries = []
    for parsed, run_name, arm_rows, duplicate in plan:
        summary = summary_of(parsed, run_name, arm_rows)
        if duplicate is not None:
            summary.duplicate, summary.duplicate_of = True, duplicate[0]
        else:
            if progress:
                progress(f"storing {parsed.path} ({summary.rows} values)")
            batch.add(parsed, run_name, arm_rows, summary)
        summaries.append(summary)
    batch.finish()
    return summaries


def _ensure_runs(tx, first_of_run: dict[str, ParsedLog], role: str, proxy_of: str | None) -> dict[str, int]:
    """name -> run id of each run the batch stores into, made when missing (with the framework and
    format of its first file). A role or proxy to set goes through ``ensure_run``'s checks, run by
    run; the usual case (role 'other') makes every new run in one statement."""
    if role != "other" or proxy_of is not None:
        return {name: int(tx.ensure_run(name, role, proxy_of, p.framework, p.format)) for name, p in first_of_run.items()}
    existing = tx.run_ids(list(first_of_run))
    new = tx.add_runs([(name, p.framework, p.format) for name, p in first_of_run.items() if name not in existing])
    return {name: existing[name] if name in existing else new[name] for name in first_of_run}
