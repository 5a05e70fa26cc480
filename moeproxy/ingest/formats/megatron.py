"""Megatron-family text logs: Megatron-LM, MindSpeed-LLM and Megatron-DeepSpeed iteration lines,
DeepSpeed overflow lines, and MindSpeed-RL's ``iteration: i / n | key : value`` lines.

Megatron prints ``iteration N/ M | key: value | ...``; a field is left out when its value is NaN
(losses) or the step was skipped (grad norm), ``+inf`` prints ``INF``. Skipped/NaN iteration
counts are per log interval. DeepSpeed prints ``OVERFLOW! Rank R Skipping step. Attempted loss
scale: A, reducing to B`` for each skipped step; it is recorded at the step being attempted
(the last logged step + 1) as ``deepspeed/overflow`` = 1 and the two scales.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from moeproxy.errors import InputError
from moeproxy.ingest.events import DEEPSPEED as DEEPSPEED_OVERFLOW, bar_step, overflow_record
from moeproxy.ingest.prefixes import rank_of
from moeproxy.ingest.preload import FOR_STORING, load as load_for_storing
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)$")
VALIDATION = re.compile(r"validation loss at iteration\s+(\d+)\s*(?:on [^|]*)?\|(.*)$")
DS_STEP = re.compile(r"\bstep=(\d+),\s*skipped=(\d+)(?:,\s*lr=\[([^\],]+))?")
MINDSPEED_RL = re.compile(r"\biteration:\s*(\d+)\s*/\s*\d+\s*\|(.*)$")


def parse_fields(rest: str, prefix: str = "") -> tuple[list[str], list[float]]:
    """Names and values of the ``key: value`` fields of a ``|``-separated line (hot loop)."""
    names: list[str] = []
    values: list[float] = []
    for part in rest.split("|"):
        key, sep, raw = part.rpartition(":")
        if not sep:  # early Megatron-LM (2019-2020) wrote ``lm loss 6.75E+00``, with no colon
            key, sep, raw = part.strip().rpartition(" ")
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


class _IterationBlock:
    """Consecutive iteration lines with one key layout: values kept as text, converted at once."""

    def __init__(self, table: LogTable) -> None:
        self.table = table
        self.raw_keys: tuple | None = None
        self.names: list[str] = []
        self.steps: list[int] = []
        self.ranks: list[int] = []
        self.values: list[str] = []
        self.rests: list[str] = []

    def start(self, raw_keys: tuple) -> bool:
        """Begin a block for a new layout; False when the keys are not all non-empty."""
        self.flush()
        names = [k.strip() for k in raw_keys]
        if not all(names):
            self.raw_keys = None
            return False
        self.raw_keys, self.names = raw_keys, names
        return True

    def flush(self) -> None:
        if not self.steps:
            return
        try:
            values = np.array(self.values, dtype=np.float64)
        except ValueError:  # a value numpy cannot read (e.g. a word): the careful path, line by line
            values = None
        if values is not None:
            self.table.add_block(self.steps, self.names, values, self.ranks)
        else:
            for step, rank, rest in zip(self.steps, self.ranks, self.rests):
                names, vals = parse_fields(rest)
                if names:
                    self.table.add(step, names, vals, rank)
        self.steps, self.ranks, self.values, self.rests = [], [], [], []


@dataclass
class _Scan:
    """What one pass over (a part of) a Megatron log found."""

    table: LogTable = field(default_factory=LogTable)
    skipped: int = 0
    last_step: int | None = 0  # None: unknown (a part that starts mid-file)
    saw_iteration: bool = False
    saw_overflow: bool = False
    mindspeed: bool = False
    needs_last_step: bool = False  # an OVERFLOW line came before this part's first iteration line


def _iteration_head(line: str, at: int) -> tuple[int, str] | None:
    """(step, the text after the first ``|``) of an iteration line, else None: ``ITERATION`` in plain
    string operations for the usual ``iteration   N/ M |`` (about twice as fast as the regex, which
    decides every other case)."""
    bar = line.find("|", at)
    if bar > 0:
        head = line[at + 9:bar]
        done, sep, total = head.partition("/")
        before = line[at - 1] if at else " "
        rest = line[bar + 1:]
        if rest.endswith("\n"):
            rest = rest[:-1]
        if (sep and head[:1].isspace() and not (before.isalnum() or before == "_")
                and done.strip().isdecimal() and total.strip().isdecimal() and "\n" not in rest):
            return int(done), rest
    m = ITERATION.search(line, at)
    return (int(m.group(1)), m.group(2)) if m else None


def _scan(lines: Iterable[str], last_step: int | None = 0) -> _Scan:
    scan = _Scan(last_step=last_step)
    table = scan.table
    block = _IterationBlock(table)
    ranks: dict[str, int] = {}  # line prefix -> rank, so the prefix regex runs once per prefix
    last = ["\0", -1]  # the previous line's "[...]" prefix and its rank: most lines repeat it

    def rank_for(line: str) -> int:
        if line.startswith(last[0]):
            return last[1]
        if not line.startswith("["):  # e.g. "rank3: ..." or no tag: the regex decides
            return rank_of(line)
        prefix = line[: line.find("]") + 1]
        rank = ranks.get(prefix)
        if rank is None:
            rank = ranks[prefix] = rank_of(line)
        last[0], last[1] = prefix, rank
        return rank

    for line in lines:
        at = line.find("iteration")
        hit = _iteration_head(line, at) if at >= 0 else None
        if hit is not None:
            scan.saw_iteration = True
            step, rest = hit
            scan.last_step = step
            # the common case, in C-speed string operations: ``key: number | key: number |``
            parts = rest.replace(":", "|").split("|")
            if not parts[-1].strip():
                parts.pop()
                if not len(parts) % 2:
                    raw_keys = tuple(parts[0::2])
                    if raw_keys == block.raw_keys or block.start(raw_keys):
                        if not block.steps and not scan.mindspeed and (
                                "core attn ratio (%)" in block.names or ">>  iteration" in line):
                            scan.mindspeed = True
                        block.steps.append(step)
                        block.ranks.append(rank_for(line))
                        block.values.extend(parts[1::2])
                        block.rests.append(rest)
                        continue
            block.flush()
            names, values = parse_fields(rest)
            if names:
                table.add(step, names, values, rank_for(line))
            else:
                scan.skipped += 1
            continue
        block.flush()
        record = overflow_record(line)
        if record is not None:
            shown = bar_step(line)  # a tqdm bar the event was printed after: the steps it completed
            if shown is not None:
                scan.last_step = max(shown, scan.last_step or 0)
            elif scan.last_step is None:  # the step it belongs to is in the part before
                scan.needs_last_step = True
                return scan
            scan.last_step += 1
            table.add_dict(scan.last_step, record, rank=rank_of(line))
            scan.saw_overflow = True
            continue
        m = VALIDATION.search(line) if at >= 0 else None
        if m:
            names, values = parse_fields(m.group(2), prefix="validation/")
            if names:
                table.add(int(m.group(1)), names, values, rank_of(line))
                continue
        m = DS_STEP.search(line) if "step=" in line else None
        if m:
            step = int(m.group(1))
            record = {"deepspeed/skipped_total": float(m.group(2))}
            if m.group(3) is not None and parse_number(m.group(3)) is not None:
                record["lr"] = parse_number(m.group(3))
            table.add_dict(step, record, rank=rank_of(line))
            scan.last_step = step
            continue
        if line.strip():
            scan.skipped += 1
    block.flush()
    return scan


def _scan_range(src: SourceFile, start: int, stop: int, last_step: int | None) -> _Scan:
    return _scan(src.text_range(start, stop), last_step)


def _child_part(src: SourceFile, start: int, stop: int) -> tuple[_Scan, str, dict]:
    """The forked child's share: the second part (up to the size seen at open, its unterminated
    last line decided there), the sha256 of the bytes parsed, and what it decided about the tail."""
    scan = _scan_range(src, start, stop, None)
    sha = src.sha256
    return scan, sha, {k: getattr(src, k) for k in ("parsed_end", "warnings", "_tail_decided", "_tail_bytes",
                                                      "nul_runs")}


# Files at least this large are parsed in two processes on a machine with two or more free cores.
PARALLEL_MIN_BYTES = 16 << 20
# The parent scans the first part, the child the rest; the child also hashes the file and pickles
# its part back, so it gets a little less to scan, unless the parent still has the store's modules
# to import (the ingest command): then they share evenly (measured on bench/ingest.py's 200k-line log:
# parent 0.79 s, child 0.77 s).
CHILD_SHARE = 0.45
CHILD_SHARE_COLD = 0.5


def _parallel_scan(src: SourceFile) -> _Scan | None:
    """The file's two halves scanned at once: the second in a forked child. None when not worth it
    or not safe: small file, one core, or other threads running (forking a threaded process can
    deadlock the child, e.g. inside the Streamlit server)."""
    if (src.size < PARALLEL_MIN_BYTES or src.encoding != "utf-8" or threading.active_count() != 1
            or len(os.sched_getaffinity(0)) < 2):
        return None
    import multiprocessing  # here: only a large file needs it
    from concurrent.futures import ProcessPoolExecutor

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    share = CHILD_SHARE if all(name in sys.modules for name in FOR_STORING) else CHILD_SHARE_COLD
    mid = src.line_boundary(int(src.size * (1 - share)))
    if mid <= 0 or mid >= src.lines_end:
        return None
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        second = pool.submit(_child_part, src, mid, src.size)
        load_for_storing()  # on this core while the child scans on the other
        first = _scan_range(src, 0, mid, 0)
        try:
            rest, sha, decided = second.result()
            for key, value in decided.items():
                if key == "nul_runs":  # the child's runs (second part and its hash) beside the parent's
                    src.nul_runs.extend(r for r in value if r not in src.nul_runs)
                else:
                    setattr(src, key, value)
            src.set_sha256(sha)
        except InputError:
            raise
        except Exception:  # the child died (e.g. out of memory): do the second half here
            rest = None
    if rest is None or rest.needs_last_step:
        rest = _scan_range(src, mid, src.size, first.last_step)
    first.table.extend(rest.table)
    first.skipped += rest.skipped
    first.saw_iteration |= rest.saw_iteration
    first.saw_overflow |= rest.saw_overflow
    first.mindspeed |= rest.mindspeed
    return first


def parse_megatron(src: SourceFile) -> ParsedLog:
    # a followed file's later chunk goes on from the last step of the chunks before it
    carried = (src.carry or {}).get("last_step")
    scan = (_scan(src.text_stream(), carried) if carried is not None else None) or _parallel_scan(src) \
        or _scan(src.text_stream())
    if not scan.saw_iteration:
        framework = "deepspeed"
    elif scan.mindspeed:
        framework = "mindspeed-llm"
    elif scan.saw_overflow:
        framework = "megatron-deepspeed"
    else:
        framework = "megatron"
    return ParsedLog(src.path, "megatron", framework, src.sha256, scan.table.columns(), scan.skipped,
                     carry={"last_step": scan.last_step})


def sniff_megatron(src: SourceFile) -> float:
    lines = src.head_lines()
    if any(ITERATION.search(line) and ":" in line for line in lines):
        return 0.9
    if any(DEEPSPEED_OVERFLOW.search(line) for line in lines):
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
    return ParsedLog(src.path, "mindspeed-rl", "mindspeed-rl", src.sha256, table.columns(), skipped)


def sniff_mindspeed_rl(src: SourceFile) -> float:
    return 0.9 if any(MINDSPEED_RL.search(line) for line in src.head_lines()) else 0.0


register(LogFormat("megatron", "Megatron-LM / MindSpeed-LLM / Megatron-DeepSpeed iteration lines, "
                   "DeepSpeed OVERFLOW lines", sniff_megatron, parse_megatron, top_score=0.9, priority=30))
register(LogFormat("mindspeed-rl", "MindSpeed-RL: iteration: i / n | key : value | ...",
                   sniff_mindspeed_rl, parse_mindspeed_rl, top_score=0.9, priority=31))
