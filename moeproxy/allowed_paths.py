"""Which server-side paths the dashboard may read: ingest paths and checkpoints stay inside allowed roots.

The dashboard runs on the machine that holds the logs and checkpoints; a browser user must not be
able to make it read arbitrary files (``/etc``, other users' homes). Roots come from
``$MOEPROXY_ALLOWED_ROOTS`` (``os.pathsep``-separated), else the directory the dashboard was
started in plus the bundled ``data/`` folder. Paths are resolved (symlinks and ``..`` followed)
before the check, so a link cannot lead out of a root; for a directory every file that would be
read is resolved and checked too (``readable_files_inside_roots``), and so is every file of a
checkpoint a dashboard build reads (``BuildSpec.allowed_roots``). Only regular files are read: a
FIFO or device would block the reader. Paths that cannot be resolved (a symlink loop, a NUL byte,
a name too long for the file system) are an ``InputError`` like any other refused path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from moeproxy.errors import InputError

ROOTS_ENV = "MOEPROXY_ALLOWED_ROOTS"
BUNDLED_DATA = Path(__file__).resolve().parent.parent / "data"


def allowed_roots() -> list[Path]:
    """The resolved allowed roots, in order."""
    env = os.environ.get(ROOTS_ENV, "").strip()
    if env:
        roots = [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    else:
        roots = [Path.cwd(), BUNDLED_DATA]
    return [r.resolve() for r in roots]


def _shown(text: str, limit: int = 120) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _inside(resolved: Path, roots: list[Path]) -> bool:
    return any(resolved == root or resolved.is_relative_to(root) for root in roots)


def resolve_inside_roots(path: str | Path, what: str = "path", roots: list[Path] | None = None) -> Path:
    """``path`` resolved, if it exists and lies inside an allowed root; else ``InputError`` naming both."""
    roots = allowed_roots() if roots is None else [Path(r).resolve() for r in roots]
    text = str(path).strip()
    if not text:
        raise InputError(f"{what}: empty path")
    if "\0" in text:
        raise InputError(f"{what} {_shown(text)}: contains a NUL byte")
    try:
        resolved = Path(text).expanduser().resolve()
        exists = resolved.exists()
    except (OSError, RuntimeError, ValueError) as exc:  # symlink loop, name too long, ...
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InputError(f"{what} {_shown(text)}: cannot be resolved ({reason[:200]})") from None
    if not _inside(resolved, roots):
        listed = ", ".join(str(r) for r in roots)
        raise InputError(f"{what} {_shown(text)} is outside the allowed roots ({listed}); set {ROOTS_ENV} to allow it")
    if not exists:
        raise InputError(f"{what} {_shown(text)}: no such file or directory")
    return resolved


def readable_files_inside_roots(path: str | Path, what: str = "path", roots: list[Path] | None = None) -> Path:
    """``path`` resolved (as ``resolve_inside_roots``) after checking every file an ingest of it reads.

    A file is the path itself, or for a directory each file ``moeproxy.ingest.expand_paths`` walks
    to. Each is resolved (following symlinks) and must be a regular file inside a root; otherwise
    ``InputError`` names the offending files (a symlink inside an allowed directory cannot lead to
    ``/etc/shadow``; a FIFO cannot block the page).
    """
    roots = allowed_roots() if roots is None else [Path(r).resolve() for r in roots]
    resolved = resolve_inside_roots(path, what, roots)
    if resolved.is_dir():
        from moeproxy.ingest import expand_paths

        try:
            files = [f for f, _ in expand_paths([resolved])]
        except (OSError, RuntimeError) as exc:
            raise InputError(f"{what} {_shown(str(path))}: cannot list the directory ({exc})") from None
    else:
        files = [resolved]
    outside, special = [], []
    for file in files:
        try:
            real = file.resolve(strict=True)
            mode = real.stat().st_mode
        except (OSError, RuntimeError, ValueError):
            special.append(file)
            continue
        if not _inside(real, roots):
            outside.append(file)
        elif not stat.S_ISREG(mode):
            special.append(file)
    problems = []
    for files_, why in ((outside, "lead outside the allowed roots"),
                        (special, "are not regular files (FIFO, device, socket, broken link)")):
        if files_:
            named = ", ".join(_shown(str(f)) for f in files_[:5]) + (f" and {len(files_) - 5} more" if len(files_) > 5 else "")
            problems.append(f"{len(files_)} file(s) {why}: {named}")
    if problems:
        raise InputError(f"{what} {_shown(str(path))} refused: " + "; ".join(problems))
    return resolved
