"""Score moeproxy's diagnosis on real public training logs with labels (the README of
shared/real-logs explains the fields): each file is ingested into an in-memory store exactly as
`moeproxy diagnose FILE` does, every run it holds is diagnosed, and the file's verdict is the
earliest non-healthy one (healthy when every run is).

    python bench/real_logs.py DIR [DIR ...] [--split]

``--split`` also reports two fixed halves (by a hash of the file name), to show that the score
does not hang on one half of the logs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Case:
    file: str
    label: str
    accept: list | None
    verdict: str
    onset: int | None
    confidence: str
    seconds: float
    runs: int
    error: str | None = None

    @property
    def verdict_ok(self) -> bool:
        return self.verdict == self.label

    @property
    def onset_ok(self) -> bool | None:
        if self.label == "healthy" or not self.accept:
            return None
        if not self.verdict_ok or self.onset is None:
            return False
        return any(lo <= self.onset <= hi for lo, hi in self.accept)


def half_of(file: str) -> int:
    """A fixed split of the logs in two halves that does not depend on their order or number."""
    import hashlib

    return hashlib.sha1(file.encode()).digest()[-1] & 1


def load_labels(folder: Path) -> list[dict]:
    entries = []
    for labels in sorted(folder.glob("labels*.json")):
        entries.extend(json.loads(labels.read_text()))
    return entries


def diagnose_file(path: Path) -> tuple[str, int | None, str, int]:
    """(verdict, onset, confidence, runs) as `moeproxy diagnose FILE` reports them (the run whose
    failure starts first, when the file holds several runs)."""
    from moeproxy.diagnose.record import diagnose_target

    _, result, _ = diagnose_target(str(path), db=":memory:")
    return (result["verdict"], result["onset_step"], result.get("confidence") or "?",
            len(result.get("runs", {})) or 1)


def evaluate(folder: Path) -> list[Case]:
    cases = []
    for entry in load_labels(folder):
        path = folder / entry["file"]
        t0 = time.perf_counter()
        try:
            verdict, onset, confidence, runs = diagnose_file(path)
            error = None
        except Exception as exc:  # an error is a result here: the case counts as missed
            verdict, onset, confidence, runs = "error", None, "-", 0
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            if not hasattr(exc, "exit_code") and type(exc).__name__ not in ("InputError", "NotFound"):
                error = "TRACEBACK " + traceback.format_exc().splitlines()[-1][:150]
        cases.append(Case(entry["file"], entry["label"], entry.get("accept"), verdict, onset, confidence,
                          time.perf_counter() - t0, runs, error))
    return cases


def report(title: str, cases: list[Case]) -> None:
    from moeproxy.diagnose import CATEGORIES

    n = len(cases)
    if not n:
        print(f"\n== {title}: no logs")
        return
    ok = sum(c.verdict_ok for c in cases)
    onsets = [c.onset_ok for c in cases if c.onset_ok is not None]
    print(f"\n== {title}: verdicts {ok}/{n} ({100 * ok / max(n, 1):.0f} %), onsets in range "
          f"{sum(onsets)}/{len(onsets)}, failures found {sum(c.verdict_ok for c in cases if c.label != 'healthy')}"
          f"/{sum(c.label != 'healthy' for c in cases)}, slowest {max((c.seconds for c in cases), default=0):.2f} s")
    print(f"{'file':<58} {'wanted':<19} {'got':<19} {'onset':>7} {'accept':<16} conf")
    for c in cases:
        mark = "  " if c.verdict_ok and c.onset_ok is not False else "X "
        accept = ",".join(f"{lo}-{hi}" for lo, hi in c.accept) if c.accept else ""
        print(f"{mark}{c.file[:56]:<56} {c.label:<19} {c.verdict:<19} {str(c.onset):>7} {accept[:16]:<16} "
              f"{c.confidence}" + (f"  [{c.error}]" if c.error else ""))
    confusion = Counter((c.label, c.verdict) for c in cases)
    labels = [k for k in (*CATEGORIES, "error") if any(k in pair for pair in confusion)]
    print("confusion (rows = label, columns = verdict)")
    print(" " * 20 + "".join(f"{k[:10]:>11}" for k in labels))
    for r in labels:
        if any(pair[0] == r for pair in confusion):
            print(f"{r:<20}" + "".join(f"{confusion.get((r, k), 0):>11}" for k in labels))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--split", action="store_true", help="also report the two halves separately")
    args = ap.parse_args(argv)
    for folder in args.folders:
        cases = evaluate(folder)
        report(f"real logs in {folder}", cases)
        if args.split:
            for half in (0, 1):
                report(f"{folder} half {half} (sha1 of the file name, last bit {half})",
                       [c for c in cases if half_of(c.file) == half])
    return 0


if __name__ == "__main__":
    sys.exit(main())
