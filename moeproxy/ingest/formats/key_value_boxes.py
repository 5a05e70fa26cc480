"""Key/value boxes: one box of ``| key | value |`` rows per record between dashed lines, the console
output of Stable-Baselines3's logger (and of the RL code that copies it)::

    -----------------------------------------
    | rollout/                |             |
    |    ep_rew_mean          | 78.3        |
    | time/                   |             |
    |    total_timesteps      | 4096        |
    | train/                  |             |
    |    entropy_loss         | -0.685      |
    -----------------------------------------

- A row with an empty value and a name ending in ``/`` opens a section: the indented rows under it are
  named ``section/name`` (``rollout/ep_rew_mean``), as the logger's TensorBoard and CSV outputs do.
- A box is one record; its step is the first of the vocabulary's step keys it holds
  (``time/iterations``, SB3's rollout-and-update counter: LABELS.md's "rollout step"; the
  environment steps, ``time/total_timesteps``, stay a metric), else its position.
- stable-baselines (version 2) prints flat boxes without sections, and a vectorised env's value of one
  env as a one-element list (``| episode_reward | [-632.99] |``): read as the number.
- Lines between boxes (prints, warnings, evaluation lines) are skipped and counted. A box that a
  followed file's chunk ends inside is carried to the next chunk (``ParsedLog.carry``).
"""

from __future__ import annotations

import re

from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number
from moeproxy.vocabulary import STEP_KEYS

RULE = re.compile(r"^\s*-{10,}\s*$")
ROW = re.compile(r"^\s*\|( *)([^|]*?)\s*\|\s*([^|]*?)\s*\|\s*$")
SECTION = re.compile(r"^\s*\|\s*[A-Za-z][\w./-]*/\s*\|\s*\|\s*$")
ONE_ELEMENT = re.compile(r"^\s*\[\s*[^\[\],\s]+\s*\]\s*$")
MARKDOWN_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)+\|?\s*$")


class _Boxes:
    """The reader's state: the open box (its section and values), the record index."""

    def __init__(self, carry: dict | None) -> None:
        carry = carry or {}
        self.section = carry.get("section", "")
        self.record: dict[str, float] = dict(carry.get("record", {}))
        self.open = bool(carry.get("open", False))
        self.index = int(carry.get("index", 0))
        self.table = LogTable()
        self.skipped = 0

    def close(self) -> None:
        if self.record:
            step = next((self.record[k] for k in STEP_KEYS if k in self.record), None)
            self.index += 1
            self.table.add_dict(int(step) if step is not None else self.index, self.record)
        self.section, self.record, self.open = "", {}, False

    def line(self, line: str) -> None:
        if RULE.match(line):
            if self.record:  # the rule under a box's rows closes it; the one over them opens one
                self.close()
            self.open = True
            return
        m = ROW.match(line) if self.open else None
        if m is None:
            if line.strip():
                self.skipped += 1
            return
        indent, name, raw = m.groups()
        if not raw and name.endswith("/"):
            self.section = name
            return
        value = parse_number(raw)
        if value is None and ONE_ELEMENT.match(raw):  # stable-baselines 2 prints one env's value as [x]
            value = parse_number(raw.strip()[1:-1])
        if value is None:
            self.skipped += 1
            return
        self.record[(self.section + name) if indent and self.section else name] = value

    def carry(self) -> dict:
        return {"section": self.section, "record": self.record, "open": self.open, "index": self.index}


def parse_key_value_boxes(src: SourceFile) -> ParsedLog:
    boxes = _Boxes(src.carry)
    for _, line in src.lines():
        boxes.line(line)
    carry = boxes.carry()
    rows = boxes.table.columns()
    framework = "stable-baselines3" if any(n.startswith(("rollout/", "time/")) for n in rows.names) \
        else guess_framework(rows.names)
    from_index = not any(k in rows.names for k in STEP_KEYS)
    return ParsedLog(src.path, "key-value-boxes", framework, src.sha256, rows, boxes.skipped, from_index,
                     carry=carry)


def sniff_key_value_boxes(src: SourceFile) -> float:
    lines = src.head_lines()
    rules = sum(1 for line in lines if RULE.match(line))
    sections = sum(1 for line in lines if SECTION.match(line))
    rows = sum(1 for line in lines if ROW.match(line)) - sections
    # one box's opening rule, a section and a value row already tell (a watched file's first look)
    if rules >= 1 and sections >= 1 and rows >= 1:
        return 0.85
    # stable-baselines (version 2) prints flat boxes, no sections: a whole box, its two dashed rules
    # around key/value rows, and no Markdown header separator (``|---|---|``: a table, not a box)
    if rules >= 2 and rows >= 3 and not any(MARKDOWN_SEPARATOR.match(line) for line in lines):
        return 0.85
    return 0.0


register(LogFormat("key-value-boxes", "key/value boxes between dashed lines (Stable-Baselines3's console logger)",
                   sniff_key_value_boxes, parse_key_value_boxes, top_score=0.85, priority=25))
