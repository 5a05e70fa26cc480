"""A JSON document of metric columns: one object whose lists hold a metric per position, as training
scripts dump their history (Keras' ``history.history``, ``{"history": {"steps": [...],
"train_losses": [...], "val_losses": [...]}}``).

- The columns are the numeric lists (numbers, ``NaN``/``Infinity``, ``null`` for "not logged") of at
  least 3 entries in the object, or in the object nested in it (up to 3 levels) that holds the most
  numbers; lists of lists and text are not metrics. A single number beside them is a summary, not a
  record, and is left out.
- Lists of one length form one table: its step column is a list named for a step (the vocabulary's
  step keys, or their plural: ``steps``, ``iterations``, ``epochs``) or, for a second table,
  a name holding one with a prefix (``val_steps``), else an epoch or episode counter (``episodes``);
  else the position is the step. A column with a counter of its own beside it (sacred / PyMARL's
  ``return_mean`` and ``return_mean_T``) is read at those steps.
- A list of records under a key (``"iql_history": [{"epoch": 1, "q_loss": 7.9}, ...]``) is a table too:
  its fields are its columns.
- An object of metrics each given as a list of ``{"step": .., "value": ..}`` records (an exported
  run) holds one series per metric, at its own steps.
- NumPy scalars as jsonpickle wrote them (``{"py/object": "numpy.float64", "value": 1.41}``) are
  their values.
- A list named in the plural holds one metric: ``train_losses`` is stored as ``train_loss``,
  ``learning_rates`` as ``learning_rate`` (the last word made singular), as a log names them.
"""

from __future__ import annotations

import json
import math
import re


from moeproxy.errors import InputError
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import LogTable
from moeproxy.vocabulary import COUNTER_KEYS, STEP_KEYS

MIN_LENGTH = 3
# a line that opens a JSON object on its own (``{`` then a key on the same line or the next)
LINE_OPENS_OBJECT = re.compile(r'\n\{\s*(?:"|\n|$)')
LINE_OPENS_OBJECT_BYTES = re.compile(LINE_OPENS_OBJECT.pattern.encode())
MAX_DEPTH = 3
RECORDS_START = re.compile(rb'"[^"\n]{1,200}"\s*:\s*\[\s*\{\s*"[^"\n]{1,100}"\s*:\s*-?\d')
# a list of numbers, or of jsonpickle's NumPy scalars (sacred's pretty-printed info.json)
COLUMN_START = re.compile(rb'"[^"\n]{1,200}"\s*:\s*\[\s*(?:-?\d|NaN|-?Infinity|null|\{\s*"(?:dtype|py/object)")')


