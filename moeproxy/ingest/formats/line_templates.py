"""The last resort for a log no other reader knows: records found as lines that repeat one template.

Each line's numbers are replaced by a slot (``Batch 706/56191 - Loss: nan`` -> ``Batch #/# - Loss: #``);
a template that repeats on many lines is a record type. In each record type:
- the step is the first slot of whole numbers that never decrease and grow over the lines (a slot
  named like a counter, ``step``/``iter``/``batch``/``epoch``, first);
- every other slot with a word before it (in the template's text since the slot before) is a
  metric under that word (``Loss`` -> ``loss``); slots with no word before them (the total of
  ``706/56191``, the parts of a timestamp) are not metrics.

Only a template that repeats (``MIN_RECORDS`` lines, and the record types together a quarter of
the lines read) counts, so a page of prose or a config file is not a log. It sniffs low (0.1): any
reader that knows the file's shape wins.
"""

from __future__ import annotations

import re
from collections import defaultdict

from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import HEAD_BYTES, SourceFile
from moeproxy.ingest.table import LogTable

# a number (``721,361`` with its thousands grouped is one; ``707.45s`` with a unit of time is one, in
# its unit), or nan/inf
SLOT = re.compile(r"(?<![\w.,])[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d.])|\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?:m?s)?(?![\w.])"
                  r"|(?<![\w])[-+]?(?i:nan|inf)(?![\w])")
# the slots as a group, so that a split keeps them (the texts between are stripped after: a pattern
# that takes the spaces around the slots too is twice as slow)
SLOT_SPLIT = re.compile(f"({SLOT.pattern})")
WORD = re.compile(r"[A-Za-z_][\w./\-]*[A-Za-z_\d]|[A-Za-z_]")
COUNTER = re.compile(r"^(?:global_?step|step|iter(?:ation)?|it|batch|update|epoch)s?$", re.IGNORECASE)
MIN_RECORDS = 5
MAX_LINE = 4096  # a longer line is data, not a printed record


def _number(text: str) -> float:
    return float(text.replace(",", "").rstrip("ms"))  # Python reads nan, inf, -inf and +inf in any case


def _split(line: str) -> tuple[str, list[str], list[str]] | None:
    """(template, the literal texts between slots, the slots' texts), or None for a line without numbers."""
    if len(line) > MAX_LINE:
        return None
    pieces = SLOT_SPLIT.split(line)  # one pass: the texts at even places, the slots at odd ones
    if len(pieces) < 2:
        return None
    parts, values = [text.strip() for text in pieces[0::2]], pieces[1::2]
    return "#".join(parts), parts, values  # (the line comes stripped: every part's ends meet a slot)


# what ends one field of a printed record: ``[ 1000] Critic Loss1: 0.01 | Actor Loss: -0.2, KL: 0.9``
FIELD_END = re.compile(r"[|,;()\[\]{}]|\s-\s")
KEY_WORDS = 4  # a longer run of words before a ``:`` is a sentence, not a key


def _names(parts: list[str]) -> list[str | None]:
    """The metric name of each slot: the key before it when the text since the slot before ends in
    ``:`` or ``=`` (its words in the field, ``Critic Loss1:`` -> ``critic loss1``, as the text
    reader names a key), else the last word of that text (``Batch # Loss #`` -> ``loss``)."""
    out = []
    for text in parts[:-1]:
        words = WORD.findall(text)
        if not words:
            out.append(None)
            continue
        name = words[-1].lower()
        if text.endswith((":", "=")):
            key = WORD.findall(FIELD_END.split(text)[-1])
            if 1 < len(key) <= KEY_WORDS:
                name = " ".join(key).lower()
        out.append(name)
    return out


def _records(splits) -> dict[str, list[tuple[list[str], list[str]]]]:
    """The lines' splits (``_split``) grouped by template, in order."""
    groups: dict[str, list[tuple[list[str], list[str]]]] = defaultdict(list)
    for split in splits:
        if split is not None:
            groups[split[0]].append((split[1], split[2]))
    return groups


