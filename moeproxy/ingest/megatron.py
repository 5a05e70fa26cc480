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


def parse_fields(rest: str, prefix: str = "") -> tuple[list[str], list[float]]:
    """Names and values of the ``key: value`` fields of a ``|``-separated line (hot loop)."""
    names: list[str] = []
    values: list[float] = []
    for field in rest.split("|"):
        key, sep, raw = field.rpartition(":")
        if not sep:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = parse_number(raw)
            if value is None:
                continue
        key = key.strip()
        if key:
            names.append(prefix + key if prefix else key)
            values.append(value)
    return names, values


def fast_fields(rest: str, cache: dict) -> tuple[list[str], list[float]] | None:
    """The common case in C-speed string operations: ``key: number | key: number |``.

    Returns None when the line needs ``parse_fields`` (a ':' inside a key, a non-numeric value).
    Key layouts repeat line after line, so stripped names are cached by their raw form.
    """
    parts = rest.replace(":", "|").split("|")
    if parts[-1].strip():
        return None
    parts.pop()
    if len(parts) % 2:
        return None
    raw_keys = tuple(parts[0::2])
    names = cache.get(raw_keys)
    if names is None:
        names = [k.strip() for k in raw_keys]
        if not all(names):
            return None
        cache[raw_keys] = names
    try:
        return names, list(map(float, parts[1::2]))
    except ValueError:
        return None


def parse_megatron(src: SourceFile) -> ParsedLog:
    table = LogTable()
    add = table.add
    skipped = 0
    last_step = 0
    framework = "megatron"
    saw_iteration = saw_overflow = False
    ranks: dict[str, int] = {}  # line prefix -> rank, so the prefix regex runs once per prefix
    layouts: dict[tuple, list[str]] = {}
    for line in src.text_stream():
        at = line.find("iteration")
        m = ITERATION.search(line, at) if at >= 0 else None
        if m:
            saw_iteration = True
            rest = m.group(2)
            names, values = fast_fields(rest, layouts) or parse_fields(rest)
            if names:
                prefix = line[: line.find("]") + 1] if line.startswith("[") else ""
                rank = ranks.get(prefix)
                if rank is None:
                    rank = ranks[prefix] = rank_of(line)
                step = int(m.group(1))
                add(step, names, values, rank)
                last_step = step
                if framework == "megatron" and ("core attn ratio (%)" in names or ">>  iteration" in line):
                    framework = "mindspeed-llm"
            else:
                skipped += 1
            continue
        m = OVERFLOW.search(line) if "verflow" in line or "VERFLOW" in line else None
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
        m = VALIDATION.search(line) if at >= 0 else None
        if m:
            names, values = parse_fields(m.group(2), prefix="validation/")
            if names:
                add(int(m.group(1)), names, values, rank_of(line))
                continue
        m = DS_STEP.search(line) if "step=" in line else None
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
            names, values = parse_fields(m.group(2))
            if names:
                table.add(int(m.group(1)), names, values, rank_of(line))
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
