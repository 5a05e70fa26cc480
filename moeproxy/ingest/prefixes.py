"""Line prefixes that wrap metric text in real logs: launcher rank tags and timestamps.

torchrun's tee prefix ``[default3]:``, ``[rank3]:`` and ``[RANK 3]`` name the rank that printed
the line; Ray's ``(TaskRunner pid=3165)`` and timestamps carry no metric and are ignored.
"""

from __future__ import annotations

import re

RANK_PREFIX = re.compile(r"^\s*(?:\[default(\d+)\]:|\[rank(\d+)\]:?|\[RANK (\d+)\]|rank(\d+):)")
TIMESTAMP = re.compile(
    r"\[?\d{4}-\d{2}-\d{2}[ T_]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}|\s(?:UTC|GMT|[A-Z]{1,3}T)\b)?\]?"
    r"|\[?\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b\]?"
)
# (a zone's name after the clock, rllab's ``2017-06-05 22:10:25.503447 EDT | ``, is the timestamp's)
# glog's line prefix (TensorFlow 1's C++ logging, ``tf.Print``): severity, perhaps date, time and
# thread, then the source file and line, ``I tensorflow/core/kernels/logging_ops.cc:64] `` or
# ``I0604 12:34:56.789012  1234 logging_ops.cc:79] ``
GLOG_PREFIX = re.compile(r"^\s*[IWEF](?:\d{4}\s+[\d:.]+\s+\d+)?\s+[\w./\-]+\.\w+:\d+\]\s*")
# what every timestamp holds: a line without it is not searched for one (5x cheaper a line)
CLOCK = re.compile(r"\d:\d\d:\d")


CLOCK_LEAD = 13  # a timestamp starts at most this many characters before its clock (``[2025-06-12 1|3:31:1``)


def without_timestamps(line: str) -> str:
    """``line`` with each timestamp replaced by a space. Every timestamp holds a clock: each is
    searched for from just before the next clock, and the search ends with the last clock (a line
    was scanned to its end, at each character, for timestamps it could not hold)."""
    clock = CLOCK.search(line)
    if clock is None:
        return line
    out: list[str] = []
    done = 0
    while clock is not None:
        m = TIMESTAMP.search(line, max(done, clock.start() - CLOCK_LEAD))
        if m is None:
            break
        out += (line[done:m.start()], " ")
        done = m.end()
        clock = CLOCK.search(line, done)
    out.append(line[done:])
    return "".join(out)


def rank_of(line: str) -> int:
    m = RANK_PREFIX.match(line)
    if not m:
        return -1
    return int(next(g for g in m.groups() if g is not None))
