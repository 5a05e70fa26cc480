"""Writer for verl's file-logger JSONL: one ``{"step": N, "data": {...}}`` line per step.

Like verl's ``FileLogger`` (orjson), non-finite floats are written as ``null``; the file is opened
fresh (truncated) per run, as verl does. The stream is flushed after every step so a crashed run
keeps its history.
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def _jsonable(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    value = float(value)
    return value if math.isfinite(value) else None


class VerlFileLogger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w", encoding="utf-8")

    def log(self, data: dict, step: int) -> None:
        record = {"step": int(step), "data": {k: _jsonable(v) for k, v in data.items()}}
        self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_verl_jsonl(path: str | Path) -> list[dict]:
    """The records of a file written by ``VerlFileLogger`` (``null`` read back as NaN)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            data = {k: (float("nan") if v is None else v) for k, v in record["data"].items()}
            rows.append({"step": record["step"], "data": data})
    return rows
