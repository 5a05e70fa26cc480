"""JSON-based logs: verl's file-logger JSONL, generic JSON lines, HF ``trainer_state.json``,
and JSON arrays of records.

verl writes ``{"step": N, "data": {...}}`` per line with orjson (NaN -> null). Python's json
writes bare ``NaN``/``Infinity`` (HF Trainer); those lines fall back to the lenient stdlib
parser. Nested dicts are flattened with ``/``. A line that starts like JSON but does not parse
is an error naming the line (a truncated last line is called that); other lines are prose,
skipped and counted.
"""

from __future__ import annotations

import re

import itertools
import json

import numpy as np
import orjson

from moeproxy.errors import InputError
from moeproxy.ingest.names import guess_framework
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile
from moeproxy.ingest.table import EpochSteps, LogTable, counts_within_epochs

from moeproxy.vocabulary import EVAL_KINDS, FRACTION_STEP_KEYS, STEP_KEYS, TRAIN_KINDS, split_prefix  # the one list: csv and printed dicts read it too

FRACTION = re.compile(r"^\s*(\d+)\s*/\s*\d+\s*$")

# A string field that says which kind of record a line is (rollout / train / eval lines in one
# file, each with its own fields). Records of the training kind keep their names; the others'
# metrics are named "<kind>/<name>" so that an eval record's reward is not read as the training
# reward; configuration and summary records carry no series and are skipped.
KIND_KEYS = ("type", "split", "kind", "phase", "mode", "record_type", "event")
SKIP_KINDS = frozenset({"config", "args", "arguments", "hparams", "hyperparameters", "meta", "metadata",
                        "summary", "final", "header", "setup", "init"})


