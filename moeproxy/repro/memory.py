"""Resident memory of this process from /proc (Linux): current size, high-water mark, reset.

Writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark (``VmHWM``) to the current
resident size, so one process can measure the peak of each of several runs in turn. Elsewhere
the functions return None / False and callers report memory as unknown.
"""

from __future__ import annotations

import ctypes
from pathlib import Path


def rss_kib(field: str = "VmRSS") -> int | None:
    """``VmRSS`` (now) or ``VmHWM`` (peak since start or the last reset), in KiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the high-water mark to the current size, after handing freed heap memory back to the
    system (glibc ``malloc_trim``), so that a later run cannot reuse an earlier run's freed pages
    unseen and look smaller than it is."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False
