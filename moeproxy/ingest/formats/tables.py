"""Tables people paste: markdown tables from PR descriptions, whitespace-aligned columns with a
header, headerless ``step value`` golden files, and bare values one per line.

- Vertical tables: a header row of names, then one row per step. The step is the column called
  step/iter/iteration/global_step/epoch (else the row index). ``|``-delimited rows (markdown, with
  or without the ``|---|`` rule) split on ``|``; other rows on runs of two or more spaces or tabs
  (a single space separates the cells of a numeric row).
- Horizontal tables: the header row holds the steps (``| step | 1 | 2 | ...``) and each further
  row is one metric.
- Two runs in one table become two arms, each stored as its own run: cells holding ``a / b``
  (arm names from a header that ends in ``x / y``, else 1 and 2), or columns that share a metric
  word under different prefixes (``Baseline Loss``, ``Test Loss``; not the splits of one run,
  ``Training Loss`` beside ``Validation Loss``). Columns of neither kind go to every arm.
- Headerless files: rows of exactly two numbers (``12 3.456``: integer step, value; or three,
  ``1,1000,4.59``: two counters then the value, the first counter the step) and files of one
  value per line (``3.2207``, ``tensor(3.2207, device='cuda:0')``, no step: the record index is the
  step) are read as the loss; the summary says so.
A common bracketed tag in front of every line (``[LOSS_COMPARE] ...``) is ignored.
"""

from __future__ import annotations

import re

from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number
from moeproxy.vocabulary import STEP_KEYS

# the vocabulary's step keys, plus the column heads only a pasted table uses
STEP_NAMES = frozenset({k.lower() for k in STEP_KEYS} | {"steps", "iterations", "global step", "epoch", "#", "it"})
TAG = re.compile(r"^\s*\[[A-Za-z][\w.-]{0,40}\]\s?")
RULE = re.compile(r"^[\s|:=+-]*-{2,}[\s|:=+-]*$")  # |---|---| or ----  -------
WIDE = re.compile(r"\s{2,}|\t")
HEAD_ARMS = re.compile(r"^(.*?)\s*\b(\w{1,12})\s*/\s*(\w{1,12})$")
MAX_COLUMNS = 512
SPLIT_WORDS = frozenset({"train", "training", "val", "valid", "validation", "eval", "evaluation", "dev"})
NAMES_ROW = re.compile(r"[A-Za-z_][\w./-]*(?: [A-Za-z_][\w./-]*)+")  # metric names one space apart


EMPHASIS = re.compile(r"^(\*\*|__|\*|_|`)(.*)\1$")
OPEN_STEP = re.compile(r"^(\d+)\+$")  # ``91+``: this step and the ones after it
# a cell with no value: the Hugging Face Trainer's progress table prints ``No Log`` where a column
# was not logged at that step (its validation loss between evaluations, TRL's sampling columns)
PLACEHOLDERS = frozenset({"no log", "none", "null"})
THOUSANDS = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?")  # ``12,800``


def _value(cell: str) -> float | None | str:
    """A number, None for an empty/placeholder cell, or the text (not a number). Markdown emphasis
    around a cell (``**NaN**``) is not part of it."""
    cell = cell.strip()
    m = EMPHASIS.match(cell)
    if m:
        cell = m.group(2).strip()
    m = OPEN_STEP.match(cell)
    if m:
        return float(m.group(1))
    c = cell.replace(",", "") if THOUSANDS.fullmatch(cell) else cell
    if c in ("", "-", "—", "n/a", "N/A") or c.lower() in PLACEHOLDERS:
        return None
    v = parse_number(c)
    return c if v is None else v


def _arm_values(cell: str) -> list[float | None] | None:
    """``0.31 / 0.30`` -> [0.31, 0.30]; a single number -> [x]; None when not numeric."""
    parts = [p for p in cell.split(" / ")] if " / " in cell else [cell]
    out = []
    for p in parts:
        v = _value(p)
        if isinstance(v, str):
            return None
        out.append(v)
    return out