def _loads(text: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            return json.loads(text)  # accepts NaN / Infinity; raises ValueError otherwise
        except RecursionError:  # orjson stops at 1,024 levels, the stdlib at the interpreter's stack
            raise ValueError("nested too deeply") from None


def flatten(obj: dict, prefix: str = "", out: dict | None = None) -> dict:
    """Nested dicts as one flat dict, keys joined with ``/``, depth first in file order (with a
    stack, not recursion: a hostile file may nest as deep as the JSON parser allows)."""
    if out is None and not prefix:
        kinds = set(map(type, obj.values()))  # in C: most records are flat already
        if dict not in kinds and list not in kinds:
            return dict(obj)
    out = {} if out is None else out
    stack = [(prefix, iter(obj.items()))]
    while stack:
        base, items = stack[-1]
        for key, value in items:
            name = f"{base}{key}"
            if isinstance(value, dict):
                stack.append((f"{name}/", iter(value.items())))
                break
            if not isinstance(value, list):  # lists: histograms, samples; not scalars
                out[name] = value
        else:
            stack.pop()
    return out


def split_step(record: dict) -> tuple[int | float | None, dict]:
    """(step, metrics) of one flat record; step is None when the record has no step key."""
    for key in STEP_KEYS:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            metrics = dict(record)  # copied and the step keys popped: in C, where a comprehension is not
            for step_key in STEP_KEYS:
                metrics.pop(step_key, None)
            return value, metrics
    for key in FRACTION_STEP_KEYS:
        value = record.get(key)
        m = FRACTION.match(value) if isinstance(value, str) else None
        if m:
            return int(m.group(1)), {k: v for k, v in record.items() if k != key}
    return None, record


def _split_records(text: str) -> list | None:
    """The objects of a line that holds several JSON records with no line break between them (two
    writers sharing a file, a flush that lost its newline: ``{...}{...}``), or None when it is not
    that (a malformed record)."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text):
        try:
            obj, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            return None
        out.append(obj)
        at = end
        while at < len(text) and text[at] in " \t,;":
            at += 1
    return out if len(out) > 1 else None


def _named_json(path) -> bool:
    """A file its writer named a JSON-lines file: every line of it is a record."""
    return str(path).lower().endswith((".jsonl", ".ndjson", ".json"))


def _json_lines(src: SourceFile):
    """Yield (lineno, object) for JSON lines; count other lines; name bad or truncated ones.

    A malformed record refuses a file of JSON records (which line, and why). In console output
    that prints JSON records among its other lines (a launcher's banners, a progress bar; a file not
    named ``.jsonl``), a line that starts like a record but is not a whole one was cut or wrapped by
    the console: it is skipped and named, as long as the whole records outnumber such lines."""
    bad: list[tuple[int, str]] = []
    state = {"skipped": 0, "cut": 0, "records": 0, "last": 0}

    def gen():
        for lineno, line in src.lines():
            text = line.strip()
            if not text:
                continue
            state["last"] = lineno
            if not text.startswith("{"):
                state["skipped"] += 1
                continue
            try:
                objs = [_loads(text)]
            except ValueError as exc:
                if state["cut"] < len(src.nul_runs):
                    # a record cut by crash padding (each run of NULs cuts at most the one record being
                    # written when the crash hit): skipped and named
                    state["cut"] += 1
                    src.warnings.append(f"line {lineno}: a JSON record cut by NUL padding: skipped")
                    state["skipped"] += 1
                    continue
                objs = _split_records(text)
                if objs is None:
                    bad.append((lineno, getattr(exc, "msg", str(exc))))
                    continue
                src.warnings.append(f"line {lineno}: {len(objs)} JSON records with no line break between them: "
                                    f"read as {len(objs)} records")
            for obj in objs:
                if isinstance(obj, dict):
                    state["records"] += 1
                    yield lineno, obj
                else:
                    state["skipped"] += 1
        if not bad:
            return
        if len(bad) == 1 and not src.ends_with_newline and bad[0][0] == state["last"]:
            # the last line, still being written or cut: dropped and named
            src.reject_tail(bad[0][0], "an incomplete JSON record")
            return
        if state["skipped"] and len(bad) < state["records"] and not _named_json(src.path):
            shown = ", ".join(str(n) for n, _ in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            src.warnings.append(f"line{'s' if len(bad) > 1 else ''} {shown}: not a whole JSON record "
                                f"({bad[0][1]}) in console output: skipped")
            state["skipped"] += len(bad)
            return
        raise InputError(f"{src.path}: line {bad[0][0]}: malformed JSON ({bad[0][1]})")

    return gen(), state


def parse_verl_jsonl(src: SourceFile) -> ParsedLog:
    from moeproxy.ingest.formats.jsonl_duckdb import read_verl_jsonl

    columns = read_verl_jsonl(src)  # DuckDB's reader; None: a file only the careful path below reads exactly
    if columns is not None:
        from moeproxy.ingest.table import build_columns

        steps, counts, codes, names, values = columns
        n = len(steps)
        rows = build_columns(steps, np.full(n, -1, np.int64), np.full(n, np.nan), counts, codes, names, values)
        return ParsedLog(src.path, "verl-jsonl", "verl", src.sha256, rows, 0)
    return parse_verl_jsonl_line_by_line(src)


def parse_verl_jsonl_line_by_line(src: SourceFile) -> ParsedLog:
    """The careful path: each line with orjson (the stdlib parser for NaN/Infinity), each problem
    named with its line."""
    table = LogTable()
    records, state = _json_lines(src)
    for lineno, obj in records:
        data = obj.get("data")
        step = obj.get("step")
        if not isinstance(data, dict) or not isinstance(step, (int, float)):
            state["skipped"] += 1
            continue
        table.add_dict(step, data)  # verl's data is flat; non-numeric entries are dropped later
    return ParsedLog(src.path, "verl-jsonl", "verl", src.sha256, table.columns(), state["skipped"])


def record_kind(record: dict) -> tuple[str | None, str | None]:
    """(key, kind) of a record's kind field (``{"type": "rollout", ...}``), or (None, None)."""
    for key in KIND_KEYS:
        value = record.get(key)
        if isinstance(value, str) and 0 < len(value) <= 40:
            return key, value.strip().lower()
    return None, None


LOOKAHEAD = 5000  # records read ahead to learn which kinds a file holds and whether it counts steps


def _kind_prefix(kind: str, kinds: set[str]) -> str | None:
    """The name prefix of a record kind: "" for the training records, None to skip the record."""
    if kind in SKIP_KINDS:
        return None
    known = split_prefix(kind)
    if known is not None:
        return known
    # the one kind that is not eval or config, when no training kind is named (a rollout-only log)
    return "" if not (kinds & TRAIN_KINDS) and len(kinds - SKIP_KINDS - EVAL_KINDS) == 1 else f"{kind}/"


def _counts_epochs(records: list[dict]) -> bool:
    """Records with no step key whose whole-number ``epoch`` rises strictly from one record that has
    it to the next (at least three such records; a header line without it is fine): a per-epoch
    log, dated by its epochs."""
    epochs = [r["epoch"] for r in records if "epoch" in r]
    if len(epochs) < 3 or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
        return False
    return all(b > a for a, b in zip(epochs, epochs[1:]))


def _counts_within_epochs(records: list[dict]) -> bool:
    """The step key counts iterations within an epoch (``table.counts_within_epochs``)."""
    return counts_within_epochs((split_step(r)[0], r.get("epoch")) for r in records)


def _records_to_table(records, table: LogTable) -> bool:
    """Add flat records; returns True when the record index had to stand in for the step.

    Records of several kinds (a ``type``/``split`` field: rollout, train, eval lines) are separate
    series on the shared step counter (see ``record_kind``); a record without a step counter takes
    the step of the record before it when the others have one (a config line first). The first
    ``LOOKAHEAD`` records decide both (a validation or evaluation record is one wherever it is);
    the rest stream through."""
    flat_records = map(flatten, records)
    ahead = list(itertools.islice(flat_records, LOOKAHEAD))
    kinds = {k for r in ahead if (k := record_kind(r)[1]) is not None}
    from_index = not any(split_step(r)[0] is not None for r in ahead)
    by_epoch = from_index and _counts_epochs(ahead)
    if by_epoch:  # one record per epoch (``{"train_loss": ..., "epoch": 251}``): the epoch is the step
        from_index = False
    # iterations counted within each epoch: the step runs on across epochs (each epoch's count
    # starts after the last training iteration of the one before), so that epoch 1 keeps its own
    within = not from_index and _counts_within_epochs(ahead)
    epoch_steps = EpochSteps()
    prefixes: dict[str, str | None] = {}
    last = None
    for index, flat in enumerate(itertools.chain(ahead, flat_records)):
        key, kind = record_kind(flat)
        if not kinds and kind not in EVAL_KINDS:
            # the first records named no kind: a kind field later is a value, except a held-out
            # split (``"split": "val"``), whose metrics are never the training ones
            key, kind = None, None
        if kind is None:
            prefix = ""
        else:
            if kind not in prefixes:
                prefixes[kind] = _kind_prefix(kind, kinds)
            prefix = prefixes[kind]
            if prefix is None:
                continue
        step, metrics = split_step(flat)
        if by_epoch and isinstance(flat.get("epoch"), int):
            step, metrics = flat["epoch"], {k: v for k, v in metrics.items() if k != "epoch"}
        if key is not None:
            metrics.pop(key, None)
        if within and step is not None and isinstance(epoch := flat.get("epoch"), int):
            step = epoch_steps(step, epoch, counts_top=not prefix)
        if step is None:
            if from_index:
                step = index
            elif last is None:
                continue  # a record before the first counted one (a config or a banner)
            else:
                step = last
        last = step
        if prefix:
            metrics = {f"{prefix}{k}": v for k, v in metrics.items()}
        table.add_dict(step, metrics)
    return from_index


def parse_jsonl(src: SourceFile) -> ParsedLog:
    table = LogTable()
    records, state = _json_lines(src)
    from_index = _records_to_table((obj for _, obj in records), table)
    return ParsedLog(
        src.path, "jsonl", guess_framework(table.metric_names), src.sha256, table.columns(),
        state["skipped"], from_index,
    )


def _load_whole(src: SourceFile) -> tuple[object, list[str]]:
    """(document, warnings). A document cut mid-write or mid-copy (a job killed while writing its
    ``trainer_state.json``, a log pasted in part) is read up to its last complete record, with a
    warning naming where it was cut; one malformed elsewhere is refused."""
    text = src.read_text()
    try:
        return _loads(text), []
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        where = f"line {line}: " if line else ""
        if not text.rstrip().endswith(("}", "]")):
            doc, kept = _complete_prefix(text)
            if doc is None:
                raise InputError(f"{src.path}: {where}truncated JSON document (no complete record before the "
                                 f"cut)") from None
            cut = text.count("\n", 0, kept) + 1
            return doc, [f"line {cut}: the JSON document is cut off after it (truncated): read up to its last "
                         f"complete record; its last {len(text) - kept} characters left out"]
        raise InputError(f"{src.path}: {where}malformed JSON ({getattr(exc, 'msg', exc)})") from None


_BRACKET_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


def _complete_prefix(text: str, tries: int = 64):
    """(document, characters kept) of the longest prefix of ``text`` that ends a record (a ``}``)
    and parses once the brackets still open there are closed; (None, 0) when none of the last
    ``tries`` such prefixes does."""
    stack, ends = [], []
    for m in _BRACKET_OR_STRING.finditer(text):  # strings are skipped whole: brackets in them do not count
        ch = m.group()
        if ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}" and stack:
            stack.pop()
            if ch == "}" and stack and stack[-1] == "]":  # a record of a list just closed
                ends.append((m.end(), "".join(reversed(stack))))
    for end, closers in reversed(ends[-tries:]):
        try:
            return _loads(text[:end] + closers), end
        except ValueError:
            continue
    return None, 0


