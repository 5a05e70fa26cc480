"""Where moeproxy writes a file the user named, and how: checked up front, then written atomically.

``check_target(path, what)`` runs before any work and refuses, with one ``InputError`` line naming
the path, a target that is a directory, a device (``/dev/full``, ``/dev/zero``, or a symlink to one),
a FIFO or a socket (only ``stat`` is used: nothing is opened, so a FIFO never blocks), a path under
a file, a folder that cannot be written, or a name too long for the file system. It returns the
path to write: a symlink to a regular file is followed, so the file it names is replaced.

``atomic_path(path, what)`` is the write's lifecycle: the target is checked, missing parent folders
are created, a temporary file is created beside the target (same suffix, so writers that go by it
still work) and its path handed to the caller, who writes it (directly or through a library such as
DuckDB); then the file is fsynced and ``os.replace``d onto the target, and the folder fsynced. On any
error (a full disk, a killed write, an exception of the caller) the temporary file and the folders
this write created are removed and the target is untouched; an ``OSError`` becomes one
``InputError`` line (``No space left on device: report.html``). ``write_text`` / ``write_bytes`` are
the common case.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from moeproxy.errors import InputError
from moeproxy.terminal import shown

_NAME_MAX = 255  # when the file system does not say (pathconf)


def _display(path, limit: int = 200) -> str:
    """The path as printed: control and bidi characters escaped, cut to ``limit`` characters."""
    text = shown(path)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _refuse(what: str, path, why: str) -> InputError:
    return InputError(f"{what} {_display(path)}: {why}")


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return _NAME_MAX


def _kind_refused(mode: int) -> str | None:
    """Why a file of this mode cannot be an output (None: a regular file, which is replaced)."""
    if stat.S_ISDIR(mode):
        return "is a directory; name a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    return None


def check_target(path: str | os.PathLike, what: str = "output") -> Path:
    """The file to write for ``path`` (a symlink to a regular file resolved), or ``InputError``."""
    text = os.fspath(path)
    if not text:
        raise InputError(f"{what}: an empty path")
    if "\0" in str(text):
        raise _refuse(what, text, "contains a NUL byte")
    target = Path(text)
    try:
        if target.is_symlink():
            target = Path(os.path.realpath(target))
        try:
            mode = os.stat(target).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None:
            why = _kind_refused(mode)
            if why:
                raise _refuse(what, path, why)
        # the nearest folder that exists: a file there means the target is "under a file"
        ancestor = target.absolute().parent
        while True:
            try:
                ancestor_mode = os.stat(ancestor).st_mode
                break
            except FileNotFoundError:
                ancestor = ancestor.parent
        if not stat.S_ISDIR(ancestor_mode):
            raise _refuse(what, path, f"is under {_display(ancestor, 80)}: a folder on its path is a file")
        limit = _name_max(ancestor)
        long = next((part for part in target.parts if len(os.fsencode(part)) > limit), None)
        if long is not None:
            raise _refuse(what, path, f"a name is longer than {limit} bytes ({_display(long, 40)})")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            read_only = bool(os.statvfs(ancestor).f_flag & os.ST_RDONLY)
            why = os.strerror(errno.EROFS if read_only else errno.EACCES)
            raise _refuse(what, path, f"cannot be written ({why}): the folder {_display(ancestor, 80)} is not writable")
    except OSError as exc:  # ENOTDIR, ENAMETOOLONG, EACCES, ELOOP ...
        raise _refuse(what, path, _reason(exc)) from None
    except ValueError as exc:
        raise _refuse(what, path, str(exc)) from None
    return target


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOTDIR:
        return "is under a file: a folder on its path is a file"
    return exc.strerror or str(exc)


def _temp_name(target: Path) -> str:
    """``.NAME.PID-TOKEN.partial.SUFFIX`` beside the target, within the file system's name limit."""
    suffix = target.suffix if len(target.suffix) <= 16 else ""
    token = f".{os.getpid()}-{secrets.token_hex(4)}.partial{suffix}"
    room = max(1, _name_max(target.parent) - len(os.fsencode(token)) - 1)
    stem = os.fsencode(target.name)[:room].decode("utf-8", "ignore") or "out"
    return f".{stem}{token}"


def make_parents(folder: Path, created: list[Path]) -> None:
    """Create ``folder`` and its missing parents, recording each in ``created`` (deepest first)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for item in reversed(missing):
        item.mkdir()
        created.insert(0, item)


def remove_created_folders(folders: list[Path]) -> None:
    """Remove the folders ``make_parents`` created (deepest first), each only while it is empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


def _remove_quietly(path: Path | None, folders: list[Path]) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
    remove_created_folders(folders)


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, (os.O_RDONLY if directory else os.O_RDWR) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if not directory or exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike, what: str = "output") -> Iterator[Path]:
    """Yield a temporary path beside the checked target; on success it replaces the target."""
    target = check_target(path, what)
    created: list[Path] = []
    temp = None
    try:
        make_parents(target.parent, created)
        name = target.parent / _temp_name(target)
        old_mode = stat.S_IMODE(os.stat(target).st_mode) if target.exists() else None
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666))
        temp = name  # ours from here on: removed on any error
        yield temp
        if old_mode is not None:  # a replaced file keeps its permissions (after the write: a writer may
            os.chmod(temp, old_mode)  # have replaced the temporary file with its own)
        _fsync(temp)
        os.replace(temp, target)
        temp, created = None, []
        _fsync(target.parent, directory=True)
    except OSError as exc:  # named by the user's path: the temporary name means nothing to them
        _remove_quietly(temp, created)
        raise _refuse(what, path, _reason(exc)) from None
    except BaseException:
        _remove_quietly(temp, created)
        raise


def write_bytes(path: str | os.PathLike, data: bytes, what: str = "output") -> Path:
    """Write ``data`` to ``path`` atomically (see ``atomic_path``); returns the path written."""
    with atomic_path(path, what) as temp:
        with open(temp, "wb") as fh:
            fh.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, what: str = "output", encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see ``atomic_path``); returns the path written."""
    return write_bytes(path, text.encode(encoding), what)