# a table drawn with box characters (``tabulate``'s fancy_grid, rich's tables): its bars are pipes,
# its ruling lines (``├───┼───┤``, ``╞═══╪═══╡``) are rules
BOX_BAR_CHARS = "\u2502\u2503\u2551"  # │ ┃ ║
BOX_BARS = str.maketrans({c: "|" for c in BOX_BAR_CHARS})
BOX_RULE = re.compile(r"^\s*[\u2500-\u257f\s]+$")


def _unbox(lines: list[str]) -> list[str]:
    if not any(c in l for l in lines for c in BOX_BAR_CHARS):
        return lines
    return [l.translate(BOX_BARS) for l in lines if not BOX_RULE.match(l)]


def _strip_tags(lines: list[str]) -> list[str]:
    tagged = [TAG.match(l) for l in lines if l.strip()]
    if tagged and all(tagged) and len({m.group(0).strip() for m in tagged}) == 1:
        return [TAG.sub("", l, count=1) for l in lines]
    return lines


def _split(line: str, numeric_row: bool) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:-1] if s.endswith("|") and len(s) > 1 else s[1:]
        return [c.strip() for c in s.split("|")]
    if "|" in s:  # a Markdown dialect without outer pipes: ``step | loss`` over ``--|--``
        s = s[:-1] if s.endswith("|") else s
        return [c.strip() for c in s.split("|")]
    return s.split() if numeric_row else [c for c in WIDE.split(s) if c]


def _is_numeric_row(cells: list[str], allow_first_text: bool = False) -> bool:
    body = cells[1:] if allow_first_text else cells
    if not body:
        return False
    seen = False  # a row of placeholders alone is no numeric row
    for cell in body:  # the first cell that is no number settles it (most lines of a text log)
        v = _arm_values(cell)
        if v is None:
            return False
        seen = seen or any(x is not None for x in v)
    return seen


class _Block:
    def __init__(self, header: list[str], rows: list[list[str]], first_line: int) -> None:
        self.header, self.rows, self.first_line = header, rows, first_line


def _blocks(lines: list[str]) -> list[_Block]:
    """Header + data-row blocks (data rows: every cell numeric, or a name then numbers)."""
    out: list[_Block] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip() or RULE.match(line.strip()):
            i += 1
            continue
        header = _split(line, numeric_row=False)
        if len(header) < 2 and NAMES_ROW.fullmatch(line.strip()):
            header = line.split()  # names one space apart (fastai v1: ``epoch train_loss valid_loss``)
        if len(header) < 2 or len(header) > MAX_COLUMNS or _is_numeric_row(header):
            i += 1
            continue
        j = i + 1
        if j < n and RULE.match(lines[j].strip()):
            j += 1
        rows = []
        while j < n and lines[j].strip():
            piped = "|" in lines[j]
            cells = _split(lines[j], numeric_row=not piped)
            if (not piped and len(cells) == len(header) + 1 and _arm_values(cells[-1]) is None
                    and _is_numeric_row(cells[:-1], allow_first_text=True)):
                cells = cells[:-1]  # one unnamed cell after the named ones (fastai v1's ``(00:13)`` time)
            if not piped and len(cells) != len(header):
                cells = _split(lines[j], numeric_row=False)
            if not piped and 2 <= len(cells) < len(header):
                cells = cells + [""] * (len(header) - len(cells))  # the last cells left empty
            if (len(cells) == len(header) > 2 and cells[-1] and _arm_values(cells[-1]) is None
                    and _is_numeric_row(cells[:-1], allow_first_text=True)):
                cells = cells[:-1] + [""]  # a trailing free-text column (``<<< SPIKE``): notes, not values
            if len(cells) != len(header) or not _is_numeric_row(cells, allow_first_text=True):
                break
            rows.append(cells)
            j += 1
        if len(rows) >= 2 or (rows and len(header) >= 3):
            out.append(_Block(header, rows, i + 1))
            i = j
        else:
            i += 1
    return out


