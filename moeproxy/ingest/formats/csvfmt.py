"""CSV/TSV exports: W&B panel/run-history CSVs, msprobe monitor per-rank CSVs, generic tables.

- W&B: a ``Step`` (or ``_step``) column; value columns may read ``<run> - <metric>`` with
  ``__MIN``/``__MAX`` envelope columns (dropped: they are W&B's own downsampling). Empty cells
  mean "not logged at this step" and are left out; ``nan``/``inf``/``null`` cells are values. A
  panel exported with several runs side by side holds one run per ``<run>`` (``ParsedLog.arms``).
- msprobe monitor: header ``vpp_stage,name,step[,micro_step],<ops...>``; each ``name``/op pair
  becomes a metric ``<name>/<op>``; the rank comes from the ``...-rank<R>-...`` directory.
- Generic: any table with a step-like column, or numeric columns only (row index = step); a table
  of numbers without a header row gets its columns named by place (``column_1``, ...). Comma, tab or
  semicolon separated. A logger that met a new key after writing its header (an evaluation return
  first logged mid-run) writes rows wider than the header: when most rows are, the columns past the
  header are named by place too.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter

import numpy as np

from moeproxy.errors import InputError
from moeproxy.vocabulary import COUNTER_KEYS, STEP_KEYS, UPDATE_COUNTER_KEYS
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.ingest.values import parse_number

STEP_COLUMNS = STEP_KEYS  # the vocabulary's one list (it knows training/global_step and train/step too)
# Gym / Stable-Baselines3's Monitor file (``monitor.csv``): a ``#{"t_start": ...}`` line, then one row
# per episode of its return, length and wall time
MONITOR_COLUMNS = {"r": "episode_return", "l": "episode_length", "t": "time"}
RANK_DIR = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def _step_column(columns: list[str], df=None) -> tuple[str | None, list[int | None] | None]:
    """The vocabulary's first step key among the columns, in any case (``Iteration``, ``Step``); with
    none, with the table, an epoch or episode counter (``COUNTER_KEYS``) that rises row after row.
    With the table: of several step columns, the first whose counter never goes back (LABELS.md: the
    step is the counter the run's progress is reported in; Stable-Baselines3's ``time/iterations``
    starts again at each ``learn()`` call while ``time/total_timesteps`` runs on); when every one
    goes back (a resumed run), an update counter (``UPDATE_COUNTER_KEYS``) that rises row after row,
    else the first. Returns the column and its steps (``_steps``; None without
    the table)."""
    lower = {}
    for c in columns:
        lower.setdefault(c.lower(), c)
    present = [lower[k.lower()] for k in STEP_COLUMNS if k.lower() in lower]
    if not present:
        counters = [lower[k] for k in COUNTER_KEYS if k in lower]
        if not counters or df is None:
            return None, None
        steps = _steps(df[counters[0]])
        rising = all(s is not None for s in steps) and all(b > a for a, b in zip(steps, steps[1:]))
        return (counters[0], steps) if rising else (None, None)
    if df is None:
        return present[0], None
    parsed = {}
    for column in present if len(present) > 1 else []:
        parsed[column] = _steps(df[column])
        counted = [s for s in parsed[column] if s is not None]
        # (one value on every row, ``time/iterations`` at 1 when each ``learn()`` call runs one
        # iteration, counts nothing: it never goes back, and never goes on either)
        if all(b >= a for a, b in zip(counted, counted[1:])) and (len(set(counted)) > 1 or len(counted) <= 1):
            return column, parsed[column]
    first = parsed.get(present[0]) or _steps(df[present[0]])
    counted = [s for s in first if s is not None]
    if any(b < a for a, b in zip(counted, counted[1:])):
        # the step key starts again: an update counter that never goes back is the run's progress
        for column in (lower[k] for k in UPDATE_COUNTER_KEYS if k in lower):
            steps = _steps(df[column])
            if all(s is not None for s in steps) and all(b > a for a, b in zip(steps, steps[1:])):
                return column, steps
    return present[0], first


def _without_comment_lines(text: str) -> str:
    """Leading ``#`` lines whose shape is not the header's (a Monitor's JSON line) are comments."""
    lines = text.split("\n", 8)
    cut = 0
    while cut < len(lines) - 1 and lines[cut].startswith("#") and lines[cut + 1].strip() \
            and lines[cut].count(",") != lines[cut + 1].count(","):
        cut += 1
    return text if cut == 0 else text.split("\n", cut)[cut]


