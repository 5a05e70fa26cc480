"""Python dicts printed to the console, one per logging step.

HF Trainer / TRL print ``{'loss': 2.07, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.04}``
(no step: the counter of the tqdm bar redrawn right after the dict, else the record index,
and the summary says so); OpenRLHF prints
``✨ Global step 12: {...}``; slime prints ``step 12: {...}`` (and ``perf 12: {...}``,
``eval 12: {...}``, whose keys get that prefix). Values may be ``nan``, ``inf``, ``np.float64(x)``
or ``tensor(x)``; ``ast.literal_eval`` cannot read those, so pairs are matched directly.
"""

from __future__ import annotations

import re

from moeproxy.vocabulary import FRACTION_STEP_KEYS, STEP_KEYS as VOCABULARY_STEP_KEYS
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.prefixes import rank_of
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.formats.text import TQDM
from moeproxy.ingest.values import parse_number

DICT = re.compile(r"\{\s*['\"][^'\"]+['\"]\s*:.*\}")
# a plain value ends with a non-space character and is at most 64 long (no number is longer): the
# pattern then runs in time linear in the line, however many quotes and spaces a hostile line holds
PAIR = re.compile(r"['\"]([^'\"]+)['\"]\s*:\s*((?:[\w.]+\([^()]*\))|[^,{}]{0,63}?[^,{}\s])\s*(?=,|\})")
STEP_PREFIX = re.compile(r"(?:global step|(step|perf|eval|rollout))\s*(?::\s*)?(\d+)\s*(?::\s*)?\{", re.IGNORECASE)
def find_dict(line: str):
    """``DICT`` searched only up to the line's last ``}``: without one, ``.*\\}`` would rescan the
    rest of the line from every ``{'`` (a 1 MB line of them took minutes)."""
    end = line.rfind("}") + 1
    return DICT.search(line, 0, end) if end else None


def step_prefix(line: str):
    """``STEP_PREFIX.search(line)``, run only on lines that hold one of its words (case-folded: every
    character that pattern matches to a letter of them case-folds to that letter, checked over all
    of Unicode); the search is most of the time of a line without one."""
    folded = line.casefold()
    if "step" in folded or "perf" in folded or "eval" in folded or "rollout" in folded:
        return STEP_PREFIX.search(line)
    return None


# the vocabulary's list, then the split-qualified counters printed dicts carry
STEP_KEYS = VOCABULARY_STEP_KEYS + ("rollout/step", "eval/step")
# a step written as a progress string (ms-swift: 'global_step/max_steps': '5/2169'), by the vocabulary's keys
FRACTION_STEP = re.compile(r"['\"](?:" + "|".join(map(re.escape, FRACTION_STEP_KEYS))
                           + r")['\"]\s*:\s*['\"](\d+)/\d+['\"]")


# the words a run's printed configuration is labelled with, just before its dict
CONFIG_LABEL = re.compile(r"\b(?:args|arguments|config|configuration|cfg|hparams|hyperparameters|settings|options)"
                          r"\s*[:=]\s*$", re.IGNORECASE)


def parse_printed_dicts(src: SourceFile) -> ParsedLog:
    table = LogTable()
    skipped = 0
    carried = src.carry or {}
    index = int(carried.get("index", 0))  # records before these bytes count too (a followed file's chunks)
    from_index = False
    pending: list[tuple[dict, int]] = []  # dicts with no step, waiting for the progress bar's counter
    last_bar: int | None = carried.get("last_bar")

    bar_dates = bool(carried.get("bar_dates", True))  # False once two stepless dicts came with no bar between them
    dict_since_bar = bool(carried.get("dict_since_bar", False))  # a stepless dict since the last bar (any chunk)

    def flush(bar: int | None) -> None:
        nonlocal index, from_index
        for record, rank in pending:
            if bar is None or not bar_dates or bar == 0:
                # counted from 1, as the trainer's own global step is (HF Trainer logs after an
                # optimizer step: its first record is step 1) and as the bar's counter dates them;
                # a bar still at 0 dates nothing (no step was taken yet)
                step, from_index = index + 1, True
            else:
                step = bar
            index += 1
            table.add_dict(step, record, rank=rank)
        pending.clear()

    for _, line in src.lines():
        m = find_dict(line)
        if m and CONFIG_LABEL.search(line, 0, m.start()):
            skipped += 1  # a run's printed configuration (``args: {...}``, ``model config: {...}``): no record
            continue
        if not m:
            bar = TQDM.search(line)
            if bar:
                # HF Trainer/TRL print the log dict with tqdm.write, which redraws the bar right
                # after it: the counter on the next bar line is the step the dict was logged at
                last_bar = int(bar.group(1))
                dict_since_bar = False
                flush(last_bar)
            elif line.strip():
                skipped += 1
            continue
        record: dict[str, float] = {}
        for key, raw in PAIR.findall(m.group(0)):
            value = parse_number(raw.strip("'\"") if raw[:1] in "'\"" and raw[-1:] == raw[:1] else raw)
            if value is not None:
                record[key] = value
        if not record:
            skipped += 1
            continue
        step = None
        in_record = next((record[k] for k in STEP_KEYS if k in record and record[k] == record[k]), None)
        for key in STEP_KEYS:
            record.pop(key, None)
        pm = step_prefix(line)
        if pm:
            step = int(pm.group(2))
            kind = (pm.group(1) or "").lower()
            if kind in ("perf", "eval"):
                record = {(k if k.startswith(kind + "/") else f"{kind}/{k}"): v for k, v in record.items()}
        elif (fraction := FRACTION_STEP.search(line)) is not None:
            step = int(fraction.group(1))
        elif in_record is not None:
            step = in_record  # as read: LogTable refuses inf or 1.5 (never rounds it)
        if not record:
            skipped += 1
            continue
        if step is None and (bars := list(TQDM.finditer(line, 0, m.start()))):
            # a console capture without line breaks: the bar drawn just before the dict on the same
            # line already shows the step it was logged at (``| 5/300 [00:12<11:24] {'loss': ...}``)
            step = int(bars[-1].group(1))
        if step is None:
            if pending or dict_since_bar:  # two stepless dicts with no bar between them: the bar does not count steps
                bar_dates = False
                flush(None)
            pending.append((record, rank_of(line)))
            dict_since_bar = True
            continue
        index += 1
        table.add_dict(step, record, rank=rank_of(line))
    flush(last_bar)  # after the last bar (a final summary dict): the bar did not move
    names = table.metric_names
    framework = guess_framework(names)
    if "Global step" in src.head_text:
        framework = "openrlhf"
    # ("index" counts the records of the chunks before too: the follower adds no offset of its own)
    carry = {"index": index, "last_bar": last_bar, "bar_dates": bar_dates, "dict_since_bar": dict_since_bar}
    return ParsedLog(src.path, "printed-dicts", framework, src.sha256, table.columns(), skipped, from_index,
                     carry=carry)


def sniff_printed_dicts(src: SourceFile) -> float:
    lines = [l for l in src.head_lines() if l.strip()]
    hits = sum(1 for l in lines if find_dict(l) and PAIR.search(l))
    if not hits:
        return 0.0
    return 0.75 if hits >= max(1, len(lines) // 10) else 0.5


register(LogFormat("printed-dicts", "printed Python dicts: HF Trainer/TRL console, OpenRLHF "
                   "'Global step N: {...}', slime 'step N: {...}'", sniff_printed_dicts, parse_printed_dicts,
                   top_score=0.75, priority=40))
