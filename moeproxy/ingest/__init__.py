"""Ingestion: log files of every common RL/LLM training framework -> the DuckDB run store.

``parse_file`` sniffs a file's format and parses it into a columnar frame (no store needed);
``ingest_paths`` parses every given file (directories are walked) and writes all of them in one
store transaction: either every file lands, or none does and the store is unchanged. A file
whose sha256 is already stored is reported as a duplicate and adds nothing.
"""

from __future__ import annotations

from moeproxy.terminal import shown

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from moeproxy.columns import Columns, as_columns
from moeproxy.errors import InputError
from moeproxy.ingest.batch import store_parsed
from moeproxy.ingest.stored_rows import rows_to_store  # noqa: F401  (the watcher's too)
from moeproxy.ingest.detect import open_and_detect
from moeproxy.ingest.registry import FORMATS, LogFormat, ParsedLog
from moeproxy.ingest.table import RecordOutOfRange

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMATS", "IngestSummary", "LogFormat", "ParsedLog", "ingest_paths", "parse_file", "expand_paths"]


@dataclass
class IngestSummary:
    run: str
    path: str
    format: str
    framework: str
    steps: int
    metrics: int
    rows: int
    nonfinite: int
    attempts: int
    skipped_lines: int
    step_from_index: bool
    duplicate: bool = False
    duplicate_of: str | None = None
    bytes: int = 0  # how far the bytes parsed (and hashed) go; a growing file's later lines are not read
    warnings: list[str] = field(default_factory=list)  # records dropped, each named with its line or offset

    def to_dict(self) -> dict:
        return asdict(self) | {"skipped": False}

    def line(self) -> str:
        if self.duplicate:
            return f"{shown(self.path)}: already ingested (same sha256) into run {self.duplicate_of!r}; nothing added"
        parts = [
            f"{shown(self.path)} -> run {self.run!r}", f"format {self.format} ({self.framework})",
            f"{self.steps} steps", f"{self.metrics} metrics", f"{self.rows} rows",
            f"{self.nonfinite} non-finite", f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}",
        ]
        if self.skipped_lines:
            parts.append(f"{self.skipped_lines} non-metric lines skipped")
        if self.step_from_index:
            parts.append("no step counter: record index used as step")
        return "\n".join([", ".join(parts)] + [f"  warning: {shown(w)}" for w in self.warnings])


@dataclass
class SkippedFile:
    """A member of a directory that was not ingested, and why (the parser's one-line error)."""

    path: str
    reason: str

    def to_dict(self) -> dict:
        return {"path": self.path, "skipped": True, "reason": self.reason}

    def line(self) -> str:
        return f"skipped {shown(self.reason)}"


class IngestResult(list):
    """The summaries of an ingest (a list, one per stored run or duplicate), and ``skipped``: every
    file of a directory that was not ingested, named with its reason."""

    def __init__(self, summaries=(), skipped=()) -> None:
        super().__init__(summaries)
        self.skipped: list[SkippedFile] = list(skipped)


LAST_RESORT = "line-templates"
THIN_ROWS = 100  # a winner that read fewer values than this among ten times as many skipped lines
# ... or, of any size, more skipped lines than this per value read, and than this per value of a
# metric the vocabulary knows (a 3 MB log of printed dicts among prints is read; its known values
# are many: no other reader is tried, which would cost seconds)
SKIPPED_PER_VALUE = 5
SKIPPED_PER_KNOWN = 20


