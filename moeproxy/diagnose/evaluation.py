"""Scoring the diagnosis on labelled real logs: one scoring rule for the bench and the tests.

A labelled folder holds logs and ``labels*.json`` (fields: shared/real-logs/README.md). Each log
is diagnosed exactly as ``moeproxy diagnose FILE`` does (ingested into an in-memory store; the
file's verdict is its run whose failure starts first). A verdict is right when it is the label or
the second rater's label (``second_rater.label``); an onset is right when the verdict is right and
the onset lies in that rater's ``accept`` ranges.

``source_of`` names where a log comes from (the GitHub repository of its ``source_url``): the
group of leave-one-source-out cross-validation (``verdict_model.cross_validate``), so that logs
of one repository are never both in training and in test.
"""

from __future__ import annotations

import json
import re
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Case:
    file: str
    set: str
    source: str
    labels: tuple[str, ...]            # the label, then the second rater's (if any and different)
    accepts: dict[str, list]           # label -> accepted onset ranges
    verdict: str = "error"
    onset: int | None = None
    onset_epoch: float | None = None
    onset_counters: dict = field(default_factory=dict)  # the log's other counters at the onset
    confidence: str = "-"
    seconds: float = 0.0
    error: str | None = None
    result: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return self.labels[0]

    @property
    def failure(self) -> bool:
        return self.label != "healthy"

    @property
    def verdict_ok(self) -> bool:
        return self.verdict in self.labels

    @property
    def onset_ok(self) -> bool | None:
        return onset_right(self, self.verdict, self.onset, self.onset_epoch, self.onset_counters)

    @property
    def raters_disagree(self) -> bool:
        return len(self.labels) > 1


def onset_right(case: Case, verdict: str, onset: int | None, epoch: float | None = None,
                counters: dict | None = None) -> bool | None:
    """Whether ``verdict`` from ``onset`` puts the onset in range: None for a healthy label or
    verdict a rater gave (no onset to judge) or a label without ranges. Ranges with a fractional
    bound are in epochs (a log whose only counter is the epoch): ``epoch``, the tool's onset in
    epochs, is judged against them. ``counters``: the onset in the log's other counters, as the
    tool states it (an RL library's environment steps): a range in one of them is met there."""
    if case.label == "healthy" or not case.accepts.get(case.label):
        return None
    if verdict == "healthy" and verdict in case.labels:
        return None  # the second rater's healthy
    if verdict not in case.labels or verdict == "healthy" or onset is None:
        return False
    ranges = case.accepts.get(verdict) or case.accepts.get(case.label) or []
    in_epochs = any(float(b) != int(b) for r in ranges for b in r)
    at = epoch if in_epochs and epoch is not None else onset
    return any(lo <= value <= hi for lo, hi in ranges for value in (at, *(counters or {}).values()))


def source_of(url: str) -> str:
    """The group a log belongs to: ``owner/name`` of a GitHub URL, else the URL's host and first
    path part."""
    m = re.search(r"github\.com/([^/]+)/([^/#?]+)", url or "")
    if m:
        return f"{m.group(1)}/{m.group(2)}".lower()
    m = re.search(r"https?://([^/]+)(/[^/#?]*)?", url or "")
    return (m.group(1) + (m.group(2) or "")).lower() if m else (url or "unknown")


def load_labels(folder: Path) -> list[dict]:
    entries = []
    for labels in sorted(Path(folder).glob("labels*.json")):
        entries.extend(json.loads(labels.read_text()))
    return entries


def case_of(entry: dict, set_name: str) -> Case:
    labels = [entry["label"]]
    accepts = {entry["label"]: entry.get("accept") or []}
    second = entry.get("second_rater") or {}
    if second.get("label") and second["label"] not in labels:
        labels.append(second["label"])
        accepts[second["label"]] = second.get("accept") or []
    elif second.get("label") == entry["label"] and second.get("accept"):
        accepts[entry["label"]] = list(accepts[entry["label"]]) + list(second["accept"])
    return Case(entry["file"], set_name, source_of(entry.get("source_url", "")), tuple(labels), accepts)


def diagnose_path(path: Path) -> dict:
    """The result ``moeproxy diagnose FILE`` prints (the run whose failure starts first)."""
    from moeproxy.diagnose.record import diagnose_target

    _, result, _ = diagnose_target(str(path), db=":memory:")
    return result


def evaluate(folder: Path, set_name: str | None = None) -> list[Case]:
    folder = Path(folder)
    cases = []
    for entry in load_labels(folder):
        case = case_of(entry, set_name or folder.name)
        t0 = time.perf_counter()
        try:
            result = diagnose_path(folder / entry["file"])
            case.verdict, case.onset = result["verdict"], result["onset_step"]
            case.onset_epoch = result.get("onset_epoch")
            case.onset_counters = result.get("onset_counters") or {}
            case.confidence, case.result = result.get("confidence") or "?", result
        except Exception as exc:  # an error is a result here: the case counts as missed
            case.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            if not hasattr(exc, "exit_code") and type(exc).__name__ not in ("InputError", "NotFound"):
                case.error = "TRACEBACK " + traceback.format_exc().splitlines()[-1][:150]
        case.seconds = time.perf_counter() - t0
        cases.append(case)
    return cases


