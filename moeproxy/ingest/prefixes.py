"""Line prefixes that wrap metric text in real logs: launcher rank tags and timestamps.

torchrun's tee prefix ``[default3]:``, ``[rank3]:`` and ``[RANK 3]`` name the rank that printed
the line; Ray's ``(TaskRunner pid=3165)`` and timestamps carry no metric and are ignored.
"""

from __future__ import annotations

import re

RANK_PREFIX = re.compile(r"^\s*(?:\[default(\d+)\]:|\[rank(\d+)\]:?|\[RANK (\d+)\]|rank(\d+):)")
TIMESTAMP = re.compile(
    r"\[?\d{4}-\d{2}-\d{2}[ T_]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?"
    r"|\[?\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b\]?"
)


def rank_of(line: str) -> int:
    m = RANK_PREFIX.match(line)
    if not m:
        return -1
    return int(next(g for g in m.groups() if g is not None))