def parse_file(path: str | Path, fmt: str = "auto", allow_empty: bool = False, carry: dict | None = None) -> ParsedLog:
    """Parse one file (its format sniffed unless ``fmt`` names one). ``allow_empty``: a file of no
    metric values gives an empty frame instead of an error (a watched file's new lines may be prose).
    ``carry``: the reader's context after the bytes before these (``ParsedLog.carry`` of the chunk
    before), so that a followed file's chunks store what one read of the whole stores."""
    src, log_format = open_and_detect(path, fmt)
    src.carry = carry
    try:
        parsed = _parse(src, log_format)
        failed = None
    except InputError as exc:
        # a whole-document format whose document does not parse may have been a head that only
        # looked like one (a Lua table printed before a text log's lines); a file of lines that
        # claims a line format and breaks on one line keeps the error naming that line
        if fmt != "auto" or log_format.appendable:
            raise
        parsed, failed = None, exc
    # the head looked like one format, the records are another's: the winner failed, read nothing, or
    # read a few values among thousands of lines it skipped (a config dump's dicts before mmengine's
    # log lines)
    # (or read one record only, a document's scalars: a JSON object whose lists hold the series)
    thin = parsed is None or len(parsed.rows) == 0 or (
        len(parsed.rows) < THIN_ROWS and (parsed.skipped_lines > 10 * len(parsed.rows) or _steps(parsed) <= 1))
    # of any size, a winner that skipped many more lines than it read values (a config's dicts
    # before verl's step lines; DeepSpeed's engine lines among DeepSpeed-Chat's own): another
    # reader takes over when it reads ten times as many values of metrics the vocabulary knows and
    # loses none of the evidence the winner read
    sparse = (not thin and parsed.skipped_lines > SKIPPED_PER_VALUE * len(parsed.rows)
              and parsed.skipped_lines > SKIPPED_PER_KNOWN * _known_values(parsed))
    # DeepSpeed's engine lines alone (``step=17, skipped=0, lr=[1e-06]``, no Megatron iteration line)
    # are never a trainer's own records: the lines between them are (``steps: 18 loss: nan``)
    engine_only = (not thin and parsed.format == "megatron" and parsed.framework == "deepspeed"
                   and parsed.skipped_lines > 0)
    # a winner that read no metric the vocabulary knows among lines it skipped (a run's printed
    # config dicts, repeated at each restart, before its ``Epochs: 3 | loss_train: 1.1`` lines):
    # every reader that reads a known metric is tried, and the one that reads most of them takes over
    unknown = not (thin or sparse or engine_only) and parsed.skipped_lines > 0 and _known_values(parsed) == 0
    if (thin or sparse or engine_only or unknown) and fmt == "auto" and not (parsed is not None and log_format.reads_inner):
        from moeproxy.ingest.detect import past_preamble, runners_up
        from moeproxy.ingest.registry import FORMATS

        if engine_only and not (thin or sparse):  # the trainer's lines around DeepSpeed's: plain text
            others = [FORMATS["text"]]
        else:
            others = runners_up(src, log_format)
            others += [f for f in past_preamble(src, log_format) if f not in others]
            # and the last resort, whose sniffer looks at the head only (records that start after a
            # preamble longer than a quarter of it: a Marian log's 220 lines of options)
            last = FORMATS.get(LAST_RESORT)
            if last is not None and last is not log_format and last not in others:
                others.append(last)
            # (after a winner that read values, of names the vocabulary does not know, the last
            # resort does not take over: its names are the word before each number, and two of
            # them, ``Validation loss: 0.12  Best loss: 0.11``, would both be a known ``loss``)
            if unknown:
                others = [f for f in others if f.name != LAST_RESORT]
            elif thin:  # (the last resort is read last, and only when no other reader passed: it
                # would not be chosen over one that did, and it reads 3 MB of text in 0.6 s)
                others = [f for f in others if f.name != LAST_RESORT] + [f for f in others if f.name == LAST_RESORT]
        # ten times what the winner read; after a failed winner, a hundred values or more (a small
        # file that is broken where it claims a format keeps the error that says where)
        measure = _known_values if sparse or engine_only or unknown else (lambda p: len(p.rows))
        need = THIN_ROWS if parsed is None else (10 if sparse or thin else 1) * measure(parsed) + 1
        # the winner read something: lose none of it
        kept = _evidence(parsed) if sparse or engine_only else None
        passing: list = []
        known_before = _known_values(parsed) if thin and parsed is not None else 0
        for other in others:
            if other.name == LAST_RESORT and any(pair[1].name != LAST_RESORT for pair in passing):
                continue  # (after a thin winner, the last resort is chosen only when no other passed)
            try:
                attempt = _parse(src, other)
            except (InputError, ValueError, UnicodeDecodeError):  # not this one either
                continue
            enough = measure(attempt) >= need
            if enough and unknown and _steps(attempt) < min(2, _steps(parsed)):
                # a series read under names the vocabulary does not know (baselines' ``| epoch | 3 |``
                # boxes) is not taken over by a reader of one record: a printed config's dict,
                # whose ``lr`` is a name the vocabulary knows
                enough = False
            if not enough and thin and parsed is not None:
                # a thin winner's few values may be none the vocabulary knows (a run's closing summary
                # dict before a notebook's progress table): ten times its known values, ten at least
                enough = _known_values(attempt) >= max(10, 10 * known_before + 1)
            if enough and (kept is None or kept <= _evidence(attempt)):
                if not (thin or unknown):
                    parsed, log_format = attempt, other
                    break
                passing.append((attempt, other))
        if passing:
            # after a thin winner every reader that passes is read, and the one with the most values
            # of metrics the vocabulary knows takes over (then the most values): a printed config's
            # two dozen values are not the trainer's step lines further down (vLLM's and DeepSpeed's
            # start-up dicts before ``[5/1000] loss: -13.1, kl-penalty: 1.07, entropy: 65.4``)
            # (the last resort only when no other reader passed: its templates read any repeated line)
            preferred = [pair for pair in passing if pair[1].name != LAST_RESORT] or passing
            parsed, log_format = max(preferred, key=lambda pair: (_known_values(pair[0]), len(pair[0].rows)))
    if parsed is None:
        raise failed
    if len(parsed.rows) == 0 and not allow_empty:
        raise InputError(f"{src.path}: recognised as {log_format.name} but holds no metric values")
    parsed.sha256 = src.checked_sha256()  # exactly the bytes parsed, however the parser read them
    parsed.bytes_parsed = src.end
    parsed.warnings = src.nul_warnings() + list(src.warnings) + parsed.warnings
    return parsed


