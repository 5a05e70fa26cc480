"""The registry of log formats: each format module registers a sniffer and a parser by name.

A format is sniffed from content, never from the file name: ``sniff(source) -> float`` returns
a confidence in [0, 1] (0 = not this format). Detection picks the highest score; ties go to the
format of the lower ``priority`` (declared by each format). ``parse(source) -> ParsedLog`` reads the whole file. ``top_score`` is the
highest score a sniffer ever returns: detection does not run a sniffer that could not beat the
score already found (a directory of thousands of small logs is sniffed at the cost of the sniffers
that can still win, not of all of them); a test checks every sniffer keeps to its ``top_score``.

Adding a format is one module under ``moeproxy/ingest/formats/`` that ends with
``register(LogFormat(..., priority=N))``: the package imports every module in its folder
(``formats/__init__.py``), so nothing else names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from moeproxy.columns import Columns, as_columns
from moeproxy.ingest.source import SourceFile
from moeproxy.registry import Registry

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class ParsedLog:
    path: Path
    format: str
    framework: str
    sha256: str
    rows: Columns | pd.DataFrame  # step, metric, value, attempt, rank, wall_time (original metric names)
    skipped_lines: int = 0
    step_from_index: bool = False
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # records dropped and named (filled by parse_file)
    bytes_parsed: int = 0  # how far the parsed bytes go: the sha256 is theirs (filled by parse_file)
    # a file holding several runs (a comparison table): arm name -> frame; ``frame`` is the first
    arms: dict[str, pd.DataFrame] | None = None
    # the reader's context at the end of these bytes, for the next chunk of a followed file (readers
    # whose records depend on earlier lines: the last step logged, the record index); None otherwise
    carry: dict | None = None

    @property
    def columns(self) -> Columns:
        """The parsed rows as numpy columns (no pandas needed)."""
        return as_columns(self.rows)

    @property
    def frame(self) -> pd.DataFrame:
        """The parsed rows as a pandas DataFrame (made once, on first use; it is then the rows)."""
        if isinstance(self.rows, Columns):
            self.rows = self.rows.to_frame()
        return self.rows


@dataclass(frozen=True)
class LogFormat:
    name: str
    description: str
    sniff: Callable[[SourceFile], float]
    parse: Callable[[SourceFile], ParsedLog]
    binary: bool = False  # reads binary files (TensorBoard event files)
    top_score: float = 1.0  # the highest score ``sniff`` returns
    # what `watch` needs to know of the format's files:
    appendable: bool = True  # False: a whole document rewritten at each save (not followed; ingest it)
    header_lines: int = 0  # lines at the top that every later chunk needs in front of it (a CSV header)
    # the order among formats: sniffers run, and ties go, lowest first (specific formats before the
    # generic text reader); a format's own number, so that no list elsewhere orders them
    priority: int = 100
    # the format takes a log's text out of a wrapper (a notebook's cell outputs) and reads it as a
    # file of its own, with every reader and every fallback: its answer is not read again by the
    # others on the wrapper's bytes (a notebook's JSON read as text costs seconds, reads the same
    # lines in quotes, and HTML where the inner reading has the tables)
    reads_inner: bool = False


FORMATS: Registry[LogFormat] = Registry("log format")


def register(fmt: LogFormat) -> LogFormat:
    """Add a format; a module registers its formats with one call each at its bottom. The registry
    stays in priority order (then in the order of registration)."""
    FORMATS.add(fmt.name, fmt)
    ordered = sorted(FORMATS.values(), key=lambda f: f.priority)  # stable: registration order among equals
    FORMATS.clear()
    FORMATS.update((f.name, f) for f in ordered)
    return fmt
