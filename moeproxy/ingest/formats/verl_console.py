"""verl's console logger: ``step:N - key:value - key:value ...`` one line per training step.

Values are ``pprint`` reprs (``np.float64(0.12)``, ``nan``); keys hold ``/``, ``@``, ``-`` and,
in older versions, ``:`` (``num_turns:min``), so each pair is split on its last colon. Lines
carry Ray prefixes and are interleaved with tqdm bars and prose: those are skipped and counted.
"""

from __future__ import annotations

import re

from moeproxy.ingest.prefixes import rank_of
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number

STEP_LINE = re.compile(r"(?:^|[\s)])step:(\d+)\s+-\s+(.+)$")


def parse_pairs(rest: str) -> dict[str, float]:
    record: dict[str, float] = {}
    for pair in rest.split(" - "):
        key, sep, raw = pair.rpartition(":")
        if not sep or not key.strip():
            continue
        value = parse_number(raw)
        if value is not None:
            record[key.strip()] = value
    return record


def parse_verl_console(src: SourceFile) -> ParsedLog:
    table = LogTable()
    skipped = 0
    for _, line in src.lines():
        m = STEP_LINE.search(line)
        if not m:
            if line.strip():
                skipped += 1
            continue
        record = parse_pairs(m.group(2))
        if record:
            table.add_dict(int(m.group(1)), record, rank=rank_of(line))
        else:
            skipped += 1
    return ParsedLog(src.path, "verl-console", "verl", src.sha256, table.columns(), skipped)


def sniff_verl_console(src: SourceFile) -> float:
    hits = sum(1 for line in src.head_lines() if STEP_LINE.search(line) and ":" in line.split(" - ", 1)[-1])
    return 0.9 if hits else 0.0


register(LogFormat("verl-console", "verl console logger: step:N - key:value - ...",
                   sniff_verl_console, parse_verl_console, top_score=0.9, priority=20))