def _steps(parsed: ParsedLog) -> int:
    """How many distinct steps a reading holds."""
    return int(np.unique(parsed.columns.step).size)


def _evidence(parsed: ParsedLog) -> set[str]:
    """What a reading holds that a diagnosis reads: the canonical metrics and DeepSpeed's engine
    events. A reader that reads more values takes over only when it loses none of these."""
    from moeproxy.ingest.names import canonical_of

    out = set()
    cols = parsed.columns  # (the names with a row, read on the numpy columns: no DataFrame made)
    for name in (n for n, present in zip(cols.names, cols.present()) if present):
        hit = canonical_of(str(name))
        if hit is not None:
            out.add(hit[0])
        elif str(name).startswith("deepspeed/"):
            out.add(str(name))
    return out


def _known_values(parsed: ParsedLog) -> int:
    """Values of the metrics the vocabulary knows (a loss, a reward, a grad norm ...) in a reading."""
    from moeproxy.ingest.names import canonical_of

    cols = parsed.columns  # (numpy columns: a reading compared here keeps its rows as the parser made them)
    counts = np.bincount(cols.code, minlength=len(cols.names))[:len(cols.names)]
    return int(sum(int(n) for name, n in zip(cols.names, counts) if canonical_of(str(name)) is not None))


def _parse(src, log_format) -> ParsedLog:
    try:
        return log_format.parse(src)
    except RecordOutOfRange as exc:  # a step or rank that cannot be stored as the file spells it
        raise InputError(f"{src.path}: {exc}") from None
    except RecursionError:  # a parser's own recursion on hostile nesting: one line, not a traceback
        raise InputError(f"{src.path}: nested too deeply to read") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # a counter of more than 4,300 digits
            raise InputError(f"{src.path}: a number of more than 4,300 digits; not a training log value") from None
        raise


def _is_dir(p: Path) -> bool:
    """Path.is_dir without its exceptions (a 5,000-character name, an embedded NUL): such a path is
    then opened as a file, which names the problem in one line."""
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False


def expand_paths(paths: Iterable[str | Path]) -> list[tuple[Path, Path]]:
    """(file, the path the user named) for each file; directories are walked, hidden files skipped."""
    out: list[tuple[Path, Path]] = []
    for given in paths:
        p = Path(given)
        if _is_dir(p):
            # not only regular files: a FIFO, socket or broken link is named as skipped, never opened
            files = sorted(f for f in p.rglob("*") if not f.is_dir() and not any(part.startswith(".") for part in f.relative_to(p).parts))
            if not files:
                raise InputError(f"{p}: directory holds no files")
            out.extend((f, p) for f in files)
        else:
            out.append((p, p))
    return out