def _horizontal(block: _Block) -> bool:
    steps = block.header[1:]
    return (block.header[0].strip().lower() in STEP_NAMES
            and all(isinstance(_value(s), float) for s in steps)
            and all(not isinstance(_value(r[0]), float) for r in block.rows))


def _columns(block: _Block) -> tuple[list[int], dict[str, list[list[float | None]]]]:
    """(steps, {column name: per-row arm values}) of one block, vertical or horizontal."""
    if _horizontal(block):
        steps = [int(_value(s)) for s in block.header[1:]]
        cols = {r[0].strip(): [_arm_values(c) for c in r[1:]] for r in block.rows}
        return steps, cols
    names = [h.strip() for h in block.header]
    # a step counter before the epoch (an HF model card's ``| Training Loss | Epoch | Step |``)
    step_col = next((k for k, h in enumerate(names) if h.lower() in STEP_NAMES and h.lower() != "epoch"),
                    next((k for k, h in enumerate(names) if h.lower() == "epoch"), None))
    cols: dict[str, list] = {}
    for k, name in enumerate(names):
        if k != step_col:
            cols[name] = [_arm_values(r[k]) for r in block.rows]
    if step_col is not None:
        raw = [_value(r[step_col]) for r in block.rows]
        if all(isinstance(v, float) and v.is_integer() for v in raw):  # not nan or inf: no step
            return [int(v) for v in raw], cols
        cols[names[step_col]] = [_arm_values(r[step_col]) for r in block.rows]
    return list(range(len(block.rows))), cols


def _arms(cols: dict[str, list]) -> tuple[list[str], dict[str, list[tuple[str, str, int]]]]:
    """Arm names and, per column, the (arm, metric, index in cell) it feeds."""
    widths = {max((len(v) for v in vals if v is not None), default=1) for vals in cols.values()}
    k = max(widths)
    routes: dict[str, list[tuple[str, str, int]]] = {}
    if k > 1:
        arm_names = [str(i + 1) for i in range(k)]
        for name in cols:
            m = HEAD_ARMS.match(name)
            if m and k == 2 and m.group(1):
                arm_names = [m.group(2), m.group(3)]
                break
        for name in cols:
            m = HEAD_ARMS.match(name)
            metric = m.group(1).strip() if m and m.group(1) else name
            routes[name] = [(arm, metric, i) for i, arm in enumerate(arm_names)]
        return arm_names, routes
    # columns that share their last word under different prefixes: Baseline Loss / Test Loss
    by_last: dict[str, list[str]] = {}
    for name in cols:
        words = name.split()
        if len(words) >= 2:
            by_last.setdefault(words[-1].lower(), []).append(name)
    # (the splits of one run, ``Training Loss`` beside ``Validation Loss`` in an HF model card, are no arms)
    shared = next((names for names in by_last.values() if len(names) >= 2
                   and not all(" ".join(n.split()[:-1]).lower() in SPLIT_WORDS for n in names)), None)
    if shared is None:
        return [""], {name: [("", name, 0)] for name in cols}
    arm_names = [" ".join(n.split()[:-1]).lower() for n in shared]
    for name in cols:
        if name in shared:
            routes[name] = [(arm_names[shared.index(name)], name.split()[-1].lower(), 0)]
        else:
            routes[name] = [(arm, name, 0) for arm in arm_names]
    return arm_names, routes


def _bare_cells(line: str) -> list[str]:
    """A headerless row's cells: split on a comma when the row has one (a CSV), else on spaces."""
    return [c.strip() for c in line.split(",")] if "," in line else line.split()


