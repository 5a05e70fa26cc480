"""Which server-side paths the dashboard may read: ingest paths and checkpoints stay inside allowed roots.

The dashboard runs on the machine that holds the logs and checkpoints; a browser user must not be
able to make it read arbitrary files (``/etc``, other users' homes). Roots come from
``$MOEPROXY_ALLOWED_ROOTS`` (``os.pathsep``-separated), else the directory the dashboard was
started in plus the bundled ``data/`` folder. Paths are resolved (symlinks and ``..`` followed)
before the check, so a link cannot lead out of a root.
"""

from __future__ import annotations

import os
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


def resolve_inside_roots(path: str | Path, what: str = "path", roots: list[Path] | None = None) -> Path:
    """``path`` resolved, if it exists and lies inside an allowed root; else ``InputError`` naming both."""
    roots = allowed_roots() if roots is None else [Path(r).resolve() for r in roots]
    text = str(path).strip()
    if not text:
        raise InputError(f"{what}: empty path")
    resolved = Path(text).expanduser().resolve()
    if not any(resolved == root or resolved.is_relative_to(root) for root in roots):
        listed = ", ".join(str(r) for r in roots)
        raise InputError(f"{what} {text!r} is outside the allowed roots ({listed}); set {ROOTS_ENV} to allow it")
    if not resolved.exists():
        raise InputError(f"{what} {text!r}: no such file or directory")
    return resolved
