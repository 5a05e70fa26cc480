"""A Jupyter notebook (``.ipynb``) whose cell outputs hold a training log: the printed output of a
training cell (Stable-Baselines' tables, Keras' epoch lines, a Trainer's dicts, a loop's prints) is a
log like any other, kept in the notebook's JSON as each output's text.

- The text read is every cell's outputs in order: a ``stream`` output's text, an ``execute_result``'s
  or ``display_data``'s ``text/plain`` (its ``text/html`` tables as Markdown where it has them: the
  Hugging Face Trainer's progress table), an ``error``'s ``ename: evalue`` line (a NaN guard stopping
  the run is evidence); cell sources and images are not output.
- That text is read as a log file of its own, its format detected as for any file, and stored as the
  notebook's (path and sha256 of the notebook's bytes); the format is named ``notebook/<format>``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from moeproxy.errors import InputError
from moeproxy.ingest.formats.html_tables import TABLE_OPEN, tables_as_text
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.source import SourceFile


def _text(value) -> str:
    """nbformat stores text as a string or as a list of lines (each with its newline)."""
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def output_text(doc: dict) -> tuple[str, int, str]:
    """(the text of every cell output in order, how many outputs gave text, the text of the
    outputs' HTML tables alone)."""
    text, outputs, tables, _ = cell_texts(doc)
    return text, outputs, tables


def cell_texts(doc: dict) -> tuple[str, int, str, list[str]]:
    """``output_text``'s three, and each cell's output text on its own (cells with none left out)."""
    parts: list[str] = []
    table_parts: list[str] = []
    cells_text: list[str] = []
    cells = doc.get("cells")
    if not isinstance(cells, list):  # nbformat 3 kept the cells in worksheets
        cells = [c for ws in doc.get("worksheets") or [] if isinstance(ws, dict) for c in ws.get("cells") or []]
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        before = len(parts)
        for out in cell.get("outputs") or []:
            if not isinstance(out, dict):
                continue
            kind = out.get("output_type")
            if kind == "stream":
                text = _text(out.get("text"))
            elif kind in ("execute_result", "display_data", "pyout"):
                data = out.get("data") if isinstance(out.get("data"), dict) else out
                html = _text(data.get("text/html"))
                # the Hugging Face Trainer's progress table is HTML only (its text/plain is
                # ``<IPython.core.display.HTML object>``): its tables, as Markdown
                tables = tables_as_text(html)[0] if html and TABLE_OPEN.search(html) else ""
                if tables:
                    table_parts.append(tables)
                text = tables or _text(data.get("text/plain") if "text/plain" in data else data.get("text"))
            elif kind in ("error", "pyerr"):
                text = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"
            else:
                text = ""
            if text:
                parts.append(text if text.endswith("\n") else text + "\n")
        if len(parts) > before:
            cells_text.append("".join(parts[before:]))
    return "".join(parts), len(parts), "\n".join(table_parts), cells_text


def _read_part(path: Path, text: str, read: ParsedLog, other_format: bool = False) -> tuple[ParsedLog, Path] | None:
    """``text`` (a part of the outputs) written to ``path`` and read as a log of its own: it and its
    path when it holds more values of known metrics (then more rows) than ``read``; else None.
    ``other_format``: only when its format is another than ``read``'s (detected first: a part in the
    same format is not read twice)."""
    from moeproxy.ingest import _known_values, parse_file
    from moeproxy.ingest.detect import open_and_detect

    path.write_text(text, encoding="utf-8")
    try:
        if other_format and open_and_detect(path)[1].name == read.format:
            return None
        part = parse_file(path)
    except InputError:
        return None
    if other_format and part.format == read.format:
        return None
    return (part, path) if (_known_values(part), len(part.rows)) > (_known_values(read), len(read.rows)) else None


def sniff_notebook(src: SourceFile) -> float:
    if src.encoding is None:
        return 0.0
    head = src.head_text.lstrip()[:400]
    if src.path.suffix.lower() == ".ipynb" and head.startswith("{"):
        return 1.0
    return 0.95 if head.startswith("{") and '"cells"' in head and '"cell_type"' in head else 0.0


def parse_notebook(src: SourceFile) -> ParsedLog:
    from moeproxy.ingest import parse_file

    try:
        doc = json.loads(src.read_text(whole=True))
    except ValueError as exc:
        raise InputError(f"{src.path}: a Jupyter notebook that is not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{src.path}: not a Jupyter notebook (its JSON is not an object)")
    text, outputs, tables, cells = cell_texts(doc)
    source = f"read from the text of {outputs} cell output(s)"
    if not text.strip():
        raise InputError(f"{src.path}: a Jupyter notebook with no cell output to read as a log")
    with tempfile.TemporaryDirectory(prefix="moeproxy-nb-") as folder:
        inner_path = Path(folder) / (src.path.stem + ".log")
        inner_path.write_text(text, encoding="utf-8")
        try:
            inner = parse_file(inner_path)
        except InputError as exc:
            message = str(exc).replace(str(inner_path), f"{src.path} (its cell outputs)")
            raise InputError(message) from None
        # the longest cell output read on its own: a training cell's Stable-Baselines tables after an
        # earlier cell's ``Episode: 1/500, Score: 28`` lines, whose format the whole text was read in
        # (its head); it takes over, in another format, when it holds more values of known metrics
        longest = max(cells, key=len, default="")
        if len(cells) > 1 and len(longest) > len(text) / 2:
            found = _read_part(Path(folder) / (src.path.stem + ".cell.log"), longest, inner, other_format=True)
            if found is not None:
                inner, inner_path = found
                source = "read from its longest cell output"
        # the outputs' HTML tables read on their own (a Trainer's progress table printed after
        # thousands of lines of sampled completions, further than detection looks past a
        # preamble): they take over when they hold more values of known metrics
        found = _read_part(Path(folder) / (src.path.stem + ".tables.md"), tables, inner) if tables.strip() else None
        if found is not None:
            inner, inner_path = found
            source = "read from the HTML tables of its cell outputs"
    notes = [f"{source} of a Jupyter notebook"] + inner.notes
    warnings = [w.replace(str(inner_path), f"{src.path} (its cell outputs)").replace(os.path.basename(inner_path), src.path.name)
                for w in inner.warnings]
    return ParsedLog(src.path, f"notebook/{inner.format}", inner.framework, src.sha256, inner.rows,
                     inner.skipped_lines, inner.step_from_index, notes=notes, warnings=warnings, arms=inner.arms)


register(LogFormat("notebook", "a Jupyter notebook: the training log printed in its cell outputs",
                   sniff_notebook, parse_notebook, top_score=1.0, appendable=False, priority=5,
                   reads_inner=True))
