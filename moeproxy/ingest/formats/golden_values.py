"""Megatron-LM's functional-test golden values: one JSON object of metrics, each
``{"start_step", "end_step", "step_interval", "values": {"<step>": value}}`` (``"nan"`` spelled as a
string). Megatron's CI compares runs against these files; users diff their own runs with them.
Its two older shapes read too: ``"values"`` as a list (the value of step ``start_step + i *
step_interval``, from 0 by 1 when those are not given; a metric's name may end in a colon, as the
log prints it: ``"lm loss:"``), and one object per step (``{"0": {"lm loss": 11.9, ...}, "1": ...}``).

The file is parsed with the standard json module (it is small: one value per logged step), so a
string value is read as a number only when it spells one (``"nan"``, ``"inf"``, ``"1.5"``). Leading
steps where every metric is ``"nan"`` are the steps a resumed leg did not run: skipped, and counted.
"""

from __future__ import annotations

import json
import re

from moeproxy.errors import InputError
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number

KEYS = frozenset({"start_step", "end_step", "step_interval", "values"})


def _is_series(entry) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("values"), (dict, list)) and set(entry) <= KEYS


def _step_keyed(data: dict) -> bool:
    """One object of metrics per step, keyed by the step (beside it, plain numbers that sum the run
    up: ``"max_alloc": 61.2``)."""
    steps = [k for k, v in data.items() if k.isdigit() and len(k) <= 18 and isinstance(v, dict)]
    return len(steps) >= 2 and all(k in steps or not isinstance(v, (dict, list)) for k, v in data.items())


def _values(entry: dict) -> dict[str, object]:
    """A series' values by step (as strings, as the dict shape keys them)."""
    values = entry["values"]
    if isinstance(values, dict):
        return values
    start, interval = entry.get("start_step", 0), entry.get("step_interval", 1)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, interval)) or interval < 1:
        raise ValueError("start_step and step_interval must be whole numbers (step_interval >= 1)")
    return {str(start + i * interval): v for i, v in enumerate(values)}


def parse_golden_values(src: SourceFile) -> ParsedLog:
    try:
        data = json.loads(src.read_text())
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{src.path}: malformed golden-values JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{src.path}: golden-values JSON must be an object of metrics")
    by_step: dict[int, dict[str, float]] = {}
    skipped = 0
    if _step_keyed(data):  # one object per step: the same series, turned around
        series: dict[str, dict] = {}
        for step, record in data.items():
            if not isinstance(record, dict):
                skipped += 1  # a summary of the run, no step's record
                continue
            for metric, raw in record.items():
                series.setdefault(metric, {"values": {}})["values"][step] = raw
        data = series
    for metric, entry in data.items():
        if not _is_series(entry):
            skipped += 1
            continue
        try:
            values = _values(entry)
        except ValueError as exc:
            raise InputError(f"{src.path}: {metric!r}: {exc}") from None
        metric = metric.rstrip(": ") or metric
        for step, raw in values.items():
            value = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else (
                parse_number(raw) if isinstance(raw, str) else None)
            if value is None or not step.lstrip("-").isdigit() or len(step) > 18:
                raise InputError(f"{src.path}: {metric!r} step {step[:20]!r}: not a step and a number")
            by_step.setdefault(int(step), {})[metric] = float(value)
    # a resumed leg's file holds "nan" for the steps it did not run, in every metric (timings too,
    # which training cannot make NaN): leading steps where no metric is finite are not records
    steps = sorted(by_step)
    first_run = next((i for i, st in enumerate(steps) if any(v == v for v in by_step[st].values())), len(steps))
    skipped += first_run
    table = LogTable()
    for step in steps[first_run:]:
        table.add_dict(step, by_step[step])
    return ParsedLog(src.path, "megatron-golden", guess_framework(table.metric_names) if len(table) else "megatron",
                     src.sha256, table.columns(), skipped)


# the first metric opens with one of the series' keys, or the first step opens an object of metrics
_OPENS = re.compile(r'\{\s*"[^"\n]{1,100}"\s*:\s*\{\s*"(?:values|start_step|end_step|step_interval)"\s*:'
                    r'|\{\s*"\d{1,18}"\s*:\s*\{\s*"[^"\n]{1,100}"\s*:\s*(?:-?\d|"(?:nan|inf|-inf)")', re.IGNORECASE)


def sniff_golden_values(src: SourceFile) -> float:
    head = src.head_text.lstrip()
    if not head.startswith("{"):
        return 0.0
    if '"values"' in head and '"step_interval"' in head:
        return 0.9
    return 0.85 if _OPENS.match(head) else 0.0


register(LogFormat("megatron-golden", "Megatron-LM functional-test golden values "
                   "({metric: {start_step, end_step, step_interval, values: {step: value}}})",
                   sniff_golden_values, parse_golden_values, top_score=0.9, appendable=False, priority=90))