_GENERIC_NAMES = re.compile(r"^(trainer_state|log|logs|train|training|metrics|output|stdout|events\.out\.tfevents.*)$")


def default_run_name(path: Path, given: Path) -> str:
    return stored_text(_default_run_name(path, given))


def _default_run_name(path: Path, given: Path) -> str:
    if _is_dir(given):
        return given.resolve().name
    stem = path.name.split(".")[0] if path.name.startswith("events.out") else path.stem
    if _GENERIC_NAMES.match(stem) and path.resolve().parent.name:
        parent = path.resolve().parent
        if parent.name.startswith("checkpoint-") and parent.parent.name:
            return parent.parent.name
        return parent.name
    return stem


def stored_text(name: str) -> str:
    """A file or run name as the store keeps it: bytes of a name that are not UTF-8 (a file name
    from another encoding, which Python keeps as surrogates) written as ``\\xff`` escapes."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def arms_of(parsed: ParsedLog, run: str) -> list[tuple[str, "Columns | pd.DataFrame"]]:
    """(run name, rows) for each run a file holds: one, or one per arm of a comparison table
    (named ``RUN-ARM``)."""
    if not parsed.arms:
        return [(run, parsed.rows)]
    return [(f"{run}-{arm}", frame) for arm, frame in parsed.arms.items()]


def _summary(parsed: ParsedLog, run: str, rows=None) -> IngestSummary:
    counts = as_columns(parsed.rows if rows is None else rows).counts()
    return IngestSummary(
        run=run, path=stored_text(str(parsed.path)), format=parsed.format, framework=parsed.framework,
        steps=counts["steps"], metrics=counts["metrics"], rows=counts["rows"], nonfinite=counts["nonfinite"],
        attempts=counts["attempts"], skipped_lines=parsed.skipped_lines, step_from_index=parsed.step_from_index,
        bytes=parsed.bytes_parsed, warnings=[f"{parsed.path}: {w}" for w in parsed.warnings],
    )


def ingest_paths(store, paths, run: str | None = None, role: str = "other", proxy_of: str | None = None,
                 fmt: str = "auto", progress: Callable[[str], None] | None = None) -> IngestResult:
    """Parse all files, then store them in one transaction. Raises InputError before writing
    anything when any file is unreadable, unrecognised or malformed. ``store`` is a ``Store`` or
    a zero-argument callable returning one (opened only after every file parsed). Inside a
    directory, a file that is not a readable log is skipped and named in ``result.skipped``."""
    from moeproxy.contracts import ROLES

    if role not in ROLES:
        raise InputError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    files = expand_paths(paths)
    parsed_all: list[tuple[ParsedLog, str]] = []
    dir_runs: dict[Path, str | None] = {}  # a directory named -> its run name (None: a file named)
    run = None if run is None else stored_text(run)
    skipped: list[SkippedFile] = []
    for path, given in files:
        if progress:
            progress(f"parsing {path}")
        try:
            parsed = parse_file(path, fmt)
        except InputError as exc:
            if _is_dir(given) and given != path:  # inside a directory, skip what is not a log, and say so
                skipped.append(SkippedFile(str(path), str(exc)))
                if progress:
                    progress(skipped[-1].line())
                continue
            raise
        if not run and given not in dir_runs:  # a directory's files share its name: found once
            dir_runs[given] = default_run_name(path, given) if given != path else None
        parsed_all.append((parsed, run or dir_runs[given] or default_run_name(path, given)))
    if not parsed_all:
        why = f" ({len(skipped)} files skipped; the first: {skipped[0].reason})" if skipped else ""
        raise InputError(f"{', '.join(str(p) for p in paths)}: no recognised training log found{why}")

    if callable(store):  # a factory: the store (duckdb, pandas) is only opened once every file parsed
        store = store()
    def write():
        with store.write() as tx:  # every file in one transaction, a few statements for all (ingest.batch)
            return store_parsed(tx, parsed_all, role, proxy_of, _summary, arms_of, progress)

    # a DuckLake catalog's commit that lost to another writer's stored nothing: run it again
    summaries = store.retrying(write)
    return IngestResult(summaries, skipped)
