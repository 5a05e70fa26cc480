"""Megatron-LM's functional-test golden values: one JSON object of metrics, each
``{"start_step", "end_step", "step_interval", "values": {"<step>": value}}`` (``"nan"`` spelled as a
string). Megatron's CI compares runs against these files; users diff their own runs with them.

The file is parsed with the standard json module (it is small: one value per logged step), so a
string value is read as a number only when it spells one (``"nan"``, ``"inf"``, ``"1.5"``). Leading
steps where every metric is ``"nan"`` are the steps a resumed leg did not run: skipped, and counted.
"""

from __future__ import annotations

import json

from moeproxy.errors import InputError
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number

KEYS = frozenset({"start_step", "end_step", "step_interval", "values"})


def _is_series(entry) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("values"), dict) and set(entry) <= KEYS


def parse_golden_values(src: SourceFile) -> ParsedLog:
    try:
        data = json.loads(src.read_text())
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{src.path}: malformed golden-values JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{src.path}: golden-values JSON must be an object of metrics")
    by_step: dict[int, dict[str, float]] = {}
    skipped = 0
    for metric, entry in data.items():
        if not _is_series(entry):
            skipped += 1
            continue
        for step, raw in entry["values"].items():
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


def sniff_golden_values(src: SourceFile) -> float:
    head = src.head_text.lstrip()
    if not head.startswith("{") or '"values"' not in head or '"step_interval"' not in head:
        return 0.0
    return 0.9


register(LogFormat("megatron-golden", "Megatron-LM functional-test golden values "
                   "({metric: {start_step, end_step, step_interval, values: {step: value}}})",
                   sniff_golden_values, parse_golden_values, top_score=0.9, appendable=False, priority=90))