_HISTORY_KEY = re.compile(r'"log_history"\s*:\s*\[')
_STRING_OR_PY_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\b(None|True|False)\b')
_JSON_OF = {"None": "null", "True": "true", "False": "false"}


def _embedded_history(src: SourceFile) -> tuple[list, list[str]]:
    """A trainer state pasted inside other text (an issue's words around it, a Python script that
    holds it as a dict literal): the list after ``"log_history":``, to its closing bracket, with
    Python's None / True / False read as JSON's null / true / false."""
    text = src.read_text()
    m = _HISTORY_KEY.search(text)
    if m is None:
        raise InputError(f"{src.path}: no log_history list in this trainer_state.json")
    start, depth, end = m.end() - 1, 0, None
    for t in _BRACKET_OR_STRING.finditer(text, start):
        ch = t.group()
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                end = t.end()
                break
    line = text.count("\n", 0, start) + 1
    body = _STRING_OR_PY_LITERAL.sub(lambda x: _JSON_OF[x.group(1)] if x.group(1) else x.group(0),
                                     text[start:end])
    warnings = [f"line {line}: a trainer state's log_history inside other text: read that list alone"]
    if end is None:  # cut off (a paste of part of it): up to its last complete record, as a whole file
        history, kept = _complete_prefix(body)
        if history is None:
            raise InputError(f"{src.path}: the log_history list from line {line} is cut off before its "
                             f"first complete record")
        return history, warnings + [f"the log_history list is cut off: read up to its last complete record, "
                                    f"its last {len(body) - kept} characters left out"]
    try:
        return _loads(body), warnings
    except ValueError as exc:
        raise InputError(f"{src.path}: the log_history list from line {line} is malformed ({exc})") from None


