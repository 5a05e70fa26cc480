"""Training tables rendered as HTML: the Hugging Face Trainer's notebook progress table
(``<table class="dataframe">`` of Step / Training Loss / reward / kl ... that TRL's GRPO and PPO
trainers show in Colab and Jupyter), kept as a saved web page or as a notebook output's
``text/html``.

- Each ``<table>`` becomes a Markdown table (its ``<th>`` row the header, each ``<tr>`` of ``<td>``
  cells a row) and is read by the table reader (``formats/tables.py``); text outside tables is not
  read. The HTML rendering spaces the Trainer's metric names (``rewards / xmlcount_reward_func``):
  the name is ``rewards/xmlcount_reward_func`` as the Trainer logs it, not two arms of a comparison.
- A page that re-rendered the table as training went on holds several copies: the rows of each are
  read in order, and a step repeated with the same values is one record (``LogTable``).
"""

from __future__ import annotations

import os
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from moeproxy.errors import InputError
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile

TABLE_OPEN = re.compile(r"<table\b", re.IGNORECASE)
CELL_OPEN = re.compile(r"<t[dh]\b", re.IGNORECASE)
SPACED_SLASH = re.compile(r"\s+/\s+")


class _Tables(HTMLParser):
    """Rows of cell texts of every table (nested tables flattened into the outer one's cells)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[tuple[bool, list[str]]]] = []  # per table: (header row?, cells)
        self._depth = 0
        self._row: list[str] | None = None
        self._header = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._depth += 1
            if self._depth == 1:
                self.tables.append([])
        elif self._depth and tag == "tr":
            self._end_row()
            self._row, self._header = [], False
        elif self._depth and tag in ("td", "th"):
            self._end_cell()
            if self._row is None:
                self._row = []
            self._cell = []
            self._header = self._header or tag == "th"

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._end_cell()
        elif tag == "tr":
            self._end_row()
        elif tag == "table" and self._depth:
            self._end_row()
            self._depth -= 1

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def _end_cell(self):
        if self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
        self._cell = None

    def _end_row(self):
        self._end_cell()
        if self._row and self.tables:
            self.tables[-1].append((self._header, self._row))
        self._row = None


def tables_as_text(html: str) -> tuple[str, int]:
    """(every table of the HTML as a Markdown table, how many tables had rows)."""
    parser = _Tables()
    parser.feed(html)
    parser.close()
    parts: list[str] = []
    for rows in parser.tables:
        header = next((cells for is_header, cells in rows if is_header), None)
        body = [cells for is_header, cells in rows if not is_header]
        if header is None or not body:
            continue
        header = [SPACED_SLASH.sub("/", h) or f"column {i + 1}" for i, h in enumerate(header)]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + ("\n" if parts else ""), len(parts)


def sniff_html_tables(src: SourceFile) -> float:
    if src.encoding is None:
        return 0.0
    head = src.head_text
    return 0.6 if TABLE_OPEN.search(head) and CELL_OPEN.search(head) else 0.0


def parse_html_tables(src: SourceFile) -> ParsedLog:
    from moeproxy.ingest import parse_file

    text, count = tables_as_text(src.read_text(whole=True))
    if not count:
        raise InputError(f"{src.path}: an HTML page with no table of a header and rows to read as a log")
    with tempfile.TemporaryDirectory(prefix="moeproxy-html-") as folder:
        inner_path = Path(folder) / (src.path.stem + ".md")
        inner_path.write_text(text, encoding="utf-8")
        try:
            inner = parse_file(inner_path, fmt="table")
        except InputError as exc:
            raise InputError(str(exc).replace(str(inner_path), f"{src.path} (its tables)")) from None
    notes = [f"read from {count} HTML table(s)"] + inner.notes
    warnings = [w.replace(str(inner_path), f"{src.path} (its tables)").replace(os.path.basename(inner_path), src.path.name)
                for w in inner.warnings]
    return ParsedLog(src.path, "html-table", inner.framework, src.sha256, inner.rows, inner.skipped_lines,
                     inner.step_from_index, notes=notes, warnings=warnings, arms=inner.arms)


register(LogFormat("html-table", "training tables rendered as HTML (the Hugging Face Trainer's notebook table, a "
                   "saved web page)", sniff_html_tables, parse_html_tables, top_score=0.6, appendable=False,
                   priority=60))
