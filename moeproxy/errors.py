"""Errors the user can act on. The CLI prints them as one line and exits with status 2."""


class MoeproxyError(Exception):
    """Base class: a clear, one-line message naming what is wrong (file, line, value)."""


class InputError(MoeproxyError):
    """Bad input: unreadable, unrecognised or malformed file, invalid option value."""


class StoreUnavailable(InputError):
    """The run database cannot be read or written now (damaged, disk full, read-only): a condition
    of the store, not of the input; nothing was changed."""


class StoreReadOnly(StoreUnavailable):
    """The store may be read but not written by this user (a catalog's read-only PostgreSQL role)."""


class StoreBusy(MoeproxyError):
    """The run database is locked by another process (a second writer)."""


class WriteConflict(StoreBusy):
    """A DuckLake catalog's commit lost to another writer's (optimistic concurrency): nothing of
    the write was stored; running it again is safe (``Store.retrying``)."""


class NotFound(MoeproxyError):
    """A run, metric or path that does not exist."""