def parse_trainer_state(src: SourceFile) -> ParsedLog:
    if src.head.lstrip().startswith(b"{"):
        doc, warnings = _load_whole(src)
        history = doc.get("log_history") if isinstance(doc, dict) else None
    else:
        history, warnings = _embedded_history(src)
    if not isinstance(history, list):
        raise InputError(f"{src.path}: no log_history list in this trainer_state.json")
    table = LogTable()
    records = [r for r in history if isinstance(r, dict)]
    from_index = _records_to_table(records, table)
    framework = guess_framework(table.metric_names)
    return ParsedLog(
        src.path, "hf-trainer-state", "trl" if framework == "trl" else "hf-trainer", src.sha256,
        table.columns(), len(history) - len(records), from_index, warnings=warnings,
    )


def parse_json_records(src: SourceFile) -> ParsedLog:
    doc, warnings = _load_whole(src)
    if not isinstance(doc, list):
        raise InputError(f"{src.path}: expected a JSON array of records")
    records = [r for r in doc if isinstance(r, dict)]
    table = LogTable()
    from_index = _records_to_table(records, table)
    return ParsedLog(
        src.path, "json-records", guess_framework(table.metric_names), src.sha256, table.columns(),
        len(doc) - len(records), from_index, warnings=warnings,
    )


