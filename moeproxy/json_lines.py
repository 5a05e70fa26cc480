"""JSON Lines inputs the user hands us (calibration data, evaluation tasks): one JSON value per
line, blank lines skipped, read lazily; a malformed line is an ``InputError`` naming file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from moeproxy.errors import InputError


def read_json_lines(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for every non-blank line of ``path``."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