def _bare_values(lines: list[str]) -> tuple[list[int], list[float], int] | None:
    """Headerless ``step value`` rows, or one value per line (index = step), with the count of
    other lines (``...``, ``Saving the model``) skipped; the rows must be most of the file."""
    rows = [_bare_cells(l) if not l.strip().startswith(("tensor(", "np.", "torch.")) else [l.strip()]
            for l in lines if l.strip()]
    if len(rows) < 2:
        return None
    pairs = []
    for r in rows:
        if len(r) in (2, 3):
            # ``step value``; or ``epoch step value`` (d3rlpy's headerless metric CSVs): the first counter
            # is the step, the last cell the value
            a, b = _value(r[0]), _value(r[-1])
            middle = _value(r[1]) if len(r) == 3 else 0.0
            if (isinstance(a, float) and a.is_integer() and isinstance(b, float)  # nan, inf: no step
                    and isinstance(middle, float) and middle.is_integer()):
                pairs.append((int(a), b))
    if len(pairs) >= 3 and len(pairs) >= 0.6 * len(rows):
        steps = [p[0] for p in pairs]
        if sum(b > a for a, b in zip(steps, steps[1:])) >= 0.9 * (len(steps) - 1):
            return steps, [p[1] for p in pairs], len(rows) - len(pairs)
        return None
    if all(len(r) == 1 for r in rows):
        values = [_value(r[0]) for r in rows]
        if all(isinstance(v, float) for v in values):
            return list(range(len(values))), values, 0
    return None


def _read(src: SourceFile, head: bool) -> tuple[dict[str, LogTable], int, bool, str] | None:
    lines = _strip_tags(_unbox(src.head_lines() if head else [l for _, l in src.lines()]))
    blocks = _blocks(lines)
    tables: dict[str, LogTable] = {}
    if blocks:
        used = 0
        for block in blocks:
            steps, cols = _columns(block)
            arm_names, routes = _arms(cols)
            for arm in arm_names:
                tables.setdefault(arm, LogTable())
            for r, step in enumerate(steps):
                per_arm: dict[str, dict[str, float]] = {}
                for name, vals in cols.items():
                    cell = vals[r]
                    if cell is None:
                        continue
                    for arm, metric, i in routes[name]:
                        value = cell[i] if i < len(cell) else (cell[0] if len(cell) == 1 else None)
                        if value is not None:
                            per_arm.setdefault(arm, {})[metric.lower()] = value
                for arm, record in per_arm.items():
                    tables[arm].add_dict(step, record)
            used += len(block.rows) + 1
        skipped = sum(1 for l in lines if l.strip()) - used
        kind = "table"
        return tables, max(skipped, 0), False, kind
    bare = _bare_values(lines)
    if bare is None:
        return None
    steps, values, skipped = bare
    table = LogTable()
    for step, value in zip(steps, values):
        table.add(step, ["loss"], [value])
    return {"": table}, skipped, not any(len(l.split()) == 2 for l in lines if l.strip()), "values"


def parse_tables(src: SourceFile) -> ParsedLog:
    result = _read(src, head=False)
    if result is None:
        return ParsedLog(src.path, "table", "unknown", src.sha256, LogTable().columns())
    tables, skipped, from_index, kind = result
    tables = {arm: t for arm, t in tables.items() if len(t)}
    first_arm = next(iter(tables), "")
    first = tables.get(first_arm, LogTable())
    notes = []
    if kind == "values":
        notes.append("headerless numbers read as the loss" + (" (record index as step)" if from_index else ""))
    parsed = ParsedLog(src.path, "table", guess_framework(first.metric_names), src.sha256, first.columns(),
                       skipped, from_index, notes)
    if len(tables) > 1:
        parsed.arms = {arm: t.frame() for arm, t in tables.items()}
    return parsed


def sniff_tables(src: SourceFile) -> float:
    try:
        result = _read(src, head=True)
    except Exception:
        return 0.0
    if result is None:
        return 0.0
    tables, _, _, kind = result
    rows = max((len(t) for t in tables.values()), default=0)
    if not rows:
        return 0.0
    if kind == "table" and rows >= 3 and any(l.lstrip()[:1] in "|" + BOX_BAR_CHARS for l in src.head_lines()
                                             if l.strip()):
        return 0.35  # a markdown table beats the odd ``key=value`` in the prose around it
    return 0.25 if kind == "table" else 0.1


register(LogFormat("table", "tables people paste: markdown (vertical or steps as columns, 'a / b' arms), "
                   "aligned columns with a header, headerless step-value pairs, one value per line",
                   sniff_tables, parse_tables, top_score=0.35, appendable=False, priority=80))
