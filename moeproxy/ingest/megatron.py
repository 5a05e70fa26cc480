"""Megatron-family text logs: Megatron-LM, MindSpeed-LLM and Megatron-DeepSpeed iteration lines,
DeepSpeed overflow lines, and MindSpeed-RL's ``iteration: i / n | key : value`` lines.

Megatron prints ``iteration N/ M | key: value | ...``; a field is left out when its value is NaN
(losses) or the step was skipped (grad norm), ``+inf`` prints ``INF``. Skipped/NaN iteration
counts are per log interval. DeepSpeed prints ``OVERFLOW! Rank R Skipping step. Attempted loss
scale: A, reducing to B`` for each skipped step; it is recorded at the step being attempted
(the last logged step + 1) as ``deepspeed/overflow`` = 1 and the two scales.
"""

from __future__ import annotations

import re

from moeproxy.ingest.prefixes import rank_of
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)$")
VALIDATION = re.compile(r"validation loss at iteration\s+(\d+)\s*(?:on [^|]*)?\|(.*)$")
OVERFLOW = re.compile(
    r"overflow!.*?skipping step\.?\s*attempted loss scale:\s*([^,\s]+),?\s*reducing to\s*([^\s,]+)",
    re.IGNORECASE,
)
DS_STEP = re.compile(r"\bstep=(\d+),\s*skipped=(\d+)(?:,\s*lr=\[([^\],]+))?")
MINDSPEED_RL = re.compile(r"\biteration:\s*(\d+)\s*/\s*\d+\s*\|(.*)$")


def parse_fields(rest: str, prefix: str = "") -> dict[str, float]:
    record: dict[str, float] = {}
    for field in rest.split("|"):
        key, sep, raw = field.rpartition(":")
        if not sep:
            continue
        key = key.strip()
        value = parse_number(raw)
        if key and value is not None:
            record[prefix + key] = value
    return record


def parse_megatron(src: SourceFile) -> ParsedLog:
    table = LogTable()
    skipped = 0
    last_step = 0
    framework = "megatron"
    saw_iteration = saw_overflow = False
    for _, line in src.lines():
        m = ITERATION.search(line)
        if m:
            saw_iteration = True
            step = int(m.group(1))
            record = parse_fields(m.group(2))
            if record:
                table.add_dict(step, record, rank=rank_of(line))
                last_step = step
                if framework == "megatron" and ("core attn ratio (%)" in record or ">>  iteration" in line):
                    framework = "mindspeed-llm"
            else:
                skipped += 1
            continue
        m = OVERFLOW.search(line)
        if m:
            last_step += 1
            attempted, reduced = parse_number(m.group(1)), parse_number(m.group(2))
            record = {"deepspeed/overflow": 1.0}
            if attempted is not None:
                record["deepspeed/attempted_loss_scale"] = attempted
            if reduced is not None:
                record["deepspeed/reduced_loss_scale"] = reduced
            table.add_dict(last_step, record, rank=rank_of(line))
            saw_overflow = True
            continue
        m = VALIDATION.search(line)
        if m:
            record = parse_fields(m.group(2), prefix="validation/")
            if record:
                table.add_dict(int(m.group(1)), record, rank=rank_of(line))
                continue
        m = DS_STEP.search(line)
        if m:
            step = int(m.group(1))
            record = {"deepspeed/skipped_total": float(m.group(2))}
            if m.group(3) is not None and parse_number(m.group(3)) is not None:
                record["lr"] = parse_number(m.group(3))
            table.add_dict(step, record, rank=rank_of(line))
            last_step = step
            continue
        if line.strip():
            skipped += 1
    if not saw_iteration:
        framework = "deepspeed"
    elif saw_overflow and framework == "megatron":
        framework = "megatron-deepspeed"
    return ParsedLog(src.path, "megatron", framework, src.sha256, table.frame(), skipped)


def sniff_megatron(src: SourceFile) -> float:
    lines = src.head_lines()
    if any(ITERATION.search(line) and ":" in line for line in lines):
        return 0.9
    if any(OVERFLOW.search(line) for line in lines):
        return 0.85
    if any(DS_STEP.search(line) for line in lines):
        return 0.6
    return 0.0


def parse_mindspeed_rl(src: SourceFile) -> ParsedLog:
    table = LogTable()
    skipped = 0
    for _, line in src.lines():
        m = MINDSPEED_RL.search(line)
        if m:
            record = parse_fields(m.group(2))
            if record:
                table.add_dict(int(m.group(1)), record, rank=rank_of(line))
                continue
        if line.strip():
            skipped += 1
    return ParsedLog(src.path, "mindspeed-rl", "mindspeed-rl", src.sha256, table.frame(), skipped)


def sniff_mindspeed_rl(src: SourceFile) -> float:
    return 0.9 if any(MINDSPEED_RL.search(line) for line in src.head_lines()) else 0.0


register(LogFormat("megatron", "Megatron-LM / MindSpeed-LLM / Megatron-DeepSpeed iteration lines, "
                   "DeepSpeed OVERFLOW lines", sniff_megatron, parse_megatron))
register(LogFormat("mindspeed-rl", "MindSpeed-RL: iteration: i / n | key : value | ...",
                   sniff_mindspeed_rl, parse_mindspeed_rl))