def _dialect(src: SourceFile) -> str:
    """Tab, comma or (a European spreadsheet's) semicolon: the one the first line holds most of."""
    first = _without_comment_lines(src.head_text).split("\n", 1)[0]
    if first.count(";") > max(first.count(","), first.count("\t")):
        return ";"
    return "\t" if first.count("\t") > first.count(",") else ","


def _table_width(header: int, widths: list[int]) -> int:
    """The table's width: the header's, or the width most rows share where that is wider (a writer
    that added columns after its header line; the cells past the header are named by place). Rows
    run together (a lost newline) are wider too, but never most rows."""
    if not widths:
        return header
    common, n = Counter(widths).most_common(1)[0]
    return common if common > header and n >= 0.5 * len(widths) else header


def _headerless(first: list[str]) -> bool:
    """A first row of numbers only: a table written without its header (``np.savetxt``)."""
    return len(first) >= 2 and all(c.strip() and parse_number(c) is not None for c in first)


def _numeric(column) -> tuple[list[float], np.ndarray] | None:
    """(values, present) for a metric column; None when a non-empty cell is not a number.

    Empty cells are "not logged at this step" (present=False); nan/inf/null cells are values.
    """
    import pandas as pd

    present = column.str.strip().ne("").to_numpy(dtype=bool)
    numbers = pd.to_numeric(column, errors="coerce")
    out = numbers.tolist()
    for i in np.flatnonzero(present & numbers.isna().to_numpy()).tolist():  # 'nan', 'INF', 'null' or text
        parsed = parse_number(column.iat[i])
        if parsed is None:
            return None
        out[i] = parsed
    return out, present