def _first_objects(src: SourceFile, limit: int = 20) -> tuple[list, int]:
    objs, lines = [], 0
    for line in src.head_lines(200):
        text = line.strip()
        if not text:
            continue
        lines += 1
        if text.startswith("{"):
            try:
                obj = _loads(text)
            except ValueError:
                continue
            if isinstance(obj, dict):
                objs.append(obj)
                if len(objs) >= limit:
                    break
    return objs, lines


def sniff_verl_jsonl(src: SourceFile) -> float:
    objs, _ = _first_objects(src)
    if objs and all(set(o) >= {"step", "data"} and isinstance(o["data"], dict) for o in objs):
        return 0.95
    return 0.0


def sniff_jsonl(src: SourceFile) -> float:
    objs, lines = _first_objects(src)
    if not objs:
        return 0.0
    if len(objs) == 1 and lines == 1 and src.size > len(src.sniff_head()):
        return 0.0  # one object, then more than detection reads: a single huge JSON document, not JSON lines
    share = len(objs) / max(lines, 1)
    return 0.8 if share >= 0.5 else 0.4


def sniff_trainer_state(src: SourceFile) -> float:
    head = src.head.lstrip()
    if b'"log_history"' not in src.head:
        return 0.0
    if not head.startswith(b"{"):
        # pasted inside other text: the list itself must follow the key
        return 0.9 if _HISTORY_KEY.search(src.head.decode("utf-8", "replace")) else 0.0
    objs, lines = _first_objects(src, limit=2)
    if len(objs) >= 2:
        # JSON lines whose summary record carries a log_history (ms-swift's logging.jsonl): the
        # records are the lines, not one document
        return 0.0
    return 0.97


def sniff_json_records(src: SourceFile) -> float:
    head = src.head.lstrip()
    return 0.6 if head.startswith(b"[") and head[1:].lstrip().startswith(b"{") else 0.0


register(LogFormat("verl-jsonl", "verl file logger: {\"step\": N, \"data\": {...}} per line",
                   sniff_verl_jsonl, parse_verl_jsonl, top_score=0.95, priority=10))
register(LogFormat("hf-trainer-state", "Hugging Face Trainer / TRL trainer_state.json (log_history)",
                   sniff_trainer_state, parse_trainer_state, top_score=0.97, appendable=False, priority=11))
register(LogFormat("jsonl", "JSON lines of flat or nested metric dicts (step key or record index)",
                   sniff_jsonl, parse_jsonl, top_score=0.8, priority=12))
register(LogFormat("json-records", "a JSON array of metric records", sniff_json_records, parse_json_records,
                   top_score=0.6, appendable=False, priority=13))