@dataclass
class Score:
    n: int
    verdicts: int
    failures: int
    failures_found: int
    onsets: int
    onsets_judged: int

    def line(self) -> str:
        pct = 100 * self.verdicts / max(self.n, 1)
        return (f"verdicts {self.verdicts}/{self.n} ({pct:.0f} %), failures found "
                f"{self.failures_found}/{self.failures}, onsets in range {self.onsets}/{self.onsets_judged}")


def score(cases: list[Case]) -> Score:
    onsets = [c.onset_ok for c in cases if c.onset_ok is not None]
    return Score(len(cases), sum(c.verdict_ok for c in cases), sum(c.failure for c in cases),
                 sum(c.verdict_ok and c.verdict != "healthy" for c in cases if c.failure),
                 sum(onsets), len(onsets))


def confusion(cases: list[Case]) -> tuple[list[str], Counter]:
    from moeproxy.diagnose.taxonomy import CATEGORIES

    counts = Counter((c.label, c.verdict) for c in cases)
    keys = [k for k in (*CATEGORIES, "error") if any(k in pair for pair in counts)]
    return keys, counts


def render_cases(title: str, cases: list[Case]) -> str:
    lines = [f"\n== {title}: {score(cases).line()}, slowest "
             f"{max((c.seconds for c in cases), default=0):.2f} s"]
    lines.append(f"{'file':<58} {'wanted':<30} {'got':<19} {'onset':>7} {'accept':<16} conf")
    for c in cases:
        mark = "  " if c.verdict_ok and c.onset_ok is not False else "X "
        wanted = " / ".join(c.labels)
        ranges = c.accepts.get(c.verdict) or c.accepts.get(c.label) or []
        accept = ",".join(f"{lo}-{hi}" for lo, hi in ranges)
        lines.append(f"{mark}{shown_name(c.file):<56} {wanted[:30]:<30} {c.verdict:<19} {str(c.onset):>7} "
                     f"{accept[:16]:<16} {c.confidence}" + (f"  [{c.error}]" if c.error else ""))
    keys, counts = confusion(cases)
    lines.append("confusion (rows = first rater's label, columns = verdict)")
    lines.append(" " * 20 + "".join(f"{k[:10]:>11}" for k in keys))
    for r in keys:
        if any(pair[0] == r for pair in counts):
            lines.append(f"{r:<20}" + "".join(f"{counts.get((r, k), 0):>11}" for k in keys))
    return "\n".join(lines)


CONFIDENCES = ("high", "medium", "low")


def calibration(pairs) -> dict[str, tuple[int, int]]:
    """How often a verdict of each confidence was right: ``{confidence: (right, total)}`` over
    ``(confidence, right)`` pairs; a log that could not be read has confidence ``-``."""
    out: dict[str, tuple[int, int]] = {}
    for confidence, right in pairs:
        ok, n = out.get(confidence, (0, 0))
        out[confidence] = (ok + bool(right), n + 1)
    return out


def case_calibration(cases: list[Case]) -> dict[str, tuple[int, int]]:
    return calibration((c.confidence if not c.error else "-", c.verdict_ok and c.onset_ok is not False)
                       for c in cases)


_ROW = re.compile(r"^([X ]) \S.*\s(high|medium|low|-)(?:\s+\[.*)?$")


def shown_name(file: str) -> str:
    """A log's name as ``render_cases`` shows it (its first 56 characters)."""
    return file[:56]


def first_sight_rows(path) -> list[tuple[str, str, bool, str]]:
    """(file name as shown, ``shown_name``, verdict, right, confidence) of each log of a kept
    first-sight output (``render_cases`` text)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        m = _ROW.match(line)
        if m and not line.startswith(("==", "file")):
            shown, _wanted, verdict = line[2:].split()[:3]
            rows.append((shown, verdict, m.group(1) == " ", m.group(2)))
    return rows


def first_sight_calibration(outputs) -> dict[str, tuple[int, int]]:
    """The same table read from kept first-sight outputs (``render_cases`` text, one file per blind
    set): the only held-out measure of what "high" is worth on logs nobody had seen."""
    return calibration([(conf, right) for path in outputs for _, _, right, conf in first_sight_rows(path)])


def render_calibration(title: str, table: dict[str, tuple[int, int]]) -> str:
    cells = [f"{k} {table[k][0]}/{table[k][1]} ({100 * table[k][0] / table[k][1]:.0f} %)"
             for k in (*CONFIDENCES, "-") if k in table and table[k][1]]
    return f"{title}: " + ", ".join(cells)
