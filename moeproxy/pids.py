"""Whether a process id names a live process (jobs' runners, builds' partial folders)."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """True for a running process (also one we may not signal); False for none, a gone one, or a
    zombie (exited, not yet reaped by another parent)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