def parse_csv(src: SourceFile) -> ParsedLog:
    import pandas as pd

    try:
        text = _without_comment_lines(src.read_text())
        # na_filter off: every cell stays its text, and the cells a short row lacks read "" (not logged)
        sep = _dialect(src)
        first = next(csv.reader([text.split("\n", 1)[0]], delimiter=sep), [])
        # no header: the columns are named by their place (``column_1``, ...), the row index is the step
        headerless = _headerless(first)
        named = dict(header=None, names=[f"column_{i + 1}" for i in range(len(first))]) if headerless else {}
        if not headerless:
            # rows wider than the header, most of them (the first and last 200 rows looked at)
            body = [l.replace("\r", "") for l in text[:65536].split("\n")[1:400] + text[-65536:].split("\n")[-200:]]
            try:
                width = _table_width(len(first), [len(r) for r in csv.reader([l for l in body if l.strip()], delimiter=sep)])
            except csv.Error:  # a quoted cell across lines: the header's width, pandas reads the rest
                width = len(first)
            if width > len(first):
                named = dict(header=None, skiprows=1, names=first + [f"column_{i + 1}" for i in range(len(first), width)])
        df = pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, na_filter=False,
                         on_bad_lines="skip", **named)
        # rows with more cells than the header (two records run together) were left out: counted, noted
        # (the newline count first, in C; the exact count of non-blank lines only when it says rows are missing)
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        above = 0 if headerless else 1  # the header line
        bad = 0 if lines - above <= len(df) else max(0, sum(1 for line in text.splitlines() if line.strip()) - above - len(df))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, csv.Error) as exc:
        raise InputError(f"{src.path}: malformed CSV ({str(exc).splitlines()[0]})") from None
    table = LogTable()
    stripped = [str(c).strip() for c in df.columns]
    if len(set(stripped)) == len(stripped):  # YOLOv5/v8's results.csv pads its names to a width
        df.columns = stripped
    columns = list(df.columns)
    rank = -1
    m = RANK_DIR.search(src.path.parent.name)
    if m:
        rank = int(m.group(1))
    fmt, framework, from_index, skipped = "csv", "unknown", False, 0
    if {"name", "step"} <= set(columns) and "vpp_stage" in columns:
        fmt, framework = "msprobe-csv", "msprobe"
        ops = [c for c in columns if c not in ("vpp_stage", "name", "step", "micro_step")]
        steps = _steps(df["step"])
        numeric = {op: col for op in ops if (col := _numeric(df[op])) is not None}
        names = df["name"].tolist()
        for i, step in enumerate(steps):
            if step is None:
                skipped += 1
                continue
            record = {f"{names[i]}/{op}": vals[i] for op, (vals, present) in numeric.items() if present[i]}
            table.add_dict(step, record, rank=rank)
    else:
        step_col, steps = _step_column(columns, df)
        values = [c for c in columns if c != step_col and not c.endswith(("__MIN", "__MAX"))]
        prefixes = {c.split(" - ", 1)[0] for c in values if " - " in c}
        names = {c: (c.split(" - ", 1)[1] if len(prefixes) == 1 and " - " in c else c) for c in values}
        if set(MONITOR_COLUMNS) <= set(columns):
            names.update(MONITOR_COLUMNS)
            framework = "gym-monitor"
        if prefixes:
            fmt, framework = "wandb-csv", "wandb"
        numeric = {c: col for c in values if (col := _numeric(df[c])) is not None}
        if len(prefixes) > 1 and all(" - " in c for c in numeric):
            # a W&B panel of several runs: each run its own series (the same metric of eight runs is
            # eight runs' metric, not eight metrics of one)
            arms = {}
            for prefix in dict.fromkeys(c.split(" - ", 1)[0] for c in numeric):  # in column order
                mine = {c: col for c, col in numeric.items() if c.split(" - ", 1)[0] == prefix}
                arm = _long_rows(steps, mine, {c: c.split(" - ", 1)[1] for c in mine}, rank, len(df))
                if len(arm.step):
                    arms[prefix] = arm.to_frame()
            if len(arms) > 1:
                first = next(iter(arms.values()))
                parsed = ParsedLog(src.path, fmt, framework, src.sha256, first, skipped_steps(steps) + bad,
                                   steps is None, notes=_bad_rows_note(bad, len(columns))
                                   + [f"a W&B panel of {len(arms)} runs: one run each"])
                parsed.arms = arms
                return parsed
        rows = _long_rows(steps, numeric, names, rank, len(df))
        skipped = skipped_steps(steps)
        from_index = steps is None
        if framework == "unknown":
            framework = guess_framework(rows.names)
        return ParsedLog(src.path, fmt, framework, src.sha256, rows, skipped + bad, from_index,
                         notes=_bad_rows_note(bad, len(columns)))
    return ParsedLog(src.path, fmt, framework, src.sha256, table.columns(), skipped + bad, from_index,
                     notes=_bad_rows_note(bad, len(columns)))


def _long_rows(steps: list | None, numeric: dict, names: dict, rank: int, n: int):
    """The long table of a wide table's numeric columns: ``_wide_rows``, or the careful way where it
    cannot (a record per row, through a ``LogTable``)."""
    rows = _wide_rows(steps, numeric, names, rank, n)
    if rows is not None:
        return rows
    table = LogTable()
    for i in range(n):
        if steps is not None and steps[i] is None:
            continue
        record = {names[c]: vals[i] for c, (vals, present) in numeric.items() if present[i]}
        table.add_dict(steps[i] if steps is not None else i, record, rank=rank)
    return table.columns()


def skipped_steps(steps: list | None) -> int:
    """Rows whose step cell could not be read (none when the row index is the step)."""
    return 0 if steps is None else sum(step is None for step in steps)


def _bad_rows_note(bad: int, width: int) -> list[str]:
    return [f"{bad} row(s) with more cells than the header's {width} left out"] if bad > 0 else []