def _is_number(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _plain(x):
    """A number as it is, or as jsonpickle wrote a NumPy scalar (``{"py/object": "numpy.float64",
    "value": 1.41}``: sacred's info.json); anything else unchanged (then not a number)."""
    if isinstance(x, dict) and "value" in x and ("py/object" in x or "dtype" in x):
        return x["value"]
    return x


def _columns(obj: dict) -> dict[str, list]:
    out = {}
    for k, v in obj.items():
        if isinstance(v, list) and len(v) >= MIN_LENGTH:
            v = [_plain(x) for x in v]
            if all(_is_number(x) for x in v) and any(x is not None for x in v):
                out[k] = v
    return out


def _record_columns(records: list) -> dict[str, list]:
    """A list of records (objects of numbers: ``[{"epoch": 1, "q_loss": 7.9}, ...]``) as columns, a
    field missing from a record read as not logged there; {} when it is no such list."""
    if len(records) < MIN_LENGTH or not all(isinstance(r, dict) for r in records):
        return {}
    fields = list(dict.fromkeys(k for r in records for k, x in r.items() if _is_number(_plain(x))))
    columns = {f: [_plain(r.get(f)) for r in records] for f in fields}
    return {f: v for f, v in columns.items() if all(_is_number(x) for x in v) and any(x is not None for x in v)}


OWN_COUNTER = "_T"  # sacred / PyMARL: ``return_mean`` holds the values, ``return_mean_T`` the t_env of each


def _series_records(obj: dict) -> dict[str, list]:
    """An object of metrics, each a list of ``{"step": .., "value": ..}`` records (an exported run:
    ``{"metrics": {"value_loss": [{"step": 0, "value": 0.13}, ...], ...}}``), as columns with
    counters of their own (``value_loss`` and ``value_loss_T``); {} when it is no such object."""
    out: dict[str, list] = {}
    for name, records in obj.items():
        if not (isinstance(records, list) and len(records) >= MIN_LENGTH
                and all(isinstance(r, dict) and "value" in r for r in records)):
            continue
        key = next((k for k in records[0] if _step_name(k)), None)
        if key is None:
            continue
        steps = [r.get(key) for r in records]
        values = [_plain(r.get("value")) for r in records]
        if _is_counter(steps) and all(_is_number(x) for x in values):
            out[name], out[name + OWN_COUNTER] = values, steps
    return out


def _best_object(doc, depth: int = 0) -> dict[str, list]:
    """The columns of the object (``doc`` or one nested in it) holding the most numbers."""
    if not isinstance(doc, dict) or depth > MAX_DEPTH:
        return {}
    best = _series_records(doc) or _columns(doc)
    for value in doc.values():
        inner = _record_columns(value) if isinstance(value, list) else _best_object(value, depth + 1)
        if sum(map(len, inner.values())) > sum(map(len, best.values())):
            best = inner
    return best


def _all_keys(doc, depth: int = 0) -> set[str]:
    """Every key of the document's objects (up to ``MAX_DEPTH`` levels)."""
    if not isinstance(doc, dict) or depth > MAX_DEPTH:
        return set()
    return set(doc).union(*(_all_keys(v, depth + 1) for v in doc.values()))


def _step_name(name: str, keys=STEP_KEYS) -> bool:
    low = name.lower()
    return low in keys or (low.endswith("s") and low[:-1] in keys)


def _is_counter(values: list) -> bool:
    return all(isinstance(x, int) or (isinstance(x, float) and x.is_integer()) for x in values) and \
        all(b > a for a, b in zip(values, values[1:]))


def _metric_name(name: str) -> str:
    """A column of values named in the plural is one metric: ``train_losses`` -> ``train_loss``,
    ``val_accuracies`` -> ``val_accuracy`` (the name's last word made singular)."""
    head, last = re.match(r"(.*?)([A-Za-z]+)$", name).groups() if re.search(r"[A-Za-z]$", name) else (name, "")
    low = last.lower()
    if low.endswith("ies") and len(low) > 4:
        last = last[:-3] + "y"
    elif low.endswith(("sses", "shes", "ches", "xes")):
        last = last[:-2]
    elif low.endswith("s") and not low.endswith(("ss", "us", "is", "as")) and len(low) > 3:
        last = last[:-1]
    return head + last


def _document_start(text: str) -> int:
    """Where the JSON document starts: at the text's start, or, after lines a script printed before
    dumping it (progress, debug lines), at the first line that opens an object."""
    if text.lstrip().startswith("{"):
        return 0
    m = LINE_OPENS_OBJECT.search(text)
    return m.start() + 1 if m else 0


def parse_json_columns(src: SourceFile) -> ParsedLog:
    text = src.read_text()
    start = _document_start(text)
    notes = []
    try:
        if start:  # a document after printed lines, perhaps with printed lines after it too
            doc, end = json.JSONDecoder().raw_decode(text, start)
            first, last = text.count("\n", 0, start) + 1, text.count("\n", 0, end) + 1
            notes.append(f"read the JSON document on lines {first}-{last}; "
                         f"the {first - 1} printed line(s) before it are not records")
        else:
            doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{src.path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    columns = _best_object(doc)
    if not columns:
        raise InputError(f"{src.path}: no list of numbers to read as a metric")
    table = LogTable()
    # a column with a counter of its own beside it (``loss`` and ``loss_T``): its records at those
    # steps; metrics logged at different intervals on one counter (PyMARL's training stats every
    # 10k steps, its test stats every 2k) each keep their own
    own: dict[int, dict[str, float]] = {}
    for name in [c for c in columns if c + OWN_COUNTER in columns]:
        values, steps = columns[name], columns[name + OWN_COUNTER]
        if len(values) == len(steps) and _is_counter(steps):
            for step, x in zip(steps, values):
                if x is not None:
                    own.setdefault(int(step), {})[name] = float(x)
            del columns[name], columns[name + OWN_COUNTER]
    for step in sorted(own):  # in step order: a step going back would read as a restart
        table.add_dict(step, own[step])
    keys = _all_keys(doc)
    for name in [c for c in columns if c.endswith(OWN_COUNTER) and c[:-len(OWN_COUNTER)] in keys]:
        del columns[name]  # the counter of a column whose values are no numbers (a pickled tensor): no metric
    by_length: dict[int, list[str]] = {}
    for name, values in columns.items():
        by_length.setdefault(len(values), []).append(name)
    from_index = False
    for n, names in sorted(by_length.items(), key=lambda item: -len(item[1])):
        counters = [c for c in names if _is_counter(columns[c])]
        step_col = next((c for c in counters if _step_name(c)), None) or next(
            (c for c in counters if any(_step_name(part) for part in re.split(r"[_/.\s-]+", c))), None) or next(
            (c for c in counters if _step_name(c, COUNTER_KEYS)), None)  # an epoch or episode count
        if step_col is None:
            from_index = True
        steps = [int(x) for x in columns[step_col]] if step_col else list(range(n))
        metrics = [c for c in names if c != step_col]
        for i, step in enumerate(steps):
            record = {}
            for c in metrics:
                x = columns[c][i]
                if x is not None:
                    record[_metric_name(c)] = float(x) if not (isinstance(x, float) and math.isnan(x)) else math.nan
            if record:
                table.add_dict(step, record)
    rows = table.columns()
    return ParsedLog(src.path, "json-columns", guess_framework(rows.names), src.sha256, rows, 0, from_index,
                     notes=notes)


def sniff_json_columns(src: SourceFile) -> float:
    head = src.head.lstrip()
    after_print = not head.startswith(b"{")
    if after_print:  # a document dumped after printed lines: its columns are in the head too
        m = LINE_OPENS_OBJECT_BYTES.search(src.head)
        if m is None:
            return 0.0
        head = src.head[m.start() + 1:]
    window = head[:65536]
    # a list of records whose first field is a number is a whole table: it counts as two columns
    starts = len(COLUMN_START.findall(window)) + 2 * len(RECORDS_START.findall(window))
    # two columns begin in the window; or one whose numbers fill it, on one line (a keras-rl log's
    # first column of 3,598 values is longer than the window; JSONL records are short lines)
    if after_print:  # (a guess: below every reader of the printed lines' own records)
        return 0.25 if starts >= 2 else 0.0
    return 0.5 if starts >= 2 or (starts == 1 and len(window) == 65536 and b"\n" not in window) else 0.0


register(LogFormat("json-columns", "a JSON document of metric columns (a script's saved history, Keras' history)",
                   sniff_json_columns, parse_json_columns, top_score=0.5, appendable=False, priority=14))