def _step_slot(rows: list[tuple[list[str], list[str]]], names: list[str | None]) -> int | None:
    """The slot that counts the records: whole numbers, never decreasing, growing over the lines; a
    slot named like a counter first, then - a slot with a word before it (a timestamp's parts have
    none) before one without - one that grows on every line (Marian's ``Up.``) before one that grows
    now and then (its ``Ep.``)."""
    candidates, every = [], []
    for i in range(len(names)):
        texts = [values[i] for _, values in rows]
        if not all(t.lstrip("+-").isdigit() for t in texts):
            continue
        ints = [int(t) for t in texts]
        if all(b >= a for a, b in zip(ints, ints[1:])) and ints[-1] > ints[0]:
            candidates.append(i)
            if all(b > a for a, b in zip(ints, ints[1:])):
                every.append(i)
    named = [i for i in candidates if names[i] and COUNTER.match(names[i].split()[-1])]
    return (named or [i for i in every if names[i]] or every or candidates or [None])[0]


# a metric named before the counter it was measured at: ``Cost after iteration 1000: 0.693`` (the
# deep-learning course's loop), ``loss at step 20: 1.2``; the slot after the counter has no word of its own
NAMED_AT_COUNTER = re.compile(r"^(?P<name>[A-Za-z_][\w ]*?)\s+(?:after|at|@|on|for)\s+(?:the\s+)?"
                              r"(?:global_?step|step|iter(?:ation)?|it|batch|update|epoch|episode)s?$", re.IGNORECASE)


def _named_at_counter(parts: list[str], names: list[str | None], step: int | None) -> list[str | None]:
    """``names`` with the slot right after the step counter named by the words before the counter,
    when it has no word of its own (``Cost after iteration #: #`` -> ``cost``)."""
    if step is None or step + 1 >= len(names) or names[step + 1] is not None:
        return names
    m = NAMED_AT_COUNTER.match(parts[step])
    if m is None:
        return names
    out = list(names)
    out[step + 1] = "_".join(m.group("name").lower().split())
    return out


def _record_types(splits) -> list[tuple[str, list[str | None], int | None, list]]:
    """(template, slot names, step slot, rows) of each template that repeats and has a metric: with
    a step, or, beside a template that has one, without (PyMARL prints ``t_env: 10060 | Episode:
    194`` and then its metrics on lines of their own: they belong to the step printed before them)."""
    out = []
    for template, rows in _records(splits).items():
        if len(rows) < MIN_RECORDS:
            continue
        names = _names(rows[0][0])
        step = _step_slot(rows, names)
        names = _named_at_counter(rows[0][0], names, step)
        if not any(n for i, n in enumerate(names) if i != step):
            continue
        out.append((template, names, step, rows))
    stepped = max((len(rows) for _, _, step, rows in out if step is not None), default=0)
    # a line without a step belongs to the records when it repeats about once per record (Coqui's
    # ``| > loss_disc: 3.02 (3.46)`` under each ``--> STEP: 24/36 -- GLOBAL_STEP: 1000025``); one that
    # repeats far less often is a remark (a config line, a per-epoch summary)
    return [kind for kind in out if kind[2] is not None or stepped / 2 <= len(kind[3]) <= 2 * stepped] \
        if stepped else []


def parse_line_templates(src: SourceFile) -> ParsedLog:
    lines = [text for _, text in src.lines()]
    table = LogTable()
    used = 0
    splits = [_split(line.strip()) for line in lines]  # each line split once, in order
    kinds = {template: (names, step) for template, names, step, _ in _record_types(splits)}
    current = None
    for split in splits:
        if split is None or split[0] not in kinds:
            continue
        names, step = kinds[split[0]]
        values = split[2]
        if step is not None:
            current = int(values[step])
        if current is None:
            continue
        record = {n: _number(v) for i, (n, v) in enumerate(zip(names, values)) if i != step and n}
        if record:
            table.add_dict(current, record)
            used += 1
    rows = table.columns()
    skipped = sum(1 for text in lines if text.strip()) - used
    return ParsedLog(src.path, "line-templates", guess_framework(rows.names), src.sha256, rows, skipped)


def sniff_line_templates(src: SourceFile) -> float:
    lines = [line[:HEAD_BYTES] for line in src.head_lines() if line.strip()]
    if not lines:
        return 0.0
    kinds = _record_types([_split(line.strip()) for line in lines])
    covered = sum(len(rows) for _, _, _, rows in kinds)
    return 0.1 if kinds and covered >= max(MIN_RECORDS, len(lines) // 4) else 0.0


register(LogFormat("line-templates", "the last resort: lines that repeat one template, a counter and named numbers "
                   "(Batch 706/9000 - Loss: 2.1)", sniff_line_templates, parse_line_templates, top_score=0.1,
                   priority=95))