def _wide_rows(steps: list | None, numeric: dict, names: dict, rank: int, n: int):
    """The long table of a wide table's numeric columns, in numpy: what adding each row's record
    (its present cells, in column order) to a ``LogTable`` gives. None when the row loop must do
    it: no column, two columns under one name (the record keeps the last), a step beyond 64 bits,
    a value beyond the float range, a rank out of range (named by the ``LogTable``)."""
    from moeproxy.ingest.table import RANK_MAX, build_columns

    labels = [names[c] for c in numeric]
    if not labels or not n or len(set(labels)) != len(labels) or not -1 <= rank <= RANK_MAX:
        return None
    if steps is None:
        step, stepped = np.arange(n, dtype=np.int64), np.ones(n, dtype=bool)
    elif all(step is None or -2**63 <= step < 2**63 for step in steps):
        stepped = np.fromiter((step is not None for step in steps), dtype=bool, count=n)
        step = np.fromiter((0 if s is None else s for s in steps), dtype=np.int64, count=n)
    else:
        return None
    try:
        values = np.column_stack([np.asarray(vals, dtype=np.float64) for vals, _ in numeric.values()])
    except (OverflowError, TypeError, ValueError):
        return None
    present = np.column_stack([here for _, here in numeric.values()]) & stepped[:, None]
    used = present.any(axis=0)  # a column without a cell names no metric
    if not used.all():
        labels, values, present = [l for l, u in zip(labels, used) if u], values[:, used], present[:, used]
    counts = present.sum(axis=1)
    kept = counts > 0  # a row with no cell is no record
    codes = np.broadcast_to(np.arange(len(labels), dtype=np.int32), present.shape)[present]
    k = int(kept.sum())
    return build_columns(step[kept], np.full(k, rank, dtype=np.int64), np.full(k, np.nan), counts[kept], codes,
                         labels, values[present])


_INTEGER = re.compile(r"\s*[-+]?\d{1,30}\s*")


def _steps(column) -> list[int | None]:
    """Each step cell as an int, read exactly (an integer cell is never taken through a float); None
    for a row to skip: empty, text, nan/inf, a fraction (1.5 is not rounded) or beyond 2^53 as a float."""
    out: list[int | None] = []
    for cell in column.tolist():
        if _INTEGER.fullmatch(cell):
            out.append(int(cell))
            continue
        value = parse_number(cell)
        ok = value is not None and math.isfinite(value) and value.is_integer() and abs(value) < 2**53
        out.append(int(value) if ok else None)
    return out


def sniff_csv(src: SourceFile) -> float:
    lines = [l for l in _without_comment_lines("\n".join(src.head_lines(50))).split("\n") if l.strip()]
    if len(lines) < 2:
        return 0.0
    sep = _dialect(src)
    header = next(csv.reader([lines[0]], delimiter=sep))
    if len(header) < 2:
        return 0.0
    rows = list(csv.reader(lines[1:], delimiter=sep))
    width = _table_width(len(header), [len(row) for row in rows])
    whole = [row for row in rows if len(header) <= len(row) <= width]
    # rows of the table's width (``_table_width``), most of them: rows run together (a lost newline)
    # are wider and left out; a narrower row is allowed only last (a file cut mid-row)
    if len(whole) < max(2, 0.5 * len(rows)) or any(len(row) < len(header) - 1 for row in rows[:-1]):
        return 0.0
    rows = whole
    cells = [c for row in rows for c in row]
    numeric = sum(1 for c in cells if not c.strip() or parse_number(c) is not None)
    if _headerless(header) and numeric == len(cells):
        # numbers only, from the first row on: a table without its header; below the table reader's
        # headerless ``step value`` / ``epoch step value`` pairs (d3rlpy), which know a step column
        return 0.05
    if numeric < 0.5 * len(cells) or any(parse_number(h) is not None for h in header):
        return 0.0  # a header of names over mostly numeric cells, or it is not a table
    if ("vpp_stage" in header and "name" in header) or set(MONITOR_COLUMNS) <= set(header):
        return 0.9
    if _step_column(header)[0] is not None:
        return 0.85
    return 0.4


register(LogFormat("csv", "CSV/TSV tables: W&B exports, msprobe monitor CSVs, generic step tables",
                   sniff_csv, parse_csv, top_score=0.9, header_lines=1, priority=60))
